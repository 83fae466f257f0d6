"""Notebook 04's GPU cells without a GPU: asynchronous launches and mixed precision, predicted.

- **Async launch**: ``async_launch_demo`` queues 10 matmuls of 4096×4096 float32.
  Each does 2n³ FLOPs, so on a GPU they take at least 10 × 2n³ / (FP32 peak);
  the host returns after queueing them, 5 to 20 µs each [HTA documentation].
- **Mixed precision**: float16 or bfloat16 tensor cores can speed a
  compute-bound step up by at most the ratio of their peak to the float32
  one (or to TF32's, where TF32 is on); a step that is partly memory-bound
  gains from the halved bytes too. Published speedups of whole training runs
  show what that becomes.
"""

from __future__ import annotations

from labkit.core.units import format_duration
from labkit.machine.prediction import GpuPrediction, by_id, ratio_verdict, spec_values
from labkit.machine.published import GpuSpec
from labkit.timing.gpu_prediction import LAUNCH_FIGURES, matmul_floor_ms

REFERENCE_NAME = "accel"

#: async_launch_demo's defaults: 10 matmuls of 4096×4096.
ASYNC_SIZE, ASYNC_REPEATS = 4096, 10

#: Published mixed-precision speedups: ResNet-50 on an A100 (TF32 → AMP) and a V100 (FP32 → AMP),
#: and the PyTorch AMP recipe's expectation.
AMP_FIGURES = (
    "resnet50-train-1xa100-80gb-tf32",
    "resnet50-train-1xa100-80gb-amp",
    "resnet50-train-1xv100-16gb-fp32",
    "resnet50-train-1xv100-16gb-amp",
    "pytorch-amp-recipe-expected-speedup-low",
    "pytorch-amp-recipe-expected-speedup-high",
)


def predict_async_launch(gpu: GpuSpec) -> GpuPrediction:
    """How much sooner the host returns than ``gpu`` finishes 10 matmuls of 4096×4096."""
    found, missing = spec_values(gpu, "fp32_tflop_per_s")
    figures = by_id(LAUNCH_FIGURES)
    low, high = (f.value for f in figures)
    model = [
        f"queueing {ASYNC_REPEATS} matmuls costs the host {ASYNC_REPEATS}× one launch: "
        f"{ASYNC_REPEATS * low:g}-{ASYNC_REPEATS * high:g} µs"
    ]
    verdicts = []
    if found:
        work = ASYNC_REPEATS * matmul_floor_ms(ASYNC_SIZE, found["fp32_tflop_per_s"])
        model.append(
            f"the GPU needs at least {format_duration(work)} for them "
            f"({ASYNC_REPEATS} × 2 × {ASYNC_SIZE}³ FLOPs at {found['fp32_tflop_per_s']:g} TFLOP/s)"
        )
        verdicts.append(
            f"the host would return {work * 1e3 / (ASYNC_REPEATS * high):,.0f}× to "
            f"{work * 1e3 / (ASYNC_REPEATS * low):,.0f}× sooner than the GPU finishes: a clock "
            "read then times the queueing"
        )
    return GpuPrediction(
        REFERENCE_NAME, gpu, tuple(model), figures, tuple(verdicts), tuple(found), missing
    )


def predict_mixed_precision(gpu: GpuSpec) -> GpuPrediction:
    """The most float16 tensor cores can speed up a compute-bound step on ``gpu``, and published runs."""
    found, missing = spec_values(gpu, "fp32_tflop_per_s", "tf32_tflop_per_s", "fp16_tflop_per_s")
    model = []
    fp16 = found.get("fp16_tflop_per_s")
    for base, label in (("fp32_tflop_per_s", "float32"), ("tf32_tflop_per_s", "TF32")):
        if fp16 and base in found:
            model.append(
                f"float16 tensor cores {fp16:g} TFLOP/s against {label} {found[base]:g}: a "
                f"compute-bound step gains at most {fp16 / found[base]:.3g}× from the arithmetic"
            )
    figures = by_id(AMP_FIGURES)
    a_tf32, a_amp, v_fp32, v_amp = (f.value for f in figures[:4])
    verdicts = []
    a100 = by_id(("resnet50-train-1xa100-80gb-tf32",))[0]
    if a100.spec_name is not None:
        from labkit.machine.published import gpu_spec

        sheet = gpu_spec(a100.spec_name)
        ratio = sheet.need("fp16_tflop_per_s") / sheet.need("tf32_tflop_per_s")
        verdicts.append(
            ratio_verdict(
                f"ResNet-50 training on an {sheet.name}, TF32 → mixed precision",
                a_amp / a_tf32,
                ratio,
                "ratio of its FP16 and TF32 tensor-core peaks",
            )
            + ": but NVIDIA's AMP run also used the channels-last (NHWC) layout and its TF32 "
            "run the default one (configs.yml), so the ratio is not the precision's alone"
        )
    verdicts.append(
        f"ResNet-50 training on a V100, FP32 → mixed precision: {v_amp / v_fp32:.3g}× (FP32 at "
        "batch 112, AMP at 256 in NHWC: again not the precision's alone; the V100's spec sheet "
        "is not in this table)"
    )
    return GpuPrediction(
        REFERENCE_NAME, gpu, tuple(model), figures, tuple(verdicts), tuple(found), missing
    )
