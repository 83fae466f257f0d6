"""Plots for notebook 08: samples/s and latency by batch size, and the loader comparison."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from labkit.batching.loaders import LoaderComparison, LoaderRun
from labkit.batching.sweep import BatchSweep


def plot_batch_sweep(result: BatchSweep, ax: Any = None) -> Any:
    """Samples/s (top) and latency per batch (bottom) against batch size, one line per mode.

    Two panels sharing the log2 x axis, rather than two y axes on one: each
    has its own gridlines and scale. The bands are each point's spread: the
    samples/s that the step's first and third quartile times give (IQR).
    Each mode's knee (the smallest batch at 90% of its peak) is circled: left
    of it a bigger batch is nearly free throughput; right of it the top line
    is flat while the bottom one keeps climbing, which is the trade-off.
    ``ax`` is the throughput axis (its figure gets the latency axis below it);
    the throughput axis is returned, ``ax.latency_ax`` is the other.
    """
    from labkit.plotting import plain_log_ticks, pyplot, style_axes

    plt = pyplot()
    from matplotlib.ticker import NullLocator

    if ax is None:
        fig, (ax, lat) = plt.subplots(
            2, 1, figsize=(7.5, 6), sharex=True, gridspec_kw={"height_ratios": [3, 2]}
        )
    else:
        lat = ax.figure.add_axes(ax.get_position().translated(0, -0.45), sharex=ax)
    for i, c in enumerate(result.curves):
        color = f"C{i}"
        xs = list(c.batch_sizes)
        rates = [p.samples_per_s for p in c.points]
        # the IQR of the step time, as samples/s (a slower step: fewer samples/s)
        low = [p.batch_size / (p.timing.q3_ms / 1e3) for p in c.points]
        high = [p.batch_size / (p.timing.q1_ms / 1e3) for p in c.points]
        ax.fill_between(xs, low, high, color=color, alpha=0.2, lw=0)
        ax.plot(xs, rates, "o-", color=color, ms=4, label=f"{c.mode} (band: IQR)")
        knee = c.points[c.batch_sizes.index(c.knee_batch)]
        ax.plot([knee.batch_size], [knee.samples_per_s], "o", ms=13, mfc="none", mec=color, mew=2)
        ax.annotate(
            f"knee: {knee.batch_size}" if c.flattened else f"still rising at {knee.batch_size}",
            (knee.batch_size, knee.samples_per_s),
            color=color,
            textcoords="offset points",
            xytext=(8, -14),
            fontsize="small",
        )
        lat.plot(xs, [p.latency_ms for p in c.points], "s-", color=color, ms=3, label=c.mode)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="small", loc="upper left")
    style_axes(
        ax,
        xlabel="",
        ylabel="throughput (samples/s)",
        title=f"Samples/s and latency by batch size: {result.model}",
        device=result.device,
    )
    lat.set_yscale("log")
    plain_log_ticks(lat.yaxis)
    lat.legend(fontsize="small", loc="upper left")
    style_axes(
        lat, xlabel="batch size (samples per step, log2)", ylabel="latency per batch (ms)", title=""
    )
    lat.set_xscale("log", base=2)
    sizes = sorted({b for c in result.curves for b in c.batch_sizes})
    step = 1 if len(sizes) <= 10 else 2
    lat.set_xticks(sizes[::step], [f"{b:g}" for b in sizes[::step]])
    lat.xaxis.set_minor_locator(NullLocator())
    ax.latency_ax = lat
    ax.figure.tight_layout()
    return ax


def plot_loader_comparison(
    comparison: LoaderComparison | Sequence[LoaderRun], ax: Any = None
) -> Any:
    """One horizontal bar per pipeline: mean time per step waiting for data, then computing.

    Equal compute, different waits: the grey part is time the device sat
    idle. The label at each bar's end gives the samples/s and the wait share.
    """
    from labkit.core.units import format_samples_per_s
    from labkit.plotting import pyplot, style_axes

    runs = list(comparison.runs) if isinstance(comparison, LoaderComparison) else list(comparison)
    plt = pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 0.6 * len(runs) + 1.8))
    labels = [r.label for r in runs]
    waits = [r.mean_wait_ms for r in runs]
    computes = [r.mean_compute_ms for r in runs]
    ax.barh(labels, waits, color="0.65", label="waiting for the next batch (device idle)")
    ax.barh(labels, computes, left=waits, color="C0", label="the step (device busy)")
    for y, r in enumerate(runs):
        ax.text(
            waits[y] + computes[y],
            y,
            f"  {format_samples_per_s(r.samples_per_s)}, {r.wait_fraction:.0%} waiting",
            va="center",
            fontsize="small",
        )
    ax.set_xlim(0, max(w + c for w, c in zip(waits, computes, strict=True)) * 1.6)
    ax.invert_yaxis()
    # below the axis, outside the bars, so that it never covers a bar's label
    ax.legend(loc="upper left", bbox_to_anchor=(0, -0.3), ncol=2, fontsize="small", frameon=False)
    return style_axes(
        ax,
        xlabel="time per step (ms, mean over the measured steps)",
        ylabel="input pipeline",
        title=f"Waiting for data vs computing, batch {runs[0].batch_size}",
        device=runs[0].device,
    )
