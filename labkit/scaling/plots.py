"""Plots for notebook 10: scaling efficiency, all-reduce cost, communication against model size, gradient accumulation."""

from __future__ import annotations

from typing import Any

from labkit.core.units import round3
from labkit.scaling.accumulation import Accumulation
from labkit.scaling.ddp_trace import DdpBreakdown
from labkit.scaling.results import (
    AllreduceCost,
    ModelSizeComm,
    Scaling,
    plural,
)


def plot_scaling(scaling: Scaling, ax: Any = None) -> Any:
    """Measured samples/s against the number of processes, with the ideal N× line.

    The gap between the points and the dashed line is what running N
    processes costs: everything DDP's synchronization adds (the reducer, its
    threads' contention, the communication it did not hide) and, on a small
    CPU, processes sharing cores and memory bandwidth.
    """
    from labkit.plotting import pyplot, style_axes

    plt = pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    base = scaling.baseline
    ns = [r.nproc for r in scaling.rows]
    ideal = [base.samples_per_s * n / base.nproc for n in ns]
    ax.plot(ns, ideal, ls="--", color="0.5", label="ideal: N × one process")
    ax.plot(ns, [r.run.samples_per_s for r in scaling.rows], "o-", color="C0", label="measured")
    for r in scaling.rows:
        ax.annotate(
            f"{r.efficiency:.0%}",
            (r.nproc, r.run.samples_per_s),
            textcoords="offset points",
            xytext=(6, -12),
            fontsize="small",
        )
    ax.set_xticks(ns)
    ax.set_xlim(min(ns) - 0.3, max(ns) + 0.3)
    ax.set_ylim(0, max(ideal + [r.run.samples_per_s for r in scaling.rows]) * 1.15)
    ax.legend(fontsize="small", loc="upper left")
    return style_axes(
        ax,
        xlabel="processes N (same batch per process)",
        ylabel="throughput (samples/s)",
        title=f"Weak scaling of DDP ({base.backend}), efficiency at each point",
        device=base.device,
    )


def plot_allreduce(cost: AllreduceCost, ax: Any = None) -> Any:
    """All-reduce time (left axis) and bus bandwidth (right axis) against message size, log-log.

    Flat time on the left is latency; on the right time grows with size and
    busbw levels off at what the link delivers.
    """
    from labkit.plotting import bytes_ticks, pyplot, style_axes

    plt = pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    sizes = [r.size_bytes for r in cost.rows]
    ax.plot(sizes, [r.median_ms for r in cost.rows], "o-", color="C0", label="time (median)")
    style_axes(
        ax,
        xlabel="message size (bytes per rank)",
        ylabel="time per all-reduce (ms)",
        title=f"All-reduce on {plural(cost.nproc, 'process')} ({cost.backend})",
        device=cost.device,
        logx=True,
        logy=True,
    )
    low, high = min(sizes) / 1.5, max(sizes) * 1.5
    ax.set_xlim(low, high)
    bytes_ticks(ax.xaxis, low, high)
    # a tick at every measured size (not at powers of two between them)
    from matplotlib.ticker import FixedLocator

    ax.xaxis.set_major_locator(FixedLocator(sizes))
    if cost.nproc > 1:
        right = ax.twinx()
        right.plot(
            sizes, [r.busbw_gb_per_s for r in cost.rows], "s--", color="C1", label="bus bandwidth"
        )
        right.set_yscale("log")
        right.set_ylabel("bus bandwidth (GB/s)")
        handles = ax.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
        ax.legend(handles, [h.get_label() for h in handles], fontsize="small", loc="upper left")
    else:
        ax.legend(fontsize="small", loc="upper left")
    return ax


def plot_model_size(result: ModelSizeComm, ax: Any = None) -> Any:
    """Per width: the step with and without the all-reduce, and one all-reduce of all gradients.

    Grouped bars on a log axis (stacked bars would distort on it): the gap
    between the first two bars is everything DDP's synchronization adds (the
    reducer, its threads' contention and the communication it did not hide;
    notebook 10 section 1 splits it); the third is one all-reduce of all the
    gradients alone, timed apart.
    """
    from labkit.plotting import pyplot, style_axes

    plt = pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    labels = [f"width {r.width}\n{round3(r.parameter_count):,} params" for r in result.runs]
    bars = [
        ("step with all-reduce", [r.step.median_ms for r in result.runs], "C3"),
        ("step without (no_sync)", [r.local_step.median_ms for r in result.runs], "C0"),
        ("one all-reduce of all gradients", [r.allreduce.median_ms for r in result.runs], "C2"),
    ]
    width = 0.8 / len(bars)
    for i, (name, values, color) in enumerate(bars):
        xs = [x + (i - 1) * width for x in range(len(labels))]
        ax.bar(xs, values, width=width, color=color, label=name)
    ax.set_xticks(list(range(len(labels))), labels)
    ax.legend(fontsize="small", loc="upper left")
    return style_axes(
        ax,
        xlabel="model",
        ylabel="time (ms, medians)",
        logy=True,
        title="DDP step time and all-reduce cost, by model size",
        device=result.runs[0].device,
    )


def plot_accumulation(result: Accumulation, ax: Any = None) -> Any:
    """Time per effective batch, accumulated against direct, as bars with the IQR."""
    from labkit.timing.plots import plot_timings

    return plot_timings(
        [result.direct, result.accumulated],
        ax=ax,
        title=f"One effective batch of {result.effective_batch} samples",
    )


def plot_ddp_step(breakdowns: DdpBreakdown | list[DdpBreakdown], ax: Any = None) -> Any:
    """One profiled DDP step per breakdown, as a timeline: backward, each bucket's all-reduce.

    The step shown is the profiled DDP step with the median duration, so its
    times can differ from the medians the breakdown prints. Top row of each
    pair: the training thread's backward pass, then the optimizer step (a
    tick); bottom row: each bucket's all-reduce on the communication threads,
    all-reduces that overlap in time on separate lanes. What lies under the backward bar is hidden; what sticks out to
    its right, the training thread waits for.
    """
    items = list(breakdowns) if isinstance(breakdowns, (list, tuple)) else [breakdowns]
    from labkit.plotting import pyplot, style_axes

    plt = pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 1.2 + 1.1 * len(items)))
    labels = []
    for k, b in enumerate(items):
        ddp = sorted((s for s in b.steps if s.kind == "ddp"), key=lambda s: s.step_ms)
        step = ddp[len(ddp) // 2]
        top, bottom = 2 * k, 2 * k + 1
        ax.barh(
            top,
            step.backward_ms,
            left=step.backward_start_ms,
            color="C0",
            height=0.6,
            label="backward (training thread)" if k == 0 else None,
        )
        # all-reduces that run at the same time (gloo has several threads) go on separate lanes
        lanes: list[float] = []  # the end of the last all-reduce on each lane
        placed = []
        for a, e in step.allreduces_ms:
            lane = next((j for j, end in enumerate(lanes) if end <= a), len(lanes))
            if lane < len(lanes):
                lanes[lane] = e
            else:
                lanes.append(e)
            placed.append((lane, a, e))
        height = 0.6 / max(len(lanes), 1)
        for i, (lane, a, e) in enumerate(placed):
            ax.barh(
                bottom - 0.3 + (lane + 0.5) * height,
                e - a,
                left=a,
                color="C1",
                height=height * 0.9,
                edgecolor="k",
                lw=0.5,
                label="all-reduce of one bucket" if k == 0 and i == 0 else None,
            )
        if step.optimizer_start_ms is not None:
            ax.plot(
                [step.optimizer_start_ms] * 2,
                [top - 0.35, top + 0.35],
                color="k",
                lw=2,
                label="optimizer step starts" if k == 0 else None,
            )
        # where backward ended, across its pair of rows: all-reduce time right of it is exposed
        ax.plot([step.backward_end_ms] * 2, [top - 0.4, bottom + 0.4], color="C0", lw=0.8, ls=":")
        cap = "default buckets" if b.bucket_cap_mb is None else f"bucket_cap_mb={b.bucket_cap_mb:g}"
        labels += [f"{cap}: backward", f"{cap}: all-reduces"]
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlim(left=0)
    ax.legend(loc="upper left", bbox_to_anchor=(0, -0.3), ncol=2, fontsize="small", frameon=False)
    return style_axes(
        ax,
        xlabel="time from the start of the profiled step (ms)",
        ylabel="",
        title="One profiled DDP step (the median by duration): where the all-reduces ran",
    )
