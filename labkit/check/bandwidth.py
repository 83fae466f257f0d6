"""Checks for notebook 02: memory bandwidth and transfers."""

from __future__ import annotations

from typing import Any

from labkit.check.result import CheckResult, as_number, close_to, known_mistake, todo, unsolved

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
    if (mistake := known_mistake(exercise, value, wrong, 1e-9)) is not None:
        return mistake
    return CheckResult(exercise, False, True, f"{value:,.0f} is off: arrays × elements × bytes.")


#: The H100 SXM's theoretical HBM3 peak (NVIDIA's datasheet: 3.35 TB/s).
HBM_GB_PER_S = 3350.0

#: PCIe Gen5 x16, theoretical, per direction: 32 GT/s x 16 lanes x 128/130 (encoding) / 8 bits.
PCIE_GEN5_LANE_GT_PER_S = 32.0
PCIE_GEN5_X16_GB_PER_S = PCIE_GEN5_LANE_GT_PER_S * 16 * 128 / 130 / 8
#: Host-to-device copies measured on H100 systems with nvbandwidth: about 57 GB/s on three of
#: four GPUs of one VM (github.com/NVIDIA/nvbandwidth/issues/6) ...
H100_MEASURED_H2D_HIGH_GB_PER_S = 57.0
#: ... and 35.2 GB/s (SM copies, against 52.8 GB/s back) in one report whose author found the
#: asymmetry anomalous ("they should be close values", github.com/NVIDIA/nvbandwidth/issues/24).
H100_MEASURED_H2D_GB_PER_S = 35.2
H100_MEASURED_D2H_GB_PER_S = 52.8


def host_link_vs_hbm(ratio: Any) -> CheckResult:
    """Check how many times longer 4 GiB takes over PCIe Gen5 x16 than from H100 HBM3, peak to peak.

    Both figures are theoretical peaks (the datasheet's), so the ratio compares
    like with like; the message then says what measured copies change.
    """
    exercise = "PCIe Gen5 against HBM3"
    if unsolved(ratio):
        return todo(
            exercise,
            "link GB/s = GT/s per lane × lanes × 128/130 ÷ 8; then time = bytes / GB/s for each.",
        )
    value = as_number(ratio, "ratio")
    link = PCIE_GEN5_X16_GB_PER_S
    ref = HBM_GB_PER_S / link
    if close_to(value, ref, 0.01):
        low = HBM_GB_PER_S / H100_MEASURED_H2D_HIGH_GB_PER_S
        high = HBM_GB_PER_S / H100_MEASURED_H2D_GB_PER_S
        return CheckResult(
            exercise,
            True,
            True,
            f"{ref:.0f}× (the link: {link:.1f} GB/s each way): peak to peak, copying a batch "
            f"to the GPU costs as much as reading it {ref:.0f} times there. Measured host-to-device "
            f"copies on H100 systems reach about {H100_MEASURED_H2D_HIGH_GB_PER_S:g} GB/s "
            f"(NVIDIA/nvbandwidth issue 6) down to {H100_MEASURED_H2D_GB_PER_S:g} GB/s in one "
            f"report its author found anomalous (issue 24), so in practice {low:.0f}–{high:.0f}× "
            "against the peak HBM figure, which mixes a measured and a peak figure. Keep data "
            "resident.",
        )
    wrong = [
        (
            HBM_GB_PER_S / (2 * link),
            "That uses 126 GB/s, both directions together (NVIDIA's "
            "'128 GB/s'); a copy to the GPU uses one direction.",
        ),
        (
            HBM_GB_PER_S / (PCIE_GEN5_LANE_GT_PER_S * 16 / 8),
            "Close: that ignores the 128b/130b "
            "encoding (130 bits on the wire carry 128 bits of data).",
        ),
        (HBM_GB_PER_S / (PCIE_GEN5_LANE_GT_PER_S * 16), "That forgot ÷ 8: GT/s are bits."),
        (HBM_GB_PER_S / 25.0, "That is a practical PCIe Gen4 figure (25 GB/s); the H100 has Gen5."),
        (1 / ref, "Upside down: PCIe is the slow one (time = bytes / GB/s)."),
    ]
    if (mistake := known_mistake(exercise, value, wrong, 0.01)) is not None:
        return mistake
    return CheckResult(
        exercise,
        False,
        True,
        f"{value:.4g} is off. The size cancels: the ratio is {HBM_GB_PER_S:g} GB/s over the "
        "link's GB/s; look at the link: 32 GT/s × 16 lanes × 128/130 ÷ 8.",
    )
