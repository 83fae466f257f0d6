"""Images/s against batch size for notebook 05, one line per variant."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from labkit.core.validate import check_ax
from labkit.plotting import plain_log_ticks, pyplot, style_axes


def plot_throughput(curves: Any, *, ax: Any = None) -> Any:
    """Images per second against batch size, one line per variant (log-log).

    ``curves`` maps a variant's name to the rows of
    :func:`labkit.models.throughput.throughput_by_batch`.
    """
    if not isinstance(curves, dict) or not curves:
        raise TypeError("curves must be a non-empty dict of variant name -> throughput rows")
    curves = dict(curves)  # a generator of rows is read once, here
    for name, rows in curves.items():
        if isinstance(rows, (str, bytes)) or not isinstance(rows, Iterable):
            raise TypeError(f"curves[{name!r}] must be a list of throughput rows, got {rows!r:.60}")
        curves[name] = rows = list(rows)
        for row in rows:
            if not all(hasattr(row, a) for a in ("batch_size", "images_per_s", "device")):
                raise TypeError(
                    f"curves[{name!r}] must hold rows of labkit.models.throughput.throughput_by_batch "
                    f"(with batch_size, images_per_s, device), got {type(row).__name__}"
                )
    check_ax(ax)
    plt = pyplot()
    if ax is None:
        _, ax = plt.subplots()
    device = None
    for name, rows in curves.items():
        rows = list(rows)
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
