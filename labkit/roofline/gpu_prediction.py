"""Notebook 03's GPU cell without a GPU: a named GPU's roofline, from its spec sheet.

The roofline model needs two numbers per dtype: the compute roof (the dense
tensor-core or CUDA-core peak) and the memory roof (the peak bandwidth). From
a spec sheet it gives each roof's ridge point and, for notebook 03's
operations, the best rate their intensity allows and which roof binds.
Published "maximum achievable matmul" measurements (the best of a sweep of
shapes) say how far below the compute roof a real matmul stays.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from labkit.core.units import format_gflop_per_s, three_digits
from labkit.machine.prediction import GpuPrediction, choose_figures, spec_verdicts
from labkit.machine.published import GpuSpec, PublishedFigure
from labkit.roofline.model import OpCost, Roofline

REFERENCE_NAME = "roofline"

#: Roofline dtypes and the spec-sheet field of their compute roof.
ROOFS: Mapping[str, str] = {
    "float32": "fp32_tflop_per_s",
    "tf32": "tf32_tflop_per_s",
    "bfloat16": "bf16_tflop_per_s",
    "float16": "fp16_tflop_per_s",
}


def spec_roofline(gpu: GpuSpec) -> Roofline | None:
    """The roofline of ``gpu``'s spec sheet (the dtypes it has rates for), None without bandwidth."""
    bandwidth = gpu.get("memory_gb_per_s")
    peaks = {d: v * 1e3 for d, f in ROOFS.items() if (v := gpu.get(f)) is not None}
    if bandwidth is None or not peaks:
        return None
    return Roofline(
        device=f"{gpu.name} (spec sheet)",
        peak_gflop_per_s=peaks,
        peak_gb_per_s=bandwidth,
        ceiling_kind="peak",
    )


def predict_roofline(gpu: GpuSpec, ops: Mapping[str, OpCost] | None = None) -> GpuPrediction:
    """Ridge points of ``gpu`` and, for each of ``ops``, its best rate and binding roof there."""
    roof = spec_roofline(gpu)
    fields = ("memory_gb_per_s", *ROOFS.values())
    used = tuple(f for f in fields if gpu.get(f) is not None)
    missing = tuple(f for f in fields if gpu.get(f) is None)
    model: list[str] = []
    if roof is not None:
        for dtype in roof.dtypes:
            model.append(
                f"{dtype:>8}: peak {format_gflop_per_s(roof.peak(dtype))}, ridge point "
                f"{three_digits(roof.ridge_point(dtype))} FLOP/byte"
            )
        for name, op in (ops or {}).items():
            # TF32 runs matmuls and convolutions on tensor cores, never elementwise ops or sums
            tensor_core = op.kind in ("matmul", "conv2d") and op.dtype == "float32"
            dtypes: Iterable[str] = [op.dtype] + (["tf32"] if tensor_core else [])
            parts = [
                f"{d}: ≤ {format_gflop_per_s(roof.attainable_gflop_per_s(op.arithmetic_intensity, d))}"
                f" ({roof.bound(op, d)})"
                for d in dtypes
                if d in roof.dtypes
            ]
            if parts:
                model.append(
                    f"{name} ({three_digits(op.arithmetic_intensity)} FLOP/byte): "
                    + "; ".join(parts)
                )

    def keep(figure: PublishedFigure) -> bool:  # matmul peaks anywhere, bandwidth on this GPU
        field = figure.spec_field
        return field in ROOFS.values() or (field is not None and figure.spec_name == gpu.name)

    figures = choose_figures(REFERENCE_NAME, gpu, keep, limit=6)
    verdicts = spec_verdicts(figures)
    if verdicts:
        verdicts.append(
            "a maximum achievable matmul is the best of a sweep of shapes, and it stays below "
            "the roof: a spec sheet's peak assumes every unit busy at the boost clock, so the gap "
            "holds the clock the card sustains under load as well as what the kernel leaves"
        )
    return GpuPrediction(REFERENCE_NAME, gpu, tuple(model), figures, tuple(verdicts), used, missing)
