"""The roofline plot for notebook 03: the roofs, the ridge, and measured ops under them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from labkit.core.validate import check_real
from labkit.plotting import pyplot, style_axes

if TYPE_CHECKING:
    from labkit.roofline.measure import OpMeasurement
    from labkit.roofline.model import Roofline


def plot_roofline(
    roofline: Roofline,
    points: Iterable[OpMeasurement | tuple[str, float, float]] = (),
    *,
    ax: Any = None,
) -> Any:
    """The roofline (log-log): the memory roof, one compute roof per dtype, and measured ops.

    ``points`` are :class:`labkit.roofline.measure.OpMeasurement` results or
    ``(label, FLOP/byte, GFLOP/s)`` tuples. A point under the slanted roof
    is limited by memory, one under a flat roof by arithmetic; the distance
    below its roof is what the kernel leaves on the table.
    """
    from labkit.core.units import format_gflop_per_s, three_digits

    marks = _roofline_points(points)
    plt = pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 5))
    ridges = {dtype: roofline.ridge_point(dtype) for dtype in roofline.dtypes}
    intensities = [ai for _, ai, _ in marks]
    x_lo = min([min(ridges.values()) / 30, *(ai / 3 for ai in intensities)])
    x_hi = max([max(ridges.values()) * 30, *(ai * 3 for ai in intensities)])
    bw = roofline.peak_gb_per_s
    top_ridge = max(ridges.values())
    ax.plot(
        [x_lo, top_ridge],
        [bw * x_lo, bw * top_ridge],
        color="k",
        lw=2,
        label=f"memory roof: {three_digits(bw)} GB/s",
    )
    for i, (dtype, peak) in enumerate(roofline.peak_gflop_per_s.items()):
        ridge, color = ridges[dtype], f"C{i}"
        ax.plot(
            [ridge, x_hi],
            [peak, peak],
            color=color,
            lw=2,
            label=f"{dtype} roof: {format_gflop_per_s(peak)}",
        )
        ax.plot([ridge], [peak], "o", color=color, ms=5)
        ax.annotate(
            f"ridge {three_digits(ridge)} FLOP/B",
            (ridge, peak),
            color=color,
            textcoords="offset points",
            xytext=(4, -12),
            fontsize="x-small",
        )
    for label, ai, gflop_per_s in marks:
        ax.plot([ai], [gflop_per_s], "*", color="C3", ms=11, zorder=3)
        ax.annotate(
            label, (ai, gflop_per_s), textcoords="offset points", xytext=(6, 4), fontsize="small"
        )
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


def _roofline_points(
    points: Iterable[OpMeasurement | tuple[str, float, float]],
) -> list[tuple[str, float, float]]:
    """(label, FLOP/byte, GFLOP/s) of each OpMeasurement or tuple; both numbers > 0 (a log axis)."""
    from labkit.roofline.measure import OpMeasurement

    marks = []
    for i, point in enumerate(points):
        if isinstance(point, OpMeasurement):
            label, ai, rate = point.label, point.arithmetic_intensity, point.gflop_per_s
        else:
            label, ai, rate = point
        ai = check_real(f"points[{i}] (FLOP/byte)", ai, low=0, low_open=True)
        rate = check_real(f"points[{i}] (GFLOP/s)", rate, low=0, low_open=True)
        marks.append((label, ai, rate))
    return marks
