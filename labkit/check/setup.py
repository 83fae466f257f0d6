"""Checks for notebook 00: setup and devices."""

from __future__ import annotations

from typing import Any

from labkit.check.result import CheckResult, as_number, close_to, known_mistake, todo, unsolved
from labkit.core.units import format_duration

# --- notebook 00: peak memory bandwidth from the memory clock and bus width ---

#: What CUDA reports for an H100 SXM5 80GB (cudaDevAttrMemoryClockRate, in kHz,
#: and cudaDevAttrGlobalMemoryBusWidth, in bits).
H100_MEMORY_CLOCK_KHZ = 2_619_000
H100_BUS_WIDTH_BITS = 5120


def peak_bandwidth(answer_gb_per_s: Any) -> CheckResult:
    """Check the H100's theoretical bandwidth, computed from its clock and bus width.

    The usual mistakes each have a signature: forgetting the double data rate
    gives half, forgetting that the bus width is in bits gives 8×, and mixing
    kHz with MHz or GB with MB gives a factor of 1000.
    """
    from labkit.machine.nvidia import theoretical_bandwidth_gb_per_s

    exercise = "peak bandwidth"
    if unsolved(answer_gb_per_s):
        return todo(
            exercise,
            "bytes per second = 2 transfers per clock × clock in Hz × bus width in bytes.",
        )
    value = as_number(answer_gb_per_s, "answer_gb_per_s")
    # never None: both inputs are constants
    ref = theoretical_bandwidth_gb_per_s(H100_MEMORY_CLOCK_KHZ, H100_BUS_WIDTH_BITS) or 0.0
    if close_to(value, ref, 0.01):
        return CheckResult(
            exercise,
            True,
            True,
            f"{value:.0f} GB/s. NVIDIA's spec sheet says 3.35 TB/s for the H100 SXM: the same "
            "number. It is a theoretical peak: a measured copy reaches less, never more.",
        )
    diagnoses = [
        (
            ref / 2,
            "That is half the answer: the memory makes two transfers per clock that CUDA reports (×2).",
        ),
        (ref * 2, "That is twice the answer: the factor 2 for double data rate appears once."),
        (ref * 8, "That is 8× too much: the bus width is in bits; divide by 8 for bytes."),
        (ref / 8, "That is 8× too little: divide the bus width in bits by 8 once, not twice."),
        (ref * 1000, "That is 1000× too much: check kHz → Hz, and bytes → GB (÷ 1e9)."),
        (ref / 1000, "That is 1000× too little: the clock is in kHz (× 1000 for Hz)."),
    ]
    if (mistake := known_mistake(exercise, value, diagnoses, 0.02)) is not None:
        return mistake
    return CheckResult(
        exercise,
        False,
        True,
        f"{value:.4g} GB/s is not it. Use 2 × (clock in Hz) × (bus width in bytes) ÷ 1e9, with "
        f"clock = {H100_MEMORY_CLOCK_KHZ} kHz and bus width = {H100_BUS_WIDTH_BITS} bits.",
    )


# --- notebook 00: the fastest a memory-bound operation can be ---

#: Exercise 1b: an out-of-place elementwise op (y = 2 * x) on a float32 tensor
#: of this size reads it once and writes a tensor of the same size.
ELEMENTWISE_TENSOR_BYTES = 2**30


def elementwise_time(answer_ms: Any) -> CheckResult:
    """Check the lowest possible time of ``y = 2 * x`` on 1 GiB at the H100's peak bandwidth.

    The bound is bytes moved / bandwidth: 2 GiB (read x, write y) over the
    theoretical 3,352 GB/s. Its mistakes: counting only the read (half),
    treating GiB as GB (7% short), or using the bandwidth in GiB/s.
    """
    from labkit.machine.nvidia import theoretical_bandwidth_gb_per_s

    exercise = "memory-bound time"
    if unsolved(answer_ms):
        return todo(
            exercise,
            "time = bytes moved ÷ bandwidth: count every byte read and every byte written.",
        )
    value = as_number(answer_ms, "answer_ms")
    gb_per_s = theoretical_bandwidth_gb_per_s(H100_MEMORY_CLOCK_KHZ, H100_BUS_WIDTH_BITS) or 0.0
    moved = 2 * ELEMENTWISE_TENSOR_BYTES
    ref = moved / (gb_per_s * 1e9) * 1e3
    if close_to(value, ref, 0.01):
        return CheckResult(
            exercise,
            True,
            True,
            f"{value:.3f} ms: {moved / 2**30:.0f} GiB moved at {gb_per_s:,.0f} GB/s. No kernel "
            "can be faster; a real one takes longer (notebook 02 measures how much longer on "
            "this machine's memory).",
        )
    diagnoses = [
        (ref / 2, "That is half the answer: y = 2 * x reads x and also writes y, 2 GiB in all."),
        (ref * 2, "That is twice the answer: x is read once and y written once, 2 GiB in all."),
        (
            ref * 1e9 / 2**30,
            "Close, but 7% short: 1 GiB is 2**30 bytes, not 10**9, while GB/s is 10**9 B/s.",
        ),
        (ref * 1000, "That is 1000× too much: is it in µs? The answer is in ms."),
        (ref / 1000, "That is 1000× too little: is it in seconds? The answer is in ms."),
    ]
    if (mistake := known_mistake(exercise, value, diagnoses, 0.02)) is not None:
        return mistake
    return CheckResult(
        exercise,
        False,
        True,
        f"{value:.4g} ms is not it. Divide the bytes read plus written ({moved:,}) by the "
        "bandwidth from exercise 1 in bytes per second, and convert seconds to ms.",
    )


# --- notebook 00: how many calls per sample hide the clock ---


def calls_per_sample(
    answer: Any, pair_ns: float, call_ns: float, share: float = 0.01
) -> CheckResult:
    """Check the fewest calls per sample that keep one clock pair under ``share`` of a sample.

    A sample of k calls lasts k × call_ns and carries one clock pair
    (pair_ns), so the clock's share is pair_ns / (k × call_ns) ≤ share, that is
    k ≥ pair_ns / (share × call_ns). ``pair_ns`` and ``call_ns`` are the
    learner's own measurements, so the reference is computed from them.
    """
    import math

    exercise = "calls per sample"
    if unsolved(answer):
        return todo(exercise, "one sample of k calls lasts k × call_ns and carries one clock pair.")
    value = as_number(answer, "answer")
    exact = pair_ns / (share * call_ns)
    ref = max(1, math.ceil(exact))
    if value >= exact and value <= ref + max(1, 0.02 * ref):
        return CheckResult(
            exercise,
            True,
            True,
            f"With that many calls the clock pair ({format_duration(pair_ns * 1e-6)}) is at most "
            f"{share:.0%} of a {format_duration(value * call_ns * 1e-6)} sample. bench aims "
            "higher (samples of about 0.2 ms: a trial batch corrects a warm-up estimate that "
            "ran long), which also averages away the clock's jitter.",
        )
    if close_to(value, exact / 100, 0.05) or value == max(1, math.ceil(exact / 100)):
        return CheckResult(
            exercise, False, True, "That is 100× too few: 1% is 0.01, not 1, in the formula."
        )
    if value > 0 and close_to(1 / value, exact, 0.05):
        return CheckResult(
            exercise, False, True, "That is the reciprocal: k ≥ pair_ns / (0.01 × call_ns)."
        )
    if 0 < value < exact:
        return CheckResult(
            exercise,
            False,
            True,
            f"Too few: with {value:.0f} calls the clock is still "
            f"{pair_ns / (value * call_ns):.1%} of a sample. Round up, never down.",
        )
    return CheckResult(
        exercise,
        False,
        True,
        f"{value:.4g} is more than needed: the fewest calls is pair_ns / (0.01 × call_ns) "
        "rounded up, with the two values printed above.",
    )


# --- notebook 00: which statistic to report ---

#: Twelve timings of the same call, in ms, in the order they were taken: the
#: first call pays for lazy initialisation, and one sample was hit by a
#: context switch. Fixed, so that everyone's answer is the same.
TIMING_SAMPLES_MS: tuple[float, ...] = (
    48.0,
    2.11,
    2.05,
    2.08,
    2.31,
    2.04,
    2.09,
    9.7,
    2.06,
    2.12,
    2.07,
    2.10,
)


def summary_statistics(median_ms: Any, iqr_ms: Any) -> CheckResult:
    """Check the median and IQR of ``TIMING_SAMPLES_MS`` *after* dropping the warm-up call."""
    from labkit.timing.bench import quantile

    exercise = "median and IQR"
    if unsolved(median_ms) or unsolved(iqr_ms):
        return todo(
            exercise,
            "drop the first (warm-up) sample, then use np.median and np.percentile(..., [25, 75]).",
        )
    med, iqr = as_number(median_ms, "median_ms"), as_number(iqr_ms, "iqr_ms")
    steady = sorted(TIMING_SAMPLES_MS[1:])
    ref_med = quantile(steady, 0.5)
    ref_iqr = quantile(steady, 0.75) - quantile(steady, 0.25)
    everything = sorted(TIMING_SAMPLES_MS)
    clean = sorted(steady)
    clean.remove(max(clean))  # the steady state without the context switch
    if close_to(med, ref_med, 1e-3) and close_to(iqr, ref_iqr, 1e-2):
        return CheckResult(
            exercise,
            True,
            True,
            f"median {ref_med:.3g} ms, IQR {ref_iqr:.3g} ms. The 9.7 ms outlier moves them by "
            f"{abs(ref_med - quantile(clean, 0.5)):.3g} and "
            f"{abs(ref_iqr - (quantile(clean, 0.75) - quantile(clean, 0.25))):.3g} ms; "
            f"it moves the mean from {sum(clean) / len(clean):.3g} to "
            f"{sum(steady) / len(steady):.3g} ms.",
        )
    if close_to(med, sum(steady) / len(steady), 1e-3) or close_to(
        med, sum(TIMING_SAMPLES_MS) / len(TIMING_SAMPLES_MS), 1e-3
    ):
        return CheckResult(
            exercise,
            False,
            True,
            "That is the mean. One slow sample drags a mean around; report the median.",
        )
    if close_to(med, quantile(everything, 0.5), 1e-3):
        return CheckResult(
            exercise,
            False,
            True,
            "Close: the median is right only if the first call is left out. It includes lazy "
            "initialisation, which is why labkit.bench warms up before it measures.",
        )
    if not close_to(med, ref_med, 1e-3):
        return CheckResult(exercise, False, True, f"The median {med:.4g} ms is off. {_SORT_HINT}")
    return CheckResult(
        exercise,
        False,
        True,
        f"The median is right; the IQR is the 75th minus the 25th percentile. {_SORT_HINT}",
    )


_SORT_HINT = "Use samples[1:] and numpy's default (linear) percentiles."


# --- notebook 00: put data on the device pick_device chose ---


def on_best_device(x: Any) -> CheckResult:
    """Check that a torch tensor was created on ``labkit.pick_device('torch')``."""
    exercise = "tensor on the best device"
    if unsolved(x):
        return todo(exercise, "torch.randn(..., device=labkit.pick_device('torch')).")
    from labkit.core.optional import import_optional
    from labkit.machine.report import pick_device

    torch = import_optional("torch", "this exercise")
    if not isinstance(x, torch.Tensor):
        return CheckResult(
            exercise, False, True, f"Expected a torch.Tensor, got {type(x).__name__}."
        )
    best = pick_device("torch")
    if x.device.type != best.type:
        return CheckResult(
            exercise,
            False,
            True,
            f"The tensor lives on {x.device.type!r} but pick_device chose {best.type!r}. Pass "
            "device=... when you create it, instead of moving it afterwards.",
        )
    return CheckResult(
        exercise,
        True,
        True,
        "It lives on the device pick_device chose, with the same code on a laptop and a GPU. "
        "(The check sees only where it lives: creating it there, not copying it over, is up "
        "to you.)",
    )
