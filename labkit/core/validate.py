"""The one set of argument checks: for the values a person types, each error naming the argument.

What is checked: sizes, counts, durations in ms, fractions, seeds, names
chosen from a list, and device spellings, at the top of the public function
that takes them, before any work or framework import, so a slip in a
notebook cell is one line that says what to type instead.

What is not: types a type checker catches (a flag given as "yes", a label
given as 5, a result object of the wrong class), labkit's own internal
objects (results built by labkit are trusted), and inputs no one types
(a byte count of 2**1000). Python's own error is clear enough there.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any


def check_positive_int(name: str, value: Any) -> int:
    """``value`` as an int, or an error naming ``name`` when it is not an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{name} must be a positive integer, got {type(value).__name__} ({value!r})"
        )
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


def check_function(name: str, value: Any, usage: str) -> Any:
    """``value`` if it can be called; else the slip a notebook makes most, named with ``usage``.

    A type checker would catch it too, but ``bench(f(x))`` is the first thing
    a learner types, and "'int' object is not callable" from deep inside the
    timing loop does not say what to change.
    """
    if not callable(value):
        raise TypeError(
            f"{name} must be a function (or lambda) to call, got {type(value).__name__}. Pass "
            f"the function itself, not its result: {usage}"
        )
    return value


def check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """``value`` if it is one of ``choices`` (a name a person types: a dtype, a mode, a kernel)."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def check_choices(
    name: str, values: str | Sequence[str], choices: Sequence[str]
) -> tuple[str, ...]:
    """One name or several from ``choices``, in the order of ``choices``, without duplicates."""
    chosen = (values,) if isinstance(values, str) else tuple(values)
    if not chosen:
        raise ValueError(f"{name} is empty: choose from {', '.join(map(repr, choices))}")
    for value in chosen:
        check_choice(name, value, choices)
    return tuple(v for v in choices if v in chosen)


def check_shape(name: str, value: Any) -> tuple[int, ...]:
    """A shape as typed, ``(3, 32, 32)``: a non-empty sequence of positive ints, order kept."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) == 0:
        raise ValueError(
            f"{name} must be a non-empty tuple of positive integers such as (3, 32, 32), "
            f"got {value!r}"
        )
    return tuple(check_positive_int(f"{name}[{i}]", s) for i, s in enumerate(value))


def check_sizes(sizes: Any, name: str = "sizes") -> tuple[int, ...]:
    """Positive integer sizes, sorted, duplicates dropped."""
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence) or len(sizes) == 0:
        raise ValueError(f"{name} must be a non-empty list of positive integers, got {sizes!r}")
    checked = [check_positive_int(f"{name}[{i}]", s) for i, s in enumerate(sizes)]
    return tuple(sorted(set(checked)))


# --------------------------------------------------------------------------- frameworks' arguments
# (labkit.accel, models, batching, profiling, dist, kernels: checked before any framework import)

#: The largest seed every framework accepts (numpy's legacy seeding and Keras stop at 2**32 - 1).
MAX_SEED = 2**32 - 1

#: The torch device strings labkit accepts (an index is allowed for cuda and xpu only).
TORCH_DEVICES = ("cpu", "cuda", "cuda:N", "mps", "xpu", "xpu:N")


def check_int(name: str, value: Any, *, minimum: int = 0, maximum: int | None = None) -> int:
    """``value`` as an int from ``minimum`` to ``maximum`` (inclusive), or an error naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} ({value!r})")
    number = int(value)
    if number < minimum or (maximum is not None and number > maximum):
        bound = f">= {minimum}" if maximum is None else f"from {minimum:,} to {maximum:,}"
        raise ValueError(f"{name} must be an integer {bound}, got {value!r}")
    return number


def check_seed(name: str, value: Any) -> int:
    """A random seed: an integer from 0 to 2**32 - 1, the range every framework accepts."""
    return check_int(name, value, minimum=0, maximum=MAX_SEED)


def check_real(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """A finite real number within [low, high] (an open end with ``low_open``/``high_open``).

    NaN and infinity are refused everywhere: a learning rate, a tolerance or a
    fraction that is not finite silently poisons every number computed from it.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} ({value!r})")
    number = float(value)
    below = low is not None and (number <= low if low_open else number < low)
    above = high is not None and (number >= high if high_open else number > high)
    if not math.isfinite(number) or below or above:
        parts = []
        if low is not None:
            parts.append(f"{'>' if low_open else '>='} {low:g}")
        if high is not None:
            parts.append(f"{'<' if high_open else '<='} {high:g}")
        bound = f" {' and '.join(parts)}" if parts else ""
        raise ValueError(f"{name} must be a finite number{bound}, got {value!r}")
    return number


def check_torch_device(value: Any, name: str = "device", *, allow_none: bool = True) -> Any:
    """A torch device as given ("cpu", "cuda:1", a ``torch.device``), checked without importing torch.

    Only the spelling is checked here; :func:`resolve_torch_device` also
    checks that the device exists on this machine.
    """
    if value is None and allow_none:
        return None
    if type(value).__name__ == "device" and type(value).__module__.startswith("torch"):
        return value  # a torch.device: torch made it, so it is well formed
    if not isinstance(value, str):
        raise TypeError(
            f"{name} must be {'None, ' if allow_none else ''}a string such as 'cpu' or 'cuda', "
            f"or a torch.device, got {type(value).__name__} ({value!r})"
        )
    kind, colon, index = value.partition(":")
    indexed = kind in ("cuda", "xpu") and colon and index.isascii() and index.isdigit()
    if not ((kind in ("cpu", "cuda", "mps", "xpu") and not colon) or indexed):
        none = " (or None for the best device here)" if allow_none else ""
        raise ValueError(
            f"{name} must be one of {', '.join(map(repr, TORCH_DEVICES))}{none}, got {value!r}"
        )
    return value


# --------------------------------------------------------------------------- TensorFlow devices

#: A TensorFlow device: "/GPU:0", "/device:CPU:0", "gpu:1", "/job:localhost/replica:0/task:0/device:GPU:0".
_TF_DEVICE = r"^(/job:\w+)?(/replica:\d+)?(/task:\d+)?(/?device:|/)?(CPU|GPU|TPU):\d+$"


def check_tf_device(value: Any, name: str = "device", *, allow_none: bool = False) -> str | None:
    """A TensorFlow device string ("/GPU:0", "/CPU:0"), checked without importing TensorFlow.

    Whether the device exists is not checked: with soft placement TensorFlow
    runs an op elsewhere, which is what notebook 04 shows.
    """
    import re

    if value is None and allow_none:
        return None
    if not isinstance(value, str) or not re.match(_TF_DEVICE, value, re.IGNORECASE | re.ASCII):
        none = " or None" if allow_none else ""
        raise ValueError(
            f'{name} must be a TensorFlow device string such as "/GPU:0" or "/CPU:0"{none}, '
            f"got {value!r}"
        )
    return value
