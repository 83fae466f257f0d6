"""Images/s against batch size for notebook 05, one line per variant."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from labkit.plotting import plain_log_ticks, pyplot, style_axes

if TYPE_CHECKING:
    from labkit.models.throughput import BatchThroughput


def plot_throughput(curves: Mapping[str, Iterable[BatchThroughput]], *, ax: Any = None) -> Any:
    """Images per second against batch size, one line per variant (log-log).

    ``curves`` maps a variant's name to the rows of
    :func:`labkit.models.throughput.throughput_by_batch`.
    """
    plt = pyplot()
    if ax is None:
        _, ax = plt.subplots()
    device = None
    for name, given in curves.items():
        rows = list(given)  # a generator of rows is read once, here
        if not rows:
            continue
        device = device or rows[0].device
        ax.plot([r.batch_size for r in rows], [r.images_per_s for r in rows], "o-", label=name)
    ax.legend(fontsize="small")
    style_axes(
        ax,
        xlabel="batch size (images per call)",
        ylabel="throughput (images/s)",
        title="Throughput against batch size",
        device=device,
        logx=True,
        logy=True,
    )
    plain_log_ticks(ax.xaxis)
    plain_log_ticks(ax.yaxis)
    return ax
