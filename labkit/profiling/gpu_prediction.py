"""Notebook 09's GPU cell without a GPU: what a ``.item()`` every step costs on a named GPU.

The model: with one sync per step the GPU idles from the moment its queue
drains until the host has issued the next step's first kernel: the host work
in between (notebook 09 section 4) and a launch, whose CPU-side cost HTA puts
at 5-20 µs. Set against the step's own GPU time (the course CNN's training
step at batch 128 of 128×128 images, estimated with notebook 03's roofline),
it says when the sync matters: short steps, long host work between them.
"""

from __future__ import annotations

from labkit.core.units import format_duration
from labkit.machine.prediction import GpuPrediction, by_id, spec_values
from labkit.machine.published import GpuSpec
from labkit.timing.gpu_prediction import LAUNCH_FIGURES

REFERENCE_NAME = "profile"

#: The cell's training step: batch 128 of 128×128 images.
BATCH, IMAGE_SIZE = 128, 128


def predict_sync_stall(gpu: GpuSpec) -> GpuPrediction:
    """One launch's CPU time against the course CNN's roofline-floor step on ``gpu``."""
    from labkit.models.gpu_prediction import cnn_image_cost

    compute = "tf32_tflop_per_s" if gpu.get("tf32_tflop_per_s") else "fp32_tflop_per_s"
    found, missing = spec_values(gpu, "memory_gb_per_s", compute)
    launches = by_id(LAUNCH_FIGURES)
    low, high = (f.value for f in launches)
    model = [
        "after a sync the GPU waits until the host has issued the next step's first kernel: "
        f"the host work in between, and at least one launch (HTA puts a launch's CPU-side cost "
        f"at {low:g}-{high:g} µs)"
    ]
    verdicts = []
    if len(found) == 2:
        cost = cnn_image_cost(IMAGE_SIZE)
        step_ms = (
            BATCH
            * max(
                cost.flops / (found[compute] * 1e12),
                cost.bytes / (found["memory_gb_per_s"] * 1e9),
            )
            * 1e3
        )
        model.append(
            f"the course CNN's training step, batch {BATCH} of {IMAGE_SIZE}×{IMAGE_SIZE}: "
            f"{format_duration(step_ms)} of GPU time on the {gpu.name} at the peaks (a roofline "
            "floor with counted FLOPs and estimated bytes, its convolution at the TF32 tensor-core "
            "rate as PyTorch runs it by default, or at the FP32 rate where the spec table has no "
            "TF32 rate for this GPU; real kernels take longer)"
        )
        verdicts.append(
            f"against a step of {format_duration(step_ms)}, one launch's CPU time would be "
            f"{low / (step_ms * 1e3):.1%} to {high / (step_ms * 1e3):.1%} of it (less against a "
            "longer real step): the sync costs "
            "most where steps are short or the host work between the sync and the next launch "
            "is long (a GPU run measures both)"
        )
    return GpuPrediction(
        REFERENCE_NAME, gpu, tuple(model), launches, tuple(verdicts), tuple(found), missing
    )
