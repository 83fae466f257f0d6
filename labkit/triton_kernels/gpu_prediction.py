"""Notebook 12's GPU cell without a GPU: floors from the spec sheet, notebook 07's CUDA C recording.

The GPU run times four kernels (:mod:`labkit.triton_kernels.gpu`). Without a
GPU, the lesson's models give the floors a GPU's spec sheet sets for the
same sizes: a copy or a softmax over arrays far larger than the L2 reads and
writes each byte once, so it takes at least bytes / peak bandwidth; the
strided copy reaches 2 / (min(s, 8) + 1) of a copy's rate (notebook 07's
sector model); a float32 SGEMM on the CUDA cores at least FLOPs / FP32 peak.
Beside them: what this kit recorded for notebook 07's CUDA C versions of the
same kernels, labelled as a recording, and a published Triton figure.
"""

from __future__ import annotations

from labkit.core.units import format_duration
from labkit.kernels.gpu_prediction import strided_copy_fraction
from labkit.machine.prediction import GpuPrediction, by_id, spec_values
from labkit.machine.published import GpuSpec

#: The recording's sizes (labkit.triton_kernels.gpu): bytes per array, softmax and SGEMM shapes.
ARRAY_BYTES = 256 * 1024**2
SOFTMAX_SHAPE = (4096, 16384)
MATMUL_N = 4096
STRIDES = (1, 2, 4, 8, 16)
TRITON_FIGURES = ("triton-tutorial-matmul-grouped-ordering-a100",)
#: The lines of notebook 07's recording (labkit bench kernels) that this lesson's kernels match.
CUDA_C_LINES = (
    "ceiling, device-to-device copy",
    "stride 1:",
    "stride 2:",
    "stride 4:",
    "stride 8:",
    "stride 16:",
    "SGEMM:",
    "ceiling, cuBLAS SGEMM",
    "tiled BM=128 BN=128 BK=16 TM=8 TN=8:",
)


def predict_triton(gpu: GpuSpec) -> GpuPrediction:
    """Floors for the recording's copy, strided copy, softmax and SGEMM on ``gpu``'s spec sheet."""
    found, missing = spec_values(gpu, "memory_gb_per_s", "fp32_tflop_per_s")
    model = []
    bandwidth = found.get("memory_gb_per_s")
    if bandwidth:
        moved = 2 * ARRAY_BYTES
        model.append(
            f"copy of {ARRAY_BYTES / 2**20:.0f} MiB (read once, written once): at least "
            f"{format_duration(moved / (bandwidth * 1e9) * 1e3)} at {bandwidth:,.0f} GB/s"
        )
        rows, cols = SOFTMAX_SHAPE
        model.append(
            f"softmax of {rows:,} x {cols:,} float32, fused (each element read and written "
            f"once): the same floor, {format_duration(2 * rows * cols * 4 / (bandwidth * 1e9) * 1e3)}"
        )
        model.append(
            "strided copy (notebook 07's sector model, a ceiling): "
            + ", ".join(
                f"stride {s} {strided_copy_fraction(s) * bandwidth:,.0f} GB/s" for s in STRIDES
            )
        )
    fp32 = found.get("fp32_tflop_per_s")
    if fp32:
        flops = 2 * MATMUL_N**3
        model.append(
            f"SGEMM {MATMUL_N:,}³ in float32 on the CUDA cores ({flops / 1e9:.0f} GFLOP): at least "
            f"{format_duration(flops / (fp32 * 1e12) * 1e3)} at {fp32:g} TFLOP/s"
        )
    figures = by_id(TRITON_FIGURES)
    return GpuPrediction("triton", gpu, tuple(model), figures, (), tuple(found), missing)


def cuda_c_recorded_lines() -> list[str]:
    """Notebook 07's CUDA C kernels as this kit recorded them on a GPU, or one line saying none is."""
    from labkit.machine.reference import load

    recording = load("kernels")
    if recording is None:
        return [
            "No recording of notebook 07's CUDA C kernels exists yet (labkit bench kernels --record)."
        ]
    summary = recording.results.get("summary", [])
    keep: list[str] = []
    for line in (raw.strip() for raw in summary):
        if line.startswith(CUDA_C_LINES) and not (
            line.startswith("ceiling, device")
            and any(k.startswith("ceiling, device") for k in keep)
        ):  # the copy's ceiling once, not once per section
            keep.append(line)
    return [
        f"Notebook 07's CUDA C kernels, recorded by this kit on an {recording.gpu} "
        f"({recording.recorded}; labkit bench kernels --record), for comparison:",
        *(f"  {line}" for line in keep),
    ]
