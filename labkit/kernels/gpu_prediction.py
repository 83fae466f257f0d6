"""Notebook 07's GPU cell without a GPU: the kernels' models for a named GPU, and published SGEMMs.

- **The strided copy** (exercise 1b's sector model): strided reads, coalesced
  writes, 2/(min(s, 8) + 1) of a plain copy's rate, here applied to the GPU's
  peak bandwidth (a ceiling: a real copy reaches a fraction of it, notebook 02).
- **Occupancy** (section 4's calculator): the registers per thread above which
  no block size reaches 100% on this GPU's architecture, and what the tiled
  SGEMM's 81-128 registers per thread leave it.
- **SGEMM against cuBLAS**: a published step-by-step SGEMM tutorial's kernels
  as fractions of cuBLAS on one GPU, beside this course's ≥ 50% bar.
"""

from __future__ import annotations

import re

from labkit.kernels.occupancy import ARCHES, occupancy, register_threshold
from labkit.machine.prediction import GpuPrediction, by_id, spec_values
from labkit.machine.published import GpuSpec

REFERENCE_NAME = "kernels"

#: Strides the prediction lists.
STRIDES = (1, 2, 4, 8, 16)

#: The published SGEMM kernels (siboehm/SGEMM_CUDA, RTX A6000), cuBLAS first.
SGEMM_FIGURES = (
    "rtx-a6000-sgemm-cublas",
    "rtx-a6000-sgemm-naive",
    "rtx-a6000-sgemm-smem-caching",
    "rtx-a6000-sgemm-2d-blocktiling",
    "rtx-a6000-sgemm-warptiling",
)
#: The course's bar for the tiled SGEMM at 4096 (notebook 07, section 6).
SGEMM_BAR = 0.5


def strided_copy_fraction(stride: int) -> float:
    """A copy with strided reads and coalesced writes, as a fraction of a plain copy's rate."""
    return 2 / (min(stride, 8) + 1)


def gpu_arch(gpu: GpuSpec) -> str | None:
    """The compute capability in ``gpu``'s "arch" ("Hopper (sm_90)" → "sm_90"), if labkit knows it."""
    found = re.search(r"sm_\d+", gpu.arch)
    return found.group(0) if found and found.group(0) in ARCHES else None


def predict_kernels(gpu: GpuSpec) -> GpuPrediction:
    """The strided copy's ceiling, the occupancy limits and published SGEMM fractions for ``gpu``."""
    found, missing = spec_values(gpu, "memory_gb_per_s")
    model = []
    if found:
        b = found["memory_gb_per_s"]
        model.append(
            "strided copy, at most: "
            + ", ".join(f"stride {s} {b * strided_copy_fraction(s):,.0f} GB/s" for s in STRIDES)
            + f" (2/(min(s, 8) + 1) of the {b:,.0f} GB/s peak)"
        )
    arch = gpu_arch(gpu)
    if arch is not None:
        threshold = register_threshold(arch)
        model.append(
            f"{arch}: above {threshold} registers per thread no block size reaches 100% occupancy"
        )
        for regs in (81, 128):
            occ = occupancy(arch, threads_per_block=256, registers_per_thread=regs)
            model.append(
                f"{arch}: 256-thread blocks at {regs} registers per thread: "
                f"{occ.occupancy_fraction:.0%} occupancy"
            )
    figures = by_id(SGEMM_FIGURES)
    cublas = figures[0].value
    fractions = ", ".join(
        f"{f.quantity.split(chr(39))[1]} {f.value / cublas:.1%}" for f in figures[1:]
    )
    verdicts = [
        f"published, {figures[0].gpu}, SGEMM at 4092: {fractions} of cuBLAS; this course's bar "
        f"for its tiled SGEMM is {SGEMM_BAR:.0%}"
    ]
    return GpuPrediction(
        REFERENCE_NAME, gpu, tuple(model), figures, tuple(verdicts), tuple(found), missing
    )
