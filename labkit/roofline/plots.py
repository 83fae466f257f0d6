"""The roofline plot for notebook 03: the roofs, the ridge, and measured ops under them."""

from __future__ import annotations

from typing import Any

from labkit.core.validate import check_ax
from labkit.plotting import pyplot, style_axes


def plot_roofline(roofline: Any, points: Any = (), *, ax: Any = None) -> Any:
    """The roofline (log-log): the memory roof, one compute roof per dtype, and measured ops.

    ``points`` are :class:`labkit.roofline.measure.OpMeasurement` results or
    ``(label, FLOP/byte, GFLOP/s)`` tuples. A point under the slanted roof
    is limited by memory, one under a flat roof by arithmetic; the distance
    below its roof is what the kernel leaves on the table.
    """
    from labkit.core.units import format_gflop_per_s, three_digits
    from labkit.roofline.model import Roofline

    if not isinstance(roofline, Roofline):
        raise TypeError(
            f"Expected an instance of Roofline for roofline, got {type(roofline).__name__} "
            "instead; build one with labkit.roofline.measure.measure_roofline() or "
            "Roofline(device, peaks, gb_per_s)"
        )
    marks = _roofline_points(points)
    check_ax(ax)
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


def _roofline_points(points: Any) -> list[tuple[str, float, float]]:
    """Normalise OpMeasurements and (label, FLOP/byte, GFLOP/s) tuples; both numbers > 0."""
    import math
    import numbers

    from labkit.roofline.measure import OpMeasurement

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
                f"points[{i}] must be an OpMeasurement (labkit.roofline.measure.measure_op) or a "
                f"(label, FLOP/byte, GFLOP/s) tuple, got {point!r}"
            )
        for what, value in (("FLOP/byte", mark[1]), ("GFLOP/s", mark[2])):
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(f"points[{i}]: {what} must be a number, got {value!r}")
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"points[{i}]: {what} must be > 0 on a log axis, got {value!r}")
        marks.append((mark[0], float(mark[1]), float(mark[2])))
    return marks
