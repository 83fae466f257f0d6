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

    The reference is the learner's own machine and the same criterion as the
    notebook's printed verdicts (:meth:`labkit.roofline.model.Roofline.verdict`):
    the op's intensity against the float32 ridge of the theoretical peak
    (``roofline.verdict_ridge``), with its 4× margin. An op within 4× of that
    ridge is "near the ridge", where either roof may bind, so either answer
    counts for it.
    """
    from labkit.roofline.model import COMPUTE_BOUND, MEMORY_BOUND, NEAR_RIDGE

    exercise = "roofline prediction"
    ops = roofline_exercise_ops()
    if unsolved(predictions) or (
        isinstance(predictions, dict) and all(unsolved(v) for v in predictions.values())
    ):
        return todo(
            exercise,
            'compare each op\'s arithmetic intensity with roof.verdict_ridge("float32"), '
            "the ridge of the theoretical peak the printed verdicts use.",
        )
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
    ridge = roofline.verdict_ridge("float32")
    wrong, near = [], []
    for name, op in ops.items():
        truth = roofline.verdict(op, "float32")
        if truth == NEAR_RIDGE:  # within 4× of the ridge either roof may bind: both count
            near.append(f"{name} ({op.arithmetic_intensity:.3g} FLOP/byte)")
            continue
        if predictions[name] == truth:
            continue
        side = "more than 4× below" if truth == MEMORY_BOUND else "more than 4× above"
        wrong.append(
            f"{name}: {op.arithmetic_intensity:.3g} FLOP/byte is {side} the ridge point "
            f"({ridge:.3g} FLOP/byte), so it is {truth}"
        )
    note = (
        f" Within 4× of the ridge ({ridge:.3g} FLOP/byte) either answer counts: "
        + ", ".join(near)
        + "."
        if near
        else ""
    )
    if wrong:
        return CheckResult(exercise, False, True, "; ".join(wrong) + "." + note)
    return CheckResult(
        exercise,
        True,
        True,
        f"All {len(ops)} right. An op whose arithmetic intensity is far below the ridge point "
        "waits on memory, whatever the processor's peak." + note,
    )


# --- notebook 03: compute an arithmetic intensity by hand ---


def intensity_exercise_op() -> Any:
    """The op whose intensity the learner computes: 16 tokens through a 4096×4096 bfloat16 layer.

    x is 16×4096, the weight W 4096×4096, y = x @ W is 16×4096, all
    bfloat16 (2 bytes per element): a small-batch linear layer, the case
    between the GEMV (batch 1) and a large matmul.
    """
    from labkit.roofline.model import matmul_cost

    return matmul_cost(16, 4096, 4096, "bfloat16", name="linear 16×4096 @ 4096×4096")


def roofline_intensity(answer: Any) -> CheckResult:
    """Check a hand-computed arithmetic intensity (FLOP/byte) of :func:`intensity_exercise_op`.

    The usual slips each get their own message: 4 bytes per element, one
    FLOP per multiply-add, only the weight's bytes, or no weight at all.
    """
    from labkit.check.result import as_number, close_to

    exercise = "arithmetic intensity by hand"
    if unsolved(answer):
        return todo(
            exercise,
            "FLOPs = 2·m·n·k (a multiply and an add per term); bytes = (m·k + k·n + m·n) × "
            "bytes per element; intensity = FLOPs / bytes.",
        )
    value = as_number(answer, "answer_flop_per_byte")
    op = intensity_exercise_op()
    m, n, k = op.dim("m"), op.dim("n"), op.dim("k")
    truth = op.arithmetic_intensity
    if close_to(value, truth, 0.003):
        return CheckResult(
            exercise,
            True,
            True,
            f"{truth:.3g} FLOP/byte: 16 rows share each weight, so the intensity is about 16× "
            "the GEMV's 1 FLOP/byte in bfloat16 (batch size is the knob that moves it).",
        )
    flops, elements = 2 * m * n * k, m * k + k * n + m * n
    slips = [
        (
            truth / 2,
            "half the answer: bfloat16 has 2 bytes per element (not float32's 4), and a "
            "multiply-add is 2 FLOPs; check both",
        ),
        (truth / 4, "a quarter of the answer: 2 bytes per element and 2 FLOPs per multiply-add"),
        (
            truth * 2,
            "twice the answer: count 2 bytes per bfloat16 element (not 1) and 2 FLOPs "
            "per multiply-add (not 4)",
        ),
        (
            flops / (2 * k * n),
            "that counts only the weight's bytes: x and y are read and written too",
        ),
        (
            flops / (2 * (m * k + m * n)),
            "that leaves out the weight matrix, which is most of the bytes (4096×4096 elements)",
        ),
    ]
    for wrong, message in slips:
        if close_to(value, wrong, 0.003):
            return CheckResult(exercise, False, True, f"{value:.4g}: {message}.")
    return CheckResult(
        exercise,
        False,
        True,
        f"{value:.4g} is not it. FLOPs = 2·{m}·{n}·{k}; bytes = ({m}·{k} + {k}·{n} + {m}·{n}) "
        f"× 2 (= {elements:,} elements × 2 bytes); intensity = FLOPs / bytes.",
    )
