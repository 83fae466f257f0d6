"""Plots of timings: every sample of one :class:`Timing`, and several medians side by side."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from labkit.core.units import duration_unit
from labkit.plotting import plain_log_ticks, pyplot, style_axes
from labkit.timing.bench import Timing

_UNIT_SCALE = {"ns": 1e6, "µs": 1e3, "ms": 1.0, "s": 1e-3}


def plot_samples(timing: Timing, *, ax: Any = None) -> Any:
    """Every sample of a :class:`Timing` in the order it was taken, with its median and IQR.

    The first call (lazy initialisation, compilation) is drawn apart from the
    samples because it is not one of them: this picture is why ``bench`` warms
    up, and why it reports the median rather than the mean.
    """
    plt = pyplot()
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
    plain_log_ticks(ax.yaxis)
    shown = [timing.min_ms, timing.max_ms] + [v for v in [timing.first_call_ms] if v is not None]
    # headroom above keeps the legend off the data (the axis is logarithmic)
    ax.set_ylim(min(shown) * scale / 1.5, max(shown) * scale * 3)
    ax.legend(loc="upper center", ncol=4, fontsize="small")
    return style_axes(
        ax,
        xlabel="sample number (0 = the first call; warm-up calls not shown)",
        ylabel=f"time per call ({unit})",
        title=f"{timing.label or 'timed call'}: every sample",
        device=timing.device,
    )


def plot_timings(
    timings: Iterable[Timing], *, ax: Any = None, title: str = "Median time per call"
) -> Any:
    """Medians as horizontal bars with the IQR as error bars: a picture of ``labkit.compare``.

    The error bars are the point: two bars whose IQRs overlap are not
    reliably different, whatever their medians say.
    """
    items = list(timings)
    if not items:
        raise ValueError("timings is empty: plot_timings() needs at least one Timing")
    plt = pyplot()
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
        ax,
        xlabel=f"time per call ({unit}): bars are medians, whiskers the IQR",
        ylabel="variant",
        title=title,
        device=items[0].device,
    )
