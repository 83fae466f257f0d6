"""Measure the roofs and place real operations under them (torch, on the CPU or a CUDA GPU).

A roofline drawn from a spec sheet says what the vendor promises; the one
the course draws is measured on the machine in front of the learner, with
the spec-style peak beside it:

- the compute roofs by timing big matmuls per dtype (:func:`measure_peak_compute`).
  That is an *achieved BLAS ceiling*, not the hardware's peak: the fastest
  sample of the best size (biased upward, kept high under load so verdicts
  do not flip), circular for a matmul placed under it. The memory roof and
  the ops are medians, so a share of the ceiling is biased low. :func:`measure_roofline` therefore also carries the
  theoretical peak (:func:`labkit.machine.peak.cpu_peak` on a CPU), with
  its assumptions. Whether a CPU has fast bfloat16 (AVX512-BF16, AMX) is
  measured, not assumed: where it has none, the bfloat16 ceiling comes out
  no higher than float32, often lower (the CPU converts and computes in
  float32);
- the memory roof from :func:`labkit.bandwidth.stream.peak_bandwidth`;
- each operation of :mod:`labkit.roofline.model` run for real (:func:`measure_op`),
  giving achieved GFLOP/s and GB/s to plot under the roofs.

On a GPU, "float32" means TF32 *off* (full-precision FMA units) and "tf32"
means on (tensor cores); both settings are restored afterwards.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from labkit.core.optional import import_optional
from labkit.core.validate import check_choice, check_ms, check_sizes
from labkit.machine import memory as _memory
from labkit.machine.report import CPU_OR_CUDA, resolve_device
from labkit.roofline.model import DTYPE_BYTES, OpCost, Roofline
from labkit.timing.bench import Timing, bench

#: Compute dtypes measured by default on each kind of device.
CPU_DTYPES: tuple[str, ...] = ("float32", "float64", "bfloat16")
GPU_DTYPES: tuple[str, ...] = ("float32", "tf32", "bfloat16", "float16")
COMPUTE_DTYPES: tuple[str, ...] = (*DTYPE_BYTES, "tf32")

#: Matmul sizes tried for the peak; the size whose fastest sample is fastest wins.
CPU_PEAK_SIZES: tuple[int, ...] = (256, 512, 1024, 2048, 4096)
GPU_PEAK_SIZES: tuple[int, ...] = (1024, 2048, 4096, 8192)
#: Sizes up to this n are always timed, whatever ``max_call_ms`` predicts (about 0.2 s
#: even for a bfloat16 matmul a CPU emulates at 10 GFLOP/s).
ALWAYS_TRIED_N = 1024

#: Largest relative error (Frobenius norm, against float64) accepted before timing.
_TOLERANCE = {"float64": 1e-10, "float32": 1e-4, "tf32": 1e-2, "float16": 1e-2, "bfloat16": 5e-2}


# --------------------------------------------------------------------------- devices and modes


def _has_new_precision_api(torch: Any) -> bool:
    """torch >= 2.9 controls TF32 with ``fp32_precision``; mixing it with the old flags errors."""
    try:
        torch.backends.cuda.matmul.fp32_precision  # noqa: B018
        torch.backends.cudnn.conv.fp32_precision  # noqa: B018
    except AttributeError:
        return False
    return True


@contextlib.contextmanager
def tf32_mode(enabled: bool) -> Iterator[None]:
    """Allow (or forbid) TF32 tensor cores for float32 matmuls and convolutions, then restore.

    PyTorch's defaults differ by op (matmul: off, cuDNN convolutions: on), so
    a float32 measurement without this is not one thing. Uses the
    ``fp32_precision`` settings where torch has them (2.9+), else the older
    ``allow_tf32`` flags, never both: torch raises when the two are mixed.
    """
    torch = import_optional("torch", "switching TF32")
    if _has_new_precision_api(torch):
        matmul, conv = torch.backends.cuda.matmul, torch.backends.cudnn.conv
        saved = (matmul.fp32_precision, conv.fp32_precision)
        mode = "tf32" if enabled else "ieee"
        try:
            matmul.fp32_precision = mode
            conv.fp32_precision = mode
            yield
        finally:
            matmul.fp32_precision, conv.fp32_precision = saved
    else:
        cuda_matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
        saved_flags = (cuda_matmul.allow_tf32, cudnn.allow_tf32)
        try:
            cuda_matmul.allow_tf32 = enabled
            cudnn.allow_tf32 = enabled
            yield
        finally:
            cuda_matmul.allow_tf32, cudnn.allow_tf32 = saved_flags


def _torch_dtype(torch: Any, dtype: str) -> Any:
    return {
        "float16": torch.float16,
        "bfloat16": torch.bfloat16,
        "float32": torch.float32,
        "float64": torch.float64,
        "tf32": torch.float32,
    }[dtype]


# --------------------------------------------------------------------------- compute roofs


@dataclass(frozen=True)
class PeakCompute:
    """The best matmul rate of one dtype on one device (an achieved BLAS ceiling), and every size tried.

    ``gflop_per_s`` is the highest rate of any sample over the sizes: what
    torch's BLAS reaches here, not what the hardware could; see
    :func:`labkit.machine.peak.cpu_peak` for that.

    ``out_of_memory`` is the line printed when a size ran out of GPU memory
    and this dtype stopped there ("" when none did); ``sizes[-1]`` is then
    the largest size that fit.
    """

    dtype: str
    device: str
    gflop_per_s: float
    size: int
    sizes: tuple[int, ...]
    timings: tuple[Timing, ...]
    out_of_memory: str = ""


def measure_peak_compute(
    device: Any = None,
    dtypes: Sequence[str] | None = None,
    sizes: Sequence[int] | None = None,
    *,
    warmup_ms: float = 10.0,
    rep_ms: float = 50.0,
    max_call_ms: float = 200.0,
    show_progress: bool | None = None,
) -> dict[str, PeakCompute]:
    """The achieved BLAS ceiling per dtype: n×n matmuls at increasing n, the best rate of any sample.

    Args:
        device: "cpu", "cuda", "cuda:N" or None (the GPU where one exists).
        dtypes: from :data:`COMPUTE_DTYPES`; default :data:`CPU_DTYPES` or
            :data:`GPU_DTYPES`. "tf32" needs a GPU.
        sizes: matmul n to try, increasing; default :data:`CPU_PEAK_SIZES`
            or :data:`GPU_PEAK_SIZES`.
        warmup_ms, rep_ms: :func:`labkit.bench` budgets per size.
        max_call_ms: skip a size above :data:`ALWAYS_TRIED_N` whose call is
            predicted (n³ scaling from the previous size's fastest sample) to
            take longer than this; slow dtypes stop early.
        show_progress: a progress bar; None follows :mod:`labkit.core.progress`.

    Each dtype's result is checked against a float64 matmul before timing.
    Rates are 2n³ FLOPs / the fastest sample's time, the best over sizes:
    what torch's BLAS reaches at best, robust to load, biased upward, and
    not the hardware's peak (:func:`labkit.machine.peak.cpu_peak`).
    """
    from labkit.core.progress import progress

    warmup = check_ms("warmup_ms", warmup_ms, allow_zero=True)
    rep = check_ms("rep_ms", rep_ms)
    cap_ms = check_ms("max_call_ms", max_call_ms)
    tried = None if sizes is None else check_sizes(sizes)
    dev = resolve_device(device, kinds=CPU_OR_CUDA)
    on_gpu = dev != "cpu"
    chosen = _check_dtypes(dtypes, on_gpu)
    if tried is None:
        tried = GPU_PEAK_SIZES if on_gpu else CPU_PEAK_SIZES
    torch = import_optional("torch", "measuring peak FLOP/s")

    over = _peak_sizes_over_budget(chosen, tried, dev, named=sizes is not None)
    found: dict[str, list[tuple[int, Timing]]] = {d: [] for d in chosen}
    stopped: dict[str, str] = {}
    plan = [(d, n) for d in chosen for n in tried]
    for dtype, n in progress(plan, desc="peak FLOP/s", total=len(plan), show=show_progress):
        done = found[dtype]
        if dtype in stopped or (dtype, n) in over:
            continue
        if done and n > ALWAYS_TRIED_N:
            # predicted from the fastest sample (load only slows samples down), and never
            # for the sizes up to ALWAYS_TRIED_N: one slow sample under load must not leave
            # the ceiling to a 256² matmul, far below what the library reaches
            last_n, last = done[-1]
            if last.min_ms * (n / last_n) ** 3 > cap_ms:
                continue
        timing: Timing | None = None
        try:
            with _precision(torch, dtype, on_gpu):
                a, b = _random_pair(torch, n, n, n, dtype, dev)
                c = torch.empty(n, n, dtype=a.dtype, device=dev)
                if not done:
                    _check_matmul(torch, a, b, dtype)

                def matmul(a: Any = a, b: Any = b, c: Any = c) -> Any:
                    return torch.matmul(a, b, out=c)

                timing = bench(
                    matmul,
                    warmup_ms=warmup,
                    rep_ms=rep,
                    device=dev,
                    label=f"matmul {n} {dtype}",
                    warn=False,
                )
                del a, b, c, matmul
        except Exception as exc:  # out of memory: this dtype stops at the sizes that fit
            if not _memory.is_out_of_memory(exc):
                raise
        if timing is None:
            stopped[dtype] = _memory.out_of_memory_message(
                f"peak FLOP/s ({dtype})",
                f"matmul n={n:,}",
                f"n={done[-1][0]:,}" if done else None,
                dev,
            )
            _memory.release_memory(dev)
            if not done:
                raise _memory.MemoryBudgetError(stopped[dtype])
            print(stopped[dtype])
            continue
        done.append((n, timing))
    results = {}
    for dtype, runs in found.items():
        # the fastest sample of each size: load only slows a sample down, so under load the
        # ceiling keeps its height and no verdict flips; it is biased upward (a maximum of
        # maxima), which is why the theoretical peak is drawn beside it
        rates = [(2 * n**3 / (t.min_ms / 1e3) / 1e9, n) for n, t in runs if t.min_ms > 0]
        best_rate, best_n = max(rates) if rates else (math.nan, runs[0][0])
        results[dtype] = PeakCompute(
            dtype=dtype,
            device=dev,
            gflop_per_s=best_rate,
            size=best_n,
            sizes=tuple(n for n, _ in runs),
            timings=tuple(t for _, t in runs),
            out_of_memory=stopped.get(dtype, ""),
        )
    return results


def _peak_bytes(n: int, dtype: str, *, first: bool) -> int:
    """Bytes one size of :func:`measure_peak_compute` holds at most.

    a, b and c, plus the float32 draw a lower-precision input is converted
    from; the first size of each dtype is also checked against float64,
    which adds the product, its float64 copy, a and b in float64, the
    float64 product and the difference (s + 40 bytes per element).
    """
    item = 8 if dtype == "float64" else 4 if dtype in ("float32", "tf32") else 2
    per_element = 3 * item + (4 if item < 4 else 0) + ((item + 40) if first else 0)
    return per_element * n * n


def _peak_sizes_over_budget(
    dtypes: Sequence[str], sizes: Sequence[int], dev: str, *, named: bool
) -> set[tuple[str, int]]:
    """The (dtype, n) that do not fit the memory budget, with one warning for them.

    The first size of a dtype must fit (its result is checked before any
    timing), else :class:`~labkit.machine.memory.MemoryBudgetError`; so must every
    size a user named in ``sizes`` be within the machine's whole memory.
    """
    import warnings

    where = _memory.memory_device(dev)
    budget = _memory.budget_bytes(device=where)
    total = _memory.total_bytes(where) if named else None
    over: set[tuple[str, int]] = set()
    for dtype in dtypes:
        for i, n in enumerate(sizes):
            need = _peak_bytes(n, dtype, first=i == 0)
            if total is not None and need > total:
                _memory.require_fits(
                    need,
                    device=where,
                    name="sizes",
                    what=(
                        f"a {n:,} x {n:,} {dtype} matmul (more than the {_memory.format_bytes(total)} "
                        "this machine has in all)"
                    ),
                )
            if need > budget:
                if i == 0:
                    _memory.require_fits(
                        need,
                        device=where,
                        name="sizes",
                        what=f"the smallest {dtype} matmul, n={n:,}, and its check",
                    )
                over.add((dtype, n))
    if over:
        warnings.warn(
            f"measure_peak_compute: skipped matmul sizes from n={min(n for _, n in over):,} that "
            f"do not fit {_memory.DEFAULT_FRACTION:.0%} of the free memory; the peak comes from "
            "the smaller ones. Close other programs to measure larger sizes.",
            _memory.MemoryBudgetWarning,
            stacklevel=3,
        )
    return over


def _check_dtypes(dtypes: Sequence[str] | None, on_gpu: bool) -> tuple[str, ...]:
    if dtypes is None:
        return GPU_DTYPES if on_gpu else CPU_DTYPES
    # a str is a Sequence[str] too, so a type checker lets "float32" through: say so here
    if isinstance(dtypes, str) or not dtypes:
        raise ValueError(f"dtypes must be a non-empty list such as ['float32'], got {dtypes!r}")
    for dtype in dtypes:
        check_choice("dtypes", dtype, COMPUTE_DTYPES)
        if dtype == "tf32" and not on_gpu:
            raise ValueError(
                "dtypes contains 'tf32', a mode of NVIDIA tensor cores; on a CPU measure "
                "'float32' (and 'bfloat16') instead"
            )
    return tuple(dict.fromkeys(dtypes))


def _precision(torch: Any, dtype: str, on_gpu: bool) -> contextlib.AbstractContextManager[None]:
    if not on_gpu or dtype not in ("float32", "tf32"):
        return contextlib.nullcontext()
    return tf32_mode(dtype == "tf32")


def _random_pair(torch: Any, m: int, n: int, k: int, dtype: str, dev: str) -> tuple[Any, Any]:
    generator = torch.Generator(device=dev).manual_seed(0)
    kind = _torch_dtype(torch, dtype)
    a = torch.randn(m, k, generator=generator, device=dev, dtype=torch.float32).to(kind)
    b = torch.randn(k, n, generator=generator, device=dev, dtype=torch.float32).to(kind)
    return a, b


def _check_matmul(torch: Any, a: Any, b: Any, dtype: str) -> None:
    result = torch.matmul(a, b).double()
    reference = a.double() @ b.double()
    error = float(torch.linalg.norm(result - reference) / torch.linalg.norm(reference))
    if not error <= _TOLERANCE[dtype]:
        raise RuntimeError(
            f"a {dtype} matmul on {a.device} is off by {error:.2g} (relative) from float64, more "
            f"than the {_TOLERANCE[dtype]:g} its precision allows; labkit will not time a wrong "
            "result. Check for a broken BLAS or driver with `labkit doctor`."
        )


def measure_roofline(
    device: Any = None, dtypes: Sequence[str] | None = None, **options: Any
) -> Roofline:
    """Measure the achieved BLAS ceilings (:func:`measure_peak_compute`) and the memory roof.

    The memory roof comes from :func:`labkit.bandwidth.stream.peak_bandwidth`.
    ``options`` go to :func:`measure_peak_compute`. On a CPU the roofline
    also carries the theoretical peak of each dtype that
    :func:`labkit.machine.peak.cpu_peak` can compute (its assumptions are in
    the ``CpuPeak`` it returns), so the plot and the printout show both.
    """
    from labkit.bandwidth.stream import peak_bandwidth

    dev = resolve_device(device, kinds=CPU_OR_CUDA)
    peaks = measure_peak_compute(dev, dtypes, **options)
    memory = peak_bandwidth(dev)
    theory: dict[str, float] = {}
    source = ""
    if dev == "cpu":
        from labkit.machine.peak import cpu_peak

        hardware = cpu_peak()
        for dtype in peaks:
            value = hardware.gflop_per_s(dtype)
            if value is not None:
                theory[dtype] = value
        source = (
            "cores × SIMD lanes × FMA units × 2 × clock (labkit.machine.peak.cpu_peak(): "
            "its inputs and assumptions)"
        )
    return Roofline(
        device=dev,
        peak_gflop_per_s={dtype: p.gflop_per_s for dtype, p in peaks.items()},
        peak_gb_per_s=float(memory.gb_per_s),
        theoretical_gflop_per_s=theory,
        theoretical_source=source,
        ceiling_kind="achieved BLAS ceiling",
    )


def dram_elements(dtype: str = "float32", device: str = "cpu") -> int:
    """Elements of ``dtype`` in one array that lives in main memory, not in a cache.

    :func:`labkit.bandwidth.sizes.main_memory_bytes_per_array` (512 MiB on a
    CPU, more where 4× the last-level cache is more and fits), in elements,
    so an add or a sum sized with it streams from DRAM like the memory roof.
    """
    from labkit.bandwidth.sizes import main_memory_bytes_per_array

    itemsize = DTYPE_BYTES[check_choice("dtype", dtype, tuple(DTYPE_BYTES))]
    return main_memory_bytes_per_array(device) // itemsize


# --------------------------------------------------------------------------- real operations


@dataclass(frozen=True)
class OpMeasurement:
    """One operation run for real: its time, and the rates its :class:`OpCost` implies.

    ``gb_per_s`` is the *minimum* traffic over the time (an effective
    bandwidth); the hardware may have moved more.
    """

    op: OpCost
    device: str
    median_ms: float
    gflop_per_s: float
    gb_per_s: float
    timing: Timing

    @property
    def arithmetic_intensity(self) -> float:
        return self.op.arithmetic_intensity

    @property
    def label(self) -> str:
        return self.op.name

    def __str__(self) -> str:
        from labkit.core.units import format_duration, format_gflop_per_s, three_digits

        return (
            f"{self.op.name} ({self.op.dtype}) on {self.device}: {format_duration(self.median_ms)}, "
            f"{format_gflop_per_s(self.gflop_per_s)}, {three_digits(self.gb_per_s)} GB/s at "
            f"{three_digits(self.arithmetic_intensity)} FLOP/byte"
        )


def measure_op(
    op: OpCost,
    device: Any = None,
    *,
    tf32: bool = False,
    warmup_ms: float = 10.0,
    rep_ms: float = 50.0,
    flush_cache: bool = False,
) -> OpMeasurement:
    """Run ``op`` (from :func:`labkit.roofline.model.add_cost` and siblings) with torch and time it.

    Args:
        op: what to run, with its shapes and dtype.
        device: "cpu", "cuda", "cuda:N" or None (the GPU where one exists).
        tf32: on a GPU, let float32 matmuls and convolutions use TF32 tensor
            cores (compare with the "tf32" roof). Off by default, so a
            float32 op is compared with the float32 roof.
        flush_cache: flush the caches before each call (:func:`labkit.bench`'s
            ``flush_l2``). Without it, an op whose operands fit in cache can
            beat the DRAM roof: use sizes well above the last-level cache.
    """
    warmup = check_ms("warmup_ms", warmup_ms, allow_zero=True)
    rep = check_ms("rep_ms", rep_ms)
    dev = resolve_device(device, kinds=CPU_OR_CUDA)
    if tf32 and dev == "cpu":
        raise ValueError("tf32=True needs a GPU: TF32 is a mode of NVIDIA tensor cores")
    torch = import_optional("torch", "measuring an operation")
    where = _memory.memory_device(dev)
    item = DTYPE_BYTES.get(op.dtype, 4)
    # inputs and output, the float32 draws lower-precision inputs come from, a conv's
    # shape-check output, and the buffer a cache flush writes
    need = op.bytes * (max(1, 4 // item) + (op.kind == "conv2d"))
    if flush_cache:
        from labkit.bandwidth.strided import flush_bytes

        need += flush_bytes("cpu" if where == "cpu" else dev)
    _memory.require_fits(need, device=where, what=f"measure_op({op.name})", name="op (its sizes)")
    mode = tf32_mode(tf32) if dev != "cpu" else contextlib.nullcontext()
    with mode:
        fn = _build(torch, op, dev)
        timing = bench(
            fn,
            warmup_ms=warmup,
            rep_ms=rep,
            device=dev,
            flush_l2=flush_cache,
            label=op.name,
            warn=False,
        )
    seconds = timing.median_ms / 1e3
    return OpMeasurement(
        op=op,
        device=dev,
        median_ms=timing.median_ms,
        gflop_per_s=op.flops / seconds / 1e9 if seconds > 0 else math.inf,
        gb_per_s=op.bytes / seconds / 1e9 if seconds > 0 else math.inf,
        timing=timing,
    )


def _build(torch: Any, op: OpCost, dev: str) -> Any:
    """The tensors of ``op`` on ``dev`` and a function that runs it once.

    The add, sum and matmul write into an output allocated here, outside the
    timed call. The convolution is timed as the plain call, allocating its
    output: its ``convolution.out`` is ``autogen`` (a new tensor, then a copy
    into ``out``), and ``thnn_conv2d.out`` is another algorithm.
    """
    d = dict(op.dims)
    kind = _torch_dtype(torch, op.dtype)
    generator = torch.Generator(device=dev).manual_seed(0)

    def randn(*shape: int) -> Any:
        return torch.randn(*shape, generator=generator, device=dev, dtype=torch.float32).to(kind)

    if op.kind in ("add", "sum"):
        x, y = randn(d["n"]), randn(d["n"])
        if op.kind == "sum":
            total = torch.empty((), dtype=kind, device=dev)  # preallocated like every output
            return lambda: torch.sum(x, 0, out=total)
        out = torch.empty_like(x)
        return lambda: torch.add(x, y, out=out)
    if op.kind == "matmul":
        a, b = randn(d["m"], d["k"]), randn(d["k"], d["n"])
        out = torch.empty(d["m"], d["n"], dtype=kind, device=dev)
        return lambda: torch.matmul(a, b, out=out)
    # conv2d
    from torch.nn import functional

    from labkit.roofline.model import conv2d_output_size

    x = randn(d["N"], d["C"], d["H"], d["W"])
    w = randn(d["K"], d["C"], d["R"], d["S"])
    stride, padding = d["stride"], d["padding"]
    shape = tuple(functional.conv2d(x, w, stride=stride, padding=padding).shape)
    expected = (
        d["N"],
        d["K"],
        *conv2d_output_size(d["H"], d["W"], d["R"], d["S"], stride, padding),
    )
    if shape != expected:  # the FLOP count would be wrong: refuse to report a rate
        raise RuntimeError(f"conv2d produced {shape}, but its OpCost assumes {expected}")
    # No preallocated output: see the docstring (an autogen .out would add a copy).
    return lambda: functional.conv2d(x, w, stride=stride, padding=padding)


# --------------------------------------------------------------------------- placing ops


@dataclass(frozen=True)
class RooflinePlacement:
    """Where one measured op sits under its own dtype's roofs.

    ``roof_gflop_per_s`` is min(ceiling, intensity × bandwidth) for the op's
    dtype; ``fraction_of_roof`` the share of it the op reached. ``verdict``
    comes from :meth:`labkit.roofline.model.Roofline.verdict`, with a margin,
    so that it holds under load. GB/s is not used: for an op whose operands
    stay in cache (a 1024² matmul), bytes over time is not DRAM traffic.
    """

    name: str
    dtype: str
    flop_per_byte: float
    gflop_per_s: float
    roof_gflop_per_s: float
    fraction_of_roof: float
    verdict: str


def place(
    roofline: Roofline, measured: OpMeasurement, name: str | None = None
) -> RooflinePlacement:
    """Place ``measured`` under its dtype's roofs (its median rate: biased low against the ceiling)."""
    op = measured.op
    dtype = op.dtype if op.dtype in roofline.dtypes else roofline.default_dtype
    ai = op.arithmetic_intensity
    roof = roofline.attainable_gflop_per_s(ai, dtype)
    return RooflinePlacement(
        name=name or op.name,
        dtype=dtype,
        flop_per_byte=ai,
        gflop_per_s=measured.gflop_per_s,
        roof_gflop_per_s=roof,
        fraction_of_roof=measured.gflop_per_s / roof,
        verdict=roofline.verdict(op, dtype),
    )


def placement_table(placements: Sequence[RooflinePlacement], *, verdicts: bool = True) -> str:
    """One line per op: intensity, achieved rate, its roof there, % of that roof (and the verdict)."""
    from labkit.core.units import format_gflop_per_s, three_digits

    width = max(len(p.name) for p in placements)
    lines = []
    for p in placements:
        line = (
            f"{p.name:<{width}}  {p.dtype:>8}  {three_digits(p.flop_per_byte):>6} FLOP/byte  "
            f"{format_gflop_per_s(p.gflop_per_s):>12}  roof  {format_gflop_per_s(p.roof_gflop_per_s):>12}"
            f"  {p.fraction_of_roof:.0%} of its roof"
        )
        lines.append(line + (f"  {p.verdict}" if verdicts else ""))
    return "\n".join(lines)
