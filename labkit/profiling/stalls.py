"""Sync points that stall a training loop: find them in a trace, and time what they cost.

A GPU runs work from a queue; the host only enqueues it. ``loss.item()``,
``float(t)``, ``if t:``, ``.cpu()`` and ``print(t)`` need a value *now*, so
the host blocks until the queue has drained, and the GPU then idles while the
host prepares the next step. In a trace, such a call is an ``aten::item`` (or
``aten::is_nonzero``) that wraps ``aten::_local_scalar_dense``; on CUDA that in
turn holds a ``cudaMemcpyAsync`` device-to-host copy and a
``cudaStreamSynchronize`` whose duration is the waiting.

:func:`find_sync_points` scans a Chrome trace for these calls and says in
which labelled phase each happened; :func:`time_sync_stall` times the two
loops of :func:`labkit.profiling.profile_training` (``.item()`` every step vs
one read after the loop) with :func:`labkit.bench`. On a CPU there is no queue:
the value is ready when ``.item()`` runs, so the calls are found but cost
(almost) nothing, and both functions say so.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from labkit.core.results import JsonRecord
from labkit.core.units import format_duration
from labkit.core.validate import (
    check_int,
    check_ms,
    check_positive_int,
    check_seed,
    check_torch_device,
)
from labkit.machine.report import resolve_torch_device
from labkit.profiling.torch_profile import (
    PURPOSE,
    Trainer,
    phase_at,
    phase_intervals,
    require_step_fits,
)
from labkit.profiling.torch_results import TorchProfile
from labkit.profiling.trace import complete_events, read_trace
from labkit.timing.bench import Timing

#: Host-side calls that wait for the device, as they appear in a torch trace.
SYNC_OPS: dict[str, str] = {
    "aten::item": "reads one value back (loss.item(), float(t))",
    "aten::is_nonzero": "turns a tensor into a bool (if t:, while t:)",
    "aten::_local_scalar_dense": "copies one value from the device to the host",
    "aten::nonzero": "its output size depends on the data, so the host must wait for it",
    "cudaStreamSynchronize": "waits until a stream's queue is empty",
    "cudaDeviceSynchronize": "waits until every queue is empty (torch.cuda.synchronize())",
    "cudaEventSynchronize": "waits for an event (event.synchronize())",
}

#: Trace categories in which the host-side calls above appear.
_HOST_CATEGORIES = ("cpu_op", "cuda_runtime", "cuda_driver")

OUTSIDE = "(outside the labelled phases)"


@dataclass(frozen=True)
class SyncPoint(JsonRecord):
    """One kind of sync call in one phase: how often, and the host time spent in it."""

    name: str
    phase: str
    calls: int
    host_ms: float
    steps: int

    @property
    def calls_per_step(self) -> float:
        return self.calls / self.steps if self.steps else float(self.calls)


@dataclass(frozen=True)
class SyncReport(JsonRecord):
    """The sync points of one trace. Falsy when there are none; iterate for the rows.

    Only the outermost call of each nest is counted: an ``aten::item`` that
    calls ``aten::_local_scalar_dense``, which calls ``cudaStreamSynchronize``,
    is one sync point named ``aten::item``, whose ``host_ms`` includes the
    waiting. ``device_to_host_copies`` counts the "Memcpy DtoH" events on the
    device timeline (0 on a CPU run, which has none).
    """

    trace_path: str
    steps: int
    on_gpu: bool
    points: tuple[SyncPoint, ...]
    device_to_host_copies: int = 0
    device_to_host_ms: float = 0.0

    json_extra = ("calls", "host_ms")

    def __len__(self) -> int:
        return len(self.points)

    def __iter__(self) -> Any:
        return iter(self.points)

    @property
    def calls(self) -> int:
        return sum(p.calls for p in self.points)

    @property
    def host_ms(self) -> float:
        return sum(p.host_ms for p in self.points)

    def __str__(self) -> str:
        where = f"{self.steps} profiled steps" if self.steps else "the trace"
        if not self.points:
            return (
                f"No sync points in {where}: nothing read a device value back to the host "
                "(no .item(), .cpu(), print(tensor) or `if tensor:`), so the host never had "
                "to wait for the device."
            )
        lines = [f"Sync points in {where}:"]
        for p in self.points:
            per_step = f", {p.calls_per_step:g} per step" if self.steps else ""
            lines.append(
                f"  {p.name} in {p.phase}: {p.calls} calls{per_step}, "
                f"{format_duration(p.host_ms)} on the host in all"
            )
        if self.on_gpu:
            if self.device_to_host_copies:
                lines.append(
                    f"  device-to-host copies on the GPU timeline: {self.device_to_host_copies} "
                    f"({format_duration(self.device_to_host_ms)})"
                )
            lines.append(
                "Each call blocked the host until the kernels queued on its stream had "
                "finished (a copy to the host, then a stream synchronize); how much of the host "
                "time above is that waiting, the cudaStreamSynchronize rows of the trace say."
            )
        else:
            lines.append(
                "On the CPU these cost no waiting: there is no device queue, so the value is "
                "already computed when .item() runs and the call only converts it. On a GPU "
                "each call would block the host until the queued kernels finish."
            )
        return "\n".join(lines)


def find_sync_points(source: TorchProfile | str | os.PathLike[str]) -> SyncReport:
    """Scan a torch Chrome trace for calls that make the host wait for the device.

    ``source`` is a :class:`TorchProfile` (its exported trace is read) or the
    path of any torch trace, a learner's own included. Each sync call is
    charged to the labelled phase (data, forward, ...) whose range contains it.
    Where the trace has profiled steps (``ProfilerStep#N`` ranges), only calls
    inside them count: on CUDA the profiler's own ``torch.cuda.synchronize()``
    when it stops is recorded too, after the last step, and is not the loop's.
    """
    path = source.trace_path if isinstance(source, TorchProfile) else source
    events = complete_events(read_trace(path))
    intervals = phase_intervals(events)
    step_ranges = [
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if str(e.get("name", "")).startswith("ProfilerStep#")
    ]
    steps = len(step_ranges)

    def in_a_step(event: dict[str, Any]) -> bool:
        if not step_ranges:  # a trace taken without prof.step(): all of it
            return True
        return any(start <= event["ts"] < end for start, end in step_ranges)

    candidates = sorted(
        (
            e
            for e in events
            if e.get("cat") in _HOST_CATEGORIES and e.get("name") in SYNC_OPS and in_a_step(e)
        ),
        key=lambda e: (e["ts"], -e["dur"]),
    )
    outermost: list[dict[str, Any]] = []
    open_until: dict[Any, float] = {}  # (pid, tid) -> end of the last outermost sync call
    for e in candidates:
        thread = (e.get("pid"), e.get("tid"))
        if e["ts"] < open_until.get(thread, float("-inf")):
            continue  # nested inside a sync call already counted
        outermost.append(e)
        open_until[thread] = e["ts"] + e["dur"]
    grouped: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0])
    for e in outermost:
        key = (e["name"], phase_at(intervals, e["ts"]) or OUTSIDE)
        grouped[key][0] += 1
        grouped[key][1] += e["dur"] / 1e3
    copies = [
        e for e in events if e.get("cat") == "gpu_memcpy" and "DtoH" in str(e.get("name", ""))
    ]
    on_gpu = any(e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") for e in events)
    return SyncReport(
        trace_path=str(path),
        steps=steps,
        on_gpu=on_gpu,
        points=tuple(
            SyncPoint(name, phase, int(calls), host_ms, steps)
            for (name, phase), (calls, host_ms) in sorted(grouped.items())
        ),
        device_to_host_copies=len(copies),
        device_to_host_ms=sum(e["dur"] for e in copies) / 1e3,
    )


# ---------------------------------------------------------------------------- timing the stall


@dataclass(frozen=True)
class SyncStallTiming(JsonRecord):
    """The same ``steps`` training steps, timed with one sync at the end and with one per step.

    Each Timing is for a whole loop of ``steps`` steps (one call of the loop),
    so the per-step syncs are inside what is timed; ``bench`` synchronises only
    around each loop.
    """

    device: str
    steps: int
    batch: int
    image_size: int
    sync_once: Timing
    item_every_step: Timing
    #: The per-round ratio item-every-step / sync-once, lowest and highest (None: not interleaved).
    ratio_low: float | None = None
    ratio_high: float | None = None
    rounds: int = 4
    #: The median of the per-round ratios (None: not interleaved; then the pooled medians' ratio).
    ratio_median: float | None = None
    #: Each loop's time as the median of its rounds' medians (None: the pooled median), the
    #: statistic the per-round ratios describe (labkit.timing.interleave.VariantRuns.pooled).
    once_ms: float | None = None
    item_ms: float | None = None

    json_extra = ("ms_per_step_sync_once", "ms_per_step_item", "stall_ms_per_step", "ratio")

    @property
    def loop_once_ms(self) -> float:
        """The sync-once loop's time: the median of its rounds' medians where interleaved."""
        return self.once_ms if self.once_ms is not None else self.sync_once.median_ms

    @property
    def loop_item_ms(self) -> float:
        """The .item()-every-step loop's time, the same statistic."""
        return self.item_ms if self.item_ms is not None else self.item_every_step.median_ms

    @property
    def ms_per_step_sync_once(self) -> float:
        return self.loop_once_ms / self.steps

    @property
    def ms_per_step_item(self) -> float:
        return self.loop_item_ms / self.steps

    @property
    def ratio(self) -> float:
        """item-every-step time / sync-once time (> 1: the per-step sync costs time).

        The median of the rounds' ratios where the loops were interleaved (so it lies
        within the per-round range printed beside it), else the pooled medians' ratio.
        """
        if self.ratio_median is not None:
            return self.ratio_median
        once = self.loop_once_ms
        return self.loop_item_ms / once if once > 0 else float("inf")

    @property
    def stall_ms_per_step(self) -> float:
        """Extra time per step of the ``.item()`` loop (may be slightly negative: noise)."""
        return self.ms_per_step_item - self.ms_per_step_sync_once

    def __str__(self) -> str:
        s = self.image_size
        lines = [
            f"{self.steps} training steps of labkit.models.cnn.CNN on {self.device}, batch "
            f"{self.batch} of 3×{s}×{s} images (n={self.sync_once.n} and "
            f"n={self.item_every_step.n} loops; times: the median of the rounds' medians):",
            f"  loss kept on the device, read once   {format_duration(self.loop_once_ms):>9}"
            f" (IQR {format_duration(self.sync_once.iqr_ms)} of the loop; "
            f"{format_duration(self.ms_per_step_sync_once)} per step)",
            f"  loss.item() every step               "
            f"{format_duration(self.loop_item_ms):>9}"
            f" (IQR {format_duration(self.item_every_step.iqr_ms)} of the loop; "
            f"{format_duration(self.ms_per_step_item)} per step, {self.ratio:.2f}× the time)",
        ]
        if self.ratio_low is not None and self.ratio_high is not None:
            low, high = self.ratio_low, self.ratio_high
            agree = (
                "every round had the .item() loop slower"
                if low > 1
                else "every round had the .item() loop faster"
                if high < 1
                else "the rounds disagree on which loop is faster: the difference is within "
                "the run's own variation"
            )
            if low > 1 or high < 1:  # with no effect, every round one way: (1/2)^rounds of runs
                chance = 0.5**self.rounds
                agree += (
                    f" (with {self.rounds} rounds, noise alone does that in {chance:.1%} of runs)"
                )
            lines.append(f"  per round: {low:.2f}× to {high:.2f}× the time; {agree}")
        if self.device.startswith("cuda"):
            lines.append(
                "On the GPU every .item() drains the queue: the host waits, then the GPU waits "
                "for the host to launch the next step."
            )
        else:
            lines.append(
                f"On {self.device} there is no queue to drain, so .item() adds no wait for a "
                "device; on a GPU each .item() makes the host wait for the device's queue."
            )
        return "\n".join(lines)


def time_sync_stall(
    steps: int = 10,
    batch: int = 64,
    *,
    image_size: int = 32,
    device: Any = None,
    warmup_ms: float = 50.0,
    rep_ms: float = 300.0,
    min_reps: int = 3,
    seed: int = 0,
) -> SyncStallTiming:
    """Time ``steps`` steps with ``loss.item()`` every step against one read after the loop.

    Why: the profile shows *that* ``.item()`` runs every step; this shows what
    it costs, measured with :func:`labkit.bench` (warm-up, device sync, time
    budget, median). Without a profiler attached, so the times are the loop's
    own. The two loops take turns on one model (it keeps training; each
    step's work is the same): :func:`labkit.timing.interleave.interleave`,
    4 rounds in rotating order (each loop first in two of them), so that drift
    of the machine falls on both alike; each loop's time is the median of its
    rounds' medians and the ratio the median of the rounds' ratios, so the ratio
    lies within the per-round range printed beside it (the pooled samples give
    the IQRs).
    """
    import functools

    from labkit.timing.interleave import interleave

    steps = check_positive_int("steps", steps)
    batch = check_positive_int("batch", batch)
    image_size = check_int("image_size", image_size, minimum=2)
    min_reps = check_positive_int("min_reps", min_reps)
    seed = check_seed("seed", seed)
    check_torch_device(device)
    warmup_ms = check_ms("warmup_ms", warmup_ms, allow_zero=True)
    rep_ms = check_ms("rep_ms", rep_ms)
    from labkit.core.optional import import_optional

    torch = import_optional("torch", PURPOSE)
    dev = resolve_torch_device(device)
    require_step_fits(dev, batch, image_size, "time_sync_stall")
    trainer = Trainer(torch, dev, batch, image_size, seed)
    rounds = 4  # even, so that each loop runs first in half of the rounds
    turns = interleave(
        {
            "loss read once": functools.partial(trainer.run, steps, False),
            "loss.item() every step": functools.partial(trainer.run, steps, True),
        },
        rounds=rounds,
        rep_ms=rep_ms / rounds,
        warmup_ms=warmup_ms,
        min_reps=min_reps,
        device=str(dev),
    )
    once = turns["loss read once"].pooled()
    every = turns["loss.item() every step"].pooled()
    middle, low, high = turns.versus("loss read once", "loss.item() every step")
    return SyncStallTiming(
        device=str(dev),
        steps=steps,
        batch=batch,
        image_size=image_size,
        sync_once=once,
        item_every_step=every,
        ratio_low=low,
        ratio_high=high,
        rounds=rounds,
        ratio_median=middle,
        once_ms=turns["loss read once"].median_ms,
        item_ms=turns["loss.item() every step"].median_ms,
    )
