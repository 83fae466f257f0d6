"""A small GPT (GPT-2's layout) in torch, with a KV cache for decoding.

It exists to be measured, not to be good at language: random weights (or a
few steps on synthetic tokens) run the same arithmetic as trained ones.
``attention="sdpa"`` calls ``torch.nn.functional.scaled_dot_product_attention``,
whose backend ``torch.nn.attention.sdpa_kernel`` chooses; ``attention="math"``
writes the score matrix out, as the counts in :mod:`labkit.transformers.costs`
assume.

This module imports torch when it is imported (``nn.Module`` subclasses need
it); without torch the import is one line naming the install command.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from labkit.core.optional import import_optional
from labkit.core.validate import check_choice
from labkit.transformers.config import GPTConfig

import_optional(
    "torch", "labkit.transformers.model"
)  # without torch: one line, the install command
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402, N812
from torch import nn  # noqa: E402

ATTENTION = ("sdpa", "math")

#: One layer's cached keys and values, each (batch, kv_heads, tokens, head_dim).
LayerCache = tuple[torch.Tensor, torch.Tensor]


class CausalSelfAttention(nn.Module):
    """Multi-head (or grouped-query) causal self-attention with an optional KV cache."""

    def __init__(self, config: GPTConfig, attention: str = "sdpa") -> None:
        super().__init__()
        self.config = config
        self.attention = check_choice("attention", attention, ATTENTION)
        kv = config.n_kv_heads * config.head_dim
        self.qkv = nn.Linear(config.d_model, config.d_model + 2 * kv)
        self.proj = nn.Linear(config.d_model, config.d_model)

    def forward(
        self, x: torch.Tensor, cache: LayerCache | None = None
    ) -> tuple[torch.Tensor, LayerCache]:
        c = self.config
        b, t, _ = x.shape
        kv = c.n_kv_heads * c.head_dim
        q, k, v = self.qkv(x).split([c.d_model, kv, kv], dim=-1)
        q = q.view(b, t, c.heads, c.head_dim).transpose(1, 2)
        k = k.view(b, t, c.n_kv_heads, c.head_dim).transpose(1, 2)
        v = v.view(b, t, c.n_kv_heads, c.head_dim).transpose(1, 2)
        if cache is not None:
            k = torch.cat([cache[0], k], dim=2)
            v = torch.cat([cache[1], v], dim=2)
        new_cache = (k, v)
        groups = c.heads // c.n_kv_heads
        if groups > 1:  # each key/value head serves `groups` query heads
            k = k.repeat_interleave(groups, dim=1)
            v = v.repeat_interleave(groups, dim=1)
        s = k.shape[2]
        # Query i (of the t new tokens) sees the s - t cached tokens and new tokens up to i.
        mask = None if t == 1 else torch.ones(t, s, dtype=torch.bool, device=x.device).tril(s - t)
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(c.head_dim)
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            y = scores.softmax(dim=-1) @ v
        y = y.transpose(1, 2).reshape(b, t, c.d_model)
        return self.proj(y), new_cache


class Block(nn.Module):
    """Pre-norm transformer block: x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, config: GPTConfig, attention: str = "sdpa") -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(config.d_model)
        self.attn = CausalSelfAttention(config, attention)
        self.ln2 = nn.LayerNorm(config.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(config.d_model, config.d_mlp),
            nn.GELU(),
            nn.Linear(config.d_mlp, config.d_model),
        )

    def forward(
        self, x: torch.Tensor, cache: LayerCache | None = None
    ) -> tuple[torch.Tensor, LayerCache]:
        a, new_cache = self.attn(self.ln1(x), cache)
        x = x + a
        return x + self.mlp(self.ln2(x)), new_cache


#: GPT-2's initialisation: weights from N(0, 0.02²), biases zero. PyTorch's default for
#: nn.Linear and nn.Embedding (N(0, 1) embeddings) gives logits with a spread of tens, so the
#: softmax is nearly one-hot and any error looks like none.
INIT_STD = 0.02


def _init_weights(module: nn.Module) -> None:
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


class TinyGPT(nn.Module):
    """Token and position embeddings, ``config.layers`` blocks, a final norm, and an output
    layer that shares the token embedding's weights (as GPT-2's does)."""

    def __init__(self, config: GPTConfig | None = None, attention: str = "sdpa") -> None:
        super().__init__()
        self.config = config or GPTConfig()
        c = self.config
        self.tokens = nn.Embedding(c.vocab, c.d_model)
        self.positions = nn.Embedding(c.context, c.d_model)
        self.blocks = nn.ModuleList(Block(c, attention) for _ in range(c.layers))
        self.ln_f = nn.LayerNorm(c.d_model)
        self.apply(_init_weights)

    def forward(
        self, idx: torch.Tensor, cache: list[LayerCache] | None = None
    ) -> tuple[torch.Tensor, list[LayerCache]]:
        """Logits for every position of ``idx`` (batch, tokens), and the updated KV cache.

        With ``cache`` (from an earlier call), ``idx`` holds only the new tokens.
        """
        past = 0 if cache is None else cache[0][0].shape[2]
        t = idx.shape[1]
        if past + t > self.config.context:
            raise ValueError(
                f"{past} cached + {t} new tokens exceed the model's context of "
                f"{self.config.context}; build the model with a larger GPTConfig(context=...)"
            )
        pos = torch.arange(past, past + t, device=idx.device)
        x = self.tokens(idx) + self.positions(pos)
        new_cache = []
        for i, block in enumerate(self.blocks):
            x, layer_cache = block(x, None if cache is None else cache[i])
            new_cache.append(layer_cache)
        return F.linear(self.ln_f(x), self.tokens.weight), new_cache


@dataclass(frozen=True)
class FlopCheck:
    """labkit's count of one block's matrix-product FLOPs against torch's FlopCounterMode."""

    batch: int
    queries: int
    keys: int
    labkit_flops: int
    counter_flops: int
    by_op: dict[str, int]

    @property
    def agree(self) -> bool:
        return self.labkit_flops == self.counter_flops

    def __str__(self) -> str:
        ops = ", ".join(f"{name} {flops:,}" for name, flops in self.by_op.items())
        verdict = (
            "equal"
            if self.agree
            else f"differ by {self.counter_flops / self.labkit_flops - 1:+.2%}"
        )
        return (
            f"batch {self.batch}, {self.queries:,} {'query' if self.queries == 1 else 'queries'} "
            f"over {self.keys:,} keys: labkit "
            f"{self.labkit_flops:,} FLOPs, FlopCounterMode {self.counter_flops:,} ({ops}): {verdict}"
        )


def check_flop_counts(
    config: GPTConfig, shapes: Sequence[tuple[int, int]] = ((1, 128), (1, 1024), (4, 128))
) -> list[FlopCheck]:
    """Run one block (math attention) at each (batch, tokens) under FlopCounterMode; compare.

    FlopCounterMode counts matrix products only (2 FLOPs per multiply-add);
    labkit's :func:`~labkit.transformers.costs.block_costs` counts every step,
    so the comparison is with its ``matmul_flops``. A last check runs one
    decode step against a cache of the first shape's tokens.
    """
    from torch.utils.flop_counter import FlopCounterMode

    from labkit.transformers.costs import block_costs

    torch.manual_seed(0)
    block = Block(config, attention="math").train(False)
    checks = []
    with torch.no_grad():
        for batch, tokens in shapes:
            x = torch.randn(batch, tokens, config.d_model)
            with FlopCounterMode(display=False) as counter:
                _, cache = block(x)
            checks.append(_flop_check(counter, block_costs(config, batch, tokens)))
        batch, tokens = shapes[0]
        _, cache = block(torch.randn(batch, tokens, config.d_model))
        with FlopCounterMode(display=False) as counter:
            block(torch.randn(batch, 1, config.d_model), cache)
        checks.append(_flop_check(counter, block_costs(config, batch, 1, tokens + 1)))
    return checks


def _flop_check(counter: Any, costs: Any) -> FlopCheck:
    flops = counter.get_flop_counts().get("Global", {})
    by_op = {
        str(getattr(op, "_qualified_op_name", op)).replace("::", "."): int(n)
        for op, n in flops.items()
    }
    return FlopCheck(
        costs.batch, costs.queries, costs.keys, costs.matmul_flops, counter.get_total_flops(), by_op
    )


@dataclass(frozen=True)
class ModelChecks:
    """Two properties of :class:`TinyGPT` that must hold, measured on random tokens."""

    parameters: int
    config_parameters: int
    future_change: float
    cache_difference: float
    tokens: int

    def __str__(self) -> str:
        causal = (
            "no effect" if self.future_change == 0 else f"changed them by {self.future_change:.1e}"
        )
        return "\n".join(
            [
                f"parameters: {self.parameters:,} in the model, {self.config_parameters:,} from "
                "GPTConfig.params()",
                f"causal mask: changing token {self.tokens - 1} had {causal} on the logits of "
                f"tokens 0 to {self.tokens - 2}",
                f"KV cache: the last token's logits from a {self.tokens - 1}-token prefill plus one "
                f"cached decode step differ from one {self.tokens}-token pass by at most "
                f"{self.cache_difference:.2e} (float32 rounding; 0 would be bit-identical)",
            ]
        )


def model_checks(config: GPTConfig, *, tokens: int = 32) -> ModelChecks:
    """Check causality and the KV cache of a random TinyGPT on ``tokens`` random tokens."""
    if tokens < 2 or tokens > config.context:
        raise ValueError(f"tokens must be from 2 to the context ({config.context}), got {tokens}")
    torch.manual_seed(0)
    model = TinyGPT(config).train(False)
    gen = torch.Generator().manual_seed(0)
    idx = torch.randint(0, config.vocab, (1, tokens), generator=gen)
    other = idx.clone()
    other[0, -1] = (idx[0, -1] + 1) % config.vocab
    with torch.no_grad():
        full, _ = model(idx)
        changed, _ = model(other)
        _, cache = model(idx[:, :-1])
        last, _ = model(idx[:, -1:], cache)
    return ModelChecks(
        parameters=sum(p.numel() for p in model.parameters()),
        config_parameters=config.params(),
        future_change=float((full[:, :-1] - changed[:, :-1]).abs().max()),
        cache_difference=float((full[:, -1] - last[:, -1]).abs().max()),
        tokens=tokens,
    )
