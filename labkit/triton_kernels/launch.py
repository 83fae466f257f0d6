"""Host-side launchers: check the arguments, allocate the output, choose the grid, launch.

Why separate from the kernels: this is the part the CUDA C launchers of
notebook 07 (:mod:`labkit.kernels.cupy_run`) do in Python too. A Triton
launch is ``kernel[grid](*args, BLOCK=...)``: ``grid`` says how many
programs run (CUDA's ``gridDim``); there is no ``blockDim``, because a
program is not a thread: it is one instance of the kernel that handles a
whole block of elements, and the compiler decides how the GPU's threads
share it (``num_warps`` sets how many warps it gets).

Outputs start filled with NaN, not zeros: an element the kernel failed to
write then shows up in any comparison instead of passing as a plausible 0.
Offsets are 32-bit inside the kernels (``pid * BLOCK`` of int32 arguments),
so tensors stop below 2³¹ elements.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from labkit.core.validate import check_positive_int
from labkit.triton_kernels.setup import TritonSetup, load_kernels, triton_setup


def _check_block(name: str, block: int, *, low: int = 1, high: int = 1 << 16) -> int:
    check_positive_int(name, block)
    if block & (block - 1) or not low <= block <= high:
        raise ValueError(
            f"{name} must be a power of two from {low} to {high} (tl.arange needs a power-of-"
            f"two length); got {block}"
        )
    return block


#: The most elements a tensor may have: the kernels index with 32-bit integers.
MAX_ELEMENTS = 2**31 - 1

#: The compiled kernel each launcher ran last for each specialization ("softmax, block 16384,
#: 16 warps"): GPU only, with n_regs, n_spills and asm["ptx"].
LAST_COMPILED: dict[str, Any] = {}


def _remember(name: str, handle: Any) -> None:
    if hasattr(handle, "n_regs"):  # a CompiledKernel; the interpreter returns None
        LAST_COMPILED[name] = handle


def _check_tensor(name: str, x: Any, ndim: int, device: str) -> None:
    import torch

    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(x).__name__}")
    if x.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s); got shape {tuple(x.shape)}")
    if x.device.type != device:
        raise ValueError(
            f"{name} is on {x.device.type}, but these kernels run on {device} "
            f"({'the interpreter takes CPU tensors' if device == 'cpu' else 'compiled for the GPU'})"
        )
    if x.dtype != torch.float32:
        raise ValueError(f"{name} must be float32 (the kernels' dtype); got {x.dtype}")
    if not x.is_contiguous():
        raise ValueError(f"{name} must be contiguous; call .contiguous() first")
    if x.numel() > MAX_ELEMENTS:
        raise ValueError(
            f"{name} has {x.numel():,} elements; these kernels index with 32-bit integers, so at "
            f"most {MAX_ELEMENTS:,}"
        )


def _output(out: Any, x: Any, shape: tuple[int, ...] | None = None) -> Any:
    """``out`` if given (timing loops reuse one), else a new tensor filled with NaN."""
    import torch

    shape = shape or tuple(x.shape)
    if out is None:
        return torch.full(shape, float("nan"), dtype=x.dtype, device=x.device)
    if tuple(out.shape) != shape or out.device != x.device or out.dtype != x.dtype:
        raise ValueError(
            f"out must be a {x.dtype} tensor of shape {shape} on {x.device}; got "
            f"{out.dtype} {tuple(out.shape)} on {out.device}"
        )
    if not out.is_contiguous():
        raise ValueError("out must be contiguous: the kernels write it with contiguous offsets")
    start, end = out.data_ptr(), out.data_ptr() + out.numel() * out.element_size()
    x_start = x.data_ptr()
    if start < x_start + x.numel() * x.element_size() and x_start < end:
        raise ValueError("out must not overlap the input: a program would read what another wrote")
    return out


def copy(
    kernels: ModuleType, x: Any, *, block: int = 1024, device: str = "cpu", out: Any = None
) -> Any:
    """y = x, by :func:`~labkit.triton_kernels.kernels.copy_kernel`: cdiv(n, block) programs."""
    import triton

    _check_tensor("x", x, 1, device)
    _check_block("block", block)
    y = _output(out, x)
    n = x.numel()
    handle = kernels.copy_kernel[(triton.cdiv(n, block),)](x, y, n, BLOCK=block)
    _remember(f"copy, block {block}", handle)
    return y


def strided_copy(
    kernels: ModuleType,
    x: Any,
    stride: int,
    *,
    block: int = 1024,
    device: str = "cpu",
    out: Any = None,
) -> Any:
    """out[q * m + r] = x[r * stride + q] (notebook 07's strided_copy.cu): grid (cdiv(m, block), stride)."""
    import triton

    _check_tensor("x", x, 1, device)
    _check_block("block", block)
    check_positive_int("stride", stride)
    n = x.numel()
    if n % stride:
        raise ValueError(f"the length of x ({n}) must be a multiple of stride ({stride})")
    if stride > 65535:
        raise ValueError(f"stride must be at most 65,535 (the grid's y limit); got {stride}")
    m = n // stride
    y = _output(out, x)
    grid = (triton.cdiv(m, block), stride)
    handle = kernels.strided_copy_kernel[grid](x, y, m, stride, BLOCK=block)
    _remember(f"strided_copy, stride {stride}, block {block}", handle)
    return y


#: The longest row softmax takes: one program holds a whole row in registers.
MAX_SOFTMAX_COLS = 1 << 16


def softmax_warps(block: int) -> int:
    """Warps per program for a row padded to ``block`` lanes: 4, 8 for a block of 2,048 and 16
    from 4,096, as earlier versions of Triton's fused-softmax tutorial chose them (more threads
    per row as the row grows; the current tutorial fixes 8 and sizes a persistent grid)."""
    return 16 if block >= 4096 else 8 if block >= 2048 else 4


def softmax(kernels: ModuleType, x: Any, *, device: str = "cpu", out: Any = None) -> Any:
    """Row-wise softmax of a 2-D tensor, one program per row (:func:`kernels.softmax_kernel`)."""
    import triton

    _check_tensor("x", x, 2, device)
    rows, cols = x.shape
    if not 1 <= cols <= MAX_SOFTMAX_COLS:
        raise ValueError(
            f"x must have 1 to {MAX_SOFTMAX_COLS:,} columns (one program holds a row); got {cols}"
        )
    y = _output(out, x)
    block = triton.next_power_of_2(cols)
    warps = softmax_warps(block)
    handle = kernels.softmax_kernel[(rows,)](x, y, cols, x.stride(0), BLOCK=block, num_warps=warps)
    _remember(f"softmax, block {block}, {warps} warps", handle)
    return y


def matmul(
    kernels: ModuleType,
    a: Any,
    b: Any,
    *,
    block_m: int = 32,
    block_n: int = 32,
    block_k: int = 32,
    group_m: int = 4,
    num_warps: int | None = None,
    num_stages: int | None = None,
    device: str = "cpu",
    out: Any = None,
) -> Any:
    """C = A @ B in float32, one block_m x block_n tile of C per program.

    ``num_warps`` (warps per program) and ``num_stages`` (software-pipelining
    depth of the K loop) are compiler options; the interpreter ignores them.
    """
    import triton

    _check_tensor("a", a, 2, device)
    _check_tensor("b", b, 2, device)
    if a.shape[1] != b.shape[0]:
        raise ValueError(
            f"a's columns must equal b's rows for a @ b; got a {tuple(a.shape)}, b {tuple(b.shape)}"
        )
    # tl.dot needs each tile dimension >= 16
    for name, value in (("block_m", block_m), ("block_n", block_n), ("block_k", block_k)):
        _check_block(name, value, low=16, high=256)
    check_positive_int("group_m", group_m)
    (M, K), N = a.shape, b.shape[1]
    c = _output(out, a, (M, N))
    grid = (triton.cdiv(M, block_m) * triton.cdiv(N, block_n),)
    options = {k: v for k, v in (("num_warps", num_warps), ("num_stages", num_stages)) if v}
    handle = kernels.matmul_kernel[grid](
        a, b, c, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m, **options,
    )  # fmt: skip
    _remember(f"matmul, tiles {block_m} x {block_n} x {block_k}", handle)
    return c


@dataclass(frozen=True)
class Kernels:
    """The four kernels, ready to launch where ``setup`` chose (interpreter or GPU)."""

    setup: TritonSetup
    module: ModuleType

    @property
    def device(self) -> str:
        return self.setup.device

    def copy(self, x: Any, *, block: int = 1024, out: Any = None) -> Any:
        return copy(self.module, x, block=block, device=self.device, out=out)

    def strided_copy(self, x: Any, stride: int, *, block: int = 1024, out: Any = None) -> Any:
        return strided_copy(self.module, x, stride, block=block, device=self.device, out=out)

    def softmax(self, x: Any, *, out: Any = None) -> Any:
        return softmax(self.module, x, device=self.device, out=out)

    def matmul(self, a: Any, b: Any, *, out: Any = None, **options: int) -> Any:
        return matmul(self.module, a, b, device=self.device, out=out, **options)


def load(*, prefer_gpu: bool = True) -> Kernels:
    """Decide interpreter or GPU (:func:`~labkit.triton_kernels.setup.triton_setup`), then load.

    Raises :class:`~labkit.core.optional.MissingPackageError` where Triton is missing.
    """
    setup = triton_setup(prefer_gpu=prefer_gpu)
    return Kernels(setup, load_kernels(setup))


def try_load(*, prefer_gpu: bool = True) -> Kernels | None:
    """:func:`load` for a notebook cell: None, after one line with the install command, where
    Triton is missing (macOS and Windows have no Triton wheels), so the notebook runs on."""
    from labkit.core.optional import MissingPackageError

    try:
        return load(prefer_gpu=prefer_gpu)
    except MissingPackageError as exc:
        print(f"Skipped: {exc}")
        return None
