"""Checks for notebook 03: the roofline."""

from __future__ import annotations

from typing import Any

from labkit.check.result import CheckResult, todo, unsolved

# --- notebook 03: predict where an op lands on the roofline ---


def roofline_exercise_ops() -> dict[str, Any]:
    """The ops of notebook 03's exercise, by the names the answer uses."""
    from labkit.roofline.model import add_cost, conv2d_cost, matmul_cost, sum_cost

    return {
        "add": add_cost(2**26, "float32"),
        "sum": sum_cost(2**26, "float32"),
        "matmul 4096": matmul_cost(4096, 4096, 4096, "float32"),
        "conv 3x3": conv2d_cost(32, 64, 56, 56, 64, 3, 3, padding=1, dtype="float32"),
    }


def roofline_prediction(predictions: Any, roofline: Any) -> CheckResult:
    """Check "memory-bound"/"compute-bound" predictions against the measured roofline.

    The reference is the learner's own machine: an op is memory-bound when its
    arithmetic intensity is below this roofline's float32 ridge point.
    """
    from labkit.roofline.model import COMPUTE_BOUND, MEMORY_BOUND, predict_bound

    exercise = "roofline prediction"
    ops = roofline_exercise_ops()
    if unsolved(predictions) or (
        isinstance(predictions, dict) and all(unsolved(v) for v in predictions.values())
    ):
        return todo(exercise, "compare each op's arithmetic intensity with the ridge point.")
    if not isinstance(predictions, dict):
        raise TypeError(
            f"predictions must be a dict of op name to verdict, got {type(predictions).__name__}"
        )
    missing = sorted(set(ops) - set(predictions))
    if missing:
        return CheckResult(
            exercise, False, True, f"Predict every op; missing: {', '.join(missing)}."
        )
    allowed = {MEMORY_BOUND, COMPUTE_BOUND}
    bad = {k: v for k, v in predictions.items() if v not in allowed}
    if bad:
        return CheckResult(
            exercise,
            False,
            True,
            f"Each verdict is {MEMORY_BOUND!r} or {COMPUTE_BOUND!r}; got {bad}.",
        )
    ridge = roofline.ridge_point("float32")
    wrong = []
    for name, op in ops.items():
        truth = predict_bound(op, roofline, "float32")
        if predictions[name] != truth:
            side = "below" if truth == MEMORY_BOUND else "above"
            wrong.append(
                f"{name}: {op.arithmetic_intensity:.3g} FLOP/byte is {side} the ridge point "
                f"({ridge:.3g} FLOP/byte), so it is {truth}"
            )
    if wrong:
        return CheckResult(exercise, False, True, "; ".join(wrong) + ".")
    return CheckResult(
        exercise,
        True,
        True,
        f"All {len(ops)} right. An op whose arithmetic intensity is below the ridge point waits "
        "on memory, whatever the processor's peak.",
    )
