"""Checks for notebook 02: memory bandwidth and transfers."""

from __future__ import annotations

from typing import Any

from labkit.check.result import CheckResult, as_number, close_to, todo, unsolved

# --- notebook 02: STREAM's byte counting, and what a transfer costs ---


def stream_bytes(bytes_per_call: Any) -> CheckResult:
    """Check the bytes STREAM credits one triad call on 1,000,000 float32 values with."""
    exercise = "STREAM bytes of a triad"
    if unsolved(bytes_per_call):
        return todo(exercise, "a = b + s·c touches three arrays once each; float32 is 4 bytes.")
    value = as_number(bytes_per_call, "bytes_per_call")
    n, item = 1_000_000, 4
    ref = 3 * n * item
    if close_to(value, ref, 1e-9):
        return CheckResult(
            exercise,
            True,
            True,
            f"{ref:,} bytes: read b, read c, write a. The scalar s lives in a register and "
            "costs no memory traffic.",
        )
    wrong = [
        (2 * n * item, "That counts two arrays; the triad reads b and c and writes a."),
        (
            4 * n * item,
            "That adds the write-allocate read of a, which the hardware does but "
            "STREAM does not count.",
        ),
        (3 * n * 8, "That is float64 (8 bytes); these values are float32 (4 bytes)."),
        (3 * n, "That counts elements, not bytes: × 4 bytes per float32."),
        (ref / 1e9, "Give bytes, not GB."),
    ]
    for wrong_value, why in wrong:
        if close_to(value, wrong_value, 1e-9):
            return CheckResult(exercise, False, True, why)
    return CheckResult(exercise, False, True, f"{value:,.0f} is off: arrays × elements × bytes.")


#: Host-to-device over PCIe 4.0 x16 in practice, and the H100 SXM's HBM3 peak.
PCIE_GB_PER_S = 25.0
HBM_GB_PER_S = 3350.0


def transfer_vs_hbm(ratio: Any) -> CheckResult:
    """Check how many times longer 4 GiB takes over PCIe (25 GB/s) than from HBM (3,350 GB/s)."""
    exercise = "PCIe against HBM"
    if unsolved(ratio):
        return todo(exercise, "time = bytes / bandwidth for each; divide the two times.")
    value = as_number(ratio, "ratio")
    ref = HBM_GB_PER_S / PCIE_GB_PER_S
    if close_to(value, ref, 0.01):
        return CheckResult(
            exercise,
            True,
            True,
            f"{ref:.0f}×: moving a batch to the GPU costs as much as reading it {ref:.0f} times "
            "on the GPU. Keep data resident, and overlap the copies you cannot avoid.",
        )
    if close_to(value, 1 / ref, 0.01):
        return CheckResult(
            exercise, False, True, "Upside down: PCIe is the slow one (time = bytes / GB/s)."
        )
    return CheckResult(
        exercise,
        False,
        True,
        f"{value:.4g} is off. The size cancels: the ratio is {HBM_GB_PER_S:g} / {PCIE_GB_PER_S:g}.",
    )
