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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from labkit.core.optional import import_optional
from labkit.core.validate import check_int, check_positive_int, check_seed, check_torch_device
from labkit.machine.report import resolve_torch_device
from labkit.profiling.common import captured_output_fds, output_dir, union_ms
from labkit.profiling.torch_results import PHASES, OpStat, PhaseStat, TorchProfile
from labkit.profiling.trace import (
    DEVICE_CATEGORIES,
    complete_events,
    device_intervals_ms,
    read_trace,
)

PURPOSE = "profiling a training step"


#: Steps the profiler skips, then traces but throws away, before the ``steps`` it keeps:
#: the first step pays for lazy initialisation (cuDNN, the allocator) and would dominate.
WAIT_STEPS = 1
WARMUP_STEPS = 1


#: Bytes held during one step per byte of the input batch (activations, gradients; with slack).
ACTIVATION_FACTOR = 30
#: Batches of synthetic images kept on the device and cycled through.
BATCHES = 4
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


def require_step_fits(
    device: Any, batch: int, image_size: int, what: str, name: str = "batch or image_size"
) -> None:
    """Refuse sizes whose data and activations exceed labkit's memory budget (25% of free)."""
    from labkit.machine.memory import require_fits

    kind = getattr(device, "type", str(device))
    where = str(device) if kind == "cuda" else "cpu"
    batch_bytes = batch * 3 * image_size * image_size * 4
    require_fits(batch_bytes * (BATCHES + ACTIVATION_FACTOR), device=where, what=what, name=name)


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
    image_size = check_int("image_size", image_size, minimum=2)
    seed = check_seed("seed", seed)
    check_torch_device(device)
    torch = import_optional("torch", PURPOSE)
    dev = resolve_torch_device(device)
    require_step_fits(dev, batch, image_size, "profile_training")
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
