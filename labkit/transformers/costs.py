"""FLOPs and bytes of each step of one transformer block's forward pass.

The counts follow the shapes, nothing else: a matrix product of an m×k by a
k×n matrix is 2·m·k·n FLOPs (one multiply and one add per term), the
convention ``torch.utils.flop_counter.FlopCounterMode`` uses, which counts
matrix products only. The steps that are not matrix products are counted
with fixed costs per value, stated here because they are choices, not
facts: a layer norm 8 FLOPs per value (mean, variance, normalise, scale and
shift), a softmax 5 per score (max, subtract, exp, sum, divide), GELU 8 per
value, a residual add 1.

Bytes are what an *unfused eager* run moves: each step reads its inputs and
weights from memory once and writes its output once (no cache reuse between
steps). That is the traffic kernel fusion removes, and the reason the
softmax over the T×S score matrix is the step fused attention
(FlashAttention) does away with: it never writes the scores to memory.

The attention steps count every score, masked or not, as PyTorch's math
path computes them; a fused causal kernel can skip about half of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.core.validate import check_positive_int
from labkit.transformers.config import GPTConfig

LAYER_NORM_FLOPS_PER_VALUE = 8
SOFTMAX_FLOPS_PER_SCORE = 5
GELU_FLOPS_PER_VALUE = 8

#: The steps that are matrix products (what FlopCounterMode counts).
MATMUL_STEPS = (
    "qkv projection",
    "scores q·kᵀ",
    "scores × v",
    "output projection",
    "mlp up",
    "mlp down",
)


@dataclass(frozen=True)
class StepCost:
    """One step of the block: its FLOPs and the bytes an unfused eager run moves."""

    name: str
    flops: int
    bytes: int

    @property
    def is_matmul(self) -> bool:
        return self.name in MATMUL_STEPS

    @property
    def flop_per_byte(self) -> float:
        """Arithmetic intensity: where the step sits on a roofline."""
        return self.flops / self.bytes if self.bytes else float("inf")


@dataclass(frozen=True)
class BlockCosts:
    """Every step of one block's forward pass for ``batch`` sequences of ``queries`` tokens
    attending to ``keys`` tokens (prefill: queries = keys; one decode step: queries = 1)."""

    config: GPTConfig
    batch: int
    queries: int
    keys: int
    bytes_per_element: int
    steps: tuple[StepCost, ...]

    @property
    def flops(self) -> int:
        return sum(s.flops for s in self.steps)

    @property
    def matmul_flops(self) -> int:
        """The FLOPs FlopCounterMode counts: the matrix products only."""
        return sum(s.flops for s in self.steps if s.is_matmul)

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.steps)

    def step(self, name: str) -> StepCost:
        for s in self.steps:
            if s.name == name:
                return s
        names = ", ".join(repr(s.name) for s in self.steps)
        raise KeyError(f"no step {name!r}; the steps are {names}")

    def table(self) -> str:
        """One line per step: FLOPs, bytes, their shares of the block, and the intensity."""
        from labkit.core.units import format_bytes, format_count

        rows = [
            f"{'step':<18} {'FLOPs':>12} {'share':>6} {'bytes':>11} {'share':>6} {'FLOP/byte':>9}"
        ]
        for s in self.steps:
            rows.append(
                f"{s.name:<18} {format_count(s.flops, 'FLOP'):>12} {s.flops / self.flops:>6.1%} "
                f"{format_bytes(s.bytes):>11} {s.bytes / self.bytes:>6.1%} {s.flop_per_byte:>9.3g}"
            )
        rows.append(
            f"{'block':<18} {format_count(self.flops, 'FLOP'):>12} {'':>6} "
            f"{format_bytes(self.bytes):>11} {'':>6} {self.flops / self.bytes:>9.3g}"
        )
        return "\n".join(rows)


def block_costs(
    config: GPTConfig,
    batch: int,
    queries: int,
    keys: int | None = None,
    *,
    bytes_per_element: int = 4,
) -> BlockCosts:
    """Count one block's forward pass, step by step (see the module docstring for the rules).

    Args:
        config: the model's shape.
        batch: sequences in the batch.
        queries: tokens per sequence that go through the block (the prompt's length in
            prefill, 1 in a decode step).
        keys: tokens each query attends to (defaults to ``queries``; in a decode step,
            the tokens in the KV cache plus the new one).
        bytes_per_element: 4 for float32, 2 for bfloat16 or float16.
    """
    b = check_positive_int("batch", batch)
    t = check_positive_int("queries", queries)
    s = t if keys is None else check_positive_int("keys", keys)
    if s < t:
        raise ValueError(
            f"keys ({s}) must be at least queries ({t}): each query attends to itself and the "
            "tokens before it"
        )
    e = check_positive_int("bytes_per_element", bytes_per_element)
    d, h, dh = config.d_model, config.heads, config.head_dim
    kv = config.n_kv_heads * dh  # width of the keys (and of the values)
    dm = config.d_mlp
    tokens = b * t
    scores = b * h * t * s

    def norm(name: str) -> StepCost:
        return StepCost(name, LAYER_NORM_FLOPS_PER_VALUE * tokens * d, e * (2 * tokens * d + 2 * d))

    def residual(name: str) -> StepCost:
        return StepCost(name, tokens * d, e * 3 * tokens * d)

    steps = (
        norm("layer norm 1"),
        StepCost(
            "qkv projection",
            2 * tokens * d * (d + 2 * kv),
            e * (tokens * d + (d + 1) * (d + 2 * kv) + tokens * (d + 2 * kv)),
        ),
        StepCost("scores q·kᵀ", 2 * scores * dh, e * (tokens * d + b * s * kv + scores)),
        StepCost("softmax", SOFTMAX_FLOPS_PER_SCORE * scores, e * 2 * scores),
        StepCost("scores × v", 2 * scores * dh, e * (scores + b * s * kv + tokens * d)),
        StepCost("output projection", 2 * tokens * d * d, e * (2 * tokens * d + (d + 1) * d)),
        residual("residual add 1"),
        norm("layer norm 2"),
        StepCost("mlp up", 2 * tokens * d * dm, e * (tokens * d + (d + 1) * dm + tokens * dm)),
        StepCost("gelu", GELU_FLOPS_PER_VALUE * tokens * dm, e * 2 * tokens * dm),
        StepCost("mlp down", 2 * tokens * dm * d, e * (tokens * dm + (dm + 1) * d + tokens * d)),
        residual("residual add 2"),
    )
    return BlockCosts(config, b, t, s, e, steps)
