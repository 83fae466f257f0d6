"""Checks for notebook 12: a launch grid and its masks, the interpreter's cost, a tile's reuse."""

from __future__ import annotations

import math
from typing import Any

from labkit.check.result import CheckResult, as_number, close_to, known_mistake, todo, unsolved

# --- programs and masks of the copy kernel ---

#: The exercise: copy_kernel over 10,000 floats in blocks of 256.
GRID_N = 10_000
GRID_BLOCK = 256


def triton_grid(programs: Any, masked: Any) -> CheckResult:
    """Check the programs ``copy_kernel`` launches for :data:`GRID_N` floats and the lanes masked off."""
    exercise = "programs and masks"
    if unsolved(programs) or unsolved(masked):
        return todo(exercise, "one program per block of BLOCK elements, the last one partly full.")
    p = as_number(programs, "programs")
    m = as_number(masked, "masked")
    ref_p = math.ceil(GRID_N / GRID_BLOCK)
    ref_m = ref_p * GRID_BLOCK - GRID_N
    if p == ref_p and m == ref_m:
        return CheckResult(
            exercise,
            True,
            True,
            f"{ref_p} programs (cdiv({GRID_N:,}, {GRID_BLOCK})); the last covers elements "
            f"{(ref_p - 1) * GRID_BLOCK:,} to {ref_p * GRID_BLOCK - 1:,}, and its {ref_m} lanes "
            f"past {GRID_N - 1:,} are masked off: they neither load nor store. In CUDA C with "
            f"{GRID_BLOCK} threads per block the launch is {ref_p} blocks, and the `if (i < n)` "
            f"leaves {ref_m} threads of the last one idle.",
        )
    if p == GRID_N // GRID_BLOCK:
        return CheckResult(
            exercise,
            False,
            True,
            f"{p:.0f} programs cover only {p * GRID_BLOCK:,.0f} elements: round the division up.",
        )
    if p != ref_p:
        return CheckResult(
            exercise, False, True, f"{p:g} programs is off: programs = ceil(n / BLOCK)."
        )
    return CheckResult(
        exercise,
        False,
        True,
        f"{ref_p} programs is right; the masked lanes are programs × BLOCK − n.",
    )


# --- the interpreter's time, from the cost per program ---


def interpreter_time(predicted_ms: Any, per_program_us: float, n: int, block: int) -> CheckResult:
    """Check a prediction of the interpreter's copy time for ``n`` floats in blocks of ``block``.

    ``per_program_us`` is the sweep's measured cost per program; the answer is
    programs × that cost, within 5%.
    """
    exercise = "the interpreter's time"
    if unsolved(predicted_ms):
        return todo(exercise, "the interpreter's time is about programs × its cost per program.")
    value = as_number(predicted_ms, "predicted_ms")
    programs = math.ceil(n / block)
    ref = programs * per_program_us / 1e3
    if close_to(value, ref, 0.05):
        return CheckResult(
            exercise,
            True,
            True,
            f"about {ref:.1f} ms: {programs:,} programs × {per_program_us:.0f} µs. Each program "
            "runs as a few NumPy operations over its whole block, so the count of programs, "
            "far more than the count of elements, sets the time.",
        )
    mistakes = [
        (ref * 1e3, "Give milliseconds, not microseconds."),
        (n * per_program_us / 1e3, "Count programs (n / block), not elements."),
    ]
    if (mistake := known_mistake(exercise, value, mistakes, 0.05)) is not None:
        return mistake
    return CheckResult(
        exercise, False, True, f"{value:g} ms is off: programs = ceil(n / block), × µs per program."
    )


# --- how often a tiled matmul loads each element of A ---

#: The exercise: C = A @ B with n = 4,096, tiles of BLOCK_M = BLOCK_N = 128.
TILE_N = 4096
TILE_BLOCK = 128


def tile_reuse(loads_of_each_a_element: Any) -> CheckResult:
    """Check how many programs load each element of A (matmul_kernel, :data:`TILE_BLOCK` tiles)."""
    exercise = "tile reuse"
    if unsolved(loads_of_each_a_element):
        return todo(exercise, "which programs need row i of A? All those in tile row i // BLOCK_M.")
    value = as_number(loads_of_each_a_element, "loads_of_each_a_element")
    ref = TILE_N // TILE_BLOCK
    if value == ref:
        return CheckResult(
            exercise,
            True,
            True,
            f"{ref}: every program in A's tile row (N / BLOCK_N = {ref} of them) loads it once. "
            f"An element of A feeds {TILE_N:,} multiply-adds, so each load serves {TILE_BLOCK} "
            "of them: bigger tiles mean fewer loads per FLOP, which is what the tiles in "
            "shared memory and registers of sgemm.cu buy. The repeats, one tile loaded by "
            "several programs, can hit in the L2; grouped program order makes that likelier.",
        )
    mistakes = [
        (TILE_N, "That is one load per multiply-add, the naive kernel's count; tiles share loads."),
        (ref * ref, "That counts every program; only one tile row needs a given row of A."),
        (
            1,
            "Programs do not share registers or shared memory: each one in the tile row loads "
            "its own copy (the L2 may serve the repeats).",
        ),
    ]
    if (mistake := known_mistake(exercise, value, mistakes, 1e-6)) is not None:
        return mistake
    return CheckResult(exercise, False, True, f"{value:g} is off: count the tiles of C per row.")
