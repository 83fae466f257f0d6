"""Plots for notebook 02: the STREAM size sweep, strided reads, and the copy/compute pipeline."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from labkit.plotting import bytes_ticks, plain_log_ticks, pyplot, style_axes

if TYPE_CHECKING:
    from labkit.bandwidth.pipeline import GpuPrediction, PipelineBreakdown
    from labkit.bandwidth.strided import StridedResult
    from labkit.bandwidth.sweep import StreamSweep


def plot_stream_sweep(result: StreamSweep, ax: Any = None) -> Any:
    """GB/s against bytes per array for each STREAM kernel, with where the caches fill up.

    The x axis is bytes *per array*, the first column of the sweep's table.
    A dotted line marks the array size at which add's and triad's three
    arrays fill a cache: the cache's size / 3. L1d and L2 are private to a
    core on most CPUs, so for a run on several threads the line uses their
    total over the threads (2 threads: twice one core's), an upper bound
    (hence the "≤"): right when each thread has a physical core of its own,
    an overstatement where threads are SMT siblings of one core (common on
    small cloud VMs, whose guest view need not show it) or where cores share
    an L2 (some Intel E-core and Apple clusters). The L3 line is one L3
    instance, as the CPU reports it. The
    shaded region is measured (:meth:`StreamSweep.overhead_bytes_per_array`):
    there the sweep's fastest call is at least a fifth of every call, so a
    fixed per-call cost is a large part and the sweep cannot show what L1 or
    L2 deliver; a compiled loop that repeats inside one call could.
    """
    from labkit.core.units import format_bytes

    plt = pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 4.5))
    for i, kernel in enumerate(result.kernels):
        rows = result.rows_for(kernel)
        ax.plot(
            [r.bytes_per_array for r in rows],
            [r.gb_per_s for r in rows],
            marker="o",
            ms=3,
            color=f"C{i}",
            label=kernel,
        )
    xs = [r.bytes_per_array for r in result.rows]
    low, high = min(xs) / 1.5, max(xs) * 1.5
    threads = max((r.threads or 1) for r in result.rows)
    per_core = result.device == "cpu"
    arrays = 3
    for name, size in result.caches:
        copies = threads if per_core and name in ("L1d", "L2") else 1
        total = size * copies
        where = total / arrays
        if low <= where <= high:
            ax.axvline(where, color="0.4", ls=":", lw=1)
            label = f"≤ {copies} × {format_bytes(size)}" if copies > 1 else format_bytes(size)
            ax.annotate(
                f"{name}: {label}\n÷ {arrays} arrays",
                (where, 0.98),
                xycoords=("data", "axes fraction"),
                xytext=(3, 0),
                textcoords="offset points",
                va="top",
                fontsize="x-small",
                color="0.3",
            )
    overhead = result.overhead_bytes_per_array()
    if overhead is not None and low < overhead:
        ax.axvspan(low, overhead, color="0.9", zorder=0)
        ax.annotate(
            "fastest call ≥ 1/5\nof each call",
            (low, 0.80),
            xycoords=("data", "axes fraction"),
            xytext=(4, 0),
            textcoords="offset points",
            fontsize="x-small",
            color="0.3",
        )
    style_axes(
        ax,
        xlabel="bytes per array (add and triad touch 3 arrays, copy and scale 2)",
        ylabel="bandwidth (GB/s, STREAM counting)",
        title=f"STREAM kernels by array size ({result.dtype}, {threads} threads)",
        device=result.device,
        logx=True,
    )
    ax.set_xlim(low, high)
    ax.set_ylim(0, max(r.gb_per_s for r in result.rows) * 1.15)
    bytes_ticks(ax.xaxis, low, high)
    ax.legend(fontsize="small", loc="upper right")
    return ax


def plot_strided(result: StridedResult, *, ax: Any = None) -> Any:
    """Effective bandwidth against stride, with the bytes-only model for comparison.

    The model (one cache line fetched per value once the stride passes a
    line) explains the first steps. On a CPU a second line assumes the L2
    prefetcher completes every line to its 128-byte pair (Intel's "spatial"
    or adjacent-line prefetcher), which doubles the traffic at strides 32
    and 64.
    """
    plt = pyplot()
    if ax is None:
        _, ax = plt.subplots()
    strides = list(result.strides)
    base = result.row(1).gb_per_s if 1 in strides else result.rows[0].gb_per_s
    ax.plot(strides, [r.gb_per_s for r in result.rows], "o-", label="measured")
    ax.plot(
        strides,
        [base / result.expected_slowdown(s) for s in strides],
        "--",
        color="0.5",
        label=(
            f"bytes-only model ({result.line_bytes}-byte "
            + ("sectors" if result.device != "cpu" else "lines")
            + (", assumed" if result.device == "cpu" and result.line_source == "assumed" else "")
            + ")"
        ),
    )
    if result.device == "cpu":
        pair = 2 * result.line_bytes
        ax.plot(
            strides,
            [
                base / (min(s * result.itemsize_bytes, pair) / result.itemsize_bytes)
                for s in strides
            ],
            ":",
            color="0.5",
            label=f"lines fetched in pairs ({pair}-byte blocks)",
        )
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
    plain_log_ticks(ax.yaxis)
    return ax


#: Where the "timed together" tick stops when the whole took far longer than its parts.
TOGETHER_MAX_PERCENT = 130.0


def plot_pipeline(
    breakdowns: PipelineBreakdown | GpuPrediction | Iterable[PipelineBreakdown | GpuPrediction],
    *,
    ax: Any = None,
) -> Any:
    """Each pipeline's copy-in, compute and copy-back as shares of 100%, one bar each.

    Shares, not ms: on a linear time axis a 1 ms bar vanishes next to a
    100 ms one. The absolute times are written beside each bar. For a
    measured breakdown a black tick marks "all three, timed together"
    against the sum of the parts (100%). A :class:`GpuPrediction` draws the
    same pipeline predicted for a GPU, hatched.
    """
    from labkit.bandwidth.pipeline import GpuPrediction, PipelineBreakdown
    from labkit.core.units import format_duration

    if isinstance(breakdowns, PipelineBreakdown | GpuPrediction):
        items: list[Any] = [breakdowns]
    else:
        items = list(breakdowns)
    plt = pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 0.6 * len(items) + 2.4))
    labels = []
    for y, b in enumerate(items):
        predicted = isinstance(b, GpuPrediction)
        parts = (b.copy_in_ms, b.compute_ms, b.copy_back_ms)
        total = sum(parts)
        labels.append(
            f"{b.cpu.op}, {b.gpu.name} (predicted)" if predicted else f"{b.op}, {b.device}"
        )
        left = 0.0
        for i, (name, ms) in enumerate(
            zip(("copy in", "compute", "copy back"), parts, strict=True)
        ):
            share = 100 * ms / total if total else 0.0
            ax.barh(
                y,
                share,
                left=left,
                color=f"C{i}",
                hatch="//" if predicted else None,
                edgecolor="white",
                label=name if y == 0 else None,
            )
            left += share
        text = f"  {format_duration(total)}; {b.transfer_fraction:.0%} copying"
        marker = 0.0
        if not predicted and total:
            # a run where the whole took far longer than its parts would leave the axes:
            # the tick stops at TOGETHER_MAX_PERCENT and the text gives the real time
            marker = min(100 * b.total_ms / total, TOGETHER_MAX_PERCENT)
            ax.plot(
                [marker, marker],
                [y - 0.4, y + 0.4],
                color="black",
                lw=2,
                label="all three, timed together" if y == 0 else None,
            )
            text += f"; together {format_duration(b.total_ms)}"
        ax.text(max(left, marker) + 1, y, text, va="center", fontsize="x-small", clip_on=True)
    ax.set_yticks(range(len(items)), labels)
    ax.invert_yaxis()
    ax.set_xlim(0, 170)
    ax.set_xticks([0, 25, 50, 75, 100])
    # below the axes: inside, it would cover the annotation of a row
    ax.legend(
        loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=4, fontsize="x-small", frameon=False
    )
    first = items[0]
    return style_axes(
        ax,
        xlabel="share of the pipeline's time (%; 100% = the sum of the three steps)",
        ylabel="",
        title="Copy in → compute → copy back",
        device=first.cpu.device if isinstance(first, GpuPrediction) else first.device,
    )
