"""Checks for notebook 01: parallelism."""

from __future__ import annotations

import math
from typing import Any

from labkit.check.result import CheckResult, as_number, close_to, todo, unsolved

# --- notebook 01: how much work fills a GPU ---

#: An H100 SXM: 132 SMs, each keeping up to 2,048 threads resident (compute capability 9.0).
H100_SMS = 132
H100_THREADS_PER_SM = 2048


def threads_to_fill(n: Any) -> CheckResult:
    """Check the smallest n×n output that gives every resident H100 thread one element."""
    exercise = "fill the GPU"
    if unsolved(n):
        return todo(exercise, "n × n outputs ≥ SMs × threads per SM; solve for n and round up.")
    value = as_number(n, "n_to_fill")
    resident = H100_SMS * H100_THREADS_PER_SM
    ref = math.ceil(math.sqrt(resident))
    if value == ref:
        return CheckResult(
            exercise,
            True,
            True,
            f"n = {ref}: {ref}² = {ref * ref:,} outputs for {resident:,} resident threads. A "
            "512×512 matmul does not even fill the chip once, which is why small layers and "
            "small batches leave a big GPU mostly idle.",
        )
    if value == ref - 1:
        return CheckResult(exercise, False, True, "Round *up*: n - 1 leaves some threads idle.")
    if close_to(value, resident, 1e-6):
        return CheckResult(
            exercise, False, True, "That is the number of threads; n is its square root."
        )
    if close_to(value, math.sqrt(H100_SMS * 128), 0.01) or close_to(value, math.sqrt(16_896), 0.01):
        return CheckResult(
            exercise,
            False,
            True,
            "That counts FP32 lanes (CUDA cores). Resident *threads* are what hide latency: "
            "use 2,048 per SM.",
        )
    return CheckResult(
        exercise, False, True, f"{value:g} is off. Resident threads = 132 × 2048; n = √ of that."
    )


# --- notebook 01: Amdahl's law from one measured speedup ---


def amdahl_prediction(serial_fraction: Any, speedup_64: Any) -> CheckResult:
    """Check the Karp–Flatt serial fraction of S(2) = 1.6 and Amdahl's S(64) from it."""
    from labkit.parallelism.amdahl import amdahl_speedup, karp_flatt

    exercise = "Amdahl from one measurement"
    if unsolved(serial_fraction) or unsolved(speedup_64):
        return todo(exercise, "e = (1/S - 1/n) / (1 - 1/n); then S(64) = 1 / (e + (1 - e) / 64).")
    f = as_number(serial_fraction, "serial_fraction")
    s64 = as_number(speedup_64, "speedup_64")
    ref_f = karp_flatt(1.6, 2)
    ref_s64 = amdahl_speedup(ref_f, 64)
    if not close_to(f, ref_f, 1e-3):
        if close_to(f, 1 - ref_f, 1e-3):
            return CheckResult(
                exercise,
                False,
                True,
                f"{f:.3g} is the *parallel* fraction; the serial one is 1 minus it.",
            )
        return CheckResult(
            exercise,
            False,
            True,
            f"The serial fraction {f:.4g} is off. With S = 1.6 and n = 2: "
            "(1/1.6 - 1/2) / (1 - 1/2).",
        )
    if close_to(s64, ref_s64, 1e-3):
        return CheckResult(
            exercise,
            True,
            True,
            f"f = {ref_f:.2f}, so 64 threads give {ref_s64:.2f}×, and no number of threads gives "
            f"more than 1/f = {1 / ref_f:.0f}×. Shrinking the serial part beats adding cores.",
        )
    if close_to(s64, 1 / ref_f, 1e-3):
        return CheckResult(
            exercise, False, True, "That is the limit for infinitely many threads; use n = 64."
        )
    return CheckResult(
        exercise,
        False,
        True,
        f"The fraction is right; S(64) = 1 / (f + (1 - f) / 64), not {s64:.4g}.",
    )
