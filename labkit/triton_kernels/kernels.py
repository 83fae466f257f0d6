"""The Triton kernels of notebook 12, each the counterpart of a CUDA C kernel of notebook 07.

Why a module of its own: ``@triton.jit`` decides when it runs whether the
kernel will be compiled for a GPU or run by Triton's interpreter (on NumPy,
on the CPU), reading ``TRITON_INTERPRET`` at that moment. So this module is
imported only through :func:`labkit.triton_kernels.setup.load_kernels`,
which sets the variable first. Each kernel is a *program*: one instance runs
per point of the launch grid and handles a whole block of elements; the
``BLOCK`` sizes are compile-time constants (``tl.constexpr``), as
``blockDim`` and ``TILE_SIZE`` are in the CUDA C versions.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """y[i] = x[i]: program ``pid`` copies elements [pid * BLOCK, (pid + 1) * BLOCK)."""
    pid = tl.program_id(axis=0)  # CUDA C: blockIdx.x
    offsets = pid * BLOCK + tl.arange(0, BLOCK)  # CUDA C: blockIdx.x * blockDim.x + threadIdx.x
    mask = offsets < n  # CUDA C: if (i < n)
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, x, mask=mask)


@triton.jit
def strided_copy_kernel(in_ptr, out_ptr, m, stride, BLOCK: tl.constexpr):
    """out[q * m + r] = in[r * stride + q]: notebook 07's strided_copy.cu, grid (cdiv(m, BLOCK), stride).

    Writes are contiguous for every stride; neighbouring elements of a block
    read ``stride`` floats apart, as neighbouring threads do in the CUDA C kernel.
    """
    r = tl.program_id(axis=0) * BLOCK + tl.arange(0, BLOCK)  # CUDA C: blockIdx.x ... + threadIdx.x
    q = tl.program_id(axis=1)  # CUDA C: blockIdx.y
    mask = r < m
    v = tl.load(in_ptr + r * stride + q, mask=mask)
    tl.store(out_ptr + q * m + r, v, mask=mask)


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, row_stride, BLOCK: tl.constexpr):
    """One program per row: load the row once, max, exp, sum and divide in registers, store once.

    ``BLOCK`` is the row length rounded up to a power of two; the padding
    lanes load ``-inf``, so they add exp(-inf) = 0 to the sum.
    """
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * row_stride + cols, mask=mask, other=-float("inf"))
    z = x - tl.max(x, axis=0)  # subtract the row's max: exp cannot overflow
    e = tl.exp(z)
    y = e / tl.sum(e, axis=0)
    tl.store(y_ptr + row * row_stride + cols, y, mask=mask)


@triton.jit
def matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    """C = A @ B, one BLOCK_M x BLOCK_N tile of C per program, in float32.

    The loop walks K in steps of BLOCK_K: each step loads a BLOCK_M x BLOCK_K
    tile of A and a BLOCK_K x BLOCK_N tile of B and multiplies them with
    ``tl.dot``, as sgemm_shared / sgemm_tiled stage tiles in shared memory;
    here the compiler chooses where the tiles live. ``GROUP_M`` orders the
    programs so that GROUP_M rows of tiles run together and reuse the same
    columns of B while they are in the L2 cache (Triton's matmul tutorial).
    """
    pid = tl.program_id(axis=0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * num_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = min(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + rk
        a = tl.load(
            a_ptr + rm[:, None] * stride_am + ks[None, :] * stride_ak,
            mask=(rm[:, None] < M) & (ks[None, :] < K),
            other=0.0,
        )
        b = tl.load(
            b_ptr + ks[:, None] * stride_bk + rn[None, :] * stride_bn,
            mask=(ks[:, None] < K) & (rn[None, :] < N),
            other=0.0,
        )
        # "ieee": full float32 products, as torch's float32 matmul and sgemm.cu (no TF32).
        acc += tl.dot(a, b, input_precision="ieee")
    c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))
