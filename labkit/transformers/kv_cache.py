"""The KV cache's size, and the decode speed that memory bandwidth allows.

Decoding one token per sequence reads every weight once and, for each
sequence, its whole KV cache, while doing about 2 FLOPs per weight per
sequence: at small batches that is far below any GPU's ridge point, so the
time per step is the bytes read over the memory bandwidth. Batching more
sequences shares the weight reads among them; the cache reads do not share.
"""

from __future__ import annotations

from labkit.core.validate import check_int, check_positive_int, check_real


def kv_cache_bytes(
    layers: int,
    kv_heads: int,
    head_dim: int,
    tokens: int = 1,
    *,
    batch: int = 1,
    bytes_per_element: int = 2,
) -> int:
    """Bytes of keys and values cached for ``batch`` sequences of ``tokens`` tokens.

    2 (a key and a value) × layers × kv_heads × head_dim × bytes per element,
    per token per sequence. Llama 2 7B (32 layers, 32 heads of 128, float16)
    caches 524,288 bytes, 0.5 MiB, per token.
    """
    n = 2 * check_positive_int("layers", layers) * check_positive_int("kv_heads", kv_heads)
    n *= check_positive_int("head_dim", head_dim)
    n *= check_int("tokens", tokens) * check_positive_int("batch", batch)
    return n * check_positive_int("bytes_per_element", bytes_per_element)


def decode_ceiling_tokens_per_s(
    weight_bytes: int,
    cache_bytes_per_sequence: int,
    bandwidth_gb_per_s: float,
    *,
    batch: int = 1,
) -> float:
    """The most tokens/s a decode step can give when it is bound by memory bandwidth.

    One step produces ``batch`` tokens and reads the weights once plus each
    sequence's cache: (weights + batch × cache) bytes at ``bandwidth_gb_per_s``
    (10⁹ bytes/s). A ceiling: real steps also launch kernels and reach a
    fraction of the bandwidth (notebook 02).
    """
    w = check_positive_int("weight_bytes", weight_bytes)
    c = check_int("cache_bytes_per_sequence", cache_bytes_per_sequence)
    bw = check_real("bandwidth_gb_per_s", bandwidth_gb_per_s, low=0, low_open=True)
    b = check_positive_int("batch", batch)
    return b * bw * 1e9 / (w + b * c)
