"""Checks for notebook 08: batching and input pipelines."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from labkit.check.result import CheckResult, as_number, todo, unsolved

#: The input-pipeline exercise: a loader that needs this much CPU time per sample,
#: feeding a training step of this length at this batch size.
PREP_MS_PER_SAMPLE = 2.0
BATCH = 32
STEP_MS = 10.0

#: The memory exercise: a 100 M-parameter model trained with Adam in float32 on a 24 GB GPU.
PARAMS = 100_000_000
BYTES_PER_PARAM_ADAM = 16  # weights 4 + gradients 4 + Adam's two moments 8
ACTIVATION_BYTES_PER_SAMPLE = 150_000_000
GPU_BYTES = 24_000_000_000
RESERVED_BYTES = 2_000_000_000  # CUDA context, cuDNN workspaces, allocator slack


def knee(batch_sizes: Sequence[int], samples_per_s: Sequence[float], share: float = 0.9) -> int:
    """The smallest batch whose throughput reaches ``share`` of the best one."""
    from labkit.core.validate import check_positive_int, check_real

    batch_sizes = [check_positive_int(f"batch_sizes[{i}]", b) for i, b in enumerate(batch_sizes)]
    samples_per_s = [
        check_real(f"samples_per_s[{i}]", s, low=0) for i, s in enumerate(samples_per_s)
    ]
    share = check_real("share", share, low=0, high=1, low_open=True)
    if len(set(batch_sizes)) != len(batch_sizes):
        raise ValueError(
            f"batch_sizes must not repeat a batch size (which throughput would it have?), got "
            f"{batch_sizes!r}"
        )
    if len(batch_sizes) != len(samples_per_s) or not batch_sizes:
        raise ValueError(
            "batch_sizes and samples_per_s must be non-empty and of the same length, got "
            f"{len(batch_sizes)} and {len(samples_per_s)}"
        )
    peak = max(samples_per_s)
    return min(b for b, s in zip(batch_sizes, samples_per_s, strict=True) if s >= share * peak)


def knee_batch(
    answer: Any, batch_sizes: Sequence[int], samples_per_s: Sequence[float]
) -> CheckResult:
    """Check the smallest batch reaching 90% of the peak throughput, on the learner's own curve."""
    exercise = "where the curve flattens"
    ref = knee(batch_sizes, samples_per_s)  # the learner's own curve, checked first
    if unsolved(answer):
        return todo(
            exercise,
            "find the peak samples/s, then the first (smallest) batch size whose samples/s is "
            "at least 0.9 × the peak.",
        )
    value = as_number(answer, "knee_batch")
    if value == ref:
        return CheckResult(
            exercise,
            True,
            True,
            "Past this batch, the larger batches measured add at most about 11% throughput "
            "(1/0.9: that is the knee's definition) while latency and memory grow. Whether the curve "
            "keeps rising past the largest batch measured, the sweep does not say.",
        )
    if value == batch_sizes[list(samples_per_s).index(max(samples_per_s))]:
        return CheckResult(
            exercise,
            False,
            True,
            "That is the batch with the highest throughput; the question asks for the smallest "
            "one within 10% of it.",
        )
    return CheckResult(
        exercise, False, True, f"Batch {value:g} is not the first within 10% of the peak."
    )


def workers_needed() -> int:
    """Loader workers needed so that preparing a batch keeps up with one training step."""
    return math.ceil(PREP_MS_PER_SAMPLE * BATCH / STEP_MS)


def loader_workers(answer: Any) -> CheckResult:
    """Check the number of DataLoader workers that makes the exercise's step compute-bound."""
    exercise = "enough loader workers"
    if unsolved(answer):
        return todo(
            exercise,
            "one worker prepares a batch in 2 ms × 32; with W workers a batch is ready every "
            "(2 × 32 / W) ms. Find the smallest W for which that is ≤ the 10 ms step.",
        )
    value = as_number(answer, "workers")
    ref = workers_needed()
    if value == ref:
        return CheckResult(
            exercise,
            True,
            True,
            f"{ref} workers: each worker builds a whole batch in 64 ms, and {ref} of them "
            f"working in turn finish one every 64/{ref} = {64 / ref:.1f} ms ≤ 10 ms (after the "
            "first 64 ms). With fewer, the device waits on data (input-bound) and "
            "a bigger GPU would not train any faster. Each worker needs a CPU core.",
        )
    if value == ref - 1:
        return CheckResult(
            exercise,
            False,
            True,
            f"With {ref - 1} workers a batch is ready every "
            f"{64 / (ref - 1):.1f} ms, still longer than the 10-ms step.",
        )
    if value == 64 / 10:
        return CheckResult(exercise, False, True, "Workers come in whole processes: round up.")
    return CheckResult(exercise, False, True, f"{value:g} is off; see the hint.")


def largest_batch_that_fits() -> int:
    """The exercise's largest batch: (usable memory - model state) // activations per sample."""
    usable = GPU_BYTES - RESERVED_BYTES - PARAMS * BYTES_PER_PARAM_ADAM
    return usable // ACTIVATION_BYTES_PER_SAMPLE


def largest_batch(answer: Any) -> CheckResult:
    """Check the largest batch of the memory exercise."""
    exercise = "the largest batch that fits"
    if unsolved(answer):
        return todo(
            exercise,
            "usable = 24 GB - 2 GB reserved - model state (16 bytes per parameter with Adam); "
            "batch = usable // 150 MB, rounded down.",
        )
    value = as_number(answer, "largest")
    ref = largest_batch_that_fits()
    if value == ref:
        return CheckResult(
            exercise,
            True,
            True,
            f"{ref}: the model state (1.6 GB) is small next to the activations. On a real GPU, "
            "confirm the estimate by trying it: catch torch.cuda.OutOfMemoryError, free memory "
            "and step back, as labkit.batching.largest does.",
        )
    slips: dict[float, str] = {
        (GPU_BYTES - RESERVED_BYTES - PARAMS * 4)
        // ACTIVATION_BYTES_PER_SAMPLE: "Adam keeps gradients and two moments: 16 bytes per parameter, not 4.",
        (GPU_BYTES - PARAMS * BYTES_PER_PARAM_ADAM)
        // ACTIVATION_BYTES_PER_SAMPLE: "Leave the 2 GB that the CUDA context and the allocator reserve.",
        ref + 1: "Round down: a batch one larger would not fit.",
    }
    if value in slips:
        return CheckResult(exercise, False, True, slips[value])
    return CheckResult(exercise, False, True, f"{value:g} is off; see the hint.")
