"""Notebook 11 (in progress): where a transformer's FLOPs and bytes go, and the KV cache.

``config`` holds a GPT-style model's shape, ``costs`` counts each step of one
block's forward pass (FLOPs and the bytes an unfused eager run moves),
``kv_cache`` the cache's bytes and the decode ceiling they set, ``model``
(which imports torch) a small GPT built from those shapes, ``sdpa`` times
attention's backends and measures their peak memory, and ``decode`` times a
decode step against the batch size. Importing this package imports no
framework.
"""

from labkit.transformers.config import GPTConfig
from labkit.transformers.costs import BlockCosts, StepCost, block_costs
from labkit.transformers.kv_cache import decode_ceiling_tokens_per_s, kv_cache_bytes

__all__ = [
    "BlockCosts",
    "GPTConfig",
    "StepCost",
    "block_costs",
    "decode_ceiling_tokens_per_s",
    "kv_cache_bytes",
]
