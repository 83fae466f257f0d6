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
from labkit.machine.prediction import GpuPrediction, by_id, spec_values, spec_verdicts
from labkit.machine.published import GpuSpec, PublishedFigure, gpu_spec, published_figures
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

#: The published figures every GPU sees: FlashAttention's memory and its fraction of the
#: tensor cores' peak on an A100 and an H100, and decoding GPT-J 6B at batch 1 and 64.
ATTENTION_FIGURES = (
    "flashattention-paper-memory-20x-a100-40gb",
    "flashattention2-fwd-tflops-a100-sxm4",
    "flashattention3-fp16-fwd-tflops-h100-sxm5",
    "a100-trtllm-gptj-6b-fp16-bs1",
    "h100-trtllm-gptj-6b-fp8-bs1",
    "h100-trtllm-gptj-6b-fp8-bs64-128-128",
)
#: GPT-J 6B's parameters, from its name (6 billion); bytes per parameter by precision.
GPTJ_PARAMS = 6e9
PRECISION_BYTES = {"FP16": 2, "FP8": 1}


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
            f"  {memory:g} GB of memory (taken as {memory:g} × 10⁹ bytes) holds the weights and the "
            f"caches of at most {fits:,} such sequences (nothing else counted)"
        )
    return lines


def _attention_lines(found: dict[str, float]) -> list[str]:
    n, h, d = ATTENTION_N, ATTENTION_HEADS, HEAD_DIM
    scores = h * n * n * BYTES_PER_ELEMENT
    flops = 4 * h * n * n * d  # q·kᵀ and scores × v, 2·N²·d each per head
    lines = [
        f"attention, one sequence of N = {n:,}, {h} heads of {d}, bfloat16: stored in bfloat16 "
        f"the scores take {format_bytes(scores)} (PyTorch's math backend computes 16-bit inputs "
        f"in float32, twice that); q·kᵀ and × v are {flops / 1e12:.2f} TFLOP (every score, "
        "masked or not)"
    ]
    bandwidth, peak = found.get("memory_gb_per_s"), found.get("bf16_tflop_per_s")
    if bandwidth:
        lines.append(
            f"  unfused, scores in bfloat16: {SCORE_PASSES} passes over them take at least "
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


def _decode_verdicts(figures: tuple[PublishedFigure, ...]) -> list[str]:
    """Published batch-1 decode rates against the bandwidth ceiling of their GPU's sheet."""
    table = {f.id: f for f in figures}
    lines = []
    for key in ("a100-trtllm-gptj-6b-fp16-bs1", "h100-trtllm-gptj-6b-fp8-bs1"):
        f = table.get(key)
        if f is None or f.spec_name is None:
            continue
        precision = next(p for p in PRECISION_BYTES if p in f.method)
        weights = GPTJ_PARAMS * PRECISION_BYTES[precision]
        bandwidth = gpu_spec(f.spec_name).need("memory_gb_per_s")
        ceiling = bandwidth * 1e9 / weights
        lines.append(
            f"{f.gpu}, GPT-J 6B in {precision} at batch 1: {f.value:,.0f} tokens/s published, "
            f"against a ceiling of {bandwidth:,.0f} GB/s ÷ {weights / 1e9:.0f} GB of weights "
            f"(6 billion parameters, as the name says; the cache not counted) = {ceiling:,.0f} "
            f"tokens/s: {f.value / ceiling:.0%} of it"
        )
    one, many = (
        table.get("h100-trtllm-gptj-6b-fp8-bs1"),
        table.get("h100-trtllm-gptj-6b-fp8-bs64-128-128"),
    )
    if one is not None and many is not None:
        lines.append(
            f"{one.gpu}, GPT-J 6B in FP8: batch 64 gave {many.value / one.value:.1f}× the "
            f"tokens/s of batch 1, for 64× the sequences: a step of 64 took "
            f"{64 * one.value / many.value:.2f}× as long as a step of one (two rows of one "
            "table; the batch-1 row states no output length)"
        )
    return lines


def predict_attention(gpu: GpuSpec) -> GpuPrediction:
    """Decode's bandwidth ceiling and attention's floors on ``gpu`` (notebook 11's GPU cell),
    beside :data:`ATTENTION_FIGURES` and up to two more published for ``gpu`` itself."""
    found, missing = spec_values(gpu, "memory_gb_per_s", "memory_gb", "bf16_tflop_per_s")
    model = (*_decode_lines(found), *_attention_lines(found))
    figures = by_id(ATTENTION_FIGURES)
    own = [
        f
        for f in published_figures("attention")
        if f.spec_name == gpu.name and f.id not in ATTENTION_FIGURES
    ]
    figures = (*figures, *own[:2])
    verdicts = (*spec_verdicts(figures), *_decode_verdicts(figures))
    return GpuPrediction("attention", gpu, model, figures, verdicts, tuple(found), missing)
