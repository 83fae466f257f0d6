"""``labkit bench accel``: notebook 04's framework-acceleration measurements in one run.

Four lessons, each measured with :mod:`labkit.accel` on the best torch device
here: the host returning from a launch before the GPU has finished it
(:func:`~labkit.accel.async_launch_demo`, GPU only), the cost of a
``.item()`` every training step (:func:`~labkit.accel.sync_points_benchmark`),
autocast to bfloat16 and float16 against float32 for notebook 04's small MLP
(:func:`~labkit.accel.mixed_precision_torch`; float16 on CUDA with a
GradScaler), and ``torch.compile``'s first call against its steady state
(:func:`~labkit.accel.torch_compile_benchmark`).

``--record`` on a GPU machine stores the GPU run as the ``accel`` recording
that CPU-only learners see through ``labkit.require_gpu``. ``--quick`` runs
toy sizes with tiny time budgets and skips ``torch.compile`` (its first call
alone takes seconds on a CPU): it checks that the command works (the tests
use it), and its numbers mean little.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from labkit.accel.common import seconds, times
from labkit.cli.bench.run import part_failed
from labkit.core.units import format_duration
from labkit.core.validate import check_positive_int
from labkit.timing.interleave import BAND

#: The recording ``--record`` writes.
REFERENCE_NAME = "accel"

#: The dtypes autocast is measured with, against float32.
PRECISIONS = ("bfloat16", "float16")

COMMAND = "labkit bench accel"

_QUICK = "(--quick: toy sizes and tiny time budgets, no torch.compile; the numbers mean little)"


def mlp_factory() -> Any:
    """Notebook 04's MLP: Linear(512, 1024) → ReLU → Linear(1024, 10), float32, seeded."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)
    )


def mlp_data(batch: int = 256) -> tuple[Any, Any]:
    """A (batch, 512) float32 input and integer labels in [0, 10), on the CPU, seeded."""
    check_positive_int("batch", batch)
    import torch

    gen = torch.Generator().manual_seed(0)
    return torch.randn(batch, 512, generator=gen), torch.randint(0, 10, (batch,), generator=gen)


def sync_points_line(
    dev: str,
    *,
    steps: int,
    deferred_ms: float,
    item_ms: float,
    item_ratio: float,
    cpu_ratio: float,
    print_ratio: float,
) -> str:
    """The sync-habits line of the summary, from the numbers a recording keeps.

    Two statistics are printed and can disagree: the medians (each the median
    of the rounds' medians) and the ratios (the median over rounds of each
    round's time against one sync at the end). When they point in opposite
    directions, at least one round went each way, so the line says the rounds
    disagree instead of naming a cost.
    """
    of_medians = item_ms / deferred_ms if deferred_ms > 0 else float("inf")
    if (item_ratio - 1) * (of_medians - 1) < 0:
        verdict = (
            "the medians and the per-round ratio point in opposite directions, so the rounds "
            "disagree: no consistent cost of .item() at this size"
        )
    elif min(item_ratio, of_medians) > BAND:
        verdict = ".item() every step costs time here"
    elif max(item_ratio, of_medians) < BAND and min(item_ratio, of_medians) > 1 / BAND:
        verdict = f"within {(BAND - 1) * 100:.0f}%: no measurable cost of .item() here"
    else:
        verdict = "a small difference, within what repeated runs move"
    return (
        f"{dev}: {steps} training steps: one sync at the end {format_duration(deferred_ms)}, "
        f".item() every step {format_duration(item_ms)} (each the median of the rounds' "
        f"medians); time against one sync at the end, median over rounds: .item() "
        f"{times(item_ratio)}, .cpu() {times(cpu_ratio)}, print() {times(print_ratio)}; {verdict}"
    )


@dataclass(frozen=True)
class AccelResults:
    """Everything one run measured on ``device``; ``failed`` holds (what, error) pairs."""

    device: str
    launch: Any  # AsyncLaunchResult | None (None without a GPU)
    sync: Any  # SyncPointsResult
    precision: tuple[Any, ...]  # MixedPrecisionResult, one per dtype that ran
    compiled: Any  # CompileResult | None
    compile_note: str | None = None
    failed: tuple[tuple[str, str], ...] = ()
    quick: bool = False

    def summary(self) -> list[str]:
        """Lines for people (the recording's summary for a GPU)."""
        from labkit.accel.precision import UNIT_ROUNDOFF

        dev = self.device
        lines = []
        if self.launch is not None:
            a = self.launch
            lines.append(
                f"{dev}: matmuls launched: the host got control back after "
                f"{format_duration(a.launch_ms)}, the GPU finished after "
                f"{format_duration(a.synchronized_ms)} ({times(a.hidden_ratio)}): a host clock "
                "without a sync under-reports"
            )
        s = self.sync
        lines.append(
            sync_points_line(
                dev,
                steps=s.steps,
                deferred_ms=s.deferred_median_ms,
                item_ms=s.item_median_ms,
                item_ratio=s.item_ratio,
                cpu_ratio=s.cpu_ratio,
                print_ratio=s.print_ratio,
            )
        )
        for p in self.precision:
            u = UNIT_ROUNDOFF.get(p.dtype, 2.0**-8)
            scaling = ", GradScaler" if p.used_loss_scaling else ""
            lines.append(
                f"{dev}: {p.dtype} autocast vs float32 (MLP 512→1024→10, batch 256{scaling}): "
                f"forward {times(p.forward_speedup)}, train step {times(p.train_speedup)}; "
                f"max |output difference| {p.max_abs_error:.3g} ({times(p.max_abs_error / u)} "
                f"the unit roundoff), loss after {p.steps} updates differs by "
                f"{p.loss_abs_difference:.3g}"
            )
        if self.compiled is not None:
            c = self.compiled
            pays = (
                "never pays off here"
                if c.break_even_calls is None
                else f"pays for itself after {c.break_even_calls} calls"
            )
            lines.append(
                f"{dev}: torch.compile of a 5-op elementwise chain on {c.elements:,} elements: "
                f"first call {seconds(c.first_call_s)} (cold caches), then {format_duration(c.compiled.median_ms)}"
                f" vs eager {format_duration(c.eager.median_ms)} ({times(c.speedup)} steady-state "
                f"speedup); the compile {pays}"
            )
        elif self.compile_note:
            lines.append(f"{dev}: torch.compile: {self.compile_note}")
        lines += [f"{dev}: {what}: not measured ({error})" for what, error in self.failed]
        if self.quick:
            lines.append(_QUICK)
        return lines

    def to_dict(self) -> dict[str, Any]:
        """The structured numbers behind :meth:`summary`."""
        launch = None
        if self.launch is not None:
            launch = {
                "gpu": self.launch.device,
                "launch_ms": self.launch.launch_ms,
                "synchronized_ms": self.launch.synchronized_ms,
                "hidden_ratio": self.launch.hidden_ratio,
            }
        s = self.sync
        compiled = None
        if self.compiled is not None:
            c = self.compiled
            compiled = {
                "elements": c.elements,
                "eager_ms": c.eager.median_ms,
                "compiled_ms": c.compiled.median_ms,
                "first_call_s": c.first_call_s,
                "speedup": c.speedup,
                "break_even_calls": c.break_even_calls,
            }
        return {
            "device": self.device,
            "quick": self.quick,
            "async_launch": launch,
            "sync_points": {
                "steps": s.steps,
                "deferred_ms": s.deferred_median_ms,
                "item_ms": s.item_median_ms,
                "item_ratio": s.item_ratio,
                "cpu_ratio": s.cpu_ratio,
                "print_ratio": s.print_ratio,
            },
            "mixed_precision": [
                {
                    "dtype": p.dtype,
                    "forward_fp32_ms": p.forward_fp32.median_ms,
                    "forward_mixed_ms": p.forward_mixed.median_ms,
                    "train_fp32_ms": p.train_fp32.median_ms,
                    "train_mixed_ms": p.train_mixed.median_ms,
                    "forward_speedup": p.forward_speedup,
                    "train_speedup": p.train_speedup,
                    "max_abs_error": p.max_abs_error,
                    "loss_fp32": p.loss_fp32,
                    "loss_mixed": p.loss_mixed,
                    "used_loss_scaling": p.used_loss_scaling,
                }
                for p in self.precision
            ],
            "torch_compile": compiled,
            "compile_note": self.compile_note,
            "failed": [{"name": name, "error": error} for name, error in self.failed],
        }

    def __str__(self) -> str:
        parts = []
        if self.launch is not None:
            parts.append(f"Async launch {self.launch}")
        parts.append(str(self.sync))
        parts += [str(p) for p in self.precision]
        if self.compiled is not None:
            parts.append(str(self.compiled))
        elif self.compile_note:
            parts.append(f"torch.compile: {self.compile_note}")
        parts += [f"{what}: not measured ({error})" for what, error in self.failed]
        if self.quick:
            parts.append(_QUICK)
        return "\n\n".join(parts)


def measure(quick: bool = False) -> AccelResults:
    """Run the four measurements on the best torch device here (CUDA where there is one)."""
    from labkit.accel import (
        async_launch_demo,
        mixed_precision_torch,
        sync_points_benchmark,
        torch_compile_benchmark,
    )
    from labkit.machine.gpu import has_gpu

    on_gpu = has_gpu()
    device = "cuda" if on_gpu else "cpu"
    budget: dict[str, Any] = {"warmup_ms": 1.0, "rep_ms": 5.0} if quick else {}
    failed: list[tuple[str, str]] = []

    launch = async_launch_demo(**({"size": 256, "repeats": 3} if quick else {})) if on_gpu else None
    sync = sync_points_benchmark(
        **({"steps": 5, "size": 32} if quick else {}), device=device, **budget
    )
    precision = []
    for dtype in PRECISIONS:
        try:
            precision.append(
                mixed_precision_torch(
                    mlp_factory,
                    mlp_data(),
                    dtype=dtype,
                    device=device,
                    **({"steps": 2} if quick else {}),
                    **budget,
                )
            )
        except Exception as exc:  # e.g. float16 autocast unsupported on this CPU
            failed.append((f"{dtype} autocast", part_failed(COMMAND, f"{dtype} autocast", exc)))
    compiled, note = None, None
    if quick:
        note = "skipped (--quick; its cold first call alone takes seconds on a CPU)"
    else:
        try:
            compiled = torch_compile_benchmark(size=2**24 if on_gpu else 1_000_000, device=device)
        except Exception as exc:  # no C++ compiler / Triton here: say so, keep the rest
            note = f"not measured ({part_failed(COMMAND, 'torch.compile', exc)})"
    return AccelResults(
        device=device,
        launch=launch,
        sync=sync,
        precision=tuple(precision),
        compiled=compiled,
        compile_note=note,
        failed=tuple(failed),
        quick=quick,
    )


def run_accel_benchmark(as_json: bool = False, record: bool = False, quick: bool = False) -> int:
    """``labkit bench accel``; returns the exit code.

    ``record`` without a GPU prints one line, measures and writes nothing,
    and returns 0. Without torch it prints the install command and returns
    1. ``record`` with ``quick`` is a UsageError (exit 2).
    """
    from labkit.cli.bench.run import preflight, record_and_report

    early = preflight("labkit bench accel", record=record, quick=quick)
    if early is not None:
        return early
    results = measure(quick=quick)
    return record_and_report(
        "accel",
        REFERENCE_NAME,
        results,
        as_json=as_json,
        record=record and results.device != "cpu",
    )
