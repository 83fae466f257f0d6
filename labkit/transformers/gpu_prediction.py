"""Notebook 11's GPU cell without a GPU: decoding and attention on a named GPU, predicted.

- **Decode** is bound by memory bandwidth at small batches
  (:mod:`labkit.transformers.kv_cache`): one step reads every weight once and
  each sequence's KV cache, so tokens/s ≤ batch × bandwidth / (weights +
  batch × cache). The memory size caps the batch: the weights and every
  sequence's cache must fit.
- **Attention**'s math path writes the N × N scores and reads them back
  (softmax, then × V), so its time has a floor of those bytes over the
  bandwidth; a fused kernel (FlashAttention) never stores them, which leaves
  the FLOPs over the tensor cores' peak as its floor.

Both are ceilings from the spec sheet, not predictions of what a real kernel
reaches; the published figures beside them say how close real ones get.
"""

from __future__ import annotations

from labkit.core.units import format_bytes, format_duration
from labkit.machine.prediction import GpuPrediction, choose_figures, spec_values, spec_verdicts
from labkit.machine.published import GpuSpec
from labkit.transformers.kv_cache import decode_ceiling_tokens_per_s, kv_cache_bytes

#: The decode example: 8 billion parameters in bfloat16, 32 layers, 8 key/value heads of 128.
DECODE_PARAMS = 8 * 10**9
DECODE_LAYERS = 32
DECODE_KV_HEADS = 8
HEAD_DIM = 128
BYTES_PER_ELEMENT = 2  # bfloat16
CONTEXT = 4096
BATCHES = (1, 8, 64)
#: The attention example: one sequence of N = 8,192 tokens, 32 heads of 128, bfloat16.
ATTENTION_N = 8192
ATTENTION_HEADS = 32
#: Passes over the scores in the math path: write q·kᵀ, read and write the softmax, read for × v.
SCORE_PASSES = 4


def _decode_lines(found: dict[str, float]) -> list[str]:
    weights = BYTES_PER_ELEMENT * DECODE_PARAMS
    cache = kv_cache_bytes(
        DECODE_LAYERS,
        DECODE_KV_HEADS,
        HEAD_DIM,
        CONTEXT,
        bytes_per_element=BYTES_PER_ELEMENT,
    )
    lines = [
        f"decode, a model of {DECODE_PARAMS / 1e9:.0f} billion parameters in bfloat16 "
        f"({format_bytes(weights)} of weights), {DECODE_LAYERS} layers with {DECODE_KV_HEADS} "
        f"key/value heads of {HEAD_DIM} ({format_bytes(cache // CONTEXT)} of KV cache per token, "
        f"{format_bytes(cache)} per sequence of {CONTEXT:,} tokens):"
    ]
    bandwidth = found.get("memory_gb_per_s")
    if bandwidth:
        ceilings = [
            f"{decode_ceiling_tokens_per_s(weights, cache, bandwidth, batch=b):,.0f}"
            + (" tokens/s" if i == 0 else "")
            + f" at batch {b}"
            for i, b in enumerate(BATCHES)
        ]
        lines.append(
            "  at most " + ", ".join(ceilings) + " (bandwidth / bytes read per step; "
            "batching shares the weight reads, not the caches)"
        )
    memory = found.get("memory_gb")
    if memory:
        room = memory * 1e9 - weights
        fits = int(room // cache) if room > 0 else 0
        lines.append(
            f"  {memory:g} GB of memory holds the weights and the caches of at most {fits:,} "
            "such sequences (nothing else counted)"
        )
    return lines


def _attention_lines(found: dict[str, float]) -> list[str]:
    n, h, d = ATTENTION_N, ATTENTION_HEADS, HEAD_DIM
    scores = h * n * n * BYTES_PER_ELEMENT
    flops = 4 * h * n * n * d  # q·kᵀ and scores × v, 2·N²·d each per head
    lines = [
        f"attention, one sequence of N = {n:,}, {h} heads of {d}, bfloat16: the scores take "
        f"{format_bytes(scores)}; q·kᵀ and × v are {flops / 1e12:.2f} TFLOP (every score, "
        "masked or not)"
    ]
    bandwidth, peak = found.get("memory_gb_per_s"), found.get("bf16_tflop_per_s")
    if bandwidth:
        lines.append(
            f"  math path: {SCORE_PASSES} passes over the scores take at least "
            f"{format_duration(SCORE_PASSES * scores / (bandwidth * 1e9) * 1e3)} at the peak "
            "bandwidth"
        )
    if peak:
        lines.append(
            f"  fused (FlashAttention): the scores never reach memory, so the floor is the "
            f"FLOPs at the BF16 peak: {format_duration(flops / (peak * 1e12) * 1e3)} "
            "(half of it where a causal kernel skips the masked tiles)"
        )
    return lines


def predict_attention(gpu: GpuSpec) -> GpuPrediction:
    """Decode's bandwidth ceiling and attention's floors on ``gpu`` (notebook 11's GPU cell)."""
    found, missing = spec_values(gpu, "memory_gb_per_s", "memory_gb", "bf16_tflop_per_s")
    model = (*_decode_lines(found), *_attention_lines(found))
    figures = choose_figures("attention", gpu)
    return GpuPrediction(
        "attention",
        gpu,
        tuple(model),
        figures,
        tuple(spec_verdicts(figures)),
        tuple(found),
        missing,
    )
