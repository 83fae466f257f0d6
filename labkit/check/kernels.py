"""Checks for notebook 07: kernel tuning (coalescing, bank conflicts, occupancy)."""

from __future__ import annotations

import math
from typing import Any

from labkit.check.result import CheckResult, as_number, close_to, todo, unsolved

#: A warp's global accesses are served in 32-byte sectors (L1/L2); a float32 is 4 bytes.
SECTOR_BYTES = 32
FLOAT32_BYTES = 4

#: The occupancy exercise: an H100 (compute capability 9.0) and one kernel's launch.
H100_REGISTERS_PER_SM = 65_536
H100_MAX_THREADS_PER_SM = 2_048
OCCUPANCY_THREADS_PER_BLOCK = 256
OCCUPANCY_REGISTERS_PER_THREAD = 64


def useful_fraction(stride: int) -> float:
    """The share of fetched bytes a warp uses when its 32 threads read float32 at ``stride``.

    Each thread uses 4 bytes; the memory system moves whole 32-byte sectors.
    At stride s ≤ 8, a warp's reads span 4·s sectors for 32 useful floats
    (fraction 1/s); from stride 8 on, every float sits in its own sector
    (fraction 4/32 = 1/8) and the fraction stops falling.
    """
    return 1 / min(stride, SECTOR_BYTES // FLOAT32_BYTES)


def copy_rate_fraction(stride: int) -> float:
    """The effective bandwidth of ``strided_copy`` at ``stride``, as a fraction of a plain copy.

    The kernel reads n floats at ``stride`` and writes n floats contiguously
    (strided_copy.cu), so a plain copy moves 2 units of sectors for the n
    floats and the strided one 1/useful_fraction + 1: the fraction is
    2 / (min(stride, 8) + 1): 2/3 at stride 2, 2/5 at 4, 2/9 (22%) from 8 on.
    It counts 32-byte sectors only; if the L2 fetches from DRAM in larger
    pieces (a hint the CUDA runtime exposes as cudaLimitMaxL2FetchGranularity,
    0 to 128 bytes), the plateau is lower and starts later (with 64-byte
    pieces, 2/17 ≈ 12% from stride 16).
    """
    return 2 / (1 / useful_fraction(stride) + 1)


def sector_efficiency(stride_2: Any, stride_32: Any) -> CheckResult:
    """Check the useful fraction of fetched bytes at stride 2 and at stride 32."""
    exercise = "coalescing"
    if unsolved(stride_2) or unsolved(stride_32):
        return todo(
            exercise,
            "a warp's 32 threads each need 4 bytes; count the 32-byte sectors their addresses "
            "touch, and divide the useful bytes (128) by the bytes moved.",
        )
    at_2 = as_number(stride_2, "stride_2")
    at_32 = as_number(stride_32, "stride_32")
    ref_2, ref_32 = useful_fraction(2), useful_fraction(32)
    if not close_to(at_2, ref_2, 1e-3):
        if at_2 > 1:
            return CheckResult(
                exercise,
                False,
                True,
                "Give a fraction between 0 and 1 (useful bytes / bytes moved).",
            )
        return CheckResult(
            exercise,
            False,
            True,
            f"At stride 2 the warp's floats span 8 sectors (256 bytes) for 128 useful bytes; "
            f"{at_2:g} is off.",
        )
    if close_to(at_32, ref_32, 1e-3):
        return CheckResult(
            exercise,
            True,
            True,
            "1/2 at stride 2, and 1/8 at stride 32: past stride 8 every float costs a whole "
            "32-byte sector, so the reads' useful fraction falls as 1/stride until stride 8 and "
            "then stays at 1/8. That is the reads only: the next exercise adds the writes.",
        )
    if close_to(at_32, 1 / 32, 1e-3):
        return CheckResult(
            exercise,
            False,
            True,
            "The hardware does not fetch 4·32 = 128 bytes per float: the unit is a 32-byte "
            "sector. Each float at stride 32 costs one sector.",
        )
    return CheckResult(
        exercise,
        False,
        True,
        f"Stride 2 is right. At stride 32, how many bytes does each useful float bring with it? "
        f"({at_32:g} is off.)",
    )


def strided_copy_rate(answer: Any) -> CheckResult:
    """Check the strided copy's effective bandwidth at stride 32 as a fraction of a plain copy."""
    exercise = "strided copy"
    if unsolved(answer):
        return todo(
            exercise,
            "count sectors for the same n floats: a plain copy reads n floats' sectors and writes "
            "as many; the strided copy writes the same, but its reads cost 1/(useful fraction) "
            "times more. The fraction is the plain copy's sectors over the strided copy's.",
        )
    value = as_number(answer, "copy_fraction_32")
    ref = copy_rate_fraction(32)
    if close_to(value, ref, 1e-2):
        return CheckResult(
            exercise,
            True,
            True,
            f"{ref:.0%}: 2 units of sectors (read + write) against 8 + 1, because the writes stay "
            f"contiguous. By the same count: {copy_rate_fraction(2):.0%} at stride 2, "
            f"{copy_rate_fraction(4):.0%} at 4, {ref:.0%} from 8 on. Not 1/8: that would be the "
            "reads alone. Compare with the stride sweep of section 6, where a GPU run or a "
            "recording exists.",
        )
    if close_to(value, 1 / 8, 1e-2):
        return CheckResult(
            exercise,
            False,
            True,
            "1/8 is the reads' useful fraction. The kernel also writes n floats, contiguously: "
            "add the write sectors to both copies before dividing.",
        )
    return CheckResult(
        exercise,
        False,
        True,
        f"Count in units of 'the sectors n contiguous floats fill': a plain copy moves 1 + 1, "
        f"the strided copy 8 + 1 at stride 32. ({value:g} is off.)",
    )


def bank_conflicts(unpadded_ways: Any, padded_ways: Any) -> CheckResult:
    """Check the bank-conflict degree of a warp reading a column of float tile[32][32] vs [32][33]."""
    exercise = "bank conflicts"
    if unsolved(unpadded_ways) or unsolved(padded_ways):
        return todo(
            exercise,
            "element tile[i][c] lives at word i·width + c, in bank (i·width + c) mod 32. "
            "Count how many of the 32 threads (i = 0..31) land in the same bank.",
        )
    plain = as_number(unpadded_ways, "unpadded_ways")
    padded = as_number(padded_ways, "padded_ways")
    if plain != 32:
        return CheckResult(
            exercise,
            False,
            True,
            "With a row width of 32 words, (32·i + c) mod 32 = c for every i: all 32 threads "
            f"hit one bank. {plain:g} is off.",
        )
    if padded == 1:
        return CheckResult(
            exercise,
            True,
            True,
            "32-way without padding (the 32 reads serialize), 1-way (conflict-free) with a row "
            "of 33 words: (33·i + c) mod 32 = (i + c) mod 32 puts each thread in its own bank. "
            "One unused column turns the 32 serialized accesses of a column read into one; the "
            "kernel gains less than 32×, since that read is only part of its time (section 6).",
        )
    if padded == 0:
        return CheckResult(
            exercise, False, True, "Every access uses some bank: a conflict-free read is 1-way."
        )
    return CheckResult(
        exercise,
        False,
        True,
        f"The unpadded case is right. With width 33, compute (33·i + c) mod 32 for i = 0..31; "
        f"{padded:g} is off.",
    )


def theoretical_occupancy() -> float:
    """The occupancy of the exercise's kernel on an H100 (registers are the limit)."""
    per_block = OCCUPANCY_REGISTERS_PER_THREAD * OCCUPANCY_THREADS_PER_BLOCK
    blocks = H100_REGISTERS_PER_SM // per_block
    threads = min(blocks * OCCUPANCY_THREADS_PER_BLOCK, H100_MAX_THREADS_PER_SM)
    return threads / H100_MAX_THREADS_PER_SM


def occupancy(answer: Any) -> CheckResult:
    """Check the theoretical occupancy of 256-thread blocks at 64 registers per thread on an H100."""
    exercise = "occupancy"
    if unsolved(answer):
        return todo(
            exercise,
            "registers per block = 64 × 256; blocks per SM = 65,536 // that; occupancy = "
            "resident threads / 2,048.",
        )
    value = as_number(answer, "occupancy_fraction")
    if value > 1:
        value /= 100  # a percentage
    ref = theoretical_occupancy()
    if close_to(value, ref, 1e-3):
        return CheckResult(
            exercise,
            True,
            True,
            f"{ref:.0%}: 64 × 256 = 16,384 registers per block, so only 4 blocks (1,024 threads) "
            "fit in the SM's 65,536 registers. Registers, not threads, are the limit; at 32 "
            "registers per thread the same launch reaches 100%. Compare with the compiler's "
            "register counts in section 5, below.",
        )
    if close_to(value, 1.0, 1e-3):
        return CheckResult(
            exercise,
            False,
            True,
            "2,048 threads would fit by thread count alone, but each needs 64 registers: check "
            "the register file.",
        )
    if math.isclose(value, 0.25, rel_tol=1e-3):
        return CheckResult(
            exercise, False, True, "Count the blocks that fit (4), then threads: 4 × 256."
        )
    return CheckResult(exercise, False, True, f"{value:g} is off; see the hint's three steps.")
