"""Plots for notebook 07: kernels against their ceilings, occupancy, the race, the tuner's search."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from labkit.core.validate import check_int, check_positive_int
from labkit.kernels.comparison import KernelComparison
from labkit.kernels.occupancy import LIMITERS, OccupancySweep
from labkit.kernels.tuning import TuningReplay

if TYPE_CHECKING:  # the simulator imports numpy and numba-cuda's pieces: only when it is used
    from labkit.kernels.sim_results import RaceDemo

_LIMITER_COLORS = {"threads": "C0", "blocks": "C2", "registers": "C3", "shared memory": "C1"}


def plot_kernels(result: KernelComparison | Mapping[str, Any], ax: Any = None) -> Any:
    """A comparison as a picture: rates against the ceiling (a dashed line).

    ``result`` is a :class:`KernelComparison`, or its ``to_dict()`` as stored
    in the ``kernels`` recording (``labkit.machine.reference.load("kernels").results
    ["experiments"]["stride sweep"]``), so a CPU-only notebook can plot what
    a GPU measured. Sweeps (strides, block sizes) are lines over a log2 axis;
    version comparisons are horizontal bars labelled with their fraction of
    the ceiling.
    """
    from labkit.plotting import pyplot, style_axes

    data = result.to_dict() if isinstance(result, KernelComparison) else dict(result)
    plt = pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    runs, unit, top = data["runs"], data["unit"], float(data["ceiling"]["rate"])
    ceiling = f"ceiling: {data['ceiling']['name']}"
    title = f"{data['experiment']}\non {data['device']}"
    if data.get("param_name"):
        xs = [r["param"] for r in runs]
        ax.plot(xs, [r["rate"] for r in runs], "o-", label=runs[0]["name"])
        ax.axhline(top, color="0.3", ls="--", lw=1, label=ceiling)
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.set_ylim(0, max([top, *(r["rate"] for r in runs)]) * 1.15)
        ax.legend(fontsize="small", loc="best")
        return style_axes(ax, xlabel=data["param_name"], ylabel=f"rate ({unit})", title=title)
    labels = [r["label"] for r in runs]
    rates = [r["rate"] for r in runs]
    ax.barh(labels, rates, color="C0")
    ax.invert_yaxis()
    ax.axvline(top, color="0.3", ls="--", lw=1, label=ceiling)
    for y, r in enumerate(runs):
        ax.text(r["rate"], y, f" {r['fraction']:.0%}", va="center", fontsize="small")
    ax.set_xlim(0, max([top, *rates]) * 1.2)
    ax.legend(fontsize="small", loc="lower right")
    return style_axes(ax, xlabel=f"rate ({unit}; {data['counting']})", ylabel="kernel", title=title)


def plot_occupancy(
    sweep: OccupancySweep | list[OccupancySweep] | tuple[OccupancySweep, ...], ax: Any = None
) -> Any:
    """Occupancy (%) against threads per block; each point coloured by the resource that limits it.

    Pass several sweeps (say, one kernel at different register counts, or two
    kernels) to draw them on one axis; their points are then plain, with one
    line per sweep.
    """
    sweeps = list(sweep) if isinstance(sweep, (list, tuple)) else [sweep]
    from labkit.plotting import pyplot, style_axes

    plt = pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.5))
    markers = ("o", "s", "^", "D", "v", "P")
    fail_label = "cannot launch"
    for i, s in enumerate(sweeps):
        fits = [r for r in s.rows if r.fits]
        xs = [r.threads_per_block for r in fits]
        ys = [r.percent for r in fits]
        details = f"{s.registers_per_thread} regs, {s.shared_bytes_per_block:,} B smem"
        # a sweep named after its registers (the notebook's "64 registers/thread") says it once
        label = s.kernel if "register" in s.kernel else f"{s.kernel} ({details})"
        fails = [r.threads_per_block for r in s.rows if not r.fits]
        if len(sweeps) == 1:
            ax.plot(xs, ys, "-", color="0.6", lw=1, zorder=1)
            for limiter in LIMITERS:
                hit = [r for r in fits if r.limited_by[0] == limiter]
                if hit:
                    ax.plot(
                        [r.threads_per_block for r in hit],
                        [r.percent for r in hit],
                        "o",
                        ms=4,
                        color=_LIMITER_COLORS[limiter],
                        label=f"limited by {limiter}",
                        zorder=2,
                    )
            title = f"Theoretical occupancy of {s.kernel} ({details})\non {s.gpu} ({s.arch})"
        else:
            ax.plot(xs, ys, "-", marker=markers[i % len(markers)], ms=4, color=f"C{i}", label=label)
            title = f"Theoretical occupancy on {s.gpu} ({s.arch})"
        if fails:  # a block that cannot launch is not 0% occupancy: a cross on the axis
            ax.plot(
                fails,
                [0] * len(fails),
                "x",
                ms=7,
                mew=2,
                color=f"C{i}" if len(sweeps) > 1 else "k",
                label=fail_label,
                zorder=3,
            )
            fail_label = "_nolegend_"
    ax.set_ylim(-4, 105)
    ax.set_xscale("log", base=2)
    sizes = sorted({r.threads_per_block for s in sweeps for r in s.rows})
    ticks = [t for t in (32, 64, 128, 256, 512, 1024) if sizes[0] <= t <= sizes[-1]] or sizes
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(t) for t in ticks])
    ax.set_xlim(sizes[0] / 1.25, sizes[-1] * 1.25)
    # beside the plot, so that no line or point hides under it
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    style_axes(ax, xlabel="threads per block", ylabel="occupancy (% of max warps/SM)", title=title)
    ax.figure.tight_layout()
    return ax


def plot_race(demo: RaceDemo, *, runs: int = 3, ax: Any = None) -> Any:
    """Where each run of :func:`race_demo` went wrong: one n×n map per run, wrong elements dark.

    Side by side, the maps show both lessons at once: every run has wrong
    elements, and (with threads started together) not the same ones.
    ``ax`` may be a sequence of axes, one per run shown.
    """
    import numpy as np

    shown = check_int("runs", runs, minimum=1, maximum=demo.runs)
    from labkit.plotting import pyplot, style_axes

    plt = pyplot()
    if ax is None:
        _, axes = plt.subplots(1, shown, figsize=(2.6 * shown + 0.5, 3.0), squeeze=False)
        axes = list(axes[0])
    else:
        axes = list(ax) if isinstance(ax, (list, tuple, np.ndarray)) else [ax]
        if len(axes) != shown:
            raise ValueError(f"ax must hold {shown} axes (one per run shown), got {len(axes)}")
    for i, axis in enumerate(axes):
        grid = np.zeros(demo.elements, dtype=np.int8)
        grid[list(demo.wrong_indices[i])] = 1
        axis.imshow(
            grid.reshape(demo.n, demo.n), cmap="Greys", vmin=0, vmax=1, interpolation="nearest"
        )
        for edge in range(demo.block, demo.n, demo.block):  # tile borders
            axis.axhline(edge - 0.5, color="C0", lw=0.6)
            axis.axvline(edge - 0.5, color="C0", lw=0.6)
        style_axes(
            axis, xlabel="column", ylabel="row", title=f"run {i + 1}: {demo.wrong_per_run[i]} wrong"
        )
        if i:
            axis.set_ylabel("")  # the rows are labelled once, on the left
        axis.grid(False)
    axes[0].figure.suptitle(
        "transpose without __syncthreads(): wrong elements (dark)", fontsize="medium"
    )
    return axes[0] if len(axes) == 1 else axes


def plot_tuning(result: TuningReplay, ax: Any = None, *, top: int = 20) -> Any:
    """Mean time per configuration, fastest first (at most ``top`` bars), the best highlighted.

    The spread between the best and the worst bar is the point: the same
    kernel, only its compile-time parameters changed.
    """
    from labkit.core.units import duration_unit
    from labkit.plotting import pyplot, style_axes

    valid = result.valid[: check_positive_int("top", top)]
    if not valid:
        raise ValueError(f"no configuration of {result.kernel} ran successfully: nothing to plot")
    plt = pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.3 * len(valid) + 1.8))
    unit = duration_unit(valid[0].time_ms or 0.0)
    scale = {"ns": 1e6, "µs": 1e3, "ms": 1.0, "s": 1e-3}[unit]
    labels = [c.describe() for c in valid]
    times = [(c.time_ms or 0.0) * scale for c in valid]
    colors = ["C2"] + ["C0"] * (len(valid) - 1)
    ax.barh(labels, times, color=colors)
    ax.invert_yaxis()
    shown = (
        f"fastest {len(valid)} of {len(result.valid)}"
        if len(result.valid) > len(valid)
        else (f"all {len(valid)}")
    )
    return style_axes(
        ax,
        xlabel=f"mean time per launch ({unit})",
        ylabel="configuration",
        title=f"Kernel Tuner: {result.kernel}, {shown} verified configurations\non {result.device}",
    )
