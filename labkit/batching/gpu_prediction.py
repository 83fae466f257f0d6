"""Notebook 08's GPU cells without a GPU: the knee and the largest batch on a named GPU.

- **Throughput against batch size**: a training step costs a fixed host part,
  at least its kernel launches (5-20 µs each, HTA), plus about 6 FLOPs per
  parameter per sample (2 in forward, 4 in backward). At the FP32 peak, the
  batch where the arithmetic equals the launches is where the knee can start:
  below it the step is launch-bound and samples/s grows with the batch.
- **The largest batch**: the fixed memory (weights, gradients, Adam's two
  moments: 16 bytes per parameter) plus, per sample, the activations saved for
  backward and about as much again in temporaries, against the search's cap
  of 25% of the GPU's memory (labkit's rule; the search uses the free memory).
"""

from __future__ import annotations

from labkit.batching.largest import RECORDED_SHAPE
from labkit.core.units import format_bytes
from labkit.machine.memory import DEFAULT_FRACTION
from labkit.machine.prediction import GpuPrediction, by_id, spec_values
from labkit.machine.published import GpuSpec
from labkit.timing.gpu_prediction import LAUNCH_FIGURES

REFERENCE_NAME = "batching"

#: Published inference throughput against batch size (ResNet-50 on a T4, NVIDIA).
BATCH_FIGURES = (
    "resnet50-infer-t4-fp32-bs1",
    "resnet50-infer-t4-fp32-bs256",
    "resnet50-infer-t4-amp-bs1",
    "resnet50-infer-t4-amp-bs256",
)
#: A lower bound on the kernels of the MLP's training step: forward (3 linear layers, 2 ReLUs,
#: the loss), backward (about twice as many) and one optimizer update.
MLP_STEP_KERNELS = 20
#: Adam's fixed memory per parameter: weight, gradient, two moments, float32.
ADAM_BYTES_PER_PARAMETER = 16


def mlp_parameters(sizes: tuple[int, ...] = (256, 512, 512, 10)) -> int:
    """Weights and biases of the MLP ``labkit.batching.step.mlp`` builds."""
    return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:], strict=True))


def mlp_train_flops_per_sample(sizes: tuple[int, ...] = (256, 512, 512, 10)) -> int:
    """FLOPs of one sample's training step through the MLP's linear layers.

    Forward: one multiply-add (2 FLOPs) per weight. Backward: the weight's
    gradient (2 per weight) and the input's (2 per weight), except for the first
    layer, whose input needs no gradient.
    """
    weights = [a * b for a, b in zip(sizes[:-1], sizes[1:], strict=True)]
    return 6 * sum(weights) - 2 * weights[0]


def cnn_saved_bytes_per_sample(shape: tuple[int, int, int]) -> tuple[int, int]:
    """(bytes autograd saves for backward per sample, parameters) of the course CNN on ``shape``.

    Counted with ``torch.autograd.graph.saved_tensors_hooks`` on one sample, as
    :mod:`labkit.batching.memory_fit` counts them; parameters are not counted
    as activations.
    """
    import torch

    from labkit.models.cnn import CNN, count_params

    model = CNN()
    weights = {p.data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.data_ptr() not in weights:
            saved[t.data_ptr()] = t.numel() * t.element_size()
        return t

    x = torch.zeros(1, *shape)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x).sum()
    return sum(saved.values()), count_params(model)


def predict_batch_sweep(gpu: GpuSpec) -> GpuPrediction:
    """The batch below which the MLP's training step on ``gpu`` is launch-bound."""
    found, missing = spec_values(gpu, "fp32_tflop_per_s")
    flops = mlp_train_flops_per_sample()
    launches = by_id(LAUNCH_FIGURES)
    low, high = (f.value for f in launches)
    model = [
        f"the MLP's training step: at least {MLP_STEP_KERNELS} kernels, "
        f"{MLP_STEP_KERNELS * low:g}-{MLP_STEP_KERNELS * high:g} µs of launching per step "
        f"whatever the batch (HTA's CPU-side cost per launch); {flops / 1e6:.2f} MFLOP per sample "
        "(forward 2 per weight, backward 4, less the first layer's input gradient)"
    ]
    verdicts = []
    if found:
        p = found["fp32_tflop_per_s"] * 1e12
        b_low, b_high = (MLP_STEP_KERNELS * t * 1e-6 * p / flops for t in (low, high))
        model.append(
            f"at the FP32 peak of {found['fp32_tflop_per_s']:g} TFLOP/s the arithmetic takes as "
            f"long as the launches at a batch of about {b_low:,.0f} to {b_high:,.0f}"
        )
        verdicts.append(
            f"where the knee falls on the {gpu.name} turns on those two costs: matmuls this "
            "small run below the peak (which moves the crossing to smaller batches), and a real "
            "step launches more kernels or pays more per launch (which moves it to larger ones); "
            "a GPU run shows where it is"
        )
    figures = by_id(BATCH_FIGURES)
    fp32_1, fp32_256, amp_1, amp_256 = (f.value for f in figures)
    verdicts.append(
        f"published, ResNet-50 inference on a T4 (a different model, GPU and mode: the shape of "
        f"a batch curve, not a test of this prediction): batch 1 → 256 gives "
        f"{fp32_256 / fp32_1:.3g}× the images/s in FP32 and {amp_256 / amp_1:.3g}× with AMP"
    )
    return GpuPrediction(
        REFERENCE_NAME,
        gpu,
        tuple(model),
        (*launches, *figures),
        tuple(verdicts),
        tuple(found),
        missing,
    )


def predict_largest_batch(gpu: GpuSpec) -> GpuPrediction:
    """The largest CNN batch (3×64×64, Adam) under the search's 25% cap of ``gpu``'s memory."""
    found, missing = spec_values(gpu, "memory_gb")
    saved, params = cnn_saved_bytes_per_sample(RECORDED_SHAPE)
    fixed = ADAM_BYTES_PER_PARAMETER * params
    _, h, w = RECORDED_SHAPE
    model = [
        f"the CNN on 3×{h}×{w} with Adam: {format_bytes(fixed)} fixed (16 bytes for each of its "
        f"{params:,} parameters); per sample {format_bytes(saved)} of activations saved for "
        "backward (counted), plus backward's temporaries, between none and as much again "
        '(section 5\'s CPU fit measures them: its "other" column)'
    ]
    verdicts = []
    if found:
        cap = DEFAULT_FRACTION * found["memory_gb"] * 1e9
        most = int((cap - fixed) // saved)
        least = int((cap - fixed) // (2 * saved))
        model.append(
            f"{DEFAULT_FRACTION:.0%} of the sheet's {found['memory_gb']:g} GB (taken as 10⁹ bytes "
            f"each, which may understate the card) = {format_bytes(int(cap))}: a batch of about "
            f"{least:,} to {most:,} fits (the search caps at 25% of the memory torch reports "
            "free, after the CUDA context)"
        )
        verdicts.append(
            "no published measurement of this model: the search on a GPU (labkit bench batching "
            "--record) tests the prediction"
        )
    return GpuPrediction(
        REFERENCE_NAME, gpu, tuple(model), (), tuple(verdicts), tuple(found), missing
    )
