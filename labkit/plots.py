"""One look for every notebook's plots: units on every axis, the device in the title.

matplotlib is imported inside each function, so ``import labkit`` stays
light and a missing matplotlib is one clear message.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from labkit._checks import check_ax, check_bool, check_str
from labkit.timing import Timing, duration_unit

_UNIT_SCALE = {"ns": 1e6, "µs": 1e3, "ms": 1.0, "s": 1e-3}


def device_name(device: str) -> str:
    """A readable name for a ``Timing.device`` string: the CPU model, or the GPU's name."""
    if not isinstance(device, str) or not device:
        raise TypeError(f"device must be a non-empty string such as 'cpu', got {device!r}")
    kind = device.split(":")[0]
    if kind == "tf" or device.startswith("/"):  # TensorFlow's names: "tf:CPU:0", "/GPU:0"
        kind = "cuda" if "GPU" in device.upper() else "cpu"
        if kind == "cuda":
            return f"TensorFlow {device.split('/')[-1]}"
    if kind == "cpu":
        from labkit.cpu import cpu_info

        return cpu_info().model
    if kind == "cuda":
        import sys

        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            index = int(device.split(":")[1]) if ":" in device else torch.cuda.current_device()
            return torch.cuda.get_device_name(index)
    return device


def _pyplot() -> Any:
    from labkit._optional import import_optional

    import_optional("matplotlib", "the course's plots")
    import matplotlib.pyplot as plt

    return plt


def style_axes(
    ax: Any,
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    device: str | None = None,
    logx: bool = False,
    logy: bool = False,
) -> Any:
    """Label both axes (with units), log-scale where asked, and name the device in the title."""
    if ax is None:
        raise TypeError("ax must be a matplotlib Axes (e.g. from plt.subplots()), got None")
    check_ax(ax)
    for name, value in (("xlabel", xlabel), ("ylabel", ylabel), ("title", title)):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a string, got {type(value).__name__}")
    if not xlabel or not ylabel:
        raise ValueError("xlabel and ylabel must be non-empty: every axis says what it measures")
    check_bool("logx", logx)
    check_bool("logy", logy)
    if device is not None:
        check_str("device", device)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(f"{title}\non {device_name(device)}" if device else title)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.grid(True, which="major", alpha=0.3)
    return ax


def _plain_log_ticks(axis: Any) -> None:
    """Log axes labelled 2, 5, 10 rather than 2×10⁰; minor ticks 2 and 5 past a decade."""
    from matplotlib.ticker import FuncFormatter

    def minor(value: float, _pos: Any) -> str:
        low, high = sorted(axis.get_view_interval())
        if low > 0 and high / low < 10:
            return f"{value:g}"
        return f"{value:g}" if f"{value:e}"[0] in "25" else ""  # 2 and 5 only past a decade

    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    axis.set_minor_formatter(FuncFormatter(minor))


def plot_samples(timing: Timing, *, ax: Any = None) -> Any:
    """Every sample of a :class:`Timing` in the order it was taken, with its median and IQR.

    The first call (lazy initialisation, compilation) is drawn apart from the
    samples because it is not one of them: this picture is why ``bench`` warms
    up, and why it reports the median rather than the mean.
    """
    if not isinstance(timing, Timing):
        raise TypeError(f"Expected an instance of Timing for timing, got {type(timing).__name__} instead.")
    check_ax(ax)
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.5))
    values = [timing.median_ms, timing.min_ms]
    if timing.first_call_ms is not None:
        values.append(timing.first_call_ms)
    unit = duration_unit(min(values))
    scale = _UNIT_SCALE[unit]
    xs = range(1, timing.n + 1)
    ax.plot(xs, [s * scale for s in timing.samples_ms], ".", ms=4, label="timed calls")
    ax.axhline(timing.median_ms * scale, color="C1", label="median")
    ax.axhspan(timing.q1_ms * scale, timing.q3_ms * scale, color="C1", alpha=0.2, label="IQR")
    if timing.first_call_ms is not None:
        ax.plot([0], [timing.first_call_ms * scale], "x", color="C3", ms=8, label="first call")
    ax.set_yscale("log")
    _plain_log_ticks(ax.yaxis)
    shown = [timing.min_ms, timing.max_ms] + [v for v in [timing.first_call_ms] if v is not None]
    # headroom above keeps the legend off the data (the axis is logarithmic)
    ax.set_ylim(min(shown) * scale / 1.5, max(shown) * scale * 3)
    ax.legend(loc="upper center", ncol=4, fontsize="small")
    return style_axes(
        ax,
        xlabel="call number (0 = first call, before warm-up)",
        ylabel=f"time per call ({unit})",
        title=f"{timing.label or 'timed call'}: every sample",
        device=timing.device,
    )


def plot_size_sweep(
    sweep: Any, *, ax: Any = None, slow: str = "torch-all-threads", fast: str = "torch-cuda"
) -> Any:
    """Throughput against problem size, one line per backend (log-log), with the GPU crossover.

    On the left every backend is dominated by fixed costs (interpreter
    overhead, kernel launches, waking threads), so throughput grows with the
    size; each line flattens where that backend's hardware is saturated.
    When the sweep has both ``slow`` and ``fast`` (by default all CPU threads
    and CUDA), a dashed line marks the size from which ``fast`` stays faster.
    """
    from labkit.parallel import SizeSweep
    from labkit.rates import round3

    if not isinstance(sweep, SizeSweep):
        raise TypeError(
            f"Expected an instance of SizeSweep for sweep, got {type(sweep).__name__} instead; pass the "
            "result of labkit.parallel.sweep_add() or sweep_matmul()"
        )
    check_ax(ax)
    check_str("slow", slow)
    check_str("fast", fast)
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    for result in sweep.backends:
        if result.points:
            values = [getattr(point, sweep.metric) for point in result.points]
            ax.plot(result.sizes, values, marker="o", ms=3, label=result.label)
    if sweep.has_backend(slow) and sweep.has_backend(fast):
        size = sweep.crossover(slow, fast)
        if size is not None:
            ax.axvline(size, color="0.3", ls="--", lw=1, label=f"crossover: n ≈ {round3(size):,}")
    ax.legend(fontsize="small")
    if sweep.op == "add":
        xlabel, what = "n (elements per vector)", "c = a + b"
    else:
        xlabel, what = "n (n×n matrices)", "n×n matmul"
    devices = ["cpu"] + sorted({b.device for b in sweep.backends} - {"cpu"})
    names = " and ".join(device_name(d) for d in devices)
    return style_axes(
        ax,
        xlabel=xlabel,
        ylabel=f"throughput ({sweep.metric_unit})",
        title=f"{what} ({sweep.dtype}): throughput by size\non {names}",
        logx=True,
        logy=True,
    )


def plot_amdahl(scaling: Any, *, ax: Any = None, max_threads: int = 64) -> Any:
    """Measured speedups, Amdahl's curve for the measured serial fraction, and the ideal line.

    The curve extends the few thread counts a laptop has to ``max_threads``:
    with a serial fraction f the speedup flattens towards 1/f (the dashed
    line) long before the ideal S(n) = n, which is the lesson of the law.
    """
    from labkit.amdahl import ThreadScaling, amdahl_speedup

    if not isinstance(scaling, ThreadScaling):
        raise TypeError(
            f"Expected an instance of ThreadScaling for scaling, got {type(scaling).__name__} "
            "instead; pass the result of labkit.amdahl.measure_thread_scaling()"
        )
    if isinstance(max_threads, bool) or not isinstance(max_threads, int) or max_threads < 2:
        raise ValueError(f"max_threads must be an integer >= 2, got {max_threads!r}")
    if max_threads > 2**20:
        raise ValueError(f"max_threads must be at most {2**20} to draw a curve, got {max_threads!r}")
    check_ax(ax)
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 4.5))
    top = max(max_threads, *(p.threads for p in scaling.points))
    ns = [top ** (i / 100) for i in range(101)]
    ax.plot(ns, ns, ls=":", color="0.5", label="ideal: S(n) = n")
    f = scaling.serial_fraction
    if f is not None:
        ax.plot(ns, [amdahl_speedup(f, n) for n in ns], color="C1",
                label=f"Amdahl, measured f = {f:.3f}")  # fmt: skip
        if f > 0:
            ax.axhline(1 / f, color="C1", ls="--", lw=1, label=f"limit 1/f = {1 / f:.3g}×")
    ax.plot([p.threads for p in scaling.points], [p.speedup for p in scaling.points], "o",
            color="C0", ms=7, zorder=3, label="measured")  # fmt: skip
    ax.legend(fontsize="small", loc="upper left")
    style_axes(
        ax,
        xlabel="threads n",
        ylabel="speedup S(n) = T(1) / T(n) (×)",
        title=f"Amdahl's law: {scaling.workload}",
        device=scaling.device,
    )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    _plain_log_ticks(ax.xaxis)
    _plain_log_ticks(ax.yaxis)
    return ax


def plot_roofline(roofline: Any, points: Any = (), *, ax: Any = None) -> Any:
    """The roofline (log-log): the memory roof, one compute roof per dtype, and measured ops.

    ``points`` are :class:`labkit.roofline_measure.OpMeasurement` results or
    ``(label, FLOP/byte, GFLOP/s)`` tuples. A point under the slanted roof
    is limited by memory, one under a flat roof by arithmetic; the distance
    below its roof is what the kernel leaves on the table.
    """
    from labkit.rates import format_gflop_per_s, three_digits
    from labkit.roofline import Roofline

    if not isinstance(roofline, Roofline):
        raise TypeError(
            f"Expected an instance of Roofline for roofline, got {type(roofline).__name__} "
            "instead; build one with labkit.roofline.measure_roofline() or "
            "Roofline(device, peaks, gb_per_s)"
        )
    marks = _roofline_points(points)
    check_ax(ax)
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 5))
    ridges = {dtype: roofline.ridge_point(dtype) for dtype in roofline.dtypes}
    intensities = [ai for _, ai, _ in marks]
    x_lo = min([min(ridges.values()) / 30, *(ai / 3 for ai in intensities)])
    x_hi = max([max(ridges.values()) * 30, *(ai * 3 for ai in intensities)])
    bw = roofline.peak_gb_per_s
    top_ridge = max(ridges.values())
    ax.plot([x_lo, top_ridge], [bw * x_lo, bw * top_ridge], color="k", lw=2,
            label=f"memory roof: {three_digits(bw)} GB/s")  # fmt: skip
    for i, (dtype, peak) in enumerate(roofline.peak_gflop_per_s.items()):
        ridge, color = ridges[dtype], f"C{i}"
        ax.plot([ridge, x_hi], [peak, peak], color=color, lw=2,
                label=f"{dtype} roof: {format_gflop_per_s(peak)}")  # fmt: skip
        ax.plot([ridge], [peak], "o", color=color, ms=5)
        ax.annotate(f"ridge {three_digits(ridge)} FLOP/B", (ridge, peak), color=color,
                    textcoords="offset points", xytext=(4, -12), fontsize="x-small")  # fmt: skip
    for label, ai, gflop_per_s in marks:
        ax.plot([ai], [gflop_per_s], "*", color="C3", ms=11, zorder=3)
        ax.annotate(label, (ai, gflop_per_s), textcoords="offset points", xytext=(6, 4),
                    fontsize="small")  # fmt: skip
    ax.set_xlim(x_lo, x_hi)
    lowest = min([bw * x_lo, *(g for _, _, g in marks)])
    ax.set_ylim(lowest / 2, max(roofline.peak_gflop_per_s.values()) * 3)
    ax.legend(fontsize="small", loc="upper left")
    return style_axes(
        ax,
        xlabel="arithmetic intensity (FLOP/byte)",
        ylabel="performance (GFLOP/s)",
        title="Roofline: measured roofs and operations",
        device=roofline.device,
        logx=True,
        logy=True,
    )


def _roofline_points(points: Any) -> list[tuple[str, float, float]]:
    """Normalise OpMeasurements and (label, FLOP/byte, GFLOP/s) tuples; both numbers > 0."""
    import math
    import numbers

    from labkit.roofline_measure import OpMeasurement

    if isinstance(points, (str, bytes)) or not hasattr(points, "__iter__"):
        raise TypeError(f"points must be a list of measurements, got {type(points).__name__}")
    marks = []
    for i, point in enumerate(points):
        if isinstance(point, OpMeasurement):
            mark = (point.label, point.arithmetic_intensity, point.gflop_per_s)
        elif isinstance(point, tuple) and len(point) == 3 and isinstance(point[0], str):
            mark = point
        else:
            raise TypeError(
                f"points[{i}] must be an OpMeasurement (labkit.roofline.measure_op) or a "
                f"(label, FLOP/byte, GFLOP/s) tuple, got {point!r}"
            )
        for what, value in (("FLOP/byte", mark[1]), ("GFLOP/s", mark[2])):
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(f"points[{i}]: {what} must be a number, got {value!r}")
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"points[{i}]: {what} must be > 0 on a log axis, got {value!r}")
        marks.append((mark[0], float(mark[1]), float(mark[2])))
    return marks


def _bytes_ticks(axis: Any, low: float, high: float) -> None:
    """Ticks at powers of two labelled "16 KiB", "1 MiB", "1 GiB", at most about eight of them."""
    import math

    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    from labkit.memory import format_bytes

    first, last = math.floor(math.log2(low)), math.ceil(math.log2(high))
    step = max(1, math.ceil((last - first + 1) / 8))
    ticks = [2.0**e for e in range(first, last + 1) if e % step == 0]
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: format_bytes(int(round(v)))))


def plot_stream_sweep(result: Any, ax: Any = None) -> Any:
    """GB/s against working-set size for each STREAM kernel, with the cache sizes marked.

    The x axis is the working set, all the bytes one call touches (2 arrays
    for copy and scale, 3 for add and triad), so every kernel falls off a
    cliff at the same place: where the data stops fitting in a cache. Dotted
    lines mark the caches; L1d and L2 are per core, so with several threads
    running the cliff can sit a little to their right.
    """
    from labkit.memory import format_bytes
    from labkit.stream_sweep import StreamSweep

    if not isinstance(result, StreamSweep):
        raise TypeError(
            f"Expected an instance of StreamSweep for result, got {type(result).__name__} "
            "instead; pass the result of labkit.bandwidth.stream_sweep()"
        )
    if not result.rows:
        raise ValueError("the sweep has no rows to plot")
    check_ax(ax)
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 4.5))
    for i, kernel in enumerate(result.kernels):
        rows = result.rows_for(kernel)
        ax.plot([r.bytes_per_call for r in rows], [r.gb_per_s for r in rows], marker="o", ms=3,
                color=f"C{i}", label=kernel)  # fmt: skip
    xs = [r.bytes_per_call for r in result.rows]
    low, high = min(xs) / 1.5, max(xs) * 1.5
    per_core = result.device == "cpu"
    for name, size in result.caches:
        if low <= size <= high:
            ax.axvline(size, color="0.4", ls=":", lw=1)
            where = " per core" if per_core and name in ("L1d", "L2") else ""
            ax.annotate(f"{name}{where}\n{format_bytes(size)}", (size, 0.98),
                        xycoords=("data", "axes fraction"), xytext=(3, 0),
                        textcoords="offset points", va="top", fontsize="x-small", color="0.3")  # fmt: skip
    style_axes(
        ax,
        xlabel="working set: bytes of all arrays one call touches",
        ylabel="bandwidth (GB/s, STREAM counting)",
        title=f"STREAM kernels by working-set size ({result.dtype})",
        device=result.device,
        logx=True,
    )
    ax.set_xlim(low, high)
    ax.set_ylim(0, max(r.gb_per_s for r in result.rows) * 1.15)
    _bytes_ticks(ax.xaxis, low, high)
    ax.legend(fontsize="small", loc="upper right")
    return ax


def plot_strided(result: Any, *, ax: Any = None) -> Any:
    """Effective bandwidth against stride, with the bytes-only model for comparison.

    The model (one cache line fetched per value once the stride passes a
    line) explains the first steps; where the measurement departs from it,
    prefetchers and the TLB are at work.
    """
    from labkit.strided import StridedResult

    if not isinstance(result, StridedResult):
        raise TypeError(
            f"Expected an instance of StridedResult for result, got {type(result).__name__} instead."
        )
    if not result.rows:
        raise ValueError("result has no rows to plot")
    check_ax(ax)
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots()
    strides = list(result.strides)
    base = result.row(1).gb_per_s if 1 in strides else result.rows[0].gb_per_s
    ax.plot(strides, [r.gb_per_s for r in result.rows], "o-", label="measured")
    ax.plot(
        strides,
        [base / result.expected_slowdown(s) for s in strides],
        "--", color="0.5", label=f"bytes-only model ({result.line_bytes}-byte lines)",
    )  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_xticks(strides, [str(s) for s in strides])
    ax.legend(fontsize="small")
    style_axes(
        ax,
        xlabel="stride (elements between the values summed)",
        ylabel="effective bandwidth (useful GB/s)",
        title=f"Strided reads of {result.dtype}",
        device=result.device,
        logy=True,
    )
    _plain_log_ticks(ax.yaxis)
    return ax


def plot_pipeline(breakdowns: Any, *, ax: Any = None) -> Any:
    """Copy-in, compute and copy-back as stacked bars, one bar per operation.

    Side by side, a memory-bound op (most of its bar is copying) and a
    compute-heavy op (a sliver of copying) show when transfers dominate.
    """
    from labkit.pipeline import PipelineBreakdown

    if isinstance(breakdowns, PipelineBreakdown):
        items = [breakdowns]
    elif isinstance(breakdowns, (str, bytes)) or not isinstance(breakdowns, Iterable):
        items = []
    else:
        items = list(breakdowns)
    if not items or not all(isinstance(b, PipelineBreakdown) for b in items):
        raise TypeError("breakdowns must be one PipelineBreakdown or a non-empty list of them")
    check_ax(ax)
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots()
    labels = [b.op for b in items]
    parts = [
        ("copy in", [b.copy_in_ms for b in items], "C0"),
        ("compute", [b.compute_ms for b in items], "C1"),
        ("copy back", [b.copy_back_ms for b in items], "C2"),
    ]
    left = [0.0] * len(items)
    for name, values, color in parts:
        ax.barh(labels, values, left=left, color=color, label=name)
        left = [a + b for a, b in zip(left, values, strict=True)]
    for y, b in enumerate(items):
        ax.text(left[y], y, f"  {b.transfer_fraction:.0%} moving data", va="center", fontsize="small")
    ax.set_xlim(0, max(left) * 1.45)
    ax.legend(loc="lower right", fontsize="small")
    return style_axes(
        ax,
        xlabel="time per call (ms, medians)",
        ylabel="operation",
        title="Copy in → compute → copy back",
        device=items[0].device,
    )


def plot_timings(timings: Any, *, ax: Any = None, title: str = "Median time per call") -> Any:
    """Medians as horizontal bars with the IQR as error bars: a picture of ``labkit.compare``.

    The error bars are the point: two bars whose IQRs overlap are not
    reliably different, whatever their medians say.
    """
    items = [] if isinstance(timings, (str, bytes)) or not isinstance(timings, Iterable) else list(
        timings
    )
    if not items or not all(isinstance(t, Timing) for t in items):
        raise TypeError("timings must be a non-empty sequence of labkit Timing objects")
    check_ax(ax)
    check_str("title", title)
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.5 * len(items) + 1.5))
    unit = duration_unit(min(t.median_ms for t in items))
    scale = _UNIT_SCALE[unit]
    labels = [t.label or f"#{i}" for i, t in enumerate(items)]
    medians = [t.median_ms * scale for t in items]
    low = [(t.median_ms - t.q1_ms) * scale for t in items]
    high = [(t.q3_ms - t.median_ms) * scale for t in items]
    ax.barh(labels, medians, xerr=[low, high], color="C0", capsize=4)
    ax.invert_yaxis()  # first timing on top, as in the compare table
    return style_axes(
        ax, xlabel=f"median time per call ({unit}; bars show the IQR)", ylabel="variant",
        title=title, device=items[0].device,
    )


def plot_throughput(curves: Any, *, ax: Any = None) -> Any:
    """Images per second against batch size, one line per variant (log-log).

    ``curves`` maps a variant's name to the rows of
    :func:`labkit.models.throughput_by_batch`.
    """
    if not isinstance(curves, dict) or not curves:
        raise TypeError("curves must be a non-empty dict of variant name -> throughput rows")
    curves = dict(curves)  # a generator of rows is read once, here
    for name, rows in curves.items():
        if isinstance(rows, (str, bytes)) or not isinstance(rows, Iterable):
            raise TypeError(f"curves[{name!r}] must be a list of throughput rows, got {rows!r:.60}")
        curves[name] = rows = list(rows)
        for row in rows:
            if not all(hasattr(row, a) for a in ("batch_size", "images_per_s", "device")):
                raise TypeError(
                    f"curves[{name!r}] must hold rows of labkit.models.throughput_by_batch "
                    f"(with batch_size, images_per_s, device), got {type(row).__name__}"
                )
    check_ax(ax)
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots()
    device = None
    for name, rows in curves.items():
        rows = list(rows)
        if not rows:
            continue
        device = device or rows[0].device
        ax.plot([r.batch_size for r in rows], [r.images_per_s for r in rows], "o-", label=name)
    ax.legend(fontsize="small")
    style_axes(
        ax, xlabel="batch size (images per call)", ylabel="throughput (images/s)",
        title="Throughput against batch size", device=device, logx=True, logy=True,
    )
    _plain_log_ticks(ax.xaxis)
    _plain_log_ticks(ax.yaxis)
    return ax
