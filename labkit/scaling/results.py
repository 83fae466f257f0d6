"""What the torchrun experiments return: frozen dataclasses with readable text and summaries.

:class:`DdpRun` (one DDP training run), :class:`Scaling` (weak scaling over
process counts), :class:`AllreduceCost` (all-reduce time and bandwidth by
message size) and :class:`ModelSizeComm` (all-reduce cost by model size),
each built from the JSON that rank 0 of :mod:`labkit.scaling.train_ddp` or
:mod:`labkit.scaling.allreduce` writes. Times are :class:`labkit.timing.bench.Timing`
(median and IQR of the slowest rank's time per call); durations print
through :func:`labkit.core.units.format_duration`, rates as "12.3 GB/s" and
"21,300 samples/s", so the notebooks' sanitize file can mask them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from labkit.core.results import JsonRecord
from labkit.core.units import (
    duration_unit,
    format_bytes,
    format_duration,
    format_samples_per_s,
    three_digits,
)
from labkit.core.validate import check_positive_int
from labkit.timing.bench import Timing


def _timing(samples: Sequence[float], label: str, device: str) -> Timing:
    return Timing(samples_ms=tuple(samples), label=label, device=device, method="host clock")


def _timing_text(timing: Timing) -> str:
    """A timing as "median 4.12 ms (IQR 0.31 ms, n=20)", flagged when noisy, like ``Timing``."""
    unit = duration_unit(timing.median_ms)
    text = (
        f"median {format_duration(timing.median_ms)} (IQR "
        f"{format_duration(timing.iqr_ms, unit)}, n={timing.n})"
    )
    if timing.noisy:
        text += f" [noisy: IQR is {timing.relative_spread * 100:.0f}% of the median]"
    return text


def plural(n: int, word: str) -> str:
    if n == 1:
        return f"{n} {word}"
    return f"{n} {word}es" if word.endswith(("s", "ch", "sh", "x")) else f"{n} {word}s"


def _where(backend: str, devices: Sequence[str]) -> str:
    unique = sorted(set(devices))
    return f"{backend} on {', '.join(unique)}"


@dataclass(frozen=True)
class DdpRun(JsonRecord):
    """One DDP training run: step times with and without the all-reduce, throughput, checks.

    ``step`` times a full training step (forward, backward with DDP's
    gradient all-reduce, optimizer step); ``local_step`` the same work under
    ``no_sync()``; their difference (:attr:`comm_overhead_ms`) is everything
    DDP's gradient synchronization adds (the no_sync step runs through DDP's
    wrapper too): its reducer (hooks, copies into and out of the buckets), the
    contention of its communication threads with the compute, and whatever
    of the all-reduce the backward pass did not hide. A profile of the step
    (``trace_path``, :func:`labkit.scaling.ddp_trace.ddp_breakdown`) splits it.
    ``allreduce`` times one all-reduce of all gradients at once, outside
    training. ``params_identical`` says whether every rank ended with
    bitwise the same parameters (equal SHA-256 ``checksums``).

    Compare ``step`` with :attr:`no_overlap_ms` (local step + all-reduce):
    on GPUs, NCCL's kernels run beside the backward pass's, so a step can
    take less than the sum. On CPUs, gloo's communication threads compete
    with the backward pass for the same cores, so overlapping them can cost
    more than running them one after the other.
    """

    nproc: int
    backend: str
    devices: tuple[str, ...]
    hosts: tuple[str, ...]
    nnodes: int
    threads_per_proc: int
    width: int
    depth: int
    parameter_count: int
    gradient_bytes: int
    batch_per_rank: int
    accum_steps: int
    global_batch: int
    step: Timing
    local_step: Timing
    allreduce: Timing
    samples_per_s: float
    loss_first: float
    loss_last: float
    params_identical: bool
    checksums: tuple[str, ...]
    wall_s: float
    command: str = ""
    bucket_cap_mb: float | None = None  # None: DDP's default
    trace_path: str | None = None

    json_extra = ("comm_overhead_ms", "no_overlap_ms")

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, wall_s: float = 0.0, command: str = ""
    ) -> DdpRun:
        """Build from the JSON :mod:`labkit.scaling.train_ddp` writes (rank 0's ``--out``)."""
        device = data["devices"][0]
        step = _timing(data["step_ms"], "DDP step", device)
        return cls(
            nproc=int(data["world_size"]),
            backend=str(data["backend"]),
            devices=tuple(data["devices"]),
            hosts=tuple(data["hosts"]),
            nnodes=int(data.get("nnodes", 1)),
            threads_per_proc=int(max(data["threads_per_rank"])),
            width=int(data["width"]),
            depth=int(data["depth"]),
            parameter_count=int(data["parameter_count"]),
            gradient_bytes=int(data["gradient_bytes"]),
            batch_per_rank=int(data["batch_per_rank"]),
            accum_steps=int(data["accum_steps"]),
            global_batch=int(data["global_batch"]),
            step=step,
            local_step=_timing(data["local_step_ms"], "local step (no_sync)", device),
            allreduce=_timing(data["allreduce_ms"], "all-reduce of all gradients", device),
            samples_per_s=data["global_batch"] / (step.median_ms / 1e3),
            loss_first=float(data["loss_first"]),
            loss_last=float(data["loss_last"]),
            params_identical=bool(data["params_identical"]),
            checksums=tuple(data["checksums"]),
            wall_s=float(wall_s),
            command=command,
            bucket_cap_mb=(
                None if data.get("bucket_cap_mb") is None else float(data["bucket_cap_mb"])
            ),
            trace_path=data.get("trace"),
        )

    @property
    def comm_overhead_ms(self) -> float:
        """Median step minus median local step: DDP's whole overhead per step (may be < 0 in noise)."""
        return self.step.median_ms - self.local_step.median_ms

    @property
    def no_overlap_ms(self) -> float:
        """Median local step plus median all-reduce of all gradients: a step with no overlap."""
        return self.local_step.median_ms + self.allreduce.median_ms

    @property
    def comm_fraction(self) -> float:
        """The share of a step DDP's overhead takes (0 when within noise)."""
        return max(0.0, self.comm_overhead_ms) / self.step.median_ms

    @property
    def device(self) -> str:
        return self.devices[0]

    def _head(self) -> str:
        procs = plural(self.nproc, "process")
        nodes = f" on {self.nnodes} nodes" if self.nnodes > 1 else ""
        return (
            f"DDP training, {procs}{nodes} × {plural(self.threads_per_proc, 'thread')} "
            f"({_where(self.backend, self.devices)}), MLP width {self.width}: "
            f"{self.parameter_count:,} parameters, {format_bytes(self.gradient_bytes)} of "
            "gradients"
        )

    def __str__(self) -> str:
        micro = plural(self.accum_steps, "micro-batch")
        lines = [
            self._head(),
            f"  global batch {self.global_batch:,} = {plural(self.nproc, 'rank')} × "
            f"{self.batch_per_rank} samples × {micro}",
            f"  {'step with all-reduce:':<31}{_timing_text(self.step)}",
            f"  {'step without it (no_sync):':<31}{_timing_text(self.local_step)}",
            f"  {'DDP overhead (step - no_sync):':<31}"
            f"{format_duration(max(0.0, self.comm_overhead_ms))} ({self.comm_fraction:.0%} of the step)",
            f"  {'one all-reduce of all grads:':<31}{_timing_text(self.allreduce)}",
            f"  {'no_sync step + all-reduce:':<31}{format_duration(self.no_overlap_ms)} (a step "
            "that overlapped nothing)",
            f"  throughput: {format_samples_per_s(self.samples_per_s, round_to_3=True)}",
            f"  loss {self.loss_first:.4f} at the first step, loss {self.loss_last:.4f} at the last",
            "  replicas identical after training: "
            + (
                "yes (the same SHA-256 of the parameters on every rank)"
                if self.params_identical
                else "NO: the ranks' parameters differ"
            ),
        ]
        return "\n".join(lines)

    def summary(self) -> list[str]:
        """Lines for a GPU recording: what was run and what it measured."""
        dev = self.device
        return [
            f"{dev}: {self._head()}",
            f"{dev}: step {format_duration(self.step.median_ms)}, without all-reduce "
            f"{format_duration(self.local_step.median_ms)}, {format_samples_per_s(self.samples_per_s, round_to_3=True)}",
            f"{dev}: one all-reduce of {format_bytes(self.gradient_bytes)}: "
            f"{format_duration(self.allreduce.median_ms)}; replicas identical: "
            f"{'yes' if self.params_identical else 'NO'}",
        ]


# --------------------------------------------------------------------------- weak scaling


@dataclass(frozen=True)
class ScalingRow(JsonRecord):
    """One process count: its run, its speedup and efficiency against the baseline."""

    nproc: int
    run: DdpRun
    speedup: float  # samples/s ÷ the baseline's samples/s
    efficiency: float  # speedup ÷ (nproc ÷ baseline nproc): 1.0 is perfect scaling


@dataclass(frozen=True)
class Scaling(JsonRecord):
    """Weak scaling: the same batch per process, more processes; how close to N× the throughput.

    ``efficiency = throughput_N / (N × throughput_1)`` (relative to the
    smallest process count measured, when that is not 1).
    """

    rows: tuple[ScalingRow, ...]

    @classmethod
    def from_runs(cls, runs: Sequence[DdpRun]) -> Scaling:
        runs = sorted(runs, key=lambda r: r.nproc)
        base = runs[0]
        rows = []
        for run in runs:
            speedup = run.samples_per_s / base.samples_per_s
            rows.append(ScalingRow(run.nproc, run, speedup, speedup / (run.nproc / base.nproc)))
        return cls(tuple(rows))

    @property
    def baseline(self) -> DdpRun:
        return self.rows[0].run

    def row(self, nproc: int) -> ScalingRow:
        for r in self.rows:
            if r.nproc == nproc:
                return r
        raise KeyError(f"no run with {nproc} processes; measured: {[r.nproc for r in self.rows]}")

    def efficiency(self, nproc: int) -> float:
        return self.row(nproc).efficiency

    def _head(self) -> str:
        b = self.baseline
        return (
            f"Weak scaling of DDP training ({_where(b.backend, b.devices)}, "
            f"{plural(b.threads_per_proc, 'thread')} per process, {b.batch_per_rank} samples "
            f"per process per step, MLP width {b.width}: {b.parameter_count:,} parameters)"
        )

    def _line(self, r: ScalingRow, width: int) -> str:
        label = f"{plural(r.nproc, 'process')}:"
        text = (
            f"{label:<{width}} step median {format_duration(r.run.step.median_ms)}, "
            f"{format_samples_per_s(r.run.samples_per_s, round_to_3=True)}"
        )
        if r.run is not self.baseline:
            text += f", speedup {r.speedup:.2f}×, efficiency {r.efficiency:.0%}"
        return text

    def __str__(self) -> str:
        width = max(len(f"{plural(r.nproc, 'process')}:") for r in self.rows) + 1
        base = self.baseline.nproc
        ideal = "N" if base == 1 else f"N/{base}"
        lines = [self._head()]
        lines += [f"  {self._line(r, width)}" for r in self.rows]
        lines.append(
            f"Efficiency = samples/s with N processes ÷ ({ideal} × samples/s with {base}); "
            "100% would be perfect scaling."
        )
        return "\n".join(lines)

    def summary(self) -> list[str]:
        dev = self.baseline.device
        return [f"{dev}: {self._head()}"] + [f"{dev}: {self._line(r, 0)}" for r in self.rows]


# --------------------------------------------------------------------------- all-reduce sweep


def bus_bandwidth_factor(nproc: int) -> float:
    """nccl-tests' all-reduce correction 2(n-1)/n: busbw = algbw × this (0 for one rank).

    An all-reduce of S bytes over n ranks that reduce among themselves (a ring)
    moves at least 2(n-1)/n × S bytes through each rank's link, so busbw can be
    compared with a link's peak whatever n is (NVIDIA/nccl-tests,
    doc/PERFORMANCE.md); where switches reduce (NVLS, CollNet) each rank sends
    less, and busbw can exceed the link's rate.
    """
    nproc = check_positive_int("nproc", nproc)
    return 2 * (nproc - 1) / nproc


@dataclass(frozen=True)
class AllreduceRow(JsonRecord):
    """One message size: the all-reduce's time and the bandwidths it implies (GB = 1e9 bytes)."""

    size_bytes: int
    timing: Timing
    algbw_gb_per_s: float  # size / time
    busbw_gb_per_s: float  # algbw × 2(n-1)/n

    json_extra = ("median_ms",)

    @property
    def median_ms(self) -> float:
        return self.timing.median_ms


@dataclass(frozen=True)
class AllreduceCost(JsonRecord):
    """All-reduce time and bandwidth against message size, on ``nproc`` processes."""

    nproc: int
    backend: str
    devices: tuple[str, ...]
    reps: int
    rows: tuple[AllreduceRow, ...]
    skipped_bytes: tuple[int, ...] = ()

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, skipped_bytes: Sequence[int] = ()
    ) -> AllreduceCost:
        """Build from the JSON :mod:`labkit.scaling.allreduce` writes."""
        n = int(data["world_size"])
        device = data["devices"][0]
        factor = bus_bandwidth_factor(n)
        rows = []
        for entry in data["rows"]:
            size = int(entry["size_bytes"])
            timing = _timing(entry["samples_ms"], f"all-reduce {format_bytes(size)}", device)
            algbw = size / (timing.median_ms / 1e3) / 1e9 if timing.median_ms > 0 else math.inf
            rows.append(AllreduceRow(size, timing, algbw, algbw * factor))
        return cls(
            n,
            str(data["backend"]),
            tuple(data["devices"]),
            int(data["reps"]),
            tuple(rows),
            tuple(skipped_bytes),
        )

    @property
    def device(self) -> str:
        return self.devices[0]

    def _head(self) -> str:
        return (
            f"All-reduce (sum of float32) across {plural(self.nproc, 'process')}, "
            f"{_where(self.backend, self.devices)}; median of {self.reps} calls, slowest rank"
        )

    def __str__(self) -> str:
        table = [("message", "time (median)", "algbw", "busbw")]
        for r in self.rows:
            table.append(
                (
                    format_bytes(r.size_bytes),
                    format_duration(r.median_ms),
                    f"{three_digits(r.algbw_gb_per_s)} GB/s",
                    f"{three_digits(r.busbw_gb_per_s)} GB/s",
                )
            )
        widths = [max(len(row[i]) for row in table) for i in range(4)]
        lines = [self._head()]
        lines += [
            "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
            for row in table
        ]
        lines.append(
            f"algbw = size / time; busbw = algbw × 2(n-1)/n = algbw × "
            f"{bus_bandwidth_factor(self.nproc):g} here: the bytes each rank's link "
            "carries per second (nccl-tests' definition), comparable with a link's peak."
        )
        if self.skipped_bytes:
            lines.append(
                f"Skipped for lack of memory: {', '.join(format_bytes(s) for s in self.skipped_bytes)}."
            )
        return "\n".join(lines)

    def summary(self) -> list[str]:
        dev = self.device
        return [f"{dev}: {self._head()}"] + [
            f"{dev}: {format_bytes(r.size_bytes)}: {format_duration(r.median_ms)}, "
            f"busbw {three_digits(r.busbw_gb_per_s)} GB/s"
            for r in self.rows
        ]


# --------------------------------------------------------------------------- model size


@dataclass(frozen=True)
class ModelSizeComm(JsonRecord):
    """DDP runs at several widths: how the all-reduce in a step grows with the parameter count."""

    runs: tuple[DdpRun, ...]

    def _head(self) -> str:
        b = self.runs[0]
        return (
            f"All-reduce cost against model size: DDP on {plural(b.nproc, 'process')} "
            f"({_where(b.backend, b.devices)}), {b.batch_per_rank} samples per process"
        )

    def __str__(self) -> str:
        table = [
            (
                "width",
                "parameters",
                "gradients",
                "step",
                "no_sync step",
                "DDP overhead",
                "one all-reduce",
            )
        ]
        for r in self.runs:
            table.append(
                (
                    str(r.width),
                    f"{r.parameter_count:,}",
                    format_bytes(r.gradient_bytes),
                    format_duration(r.step.median_ms),
                    format_duration(r.local_step.median_ms),
                    format_duration(max(0.0, r.comm_overhead_ms)),
                    format_duration(r.allreduce.median_ms),
                )
            )
        widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
        lines = [self._head()]
        lines += [
            "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
            for row in table
        ]
        lines.append(
            "DDP overhead = step - no_sync step (medians, floored at 0): the reducer, its "
            "threads' contention with the compute, and the all-reduce time backward did not hide."
        )
        return "\n".join(lines)

    def summary(self) -> list[str]:
        dev = self.runs[0].device
        return [f"{dev}: {self._head()}"] + [
            f"{dev}: width {r.width} ({r.parameter_count:,} parameters): step "
            f"{format_duration(r.step.median_ms)}, DDP overhead "
            f"{format_duration(max(0.0, r.comm_overhead_ms))}, one all-reduce "
            f"{format_duration(r.allreduce.median_ms)}"
            for r in self.runs
        ]
