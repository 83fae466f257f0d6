"""Decoding: tokens/s against batch size, measured, beside the bandwidth ceiling.

One decode step feeds each sequence its newest token and reads every weight
once: about 2 FLOPs per weight per sequence against the weight's bytes, an
intensity of about ``batch / bytes_per_element`` FLOP/byte (0.25 × batch in
float32), far left of any ridge point at small batches. So the step's time
is the bytes it reads over the memory bandwidth, nearly whatever the batch,
and tokens/s grows with the batch until the arithmetic catches up: why
serving systems batch requests.

The bytes counted per step: every parameter once, plus 3× each sequence's KV
cache, because :class:`~labkit.transformers.model.TinyGPT` grows its cache
with ``torch.cat``, which reads and writes it every step before attention
reads it (a preallocated cache, as serving systems use, is read once).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from labkit.core.optional import import_optional
from labkit.core.units import align_columns, format_bytes, format_duration, format_gb_per_s
from labkit.core.validate import (
    check_choice,
    check_ms,
    check_positive_int,
    check_real,
    check_sizes,
    check_torch_device,
)
from labkit.roofline.model import dtype_bytes
from labkit.transformers.config import GPTConfig
from labkit.transformers.kv_cache import kv_cache_bytes

#: The decode experiment's model: about 43 million parameters, 170 MB in float32, so its
#: weights do not fit in a laptop's or a server's last-level cache.
DECODE_CONFIG = GPTConfig(vocab=256, context=256, layers=6, heads=12, d_model=768)
#: The GPU's decode model: 32 layers of 4,096, 6.4 billion parameters (12.9 GB in bfloat16).
#: A GPU reads DECODE_CONFIG's weights in tens of microseconds, less than a step's kernel
#: launches take, so its step time would measure the launches, not the bandwidth.
GPU_DECODE_CONFIG = GPTConfig(vocab=256, context=64, layers=32, heads=32, d_model=4096)
#: Smaller GPU models, largest first, for GPUs whose memory budget cannot hold the one above.
GPU_DECODE_FALLBACKS = (
    GPTConfig(vocab=256, context=64, layers=24, heads=16, d_model=2048),  # 1.2 billion
    GPTConfig(vocab=256, context=64, layers=12, heads=16, d_model=1024),  # 0.15 billion
)
DTYPES = ("float32", "bfloat16")
CACHE_PASSES = 3  # torch.cat reads and writes the cache, attention reads it


def gpu_decode_config(device: Any = "cuda", dtype: str = "bfloat16") -> GPTConfig:
    """The largest of the GPU decode models whose weights fit labkit's memory budget twice
    (decode_sweep's own check), so that a 16 or 24 GB GPU runs a smaller model, not an error."""
    from labkit.machine.memory import budget_bytes

    budget = budget_bytes(device=str(device))
    size = dtype_bytes(dtype)
    for config in (GPU_DECODE_CONFIG, *GPU_DECODE_FALLBACKS):
        if 2 * config.params() * size <= budget:
            return config
    return GPU_DECODE_FALLBACKS[-1]


@dataclass(frozen=True)
class DecodePoint:
    """One batch size: the median time of a decode step and what it implies."""

    batch: int
    median_ms: float
    bytes_per_step: int
    flops_per_step: int
    low_ms: float = 0.0  # the fastest and the slowest round's median
    high_ms: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.batch / (self.median_ms / 1e3)

    @property
    def gb_per_s(self) -> float:
        """The bytes counted per step over the step's time: the bandwidth it would need."""
        return self.bytes_per_step / (self.median_ms / 1e3) / 1e9

    @property
    def flop_per_byte(self) -> float:
        return self.flops_per_step / self.bytes_per_step


@dataclass(frozen=True)
class DecodeSweep:
    """Decode steps at several batch sizes, after a prefill of ``prompt`` tokens."""

    config: GPTConfig
    dtype: str
    device: str
    prompt: int
    parameter_bytes: int
    points: tuple[DecodePoint, ...]
    bandwidth_gb_per_s: float | None = None

    def ceiling_tokens_per_s(self, point: DecodePoint) -> float | None:
        """Tokens/s if the step ran at ``bandwidth_gb_per_s`` and did nothing else."""
        if self.bandwidth_gb_per_s is None:
            return None
        return point.batch * self.bandwidth_gb_per_s * 1e9 / point.bytes_per_step

    def __str__(self) -> str:
        head = (
            f"decode on {self.device}, {self.dtype}, {self.config.layers} "
            f"layer{'s' if self.config.layers > 1 else ''} of "
            f"{self.config.d_model} ({format_bytes(self.parameter_bytes)} of parameters), "
            f"one new token per sequence after a {self.prompt}-token prompt"
        )
        cols = [
            "batch",
            "per step: median (range over rounds)",
            "rate",
            "bytes/step",
            "FLOP/byte",
            "bytes/time",
        ]
        if self.bandwidth_gb_per_s is not None:
            cols += [f"ceiling at {self.bandwidth_gb_per_s:.3g} GB/s", "measured/ceiling"]
        rows = [cols]
        for p in self.points:
            row = [
                f"{p.batch}",
                f"{format_duration(p.median_ms)} ({format_duration(p.low_ms)} to "
                f"{format_duration(p.high_ms)})",
                f"{p.tokens_per_s:,.0f} tokens/s",
                format_bytes(p.bytes_per_step),
                f"{p.flop_per_byte:.3g}",
                format_gb_per_s(p.gb_per_s),
            ]
            ceiling = self.ceiling_tokens_per_s(p)
            if ceiling is not None:
                row += [f"{ceiling:,.0f} tokens/s", f"{p.tokens_per_s / ceiling:.2f}×"]
            rows.append(row)
        return "\n".join([head, *align_columns(rows)])


def decode_sweep(
    batches: Sequence[int] = (1, 2, 4, 8, 16),
    *,
    config: GPTConfig = DECODE_CONFIG,
    prompt: int = 32,
    dtype: str = "float32",
    device: Any = "cpu",
    bandwidth_gb_per_s: float | None = None,
    rounds: int = 3,
    warmup_ms: float = 20.0,
    rep_ms: float = 100.0,
) -> DecodeSweep:
    """Time one decode step (with the KV cache of a ``prompt``-token prefill) per batch size.

    The batch sizes run round-robin (:func:`labkit.interleave`), so drift
    touches them alike. Pass ``bandwidth_gb_per_s`` (notebook 02's measured
    read bandwidth, say) to print the ceiling beside each measurement.
    """
    sizes = check_sizes(batches, "batches")
    prompt = check_positive_int("prompt", prompt)
    if prompt + 1 > config.context:
        raise ValueError(
            f"prompt ({prompt}) + 1 new token exceeds the model's context ({config.context}); "
            "lower prompt or raise GPTConfig(context=...)"
        )
    dtype = check_choice("dtype", dtype, DTYPES)
    if bandwidth_gb_per_s is not None:
        bandwidth_gb_per_s = check_real(
            "bandwidth_gb_per_s", bandwidth_gb_per_s, low=0, low_open=True
        )
    rounds = check_positive_int("rounds", rounds)
    warmup_ms = check_ms("warmup_ms", warmup_ms)
    rep_ms = check_ms("rep_ms", rep_ms)
    check_torch_device(device, allow_none=False)
    torch = import_optional("torch", "decoding")
    from labkit.machine.memory import require_memory_fits
    from labkit.timing.interleave import interleave
    from labkit.transformers.model import TinyGPT

    dev = torch.device(device)
    size = dtype_bytes(dtype)
    require_memory_fits(
        config.params() * size, dev, arrays=2, what="decode_sweep's model (its config)"
    )
    torch.manual_seed(0)
    with dev:  # built where it runs: a GPU-sized model need not pass through host memory
        model = TinyGPT(config).to(dtype=getattr(torch, dtype)).train(False)
    parameter_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    cache_bytes = kv_cache_bytes(
        config.layers, config.n_kv_heads, config.head_dim, prompt + 1, bytes_per_element=size
    )
    # ~2 FLOPs per weight per sequence, plus attention's two products over the cache.
    weights = config.params() - config.context * config.d_model  # the position table is looked up
    attention_flops = 4 * config.layers * config.d_model * (prompt + 1)

    steps: dict[str, Any] = {}
    with torch.no_grad():
        for b in sizes:
            idx = torch.randint(0, config.vocab, (b, prompt), device=dev)
            _, cache = model(idx)
            token = torch.randint(0, config.vocab, (b, 1), device=dev)
            steps[f"batch {b}"] = functools.partial(model, token, cache)
        timed = interleave(
            steps, rounds=max(rounds, 2), rep_ms=rep_ms, warmup_ms=warmup_ms, device=str(dev)
        )
    points = tuple(
        DecodePoint(
            batch=b,
            median_ms=timed[f"batch {b}"].median_ms,
            bytes_per_step=parameter_bytes + CACHE_PASSES * b * cache_bytes,
            flops_per_step=b * (2 * weights + attention_flops),
            low_ms=min(t.median_ms for t in timed[f"batch {b}"].runs),
            high_ms=max(t.median_ms for t in timed[f"batch {b}"].runs),
        )
        for b in sizes
    )
    return DecodeSweep(config, dtype, str(dev), prompt, parameter_bytes, points, bandwidth_gb_per_s)
