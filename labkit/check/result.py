"""The result every check returns, and the helpers checks share."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

_PASS, _FAIL, _TODO = "✅", "❌", "⏳"
_GRADING = {"autograde", "validate"}


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one exercise check, with feedback a student can act on."""

    exercise: str
    passed: bool
    solved: bool
    message: str

    def __post_init__(self) -> None:
        # nbgrader sets NBGRADER_EXECUTION while it autogrades or validates a
        # submission, and scores a check cell by whether it raises. Everywhere
        # else a failed check only prints its feedback, so that a student
        # notebook still runs top to bottom.
        if not self.passed and os.environ.get("NBGRADER_EXECUTION") in _GRADING:
            raise AssertionError(str(self))

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        mark = _PASS if self.passed else (_FAIL if self.solved else _TODO)
        status = "passed" if self.passed else ("not yet" if self.solved else "not solved yet")
        return f"{mark} {self.exercise}: {status}. {self.message}"

    __repr__ = __str__

    def _ipython_display_(self) -> None:
        # Shown as display_data, not as the cell's result: nbgrader reads a
        # grade cell's execute_result as partial credit and warns (a future
        # error) when it is not a number. The text is the same either way.
        from IPython.display import display

        display({"text/plain": str(self)}, raw=True)


def unsolved(answer: Any) -> bool:
    return answer is None or answer is Ellipsis


def todo(exercise: str, hint: str) -> CheckResult:
    return CheckResult(exercise, passed=False, solved=False, message=f"Hint: {hint}")


def as_number(answer: Any, name: str) -> float:
    wrong = TypeError(f"{name} must be a number, got {type(answer).__name__} ({answer!r})")
    if isinstance(answer, (bool, str, bytes)):
        raise wrong
    try:  # ints, floats, and numpy / torch scalars
        value = float(answer)
    except (TypeError, ValueError):
        raise wrong from None
    except OverflowError:  # an int past float's range (10**400): no answer is that large
        raise ValueError(
            f"{name} must be a finite number, got an integer too large for a float"
        ) from None
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value}")
    return value


def close_to(value: float, reference: float, rel: float) -> bool:
    return math.isclose(value, reference, rel_tol=rel)


def known_mistake(
    exercise: str, value: float, mistakes: Sequence[tuple[float, str]], rel: float
) -> CheckResult | None:
    """The failed result for the first known wrong answer ``value`` matches, else None.

    ``mistakes`` pairs the value a usual slip gives with the sentence that
    names the slip, so a check can say what to look at, not only "wrong".
    """
    for wrong, why in mistakes:
        if close_to(value, wrong, rel):
            return CheckResult(exercise, False, True, why)
    return None
