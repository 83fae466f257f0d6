"""Argument checks shared by labkit's measurement modules: each error names the argument."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any


def check_positive_int(name: str, value: Any) -> int:
    """``value`` as an int, or an error naming ``name`` when it is not an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a positive integer, got {type(value).__name__} ({value!r})")
    if value < 1:
        raise ValueError(f"{name} must be a positive integer (>= 1), got {value!r}")
    return int(value)


def check_ms(name: str, value: Any, *, allow_zero: bool = False) -> float:
    """A finite time budget in ms, > 0 (or >= 0 with ``allow_zero``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of milliseconds, got {type(value).__name__}")
    bound = ">= 0" if allow_zero else "> 0"
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be a finite number of milliseconds {bound}, got {value!r}")
    return float(value)


def check_sizes(sizes: Any, name: str = "sizes") -> tuple[int, ...]:
    """Positive integer sizes, sorted, duplicates dropped."""
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence) or len(sizes) == 0:
        raise ValueError(f"{name} must be a non-empty list of positive integers, got {sizes!r}")
    checked = [check_positive_int(f"{name}[{i}]", s) for i, s in enumerate(sizes)]
    return tuple(sorted(set(checked)))
