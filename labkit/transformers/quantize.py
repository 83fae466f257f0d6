"""Fewer bytes per weight: bfloat16 weights and int8 weight-only quantization, timed and checked.

A decode step at a small batch reads every weight once and does about two
FLOPs with it (:mod:`labkit.transformers.decode`), so its time follows the
bytes of the weights. Storing them in bfloat16 halves those bytes; storing
them as int8 with one float scale per output row (weight-only quantization,
as gpt-fast and torchao do it) quarters them. Both change the answer a
little: :func:`precision_sweep` reports the time of a decode step and the
error of the logits against float32, side by side.

int8 weights need a kernel that reads them as int8 and multiplies in the
activations' precision (``torch.ops.aten._weight_int8pack_mm`` on CPUs);
where torch has none, :class:`Int8WeightLinear` dequantizes the whole
matrix on every call, which reads the int8 bytes but writes and reads a
full-precision copy, so the result then says so.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from labkit.core.optional import import_optional
from labkit.core.units import align_columns, format_bytes, format_duration
from labkit.core.validate import (
    check_choices,
    check_ms,
    check_positive_int,
    check_torch_device,
)
from labkit.roofline.model import dtype_bytes
from labkit.transformers.config import GPTConfig
from labkit.transformers.decode import CACHE_PASSES, DECODE_CONFIG
from labkit.transformers.kv_cache import kv_cache_bytes

import_optional("torch", "labkit.transformers.quantize")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402, N812
from torch import nn  # noqa: E402

#: The variants :func:`precision_sweep` knows: the weights' storage, and what the math runs in.
VARIANTS = {
    "float32": ("float32 weights", "float32"),
    "bfloat16": ("bfloat16 weights", "bfloat16"),
    "int8": ("int8 weights, a bfloat16 scale per row", "bfloat16"),
}
INT8_LEVELS = 127  # symmetric: -127..127, so that 0 is exact and the scale is max|w| / 127


@functools.cache
def int8_kernel_problem(device: Any, dtype: Any) -> str | None:
    """None if ``_weight_int8pack_mm`` runs on ``device`` (a torch.device) for activations of
    ``dtype`` (a torch.dtype); else why not, so int8 weights are dequantized on every call."""
    op = getattr(torch.ops.aten, "_weight_int8pack_mm", None)
    if op is None:
        return f"this torch ({torch.__version__}) has no aten._weight_int8pack_mm"
    x = torch.ones(1, 64, device=device, dtype=dtype)
    w = torch.ones(8, 64, device=device, dtype=torch.int8)
    try:
        op(x, w, torch.ones(8, device=device, dtype=dtype))
    except (RuntimeError, NotImplementedError) as exc:
        text = str(exc).strip()
        return (text.splitlines()[0] if text else type(exc).__name__)[:160]
    return None


class Int8WeightLinear(nn.Module):
    """An ``nn.Linear`` whose weight is stored as int8 with one scale per output row.

    Row ``i`` is stored as ``round(w[i] / s[i])`` with ``s[i] = max|w[i]| / 127``;
    the product is ``x @ (q * s)ᵀ``, computed without materializing ``q * s``
    where torch has a kernel for it.
    """

    weight_int8: torch.Tensor
    scale: torch.Tensor

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        w = linear.weight.detach().float()
        scale = w.abs().amax(dim=1).clamp(min=torch.finfo(torch.float32).tiny) / INT8_LEVELS
        q = torch.round(w / scale[:, None]).clamp(-INT8_LEVELS, INT8_LEVELS).to(torch.int8)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("weight_int8", q)
        self.register_buffer("scale", scale.to(linear.weight.dtype))
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if int8_kernel_problem(x.device, x.dtype) is None:
            flat = x.reshape(-1, self.in_features)
            y = torch.ops.aten._weight_int8pack_mm(flat, self.weight_int8, self.scale.to(x.dtype))
            y = y.reshape(*x.shape[:-1], self.out_features)
            return y if self.bias is None else y + self.bias
        w = self.weight_int8.to(x.dtype) * self.scale.to(x.dtype)[:, None]
        return F.linear(x, w, self.bias)


def quantize_int8_weights(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with every ``nn.Linear`` replaced by :class:`Int8WeightLinear`.

    Embeddings stay as they are (TinyGPT's output layer reuses the token
    embedding, which is small next to the blocks).
    """
    model = copy.deepcopy(model)
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, nn.Linear):
                setattr(module, name, Int8WeightLinear(child))
    return model


def stored_bytes(model: nn.Module) -> int:
    """Bytes of every parameter and buffer: what a forward pass reads once."""
    tensors = [*model.parameters(), *model.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)


@dataclass(frozen=True)
class PrecisionRun:
    """One variant: its decode step's time, the bytes it reads, and its error against float32."""

    variant: str
    weights: str
    batch: int
    median_ms: float
    ratio: float
    ratio_low: float
    ratio_high: float
    weight_bytes: int
    bytes_per_step: int
    rms_rel_error: float
    top1_agreement: float

    @property
    def tokens_per_s(self) -> float:
        return self.batch / (self.median_ms / 1e3)


@dataclass(frozen=True)
class PrecisionSweep:
    """Decode steps of one model stored three ways, timed round-robin; errors against float32."""

    config: GPTConfig
    device: str
    batch: int
    prompt: int
    runs: tuple[PrecisionRun, ...]
    int8_note: str | None = None
    positions: int = 0
    int8_vs_bfloat16: tuple[float, float] | None = None

    def run(self, variant: str) -> PrecisionRun:
        for r in self.runs:
            if r.variant == variant:
                return r
        raise KeyError(f"no variant {variant!r}; ran {[r.variant for r in self.runs]}")

    def __str__(self) -> str:
        head = (
            f"decode on {self.device}, batch {self.batch}, after a {self.prompt}-token prompt; "
            f"{self.config.layers} layers of {self.config.d_model}; speed against float32 "
            "per round (interleaved); error of the logits against float32"
        )
        rows = [
            [
                "variant",
                "weights",
                "per step",
                "rate",
                "speed vs float32: median (range) per round",
                "bytes read/step",
                "RMS error / RMS logit",
                "same top token",
            ]
        ]
        for r in self.runs:
            span = (
                ""
                if r.variant == "float32"
                else f"{r.ratio:.2f}× ({r.ratio_low:.2f}× to {r.ratio_high:.2f}×)"
            )
            rows.append(
                [
                    r.variant,
                    format_bytes(r.weight_bytes),
                    format_duration(r.median_ms),
                    f"{r.tokens_per_s:,.0f} tokens/s",
                    span,
                    format_bytes(r.bytes_per_step),
                    f"{r.rms_rel_error:.2e}" if r.variant != "float32" else "",
                    f"{r.top1_agreement:.1%}" if r.variant != "float32" else "",
                ]
            )
        lines = [head, *align_columns(rows)]
        lines.append(
            f"errors over the prompt's {self.positions:,} positions (every sequence), each "
            "variant's logits against float32's"
        )
        if self.int8_vs_bfloat16 is not None:
            rel, same = self.int8_vs_bfloat16
            lines.append(
                f"int8 against bfloat16 (the same bfloat16 arithmetic, so this is the weights' "
                f"rounding alone): RMS error / RMS logit {rel:.2e}, same top token {same:.1%}"
            )
        if self.int8_note:
            lines.append(self.int8_note)
        return "\n".join(lines)


def _errors(reference: torch.Tensor, other: torch.Tensor) -> tuple[float, float]:
    """(RMS of the difference over RMS of the reference, share of positions whose top token
    agrees): the RMS, not the largest, so that one logit's rounding does not stand for all."""
    ref, out = reference.float(), other.float()
    rel = float((out - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt())
    same = float((out.argmax(-1) == ref.argmax(-1)).float().mean())
    return rel, same


def precision_sweep(
    variants: Sequence[str] = ("float32", "bfloat16", "int8"),
    *,
    config: GPTConfig = DECODE_CONFIG,
    batch: int = 1,
    prompt: int = 32,
    device: Any = "cpu",
    rounds: int = 3,
    warmup_ms: float = 20.0,
    rep_ms: float = 100.0,
) -> PrecisionSweep:
    """Time one decode step with the weights stored as each of ``variants``, round-robin.

    The error is measured on the prompt's logits (every position of every
    sequence): the largest absolute difference from float32 over the largest
    float32 logit, and the fraction of positions whose most likely next token
    is the same as float32's. The model has random weights, so these say how
    far the arithmetic moves, not how a trained model's text would change.
    """
    names = check_choices("variants", variants, tuple(VARIANTS))
    batch = check_positive_int("batch", batch)
    prompt = check_positive_int("prompt", prompt)
    if prompt + 1 > config.context:
        raise ValueError(
            f"prompt ({prompt}) + 1 new token exceeds the model's context ({config.context}); "
            "lower prompt or raise GPTConfig(context=...)"
        )
    rounds = check_positive_int("rounds", rounds)
    warmup_ms, rep_ms = check_ms("warmup_ms", warmup_ms), check_ms("rep_ms", rep_ms)
    check_torch_device(device, allow_none=False)
    from labkit.machine.memory import require_memory_fits
    from labkit.timing.interleave import interleave
    from labkit.transformers.model import TinyGPT

    dev = torch.device(device)
    require_memory_fits(
        config.params() * 4, dev, arrays=3, what="precision_sweep's three copies of the model"
    )
    torch.manual_seed(0)
    base = TinyGPT(config).to(dev).train(False)
    models: dict[str, tuple[nn.Module, Any]] = {}
    for name in names:
        weights, compute = VARIANTS[name]
        dtype = getattr(torch, compute)
        if name == "int8":  # scales from the float32 weights, then the rest in `dtype`
            models[name] = (quantize_int8_weights(base).to(dtype=dtype), dtype)
        else:
            models[name] = (copy.deepcopy(base).to(dtype=dtype), dtype)
    gen = torch.Generator().manual_seed(1)
    idx = torch.randint(0, config.vocab, (batch, prompt), generator=gen).to(dev)
    token = torch.randint(0, config.vocab, (batch, 1), generator=gen).to(dev)
    steps = {}
    logits = {}
    with torch.no_grad():
        reference, _ = base(idx)
        for name, (model, _dtype) in models.items():
            logits[name], cache = model(idx)
            steps[name] = functools.partial(model, token, cache)
        timed = interleave(
            steps,
            rounds=max(rounds, 2),
            rep_ms=rep_ms,
            warmup_ms=warmup_ms,
            baseline="float32" if "float32" in steps else None,
            device=str(dev),
        )
    runs = []
    for name, (model, dtype) in models.items():
        size = dtype_bytes(dtype)
        cache = kv_cache_bytes(
            config.layers, config.n_kv_heads, config.head_dim, prompt + 1, bytes_per_element=size
        )
        weight_bytes = stored_bytes(model)
        rel, same = _errors(reference, logits[name])
        runs.append(
            PrecisionRun(
                variant=name,
                weights=VARIANTS[name][0],
                batch=batch,
                median_ms=timed[name].median_ms,
                ratio=timed[name].ratio,
                ratio_low=timed[name].ratio_low,
                ratio_high=timed[name].ratio_high,
                weight_bytes=weight_bytes,
                bytes_per_step=weight_bytes + CACHE_PASSES * batch * cache,
                rms_rel_error=rel,
                top1_agreement=same,
            )
        )
    note = None
    if "int8" in names:
        problem = int8_kernel_problem(dev, getattr(torch, VARIANTS["int8"][1]))
        note = (
            "int8: torch's _weight_int8pack_mm kernel reads the int8 weights directly"
            if problem is None
            else "int8: no fused int8 kernel here, so every call dequantizes the weights to "
            f"bfloat16 first (it reads the int8 bytes, then writes and reads a float copy): {problem}"
        )
    both = "int8" in logits and "bfloat16" in logits
    return PrecisionSweep(
        config,
        str(dev),
        batch,
        prompt,
        tuple(runs),
        note,
        positions=batch * prompt,
        int8_vs_bfloat16=_errors(logits["bfloat16"], logits["int8"]) if both else None,
    )
