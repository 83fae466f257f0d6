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
            "strided copy (notebook 07's sector model applied to the peak bandwidth): "
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
        *_against_sheet(recording.gpu, keep),
    ]


def _against_sheet(gpu_name: str, lines: list[str]) -> list[str]:
    """The recorded copy and cuBLAS rates as fractions of the recorded GPU's own spec sheet."""
    import re

    from labkit.machine.published import gpu_spec

    try:
        sheet = gpu_spec(gpu_name.removeprefix("NVIDIA ").strip())
    except ValueError:
        return []
    text = "\n".join(lines)
    copy = re.search(r"device-to-device copy.*?: ([\d.]+) GB/s", text)
    sgemm = re.search(r"cuBLAS SGEMM[^:]*: ([\d.]+) TFLOP/s", text)
    bandwidth, fp32 = sheet.get("memory_gb_per_s"), sheet.get("fp32_tflop_per_s")
    parts = []
    if copy and bandwidth:
        parts.append(
            f"the device copy reached {float(copy.group(1)) / bandwidth:.0%} of its "
            f"{bandwidth:,.0f} GB/s"
        )
    if sgemm and fp32:
        parts.append(
            f"cuBLAS SGEMM {float(sgemm.group(1)) / fp32:.0%} of its {fp32:g} TFLOP/s FP32"
        )
    return [f"  against the {sheet.name}'s spec sheet: " + "; ".join(parts)] if parts else []


def recorded_triton_code(max_lines: int = 40) -> list[str]:
    """The Triton kernel Inductor wrote on a GPU for section 6's softmax, from the recording."""
    from labkit.machine.reference import load

    recording = load("triton")
    inductor = recording.results.get("inductor") if recording is not None else None
    if recording is None or not inductor or inductor.get("language") != "Triton":
        return [
            "No recording of the Triton code Inductor writes on a GPU exists yet; make one on a "
            "GPU machine with: labkit bench triton --record"
        ]
    lines = str(inductor["kernel_source"]).splitlines()
    if len(lines) > max_lines:
        lines = lines[:max_lines] + [f"... ({len(lines) - max_lines} more lines)"]
    return [
        f"The Triton kernel Inductor wrote for softmax(2x + 1) on an {recording.gpu} "
        f"({recording.recorded}; labkit bench triton --record):",
        *lines,
    ]
