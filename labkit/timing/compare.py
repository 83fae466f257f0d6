"""Put several timings side by side: :func:`compare` returns a :class:`Comparison` table.

A speedup is only meaningful against something. ``compare`` names one timing
the baseline and reports, for every row, how many times faster it is than
that baseline (baseline median / row median): "3.21×" reads as "3.21 times
faster", "0.50×" as "twice as slow".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from labkit.core.results import JsonRecord
from labkit.core.units import format_duration, format_speedup
from labkit.timing.bench import NOISY_THRESHOLD, Timing


@dataclass(frozen=True)
class ComparisonRow(JsonRecord):
    """One timing in a comparison, with its speedup over the baseline."""

    label: str
    device: str
    median_ms: float
    iqr_ms: float
    min_ms: float
    n: int
    speedup: float
    noisy: bool


@dataclass(frozen=True)
class Comparison(JsonRecord):
    """A table of timings against one baseline; ``str()`` gives aligned plain text.

    As JSON: ``rows`` and ``baseline_index`` (the baseline row is ``rows[baseline_index]``).
    """

    rows: tuple[ComparisonRow, ...]
    baseline_index: int

    @property
    def baseline(self) -> ComparisonRow:
        return self.rows[self.baseline_index]

    def __str__(self) -> str:
        show_device = len({row.device for row in self.rows}) > 1
        header = ["", "median", "IQR", "min", "n", f"× vs {self.baseline.label}"]
        if show_device:
            header.insert(1, "device")
        table = [header]
        for i, row in enumerate(self.rows):
            cells = [
                row.label + (" (baseline)" if i == self.baseline_index else ""),
                format_duration(row.median_ms),
                format_duration(row.iqr_ms),
                format_duration(row.min_ms),
                f"n={row.n}",
                format_speedup(row.speedup),
            ]
            if show_device:
                cells.insert(1, row.device)
            table.append(cells)
        left = {0, 1} if show_device else {0}
        widths = [max(len(line[col]) for line in table) for col in range(len(header))]
        noisy = [False] + [row.noisy for row in self.rows]
        lines = [
            "  ".join(
                cell.ljust(width) if col in left else cell.rjust(width)
                for col, (cell, width) in enumerate(zip(line, widths, strict=True))
            ).rstrip()
            + ("  *" if flag else "")
            for line, flag in zip(table, noisy, strict=True)
        ]
        if any(noisy):
            lines.append(f"* noisy: IQR is more than {NOISY_THRESHOLD:.0%} of the median")
        return "\n".join(lines)


def compare(timings: Sequence[Timing], baseline: int | str | None = None) -> Comparison:
    """Tabulate ``timings`` with each one's speedup over ``baseline``.

    Args:
        timings: the results of :func:`labkit.bench`, in the order to show them.
        baseline: the row the others are compared with: an index into
            ``timings``, a label, or None for the first timing.

    Rows without a label are called "#0", "#1", ... by position.
    """
    if len(timings) == 0:
        raise ValueError("timings is empty: compare() needs at least one Timing")
    labels = [t.label if t.label else f"#{i}" for i, t in enumerate(timings)]
    index = _baseline_index(baseline, labels)
    base_ms = timings[index].median_ms
    rows = tuple(
        ComparisonRow(
            label=label,
            device=t.device,
            median_ms=t.median_ms,
            iqr_ms=t.iqr_ms,
            min_ms=t.min_ms,
            n=t.n,
            speedup=_ratio(base_ms, t.median_ms),
            noisy=t.noisy,
        )
        for label, t in zip(labels, timings, strict=True)
    )
    return Comparison(rows=rows, baseline_index=index)


def _ratio(base_ms: float, ms: float) -> float:
    if ms > 0:
        return base_ms / ms
    return 1.0 if base_ms == 0 else math.inf


def _baseline_index(baseline: int | str | None, labels: list[str]) -> int:
    if baseline is None:
        return 0
    if isinstance(baseline, str):
        matches = [i for i, label in enumerate(labels) if label == baseline]
        if not matches:
            raise ValueError(
                f"baseline={baseline!r} matches no timing's label; the labels are "
                f"{', '.join(repr(label) for label in labels)}"
            )
        if len(matches) > 1:
            raise ValueError(
                f"baseline={baseline!r} matches {len(matches)} timings; give them distinct "
                "labels (bench(..., label=...)) or pass the baseline's index"
            )
        return matches[0]
    if not -len(labels) <= baseline < len(labels):
        raise ValueError(
            f"baseline={baseline} is out of range for {len(labels)} timings "
            f"(use 0 to {len(labels) - 1}, or a label)"
        )
    return baseline % len(labels)
