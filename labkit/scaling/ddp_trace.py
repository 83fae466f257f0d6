"""Where DDP's overhead goes: a torch.profiler trace of DDP steps, split into its parts.

The difference between a DDP step and the same step under ``no_sync()`` is
not "the communication DDP did not hide". It is everything DDP adds
(review finding C31): the reducer's work on the training thread (the
``c10d::allreduce_`` launches, ``reducer::mul_out`` dividing by the world
size, ``copy_bucket_to_grad`` copying the reduced buckets back), the
contention of the communication threads with the compute (gloo's threads
share the CPU cores with backward), and whatever of the all-reduces was
still running when backward had finished, which the training thread waits
for. :func:`labkit.scaling.launch.run_ddp` with ``trace_steps`` profiles DDP
steps and ``no_sync`` steps, interleaved (:mod:`labkit.scaling.train_ddp`
labels them); :func:`ddp_breakdown` reads rank 0's Chrome trace back and
measures, per step:

- the backward pass: from the first to the last ``autograd::engine::evaluate_function``
  on the training thread (on a GPU: the autograd engine's device threads);
- the all-reduces: gloo's ``gloo:all_reduce`` ranges on its own threads, or on a GPU
  the NCCL kernels on the device;
- how much of the all-reduce time fell inside the backward pass (hidden), and how
  long the last one ran on after it (exposed: the training thread waits for it);
- the reducer's own ranges (on any CPU thread).

The residual is what the overhead leaves once the two measured parts are
taken off; it includes the copies of the reduced buckets back into
``.grad`` and the optimizer, and it can be negative, since the parts are
medians of different quantities. :func:`ddp_breakdown` has run on CPUs
(gloo) only: on a GPU it reads the NCCL kernels from the device rows, and
has not been tested there.

A bucket's all-reduce can start only when all of its gradients are ready, so
gradients that fit in one bucket cannot overlap anything: its one all-reduce
starts when backward ends. DDP's default caps buckets at 25 MiB but the first
one at 1 MiB (``dist._DEFAULT_FIRST_BUCKET_BYTES``, torch 2.13's
``nn/parallel/distributed.py``: "First bucket optimization"), so that one
all-reduce starts early; an explicit ``bucket_cap_mb`` applies to every
bucket, the first too. A cap is where a bucket is closed: the reducer adds
gradients to a bucket until it reaches the cap, so a bucket can hold a
little more (with ``bucket_cap_mb=1`` notebook 10's MLP gets buckets of
about 1.0–1.03 MiB and a last, smaller one).
The profiler adds its own overhead to every range, so the parts are for
comparison within the trace, not for the timings of unprofiled steps.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from labkit.core.results import JsonRecord
from labkit.core.units import format_duration
from labkit.profiling.common import union_ms

#: The ranges :mod:`labkit.scaling.train_ddp` puts around each profiled step.
DDP_STEP = "labkit:ddp_step"
NO_SYNC_STEP = "labkit:no_sync_step"
_BACKWARD = "autograd::engine::evaluate_function"
_REDUCER = ("reducer::", "c10d::allreduce_")
_OPTIMIZER = "Optimizer.step"


@dataclass(frozen=True)
class ProfiledStep(JsonRecord):
    """One profiled step, times in ms from the step's start (None: not in this step)."""

    kind: str  # "ddp" or "no_sync"
    step_ms: float
    backward_start_ms: float
    backward_end_ms: float
    optimizer_start_ms: float | None
    allreduces_ms: tuple[tuple[float, float], ...]  # (start, end) of each all-reduce
    reducer_ms: float  # the reducer's ranges (any CPU thread) that start during backward, summed
    reducer_after_ms: float = 0.0  # those that start after it (copy_bucket_to_grad), summed

    @property
    def backward_ms(self) -> float:
        return self.backward_end_ms - self.backward_start_ms

    @property
    def allreduce_ms(self) -> float:
        """Time with at least one all-reduce running (their union)."""
        return union_ms(self.allreduces_ms)

    @property
    def hidden_ms(self) -> float:
        """All-reduce time inside the backward pass."""
        clipped = [
            (max(a, self.backward_start_ms), min(b, self.backward_end_ms))
            for a, b in self.allreduces_ms
        ]
        return union_ms([(a, b) for a, b in clipped if b > a])

    @property
    def exposed_ms(self) -> float:
        """How long the last all-reduce ran on after backward had finished."""
        if not self.allreduces_ms:
            return 0.0
        return max(0.0, max(b for _, b in self.allreduces_ms) - self.backward_end_ms)

    @property
    def first_allreduce_at(self) -> float | None:
        """Where in the backward pass the first all-reduce started (0 = its start, 1 = its end)."""
        if not self.allreduces_ms or self.backward_ms <= 0:
            return None
        first = min(a for a, _ in self.allreduces_ms)
        return (first - self.backward_start_ms) / self.backward_ms


@dataclass(frozen=True)
class DdpBreakdown(JsonRecord):
    """DDP's overhead per step, split with a profile: medians over the profiled steps."""

    json_extra = (
        "overhead_ms",
        "backward_extra_ms",
        "exposed_ms",
        "reducer_ms",
        "reducer_after_ms",
    )

    label: str
    bucket_cap_mb: float | None  # None: DDP's default
    gradient_bytes: int
    steps: tuple[ProfiledStep, ...]
    trace_path: str

    @property
    def buckets(self) -> str:
        """How the buckets were set: DDP's default, or ``bucket_cap_mb``."""
        if self.bucket_cap_mb is None:
            return "DDP's default buckets (closed at 25 MiB; the first at 1 MiB)"
        return f"bucket_cap_mb={self.bucket_cap_mb:g} (every bucket closed at it, the first too)"

    def _median(self, kind: str, attr: str) -> float:
        values = [getattr(s, attr) for s in self.steps if s.kind == kind]
        return statistics.median(values) if values else 0.0

    @property
    def allreduces_per_step(self) -> int:
        counts = [len(s.allreduces_ms) for s in self.steps if s.kind == "ddp"]
        return int(statistics.median(counts)) if counts else 0

    @property
    def overhead_ms(self) -> float:
        """Median profiled DDP step minus median profiled no_sync step."""
        return self._median("ddp", "step_ms") - self._median("no_sync", "step_ms")

    @property
    def backward_extra_ms(self) -> float:
        """How much longer backward took with DDP: its hooks, and contention with the threads."""
        return self._median("ddp", "backward_ms") - self._median("no_sync", "backward_ms")

    @property
    def exposed_ms(self) -> float:
        return self._median("ddp", "exposed_ms")

    @property
    def hidden_ms(self) -> float:
        return self._median("ddp", "hidden_ms")

    @property
    def allreduce_ms(self) -> float:
        return self._median("ddp", "allreduce_ms")

    @property
    def reducer_ms(self) -> float:
        """The reducer's ranges that start during backward, per step (median)."""
        return self._median("ddp", "reducer_ms")

    @property
    def reducer_after_ms(self) -> float:
        """The reducer's ranges that start after backward (the copies back into .grad)."""
        return self._median("ddp", "reducer_after_ms")

    @property
    def first_allreduce_at(self) -> float | None:
        values = [s.first_allreduce_at for s in self.steps if s.kind == "ddp"]
        known = [v for v in values if v is not None]
        return statistics.median(known) if known else None

    def __str__(self) -> str:
        n = sum(1 for s in self.steps if s.kind == "ddp")
        at = self.first_allreduce_at
        where = (
            "no all-reduce found"
            if at is None
            else f"the first started at {at:.0%} of the backward pass"
            if at < 1
            else "the first started after the backward pass had ended"
        )
        rest = self.overhead_ms - self.backward_extra_ms - self.exposed_ms
        lines = [
            f"DDP step profiled ({self.label}): {self.buckets}, "
            f"{self.gradient_bytes / 2**20:.2f} MiB of gradients; medians of {n} profiled steps",
            f"  all-reduces per step: {self.allreduces_per_step} (one per bucket); {where}",
            f"  all-reduce running: {format_duration(self.allreduce_ms)} per step; inside "
            f"backward: {format_duration(self.hidden_ms)}; from backward's end to the last "
            f"one's end: {format_duration(self.exposed_ms)} (three medians: need not add up)",
            f"  DDP overhead (profiled DDP step - profiled no_sync step): "
            f"{format_duration(self.overhead_ms)}, of which",
            f"    backward took longer (DDP's hooks, threads on the same cores): "
            f"{_signed(self.backward_extra_ms)}",
            f"    waiting for the all-reduce after backward (exposed): "
            f"{format_duration(self.exposed_ms)}",
            f"    residual (the rest of the overhead: bucket copies back, optimizer, noise; "
            f"can be negative): {_signed(rest)}",
            f"  reducer ranges per step: {format_duration(self.reducer_ms)} during backward "
            f"(gradients into buckets, all-reduce launches), {format_duration(self.reducer_after_ms)} "
            "after it (reduced buckets copied back into .grad)",
            f"  trace: {self.trace_path} (open it in https://ui.perfetto.dev)",
        ]
        return "\n".join(lines)


def _signed(ms: float) -> str:
    return ("-" if ms < 0 else "+") + format_duration(abs(ms))


def _is_allreduce(event: dict[str, Any]) -> bool:
    name = str(event.get("name", ""))
    low = name.lower()
    if low.startswith(("gloo:all_reduce", "gloo:allreduce")):
        return True
    return event.get("cat") == "kernel" and "nccl" in low and "allreduce" in low.replace("_", "")


def profiled_steps(events: list[dict[str, Any]]) -> list[ProfiledStep]:
    """The labelled steps of a train_ddp trace, in order, each measured from its own start."""
    marks = sorted(
        (e for e in events if e.get("name") in (DDP_STEP, NO_SYNC_STEP)), key=lambda e: e["ts"]
    )
    steps = []
    for mark in marks:
        start = float(mark["ts"])
        end = start + float(mark.get("dur", 0))
        tid = mark.get("tid")
        inside = [e for e in events if start <= float(e["ts"]) <= end and e is not mark]
        own = [e for e in inside if e.get("tid") == tid]
        # Any thread: on a CPU backward runs on the calling thread, with CUDA on the autograd
        # engine's device threads ("when accelerator devices are in use, the backward pass
        # runs on device-specific worker threads", torch.autograd.set_multithreading_enabled).
        backward = [e for e in inside if str(e.get("name", "")).startswith(_BACKWARD)]
        if not backward:
            continue
        b0 = min(float(e["ts"]) for e in backward)
        b1 = max(float(e["ts"]) + float(e.get("dur", 0)) for e in backward)
        optimizer = [float(e["ts"]) for e in own if str(e.get("name", "")).startswith(_OPTIMIZER)]
        reduces = [
            (float(e["ts"]) - start, float(e["ts"]) + float(e.get("dur", 0)) - start)
            for e in inside
            if _is_allreduce(e)
        ]
        reducer_events = [
            e
            for e in inside
            if e.get("cat") != "kernel" and any(k in str(e.get("name", "")) for k in _REDUCER)
        ]
        # split at backward's end: mul_out and the all-reduce launches run during it, the
        # copies of the reduced buckets back into .grad (copy_bucket_to_grad) after it
        reducer = sum(float(e.get("dur", 0)) for e in reducer_events if float(e["ts"]) < b1)
        reducer_after = sum(float(e.get("dur", 0)) for e in reducer_events if float(e["ts"]) >= b1)
        steps.append(
            ProfiledStep(
                kind="ddp" if mark["name"] == DDP_STEP else "no_sync",
                step_ms=(end - start) / 1e3,
                backward_start_ms=(b0 - start) / 1e3,
                backward_end_ms=(b1 - start) / 1e3,
                optimizer_start_ms=(min(optimizer) - start) / 1e3 if optimizer else None,
                allreduces_ms=tuple(sorted((a / 1e3, b / 1e3) for a, b in reduces)),
                reducer_ms=reducer / 1e3,
                reducer_after_ms=reducer_after / 1e3,
            )
        )
    return steps


def ddp_breakdown(run: Any, label: str | None = None) -> DdpBreakdown:
    """Split the DDP overhead of ``run`` (a :class:`DdpRun` made with ``trace_steps`` > 0)."""
    from labkit.profiling.trace import complete_events, read_trace

    path = getattr(run, "trace_path", None)
    if not path:
        raise ValueError(
            "run has no trace: make it with labkit.scaling.run_ddp(..., trace_steps=5)"
        )
    steps = profiled_steps(complete_events(read_trace(path)))
    if not any(s.kind == "ddp" for s in steps) or not any(s.kind == "no_sync" for s in steps):
        raise ValueError(
            f"the trace {path} holds no labelled DDP and no_sync steps with a backward pass"
        )
    return DdpBreakdown(
        label=label or f"width {run.width}, {run.nproc} processes, {run.backend}",
        bucket_cap_mb=None if run.bucket_cap_mb is None else float(run.bucket_cap_mb),
        gradient_bytes=int(run.gradient_bytes),
        steps=tuple(steps),
        trace_path=str(path),
    )
