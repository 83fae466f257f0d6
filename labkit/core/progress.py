"""Progress bars for sweeps that take more than a few seconds.

A student waiting 30 s on a silent cell assumes it hung. But a progress bar
prints elapsed times and rates to stderr, which would differ on every run of
a committed notebook, so builds and tests turn bars off with
``LABKIT_PROGRESS=0`` (the Makefile exports it for ``make notebooks`` and
``make test``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

ENV_VAR = "LABKIT_PROGRESS"


def enabled() -> bool:
    """Whether progress bars are shown: unless ``LABKIT_PROGRESS`` is 0, false, no or off."""
    return os.environ.get(ENV_VAR, "1").strip().lower() not in {"0", "false", "no", "off"}


def progress(
    items: Iterable[T], *, desc: str, total: int | None = None, show: bool | None = None
) -> Iterator[T]:
    """Iterate over ``items`` with a tqdm bar (a notebook widget where available).

    ``show=None`` follows :func:`enabled`; tqdm missing means no bar, never an error.
    """
    if not (enabled() if show is None else show):
        yield from items
        return
    try:
        from tqdm.auto import tqdm
    except ImportError:
        yield from items
        return
    yield from tqdm(items, desc=desc, total=total, leave=False)
