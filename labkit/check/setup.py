"""Checks for notebook 00: setup and devices."""

from __future__ import annotations

from typing import Any

from labkit.check.result import CheckResult, as_number, close_to, todo, unsolved

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
            "number. Real copies reach about 90% of it, as notebook 02 measures.",
        )
    diagnoses = [
        (ref / 2, "That is half the answer: HBM and GDDR move data on both clock edges (×2)."),
        (ref * 2, "That is twice the answer: the factor 2 for double data rate appears once."),
        (ref * 8, "That is 8× too much: the bus width is in bits; divide by 8 for bytes."),
        (ref / 8, "That is 8× too little: divide the bus width in bits by 8 once, not twice."),
        (ref * 1000, "That is 1000× too much: check kHz → Hz, and bytes → GB (÷ 1e9)."),
        (ref / 1000, "That is 1000× too little: the clock is in kHz (× 1000 for Hz)."),
    ]
    for wrong, why in diagnoses:
        if close_to(value, wrong, 0.02):
            return CheckResult(exercise, False, True, why)
    return CheckResult(
        exercise,
        False,
        True,
        f"{value:.4g} GB/s is not it. Use 2 × (clock in Hz) × (bus width in bytes) ÷ 1e9, with "
        f"clock = {H100_MEMORY_CLOCK_KHZ} kHz and bus width = {H100_BUS_WIDTH_BITS} bits.",
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
    if close_to(med, ref_med, 1e-3) and close_to(iqr, ref_iqr, 1e-2):
        return CheckResult(
            exercise,
            True,
            True,
            f"median {ref_med:.3g} ms, IQR {ref_iqr:.3g} ms. The 9.7 ms outlier moved neither; "
            f"it would have moved the mean to {sum(steady) / len(steady):.3g} ms.",
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
        "It was created on the device pick_device chose, the same code on a laptop and a GPU.",
    )
