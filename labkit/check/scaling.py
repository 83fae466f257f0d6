"""Checks for notebook 10: scaling out."""

from __future__ import annotations

from typing import Any

from labkit.check.result import CheckResult, as_number, close_to, todo, unsolved

#: The all-reduce exercise: 1 GB of gradients across 8 GPUs in 5 ms.
ALLREDUCE_BYTES = 1_000_000_000
ALLREDUCE_RANKS = 8
ALLREDUCE_MS = 5.0

#: The accumulation exercise.
TARGET_GLOBAL_BATCH = 2048
GPUS = 4
MICRO_BATCH_PER_GPU = 64


def efficiency(throughput_1: float, throughput_n: float, n: int) -> float:
    """Weak-scaling efficiency: throughput with n workers over n times one worker's."""
    from labkit.core.validate import check_positive_int, check_real

    throughput_1 = check_real("throughput_1", throughput_1, low=0, low_open=True)
    throughput_n = check_real("throughput_n", throughput_n, low=0, low_open=True)
    return throughput_n / (check_positive_int("n", n) * throughput_1)


def scaling_efficiency(
    answer: Any, *, throughput_1: float, throughput_n: float, n: int
) -> CheckResult:
    """Check the weak-scaling efficiency computed from the learner's own two measurements."""
    exercise = "scaling efficiency"
    ref = efficiency(throughput_1, throughput_n, n)  # the learner's measurements, checked first
    if unsolved(answer):
        return todo(exercise, "efficiency = samples/s with n processes / (n × samples/s with 1).")
    value = as_number(answer, "efficiency")
    if value > 1.5 and not close_to(value, throughput_n / throughput_1, 0.01):
        value /= 100  # a percentage
    if close_to(value, ref, 0.01):
        return CheckResult(
            exercise,
            True,
            True,
            "1.0 would be perfect scaling; what is missing is DDP's overhead (section 1's "
            "profile splits it: the reducer, its threads on the same cores, the all-reduce time "
            "backward did not hide), waiting for the slowest rank and, on a small CPU, the "
            "processes sharing its cores and memory bandwidth.",
        )
    if close_to(value, throughput_n / throughput_1, 0.01):
        return CheckResult(exercise, False, True, "That is the speedup; divide it by n.")
    return CheckResult(exercise, False, True, f"{value:g} is off; see the hint.")


def bus_bandwidth(algbw_gb_per_s: Any, busbw_gb_per_s: Any) -> CheckResult:
    """Check nccl-tests' algorithm and bus bandwidth for the exercise's all-reduce."""
    exercise = "all-reduce bandwidth"
    if unsolved(algbw_gb_per_s) or unsolved(busbw_gb_per_s):
        return todo(
            exercise,
            "algbw = bytes / time; for all-reduce, busbw = algbw × 2(n - 1) / n "
            "(nccl-tests' PERFORMANCE.md).",
        )
    alg = as_number(algbw_gb_per_s, "algbw_gb_per_s")
    bus = as_number(busbw_gb_per_s, "busbw_gb_per_s")
    ref_alg = ALLREDUCE_BYTES / (ALLREDUCE_MS / 1e3) / 1e9
    n = ALLREDUCE_RANKS
    ref_bus = ref_alg * 2 * (n - 1) / n
    if not close_to(alg, ref_alg, 1e-3):
        return CheckResult(exercise, False, True, f"algbw: 1 GB in 5 ms is not {alg:g} GB/s.")
    if close_to(bus, ref_bus, 1e-3):
        return CheckResult(
            exercise,
            True,
            True,
            f"{ref_alg:g} GB/s algorithm bandwidth, {ref_bus:g} GB/s bus bandwidth: in a ring "
            "all-reduce each rank sends (and receives) 2(n - 1)/n times the message size, so "
            "busbw is the figure to compare with the link's speed (NVLink, InfiniBand).",
        )
    if close_to(bus, ref_alg * 2, 1e-3):
        return CheckResult(exercise, False, True, "The factor is 2(n - 1)/n with n = 8, not 2.")
    return CheckResult(exercise, False, True, f"algbw is right; busbw {bus:g} is off.")


def accumulation_steps(answer: Any) -> CheckResult:
    """Check the micro-batches to accumulate for the exercise's global batch."""
    exercise = "gradient accumulation"
    if unsolved(answer):
        return todo(exercise, "global batch = GPUs × micro-batch per GPU × accumulation steps.")
    value = as_number(answer, "accumulation_steps")
    ref = TARGET_GLOBAL_BATCH // (GPUS * MICRO_BATCH_PER_GPU)
    if value == ref:
        return CheckResult(
            exercise,
            True,
            True,
            f"{ref} micro-batches per optimizer step: the same gradient as a batch of 2,048, "
            "with the memory of a batch of 64 per GPU, and one all-reduce per optimizer step "
            "if you skip it on the others (DDP's no_sync()).",
        )
    if value == TARGET_GLOBAL_BATCH // MICRO_BATCH_PER_GPU:
        return CheckResult(exercise, False, True, "The 4 GPUs each process a micro-batch per step.")
    return CheckResult(exercise, False, True, f"{value:g} is off; see the hint.")
