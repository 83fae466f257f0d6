"""Shared argument checks and text helpers for labkit.accel."""

from __future__ import annotations

import math
import numbers
from typing import Any

from labkit.core.units import format_duration


def check_positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a positive integer, got {type(value).__name__} instead")
    if value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def check_ms(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of milliseconds, got {type(value).__name__}")
    if not math.isfinite(float(value)) or value <= 0:
        raise ValueError(f"{name} must be a finite number of milliseconds > 0, got {value!r}")
    return float(value)


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
