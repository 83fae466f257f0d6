"""Every lever of notebooks 04 and 05 on one model's training step, before and after.

Notebooks 04 and 05 measure each lever alone: the sync a ``.item()`` every
step costs, the memory layout, ``torch.compile``, autocast. A learner who
wants to speed up a real training loop applies them together, and they
interact (a compiled graph fuses the casts autocast adds; a layout that suits
one convolution algorithm may not suit another). :func:`apply_levers` times
the course CNN's training step (forward, cross-entropy, backward, an SGD
step) with the levers added one at a time, in :data:`LEVERS` order, so each
configuration differs from the one before it in exactly one lever, and the
last has them all. All configurations are timed round-robin
(:func:`labkit.interleave`) with freed memory kept in the process
(:func:`labkit.machine.allocator.keep_freed_memory`), so that no
configuration pays page faults the others do not; the faults per call are
reported anyway.

The precision lever is bfloat16 autocast on every device: it needs no loss
scaling, since bfloat16 has float32's exponent range (float16 with
``torch.amp.GradScaler`` is notebook 04's). ``torch.compile``'s first call
compiles; it is reported apart and kept out of the step times.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from labkit.core.optional import import_optional
from labkit.core.units import align_columns, format_duration, format_speedup
from labkit.core.validate import check_int, check_ms
from labkit.timing.interleave import BAND, Interleaved, band_verdict

#: The levers, in the order they are added; each configuration adds the next one.
LEVERS: tuple[str, ...] = (
    "no .item() per step",
    "channels_last",
    "torch.compile",
    "bfloat16 autocast",
)
BEFORE = "before: float32, NCHW, eager, .item() every step"
PURPOSE = "labkit.models.levers.apply_levers"
#: (batch, image size) by where it runs: the GPU cell, ``labkit bench levers`` and its
#: recording use the "gpu" row, a CPU the "cpu" row, ``--quick`` the "quick" row (BM8).
SIZES: dict[str, tuple[int, int]] = {"gpu": (64, 224), "cpu": (16, 64), "quick": (2, 16)}
_QUICK = "(--quick: toy sizes and tiny time budgets, no torch.compile; the numbers mean little)"


def config_labels(levers: Sequence[str] = LEVERS) -> tuple[str, ...]:
    """The configurations' labels: before, then "+ lever" for each lever added."""
    return (BEFORE, *(f"+ {lever}" for lever in levers))


def _chosen(levers: Sequence[str] | None) -> tuple[str, ...]:
    if levers is None:
        return LEVERS
    unknown = [name for name in levers if name not in LEVERS]
    if unknown or not levers:
        raise ValueError(
            f"levers must name at least one of {', '.join(map(repr, LEVERS))}; got {list(levers)!r}"
        )
    return tuple(name for name in LEVERS if name in levers)


@dataclass(frozen=True)
class LeverStep:
    """One lever added: the configuration's step time and its speed against the one before.

    ``speedup`` is the median over rounds of (previous configuration's run
    median / this one's), with ``low`` and ``high`` the smallest and largest
    round's ratio: "× as fast", above 1 when the lever helped.
    """

    label: str
    median_ms: float
    speedup: float
    low: float
    high: float
    minor_faults_per_call: float | None

    def verdict(self) -> str:
        span = f"{format_speedup(self.low)} to {format_speedup(self.high)} per round"
        return f"{self.label}: {band_verdict(self.low, self.high, BAND)} ({span})"


@dataclass(frozen=True)
class LeversResult:
    """:func:`apply_levers`' measurement: the interleaved runs and what each lever did."""

    device: str
    batch: int
    image_size: int
    steps_per_call: int
    runs: Interleaved
    first_call_s: dict[str, float]
    first_loss: dict[str, float]
    quick: bool = False
    #: max |logits - before's logits| / max |before's logits|, same weights and batch, before training
    output_difference: dict[str, float] | None = None

    def steps(self) -> list[LeverStep]:
        """Each configuration after the first against the one before it, round by round."""
        out = []
        variants = self.runs.variants
        for before, after in zip(variants, variants[1:], strict=False):
            ratios = [
                (b.median_ms / a.median_ms) if a.median_ms > 0 else float("inf")
                for b, a in zip(before.runs, after.runs, strict=True)
            ]
            faults = after.runs[0].minor_faults_per_call
            out.append(
                LeverStep(
                    label=after.label,
                    median_ms=after.median_ms,
                    speedup=statistics.median(ratios),
                    low=min(ratios),
                    high=max(ratios),
                    minor_faults_per_call=faults,
                )
            )
        return out

    @property
    def fastest(self) -> str:
        """The configuration with the shortest median step."""
        return min(self.runs.variants, key=lambda v: v.median_ms).label

    def verdicts(self) -> list[str]:
        """Each lever's effect, every lever against before, and the fastest configuration."""
        lines = [step.verdict() for step in self.steps()]
        last = self.runs.variants[-1]
        lines.append(
            f"every lever here against before: {format_speedup(last.ratio)} as fast "
            f"({format_speedup(last.ratio_low)} to {format_speedup(last.ratio_high)} per round)"
        )
        fastest = self.runs[self.fastest]
        if fastest.label == BEFORE:
            lines.append("the fastest configuration here is the one before any lever")
        elif fastest.label == last.label:
            lines.append("the fastest configuration here is the one with every lever")
        else:
            lines.append(
                f"the fastest configuration here: up to '{fastest.label}', "
                f"{format_speedup(fastest.ratio)} as fast as before "
                f"({format_speedup(fastest.ratio_low)} to {format_speedup(fastest.ratio_high)} "
                "per round)"
            )
        return lines

    def summary(self) -> list[str]:
        """The lines a CPU-only learner sees from a recording."""
        return [
            f"course CNN training step, batch {self.batch}, {self.image_size}×{self.image_size}, "
            f"on {self.device}:",
            *(
                f"  {v.label}: {format_duration(v.median_ms / self.steps_per_call)} per step"
                for v in self.runs.variants
            ),
            *self.verdicts(),
            *([_QUICK] if self.quick else []),
        ]

    def _difference(self, label: str) -> str:
        if self.output_difference is None:
            return "n/a"
        value = self.output_difference[label]
        return "identical" if value == 0 else f"{value:.1e}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "quick": self.quick,
            "batch": self.batch,
            "image_size": self.image_size,
            "steps_per_call": self.steps_per_call,
            "first_call_s": dict(self.first_call_s),
            "first_loss": dict(self.first_loss),
            "output_difference": dict(self.output_difference or {}),
            "configurations": [
                {"label": v.label, "median_ms_per_call": v.median_ms} for v in self.runs.variants
            ],
            "steps": [vars(step) for step in self.steps()],
            "verdicts": self.verdicts(),
        }

    def __str__(self) -> str:
        n = self.steps_per_call
        base = self.runs.baseline
        header = [
            "",
            "per step",
            "× as fast as the line above",
            "faults per call",
            "logits vs before",
        ]
        rows = [
            header,
            [BEFORE, format_duration(base.median_ms / n), "", _faults(base), "reference"],
        ]
        for step in self.steps():
            rows.append(
                [
                    step.label,
                    format_duration(step.median_ms / n),
                    f"{format_speedup(step.speedup)} ({format_speedup(step.low)} to "
                    f"{format_speedup(step.high)})",
                    _faults(self.runs[step.label]),
                    self._difference(step.label),
                ]
            )
        lines = align_columns(rows)
        compiled = ", ".join(
            f"{label.removeprefix('+ ')}: {value:.1f} s"
            for label, value in self.first_call_s.items()
        )
        first_calls = (
            [
                "first call of each compiled configuration (it compiles; not in the step times): "
                + compiled
            ]
            if compiled
            else []
        )
        return "\n".join(
            [
                f"course CNN training step (forward, cross-entropy, backward, SGD), batch "
                f"{self.batch}, {self.image_size}×{self.image_size} images, on {self.device}; "
                f"{n} steps per timed call, each line adds one lever to the line above",
                *lines,
                f"{self.runs.rounds} rounds, configurations in rotating order, freed memory kept "
                "in the process; the ratio's range is its smallest and largest round; logits: "
                "max |difference| / max |logits| against before's, same weights and batch",
                *first_calls,
                *self.verdicts(),
                *([_QUICK] if self.quick else []),
            ]
        )


def _faults(variant: Any) -> str:
    values = [t.minor_faults_per_call for t in variant.runs]
    known = [v for v in values if v is not None]
    return f"{max(known):,.0f}" if known else "n/a"


def _train_step(
    torch: Any, levers: set[str], batch: int, image_size: int, device: Any, steps: int
) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """One configuration (the levers that are on): a call of ``steps`` training steps that
    returns their mean loss, and its model's logits on the batch (float32, detached)."""
    from labkit.models.cnn import CNN

    fmt = torch.channels_last if "channels_last" in levers else torch.contiguous_format
    torch.manual_seed(0)
    model: Any = CNN()
    model = model.to(device=device, memory_format=fmt)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(batch, 3, image_size, image_size, generator=gen).to(device)
    x = x.contiguous(memory_format=fmt)
    y = torch.randint(0, 10, (batch,), generator=gen).to(device)
    forward = torch.compile(model) if "torch.compile" in levers else model
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    sync_each_step = "no .item() per step" not in levers
    amp = "bfloat16 autocast" in levers

    def precision() -> Any:
        if amp:
            return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def loss_of() -> Any:
        with precision():
            return torch.nn.functional.cross_entropy(forward(x), y)

    def logits() -> Any:
        with precision():  # with autograd on, as in training: a compiled model reuses this graph
            return forward(x).detach().float()

    def call() -> Any:
        running = torch.zeros((), device=device)
        for _ in range(steps):
            loss = loss_of()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            running = running + loss.detach()  # every configuration keeps the total on the device
            if sync_each_step:
                loss.item()  # the habit: read the loss back every step (a sync on a GPU)
        return running.item() / steps  # one sync at the end, in every configuration

    return call, logits


def apply_levers(
    device: Any = None,
    *,
    batch: int | None = None,
    image_size: int | None = None,
    steps: int = 10,
    rounds: int = 2,
    levers: Sequence[str] | None = None,
    rep_ms: float = 150.0,
    warmup_ms: float = 0.0,
    quick: bool = False,
) -> LeversResult:
    """Time the course CNN's training step with :data:`LEVERS` added one at a time.

    Args:
        device: a torch device or its name (default: the best one here).
        batch, image_size: the training batch (default: :data:`SIZES`' row for the
            device: 64 images of 224×224 on a GPU, 16 of 64×64 on a CPU, which keeps a
            CPU run to seconds).
        steps: training steps per timed call (the ``.item()`` habit costs per step).
        rounds: interleaved rounds (at least 2).
        levers: which of :data:`LEVERS` to add (default: all), always in that order.
        rep_ms, warmup_ms: :func:`labkit.bench`'s budgets per run; every call
            is at least one warm-up (the first call of a compiled configuration,
            which compiles, is made and timed before the rounds start).
        quick: toy sizes, 5 ms budgets and no ``torch.compile`` (its cold first
            call alone takes seconds): checks that the code runs; the numbers mean little.
    """
    from labkit.machine.allocator import keep_freed_memory
    from labkit.machine.memory import require_memory_fits
    from labkit.machine.report import resolve_torch_device
    from labkit.timing.interleave import interleave

    torch = import_optional("torch", PURPOSE)
    where = resolve_torch_device(device)
    default_batch, default_size = SIZES["quick" if quick else _kind(where)]
    batch = check_int("batch", default_batch if batch is None else batch, minimum=1)
    image_size = check_int(
        "image_size", default_size if image_size is None else image_size, minimum=4
    )
    steps = check_int("steps", steps, minimum=1)
    rounds = check_int("rounds", rounds, minimum=2)
    rep_ms = check_ms("rep_ms", 5.0 if quick else rep_ms)
    warmup_ms = check_ms("warmup_ms", warmup_ms, allow_zero=True)
    chosen = _chosen(levers)
    if quick:
        chosen = tuple(name for name in chosen if name != "torch.compile") or chosen
    # the input, the first layer's output and its gradient, per configuration
    require_memory_fits(
        4 * batch * image_size * image_size * (3 + 2 * 32),
        where,
        arrays=len(chosen) + 1,
        what=f"apply_levers(batch={batch}, image_size={image_size})",
    )
    from labkit.accel.compilers import fresh_inductor_cache

    calls: dict[str, Callable[[], Any]] = {}
    first_loss: dict[str, float] = {}
    first_call_s: dict[str, float] = {}
    difference: dict[str, float] = {}
    reference = None
    # An empty Inductor cache, so that a compiled configuration's first call is a cold compile
    # whatever earlier runs left on disk (notebook 04 times cold and warm apart).
    cache = fresh_inductor_cache() if "torch.compile" in chosen else contextlib.nullcontext()
    with keep_freed_memory(), cache:
        for config, label in enumerate(config_labels(chosen)):
            on = set(chosen[:config])
            calls[label], logits = _train_step(torch, on, batch, image_size, where, steps)
            start = time.perf_counter()
            out = logits()  # the same seeded weights and batch in every configuration
            first_loss[label] = calls[label]()
            if "torch.compile" in on:
                first_call_s[label] = time.perf_counter() - start
            if reference is None:
                reference = out
            scale = float(reference.abs().max())
            difference[label] = float((out - reference).abs().max()) / scale if scale else 0.0
        runs = interleave(
            calls,
            rounds=rounds,
            rep_ms=rep_ms,
            warmup_ms=warmup_ms,
            device=str(where),
            min_reps=3,
        )
    return LeversResult(
        device=str(where),
        batch=batch,
        image_size=image_size,
        steps_per_call=steps,
        runs=runs,
        first_call_s=first_call_s,
        first_loss=first_loss,
        quick=quick,
        output_difference=difference,
    )


def _kind(device: Any) -> str:
    """:data:`SIZES`' row for a torch device: "gpu" for CUDA (and ROCm), "cpu" otherwise."""
    return "gpu" if device.type == "cuda" else "cpu"
