"""Text helpers shared by labkit.accel (its argument checks are :mod:`labkit.core.validate`'s)."""

from __future__ import annotations

import math
from typing import Any

from labkit.core.units import format_duration
from labkit.timing.bench import Timing


def ratio(numerator_ms: float, denominator_ms: float) -> float:
    """numerator / denominator, inf when the denominator is 0 (1.0 when both are)."""
    if denominator_ms > 0:
        return numerator_ms / denominator_ms
    return 1.0 if numerator_ms == 0 else math.inf


def times(value: float) -> str:
    """3.2147 -> "3.21×" (the form the notebooks' sanitize file masks)."""
    return "inf×" if math.isinf(value) else f"{value:.2f}×"


def seconds(value_s: float) -> str:
    return format_duration(value_s * 1e3)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def round_median_ms(timing: Timing, rounds: Any) -> float:
    """The median to report for a timing that pools interleaved rounds.

    With ``rounds`` (:class:`labkit.timing.interleave.Interleaved`), the median
    of the timing's round medians: the statistic the per-round ranges describe,
    which a pooled median can fall outside. Without (a result built by hand),
    the timing's own median.
    """
    return timing.median_ms if rounds is None else rounds[timing.label].median_ms
