"""Checks for notebook 11: the KV cache, the decode ceiling, and which attention fits."""

from __future__ import annotations

from typing import Any

from labkit.check.result import CheckResult, as_number, close_to, known_mistake, todo, unsolved

# --- the KV cache of a model with grouped-query attention ---

#: The exercise's model: 32 layers, 32 query heads and 8 key/value heads of 128 dimensions,
#: bfloat16, one sequence of 8,192 tokens.
KV_MODEL = {"layers": 32, "heads": 32, "kv_heads": 8, "head_dim": 128, "bytes": 2, "tokens": 8192}


def kv_cache(cache_bytes: Any) -> CheckResult:
    """Check the bytes of :data:`KV_MODEL`'s KV cache for one sequence of 8,192 tokens."""
    exercise = "KV cache"
    m = KV_MODEL
    if unsolved(cache_bytes):
        return todo(
            exercise,
            "each layer caches a key and a value per token, each kv_heads × head_dim values.",
        )
    value = as_number(cache_bytes, "cache_bytes")
    per_token = 2 * m["layers"] * m["kv_heads"] * m["head_dim"] * m["bytes"]
    ref = per_token * m["tokens"]
    if close_to(value, ref, 1e-6):
        return CheckResult(
            exercise,
            True,
            True,
            f"{ref:,} bytes, 1 GiB: {per_token // 1024} KiB per token. With 32 key/value heads "
            "(no grouping) it would be 4 GiB: that 4× is what grouped-query attention saves.",
        )
    mistakes = [
        (ref / 2, "Count the keys and the values: two tensors per layer."),
        (ref * 4, "Only the 8 key/value heads are cached; the 32 query heads are not."),
        (ref * 2, "bfloat16 is 2 bytes per value, not 4."),
        (ref / m["tokens"], "That is one token's cache; the sequence has 8,192."),
        (ref / 2**30, "Give bytes, not GiB."),
        (ref / 1e9, "Give bytes, not GB."),
    ]
    if (mistake := known_mistake(exercise, value, mistakes, 1e-3)) is not None:
        return mistake
    return CheckResult(
        exercise,
        False,
        True,
        f"{value:,.0f} is off: 2 × layers × kv_heads × head_dim × bytes × tokens.",
    )


# --- the decode ceiling on a named GPU ---

#: The exercise: 8 billion parameters in bfloat16 on an H100 SXM5, batch 1, cache ignored.
DECODE_PARAMS = 8e9
DECODE_GPU = "H100 SXM5 80GB"


def decode_ceiling(tokens_per_s: Any) -> CheckResult:
    """Check the most tokens/s one sequence can decode on :data:`DECODE_GPU` (weights only)."""
    from labkit.machine.published import gpu_spec

    exercise = "decode ceiling"
    if unsolved(tokens_per_s):
        return todo(
            exercise,
            "every step reads every weight once: steps/s = bandwidth / bytes of the weights.",
        )
    value = as_number(tokens_per_s, "tokens_per_s")
    bandwidth = gpu_spec(DECODE_GPU).need("memory_gb_per_s") * 1e9
    weight_bytes = 2 * DECODE_PARAMS
    ref = bandwidth / weight_bytes
    if close_to(value, ref, 0.02):
        return CheckResult(
            exercise,
            True,
            True,
            f"about {ref:.0f} tokens/s: {bandwidth / 1e9:,.0f} GB/s over {weight_bytes / 1e9:.0f} "
            "GB. A ceiling: no kernel reaches the peak bandwidth, and each step also reads the "
            "cache. A batch of 8 sequences reads the weights once for all 8, which is why "
            "batching raises this ceiling.",
        )
    mistakes = [
        (ref / 2, "bfloat16 is 2 bytes per parameter, not 4."),
        (ref * 2, "Each parameter is 2 bytes, not 1."),
        ((bandwidth / 1e9) / (weight_bytes / 2**30), "Mixing GB (10⁹) with GiB (2³⁰)."),
        (1 / ref, "That is seconds per token; the question asks tokens per second."),
    ]
    if (mistake := known_mistake(exercise, value, mistakes, 0.02)) is not None:
        return mistake
    return CheckResult(
        exercise, False, True, f"{value:,.1f} is off: bandwidth (bytes/s) ÷ bytes of the weights."
    )


# --- which attention backend fits N = 8,192 in a memory budget ---

#: The exercise: one sequence, 32 heads of 128, bfloat16 inputs, N = 8,192, 2 GiB free for
#: attention. PyTorch's math backend computes 16-bit inputs in float32: 4 bytes per score.
FIT_CASE = {"batch": 1, "heads": 32, "head_dim": 128, "bytes": 4, "n": 8192, "budget": 2 << 30}
FIT_BACKENDS = ("math", "flash")


def attention_fits(backends: Any) -> CheckResult:
    """Check which of ``math`` and ``flash`` fit :data:`FIT_CASE` (a list, set or one name)."""
    exercise = "attention in 2 GiB"
    if unsolved(backends):
        return todo(
            exercise,
            "the math backend stores batch × heads × N × N scores; a fused one stores tiles.",
        )
    if isinstance(backends, str):
        chosen = {backends}
    elif isinstance(backends, (list, tuple, set, frozenset)):
        chosen = set(backends)
    else:
        raise TypeError(
            f"backends must be a backend's name or a list of them (from {FIT_BACKENDS}), "
            f"got {type(backends).__name__}"
        )
    unknown = chosen - set(FIT_BACKENDS)
    if unknown:
        raise ValueError(
            f"backends must name backends from {FIT_BACKENDS}, got {sorted(map(str, unknown))}"
        )
    c = FIT_CASE
    scores = c["batch"] * c["heads"] * c["n"] ** 2 * c["bytes"]
    if chosen == {"flash"}:
        return CheckResult(
            exercise,
            True,
            True,
            f"flash only: the math backend's float32 scores alone are {scores / 2**30:.0f} GiB, "
            "four times the budget, before their softmax (even stored in bfloat16 they would be "
            "4 GiB); the fused kernel keeps tiles of them on chip, and its extra memory grows "
            "with N, not N².",
        )
    if "math" in chosen:
        return CheckResult(
            exercise,
            False,
            True,
            f"math needs the 32 × 8,192 × 8,192 scores in memory: {scores / 2**30:.0f} GiB in "
            "float32, which it computes 16-bit inputs in, far over the 2 GiB budget.",
        )
    return CheckResult(exercise, False, True, "Name the backends that fit; at least one does.")
