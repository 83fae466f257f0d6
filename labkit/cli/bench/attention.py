"""``labkit bench attention``: attention's backends against sequence length, and decode by batch.

Notebook 11's two GPU measurements, on the best device (CUDA where there is
one, else the CPU):

- :func:`labkit.transformers.sdpa.sdpa_sweep`: causal
  ``scaled_dot_product_attention`` with each backend that runs here (math,
  flash, memory-efficient, cuDNN), its time and its peak memory against the
  sequence length N. The math backend stores the N × N scores, the fused
  ones do not: on a GPU in bfloat16, batch 1, 8 heads of 64, N from 1,024 to
  16,384; on a CPU in float32 with the function's defaults. The math path
  computes 16-bit inputs in float32 and holds about three N × N float32
  matrices (:func:`labkit.transformers.sdpa.math_peak_bytes`: 3 × 8 × N² × 4
  bytes, 26 GB at 16,384); lengths over labkit's memory budget on a smaller
  device are left out, and the summary says so.
- :func:`labkit.transformers.decode.decode_sweep`: one decode step with a KV
  cache, tokens/s against the batch size: on a CPU in float32 for
  :data:`~labkit.transformers.decode.DECODE_CONFIG` (43 million parameters);
  on a GPU in bfloat16 for :data:`~labkit.transformers.decode.GPU_DECODE_CONFIG`
  (6.4 billion, 12.9 GB; a smaller one where the memory budget is smaller),
  because a GPU reads the small model's 86 MB in about 20 µs, far less than
  the hundred-odd kernel launches of a step take: its time would measure the
  launches, not the bandwidth.

Each part is measured on its own: one that fails is reported (traceback on
stderr, one line in the summary) and the other is kept. ``--record`` on a GPU
machine stores the GPU run as the ``attention`` recording. ``--quick`` runs
toy sizes with tiny time budgets: it checks that the command works (the tests
use it), and its numbers mean little.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from labkit.accel.common import ratio, times
from labkit.cli.bench.run import QUICK_NOTE, part_failed
from labkit.core.units import format_bytes, format_duration

#: The recording ``--record`` writes.
REFERENCE_NAME = "attention"

COMMAND = "labkit bench attention"

#: sdpa_sweep's arguments: on a GPU (bfloat16, long sequences), on a CPU (the function's
#: defaults, float32) and for --quick (added to the device's).
GPU_SDPA: dict[str, Any] = {
    "seq_lens": (1024, 2048, 4096, 8192, 16384),
    "batch": 1,
    "heads": 8,
    "head_dim": 64,
    "dtype": "bfloat16",
}
CPU_SDPA: dict[str, Any] = {"seq_lens": (256, 512, 1024, 2048), "dtype": "float32"}
QUICK_SDPA: dict[str, Any] = {"seq_lens": (64, 128), "rounds": 2, "warmup_ms": 0.5, "rep_ms": 2.0}

#: decode_sweep's arguments, the same way.
#: (the model is the largest that fits: labkit.transformers.decode.gpu_decode_config)
GPU_DECODE: dict[str, Any] = {"batches": (1, 4, 16, 64, 256), "dtype": "bfloat16"}
CPU_DECODE: dict[str, Any] = {"batches": (1, 2, 4, 8, 16), "dtype": "float32"}
QUICK_DECODE: dict[str, Any] = {
    "batches": (1, 2),
    "prompt": 8,
    "rounds": 2,
    "warmup_ms": 0.5,
    "rep_ms": 2.0,
}


def quick_config() -> Any:
    """--quick's model: one layer of 32, two heads, a 32-token context."""
    from labkit.transformers.config import GPTConfig

    return GPTConfig(vocab=64, context=32, layers=1, heads=2, d_model=32)


def lengths_that_fit(
    seq_lens: Sequence[int], *, batch: int, heads: int, budget: int
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the lengths whose math-backend temporaries fit ``budget``, the ones left out), by
    sdpa_sweep's own estimate (:func:`labkit.transformers.sdpa.math_peak_bytes`: it computes
    any dtype in float32, so the dtype does not enter).

    The smallest length is always kept, so that sdpa_sweep itself says why it
    does not fit rather than this running nothing in silence.
    """
    from labkit.transformers.sdpa import math_peak_bytes

    lens = sorted(seq_lens)
    kept = [
        n for n in lens if math_peak_bytes(n, batch=batch, heads=heads) <= budget or n == lens[0]
    ]
    return tuple(kept), tuple(n for n in lens if n not in kept)


# --------------------------------------------------------------------------- summary lines


def _peak(n: int) -> str:
    return f"{format_bytes(n)} peak"


def left_out_text(left_out: Sequence[int], budget: int | None) -> str:
    """Which lengths the sweep left out, and why."""
    over = "labkit's memory budget" + (f" ({format_bytes(budget)})" if budget else "")
    return (
        f"N = {', '.join(f'{n:,}' for n in left_out)} left out: the math backend's scores and "
        f"softmax would exceed {over}"
    )


def sdpa_lines(sweep: Any, left_out: Sequence[int] = (), budget: int | None = None) -> list[str]:
    """The summary's lines for an :class:`~labkit.transformers.sdpa.SdpaSweep`."""
    dev = sweep.device
    lines = [
        f"{dev}: causal attention (scaled_dot_product_attention), {sweep.dtype}, batch "
        f"{sweep.batch}, {sweep.heads} heads of {sweep.head_dim}; peak = the most bytes the "
        "call allocated at once, beyond q, k and v"
    ]
    if not sweep.runs:
        return lines
    backends = list(dict.fromkeys(r.backend for r in sweep.runs))
    fused = [b for b in backends if b != "math"]
    lens = sorted({r.seq_len for r in sweep.runs})
    # sdpa_sweep takes its per-round ratios against math wherever math ran
    math_is_baseline = sweep.runs[0].backend == "math"
    for n in lens:
        here = {r.backend: r for r in sweep.runs if r.seq_len == n}
        math = here.get("math")
        candidates = [here[b] for b in fused if b in here]
        scores = f"the N×N scores alone are {format_bytes(sweep.score_bytes(n))}"
        if not candidates:
            if math is not None:
                lines.append(
                    f"{dev}: math at N = {n:,}: {format_duration(math.median_ms)}, "
                    f"{_peak(math.peak_bytes)} ({scores}); no fused backend ran"
                )
            continue
        best = min(candidates, key=lambda r: r.median_ms)
        fastest = " (the fastest fused backend here)" if len(candidates) > 1 else ""
        line = (
            f"{dev}: {best.backend} at N = {n:,}{fastest}: {format_duration(best.median_ms)}, "
            f"{_peak(best.peak_bytes)}"
        )
        if math is not None:
            line += f"; math {format_duration(math.median_ms)}, {_peak(math.peak_bytes)} ("
            if math_is_baseline:
                line += (
                    f"{best.backend} {times(best.ratio)} as fast, the median of the rounds "
                    f"({best.ratio_low:.2f}× to {best.ratio_high:.2f}×)"
                )
            else:
                line += f"{times(ratio(math.median_ms, best.median_ms))} the time"
            line += f"; {times(ratio(math.peak_bytes, best.peak_bytes))} the memory; {scores})"
        lines.append(line)
    if len(lens) > 1:
        low, high = lens[0], lens[-1]
        growth = [
            f"{dev}: from N = {low:,} to {high:,} ({times(high / low)} longer; N² grew "
            f"{times((high / low) ** 2)}):"
        ]
        for backend in backends:
            first = next((r for r in sweep.runs if (r.backend, r.seq_len) == (backend, low)), None)
            last = next((r for r in sweep.runs if (r.backend, r.seq_len) == (backend, high)), None)
            if first is None or last is None:
                continue
            growth.append(
                f"{backend}'s time grew {times(ratio(last.median_ms, first.median_ms))}, "
                f"its peak {times(ratio(last.peak_bytes, first.peak_bytes))}"
            )
        if len(growth) > 1:
            lines.append(growth[0] + " " + "; ".join(growth[1:]))
        top = [r for r in sweep.runs if r.seq_len == high]
        if len(top) > 2:  # more than math and one fused backend: list them all once
            lines.append(
                f"{dev}: every backend at N = {high:,}: "
                + "; ".join(
                    f"{r.backend} {format_duration(r.median_ms)}, {_peak(r.peak_bytes)}"
                    for r in top
                )
            )
    if left_out:
        lines.append(f"{dev}: {left_out_text(left_out, budget)}")
    lines += [f"{dev}: {name}: not available here ({why})" for name, why in sweep.missing.items()]
    return lines


def decode_lines(sweep: Any) -> list[str]:
    """The summary's lines for a :class:`~labkit.transformers.decode.DecodeSweep`."""
    dev = sweep.device
    c = sweep.config
    lines = [
        f"{dev}: decode, {sweep.dtype}, {c.layers} layer{'s' if c.layers != 1 else ''} of "
        f"{c.d_model} "
        f"({format_bytes(sweep.parameter_bytes)} of parameters), one new token per sequence "
        f"after a {sweep.prompt}-token prompt"
    ]
    points = sorted(sweep.points, key=lambda p: p.batch)
    if not points:
        return lines
    lines.append(
        f"{dev}: tokens/s by batch: "
        + "; ".join(f"{p.batch} → {p.tokens_per_s:,.0f}" for p in points)
    )
    first, last = points[0], points[-1]
    if last.batch != first.batch:
        lines.append(
            f"{dev}: batch {last.batch} against batch {first.batch}: "
            f"{times(ratio(last.tokens_per_s, first.tokens_per_s))} the tokens/s for "
            f"{times(last.batch / first.batch)} the sequences; a step takes "
            f"{format_duration(last.median_ms)} against {format_duration(first.median_ms)} "
            f"({times(ratio(last.median_ms, first.median_ms))} as long); FLOP/byte "
            f"{first.flop_per_byte:.3g} → {last.flop_per_byte:.3g}"
        )
    if sweep.bandwidth_gb_per_s is not None:
        parts = []
        for p in points:
            ceiling = sweep.ceiling_tokens_per_s(p)
            if ceiling:
                parts.append(f"batch {p.batch} {p.tokens_per_s / ceiling:.2f}")
        lines.append(
            f"{dev}: measured / ceiling at {sweep.bandwidth_gb_per_s:.3g} GB/s: " + ", ".join(parts)
        )
    return lines


# --------------------------------------------------------------------------- results


def sdpa_dict(sweep: Any, left_out: Sequence[int] = ()) -> dict[str, Any]:
    return {
        "device": sweep.device,
        "dtype": sweep.dtype,
        "batch": sweep.batch,
        "heads": sweep.heads,
        "head_dim": sweep.head_dim,
        "seq_lens": sorted({r.seq_len for r in sweep.runs}),
        "left_out_seq_lens": list(left_out),
        "runs": [
            {
                "backend": r.backend,
                "seq_len": r.seq_len,
                "median_ms": r.median_ms,
                "ratio_low": r.ratio_low,
                "ratio_high": r.ratio_high,
                "peak_bytes": r.peak_bytes,
                "score_bytes": sweep.score_bytes(r.seq_len),
            }
            for r in sweep.runs
        ],
        "missing": dict(sweep.missing),
    }


def decode_dict(sweep: Any) -> dict[str, Any]:
    return {
        "device": sweep.device,
        "dtype": sweep.dtype,
        "prompt": sweep.prompt,
        "config": asdict(sweep.config),
        "parameter_bytes": sweep.parameter_bytes,
        "bandwidth_gb_per_s": sweep.bandwidth_gb_per_s,
        "points": [
            {
                "batch": p.batch,
                "median_ms": p.median_ms,
                "tokens_per_s": p.tokens_per_s,
                "bytes_per_step": p.bytes_per_step,
                "flops_per_step": p.flops_per_step,
                "flop_per_byte": p.flop_per_byte,
                "gb_per_s": p.gb_per_s,
                "ceiling_tokens_per_s": sweep.ceiling_tokens_per_s(p),
            }
            for p in sweep.points
        ],
    }


@dataclass(frozen=True)
class AttentionResults:
    """The SDPA sweep and the decode sweep on ``device``; a part that failed is None."""

    device: str
    sdpa: Any  # labkit.transformers.sdpa.SdpaSweep | None
    decode: Any  # labkit.transformers.decode.DecodeSweep | None
    left_out: tuple[int, ...] = ()  # sequence lengths over the memory budget
    budget_bytes: int | None = None
    failed: tuple[tuple[str, str], ...] = ()
    quick: bool = False

    @property
    def measured(self) -> bool:
        return self.sdpa is not None or self.decode is not None

    def summary(self) -> list[str]:
        lines = []
        if self.sdpa is not None:
            lines += sdpa_lines(self.sdpa, self.left_out, self.budget_bytes)
        if self.decode is not None:
            lines += decode_lines(self.decode)
        lines += [f"{self.device}: {what}: not measured ({why})" for what, why in self.failed]
        if self.quick:
            lines.append(QUICK_NOTE)
        return lines

    def to_dict(self) -> dict[str, Any]:
        """The recording's schema, which the notebook's GPU cell reads: a view, not the fields."""
        return {
            "device": self.device,
            "quick": self.quick,
            "sdpa": None if self.sdpa is None else sdpa_dict(self.sdpa, self.left_out),
            "decode": None if self.decode is None else decode_dict(self.decode),
            "failed": [{"name": what, "error": why} for what, why in self.failed],
        }

    def __str__(self) -> str:
        parts = []
        if self.sdpa is not None:
            parts.append(str(self.sdpa))
            if self.left_out:
                parts[-1] += "\n" + left_out_text(self.left_out, self.budget_bytes)
        if self.decode is not None:
            parts.append(str(self.decode))
        tail = [f"{what}: not measured ({why})" for what, why in self.failed]
        if self.quick:
            tail.append(QUICK_NOTE)
        if tail:
            parts.append("\n".join(tail))
        return "\n\n".join(parts)


def measure(quick: bool = False) -> AttentionResults:
    """Both sweeps on the best device; each part fails on its own."""
    from labkit.core.optional import import_optional
    from labkit.machine.gpu import has_gpu
    from labkit.machine.memory import budget_bytes
    from labkit.transformers.decode import decode_sweep
    from labkit.transformers.sdpa import sdpa_sweep

    torch = import_optional("torch", COMMAND)
    device = "cuda" if has_gpu() else "cpu"
    failed: list[tuple[str, str]] = []

    def settle() -> None:  # leave no queued work, and no cached blocks, to the next part
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()

    sdpa_args = dict(GPU_SDPA if device == "cuda" else CPU_SDPA)
    if quick:
        sdpa_args.update(QUICK_SDPA)
    sdpa = None
    left_out: tuple[int, ...] = ()
    budget: int | None = None
    try:
        budget = budget_bytes(device=device)
        sdpa_args["seq_lens"], left_out = lengths_that_fit(
            sdpa_args["seq_lens"],
            batch=sdpa_args.get("batch", 1),
            heads=sdpa_args.get("heads", 4),
            budget=budget,
        )
        sdpa = sdpa_sweep(device=device, **sdpa_args)
        settle()
    except Exception as exc:  # one failing part must not lose the other
        failed.append(("scaled_dot_product_attention sweep", part_failed(COMMAND, "sdpa", exc)))

    decode_args = dict(GPU_DECODE if device == "cuda" else CPU_DECODE)
    if device == "cuda" and not quick:
        from labkit.transformers.decode import gpu_decode_config

        decode_args["config"] = gpu_decode_config(device, decode_args["dtype"])
    if quick:
        decode_args.update(QUICK_DECODE, config=quick_config())
    decode = None
    try:
        if device == "cuda" and not quick:  # the ceiling beside each batch: this GPU's roof
            from labkit.bandwidth.stream import peak_bandwidth

            decode_args["bandwidth_gb_per_s"] = peak_bandwidth(device).gb_per_s
        decode = decode_sweep(device=device, **decode_args)
        settle()
    except Exception as exc:
        failed.append(("decode sweep", part_failed(COMMAND, "decode", exc)))
    return AttentionResults(
        device=device,
        sdpa=sdpa,
        decode=decode,
        left_out=tuple(left_out),
        budget_bytes=budget,
        failed=tuple(failed),
        quick=quick,
    )


def run_attention_benchmark(
    *, as_json: bool = False, record: bool = False, quick: bool = False
) -> int:
    """``labkit bench attention``; returns the exit code (same rules as the other recorders).

    A run in which every part failed records nothing and returns 1 (the
    tracebacks are on stderr); one failed part is reported and the other kept.
    """
    from labkit.cli.bench.run import preflight, record_and_report

    early = preflight(COMMAND, record=record, quick=quick)
    if early is not None:
        return early
    results = measure(quick=quick)
    on_gpu = results.device != "cpu"
    if record and on_gpu and not results.measured:
        print(f"{COMMAND} --record: every part failed, so nothing was recorded", file=sys.stderr)
    code = record_and_report(
        "attention",
        REFERENCE_NAME,
        results,
        as_json=as_json,
        record=record and on_gpu and results.measured,
    )
    return code if results.measured else 1
