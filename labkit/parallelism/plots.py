"""Plots for notebook 01: throughput against size (with the crossover), and Amdahl's curve."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from labkit.core.validate import check_int
from labkit.plotting import device_name, plain_log_ticks, pyplot, style_axes

if TYPE_CHECKING:
    from labkit.parallelism.amdahl import ThreadScaling
    from labkit.parallelism.sweep import SizeSweep


def plot_size_sweep(
    sweep: SizeSweep, *, ax: Any = None, slow: str = "torch-all-threads", fast: str = "torch-cuda"
) -> Any:
    """Throughput against problem size, one line per backend (log-log), with the GPU crossover.

    On the left every backend is dominated by fixed costs (interpreter
    overhead, kernel launches, waking threads), so throughput grows with the
    size; each line flattens where that backend's hardware is saturated.
    When the sweep has both ``slow`` and ``fast`` (by default all CPU threads
    and CUDA), a dashed line marks the size from which ``fast`` stays faster.
    """
    from labkit.core.units import round3

    plt = pyplot()
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


def plot_amdahl(scaling: ThreadScaling, *, ax: Any = None, max_threads: int = 64) -> Any:
    """Measured speedups, Amdahl's curve for the inferred serial fraction, and the ideal line.

    The curve is solid over the thread counts that were measured and dashed
    beyond them, up to ``max_threads``, on a shaded background: that part is
    an extrapolation (it assumes the parallel part keeps scaling perfectly),
    and its band spans the serial fractions the rounds' spread allows. With
    a serial fraction f the speedup flattens towards 1/f (the dashed
    horizontal line) long before the ideal S(n) = n, which is the lesson of
    the law. Each measured point carries a bar from its lowest to its highest
    speedup over the rounds.

    When the speedups lie outside what Amdahl's law allows (S < 1: overhead
    or contention dominates; S > n: super-linear; see
    :attr:`~labkit.parallelism.amdahl.ThreadScaling.regime`), no curve, band
    or limit is drawn: only the ideal line, the measured points and a note
    saying why.
    """
    from labkit.parallelism.amdahl import OVERHEAD, SUPERLINEAR, amdahl_speedup

    max_threads = check_int("max_threads", max_threads, minimum=2)
    plt = pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 4.5))
    measured_top = scaling.max_measured_threads
    top = max(max_threads, measured_top)
    ns = [top ** (i / 100) for i in range(101)]
    ax.plot(ns, ns, ls=":", color="0.5", label="ideal: S(n) = n")
    f = scaling.serial_fraction
    regime = scaling.regime
    if regime in (OVERHEAD, SUPERLINEAR):
        note = (
            "speedup below 1: overhead or contention dominates;\n"
            if regime == OVERHEAD
            else "speedup above n: super-linear;\n"
        ) + "Amdahl's law does not describe this run\n(no fit, nothing extrapolated)"
        ax.text(
            0.97,
            0.05,
            note,
            transform=ax.transAxes,
            ha="right",
            va="bottom",
            fontsize="small",
            bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "C3"},
        )
    elif f is not None:
        inside = [n for n in ns if n <= measured_top] + [float(measured_top)]
        outside = [float(measured_top)] + [n for n in ns if n > measured_top]
        ax.plot(
            inside,
            [amdahl_speedup(f, n) for n in inside],
            color="C1",
            label=f"Amdahl, inferred f = {f:.3f} (threads measured)",
        )
        if len(outside) > 1:
            ax.axvspan(measured_top, top, color="0.93", zorder=0)
            ax.plot(
                outside,
                [amdahl_speedup(f, n) for n in outside],
                color="C1",
                ls="--",
                label=f"extrapolation beyond {measured_top} threads (not measured)",
            )
            low, high = scaling.serial_fraction_low, scaling.serial_fraction_high
            if low is not None and high is not None:
                ax.fill_between(
                    outside,
                    [amdahl_speedup(high, n) for n in outside],
                    [amdahl_speedup(low, n) for n in outside],
                    color="C1",
                    alpha=0.2,
                    lw=0,
                    label=f"f from {low:.3f} to {high:.3f} (spread over {scaling.rounds} rounds)",
                )
        if f > 0:
            cap = scaling.max_speedup_range()
            cap_text = (
                ""
                if cap is None or math.isinf(cap[1])
                else f" ({cap[0]:.3g}× to {cap[1]:.3g}× over the band)"
            )
            ax.axhline(
                1 / f, color="C1", ls="-.", lw=1, label=f"limit 1/f = {1 / f:.3g}×{cap_text}"
            )
    xs = [p.threads for p in scaling.points]
    ax.plot(
        xs, [p.speedup for p in scaling.points], "o", color="C0", ms=7, zorder=3, label="measured"
    )
    bars = [p for p in scaling.points if p.speedup_low is not None and p.speedup_high is not None]
    if bars:
        ax.vlines(
            [p.threads for p in bars],
            [p.speedup_low for p in bars],
            [p.speedup_high for p in bars],
            color="C0",
            lw=2,
            zorder=3,
        )
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
    plain_log_ticks(ax.xaxis)
    plain_log_ticks(ax.yaxis)
    return ax
