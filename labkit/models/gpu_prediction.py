"""Notebooks 05 and 06's GPU cells without a GPU: the course models on a named GPU, predicted.

- **The course CNN** (:class:`labkit.models.cnn.CNN` at 224×224): notebook 03's
  roofline applied to one training image. Its FLOPs are counted by torch's
  ``FlopCounterMode`` over forward and backward; its bytes are the activations
  each layer writes and the next reads, tripled for backward (an estimate).
  PyTorch runs float32 convolutions on TF32 tensor cores by default
  (``torch.backends.cudnn.allow_tf32`` is True), so the float32 compute roof
  is TF32's. The slower of FLOPs / peak and bytes / bandwidth bounds the images
  per second; 16-bit activations halve the bytes.
- **Recurrent layers**: a loop over time steps launches kernels every step
  (5-20 µs each, HTA), where cuDNN runs the whole sequence in a few calls; the
  launches alone put a floor under the loop's time.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.core.units import format_count, format_duration
from labkit.machine.prediction import GpuPrediction, by_id, ratio_verdict, spec_values
from labkit.machine.published import GpuSpec, gpu_spec
from labkit.timing.gpu_prediction import LAUNCH_FIGURES

#: ResNet-50 published throughputs: training on one A100 (TF32, AMP) and inference on a T4.
RESNET_FIGURES = (
    "resnet50-train-1xa100-80gb-tf32",
    "resnet50-train-1xa100-80gb-amp",
    "resnet50-infer-t4-fp32-bs256",
    "resnet50-infer-t4-amp-bs256",
)
#: Published RNN figures: a GTX 980 Ti LSTM three ways, and CNTK's cuDNN speedup.
RNN_FIGURES = (
    "gtx980ti-lstm-1x320-pytorch-cudnn",
    "gtx980ti-lstm-1x320-pytorch-lstmcell",
    "gtx980ti-lstm-1x320-pytorch-custom-cell",
    "cntk-cudnn5-rnn-speedup",
)
#: Backward is about twice the forward, in FLOPs and in activation traffic.
TRAIN_FACTOR = 3


@dataclass(frozen=True)
class ImageCost:
    """One image's training step through a model: FLOPs and activation bytes (float32)."""

    flops: float
    bytes: float

    def images_per_s(self, tflop_per_s: float, gb_per_s: float, bytes_scale: float = 1.0) -> float:
        """The roofline's ceiling: the slower of the arithmetic and the memory traffic."""
        return min(tflop_per_s * 1e12 / self.flops, gb_per_s * 1e9 / (self.bytes * bytes_scale))


def cnn_image_cost(image_size: int = 224) -> ImageCost:
    """FLOPs and activation bytes of one training image through the course CNN (float32).

    FLOPs: torch's ``FlopCounterMode`` over a forward and a backward pass (the
    first convolution computes no input gradient, so backward is less than
    twice the forward here). Bytes: each layer's output written once and read
    once in forward, times :data:`TRAIN_FACTOR` for backward (an estimate:
    backward reads the saved activations and writes their gradients).
    """
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from labkit.models.cnn import CNN

    model = CNN()
    x = torch.zeros(1, 3, image_size, image_size)
    written: list[int] = []
    hooks = [
        m.register_forward_hook(lambda _m, _i, out: written.append(out.numel() * 4))
        for m in model.modules()
        if not list(m.children())
    ]
    with FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    for h in hooks:
        h.remove()
    forward_bytes = x.numel() * 4 + 2 * sum(written)  # each output written once, read once
    return ImageCost(counter.get_total_flops(), TRAIN_FACTOR * forward_bytes)


def _cnn_prediction(lesson: str, gpu: GpuSpec, image_size: int) -> GpuPrediction:
    # float32 convolutions run on TF32 tensor cores where the GPU has them (PyTorch's cuDNN
    # default), on the FP32 cores where it has none (T4)
    compute = "tf32_tflop_per_s" if gpu.get("tf32_tflop_per_s") else "fp32_tflop_per_s"
    found, missing = spec_values(gpu, "memory_gb_per_s", compute, "fp16_tflop_per_s")
    cost = cnn_image_cost(image_size)
    model = [
        f"one {image_size}×{image_size} training image through the course CNN: "
        f"{format_count(cost.flops, 'FLOP')} (forward and backward, counted) and about "
        f"{format_count(cost.bytes, 'B')} of activations moved (estimated): "
        f"{cost.flops / cost.bytes:.2g} FLOP/byte"
    ]
    verdicts = []
    b = found.get("memory_gb_per_s")
    if b and compute in found:
        p = found[compute]
        how = (
            "its convolution on TF32 tensor cores, PyTorch's cuDNN default"
            if compute == "tf32_tflop_per_s"
            else "the spec table has no TF32 rate for this GPU: the FP32 cores' rate"
        )
        ridge = p * 1e12 / (b * 1e9)
        bound = "memory-bound" if cost.flops / cost.bytes < ridge else "compute-bound"
        fp32 = cost.images_per_s(p, b)
        model.append(
            f"float32 ({how}): at most {fp32:,.0f} images/s ({bound}: the ridge is "
            f"{ridge:.3g} FLOP/byte)"
        )
        if "fp16_tflop_per_s" in found:
            half = cost.images_per_s(found["fp16_tflop_per_s"], b, bytes_scale=0.5)
            model.append(
                f"16-bit activations (autocast): at most {half:,.0f} images/s, "
                f"{half / fp32:.3g}× float32's ceiling"
            )
            verdicts.append(
                f"the course CNN's {cost.flops / cost.bytes:.2g} FLOP/byte is below the "
                f"{gpu.name}'s ridge, so its ceiling is set by bandwidth, and halving the bytes "
                "is what 16 bits buy it"
                if bound == "memory-bound"
                else "the course CNN is compute-bound here: 16-bit tensor cores raise its ceiling"
            )
    figures = by_id(RESNET_FIGURES)
    tf32, amp, t4_fp32, t4_amp = (f.value for f in figures)
    a100 = gpu_spec(figures[0].spec_name or "A100")
    verdicts.append(
        ratio_verdict(
            f"published ResNet-50 (a much larger model), training on an {a100.name}, TF32 → AMP",
            amp / tf32,
            a100.need("fp16_tflop_per_s") / a100.need("tf32_tflop_per_s"),
            "ratio of its FP16 and TF32 peaks",
        )
        + ", with the channels-last layout in the AMP run only (NVIDIA's configs.yml)"
    )
    verdicts.append(
        f"published ResNet-50 inference on a T4 at batch 256: {t4_amp / t4_fp32:.3g}× with AMP "
        "(and channels-last)"
    )
    return GpuPrediction(lesson, gpu, tuple(model), figures, tuple(verdicts), tuple(found), missing)


def predict_cnn(gpu: GpuSpec, image_size: int = 224) -> GpuPrediction:
    """The course CNN's training ceiling on ``gpu`` (notebook 05's throughput cell)."""
    return _cnn_prediction("cnn", gpu, image_size)


def predict_levers(gpu: GpuSpec, image_size: int = 224) -> GpuPrediction:
    """The same ceiling for notebook 05's levers cell: what 16-bit activations can buy."""
    return _cnn_prediction("levers", gpu, image_size)


def predict_rnn(gpu: GpuSpec, steps: int = 20, kernels_per_step: int = 4) -> GpuPrediction:
    """A time-step loop's launch floor on any GPU, and published cuDNN-vs-loop figures.

    ``kernels_per_step`` is a lower bound for an LSTM cell written as separate
    ops (two matmuls, the gates, the state update); fused cells launch fewer.
    """
    launches = by_id(LAUNCH_FIGURES)
    low, high = (f.value for f in launches)
    floor_low, floor_high = (steps * kernels_per_step * t / 1e3 for t in (low, high))
    model = [
        f"a loop over {steps} time steps, at least {kernels_per_step} kernels a step: "
        f"{steps * kernels_per_step} launches, {format_duration(floor_low)} to "
        f"{format_duration(floor_high)} of launching per sequence whatever the GPU (HTA's "
        "5-20 µs is a CUDA kernel launch's CPU time in PyTorch traces; a framework op adds its "
        "own dispatch)",
    ]
    figures = (*launches, *by_id(RNN_FIGURES))
    cudnn, cell, custom, cntk = (f.value for f in figures[2:])
    verdicts = [
        f"published, GTX 980 Ti: nn.LSTMCell in a Python loop {cell / cudnn:.3g}× and a "
        f"hand-written cell {custom / cudnn:.3g}× the time of cuDNN's nn.LSTM per epoch",
        f"published, CNTK: cuDNN 5's RNNs about {cntk:g}× faster than an explicit loop",
    ]
    return GpuPrediction("rnn", gpu, tuple(model), figures, tuple(verdicts))
