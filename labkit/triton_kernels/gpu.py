"""On an NVIDIA GPU: the Triton kernels against torch and notebook 07's CUDA C, timed two ways.

Why two clocks: :func:`triton.testing.do_bench` is what Triton's own
tutorials and ``triton.autotune`` use (CUDA events around each call, the L2
cleared with a 256 MB write before each one, triton 3.9.0); labkit's
:func:`labkit.bench` times the same calls, here also with the L2 flushed
before each call (``flush_l2=True``), so that an input small enough to stay
in the L2 (the 4,096 × 1,024 softmax's 16 MiB) is read from memory in both,
and the queued flush keeps the GPU busy between calls of a few microseconds.
Where the two agree, the figure does not depend on the tool. Every variant's
output is checked against torch once before it is timed, so nothing wrong is
timed. Each kernel's registers, spills and vector loads in its PTX are kept
from its last compilation (``ld.global.v4`` loads four floats per thread: the
compiler's vectorized, coalesced access).

Sizes: arrays of up to 256 MiB (five times an H100 SXM5's 50 MB L2),
shrunk to labkit's GPU memory budget; SGEMM 4,096³ in float32 with full
float32 products (``input_precision="ieee"``, TF32 off in torch), as the
CUDA C kernels of notebook 07 compute.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

from labkit.triton_kernels.launch import Kernels

ARRAY_BYTES = 256 * 1024**2
STRIDES: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
SOFTMAX_ROWS = 4096
SOFTMAX_COLS: tuple[int, ...] = (1024, 4096, 16384)
MATMUL_N = 4096
#: The launcher's matmul tiles on the GPU before tuning (the interpreter's are smaller).
DEFAULT_MATMUL = {"block_m": 64, "block_n": 64, "block_k": 32, "group_m": 8}
#: triton.autotune's candidates: tile shapes x warps x pipeline stages.
AUTOTUNE_CONFIGS: tuple[dict[str, int], ...] = tuple(
    {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": w, "num_stages": s}
    for bm, bn, bk in ((64, 64, 32), (128, 64, 32), (64, 128, 32), (128, 128, 32), (128, 128, 16))
    for w, s in ((4, 3), (8, 3), (8, 4))
)
#: notebook 07's best recorded sgemm_tiled tiles (labkit/reference/kernels.json, H200).
CUDA_C_SGEMM = {"BM": 128, "BN": 128, "BK": 16, "TM": 8, "TN": 8}


@dataclass(frozen=True)
class GpuTime:
    """One variant of one kernel, timed by labkit.bench and by triton.testing.do_bench."""

    kernel: str
    variant: str  # "triton", "torch", "CUDA C", "triton autotuned", ...
    size: str
    median_ms: float  # labkit.bench, CUDA events
    do_bench_ms: float  # triton.testing.do_bench(return_mode="median"), L2 cleared
    bytes_moved: int | None = None  # useful bytes read + written per call
    flops: int | None = None

    @property
    def gb_per_s(self) -> float | None:
        return None if self.bytes_moved is None else self.bytes_moved / (self.median_ms * 1e6)

    @property
    def tflop_per_s(self) -> float | None:
        return None if self.flops is None else self.flops / (self.median_ms * 1e9)


@dataclass
class GpuResults:
    device: str
    times: list[GpuTime] = field(default_factory=list)
    autotune: dict[str, Any] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    compiled: dict[str, dict[str, Any]] = field(default_factory=dict)  # kernel -> its build

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "times": [
                {**asdict(t), "gb_per_s": t.gb_per_s, "tflop_per_s": t.tflop_per_s}
                for t in self.times
            ],
            "autotune": self.autotune,
            "skipped": list(self.skipped),
            "compiled": self.compiled,
        }


def compiled_facts(handle: Any) -> dict[str, Any]:
    """A compiled kernel's registers per thread, local memory, and the PTX's loads by kind.

    ``n_spills`` is Triton's name for the kernel's local memory in 4-byte words
    (CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES / 4): spilled registers live there.
    Pipelined loops load tiles with ``cp.async`` (global to shared memory)
    rather than ``ld.global``, so both are counted.
    """
    ptx = str(getattr(handle, "asm", {}).get("ptx", ""))
    return {
        "n_regs": getattr(handle, "n_regs", None),
        "n_spills": getattr(handle, "n_spills", None),
        "ptx_ld_global_v4": ptx.count("ld.global.v4"),
        "ptx_ld_global_v2": ptx.count("ld.global.v2"),
        "ptx_ld_global": ptx.count("ld.global"),
        "ptx_cp_async": ptx.count("cp.async.ca") + ptx.count("cp.async.cg"),
    }


def _time(
    fn: Callable[[], Any], *, quick: bool
) -> tuple[float, float]:  # (labkit.bench median, do_bench median), in ms
    import triton.testing

    from labkit.timing.bench import bench

    warmup_ms, rep_ms = (5.0, 20.0) if quick else (25.0, 200.0)
    ours = bench(fn, device="cuda", warn=False, warmup_ms=warmup_ms, rep_ms=rep_ms, flush_l2=True)
    theirs = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median")
    return ours.median_ms, float(theirs)


def _check(kernel: str, label: str, out: Any, ref: Any) -> None:
    """Raise unless ``out`` passes :func:`labkit.triton_kernels.verify.compare` (its tolerance)."""
    from labkit.triton_kernels.verify import compare

    check = compare(kernel, label, "", out, ref)
    if not check.ok:
        raise RuntimeError(
            f"{label}: max |err| / max |torch| = {check.rel_err:.2e} (tolerance "
            f"{check.rtol:.0e}), {check.nan} NaN, {check.nonzero:,} non-zero of "
            f"{check.ref_nonzero:,}"
        )


def _cupy() -> Any | None:
    from labkit.kernels.cupy_run import cupy_gpu_available

    if not cupy_gpu_available():
        return None
    import cupy

    return cupy


@contextlib.contextmanager
def _no_tf32() -> Iterator[None]:
    import torch

    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def _elements(quick: bool, arrays: int) -> int:
    from labkit.machine import memory

    target = (16 * 1024**2 if quick else ARRAY_BYTES) // 4
    return memory.fit_bytes(4 * target, device="cuda", arrays=arrays) // 4 // 1024 * 1024


def measure_copies(kit: Kernels, results: GpuResults, *, quick: bool) -> None:
    """The plain copy (Triton, torch) and the strided copy by stride (Triton, CUDA C)."""
    import torch

    n = _elements(quick, 2) // max(STRIDES) * max(STRIDES)
    x = torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    size = f"{n:,} float32 ({n * 4 / 2**20:.0f} MiB per array)"
    y.fill_(math.nan)
    kit.copy(x, out=y)
    _check("copy", "triton copy", y, x)
    for variant, fn in (
        ("triton", lambda: kit.copy(x, out=y)),
        ("torch", lambda: y.copy_(x)),
    ):
        ms, db = _time(fn, quick=quick)
        results.times.append(GpuTime("copy", variant, size, ms, db, bytes_moved=8 * n))
    cupy = _cupy()
    if cupy is None:
        results.skipped.append("strided copy in CUDA C: CuPy cannot run kernels here")
    for s in STRIDES:
        ref = x.view(n // s, s).t().reshape(-1)
        variants: list[tuple[str, Callable[[], Any]]] = [
            ("triton", partial(kit.strided_copy, x, s, out=y))
        ]
        if cupy is not None:
            from labkit.kernels.cupy_run import strided_copy as cuda_c_strided_copy

            variants.append(
                ("CUDA C", partial(cuda_c_strided_copy, cupy.asarray(x), s, out=cupy.asarray(y)))
            )
        for variant, fn in variants:
            y.fill_(math.nan)  # what a kernel does not write stays NaN and fails the check
            fn()
            torch.cuda.synchronize()
            _check("strided_copy", f"{variant} strided copy, stride {s}", y, ref)
            ms, db = _time(fn, quick=quick)
            results.times.append(
                GpuTime(f"strided copy, stride {s}", variant, size, ms, db, bytes_moved=8 * n)
            )


def measure_softmax(kit: Kernels, results: GpuResults, *, quick: bool) -> None:
    import torch

    for cols in SOFTMAX_COLS[:1] if quick else SOFTMAX_COLS:
        rows = SOFTMAX_ROWS if not quick else 256
        x = torch.randn(rows, cols, device="cuda") * 4
        y = torch.full_like(x, math.nan)
        _check(
            "softmax", f"triton softmax {rows} x {cols}", kit.softmax(x, out=y), torch.softmax(x, 1)
        )
        for variant, fn in (
            ("triton", partial(kit.softmax, x, out=y)),
            ("torch", partial(torch.softmax, x, dim=1)),
        ):
            ms, db = _time(fn, quick=quick)
            results.times.append(
                GpuTime(
                    "softmax", variant, f"{rows:,} x {cols:,}", ms, db, bytes_moved=8 * rows * cols
                )
            )


def measure_matmul(kit: Kernels, results: GpuResults, *, quick: bool) -> None:
    """SGEMM: the default tiles, triton.autotune's pick, torch (TF32 off) and CUDA C sgemm_tiled."""
    import torch
    import triton

    n = 512 if quick else MATMUL_N
    a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    c = torch.empty(n, n, device="cuda")
    size, flops = f"{n:,}³ float32", 2 * n**3
    with _no_tf32():
        ref = a.double() @ b.double()
        variants: list[tuple[str, Callable[[], Any]]] = [
            ("triton", lambda: kit.matmul(a, b, out=c, **DEFAULT_MATMUL)),
            ("torch", lambda: torch.matmul(a, b, out=c)),
        ]
        configs = [
            triton.Config(
                {k: v for k, v in cfg.items() if k.startswith("BLOCK")},
                num_warps=cfg["num_warps"],
                num_stages=cfg["num_stages"],
            )
            for cfg in (AUTOTUNE_CONFIGS[:2] if quick else AUTOTUNE_CONFIGS)
        ]
        tuned = triton.autotune(configs=configs, key=["M", "N", "K"])(kit.module.matmul_kernel)

        def run_tuned() -> None:
            def grid(meta: dict[str, int]) -> tuple[int]:
                return (triton.cdiv(n, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)

            tuned[grid](a, b, c, n, n, n, n, 1, n, 1, n, 1, GROUP_M=8)

        variants.append(("triton autotuned", run_tuned))
        cupy = _cupy()
        if cupy is not None:
            from labkit.kernels.cupy_run import sgemm

            ca, cb, cc = cupy.asarray(a), cupy.asarray(b), cupy.asarray(c)
            variants.append(
                ("CUDA C sgemm_tiled", lambda: sgemm(ca, cb, "tiled", out=cc, **CUDA_C_SGEMM))
            )
        else:
            results.skipped.append("SGEMM in CUDA C: CuPy cannot run kernels here")
        for variant, fn in variants:
            c.fill_(math.nan)
            fn()
            torch.cuda.synchronize()
            _check("matmul", f"{variant} SGEMM", c.double(), ref)
            ms, db = _time(fn, quick=quick)
            results.times.append(GpuTime("matmul", variant, size, ms, db, flops=flops))
        best = tuned.best_config
        results.autotune = {
            "best": {**best.kwargs, "num_warps": best.num_warps, "num_stages": best.num_stages},
            "timings_ms": [
                {
                    **cfg.kwargs,
                    "num_warps": cfg.num_warps,
                    "num_stages": cfg.num_stages,
                    "median_ms": float(t[0]) if isinstance(t, list | tuple) else float(t),
                }
                for cfg, t in getattr(tuned, "configs_timings", {}).items()
            ],
        }


def gpu_measurements(kit: Kernels, *, quick: bool = False) -> GpuResults:
    """Every GPU measurement of notebook 12; a part that fails is named in ``skipped``."""
    import torch

    if kit.setup.interpreted:
        raise ValueError("gpu_measurements needs the kernels compiled for a GPU, not interpreted")
    results = GpuResults(device=torch.cuda.get_device_name(0))
    for name, part in (
        ("copies", measure_copies),
        ("softmax", measure_softmax),
        ("matmul", measure_matmul),
    ):
        try:
            part(kit, results, quick=quick)
        except Exception as exc:  # noqa: BLE001 - one part failing keeps the others
            results.skipped.append(f"{name}: {type(exc).__name__}: {exc}")
        finally:
            torch.cuda.empty_cache()
    from labkit.triton_kernels.launch import LAST_COMPILED

    for kernel, handle in LAST_COMPILED.items():
        try:
            results.compiled[kernel] = compiled_facts(handle)
        except Exception as exc:  # noqa: BLE001 - facts about the build are extras
            results.skipped.append(f"compiled facts of {kernel}: {type(exc).__name__}: {exc}")
    return results
