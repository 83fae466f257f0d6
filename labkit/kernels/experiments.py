"""Notebook 07's experiments on a GPU, each kernel verified and then timed against a measured ceiling.

The stride sweep (coalescing), the three transposes, the tiled SGEMM against cuBLAS, the
reductions and the block-size sweep; each returns a :class:`~labkit.kernels.comparison.KernelComparison`.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from labkit.core.validate import check_choice, check_int, check_sizes
from labkit.kernels.comparison import (
    Ceiling,
    KernelComparison,
    KernelRun,
    verify_close,
    verify_equal,
    verify_sum,
)
from labkit.kernels.cupy_run import (
    ATOMIC_ELEMENTS,
    BLOCK_SWEEP_KERNELS,
    INT32_MAX,
    REDUCE_VERSIONS,
    SGEMM_VERSIONS,
    TRANSPOSE_VERSIONS,
    check_block_size,
    check_early,
    check_tile,
    check_versions,
    gpu_name,
    plan_reduce,
    plan_sgemm,
    plan_strided_copy,
    plan_transpose,
    require_cupy,
    sgemm_tiled_problems,
    timing_budget,
)
from labkit.machine import memory as _memory
from labkit.timing.bench import Timing, bench

DEFAULT_STRIDES: tuple[int, ...] = (1, 2, 4, 8, 16, 32)


DEFAULT_BLOCK_SIZES: tuple[int, ...] = (32, 64, 128, 256, 512, 1024)


#: Bytes per array the experiments aim for: far past any L2 (H200: 60 MB), shrunk to fit.
DEFAULT_ARRAY_BYTES = 1024**3


def _gb_per_s(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e6) if ms > 0 else math.inf


def _free(cupy: Any) -> None:
    with contextlib.suppress(Exception):
        cupy.get_default_memory_pool().free_all_blocks()


def _elements(requested: int | None, *, arrays: int, multiple: int, what: str, quick: bool) -> int:
    """float32 elements per array: the requested count (checked to fit), or the default shrunk to fit."""
    if requested is not None:
        _memory.require_fits(4 * requested, device="cuda", arrays=arrays, what=what)
        if requested % multiple:
            raise ValueError(
                f"n_elements must be a multiple of {multiple:,} here, got {requested:,}"
            )
        return requested
    target = (16 * 1024**2 if quick else DEFAULT_ARRAY_BYTES) // 4
    fits = _memory.fit_bytes(4 * target, device="cuda", arrays=arrays) // 4
    n = min(target, fits, INT32_MAX) // multiple * multiple
    if n < multiple:
        raise _memory.MemoryBudgetError(
            f"{what}: not even {multiple:,} floats per array fit the "
            "GPU memory budget; close other GPU programs"
        )
    return n


def _random(cupy: Any, shape: Any, *, integers: bool = False, seed: int = 0) -> Any:
    """Uniform floats in [-1, 1), or (integers=True) whole numbers -4..4 stored as float32."""
    rs = cupy.random.RandomState(seed)
    if not integers:
        return rs.uniform(-1.0, 1.0, size=shape, dtype=cupy.float32)
    x = rs.uniform(-4.0, 5.0, size=shape, dtype=cupy.float32)
    cupy.floor(x, out=x)
    return x


def run_and_verify(
    launch: Callable[[], Any],
    check: Callable[[], float],
    *,
    label: str,
    reset: Any = None,
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
) -> tuple[Timing, float]:
    """Launch once, verify, and only then time: returns (the Timing, the verified error).

    ``check`` compares the output with a reference and raises
    :class:`WrongResultError` if it is wrong (see :func:`verify_equal`,
    :func:`verify_close`, :func:`verify_sum`), so a wrong kernel is never
    timed. ``reset`` (the output array) is filled with NaN first, so an
    element the kernel fails to write cannot pass with an earlier value.
    """
    budget = timing_budget(warmup_ms, rep_ms)
    if reset is not None:
        reset.fill(math.nan)
    launch()
    error = check()
    return bench(launch, device="cupy", label=label, warn=False, **budget), error


def _verified(
    launch: Callable[[], Any],
    check: Callable[[], float],
    label: str,
    budget: dict[str, Any],
    reset: Any = None,
) -> tuple[Timing, float]:
    return run_and_verify(launch, check, label=label, reset=reset, **budget)


def _copy_ceiling(cupy: Any, src: Any, dst: Any, budget: dict[str, Any]) -> Ceiling:
    cupy.copyto(dst, src)
    verify_equal("cupy.copyto", dst, src)
    timing = bench(cupy.copyto, dst, src, device="cupy", label="cupy.copyto", warn=False, **budget)
    return Ceiling(
        "device-to-device copy (cupy.copyto), bytes read + written",
        _gb_per_s(2 * src.nbytes, timing.median_ms),
        "GB/s",
        timing,
    )


def _size_text(n: int) -> str:
    return f"{n:,} float32 ({_memory.format_bytes(4 * n)} per array)"


def stride_sweep(
    strides: Sequence[int] = DEFAULT_STRIDES,
    *,
    n_elements: int | None = None,
    block_size: int = 256,
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    quick: bool = False,
) -> KernelComparison:
    """Effective bandwidth of :func:`strided_copy` at each stride, against the copy ceiling.

    All strides copy the same n floats; only the distance between the floats
    neighbouring threads read changes. The sector model predicts
    2 / (min(stride, 8) + 1) of the copy (the writes stay contiguous): 100% at
    stride 1, 22% from stride 8, where every float read costs a 32-byte sector.
    """
    values = check_sizes(strides, "strides")
    check_int("strides", values[-1], minimum=1, maximum=65535)
    block = check_int("block_size", block_size, minimum=1, maximum=1024)
    budget = timing_budget(warmup_ms, rep_ms)
    check_early(n_elements=(n_elements, INT32_MAX))
    cupy = require_cupy("the stride sweep")
    _free(cupy)  # blocks an earlier experiment left in CuPy's pool count as used
    n = _elements(
        n_elements, arrays=3, multiple=math.lcm(*values), what="the stride sweep", quick=quick
    )
    x = _random(cupy, (n,))
    out = cupy.empty_like(x)
    try:
        ceiling = _copy_ceiling(cupy, x, out, budget)
        runs = []
        for stride in values:
            launch = plan_strided_copy(cupy, x, stride, out, block, 4)
            check = functools.partial(_check_strided, out, x, stride)
            timing, error = _verified(launch, check, f"stride {stride}", budget, reset=out)
            rate = _gb_per_s(2 * x.nbytes, timing.median_ms)
            runs.append(
                KernelRun(
                    "strided_copy",
                    f"stride {stride}",
                    rate,
                    rate / ceiling.rate,
                    timing,
                    stride,
                    error,
                    dict(launch.settings),
                )
            )
        return KernelComparison(
            "Strided copy",
            gpu_name(),
            _size_text(n),
            "GB/s",
            "useful bytes read + written (2 x n x 4 B)",
            ceiling,
            tuple(runs),
            "stride",
        )
    finally:
        del x, out
        _free(cupy)


def _check_strided(out: Any, x: Any, stride: int) -> float:
    m = int(x.size) // stride  # compare 2-D views: no copy of the expected result
    view = x.reshape(m, stride).T
    return verify_equal(f"strided_copy (stride {stride})", out.reshape(stride, m), view)


def _square_side(requested: int | None, *, arrays: int, quick: bool, what: str) -> int:
    """The side of the square matrices: as requested (checked to fit), or 1 GiB each shrunk to fit."""
    if requested is not None:
        _memory.require_fits(4 * requested * requested, device="cuda", arrays=arrays, what=what)
        return requested
    target = (4 << 20) if quick else DEFAULT_ARRAY_BYTES
    side = math.isqrt(_memory.fit_bytes(target, device="cuda", arrays=arrays) // 4)
    side = side // 1024 * 1024 if side >= 1024 else side // 64 * 64
    if side < 64:
        raise _memory.MemoryBudgetError(
            f"{what}: not even a 64 x 64 matrix fits the GPU memory budget"
        )
    return side


def transpose_versions(
    n: int | None = None,
    *,
    versions: Sequence[str] = TRANSPOSE_VERSIONS,
    tile_dim: int = 32,
    block_rows: int = 8,
    padded_configs: Sequence[tuple[int, int]] = (),
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    quick: bool = False,
) -> KernelComparison:
    """The naive, tiled and padded transposes of an n x n matrix, against the copy ceiling.

    Bytes counted: the matrix read once and written once, as for the copy.
    The default n fills 1 GiB per matrix (16,384), shrunk to fit the memory
    budget. ``padded_configs`` adds runs of the padded kernel with other
    ``(tile_dim, block_rows)`` thread blocks, labelled "padded 64x16".
    """
    chosen = check_versions(versions, (*TRANSPOSE_VERSIONS, "tiled_nosync"))
    extra = [check_tile(tile, rows) for tile, rows in padded_configs]
    if not chosen and not extra:
        raise ValueError("nothing to run: versions and padded_configs are both empty")
    check_tile(tile_dim, block_rows)
    budget = timing_budget(warmup_ms, rep_ms)
    check_early(n=(n, 46340))
    cupy = require_cupy("the transpose comparison")
    _free(cupy)  # blocks an earlier experiment left in CuPy's pool count as used
    side = _square_side(n, arrays=3, quick=quick, what="the transpose comparison")
    x = _random(cupy, (side, side))
    out = cupy.empty_like(x)
    plans = [(v, tile_dim, block_rows, v) for v in chosen]
    plans += [("padded", t, r, f"padded {t}x{r}") for t, r in extra]
    try:
        ceiling = _copy_ceiling(cupy, x, out, budget)
        runs = []
        for version, tile, rows, label in plans:
            launch = plan_transpose(cupy, x, version, out, tile, rows)
            check = functools.partial(verify_equal, launch.name, out, x.T)
            timing, error = _verified(launch, check, label, budget, reset=out)
            rate = _gb_per_s(2 * x.nbytes, timing.median_ms)
            runs.append(
                KernelRun(
                    launch.name,
                    label,
                    rate,
                    rate / ceiling.rate,
                    timing,
                    None,
                    error,
                    dict(launch.settings),
                )
            )
        return KernelComparison(
            "Matrix transpose",
            gpu_name(),
            f"{side:,} x {side:,} float32 ({_memory.format_bytes(4 * side * side)}), "
            f"{tile_dim} x {block_rows} thread blocks unless labelled",
            "GB/s",
            "bytes read + written (2 x n² x 4 B)",
            ceiling,
            tuple(runs),
        )
    finally:
        del x, out
        _free(cupy)


@contextlib.contextmanager
def cublas_fp32(cupy: Any) -> Iterator[str]:
    """cuBLAS in strict FP32 for float32 (TF32 off) inside the block; yields how it was set.

    CuPy uses TF32 tensor cores for float32 matmuls only when CUPY_TF32=1,
    and caches that choice; this sets CuPy's float32 compute type to FP32
    explicitly (a private CuPy API, so a failure falls back to the default
    and says so) and restores it afterwards. The SGEMM check confirms it:
    TF32's error is ~100 times FP32's.
    """
    try:
        from cupy._core import _routines_linalg as linalg

        previous = linalg.get_compute_type(cupy.float32)
        linalg.set_compute_type(cupy.float32, linalg.COMPUTE_TYPE_FP32)
    except Exception:
        import os

        yield f"CuPy's default, CUPY_TF32={os.environ.get('CUPY_TF32', 'unset')}"
        return
    try:
        yield "FP32, TF32 off"
    finally:
        with contextlib.suppress(Exception):
            linalg.set_compute_type(cupy.float32, previous)


def _sgemm_label(version: str, settings: Mapping[str, int]) -> str:
    if version != "tiled" or not settings:
        return version
    return "tiled " + " ".join(f"{k}={settings[k]}" for k in ("BM", "BN", "BK", "TM", "TN"))


def sgemm_vs_cublas(
    n: int = 4096,
    *,
    versions: Sequence[str] = SGEMM_VERSIONS,
    tiled_configs: Sequence[Mapping[str, int]] = (),
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
) -> KernelComparison:
    """The SGEMM kernels on n x n matrices, as fractions of cuBLAS FP32 on the same matrices.

    Every result (cuBLAS's too) is checked against a float64 cuBLAS product
    first. ``tiled_configs`` adds ``sgemm_tiled`` runs with other tile sizes
    (dicts of BM, BN, BK, TM, TN). n must be a multiple of the tiled
    kernel's BM, BN and BK (4096 is).
    """
    side = check_int("n", n, minimum=1, maximum=32768)
    chosen = check_versions(versions, SGEMM_VERSIONS)
    configs = [dict(c) for c in tiled_configs]
    for config in configs:
        problems = sgemm_tiled_problems(**config)
        if problems:
            raise ValueError(f"tiled_configs entry {config}: " + "; ".join(problems))
    if not chosen and not configs:
        raise ValueError("nothing to run: versions and tiled_configs are both empty")
    budget = timing_budget(warmup_ms, rep_ms)
    cupy = require_cupy("the SGEMM comparison")
    _free(cupy)  # blocks an earlier experiment left in CuPy's pool count as used
    # a, b, c in float32 and their float64 copies and product: 3 x 4 + 3 x 8 bytes per element
    _memory.require_fits(
        36 * side * side, device="cuda", what=f"the {side} x {side} SGEMM comparison"
    )
    a = _random(cupy, (side, side), seed=1)
    b = _random(cupy, (side, side), seed=2)
    c = cupy.empty_like(a)
    flop = 2 * side**3
    try:
        reference = cupy.matmul(a.astype(cupy.float64), b.astype(cupy.float64))
        with cublas_fp32(cupy) as mode:
            cupy.matmul(a, b, out=c)
            cublas_error = verify_close("cuBLAS (cupy.matmul)", c, reference)
            timing = bench(
                cupy.matmul, a, b, out=c, device="cupy", label="cuBLAS", warn=False, **budget
            )
        ceiling = Ceiling(
            f"cuBLAS SGEMM (cupy.matmul, {mode})",
            flop / (timing.median_ms * 1e6),
            "GFLOP/s",
            timing,
        )
        plans: list[tuple[str, dict[str, int]]] = [(v, {}) for v in chosen]
        plans += [("tiled", cfg) for cfg in configs]
        runs = []
        for version, macros in plans:
            launch = plan_sgemm(cupy, a, b, version, c, macros)
            label = _sgemm_label(version, launch.settings if macros else {})
            check = functools.partial(verify_close, launch.name, c, reference)
            timing, error = _verified(launch, check, label, budget, reset=c)
            rate = flop / (timing.median_ms * 1e6)
            runs.append(
                KernelRun(
                    launch.name,
                    label,
                    rate,
                    rate / ceiling.rate,
                    timing,
                    None,
                    error,
                    dict(launch.settings),
                )
            )
        return KernelComparison(
            "SGEMM",
            gpu_name(),
            f"C = A @ B, {side:,} x {side:,} float32",
            "GFLOP/s",
            "2 n³ FLOP per call",
            ceiling,
            tuple(runs),
            notes=(
                f"every result checked against a float64 product first; cuBLAS's max error "
                f"is {cublas_error:.1g} of the largest value (strict FP32 ~1e-6, TF32 ~1e-4)",
            ),
        )
    finally:
        del a, b, c
        _free(cupy)


def reduction_versions(
    n_elements: int | None = None,
    *,
    versions: Sequence[str] = REDUCE_VERSIONS,
    atomic_elements: int = ATOMIC_ELEMENTS,
    block_size: int = 256,
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    quick: bool = False,
) -> KernelComparison:
    """The three sums of n float32 values, as fractions of the copy bandwidth.

    A reduction's rate counts the bytes it *reads* (n x 4 B); the copy
    ceiling counts read + written, its full traffic, so 100% means the sum
    streams its input as fast as a copy moves bytes; a read-only stream can
    be faster than a copy, so a reduction can pass 100%. Each timed call
    includes the one-element ``zero.fill(0)`` launch that resets the sum (a
    few µs, about 1-2% at these sizes). ``reduce_atomic`` runs
    on the first ``atomic_elements`` values only (n serialized atomics take
    long). The data are whole numbers -4..4, so every version's float32 sum
    is exact in any order (while no partial sum passes 2**24 in magnitude, far
    beyond what zero-mean data reaches) and is checked for equality with the
    float64 sum.
    """
    chosen = check_versions(versions, REDUCE_VERSIONS)
    if not chosen:
        raise ValueError("versions is empty")
    atomic_n = check_int("atomic_elements", atomic_elements, minimum=1, maximum=INT32_MAX)
    block = check_block_size(block_size, power_of_two=True)
    budget = timing_budget(warmup_ms, rep_ms)
    check_early(n_elements=(n_elements, INT32_MAX))
    cupy = require_cupy("the reduction comparison")
    _free(cupy)  # blocks an earlier experiment left in CuPy's pool count as used
    n = _elements(n_elements, arrays=2, multiple=1024, what="the reduction comparison", quick=quick)
    x = _random(cupy, (n,), integers=True)
    scratch = cupy.empty_like(x)
    out = cupy.zeros((1,), dtype=cupy.float32)
    try:
        ceiling = _copy_ceiling(cupy, x, scratch, budget)
        del scratch
        runs, notes = [], []
        for version in chosen:
            data = x[: min(atomic_n, n)] if version == "atomic" else x
            if version == "atomic" and data.size < n:
                notes.append(f"reduce_atomic summed the first {data.size:,} values only")
            launch = plan_reduce(cupy, data, version, out, block)
            check = functools.partial(verify_sum, launch.name, out, data, exact=True)
            timing, error = _verified(launch, check, version, budget)
            rate = _gb_per_s(data.nbytes, timing.median_ms)
            runs.append(
                KernelRun(
                    launch.name,
                    version,
                    rate,
                    rate / ceiling.rate,
                    timing,
                    None,
                    error,
                    dict(launch.settings),
                )
            )
        return KernelComparison(
            "Sum reduction",
            gpu_name(),
            _size_text(n),
            "GB/s",
            "bytes read (n x 4 B); the copy ceiling counts read + written",
            ceiling,
            tuple(runs),
            notes=tuple(notes),
        )
    finally:
        del x, out
        _free(cupy)


def block_size_sweep(
    kernel: str = "strided_copy",
    block_sizes: Sequence[int] = DEFAULT_BLOCK_SIZES,
    *,
    n_elements: int | None = None,
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    quick: bool = False,
) -> KernelComparison:
    """One kernel at several thread-block sizes, each as a fraction of the copy bandwidth.

    Kernels: "strided_copy" (stride 1, a plain copy), "transpose_padded"
    (32 x block_size/32 blocks on a square matrix of about ``n_elements``),
    "reduce_shared" (its BLOCK_SIZE macro: one compile per size) and
    "reduce_warp_shuffle". Small blocks leave an SM short of warps: an SM
    holds at most 32 blocks (Hopper), so 32-thread blocks fill half of it.
    For "reduce_shared" the block size also sets the number of atomics
    (one per 2 x BLOCK_SIZE elements), so that sweep changes two things at once.
    """
    kernel = check_choice("kernel", kernel, BLOCK_SWEEP_KERNELS)
    power = kernel in ("transpose_padded", "reduce_shared")
    sizes = check_sizes(block_sizes, "block_sizes")
    for b in sizes:
        check_block_size(b, power_of_two=power, name="block_sizes[...]")
    budget = timing_budget(warmup_ms, rep_ms)
    check_early(n_elements=(n_elements, INT32_MAX))
    cupy = require_cupy(f"the block-size sweep of {kernel}")
    _free(cupy)  # blocks an earlier experiment left in CuPy's pool count as used
    if kernel == "transpose_padded":
        side = _square_side(
            None if n_elements is None else math.isqrt(n_elements),
            arrays=3,
            quick=quick,
            what="the block-size sweep",
        )
        shape: tuple[int, ...] = (side, side)
        problem = f"{side:,} x {side:,} float32 matrix, 32 x (block size / 32) blocks"
    else:
        n = _elements(n_elements, arrays=3, multiple=1024, what="the block-size sweep", quick=quick)
        shape, problem = (n,), _size_text(n)
    reduction = kernel.startswith("reduce")
    x = _random(cupy, shape, integers=reduction)
    out = cupy.empty_like(x)
    total = cupy.zeros((1,), dtype=cupy.float32)
    try:
        ceiling = _copy_ceiling(cupy, x, out, budget)
        runs = []
        for block in sizes:
            if kernel == "strided_copy":
                launch = plan_strided_copy(cupy, x, 1, out, block, 4)
                check = functools.partial(verify_equal, "strided_copy", out, x)
            elif kernel == "transpose_padded":
                launch = plan_transpose(cupy, x, "padded", out, 32, block // 32)
                check = functools.partial(verify_equal, "transpose_padded", out, x.T)
            else:
                launch = plan_reduce(cupy, x, kernel.removeprefix("reduce_"), total, block)
                check = functools.partial(verify_sum, kernel, total, x, exact=True)
            timing, error = _verified(
                launch, check, f"{block} threads", budget, reset=None if reduction else out
            )
            nbytes = x.nbytes if reduction else 2 * x.nbytes
            rate = _gb_per_s(nbytes, timing.median_ms)
            runs.append(
                KernelRun(
                    kernel,
                    f"{block} threads",
                    rate,
                    rate / ceiling.rate,
                    timing,
                    block,
                    error,
                    dict(launch.settings),
                )
            )
        counting = "bytes read (n x 4 B)" if reduction else "bytes read + written"
        return KernelComparison(
            f"Block-size sweep of {kernel}",
            gpu_name(),
            problem,
            "GB/s",
            f"{counting}; the copy ceiling counts read + written",
            ceiling,
            tuple(runs),
            "block size",
        )
    finally:
        del x, out, total
        _free(cupy)
