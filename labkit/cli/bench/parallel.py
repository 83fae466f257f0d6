"""``labkit bench parallel``: size sweeps, the GPU's launch overhead and the CPU/GPU crossover.

Notebook 01's lesson is that a GPU is a throughput machine with a fixed cost
per kernel: below some size the CPU wins, above it the GPU does. This
command measures the whole argument in one run, so the numbers belong
together: ``a + b`` and an n×n matmul swept over sizes on every backend here
(:mod:`labkit.parallelism.sweep`, "torch-cuda" included where a GPU exists), the launch
overhead of one tiny kernel (:func:`labkit.parallelism.crossover.launch_overhead`), and
the sizes where the GPU overtakes all the CPU's threads.

``--record`` on a GPU machine stores the result as the ``parallelism``
recording that CPU-only learners see through ``labkit.require_gpu``.
``--quick`` runs toy sizes with tiny time budgets: it checks that the
command works (the tests use it), and its numbers mean little.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from labkit.core.units import format_gflop_per_s, format_rate, round3
from labkit.parallelism.crossover import LaunchOverhead
from labkit.parallelism.sweep import BackendSweep, SizeSweep

#: The recording ``--record`` writes.
REFERENCE_NAME = "parallelism"

#: ``--quick``: sizes that finish in about a second on a 2-core laptop.
QUICK_SIZES: dict[str, tuple[int, ...]] = {"add": (1, 256, 65_536), "matmul": (1, 16, 64)}
QUICK_BUDGET_MS: dict[str, float] = {"warmup_ms": 0.0, "rep_ms": 2.0}

_CPU_FOR_CROSSOVER = "torch-all-threads"
_GPU = "torch-cuda"


@dataclass(frozen=True)
class ParallelResults:
    """Both sweeps and, with a GPU, the launch overhead; ``quick`` marks toy sizes."""

    add: SizeSweep
    matmul: SizeSweep
    launch: LaunchOverhead | None
    quick: bool = False

    @property
    def sweeps(self) -> tuple[SizeSweep, SizeSweep]:
        return (self.add, self.matmul)

    @property
    def has_gpu(self) -> bool:
        return self.add.has_backend(_GPU) and self.matmul.has_backend(_GPU)

    def crossover_n(self, op: str) -> float | None:
        """Where the GPU overtakes torch on all CPU threads for ``op``; None without a GPU or a win."""
        sweep = self._sweep(op)
        if not (sweep.has_backend(_GPU) and sweep.has_backend(_CPU_FOR_CROSSOVER)):
            return None
        return sweep.crossover(_CPU_FOR_CROSSOVER, _GPU)

    def _sweep(self, op: str) -> SizeSweep:
        if op not in ("add", "matmul"):
            raise ValueError(f"op must be 'add' or 'matmul', got {op!r}")
        return self.add if op == "add" else self.matmul

    def summary(self) -> list[str]:
        """Lines for people: launch overhead, crossovers and peak throughputs (the recording's)."""
        lines = [
            f"GPU {self.launch}"
            if self.launch is not None
            else "GPU launch overhead and crossover: not measured (no CUDA GPU here; "
            "`labkit doctor` shows what is)"
        ]
        for sweep in self.sweeps:
            what = _what(sweep)
            if sweep.has_backend(_GPU) and sweep.has_backend(_CPU_FOR_CROSSOVER):
                cpu = sweep.backend(_CPU_FOR_CROSSOVER).label
                n = self.crossover_n(sweep.op)
                lines.append(
                    f"{what}: the GPU is not faster than the CPU ({cpu}) at any size measured, "
                    f"up to n = {max(sweep.sizes):,}"
                    if n is None
                    else f"{what}: the GPU is faster than the CPU ({cpu}) from n ≈ {round3(n):,} on"
                )
        for sweep in self.sweeps:
            cpu_best = _best(sweep, [b for b in sweep.backends if b.device == "cpu"])
            gpu_best = _best(sweep, [b for b in sweep.backends if b.device != "cpu"])
            parts = [f"{who} {rate} at n = {n:,}" for who, rate, n in (gpu_best, cpu_best) if who]
            if parts:
                lines.append(f"{_what(sweep)} peak: {'; '.join(parts)}")
        if self.quick:
            lines.append("(--quick: toy sizes and tiny time budgets; the numbers mean little)")
        return lines

    def to_dict(self) -> dict[str, Any]:
        """The structured numbers: per backend [size, median_ms] pairs, overhead, crossovers."""
        return {
            "quick": self.quick,
            "launch_overhead": None
            if self.launch is None
            else {
                "device": self.launch.device,
                "kernel_us": self.launch.kernel_us,
                "round_trip_us": self.launch.round_trip_us,
            },
            "crossover_n": {s.op: self.crossover_n(s.op) for s in self.sweeps},
            "add": sweep_to_dict(self.add),
            "matmul": sweep_to_dict(self.matmul),
        }

    def __str__(self) -> str:
        summary = ["Summary:", *(f"  {line}" for line in self.summary())]
        return "\n\n".join([str(self.add), str(self.matmul), "\n".join(summary)])


def _what(sweep: SizeSweep) -> str:
    return f"{'a + b' if sweep.op == 'add' else 'n×n matmul'} ({sweep.dtype})"


def _rate(sweep: SizeSweep, value: float) -> str:
    if sweep.op == "matmul":
        return format_gflop_per_s(value)
    return format_rate(value, "elements/s")


def _best(sweep: SizeSweep, backends: list[BackendSweep]) -> tuple[str, str, int]:
    """(label, rate, size) of the highest throughput among ``backends``; ("", "", 0) if none."""
    best: tuple[float, str, int] | None = None
    for backend in backends:
        for point in backend.points:
            value = getattr(point, sweep.metric)
            if math.isfinite(value) and (best is None or value > best[0]):
                best = (value, backend.label, point.size)
    if best is None:
        return ("", "", 0)
    return (best[1], _rate(sweep, best[0]), best[2])


def sweep_to_dict(sweep: SizeSweep) -> dict[str, Any]:
    """One sweep as JSON: per backend its label, device, skipped sizes and [size, median_ms] pairs."""
    return {
        "op": sweep.op,
        "dtype": sweep.dtype,
        "sizes": list(sweep.sizes),
        "backends": {
            b.backend: {
                "label": b.label,
                "device": b.device,
                "points": [[p.size, p.median_ms] for p in b.points],
                "skipped": list(b.skipped),
            }
            for b in sweep.backends
        },
    }


def measure(quick: bool = False, show_progress: bool | None = None) -> ParallelResults:
    """Run both sweeps on every backend here and, with a GPU, the launch overhead."""
    from labkit.machine.gpu import has_gpu
    from labkit.parallelism.crossover import launch_overhead
    from labkit.parallelism.sweep import sweep_add, sweep_matmul

    options: dict[str, Any] = dict(QUICK_BUDGET_MS) if quick else {}
    add = sweep_add(QUICK_SIZES["add"] if quick else None, show_progress=show_progress, **options)
    matmul = sweep_matmul(
        QUICK_SIZES["matmul"] if quick else None, show_progress=show_progress, **options
    )
    launch = None
    if has_gpu():
        quick_budget: dict[str, Any] = {"warmup_ms": 1.0, "rep_ms": 5.0}
        launch = launch_overhead(**(quick_budget if quick else {}))
    return ParallelResults(add=add, matmul=matmul, launch=launch, quick=quick)


def run_parallel_benchmark(as_json: bool = False, record: bool = False, quick: bool = False) -> int:
    """``labkit bench parallel``; returns the exit code.

    ``record`` without a GPU prints one line, measures and writes nothing,
    and returns 0. Without torch it prints the install command and returns
    1. ``record`` with ``quick`` is a UsageError (exit 2): a recording is
    what learners are shown as "measured on a real GPU", and toy sizes
    would misrepresent it.
    """
    from labkit.cli.bench.run import preflight, record_and_report

    early = preflight("labkit bench parallel", record=record, quick=quick)
    if early is not None:
        return early
    results = measure(quick=quick)
    return record_and_report(
        "parallel",
        REFERENCE_NAME,
        results,
        as_json=as_json,
        record=record and results.launch is not None,
    )
