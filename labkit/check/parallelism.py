"""Checks for notebook 01: parallelism."""

from __future__ import annotations

import math
from typing import Any

from labkit.check.result import CheckResult, as_number, close_to, todo, unsolved

# --- notebook 01: how much work fills a GPU ---

#: An H100 SXM5: 132 SMs ("8 GPCs, 66 TPCs, 2 SMs/TPC, 132 SMs per GPU", NVIDIA, "NVIDIA
#: Hopper Architecture In-Depth", developer.nvidia.com/blog/nvidia-hopper-architecture-in-depth),
#: each keeping up to 2,048 threads resident (compute capability 9.0, CUDA C++ Programming Guide):
#: a residency limit; how many a kernel keeps depends on its registers and shared memory.
H100_SMS = 132
H100_THREADS_PER_SM = 2048

#: The tile-and-wave exercise: a square output split into square tiles, one thread block each.
WAVE_OUTPUT_N = 3072
WAVE_TILE = 128

_GUIDE = (
    "NVIDIA's Matrix Multiplication Background guide, 'Wave Quantization' "
    "(docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication)"
)


def threads_to_fill(n: Any) -> CheckResult:
    """Check the smallest n×n output with one element per resident H100 thread (a capacity count).

    Kept for older copies of notebook 01. A matmul library does not give each
    output element its own thread: see :func:`tile_waves` for how work fills a GPU.
    """
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
            f"n = {ref}: {ref}² = {ref * ref:,} outputs for {resident:,} resident threads. That "
            "counts capacity only: cuBLAS splits a matmul's output into tiles, one thread block "
            f"per tile, so what fills the GPU is tiles against SMs ({_GUIDE}).",
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
            "That counts FP32 lanes (CUDA cores). This exercise counts resident *threads*, "
            "the most an SM can hold (2,048 per SM); a kernel with many registers or much "
            "shared memory per block keeps fewer.",
        )
    return CheckResult(
        exercise, False, True, f"{value:g} is off. Resident threads = 132 × 2048; n = √ of that."
    )


def wave_reference(
    n: int = WAVE_OUTPUT_N, tile: int = WAVE_TILE, sms: int = H100_SMS
) -> tuple[int, int, float]:
    """(tiles, waves, busy fraction of the last wave) for an n×n output in tile×tile tiles.

    One thread block per tile and, as in NVIDIA's guide, one block per SM at a
    time: ``waves = ceil(tiles / sms)``, and the last wave keeps
    ``tiles - (waves - 1) × sms`` of the ``sms`` SMs busy.
    """
    tiles = math.ceil(n / tile) ** 2
    waves = math.ceil(tiles / sms)
    return tiles, waves, (tiles - (waves - 1) * sms) / sms


def tile_waves(waves: Any, last_wave_busy: Any) -> CheckResult:
    """Check the waves and the last wave's busy fraction for the 3072² output on an H100 SXM."""
    exercise = "tiles and waves"
    tiles, ref_waves, ref_busy = wave_reference()
    side = math.ceil(WAVE_OUTPUT_N / WAVE_TILE)
    if unsolved(waves) or unsolved(last_wave_busy):
        return todo(
            exercise,
            "tiles = (3072 / 128)²; waves = tiles / 132 rounded up; the last wave runs what is "
            "left after the full waves, out of 132 SMs.",
        )
    w = as_number(waves, "waves")
    busy = as_number(last_wave_busy, "last_wave_busy")
    if w != ref_waves:
        if close_to(w, tiles / H100_SMS, 1e-3):
            hint = "Waves are whole: a partly filled wave takes as long as a full one. Round up."
        elif w == ref_waves - 1:
            hint = "Round *up*: the tiles left after the full waves still need a wave of their own."
        elif w == tiles:
            hint = f"{tiles} is the number of tiles (thread blocks); divide by the 132 SMs."
        elif w in (side, math.ceil(side / H100_SMS)):
            hint = f"The output has {side} tiles along *each* side: {side}² tiles in all."
        else:
            hint = f"{w:g} waves is off: count the tiles first, (3072 / 128)², then divide by 132."
        return CheckResult(exercise, False, True, hint)
    if close_to(busy, ref_busy, 1e-3):
        average = tiles / (ref_waves * H100_SMS)
        return CheckResult(
            exercise,
            True,
            True,
            f"{tiles} tiles make {ref_waves} waves on 132 SMs; the last wave keeps "
            f"{tiles - (ref_waves - 1) * H100_SMS} SMs ({ref_busy:.0%}) busy, so over the whole "
            f"matmul the SMs are busy {average:.0%} of the time. This is wave quantization "
            f"({_GUIDE}). Real kernels may run more than one block per SM, or pick another tile "
            "size, which changes the count but not the idea.",
        )
    if close_to(busy, 1 - ref_busy, 1e-3):
        return CheckResult(
            exercise, False, True, "That is the *idle* fraction; busy is 1 minus it."
        )
    if close_to(busy, ref_busy * 100, 1e-3):
        return CheckResult(
            exercise, False, True, "Give it as a fraction (0 to 1), not a percentage."
        )
    if close_to(busy, tiles - (ref_waves - 1) * H100_SMS, 1e-6):
        return CheckResult(
            exercise, False, True, "That is how many tiles the last wave runs; divide by 132 SMs."
        )
    if close_to(busy, tiles / (ref_waves * H100_SMS), 1e-3):
        return CheckResult(
            exercise,
            False,
            True,
            "That is the average over all waves; the question asks for the last wave alone.",
        )
    return CheckResult(
        exercise,
        False,
        True,
        f"The waves are right; the last wave runs tiles - {ref_waves - 1} × 132 tiles on 132 SMs, "
        f"not {busy:.4g} of them.",
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
