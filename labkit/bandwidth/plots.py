"""Plots for notebook 02: the STREAM size sweep, strided reads, and the copy/compute pipeline."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from labkit.plotting import bytes_ticks, plain_log_ticks, pyplot, style_axes

if TYPE_CHECKING:
    from labkit.bandwidth.pipeline import PipelineBreakdown
    from labkit.bandwidth.strided import StridedResult
    from labkit.bandwidth.sweep import StreamSweep


def plot_stream_sweep(result: StreamSweep, ax: Any = None) -> Any:
    """GB/s against working-set size for each STREAM kernel, with the cache sizes marked.

    The x axis is the working set, all the bytes one call touches (2 arrays
    for copy and scale, 3 for add and triad), so every kernel falls off a
    cliff at the same place: where the data stops fitting in a cache. Dotted
    lines mark the caches; L1d and L2 are per core, so with several threads
    running the cliff can sit a little to their right.
    """
    from labkit.core.units import format_bytes

    plt = pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 4.5))
    for i, kernel in enumerate(result.kernels):
        rows = result.rows_for(kernel)
        ax.plot(
            [r.bytes_per_call for r in rows],
            [r.gb_per_s for r in rows],
            marker="o",
            ms=3,
            color=f"C{i}",
            label=kernel,
        )
    xs = [r.bytes_per_call for r in result.rows]
    low, high = min(xs) / 1.5, max(xs) * 1.5
    per_core = result.device == "cpu"
    for name, size in result.caches:
        if low <= size <= high:
            ax.axvline(size, color="0.4", ls=":", lw=1)
            where = " per core" if per_core and name in ("L1d", "L2") else ""
            ax.annotate(
                f"{name}{where}\n{format_bytes(size)}",
                (size, 0.98),
                xycoords=("data", "axes fraction"),
                xytext=(3, 0),
                textcoords="offset points",
                va="top",
                fontsize="x-small",
                color="0.3",
            )
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
    bytes_ticks(ax.xaxis, low, high)
    ax.legend(fontsize="small", loc="upper right")
    return ax


def plot_strided(result: StridedResult, *, ax: Any = None) -> Any:
    """Effective bandwidth against stride, with the bytes-only model for comparison.

    The model (one cache line fetched per value once the stride passes a
    line) explains the first steps; where the measurement departs from it,
    prefetchers and the TLB are at work.
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
        label=f"bytes-only model ({result.line_bytes}-byte lines)",
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


def plot_pipeline(
    breakdowns: PipelineBreakdown | Iterable[PipelineBreakdown], *, ax: Any = None
) -> Any:
    """Copy-in, compute and copy-back as stacked bars, one bar per operation.

    Side by side, a memory-bound op (most of its bar is copying) and a
    compute-heavy op (a sliver of copying) show when transfers dominate.
    """
    from labkit.bandwidth.pipeline import PipelineBreakdown

    items = [breakdowns] if isinstance(breakdowns, PipelineBreakdown) else list(breakdowns)
    plt = pyplot()
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
        ax.text(
            left[y], y, f"  {b.transfer_fraction:.0%} moving data", va="center", fontsize="small"
        )
    ax.set_xlim(0, max(left) * 1.45)
    ax.legend(loc="lower right", fontsize="small")
    return style_axes(
        ax,
        xlabel="time per call (ms, medians)",
        ylabel="operation",
        title="Copy in → compute → copy back",
        device=items[0].device,
    )
