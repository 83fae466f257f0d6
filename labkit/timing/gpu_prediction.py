"""Notebook 00's GPU cell without a GPU: what a naive clock would read on a named GPU.

The model: an n×n float32 matmul does 2n³ FLOPs, so on a GPU it takes at
least 2n³ / (FP32 peak) (PyTorch runs float32 matmuls in full FP32 unless
TF32 is allowed, notebook 04). A clock read right after the launch, with no
synchronize, measures only the launch: 5 to 20 µs of CPU time per kernel
[HTA documentation]. The prediction is how much the naive clock would
under-report, for the size ``labkit bench timing --record`` uses.
"""

from __future__ import annotations

from labkit.core.units import format_duration
from labkit.machine.prediction import GpuPrediction, by_id, spec_values
from labkit.machine.published import GpuSpec
from labkit.timing.pitfalls import GPU_MATMUL_N, REFERENCE_NAME

#: Published figures on the launch cost: the two ends of HTA's 5-20 µs.
LAUNCH_FIGURES = ("kernel-launch-cpu-time-typical-low", "kernel-launch-cpu-time-typical-high")


def matmul_floor_ms(n: int, fp32_tflop_per_s: float) -> float:
    """The least time an n×n float32 matmul can take at ``fp32_tflop_per_s`` (2n³ FLOPs)."""
    return 2 * n**3 / (fp32_tflop_per_s * 1e12) * 1e3


def predict_naive_timing(gpu: GpuSpec, n: int = GPU_MATMUL_N) -> GpuPrediction:
    """How far a naive clock would under-report an n×n float32 matmul on ``gpu``."""
    found, missing = spec_values(gpu, "fp32_tflop_per_s")
    low, high = (f.value for f in by_id(LAUNCH_FIGURES))  # µs
    figures = by_id(LAUNCH_FIGURES)
    model = [f"a naive clock reads the launch: {low:g} to {high:g} µs per call (published, below)"]
    verdicts = []
    if found:
        work_ms = matmul_floor_ms(n, found["fp32_tflop_per_s"])
        model.insert(
            0,
            f"{n}×{n} float32 matmul: 2n³ = {2 * n**3 / 1e9:.1f} GFLOP at "
            f"{found['fp32_tflop_per_s']:g} TFLOP/s FP32 takes at least {format_duration(work_ms)}",
        )
        verdicts.append(
            f"the GPU works at least {format_duration(work_ms)} per call while a naive clock "
            f"reads {low:g}-{high:g} µs: it would under-report the matmul "
            f"{work_ms * 1e3 / high:,.0f}× to {work_ms * 1e3 / low:,.0f}× (a PyTorch call adds its "
            "own dispatch to the launch, which lowers the factor; a matmul slower than the peak "
            "raises it)"
        )
    return GpuPrediction(
        REFERENCE_NAME, gpu, tuple(model), figures, tuple(verdicts), tuple(found), missing
    )
