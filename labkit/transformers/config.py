"""A GPT-style model's shape, checked once where a person types it."""

from __future__ import annotations

from dataclasses import dataclass

from labkit.core.validate import check_positive_int


@dataclass(frozen=True)
class GPTConfig:
    """The shape of a decoder-only transformer (GPT-2's layout: pre-norm blocks, a 4× MLP).

    ``kv_heads`` below ``heads`` is grouped-query attention: the keys and
    values have fewer heads than the queries, which shrinks the KV cache by
    ``heads / kv_heads`` (Llama 2 70B and later models use it).
    """

    vocab: int = 256
    context: int = 128
    layers: int = 2
    heads: int = 4
    d_model: int = 128
    mlp_ratio: int = 4
    kv_heads: int | None = None

    def __post_init__(self) -> None:
        for name in ("vocab", "context", "layers", "heads", "d_model", "mlp_ratio"):
            check_positive_int(name, getattr(self, name))
        if self.kv_heads is not None:
            check_positive_int("kv_heads", self.kv_heads)
        if self.d_model % self.heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be a multiple of heads ({self.heads}): each head "
                f"gets d_model / heads dimensions; try d_model={self.heads * 32} or heads="
                f"{max(h for h in range(1, self.heads + 1) if self.d_model % h == 0)}"
            )
        if self.heads % self.n_kv_heads:
            raise ValueError(
                f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads}): each "
                "group of query heads shares one key/value head"
            )

    @property
    def head_dim(self) -> int:
        """Dimensions per head: d_model / heads."""
        return self.d_model // self.heads

    @property
    def n_kv_heads(self) -> int:
        """Key/value heads: ``kv_heads``, or ``heads`` (plain multi-head attention)."""
        return self.kv_heads if self.kv_heads is not None else self.heads

    @property
    def d_mlp(self) -> int:
        """The MLP's hidden width: mlp_ratio × d_model."""
        return self.mlp_ratio * self.d_model

    def block_params(self) -> int:
        """Weights and biases of one block (two layer norms, attention, MLP)."""
        d, kv = self.d_model, self.n_kv_heads * self.head_dim
        attention = d * (d + 2 * kv) + (d + 2 * kv) + d * d + d  # q, k, v and the output projection
        mlp = d * self.d_mlp + self.d_mlp + self.d_mlp * d + d
        norms = 2 * 2 * d
        return attention + mlp + norms

    def params(self) -> int:
        """All parameters: token and position embeddings, the blocks, the final norm (the
        output layer shares the token embedding's weights, as GPT-2's does)."""
        return (
            self.vocab * self.d_model
            + self.context * self.d_model
            + self.layers * (self.block_params())
            + 2 * self.d_model
        )
