"""Plots for notebook 09: where a training step's time goes, phase by phase."""

from __future__ import annotations

from typing import Any

from labkit.profiling.torch_results import PHASES, TorchProfile


def plot_phases(*profiles: TorchProfile, ax: Any = None) -> Any:
    """Host time per step of each phase, one bar group per profile (device time hatched).

    Put the two loops side by side (``plot_phases(once, every_step)``): on a
    GPU the "logging" bar of the ``.item()`` loop is the host waiting for the
    device; on a CPU the two look alike, because nothing waits.
    """
    if not profiles:
        raise ValueError("plot_phases needs at least one TorchProfile")
    from labkit.plotting import pyplot, style_axes

    plt = pyplot()
    own_figure = ax is None
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    series: list[tuple[str, list[float], str | None]] = []
    for p in profiles:
        series.append((f"host, {p.loop}", [ph.cpu_ms_per_step for ph in p.phases], None))
        if p.device_timeline:
            series.append((f"device, {p.loop}", [ph.device_ms_per_step for ph in p.phases], "//"))
    height = 0.8 / len(series)
    ys = range(len(PHASES))
    for k, (name, values, hatch) in enumerate(series):
        offsets = [y - 0.4 + height * (k + 0.5) for y in ys]
        ax.barh(offsets, values, height=height, label=name, hatch=hatch, color=f"C{k}")
        total = sum(values)
        for y, v in zip(offsets, values, strict=True):  # the share of the step, at each bar
            share = v / total if total > 0 else 0.0
            ax.text(
                v, y, f" {share:.0%}" if share >= 0.005 else " <1%", va="center", fontsize="small"
            )
    ax.set_yticks(list(ys), list(PHASES))
    ax.invert_yaxis()
    ax.set_xlim(0, max(max(v) for _, v, _ in series) * 1.15 or 1)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize="small")
    # A linear axis, so that a bar's length is its time: microseconds of logging look as small
    # as they are next to milliseconds of forward (each bar also gives its share of the step).
    styled = style_axes(
        ax,
        xlabel="time per step (ms)",
        ylabel="phase",
        title="Where a training step's time goes",
        device=profiles[0].device,
    )
    if own_figure:
        ax.figure.tight_layout()
    return styled
