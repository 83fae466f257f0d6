"""Checks for notebook 09: reading a profile."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from labkit.check.result import CheckResult, as_number, close_to, todo, unsolved
from labkit.profiling.common import union_ms

#: One 10-ms training step on a GPU, as a trace shows it: (start_ms, end_ms) of each kernel,
#: on two streams (a copy overlapping compute), with gaps where the device waited on the host.
TIMELINE_STEP_MS = 10.0
TIMELINE_KERNELS_MS: tuple[tuple[float, float], ...] = (
    (0.0, 1.5),  # stream 7: host-to-device copy of the *next* batch (prefetch)
    (1.0, 3.0),  # stream 0: forward on the current batch, overlapping that copy
    (3.0, 4.0),
    (5.5, 7.5),  # backward, after a 1.5-ms gap (the host was busy)
    (7.0, 8.0),  # stream 7: gradient all-reduce, overlapping backward
)


def idle_fraction(answer: Any) -> CheckResult:
    """Check the share of the step during which the GPU ran nothing."""
    exercise = "device idle time"
    if unsolved(answer):
        return todo(
            exercise,
            "merge overlapping kernels first (the union of the intervals), then idle = "
            "1 - busy / step.",
        )
    value = as_number(answer, "idle_fraction")
    if value > 1:
        value /= 100
    busy = union_ms(TIMELINE_KERNELS_MS)
    ref = 1 - busy / TIMELINE_STEP_MS
    if close_to(value, ref, 1e-3):
        return CheckResult(
            exercise,
            True,
            True,
            f"{ref:.0%} idle: the device is busy {busy:g} of {TIMELINE_STEP_MS:g} ms. Gaps like "
            "these, with the CPU thread busy above them, are what a trace viewer shows at a "
            "glance and an operator table hides.",
        )
    summed = sum(b - a for a, b in TIMELINE_KERNELS_MS)
    if close_to(value, 1 - summed / TIMELINE_STEP_MS, 1e-3):
        return CheckResult(
            exercise,
            False,
            True,
            "Summing kernel times double-counts the overlap between streams: take the union.",
        )
    if close_to(value, busy / TIMELINE_STEP_MS, 1e-3):
        return CheckResult(exercise, False, True, "That is the busy share; idle is 1 minus it.")
    return CheckResult(exercise, False, True, f"{value:g} is off; see the hint.")


def top_operator(answer: Any, operators_by_self_time: Sequence[str]) -> CheckResult:
    """Check the operator with the largest self time, against the learner's own profile."""
    exercise = "the most expensive operator"
    if not operators_by_self_time:
        raise ValueError("operators_by_self_time is empty: profile a few steps first")
    if unsolved(answer):
        return todo(
            exercise,
            "sort the operator table by *self* time (time in the operator itself, not its "
            "children) and take the first name.",
        )
    if not isinstance(answer, str):
        raise TypeError(f"answer must be an operator name (str), got {type(answer).__name__}")
    if answer == operators_by_self_time[0]:
        return CheckResult(
            exercise,
            True,
            True,
            "On a CPU that is where an optimisation pays most: a 2× faster operator that takes "
            "5% of the step saves 2.5%, whatever the table's total column says. (On a GPU, "
            "sort by self device time instead: there an operator's CPU time is mostly its launch.)",
        )
    if answer in operators_by_self_time:
        return CheckResult(
            exercise,
            False,
            True,
            "That operator is in the table but not first by self time. Total time includes "
            "children (aten::conv2d contains aten::convolution ...), so sort by self time.",
        )
    return CheckResult(exercise, False, True, f"{answer!r} is not an operator of this profile.")
