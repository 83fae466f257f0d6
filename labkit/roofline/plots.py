"""The roofline plot for notebook 03: the roofs, the ridge, and measured ops under them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from labkit.core.validate import check_real
from labkit.plotting import pyplot, style_axes

if TYPE_CHECKING:
    from labkit.roofline.measure import OpMeasurement
    from labkit.roofline.model import Roofline

#: A point given by hand: (label, FLOP/byte, GFLOP/s) or (label, FLOP/byte, GFLOP/s, dtype).
PointTuple = tuple[str, float, float] | tuple[str, float, float, str]


def plot_roofline(
    roofline: Roofline,
    points: Iterable[OpMeasurement | PointTuple] = (),
    *,
    ax: Any = None,
    title: str = "Roofline: measured roofs and operations",
) -> Any:
    """The roofline (log-log): the memory roof, a ceiling per dtype, the theoretical peaks, ops.

    Each dtype has one colour: its achieved ceiling (solid), its theoretical
    peak where the roofline has one (dashed), and the ops of that dtype
    (stars), each joined by a dotted line to the roof above it and labelled
    with the share of that roof it reached. The slanted memory roof stops at
    each dtype's own ceiling (in that dtype's colour above the lowest one),
    and a dashed slanted part continues it to the theoretical peak. ``points`` are
    :class:`labkit.roofline.measure.OpMeasurement` results or tuples
    ``(label, FLOP/byte, GFLOP/s[, dtype])`` (dtype: the default one).
    """
    from labkit.core.units import format_gflop_per_s, three_digits

    marks = _roofline_points(points, roofline)
    plt = pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(8.5, 5.5))
    ridges = {dtype: roofline.ridge_point(dtype) for dtype in roofline.dtypes}
    theory = {d: v for d, v in roofline.theoretical_gflop_per_s.items() if d in ridges}
    bw = roofline.peak_gb_per_s
    theory_ridges = [v / bw for v in theory.values()]
    intensities = [ai for _, ai, _, _ in marks]
    x_lo = min([min(ridges.values()) / 30, *(ai / 3 for ai in intensities)])
    x_hi = max([max([*ridges.values(), *theory_ridges]) * 30, *(ai * 3 for ai in intensities)])
    top = max([*roofline.peak_gflop_per_s.values(), *theory.values()])
    # one memory roof for every dtype, in black up to the highest ridge: drawn in a dtype's
    # colour, the segment the dtypes share would show one dtype's colour under another's
    # points (sixth review); each dtype's roof is min(this line, its own ceiling)
    ax.plot(
        [x_lo, max(ridges.values())],
        [bw * x_lo, bw * max(ridges.values())],
        color="k",
        lw=2,
        label=f"memory roof (STREAM): {three_digits(bw)} GB/s",
    )
    colors = {dtype: f"C{i}" for i, dtype in enumerate(roofline.dtypes)}
    for dtype, peak in roofline.peak_gflop_per_s.items():
        ridge, color = ridges[dtype], colors[dtype]
        ax.plot(
            [ridge, x_hi],
            [peak, peak],
            color=color,
            lw=2,
            label=f"{dtype} {roofline.ceiling_kind}: {format_gflop_per_s(peak)}",
        )
        ax.plot([ridge], [peak], "o", color=color, ms=5)
        ax.annotate(
            f"ridge {three_digits(ridge)} FLOP/B",
            (ridge, peak),
            color=color,
            textcoords="offset points",
            # up and to the left of the knee: the region above the memory roof
            # holds no points and no other roof, and each dtype's knee has its own height
            xytext=(-4, 5),
            ha="right",
            fontsize="x-small",
        )
        if dtype in theory:
            t_ridge = theory[dtype] / bw
            ax.plot(
                [min(ridge, t_ridge), t_ridge, x_hi],
                [bw * min(ridge, t_ridge), theory[dtype], theory[dtype]],
                color=color,
                lw=1.2,
                ls="--",
                label=f"{dtype} theoretical peak: {format_gflop_per_s(theory[dtype])}",
            )
    for i, (label, ai, rate, dtype) in enumerate(marks):
        color = colors[dtype]
        roof = roofline.attainable_gflop_per_s(ai, dtype)
        ax.plot([ai, ai], [rate, roof], ls=":", color=color, lw=1)
        ax.plot([ai], [rate], "*", color=color, ms=12, zorder=3, mec="k", mew=0.5)
        ax.annotate(
            f"{label} ({rate / roof:.0%} of roof)",
            (ai, rate),
            textcoords="offset points",
            # alternate below-right and above-left: neighbours do not overlap, and neither
            # label crosses the slanted roof a memory-bound point sits on
            xytext=(-6, 6) if i % 2 else (6, -12),
            ha="right" if i % 2 else "left",
            fontsize="x-small",
        )
    ax.set_xlim(x_lo, x_hi)
    lowest = min([bw * x_lo, *(g for _, _, g, _ in marks)])
    ax.set_ylim(lowest / 2, top * 3)
    # lower right: under the ceilings and right of the memory roof, where no roof runs and
    # only a point far below its roof could sit (upper left hid a low ridge's label)
    ax.legend(fontsize="x-small", loc="lower right", bbox_to_anchor=(1.0, 0.04), framealpha=0.9)
    ax.text(
        0.99,
        0.01,
        "GFLOP/s against FLOP/byte of minimum traffic; a point's colour is its dtype",
        transform=ax.transAxes,
        ha="right",
        va="bottom",
        fontsize="xx-small",
        color="0.35",
    )
    return style_axes(
        ax,
        xlabel="arithmetic intensity (FLOP/byte)",
        ylabel="performance (GFLOP/s)",
        title=title,
        device=roofline.device,
        logx=True,
        logy=True,
    )


def _roofline_points(
    points: Iterable[OpMeasurement | PointTuple], roofline: Roofline
) -> list[tuple[str, float, float, str]]:
    """(label, FLOP/byte, GFLOP/s, dtype) of each point; both numbers > 0 (a log axis).

    An op whose dtype has no roof here is drawn against the default dtype's.
    """
    from labkit.roofline.measure import OpMeasurement

    marks = []
    for i, point in enumerate(points):
        if isinstance(point, OpMeasurement):
            label, ai, rate = point.label, point.arithmetic_intensity, point.gflop_per_s
            dtype = point.op.dtype
        else:
            label, ai, rate = point[0], point[1], point[2]
            dtype = point[3] if len(point) > 3 else roofline.default_dtype  # type: ignore[misc]
        ai = check_real(f"points[{i}] (FLOP/byte)", ai, low=0, low_open=True)
        rate = check_real(f"points[{i}] (GFLOP/s)", rate, low=0, low_open=True)
        if dtype not in roofline.dtypes:
            dtype = roofline.default_dtype
        marks.append((label, ai, rate, dtype))
    return marks
