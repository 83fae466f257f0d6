"""Notebook 12's plot: the interpreter's time against the number of programs it runs."""

from __future__ import annotations

from typing import Any

from labkit.plotting import plain_log_ticks, pyplot, style_axes
from labkit.triton_kernels.interp import ProgramSweep


def plot_program_sweep(sweep: ProgramSweep) -> Any:
    """The copy's time by block size, against programs, on log axes, with the rounds' range."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    lows = [m - lo for m, lo in zip(sweep.median_ms, sweep.low_ms, strict=True)]
    highs = [hi - m for m, hi in zip(sweep.median_ms, sweep.high_ms, strict=True)]
    ax.errorbar(sweep.programs, sweep.median_ms, yerr=[lows, highs], fmt="o-", capsize=3)
    for p, m, b in zip(sweep.programs, sweep.median_ms, sweep.blocks, strict=True):
        ax.annotate(f"BLOCK {b:,}", (p, m), textcoords="offset points", xytext=(-8, 6), ha="right")
    style_axes(
        ax,
        xlabel="programs in the grid (n / BLOCK)",
        ylabel="time per launch (ms)",
        title=f"Triton's interpreter copying {sweep.n:,} floats: time follows the programs",
        device="cpu",
        logx=True,
        logy=True,
    )
    ax.margins(x=0.25, y=0.2)
    plain_log_ticks(ax.xaxis)
    plain_log_ticks(ax.yaxis)
    fig.tight_layout()
    return fig
