"""Images/s against batch size for notebook 05, one line per variant, with the IQR as whiskers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from labkit.plotting import plain_log_ticks, pyplot, style_axes

if TYPE_CHECKING:
    from labkit.models.throughput import BatchThroughput


#: Points whose calls took at least this many page faults each are ringed.
MANY_FAULTS = 1000


def _draw(ax: Any, name: str, rows: list[BatchThroughput]) -> list[tuple[int, float]]:
    x = [r.batch_size for r in rows]
    y = [r.images_per_s for r in rows]
    below = [r.images_per_s - r.images_per_s_low for r in rows]
    above = [r.images_per_s_high - r.images_per_s for r in rows]
    ax.errorbar(x, y, yerr=[below, above], fmt="o-", capsize=3, label=name)
    return [
        (r.batch_size, r.images_per_s)
        for r in rows
        if (r.minor_faults_per_call or 0) >= MANY_FAULTS
    ]


def plot_throughput(curves: Mapping[str, Iterable[BatchThroughput]], *, ax: Any = None) -> Any:
    """Images per second against batch size, one line per variant (log-log).

    ``curves`` maps a variant's name to the rows of
    :func:`labkit.models.throughput.throughput_by_batch`. Points are medians,
    whiskers the IQR (as images/s); a point whose calls took at least
    :data:`MANY_FAULTS` page faults each is ringed in black.
    """
    plt = pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(9.5, 4.2))
    device = image = None
    inference = True
    faulted: list[tuple[int, float]] = []
    for name, given in curves.items():
        rows = list(given)  # a generator of rows is read once, here
        if not rows:
            continue
        device = device or rows[0].device
        image = image or rows[0].image_size
        inference = inference and rows[0].inference
        faulted += _draw(ax, name, rows)
    if faulted:
        ax.scatter(
            *zip(*faulted, strict=True),
            s=160,
            facecolors="none",
            edgecolors="black",
            linewidths=1.5,
            label=f"≥ {MANY_FAULTS:,} page faults per call",
            zorder=3,
        )
    ax.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.02, 0.5))
    what = "inference (forward only)" if inference else "training step"
    size = f", {image}×{image} images" if image else ""
    style_axes(
        ax,
        xlabel="batch size (images per call)",
        ylabel="throughput (images/s; median, whiskers: IQR)",
        title=f"CNN throughput against batch size: {what}{size}",
        device=device,
        logx=True,
        logy=True,
    )
    plain_log_ticks(ax.xaxis)
    plain_log_ticks(ax.yaxis)
    ax.figure.tight_layout()
    return ax
