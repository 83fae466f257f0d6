"""Profile a few training steps of the course CNN with ``torch.profiler``.

A timer says *how long* a step takes; a profiler says *where the time goes*:
which operators ran, how often, how long each took by itself (self time) and
with what it called (total time), and on a GPU how long the device was busy.
:func:`profile_training` runs the course's :class:`labkit.models.cnn.CNN` under
``torch.profiler.profile`` with the usual wait/warm-up/active schedule, labels
the phases of each step with ``record_function`` (and NVTX ranges on CUDA, so
an Nsight Systems timeline shows them too), exports the timeline as a
Chrome/Perfetto trace in a temporary folder, and returns the numbers as data.

``sync_every_step=True`` reads the loss with ``loss.item()`` after every step,
the classic logging habit; the default keeps a running total on the device and
reads it once after the loop. :func:`labkit.profiling.find_sync_points` finds
the difference in the trace.

Numbers come from torch (2.4+): ``key_averages()`` rows with
``self_cpu_time_total``, ``cpu_time_total`` and ``self_device_time_total``
(microseconds; older releases called the last one ``self_cuda_time_total``).
"""

from __future__ import annotations

import contextlib
import os
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit.core.optional import import_optional
from labkit.core.validate import check_seed, check_torch_device
from labkit.profiling.common import (
    captured_output_fds,
    check_bool,
    check_positive_int,
    output_dir,
    union_ms,
)
from labkit.profiling.trace import (
    DEVICE_CATEGORIES,
    VIEWERS,
    complete_events,
    device_intervals_ms,
    read_trace,
)
from labkit.timing.bench import format_duration

PURPOSE = "profiling a training step"

#: The labelled phases of every step, in order. "logging" reads or accumulates the loss.
PHASES: tuple[str, ...] = ("data", "forward", "backward", "optimizer", "logging")

#: Steps the profiler skips, then traces but throws away, before the ``steps`` it keeps:
#: the first step pays for lazy initialisation (cuDNN, the allocator) and would dominate.
WAIT_STEPS = 1
WARMUP_STEPS = 1

#: Operators every run of this training step records, on any device, in pipeline order.
#: Their call counts depend only on the number of steps, so a table of these rows has the
#: same structure on every run (``print(profile)`` shows it); only the times change.
STABLE_OPS: tuple[str, ...] = (
    "aten::conv2d",
    "aten::relu",
    "aten::max_pool2d",
    "aten::adaptive_avg_pool2d",
    "aten::linear",
    "aten::addmm",
    "aten::cross_entropy_loss",
    "aten::convolution_backward",
    "aten::threshold_backward",
    "aten::max_pool2d_with_indices_backward",
    "aten::mm",
    "Optimizer.step#SGD.step",
    "Optimizer.zero_grad#SGD.zero_grad",
    "aten::item",
    "aten::_local_scalar_dense",
)

#: What ``top_ops`` can sort by.
SORT_KEYS: tuple[str, ...] = ("self_cpu_ms", "total_cpu_ms", "self_device_ms", "calls")

#: Bytes held during one step per byte of the input batch (activations, gradients; with slack).
ACTIVATION_FACTOR = 30
#: Batches of synthetic images kept on the device and cycled through.
BATCHES = 4


@dataclass(frozen=True)
class OpStat:
    """One row of the operator table: every call of one operator, summed over the profiled steps.

    ``self_cpu_ms`` is host time spent in the operator itself, ``total_cpu_ms``
    includes the operators it called. ``self_device_ms`` is the time of the
    kernels it launched itself (0 on a CPU run). ``on_device`` marks rows that
    *are* device activity (a kernel, a copy): they have no host time.
    """

    name: str
    calls: int
    self_cpu_ms: float
    total_cpu_ms: float
    self_device_ms: float = 0.0
    on_device: bool = False


@dataclass(frozen=True)
class PhaseStat:
    """Host (CPU) and device time per step of one labelled phase, in ms."""

    name: str
    cpu_ms_per_step: float
    device_ms_per_step: float = 0.0


@dataclass(frozen=True)
class TorchProfile:
    """What ``torch.profiler`` recorded over ``steps`` training steps, as data.

    - ``ops``: every operator (the labelled phases and ``ProfilerStep#N``
      ranges are in ``phases`` and ``step_ms`` instead), largest self CPU
      time first. :meth:`top_ops` and :meth:`table` slice it.
    - ``phases``: host and device ms per step of each phase in :data:`PHASES`.
    - ``step_ms``: host time of each profiled step (the ``ProfilerStep#N``
      ranges), profiler overhead included. On a GPU, without a sync point a
      step's host time is only the time to *launch* its work.
    - ``self_cpu_total_ms``: the sum of every row's self CPU time (torch's
      "Self CPU time total"); ``device_total_ms`` the summed durations of the
      kernels and copies, ``device_busy_ms`` the time at least one ran, and
      ``span_ms`` the profiled window (first step's start to the later of the
      last step's end and the last kernel's end).
    - ``trace_path``: the exported Chrome trace (open it in Perfetto).
    - ``profiler_messages``: what the profiler printed to stderr (kept out of
      the notebook; read it when something looks wrong).
    """

    device: str
    model: str
    batch: int
    image_size: int
    steps: int
    sync_every_step: bool
    ops: tuple[OpStat, ...]
    phases: tuple[PhaseStat, ...]
    step_ms: tuple[float, ...]
    self_cpu_total_ms: float
    device_total_ms: float
    device_busy_ms: float
    span_ms: float
    device_timeline: bool
    trace_path: str
    profiler_messages: tuple[str, ...] = field(default=(), repr=False)

    # ------------------------------------------------------------------ derived

    @property
    def on_gpu(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def median_step_ms(self) -> float:
        """Median host time of a profiled step (profiler overhead included)."""
        return statistics.median(self.step_ms) if self.step_ms else 0.0

    @property
    def device_idle_fraction(self) -> float | None:
        """Share of the profiled window in which no kernel or copy ran; None without a device."""
        if not self.device_timeline or self.span_ms <= 0:
            return None
        return max(0.0, 1.0 - self.device_busy_ms / self.span_ms)

    @property
    def loop(self) -> str:
        """Which training loop ran, in words."""
        if self.sync_every_step:
            return "loss.item() every step"
        return "loss kept on the device, read once after the loop"

    def op(self, name: str) -> OpStat | None:
        """The row of operator ``name``, or None if it never ran."""
        return next((o for o in self.ops if o.name == name), None)

    def phase(self, name: str) -> PhaseStat:
        if name not in PHASES:
            raise ValueError(f"name must be one of {', '.join(PHASES)}, got {name!r}")
        return next(p for p in self.phases if p.name == name)

    def top_ops(self, n: int = 10, sort_by: str = "self_cpu_ms") -> tuple[OpStat, ...]:
        """The ``n`` rows with the largest ``sort_by`` (ties by name), e.g. ``"self_device_ms"``.

        The order of close rows can change from run to run: measure, don't memorise.
        """
        n = check_positive_int("n", n)
        if sort_by not in SORT_KEYS:
            raise ValueError(f"sort_by must be one of {', '.join(SORT_KEYS)}, got {sort_by!r}")
        rows = [o for o in self.ops if getattr(o, sort_by) > 0]
        return tuple(sorted(rows, key=lambda o: (-getattr(o, sort_by), o.name))[:n])

    def operators_by_self_time(self) -> tuple[str, ...]:
        """Host operators by self CPU time, largest first (what ``check.top_operator`` wants)."""
        return tuple(o.name for o in self.top_ops(len(self.ops) or 1) if not o.on_device)

    # ------------------------------------------------------------------ text

    def table(self, top: int | None = None, sort_by: str = "self_cpu_ms") -> str:
        """The operator table as text.

        ``top=None`` (what ``print(profile)`` shows) lists the fixed
        :data:`STABLE_OPS` in pipeline order, so every run prints the same rows
        and call counts; ``top=10`` lists the 10 largest by ``sort_by``, whose
        order may change between runs.
        """
        if top is None:
            rows: list[tuple[str, OpStat | None]] = [(name, self.op(name)) for name in STABLE_OPS]
        else:
            rows = [(o.name, o) for o in self.top_ops(top, sort_by)]
        device = self.device_timeline
        width = max(len(name) for name, _ in rows) if rows else 8
        head = f"{'operator':<{width}}  {'calls':>6}  {'self CPU':>9}  {'total CPU':>9}"
        if device:
            head += f"  {'self device':>11}"
        lines = [head]
        for name, stat in rows:
            if stat is None:
                line = f"{name:<{width}}  {0:>6}  {'-':>9}  {'-':>9}"
                lines.append(line + (f"  {'-':>11}" if device else ""))
                continue
            line = (
                f"{name:<{width}}  {stat.calls:>6}  {format_duration(stat.self_cpu_ms):>9}  "
                f"{format_duration(stat.total_cpu_ms):>9}"
            )
            if device:
                line += f"  {format_duration(stat.self_device_ms):>11}"
            lines.append(line)
        return "\n".join(lines)

    def _describe(self) -> str:
        s = self.image_size
        return (
            f"{self.model} training on {self.device}, batch {self.batch} of 3×{s}×{s} images, "
            f"{self.steps} profiled steps"
        )

    def totals_line(self) -> str:
        """Host time against device time, in one sentence that says which there is."""
        host = f"self CPU time of all rows {format_duration(self.self_cpu_total_ms)}"
        if not self.device_timeline:
            if self.on_gpu:
                return (
                    f"{host}; the profiler recorded no device activity (CUPTI unavailable? "
                    "see profiler_messages)"
                )
            return (
                f"{host}; no device timeline: the run was on {self.device}, so every "
                "microsecond here is host time"
            )
        idle = self.device_idle_fraction or 0.0
        return (
            f"{host}; device busy {format_duration(self.device_busy_ms)} of "
            f"{format_duration(self.span_ms)} ({idle:.0%} idle)"
        )

    def __str__(self) -> str:
        lines = [f"PyTorch profile: {self._describe()} ({self.loop})"]
        lines.append(
            f"  host time per step: {format_duration(self.median_step_ms)} (median of the "
            "profiled steps, profiler overhead included)"
        )
        head = "  phases, per step:" + ("  host CPU / device" if self.device_timeline else "")
        lines.append(head)
        for p in self.phases:
            text = f"    {p.name:<10}  {format_duration(p.cpu_ms_per_step):>9}"
            if self.device_timeline:
                text += f"  {format_duration(p.device_ms_per_step):>9}"
            lines.append(text)
        lines.append(f"  operators (calls over the {self.steps} steps):")
        lines += ["    " + line for line in self.table().splitlines()]
        lines.append("  " + self.totals_line())
        lines.append(f"  trace: {self.trace_path} (open it in {VIEWERS})")
        return "\n".join(lines)

    def summary(self) -> list[str]:
        """Lines for a GPU recording: step time, the phases, the top operators, the totals."""
        dev = self.device
        lines = [f"{dev}: {self._describe()}, {self.loop}"]
        lines.append(
            f"{dev}: host time per step {format_duration(self.median_step_ms)} under the "
            f"profiler; {self.totals_line()}"
        )
        phases = ", ".join(
            f"{p.name} {format_duration(p.cpu_ms_per_step)}"
            + (f" (device {format_duration(p.device_ms_per_step)})" if self.device_timeline else "")
            for p in self.phases
        )
        lines.append(f"{dev}: per step, host: {phases}")
        top = ", ".join(
            f"{o.name} {format_duration(o.self_cpu_ms)}" for o in self.top_ops(5, "self_cpu_ms")
        )
        lines.append(f"{dev}: top operators by self CPU time: {top}")
        if self.device_timeline:
            top = ", ".join(
                f"{_short(o.name)} {format_duration(o.self_device_ms)}"
                for o in self.top_ops(5, "self_device_ms")
            )
            lines.append(f"{dev}: top by self device time: {top}")
        return lines

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        """JSON-ready fields; ``top`` keeps only the largest rows by self CPU and by device time."""
        if top is None:
            ops = list(self.ops)
        else:
            keep = {o.name for o in self.top_ops(top, "self_cpu_ms")}
            if self.device_timeline:
                keep |= {o.name for o in self.top_ops(top, "self_device_ms")}
            keep |= set(STABLE_OPS)
            ops = [o for o in self.ops if o.name in keep]
        return {
            "device": self.device,
            "model": self.model,
            "batch": self.batch,
            "image_size": self.image_size,
            "steps": self.steps,
            "sync_every_step": self.sync_every_step,
            "median_step_ms": self.median_step_ms,
            "step_ms": list(self.step_ms),
            "self_cpu_total_ms": self.self_cpu_total_ms,
            "device_timeline": self.device_timeline,
            "device_total_ms": self.device_total_ms,
            "device_busy_ms": self.device_busy_ms,
            "span_ms": self.span_ms,
            "device_idle_fraction": self.device_idle_fraction,
            "phases": [
                {
                    "name": p.name,
                    "cpu_ms_per_step": p.cpu_ms_per_step,
                    "device_ms_per_step": p.device_ms_per_step,
                }
                for p in self.phases
            ],
            "ops": [
                {
                    "name": o.name,
                    "calls": o.calls,
                    "self_cpu_ms": o.self_cpu_ms,
                    "total_cpu_ms": o.total_cpu_ms,
                    "self_device_ms": o.self_device_ms,
                    "on_device": o.on_device,
                }
                for o in ops
            ],
            "trace_path": self.trace_path,
            "profiler_messages": list(self.profiler_messages),
        }


def _short(name: str, limit: int = 50) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


# ---------------------------------------------------------------------------- the training step


class Trainer:
    """The course CNN, SGD with momentum, and ``BATCHES`` synthetic batches kept on the device.

    The data sits on the device from the start (as in
    :func:`labkit.models.train.train_classifier`), so the "data" phase is only
    slicing and the profile is about compute and synchronisation, not copies.
    SGD rather than Adam: on the CPU, Adam reads its step counter with
    ``.item()`` four times per step, which would hide the one sync point this
    lesson is about.
    """

    def __init__(self, torch: Any, device: Any, batch: int, image_size: int, seed: int = 0):
        from labkit.models.cnn import CNN
        from labkit.models.data import synthetic_images

        self.torch = torch
        self.device = device
        self.batch = batch
        torch.manual_seed(seed)
        x, y = synthetic_images(batch * BATCHES, size=image_size, seed=seed)
        self.x = x.to(device)
        self.y = y.to(device)
        self.model = CNN().to(device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.loss_fn = torch.nn.CrossEntropyLoss()
        self.total = torch.zeros((), device=device)
        self.logged: list[float] = []
        self.steps_done = 0

    def step(self, sync_every_step: bool, label: Callable[[str], Any]) -> None:
        """One training step; ``label(name)`` gives the context manager for each phase."""
        with label("data"):
            first = (self.steps_done % BATCHES) * self.batch
            xb = self.x[first : first + self.batch]
            yb = self.y[first : first + self.batch]
        with label("forward"):
            loss = self.loss_fn(self.model(xb), yb)
        with label("backward"):
            loss.backward()
        with label("optimizer"):
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        with label("logging"):
            if sync_every_step:
                self.logged.append(loss.item())  # waits until the device has computed it
            else:
                self.total += loss.detach()  # stays on the device: nothing waits
        self.steps_done += 1

    def run(self, steps: int, sync_every_step: bool) -> float:
        """``steps`` unlabelled steps, then the loop's one read of the loss (a sync)."""
        self.logged.clear()
        for _ in range(steps):
            self.step(sync_every_step, _no_label)
        return float(self.total.item())


def _no_label(_name: str) -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


def phase_labels(torch: Any, device: Any) -> Callable[[str], Any]:
    """``record_function`` ranges for torch.profiler, plus NVTX ranges on CUDA (for nsys)."""
    cuda = getattr(device, "type", str(device)) == "cuda"

    @contextlib.contextmanager
    def label(name: str) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            if cuda:
                stack.enter_context(torch.cuda.nvtx.range(name))
            stack.enter_context(torch.profiler.record_function(name))
            yield

    return label


def resolve_device(torch: Any, device: Any) -> Any:
    """``device`` as a torch.device that exists here; None picks the best one."""
    from labkit.machine.report import resolve_torch_device

    return resolve_torch_device(device)


def check_memory(
    device: Any, batch: int, image_size: int, what: str, name: str = "batch or image_size"
) -> None:
    """Refuse sizes whose data and activations exceed labkit's memory budget (25% of free)."""
    from labkit.machine.memory import check_fits

    kind = getattr(device, "type", str(device))
    where = str(device) if kind == "cuda" else "cpu"
    batch_bytes = batch * 3 * image_size * image_size * 4
    check_fits(batch_bytes * (BATCHES + ACTIVATION_FACTOR), device=where, what=what, name=name)


# ---------------------------------------------------------------------------- profile_training


def profile_training(
    steps: int = 5,
    batch: int = 64,
    *,
    image_size: int = 32,
    device: Any = None,
    trace_dir: Any = None,
    sync_every_step: bool = False,
    record_shapes: bool = True,
    profile_memory: bool = False,
    seed: int = 0,
) -> TorchProfile:
    """Profile ``steps`` training steps of :class:`labkit.models.cnn.CNN` and return the numbers.

    Why: before optimising a training loop, find out where its time goes. The
    profiler sees every operator (``aten::conv2d`` and what it calls), the
    phases we label (data, forward, backward, optimizer, logging), and on a
    GPU every kernel and copy, so it answers "is the step waiting on the
    host, on a sync point, or on one expensive kernel?".

    Args:
        steps: profiled steps, after ``WAIT_STEPS`` + ``WARMUP_STEPS`` unrecorded ones.
        batch: images per step; ``image_size``: their side in pixels (3 channels).
        device: where to train; None picks the best (:func:`labkit.pick_device`).
            On CUDA the profiler also records the device (CUPTI), and each
            phase is an NVTX range too.
        trace_dir: folder for the Chrome trace; None makes a new temporary
            folder (never the working directory, which in a notebook is the
            course folder).
        sync_every_step: read ``loss.item()`` every step (a sync point) instead
            of keeping the running loss on the device.
        record_shapes, profile_memory: passed to ``torch.profiler.profile``
            (shapes appear in the trace; memory costs overhead).
        seed: seeds the weights and the synthetic data.
    """
    steps = check_positive_int("steps", steps)
    batch = check_positive_int("batch", batch)
    image_size = check_positive_int("image_size", image_size, minimum=2)
    sync_every_step = check_bool("sync_every_step", sync_every_step)
    record_shapes = check_bool("record_shapes", record_shapes)
    profile_memory = check_bool("profile_memory", profile_memory)
    seed = check_seed("seed", seed)
    check_torch_device(device)
    if trace_dir is not None and not isinstance(trace_dir, (str, os.PathLike)):
        raise TypeError(
            f"trace_dir must be a folder path or None for a new temporary folder, got "
            f"{type(trace_dir).__name__} instead"
        )
    torch = import_optional("torch", PURPOSE)
    dev = resolve_device(torch, device)
    check_memory(dev, batch, image_size, "profile_training")
    folder = output_dir(trace_dir, name="trace_dir", prefix="labkit-profile-")
    mode = "item_every_step" if sync_every_step else "sync_once"
    trace_path = folder / f"cnn_training_{mode}.pt.trace.json"

    trainer = Trainer(torch, dev, batch, image_size, seed)
    label = phase_labels(torch, dev)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if dev.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    schedule = torch.profiler.schedule(wait=WAIT_STEPS, warmup=WARMUP_STEPS, active=steps, repeat=1)
    messages: list[str] = []
    with captured_output_fds(messages):
        with torch.profiler.profile(
            activities=activities,
            schedule=schedule,
            record_shapes=record_shapes,
            profile_memory=profile_memory,
            with_stack=False,
        ) as prof:
            for _ in range(WAIT_STEPS + WARMUP_STEPS + steps):
                trainer.step(sync_every_step, label)
                prof.step()
        prof.export_chrome_trace(str(trace_path))
        averages = prof.key_averages()
    if not sync_every_step:
        trainer.total.item()  # the loop's one sync, after the profiled window
    ops, self_cpu_total_ms = _op_rows(averages)
    return _from_trace(
        trace_path,
        device=str(dev),
        batch=batch,
        image_size=image_size,
        steps=steps,
        sync_every_step=sync_every_step,
        ops=ops,
        self_cpu_total_ms=self_cpu_total_ms,
        fallback_device_ms=_phase_device_ms(averages),
        messages=tuple(messages),
    )


def _self_device_us(row: Any) -> float:
    value = getattr(row, "self_device_time_total", None)
    if value is None:  # torch < 2.4 named it after CUDA
        value = getattr(row, "self_cuda_time_total", 0.0)
    return float(value or 0.0)


def _is_annotation(name: str) -> bool:
    return name in PHASES or name.startswith("ProfilerStep")


def _op_rows(averages: Any) -> tuple[tuple[OpStat, ...], float]:
    """The operator rows of ``key_averages()`` (phases and steps left out), and the self CPU total."""
    rows = []
    self_cpu_total_us = 0.0
    for row in averages:
        self_cpu_total_us += float(row.self_cpu_time_total)
        if _is_annotation(row.key):
            continue
        kind = getattr(getattr(row, "device_type", None), "name", "CPU")
        rows.append(
            OpStat(
                name=row.key,
                calls=int(row.count),
                self_cpu_ms=float(row.self_cpu_time_total) / 1e3,
                total_cpu_ms=float(row.cpu_time_total) / 1e3,
                self_device_ms=_self_device_us(row) / 1e3,
                on_device=kind != "CPU",
            )
        )
    rows.sort(key=lambda o: (-o.self_cpu_ms, -o.self_device_ms, o.name))
    return tuple(rows), self_cpu_total_us / 1e3


def _phase_device_ms(averages: Any) -> dict[str, float]:
    """Device ms of each phase according to ``key_averages`` (kernels of the phase's children)."""
    out = {}
    for row in averages:
        if row.key in PHASES:
            value = getattr(row, "device_time_total", None)
            if value is None:
                value = getattr(row, "cuda_time_total", 0.0)
            out[row.key] = float(value or 0.0) / 1e3
    return out


def phase_intervals(events: list[dict[str, Any]]) -> list[tuple[float, float, str]]:
    """(start µs, end µs, phase) of every labelled phase range in the trace, by start."""
    return sorted(
        (e["ts"], e["ts"] + e["dur"], e["name"])
        for e in events
        if e.get("cat") == "user_annotation" and e.get("name") in PHASES
    )


def phase_at(intervals: list[tuple[float, float, str]], ts: float) -> str | None:
    """The phase whose range contains time ``ts`` (µs), if any."""
    for start, end, name in intervals:
        if start <= ts <= end:
            return name
        if start > ts:
            break
    return None


def _from_trace(
    trace_path: Path,
    *,
    device: str,
    batch: int,
    image_size: int,
    steps: int,
    sync_every_step: bool,
    ops: tuple[OpStat, ...],
    self_cpu_total_ms: float,
    fallback_device_ms: dict[str, float],
    messages: tuple[str, ...],
) -> TorchProfile:
    """Phase times, step times and device activity read back from the exported trace.

    Device time per phase follows each kernel's ``correlation`` id back to the
    runtime call that launched it, and charges it to the phase that call ran
    in: on a GPU a kernel usually runs *after* its phase has ended on the host,
    and backward kernels are launched from autograd's own thread.
    """
    events = complete_events(read_trace(trace_path))
    intervals = phase_intervals(events)
    cpu_us = dict.fromkeys(PHASES, 0.0)
    for start, end, name in intervals:
        cpu_us[name] += end - start
    steps_seen = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    step_ms = tuple(e["dur"] / 1e3 for e in sorted(steps_seen, key=lambda e: e["ts"]))
    device_events = [e for e in events if e.get("cat") in DEVICE_CATEGORIES]
    launches = {
        e["args"]["correlation"]: e["ts"]
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver")
        and isinstance(e.get("args"), dict)
        and "correlation" in e["args"]
    }
    device_us = dict.fromkeys(PHASES, 0.0)
    matched = 0
    for e in device_events:
        corr = e.get("args", {}).get("correlation") if isinstance(e.get("args"), dict) else None
        phase = phase_at(intervals, launches[corr]) if corr in launches else None
        if phase is not None:
            device_us[phase] += e["dur"]
            matched += 1
    if device_events and not matched:  # no correlation ids: use torch's own attribution
        device_us = {p: fallback_device_ms.get(p, 0.0) * 1e3 for p in PHASES}
    n = max(len(step_ms), 1) if step_ms else steps
    phases = tuple(
        PhaseStat(name, cpu_us[name] / 1e3 / n, device_us[name] / 1e3 / n) for name in PHASES
    )
    dev_intervals = device_intervals_ms(events)
    if steps_seen:
        first = min(e["ts"] for e in steps_seen) / 1e3
        last = max(e["ts"] + e["dur"] for e in steps_seen) / 1e3
        if dev_intervals:
            last = max(last, max(end for _, end in dev_intervals))
        span_ms = last - first
    else:
        span_ms = 0.0
    return TorchProfile(
        device=device,
        model="labkit.models.cnn.CNN",
        batch=batch,
        image_size=image_size,
        steps=steps,
        sync_every_step=sync_every_step,
        ops=ops,
        phases=phases,
        step_ms=step_ms,
        self_cpu_total_ms=self_cpu_total_ms,
        device_total_ms=sum(e["dur"] for e in device_events) / 1e3,
        device_busy_ms=union_ms(dev_intervals),
        span_ms=span_ms,
        device_timeline=bool(device_events),
        trace_path=str(trace_path),
        profiler_messages=messages,
    )


# ---------------------------------------------------------------------------- plot
