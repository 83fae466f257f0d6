"""The child process of the CUDA simulator: the course's kernels as numba functions, run with ``NUMBA_ENABLE_CUDASIM=1``.

Each port mirrors its CUDA C namesake in ``labkit/kernels/*.cu`` line for line, but for
``reduce_warp_shuffle``'s loads: the port reads one float per grid-stride iteration where
``reduce.cu`` unrolls a float4 loop with a remainder and a scalar tail (the simulator has no warp
shuffles, so the port does not run yet; porting those loops is left to when it can). This module is
run as ``python -m`` by :func:`labkit.kernels.simulator.simulate`; the calling process
never imports it (nor numba).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import numpy as np

from labkit.kernels.sim_results import SGEMM_TILED, numba_cuda_version
from labkit.kernels.simulator import ITEMS_PER_THREAD

_NO_SHUFFLE = (
    "not simulated: numba-cuda {version}'s simulator has no cuda.shfl_down_sync "
    "(it implements no warp shuffle), so this kernel needs a real GPU"
)


# Set only inside the worker process (see _bind): the kernels below name the
# module-global ``cuda``, which is what numba's simulator swaps for its fake
# CUDA module while a kernel runs. The calling process never imports numba.
cuda: Any = None


float32: Any = None


def _kernels(tile: int) -> dict[str, Any]:  # noqa: C901 (a table of nested kernel ports, each simple)
    """The kernels as plain Python functions for one tile side (a compile-time constant).

    Each mirrors its CUDA C namesake in labkit/kernels/*.cu line for line
    (same arguments, same indexing, same barriers; ``reduce_warp_shuffle``'s loads
    excepted, see the module docstring), written for numba: the
    names ``cuda`` and ``float32`` are module globals bound in the worker.
    The macros take simulator-sized values: TILE_DIM = TILE_SIZE = ``tile``,
    BLOCK_ROWS = tile / 4, BLOCK_SIZE = tile², and for sgemm_tiled the
    :data:`SGEMM_TILED` tiles; float4 loads become four float loads.
    """
    tile_dim, block_rows = tile, max(1, tile // 4)  # transpose.cu: TILE_DIM, BLOCK_ROWS
    block_size = tile * tile  # reduce.cu: BLOCK_SIZE
    items = ITEMS_PER_THREAD
    bm, bn, bk, tm, tn = (SGEMM_TILED[k] for k in ("BM", "BN", "BK", "TM", "TN"))
    sgemm_threads = (bm // tm) * (bn // tn)

    def strided_copy(inp: Any, out: Any, n: int, stride: int) -> None:
        m = n // stride  # rows of the m x stride view
        q = cuda.blockIdx.y  # which column of the view
        first = cuda.blockIdx.x * cuda.blockDim.x * items + cuda.threadIdx.x
        v = cuda.local.array(items, float32)
        for k in range(items):
            r = first + k * cuda.blockDim.x
            if r < m:
                v[k] = inp[r * stride + q]  # stride floats apart across the warp
        for k in range(items):
            r = first + k * cuda.blockDim.x
            if r < m:
                out[q * m + r] = v[k]  # contiguous across the warp

    def transpose_naive(inp: Any, out: Any, rows: int, cols: int) -> None:
        x = cuda.blockIdx.x * tile_dim + cuda.threadIdx.x
        y = cuda.blockIdx.y * tile_dim + cuda.threadIdx.y
        if x >= cols:
            return
        for j in range(0, tile_dim, block_rows):
            if y + j < rows:
                out[x * rows + (y + j)] = inp[(y + j) * cols + x]  # strided write

    def transpose_tiled(inp: Any, out: Any, rows: int, cols: int) -> None:
        tile_ = cuda.shared.array((tile_dim, tile_dim), float32)
        x = cuda.blockIdx.x * tile_dim + cuda.threadIdx.x
        y = cuda.blockIdx.y * tile_dim + cuda.threadIdx.y
        for j in range(0, tile_dim, block_rows):
            if x < cols and y + j < rows:
                tile_[cuda.threadIdx.y + j, cuda.threadIdx.x] = inp[(y + j) * cols + x]
        cuda.syncthreads()  # the whole tile is written before any thread reads it
        x = cuda.blockIdx.y * tile_dim + cuda.threadIdx.x
        y = cuda.blockIdx.x * tile_dim + cuda.threadIdx.y
        for j in range(0, tile_dim, block_rows):
            if x < rows and y + j < cols:
                out[(y + j) * rows + x] = tile_[cuda.threadIdx.x, cuda.threadIdx.y + j]

    def transpose_padded(inp: Any, out: Any, rows: int, cols: int) -> None:
        padded = cuda.shared.array((tile_dim, tile_dim + 1), float32)  # no bank conflicts on a GPU
        x = cuda.blockIdx.x * tile_dim + cuda.threadIdx.x
        y = cuda.blockIdx.y * tile_dim + cuda.threadIdx.y
        for j in range(0, tile_dim, block_rows):
            if x < cols and y + j < rows:
                padded[cuda.threadIdx.y + j, cuda.threadIdx.x] = inp[(y + j) * cols + x]
        cuda.syncthreads()
        x = cuda.blockIdx.y * tile_dim + cuda.threadIdx.x
        y = cuda.blockIdx.x * tile_dim + cuda.threadIdx.y
        for j in range(0, tile_dim, block_rows):
            if x < rows and y + j < cols:
                out[(y + j) * rows + x] = padded[cuda.threadIdx.x, cuda.threadIdx.y + j]

    def transpose_tiled_nosync(inp: Any, out: Any, rows: int, cols: int) -> None:
        racy = cuda.shared.array((tile_dim, tile_dim), float32)
        x = cuda.blockIdx.x * tile_dim + cuda.threadIdx.x
        y = cuda.blockIdx.y * tile_dim + cuda.threadIdx.y
        for j in range(0, tile_dim, block_rows):
            if x < cols and y + j < rows:
                racy[cuda.threadIdx.y + j, cuda.threadIdx.x] = inp[(y + j) * cols + x]
        # BUG (deliberate): the cuda.syncthreads() that belongs here is missing.
        x = cuda.blockIdx.y * tile_dim + cuda.threadIdx.x
        y = cuda.blockIdx.x * tile_dim + cuda.threadIdx.y
        for j in range(0, tile_dim, block_rows):
            if x < rows and y + j < cols:
                out[(y + j) * rows + x] = racy[cuda.threadIdx.x, cuda.threadIdx.y + j]

    def transpose_tiled_nosync_together(inp: Any, out: Any, rows: int, cols: int) -> None:
        # The same bug. The barrier at the start changes nothing for a correct
        # kernel; in the simulator it makes the block's threads start together
        # (as on a GPU) instead of one after another.
        together = cuda.shared.array((tile_dim, tile_dim), float32)
        cuda.syncthreads()
        x = cuda.blockIdx.x * tile_dim + cuda.threadIdx.x
        y = cuda.blockIdx.y * tile_dim + cuda.threadIdx.y
        for j in range(0, tile_dim, block_rows):
            if x < cols and y + j < rows:
                together[cuda.threadIdx.y + j, cuda.threadIdx.x] = inp[(y + j) * cols + x]
        # BUG (deliberate): no cuda.syncthreads() here
        x = cuda.blockIdx.y * tile_dim + cuda.threadIdx.x
        y = cuda.blockIdx.x * tile_dim + cuda.threadIdx.y
        for j in range(0, tile_dim, block_rows):
            if x < rows and y + j < cols:
                out[(y + j) * rows + x] = together[cuda.threadIdx.x, cuda.threadIdx.y + j]

    def sgemm_naive(a: Any, b: Any, c: Any, m: int, n: int, k: int) -> None:
        col = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        row = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
        if row < m and col < n:
            acc = float32(0.0)
            for i in range(k):
                acc += a[row * k + i] * b[i * n + col]
            c[row * n + col] = acc

    def sgemm_shared(a: Any, b: Any, c: Any, m: int, n: int, k: int) -> None:
        a_s = cuda.shared.array((tile, tile), float32)
        b_s = cuda.shared.array((tile, tile), float32)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        row = cuda.blockIdx.y * tile + ty
        col = cuda.blockIdx.x * tile + tx
        acc = float32(0.0)
        for t in range(0, k, tile):
            a_s[ty, tx] = a[row * k + t + tx] if row < m and t + tx < k else float32(0.0)
            b_s[ty, tx] = b[(t + ty) * n + col] if t + ty < k and col < n else float32(0.0)
            cuda.syncthreads()  # the tiles are complete
            for i in range(tile):
                acc += a_s[ty, i] * b_s[i, tx]
            cuda.syncthreads()  # nobody still reads the tiles we overwrite next
        if row < m and col < n:
            c[row * n + col] = acc

    def sgemm_tiled(a: Any, b: Any, c: Any, m: int, n: int, k: int) -> None:
        # sgemm.cu's sgemm_tiled with the SGEMM_TILED macros: the same warp layout (a 4 x 8
        # patch of micro-tiles per warp), the same groups of 4 rows/columns BM / (TM / 4) and
        # BN / (TN / 4) apart, the same transposed As. A float4 becomes 4 scalar accesses.
        a_s = cuda.shared.array(bk * bm, float32)  # As[k * BM + m]
        b_s = cuda.shared.array(bk * bn, float32)  # Bs[k * BN + n]
        lane = cuda.threadIdx.x % 32
        warp = cuda.threadIdx.x // 32
        warps_across = (bn // tn) // 8
        thread_row = (warp // warps_across) * 4 + lane // 8
        thread_col = (warp % warps_across) * 8 + lane % 8
        row_group_stride = bm // (tm // 4)
        col_group_stride = bn // (tn // 4)
        a0 = cuda.blockIdx.y * bm * k  # the .cu moves the pointers A, B, C; here: offsets
        b0 = cuda.blockIdx.x * bn
        c0 = cuda.blockIdx.y * bm * n + cuda.blockIdx.x * bn
        inner_row_a = cuda.threadIdx.x // (bk // 4)
        inner_col_a = cuda.threadIdx.x % (bk // 4)
        row_stride_a = (4 * sgemm_threads) // bk
        inner_row_b = cuda.threadIdx.x // (bn // 4)
        inner_col_b = cuda.threadIdx.x % (bn // 4)
        row_stride_b = (4 * sgemm_threads) // bn
        acc = cuda.local.array(tm * tn, float32)
        for i in range(tm * tn):
            acc[i] = float32(0.0)
        reg_m = cuda.local.array(tm, float32)
        reg_n = cuda.local.array(tn, float32)
        for _bk in range(0, k, bk):
            for off in range(0, bm, row_stride_a):  # a float4 of A, stored transposed
                src = a0 + (inner_row_a + off) * k + inner_col_a * 4
                for e in range(4):
                    a_s[(inner_col_a * 4 + e) * bm + inner_row_a + off] = a[src + e]
            for off in range(0, bk, row_stride_b):  # a float4 of B, stored as is
                src = b0 + (inner_row_b + off) * n + inner_col_b * 4
                for e in range(4):
                    b_s[(inner_row_b + off) * bn + inner_col_b * 4 + e] = b[src + e]
            cuda.syncthreads()  # both tiles complete
            a0 += bk
            b0 += bk * n
            for d in range(bk):  # outer product of a column of As and a row of Bs
                for g in range(tm // 4):
                    for e in range(4):
                        reg_m[4 * g + e] = a_s[d * bm + g * row_group_stride + thread_row * 4 + e]
                for g in range(tn // 4):
                    for e in range(4):
                        reg_n[4 * g + e] = b_s[d * bn + g * col_group_stride + thread_col * 4 + e]
                for i in range(tm):
                    for j in range(tn):
                        acc[i * tn + j] += reg_m[i] * reg_n[j]
            cuda.syncthreads()  # nobody still reads the tiles we overwrite next
        for i in range(tm):
            row = (i // 4) * row_group_stride + thread_row * 4 + i % 4
            for g in range(tn // 4):
                for e in range(4):
                    col = g * col_group_stride + thread_col * 4 + e
                    c[c0 + row * n + col] = acc[i * tn + 4 * g + e]

    def reduce_atomic(inp: Any, out: Any, n: int) -> None:
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if i < n:
            cuda.atomic.add(out, 0, inp[i])  # n threads queue at one address

    def reduce_shared(inp: Any, out: Any, n: int) -> None:
        partial = cuda.shared.array(block_size, float32)
        tid = cuda.threadIdx.x
        i = cuda.blockIdx.x * (2 * block_size) + tid
        v = float32(0.0)
        if i < n:
            v = inp[i]
        if i + block_size < n:
            v += inp[i + block_size]  # two elements per thread, added while loading
        partial[tid] = v
        cuda.syncthreads()
        s = block_size // 2
        while s > 0:  # sequential addressing: the first s threads stay active
            if tid < s:
                partial[tid] += partial[tid + s]
            cuda.syncthreads()
            s >>= 1
        if tid == 0:
            cuda.atomic.add(out, 0, partial[0])  # one atomic per block

    def reduce_warp_shuffle(inp: Any, out: Any, n: int) -> None:
        warp_sums = cuda.shared.array(32, float32)
        tid = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        nthreads = cuda.gridDim.x * cuda.blockDim.x
        total = float32(0.0)
        for r in range(tid, n, nthreads):  # grid-stride loop (the .cu reads float4s)
            total += inp[r]
        offset = 16
        while offset > 0:  # within the warp, through registers
            total += cuda.shfl_down_sync(0xFFFFFFFF, total, offset)
            offset >>= 1
        lane = cuda.threadIdx.x % 32
        warp = cuda.threadIdx.x // 32
        if lane == 0:
            warp_sums[warp] = total
        cuda.syncthreads()
        if warp == 0:
            warps = (cuda.blockDim.x + 31) // 32
            total = warp_sums[lane] if lane < warps else float32(0.0)
            offset = 16
            while offset > 0:
                total += cuda.shfl_down_sync(0xFFFFFFFF, total, offset)
                offset >>= 1
            if lane == 0:
                cuda.atomic.add(out, 0, total)  # one atomic per block

    return {
        "strided_copy": strided_copy,
        "transpose_naive": transpose_naive,
        "transpose_tiled": transpose_tiled,
        "transpose_padded": transpose_padded,
        "transpose_tiled_nosync": transpose_tiled_nosync,
        "transpose_tiled_nosync_together": transpose_tiled_nosync_together,
        "sgemm_naive": sgemm_naive,
        "sgemm_shared": sgemm_shared,
        "sgemm_tiled": sgemm_tiled,
        "reduce_atomic": reduce_atomic,
        "reduce_shared": reduce_shared,
        "reduce_warp_shuffle": reduce_warp_shuffle,
    }


def _bind() -> Any:
    """Import numba.cuda in simulator mode and bind the names the kernels use."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        raise RuntimeError("the worker must run with NUMBA_ENABLE_CUDASIM=1")
    import numba
    from numba import cuda as numba_cuda

    if "numba.cuda.simulator" not in sys.modules:  # numba was imported before the variable was set
        raise RuntimeError("numba.cuda is not in simulator mode in the worker")
    globals()["cuda"] = numba_cuda
    globals()["float32"] = numba.float32
    return numba_cuda


def _shuffle_supported() -> bool:
    from numba.cuda.simulator import kernelapi

    return hasattr(kernelapi.FakeCUDAModule, "shfl_down_sync")


def _inputs(kernel: str, n: int, seed: int) -> tuple[np.ndarray, ...]:
    """Synthetic float32 inputs whose correct results are exact (flat, row-major)."""
    rng = np.random.default_rng(seed)
    if kernel.startswith("transpose") or kernel == "strided_copy":
        return (rng.permutation(n * n).astype(np.float32),)  # unique: a misplaced element shows
    if kernel.startswith("sgemm"):
        a = rng.integers(-3, 4, size=n * n).astype(np.float32)
        b = rng.integers(-3, 4, size=n * n).astype(np.float32)
        return a, b
    return (rng.integers(0, 10, size=n * n).astype(np.float32),)


def _launch(
    kernel: str, n: int, block: int, stride: int, inputs: tuple[np.ndarray, ...]
) -> tuple[tuple[Any, Any], tuple[Any, ...], np.ndarray, np.ndarray]:
    """(grid, block), the arguments, the output array and NumPy's answer, as each .cu launches."""
    cdiv = lambda a, b: -(-a // b)  # noqa: E731
    if kernel == "strided_copy":
        (src,) = inputs
        m = src.size // stride
        out = np.zeros_like(src)
        threads = block * block
        cfg = ((cdiv(m, threads * ITEMS_PER_THREAD), stride), (threads, 1))
        return cfg, (src, out, src.size, stride), out, src.reshape(m, stride).T.ravel()
    if kernel.startswith("transpose"):
        (src,) = inputs
        out = np.zeros_like(src)
        cfg = ((cdiv(n, block), cdiv(n, block)), (block, max(1, block // 4)))
        return cfg, (src, out, n, n), out, src.reshape(n, n).T.ravel()
    if kernel.startswith("sgemm"):
        a, b = inputs
        out = np.zeros_like(a)
        want = a.reshape(n, n).astype(np.float64) @ b.reshape(n, n).astype(np.float64)
        if kernel == "sgemm_tiled":
            t = SGEMM_TILED
            cfg = ((n // t["BN"], n // t["BM"]), ((t["BM"] // t["TM"]) * (t["BN"] // t["TN"]), 1))
        else:
            cfg = ((cdiv(n, block), cdiv(n, block)), (block, block))
        return cfg, (a, b, out, n, n, n), out, want.astype(np.float32).ravel()
    (x,) = inputs
    out = np.zeros(1, dtype=np.float32)
    want = np.array([x.astype(np.float64).sum()], dtype=np.float32)
    threads = block * block
    if kernel == "reduce_shared":
        grid = cdiv(x.size, 2 * threads)
    elif kernel == "reduce_warp_shuffle":
        grid = max(1, min(4, cdiv(x.size, threads)))  # a small fixed grid: the loop covers n
    else:
        grid = cdiv(x.size, threads)
    return (grid, threads), (x, out, x.size), out, want


def _execute(job: dict[str, Any], kernels_by_tile: dict[int, dict[str, Any]]) -> dict[str, Any]:
    kernel, n, block, stride = job["kernel"], job["n"], job["block"], job["stride"]
    if kernel == "reduce_warp_shuffle" and not _shuffle_supported():
        return {"simulated": False, "note": _NO_SHUFFLE.format(version=numba_cuda_version())}
    if block not in kernels_by_tile:
        kernels_by_tile[block] = {k: cuda.jit(f) for k, f in _kernels(block).items()}
    fn = kernels_by_tile[block][job.get("variant", kernel)]
    inputs = _inputs(kernel, n, job["seed"])
    outputs, seconds = [], 0.0
    for _ in range(job.get("repeat", 1)):  # race_demo repeats; its runs are at least 2
        cfg, args, out, expected = _launch(kernel, n, block, stride, inputs)
        start = time.perf_counter()  # the cost of one simulation, not a benchmark
        fn[cfg](*args)
        seconds += time.perf_counter() - start
        outputs.append(out.tolist())
    return {
        "simulated": True,
        "outputs": outputs,
        "expected": expected.tolist(),
        "seconds": seconds,
    }


def worker_main(argv: list[str]) -> int:
    try:
        request = json.loads(argv[0])
        _bind()
        kernels_by_tile: dict[int, dict[str, Any]] = {}
        results = [_execute(job, kernels_by_tile) for job in request["jobs"]]
    except Exception as exc:  # reported to the parent as one line of JSON
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        return 0
    print(json.dumps({"results": results}, allow_nan=True))
    return 0


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1:]))
