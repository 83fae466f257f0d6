"""Samples per second against batch size, for training and for inference.

"Choose a sensible batch size" made measurable. One sample leaves most of a
device idle: every step pays fixed costs (Python, the framework's dispatch,
kernel launches, the optimizer's loop over parameters) whatever the batch,
and a small matrix product cannot keep all the cores or SMs busy. Doubling
the batch then nearly doubles the samples per second, until the device is
saturated and the curve flattens. Past that *knee* a bigger batch buys
almost nothing in throughput but costs memory, and latency: an inference
request waits for its whole batch. :func:`batch_sweep` measures the curve,
:func:`latency_budget_batch` reads the trade-off off it.

Each point is one training step (forward, loss, backward, optimizer step) or
one forward pass under ``torch.inference_mode``, timed by
:func:`labkit.timing.bench.bench` (synchronised, warmed up, median and IQR).
Batches whose training step would not fit in :mod:`labkit.machine.memory`'s budget
are skipped with a note; the memory per sample is measured, not guessed
(:func:`labkit.batching.memory_fit.fit_memory`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from labkit.batching.step import (
    MODELS,
    OPTIMIZERS,
    check_shape,
    make_batch,
    make_optimizer,
    resolve_model,
    train_step,
)
from labkit.core.results import JsonRecord
from labkit.core.units import format_duration, format_samples_per_s
from labkit.core.validate import check_choice, check_sizes
from labkit.machine.memory import DEFAULT_FRACTION
from labkit.timing.bench import Timing

#: Batch sizes swept by default: powers of two, further on a GPU (it saturates later).
CPU_BATCHES: tuple[int, ...] = tuple(2**i for i in range(12))  # 1 … 2048
GPU_BATCHES: tuple[int, ...] = tuple(2**i for i in range(15))  # 1 … 16384

#: The modes a sweep can time.
MODES: tuple[str, ...] = ("train", "inference")

#: A batch reaching this share of the peak samples/s is "on the plateau".
KNEE_FRACTION = 0.9

# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class BatchPoint(JsonRecord):
    """One batch size in one mode: the median time per step and what it means per sample.

    ``median_ms`` is the latency of one batch (a training step, or one
    forward pass); ``samples_per_s`` is ``batch_size / median``.
    """

    mode: str
    batch_size: int
    median_ms: float
    iqr_ms: float
    samples_per_s: float
    timing: Timing = field(repr=False)

    @property
    def latency_ms(self) -> float:
        """Time until the whole batch is done: what every sample in it waits for."""
        return self.median_ms

    @property
    def ms_per_sample(self) -> float:
        return self.median_ms / self.batch_size


@dataclass(frozen=True)
class BatchCurve(JsonRecord):
    """Every batch size of one mode, smallest first, and where the curve flattens."""

    json_extra = ("peak_samples_per_s", "knee_batch", "gain")

    mode: str
    points: tuple[BatchPoint, ...]

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        return tuple(p.batch_size for p in self.points)

    @property
    def peak(self) -> BatchPoint:
        return max(self.points, key=lambda p: p.samples_per_s)

    @property
    def peak_samples_per_s(self) -> float:
        return self.peak.samples_per_s

    @property
    def knee_batch(self) -> int:
        """The smallest batch reaching 90% of the peak samples/s: where the curve flattens."""
        target = KNEE_FRACTION * self.peak_samples_per_s
        return next(p.batch_size for p in self.points if p.samples_per_s >= target)

    @property
    def smallest(self) -> BatchPoint:
        return self.points[0]

    @property
    def gain(self) -> float:
        """Peak samples/s over the smallest batch's (batch 1 by default)."""
        return self.peak_samples_per_s / self.smallest.samples_per_s

    def at(self, batch_size: int) -> BatchPoint | None:
        return next((p for p in self.points if p.batch_size == batch_size), None)

    @property
    def flattened(self) -> bool:
        """Whether the curve reached its plateau before the largest batch measured.

        When the knee is the largest batch, the curve was still rising: the
        device is not saturated yet, and the true knee lies further right.
        """
        return self.knee_batch < self.points[-1].batch_size

    def describe(self) -> str:
        from labkit.accel.common import times

        head = (
            f"{self.mode}: peak {format_samples_per_s(self.peak_samples_per_s)} at batch "
            f"{self.peak.batch_size}, {times(self.gain)} batch {self.smallest.batch_size}; "
        )
        if self.flattened:
            return head + f"knee (≥ {KNEE_FRACTION:.0%} of peak) at batch {self.knee_batch}"
        return head + f"no plateau yet: still rising at batch {self.points[-1].batch_size}"


@dataclass(frozen=True)
class BatchSweep(JsonRecord):
    """Samples/s by batch size of one model on one device, per mode (train, inference)."""

    model: str
    device: str
    input_shape: tuple[int, ...]
    optimizer: str
    curves: tuple[BatchCurve, ...]
    dropped: tuple[int, ...] = ()
    memory_note: str = ""
    threads: int | None = None
    #: The batch that ran out of GPU memory and ended a curve early (None if none did);
    #: ``memory_note`` then says so and names the largest batch that fit.
    out_of_memory_batch: int | None = None

    def curve(self, mode: str = "train") -> BatchCurve:
        """The curve of ``mode``, one of the modes measured."""
        check_choice("mode", mode, [c.mode for c in self.curves])
        return next(c for c in self.curves if c.mode == mode)

    @property
    def train(self) -> BatchCurve | None:
        return next((c for c in self.curves if c.mode == "train"), None)

    @property
    def inference(self) -> BatchCurve | None:
        return next((c for c in self.curves if c.mode == "inference"), None)

    def knee_batch(self, mode: str = "train") -> int:
        return self.curve(mode).knee_batch

    def peak_samples_per_s(self, mode: str = "train") -> float:
        return self.curve(mode).peak_samples_per_s

    def gain(self, mode: str = "train") -> float:
        return self.curve(mode).gain

    def _where(self) -> str:
        threads = (
            f", {self.threads} torch threads"
            if self.threads is not None and self.device == "cpu"
            else ""
        )
        return f"{self.model} on {self.device}{threads}"

    def summary(self) -> list[str]:
        lines = [f"{self.device}: {self._where()}, float32, {self.optimizer} training steps"]
        for c in self.curves:
            lines.append(f"{self.device}: {c.describe()}")
            first = c.smallest
            lines.append(
                f"{self.device}: {c.mode}: batch {first.batch_size} takes "
                f"{format_duration(first.median_ms)}, batch {c.peak.batch_size} "
                f"{format_duration(c.peak.median_ms)} per step"
            )
        if self.memory_note:
            lines.append(f"{self.device}: {self.memory_note}")
        return lines

    def to_dict(self) -> dict[str, Any]:
        """Every field, with the curves keyed by mode (``{"train": {...}, "inference": {...}}``)."""
        data = super().to_dict()
        data["curves"] = {curve.pop("mode"): curve for curve in data["curves"]}
        return data

    def __str__(self) -> str:
        sizes = sorted({b for c in self.curves for b in c.batch_sizes})
        head = ["batch"]
        for c in self.curves:
            head += [
                f"{c.mode}: per step" if c.mode == "train" else f"{c.mode}: per batch",
                "samples/s",
            ]
        rows = [head]
        for b in sizes:
            row = [str(b)]
            for c in self.curves:
                p = c.at(b)
                row += (
                    ["-", "-"]
                    if p is None
                    else [format_duration(p.median_ms), format_samples_per_s(p.samples_per_s)]
                )
            rows.append(row)
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines = [f"Samples/s by batch size: {self._where()}, float32 (median of each step)"]
        for r in rows:
            lines.append("  " + "  ".join(cell.rjust(w) for cell, w in zip(r, widths, strict=True)))
        lines += [f"  {c.describe()}" for c in self.curves]
        if self.memory_note:
            lines.append(f"  {self.memory_note}")
        return "\n".join(lines)


# --------------------------------------------------------------------------- the sweep


def _check_modes(modes: str | Sequence[str]) -> tuple[str, ...]:
    checked = (modes,) if isinstance(modes, str) else tuple(modes)
    if not checked or len(set(checked)) != len(checked):
        raise ValueError(
            f"modes must be a non-empty selection of {', '.join(map(repr, MODES))}, got {modes!r}"
        )
    return tuple(check_choice("modes", m, MODES) for m in checked)


def batch_sweep(
    model: Any = "mlp",
    *,
    batch_sizes: Sequence[int] | None = None,
    input_shape: Sequence[int] | None = None,
    modes: Sequence[str] = MODES,
    device: Any = None,
    optimizer: str = "sgd",
    warmup_ms: float = 10.0,
    rep_ms: float = 60.0,
    min_reps: int = 5,
    memory_fraction: float = DEFAULT_FRACTION,
    seed: int = 0,
) -> BatchSweep:
    """Time a training step and an inference pass of ``model`` at each batch size.

    Args:
        model: "mlp" (:func:`mlp`, 256 features per sample), "cnn"
            (:class:`labkit.models.cnn.CNN`, 3×32×32 images) or any
            ``torch.nn.Module`` (then ``input_shape`` is required; it is
            copied, so its weights are left untouched).
        batch_sizes: default powers of two, 1–2048 on a CPU, 1–16384 on a GPU.
        input_shape: one sample's shape, without the batch dimension.
        modes: "train" (forward, loss, backward, ``optimizer`` step) and/or
            "inference" (forward under ``torch.inference_mode``, eval mode).
        optimizer: "sgd" or "adam". Adam's step walks every parameter
            several times whatever the batch: another fixed cost per step,
            which moves the training knee to larger batches.
        device: None picks the best device (:func:`labkit.pick_device`).
        warmup_ms, rep_ms, min_reps: :func:`labkit.timing.bench.bench`'s budgets per point.
        memory_fraction: share of the free memory a training step may use;
            batch sizes over it are skipped (listed in ``dropped``).

    The defaults time 24 points in a few seconds on two CPU cores.
    """
    from labkit.core.optional import import_optional
    from labkit.core.validate import (
        check_ms,
        check_positive_int,
        check_real,
        check_seed,
        check_torch_device,
    )
    from labkit.machine.report import resolve_torch_device

    # Every argument is checked before torch is imported or anything is measured.
    if isinstance(model, str):
        check_choice("model", model, tuple(MODELS))
    if input_shape is not None:
        check_shape(input_shape)
    optimizer = check_choice("optimizer", optimizer, OPTIMIZERS)
    modes = _check_modes(modes)
    fraction = check_real("memory_fraction", memory_fraction, low=0, high=1, low_open=True)
    sizes = None if batch_sizes is None else check_sizes(batch_sizes, "batch_sizes")
    check_ms("warmup_ms", warmup_ms, allow_zero=True)
    check_ms("rep_ms", rep_ms)
    min_reps = check_positive_int("min_reps", min_reps)
    seed = check_seed("seed", seed)
    check_torch_device(device)

    torch = import_optional("torch", "labkit.batching.sweep.batch_sweep")
    from labkit.batching.memory_fit import fit_memory
    from labkit.machine.memory import (
        MemoryBudgetError,
        budget_bytes,
        format_bytes,
        is_out_of_memory,
        out_of_memory_message,
        release_memory,
    )
    from labkit.timing.bench import bench

    model_fn, description, shape = resolve_model(model, input_shape)
    dev = resolve_torch_device(device)
    if sizes is None:
        sizes = GPU_BATCHES if dev.type == "cuda" else CPU_BATCHES

    # Memory: measure training steps from batch 1 up towards the sweep's largest batch (never
    # past half the budget), fit the line, keep the batches whose step fits the budget.
    memory_device = str(dev) if dev.type == "cuda" else "cpu"
    budget = budget_bytes(device=memory_device, fraction=fraction)
    if budget < 1:  # nothing free at all: say so, rather than measure a step
        raise MemoryBudgetError(
            f"batch_sweep: the budget is {format_bytes(budget)} ({fraction:.0%} of the free "
            f"{memory_device} memory), so no training step fits; close other programs (other "
            "notebooks and kernels, browsers) to free memory"
        )
    fit = fit_memory(
        model_fn,
        shape,
        probe_batches=(1, 2),
        device=str(dev),
        optimizer=optimizer,
        budget_bytes=budget,
        target_batch=max(sizes),
    )
    kept = [b for b in sizes if fit.predict_bytes(b) <= budget]
    dropped = tuple(b for b in sizes if b not in kept)
    note = ""
    if dropped:
        note = (
            f"skipped batch {dropped[0]} and up: a training step would need about "
            f"{format_bytes(int(fit.predict_bytes(dropped[0])))}, over the "
            f"{format_bytes(budget)} budget ({fraction:.0%} of the free memory)"
        )
    if not kept:
        raise MemoryBudgetError(
            f"no batch in batch_sizes fits the memory budget here: {note}. Pass smaller "
            "batch_sizes, a smaller model or input_shape, or close other programs"
        )
    oom_note, oom_batch = "", None

    torch.manual_seed(seed)
    net = model_fn().to(dev)
    opt = make_optimizer(net, optimizer)
    budget_kw: dict[str, Any] = {
        "warmup_ms": float(warmup_ms),
        "rep_ms": float(rep_ms),
        "min_reps": min_reps,
    }
    curves = []
    for mode in modes:
        points: list[BatchPoint] = []
        for b in kept:
            timing = None
            try:
                x, y = make_batch(net, shape, b, dev, seed=seed)
                if mode == "train":
                    net.train()
                    timing = bench(
                        train_step,
                        net,
                        opt,
                        x,
                        y,
                        device=str(dev),
                        label=f"train, batch {b}",
                        warn=False,
                        **budget_kw,
                    )
                else:
                    net.eval()

                    def infer(x: Any = x) -> None:
                        with torch.inference_mode():
                            net(x)

                    timing = bench(
                        infer,
                        device=str(dev),
                        label=f"inference, batch {b}",
                        warn=False,
                        **budget_kw,
                    )
            except Exception as exc:  # out of memory: this curve ends at the batches that fit
                if not is_out_of_memory(exc):
                    raise
            x = y = None
            if timing is None:
                oom_batch = b if oom_batch is None else min(oom_batch, b)
                largest = f"batch {points[-1].batch_size}" if points else None
                line = out_of_memory_message(f"batch_sweep ({mode})", f"batch {b}", largest, dev)
                oom_note = f"{oom_note}; {line}" if oom_note else line
                release_memory(dev)
                if not points:
                    raise MemoryBudgetError(line)
                print(line)
                break
            points.append(
                BatchPoint(
                    mode,
                    b,
                    timing.median_ms,
                    timing.iqr_ms,
                    b / (timing.median_ms / 1e3) if timing.median_ms > 0 else math.inf,
                    timing,
                )
            )
        curves.append(BatchCurve(mode, tuple(points)))
    return BatchSweep(
        model=description,
        device=str(dev),
        input_shape=shape,
        optimizer=optimizer,
        curves=tuple(curves),
        dropped=dropped,
        memory_note="; ".join(n for n in (note, oom_note) if n),
        threads=torch.get_num_threads() if dev.type == "cpu" else None,
        out_of_memory_batch=oom_batch,
    )


def latency_budget_batch(
    result: BatchSweep, max_latency_ms: float, mode: str = "inference"
) -> int | None:
    """Of the batches whose median latency stays within ``max_latency_ms``, the one with the
    most samples/s (None if none fits; the smaller batch on a tie).

    The other side of the trade-off: throughput wants a big batch, but a
    request served in a batch waits for the whole batch. A service with a
    latency budget takes the best batch that meets it, not the peak: the
    largest one that fits while samples/s still rises with the batch, a
    smaller one past the peak, where a larger batch only adds latency.
    The latency here is the batch's compute time only: a server that waits to
    gather a batch (Triton's ``max_queue_delay_microseconds``) adds that wait,
    and the queueing behind earlier batches, to a request's latency.
    """
    from labkit.core.validate import check_ms

    max_latency_ms = check_ms("max_latency_ms", max_latency_ms)
    fitting = [p for p in result.curve(mode).points if p.latency_ms <= max_latency_ms]
    if not fitting:
        return None
    # samples/s from the same median latency the budget is checked against
    return max(fitting, key=lambda p: (p.batch_size / p.latency_ms, -p.batch_size)).batch_size


# --------------------------------------------------------------------------- plot
