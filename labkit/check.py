"""Automatic checks for the notebooks' exercises.

Each checker compares a learner's answer with a reference, with a tolerance,
and returns a :class:`CheckResult` whose text says what to look at when the
answer is off: a check that only says "wrong" teaches nothing. An answer left
as ``None`` or ``...`` (the student edition's blank) is "not solved yet",
never an exception, so a student notebook still runs top to bottom.

``assert check.some_exercise(answer)`` works too (for nbgrader autograding):
a result is truthy only when the answer passed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

_PASS, _FAIL, _TODO = "✅", "❌", "⏳"


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one exercise check, with feedback a student can act on."""

    exercise: str
    passed: bool
    solved: bool
    message: str

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        mark = _PASS if self.passed else (_FAIL if self.solved else _TODO)
        status = "passed" if self.passed else ("not yet" if self.solved else "not solved yet")
        return f"{mark} {self.exercise}: {status}. {self.message}"

    __repr__ = __str__


def _unsolved(answer: Any) -> bool:
    return answer is None or answer is Ellipsis


def _todo(exercise: str, hint: str) -> CheckResult:
    return CheckResult(exercise, passed=False, solved=False, message=f"Hint: {hint}")


def _number(answer: Any, name: str) -> float:
    wrong = TypeError(f"{name} must be a number, got {type(answer).__name__} ({answer!r})")
    if isinstance(answer, (bool, str, bytes)):
        raise wrong
    try:  # ints, floats, and numpy / torch scalars
        value = float(answer)
    except (TypeError, ValueError):
        raise wrong from None
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value}")
    return value


def _close(value: float, reference: float, rel: float) -> bool:
    return math.isclose(value, reference, rel_tol=rel)


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
    from labkit.nvidia import theoretical_bandwidth_gb_per_s

    exercise = "peak bandwidth"
    if _unsolved(answer_gb_per_s):
        return _todo(
            exercise,
            "bytes per second = 2 transfers per clock × clock in Hz × bus width in bytes.",
        )
    value = _number(answer_gb_per_s, "answer_gb_per_s")
    ref = theoretical_bandwidth_gb_per_s(H100_MEMORY_CLOCK_KHZ, H100_BUS_WIDTH_BITS)
    if _close(value, ref, 0.01):
        return CheckResult(
            exercise, True, True,
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
        if _close(value, wrong, 0.02):
            return CheckResult(exercise, False, True, why)
    return CheckResult(
        exercise, False, True,
        f"{value:.4g} GB/s is not it. Use 2 × (clock in Hz) × (bus width in bytes) ÷ 1e9, with "
        f"clock = {H100_MEMORY_CLOCK_KHZ} kHz and bus width = {H100_BUS_WIDTH_BITS} bits.",
    )


# --- notebook 00: which statistic to report ---

#: Twelve timings of the same call, in ms, in the order they were taken: the
#: first call pays for lazy initialisation, and one sample was hit by a
#: context switch. Fixed, so that everyone's answer is the same.
TIMING_SAMPLES_MS: tuple[float, ...] = (
    48.0, 2.11, 2.05, 2.08, 2.31, 2.04, 2.09, 9.7, 2.06, 2.12, 2.07, 2.10,
)


def summary_statistics(median_ms: Any, iqr_ms: Any) -> CheckResult:
    """Check the median and IQR of ``TIMING_SAMPLES_MS`` *after* dropping the warm-up call."""
    from labkit.timing import quantile

    exercise = "median and IQR"
    if _unsolved(median_ms) or _unsolved(iqr_ms):
        return _todo(
            exercise,
            "drop the first (warm-up) sample, then use np.median and np.percentile(..., [25, 75]).",
        )
    med, iqr = _number(median_ms, "median_ms"), _number(iqr_ms, "iqr_ms")
    steady = sorted(TIMING_SAMPLES_MS[1:])
    ref_med = quantile(steady, 0.5)
    ref_iqr = quantile(steady, 0.75) - quantile(steady, 0.25)
    everything = sorted(TIMING_SAMPLES_MS)
    if _close(med, ref_med, 1e-3) and _close(iqr, ref_iqr, 1e-2):
        return CheckResult(
            exercise, True, True,
            f"median {ref_med:.3g} ms, IQR {ref_iqr:.3g} ms. The 9.7 ms outlier moved neither; "
            f"it would have moved the mean to {sum(steady) / len(steady):.3g} ms.",
        )
    if _close(med, sum(steady) / len(steady), 1e-3) or _close(
        med, sum(TIMING_SAMPLES_MS) / len(TIMING_SAMPLES_MS), 1e-3
    ):
        return CheckResult(
            exercise, False, True,
            "That is the mean. One slow sample drags a mean around; report the median.",
        )
    if _close(med, quantile(everything, 0.5), 1e-3):
        return CheckResult(
            exercise, False, True,
            "Close: the median is right only if the first call is left out. It includes lazy "
            "initialisation, which is why labkit.bench warms up before it measures.",
        )
    if not _close(med, ref_med, 1e-3):
        return CheckResult(exercise, False, True, f"The median {med:.4g} ms is off. {_SORT_HINT}")
    return CheckResult(
        exercise, False, True,
        f"The median is right; the IQR is the 75th minus the 25th percentile. {_SORT_HINT}",
    )


_SORT_HINT = "Use samples[1:] and numpy's default (linear) percentiles."


# --- notebook 00: put data on the device pick_device chose ---


def on_best_device(x: Any) -> CheckResult:
    """Check that a torch tensor was created on ``labkit.pick_device('torch')``."""
    exercise = "tensor on the best device"
    if _unsolved(x):
        return _todo(exercise, "torch.randn(..., device=labkit.pick_device('torch')).")
    from labkit._optional import import_optional
    from labkit.device import pick_device

    torch = import_optional("torch", "this exercise")
    if not isinstance(x, torch.Tensor):
        return CheckResult(
            exercise, False, True, f"Expected a torch.Tensor, got {type(x).__name__}."
        )
    best = pick_device("torch")
    if x.device.type != best.type:
        return CheckResult(
            exercise, False, True,
            f"The tensor lives on {x.device.type!r} but pick_device chose {best.type!r}. Pass "
            "device=... when you create it, instead of moving it afterwards.",
        )
    return CheckResult(
        exercise, True, True,
        "It was created on the device pick_device chose, the same code on a laptop and a GPU.",
    )


# --- notebook 01: how much work fills a GPU ---

#: An H100 SXM: 132 SMs, each keeping up to 2,048 threads resident (compute capability 9.0).
H100_SMS = 132
H100_THREADS_PER_SM = 2048


def threads_to_fill(n: Any) -> CheckResult:
    """Check the smallest n×n output that gives every resident H100 thread one element."""
    exercise = "fill the GPU"
    if _unsolved(n):
        return _todo(exercise, "n × n outputs ≥ SMs × threads per SM; solve for n and round up.")
    value = _number(n, "n_to_fill")
    resident = H100_SMS * H100_THREADS_PER_SM
    ref = math.ceil(math.sqrt(resident))
    if value == ref:
        return CheckResult(
            exercise, True, True,
            f"n = {ref}: {ref}² = {ref * ref:,} outputs for {resident:,} resident threads. A "
            "512×512 matmul does not even fill the chip once, which is why small layers and "
            "small batches leave a big GPU mostly idle.",
        )
    if value == ref - 1:
        return CheckResult(exercise, False, True, "Round *up*: n - 1 leaves some threads idle.")
    if _close(value, resident, 1e-6):
        return CheckResult(
            exercise, False, True, "That is the number of threads; n is its square root."
        )
    if _close(value, math.sqrt(H100_SMS * 128), 0.01) or _close(value, math.sqrt(16_896), 0.01):
        return CheckResult(
            exercise, False, True,
            "That counts FP32 lanes (CUDA cores). Resident *threads* are what hide latency: "
            "use 2,048 per SM.",
        )
    return CheckResult(
        exercise, False, True, f"{value:g} is off. Resident threads = 132 × 2048; n = √ of that."
    )


# --- notebook 01: Amdahl's law from one measured speedup ---


def amdahl_prediction(serial_fraction: Any, speedup_64: Any) -> CheckResult:
    """Check the Karp–Flatt serial fraction of S(2) = 1.6 and Amdahl's S(64) from it."""
    from labkit.amdahl import amdahl_speedup, karp_flatt

    exercise = "Amdahl from one measurement"
    if _unsolved(serial_fraction) or _unsolved(speedup_64):
        return _todo(exercise, "e = (1/S - 1/n) / (1 - 1/n); then S(64) = 1 / (e + (1 - e) / 64).")
    f = _number(serial_fraction, "serial_fraction")
    s64 = _number(speedup_64, "speedup_64")
    ref_f = karp_flatt(1.6, 2)
    ref_s64 = amdahl_speedup(ref_f, 64)
    if not _close(f, ref_f, 1e-3):
        if _close(f, 1 - ref_f, 1e-3):
            return CheckResult(
                exercise, False, True,
                f"{f:.3g} is the *parallel* fraction; the serial one is 1 minus it.",
            )
        return CheckResult(
            exercise, False, True,
            f"The serial fraction {f:.4g} is off. With S = 1.6 and n = 2: "
            "(1/1.6 - 1/2) / (1 - 1/2).",
        )
    if _close(s64, ref_s64, 1e-3):
        return CheckResult(
            exercise, True, True,
            f"f = {ref_f:.2f}, so 64 threads give {ref_s64:.2f}×, and no number of threads gives "
            f"more than 1/f = {1 / ref_f:.0f}×. Shrinking the serial part beats adding cores.",
        )
    if _close(s64, 1 / ref_f, 1e-3):
        return CheckResult(
            exercise, False, True, "That is the limit for infinitely many threads; use n = 64."
        )
    return CheckResult(
        exercise, False, True, f"The fraction is right; S(64) = 1 / (f + (1 - f) / 64), not {s64:.4g}."
    )


# --- notebook 02: STREAM's byte counting, and what a transfer costs ---


def stream_bytes(bytes_per_call: Any) -> CheckResult:
    """Check the bytes STREAM credits one triad call on 1,000,000 float32 values with."""
    exercise = "STREAM bytes of a triad"
    if _unsolved(bytes_per_call):
        return _todo(exercise, "a = b + s·c touches three arrays once each; float32 is 4 bytes.")
    value = _number(bytes_per_call, "bytes_per_call")
    n, item = 1_000_000, 4
    ref = 3 * n * item
    if _close(value, ref, 1e-9):
        return CheckResult(
            exercise, True, True,
            f"{ref:,} bytes: read b, read c, write a. The scalar s lives in a register and "
            "costs no memory traffic.",
        )
    wrong = [
        (2 * n * item, "That counts two arrays; the triad reads b and c and writes a."),
        (4 * n * item, "That adds the write-allocate read of a, which the hardware does but "
                       "STREAM does not count."),
        (3 * n * 8, "That is float64 (8 bytes); these values are float32 (4 bytes)."),
        (3 * n, "That counts elements, not bytes: × 4 bytes per float32."),
        (ref / 1e9, "Give bytes, not GB."),
    ]
    for wrong_value, why in wrong:
        if _close(value, wrong_value, 1e-9):
            return CheckResult(exercise, False, True, why)
    return CheckResult(exercise, False, True, f"{value:,.0f} is off: arrays × elements × bytes.")


#: Host-to-device over PCIe 4.0 x16 in practice, and the H100 SXM's HBM3 peak.
PCIE_GB_PER_S = 25.0
HBM_GB_PER_S = 3350.0


def transfer_vs_hbm(ratio: Any) -> CheckResult:
    """Check how many times longer 4 GiB takes over PCIe (25 GB/s) than from HBM (3,350 GB/s)."""
    exercise = "PCIe against HBM"
    if _unsolved(ratio):
        return _todo(exercise, "time = bytes / bandwidth for each; divide the two times.")
    value = _number(ratio, "ratio")
    ref = HBM_GB_PER_S / PCIE_GB_PER_S
    if _close(value, ref, 0.01):
        return CheckResult(
            exercise, True, True,
            f"{ref:.0f}×: moving a batch to the GPU costs as much as reading it {ref:.0f} times "
            "on the GPU. Keep data resident, and overlap the copies you cannot avoid.",
        )
    if _close(value, 1 / ref, 0.01):
        return CheckResult(exercise, False, True, "Upside down: PCIe is the slow one (time = bytes / GB/s).")
    return CheckResult(
        exercise, False, True,
        f"{value:.4g} is off. The size cancels: the ratio is {HBM_GB_PER_S:g} / {PCIE_GB_PER_S:g}.",
    )


# --- notebook 03: predict where an op lands on the roofline ---


def roofline_exercise_ops() -> dict[str, Any]:
    """The ops of notebook 03's exercise, by the names the answer uses."""
    from labkit.roofline import add_cost, conv2d_cost, matmul_cost, sum_cost

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
    from labkit.roofline import COMPUTE_BOUND, MEMORY_BOUND, Roofline, predict_bound

    exercise = "roofline prediction"
    ops = roofline_exercise_ops()
    if _unsolved(predictions) or (
        isinstance(predictions, dict) and all(_unsolved(v) for v in predictions.values())
    ):
        return _todo(exercise, "compare each op's arithmetic intensity with the ridge point.")
    if not isinstance(predictions, dict):
        raise TypeError(f"predictions must be a dict of op name to verdict, got {type(predictions).__name__}")
    if not isinstance(roofline, Roofline):
        raise TypeError(f"roofline must be a labkit Roofline, got {type(roofline).__name__}")
    missing = sorted(set(ops) - set(predictions))
    if missing:
        return CheckResult(exercise, False, True, f"Predict every op; missing: {', '.join(missing)}.")
    allowed = {MEMORY_BOUND, COMPUTE_BOUND}
    bad = {k: v for k, v in predictions.items() if v not in allowed}
    if bad:
        return CheckResult(
            exercise, False, True,
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
        exercise, True, True,
        f"All {len(ops)} right. An op whose arithmetic intensity is below the ridge point waits "
        "on memory, whatever the processor's peak.",
    )
