"""Checks for notebooks 04 to 06: sync points, the CNN's shapes, the RNN's parameters."""

from __future__ import annotations

from typing import Any

from labkit.check.result import CheckResult, as_number, todo, unsolved

# --- notebook 04: which lines make the host wait for the GPU ---

#: Each line of a CUDA training step, and whether it makes the host wait for the GPU.
SYNC_LINES: dict[str, bool] = {
    "y = x @ w": False,
    "z = torch.relu(y)": False,
    "loss.item()": True,
    "print(loss)": True,
    "y.cpu()": True,
    "if (loss > 0).any(): ...": True,
    "opt.step()": False,
    "x_cpu.to('cuda')  # x_cpu in ordinary (pageable) memory": True,
    "x_pin.to('cuda')  # x_pin pinned, non_blocking=False": True,
    "x_pin.to('cuda', non_blocking=True)  # x_pin pinned": False,
    "y[y > 0]  # boolean-mask indexing": True,
    "scaler.step(opt)  # torch.amp.GradScaler, SGD not fused": True,
}

_WHY = {
    "y = x @ w": "launching a kernel only queues it",
    "z = torch.relu(y)": "it is queued behind the matmul, on the same stream",
    "loss.item()": "a Python float needs the finished value",
    "print(loss)": "printing a CUDA tensor copies it to the host",
    "y.cpu()": "a copy to the host must wait for the data to exist",
    "if (loss > 0).any(): ...": "Python's `if` needs a bool on the host",
    "opt.step()": "the optimizer's kernels are queued like any other",
    "x_cpu.to('cuda')  # x_cpu in ordinary (pageable) memory": (
        "a copy from pageable memory synchronizes (NVIDIA's API synchronization behaviour; "
        "torch copies it and waits for the stream)"
    ),
    "x_pin.to('cuda')  # x_pin pinned, non_blocking=False": (
        "without non_blocking=True torch copies and then synchronizes the stream "
        "(at::cuda::memcpy_and_sync), pinned memory or not"
    ),
    "x_pin.to('cuda', non_blocking=True)  # x_pin pinned": (
        "a copy from pinned memory with non_blocking=True is queued like a kernel"
    ),
    "y[y > 0]  # boolean-mask indexing": (
        "the result's size depends on the values, so the host must read them first"
    ),
    "scaler.step(opt)  # torch.amp.GradScaler, SGD not fused": (
        "it reads found_inf with .item() to decide whether to step (a fused optimizer, "
        "SGD(fused=True) or Adam(fused=True), reads it on the device instead)"
    ),
}


def sync_points(answers: Any) -> CheckResult:
    """Check a ``{line: waits}`` dict against which lines of a CUDA step synchronize."""
    exercise = "sync points"
    if unsolved(answers) or (
        isinstance(answers, dict) and all(unsolved(v) for v in answers.values())
    ):
        return todo(exercise, "a line waits when Python needs a value computed on the GPU.")
    if not isinstance(answers, dict):
        raise TypeError(
            f"answers must be a dict of line to True/False, got {type(answers).__name__}"
        )
    missing = [line for line in SYNC_LINES if line not in answers]
    if missing:
        return CheckResult(exercise, False, True, f"Answer every line; missing: {missing}.")
    wrong = [
        f"`{line}` {'does' if waits else 'does not'} wait: {_WHY[line]}"
        for line, waits in SYNC_LINES.items()
        if bool(answers[line]) != waits
    ]
    if wrong:
        return CheckResult(exercise, False, True, "; ".join(wrong) + ".")
    return CheckResult(
        exercise,
        True,
        True,
        "All right. Keep the waiting lines out of the inner loop: log every N steps, not every step.",
    )


# --- notebook 05: the CNN's flatten size ---


def cnn_in_features(in_features: Any) -> CheckResult:
    """Check the Linear layer's in_features for a 3×96×96 input to the seed's conv + pool."""
    exercise = "flatten size"
    if unsolved(in_features):
        return todo(exercise, "padding=1 keeps 96×96; MaxPool2d(2) halves it; 32 channels.")
    value = as_number(in_features, "in_features")
    ref = 32 * 48 * 48
    if value == ref:
        return CheckResult(
            exercise,
            True,
            True,
            f"32 × 48 × 48 = {ref:,}. Or let the model compute it: AdaptiveAvgPool2d makes "
            "the head independent of the input size.",
        )
    hints = {
        32 * 96 * 96: "That forgets the pooling: MaxPool2d(2) halves height and width.",
        48 * 48: "That forgets the 32 channels the convolution produces.",
        32 * 32 * 32: "That is the article's number: it fits an input whose pooled map has "
        "32 × 32 = 1,024 positions (64×64, 65×65, 32×128, ...), not 96×96.",
        3 * 48 * 48: "The convolution turns 3 input channels into 32.",
    }
    return CheckResult(
        exercise,
        False,
        True,
        hints.get(int(value), f"{value:,.0f} is off: channels × height × width after the pool."),
    )


def cnn_head_params(params: Any) -> CheckResult:
    """Check the parameter count of fix 2's head, ``nn.Linear(32*112*112, 10)``."""
    exercise = "head parameters"
    if unsolved(params):
        return todo(exercise, "a Linear layer has in × out weights plus out biases.")
    value = as_number(params, "params")
    ref = 32 * 112 * 112 * 10 + 10
    if value == ref:
        return CheckResult(
            exercise,
            True,
            True,
            f"{ref:,}: twelve times the article's 327,690, for one layer, and the model now "
            "accepts only inputs whose pooled map has 112 × 112 = 12,544 positions (224×224, "
            "225×225, 112×448, ...). "
            "The size-agnostic head needs 5,130.",
        )
    if value == ref - 10:
        return CheckResult(exercise, False, True, "Add the 10 biases.")
    return CheckResult(
        exercise, False, True, f"{value:,.0f} is off: 32·112·112 inputs × 10 outputs + 10."
    )


def cnn_silent_batch(batch: Any, rows: Any) -> CheckResult:
    """Check the smallest batch the article's model accepts at 224×224, and the rows it returns."""
    exercise = "the silent batch"
    if unsolved(batch) or unsolved(rows):
        return todo(
            exercise,
            "each image reaches view() as 401,408 values; view(-1, 32768) needs a multiple "
            "of 32,768.",
        )
    b = as_number(batch, "batch")
    r = as_number(rows, "rows")
    per_image = 32 * 112 * 112
    if b == 4 and r == 49:
        return CheckResult(
            exercise,
            True,
            True,
            f"401,408 = 12.25 × 32,768, so only a batch that is a multiple of 4 reshapes: "
            f"4 images × {per_image:,} values = 49 rows of 32,768, and the model returns "
            "(49, 10) without an error. Batches 1 to 3 raise.",
        )
    if b == 4:
        return CheckResult(
            exercise, False, True, f"Batch 4 is right; rows = 4 × {per_image:,} / 32,768."
        )
    if b == 1:
        return CheckResult(
            exercise, False, True, "Batch 1 raises: 401,408 is not a multiple of 32,768."
        )
    return CheckResult(
        exercise,
        False,
        True,
        "Not the smallest: find the least b with b × 401,408 a multiple of 32,768 "
        "(401,408 / 32,768 = 12.25).",
    )


# --- notebook 06: RNN parameter counts in Keras and PyTorch ---


def rnn_param_counts(keras_params: Any, torch_params: Any) -> CheckResult:
    """Check SimpleRNN(64) and nn.RNN(32, 64) parameter counts for 32 input features."""
    exercise = "RNN parameters"
    if unsolved(keras_params) or unsolved(torch_params):
        return todo(exercise, "input weights + recurrent weights + biases; count the bias vectors.")
    k = as_number(keras_params, "keras_params")
    t = as_number(torch_params, "torch_params")
    units, features = 64, 32
    ref_k = units * features + units * units + units
    ref_t = ref_k + units
    if k == ref_k and t == ref_t:
        return CheckResult(
            exercise,
            True,
            True,
            f"Keras {ref_k:,}, PyTorch {ref_t:,}: PyTorch keeps two bias vectors (b_ih and "
            "b_hh) where Keras's SimpleRNN keeps one. The maths is the same; the counts are "
            "not. (Keras's GRU with reset_after=True, its default, keeps two as well.)",
        )
    if k == ref_t and t == ref_k:
        return CheckResult(
            exercise, False, True, "Swapped: it is PyTorch that has the extra bias vector."
        )
    if k == t:
        return CheckResult(
            exercise, False, True, "They differ: PyTorch has b_ih and b_hh, Keras one bias."
        )
    which = "Keras" if k != ref_k else "PyTorch"
    return CheckResult(
        exercise, False, True, f"The {which} count is off: units·features + units² + biases."
    )
