"""What a torch.profiler run of the course CNN returns: the operator table, the phases of a step, and their text."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from labkit.core.results import JsonRecord
from labkit.core.units import format_duration
from labkit.core.validate import check_choice, check_positive_int
from labkit.profiling.trace import VIEWERS

#: The labelled phases of every step, in order. "logging" reads or accumulates the loss.
PHASES: tuple[str, ...] = ("data", "forward", "backward", "optimizer", "logging")


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


@dataclass(frozen=True)
class OpStat(JsonRecord):
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
class PhaseStat(JsonRecord):
    """Host (CPU) and device time per step of one labelled phase, in ms."""

    name: str
    cpu_ms_per_step: float
    device_ms_per_step: float = 0.0


@dataclass(frozen=True)
class TorchProfile(JsonRecord):
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

    json_extra = ("median_step_ms", "device_idle_fraction")

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
        check_choice("name", name, PHASES)
        return next(p for p in self.phases if p.name == name)

    def top_ops(self, n: int = 10, sort_by: str = "self_cpu_ms") -> tuple[OpStat, ...]:
        """The ``n`` rows with the largest ``sort_by`` (ties by name), e.g. ``"self_device_ms"``.

        The order of close rows can change from run to run: measure, don't memorise.
        """
        n = check_positive_int("n", n)
        check_choice("sort_by", sort_by, SORT_KEYS)
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
        head = "  phases, mean per step:" + ("  host CPU / device" if self.device_timeline else "")
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
        """Every field (:class:`JsonRecord`); ``top`` keeps only the largest op rows.

        The rows kept are the ``top`` largest by self CPU time and by self
        device time, and :data:`STABLE_OPS`.
        """
        data = super().to_dict()
        if top is not None:
            keep = {o.name for o in self.top_ops(top, "self_cpu_ms")}
            if self.device_timeline:
                keep |= {o.name for o in self.top_ops(top, "self_device_ms")}
            keep |= set(STABLE_OPS)
            data["ops"] = [row for row in data["ops"] if row["name"] in keep]
        return data


def _short(name: str, limit: int = 50) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"
