"""Notebook 01: throughput against latency.

- :mod:`labkit.parallelism.sweep`: size sweeps across backends and thread counts;
- :mod:`labkit.parallelism.amdahl`: Amdahl's law with a measured serial fraction;
- :mod:`labkit.parallelism.crossover`: a GPU's fixed cost per kernel and where it overtakes the CPU;
- :mod:`labkit.parallelism.shares`: the best rates as shares of the CPU's theoretical peak;
- :mod:`labkit.parallelism.grain`: ATen's default grain size, below which ``a + b`` runs on one thread.
"""

from __future__ import annotations

from labkit.parallelism.amdahl import ThreadScaling, amdahl_speedup, measure_thread_scaling
from labkit.parallelism.crossover import launch_overhead
from labkit.parallelism.grain import GRAIN_SIZE, GrainSweep, grain_sweep
from labkit.parallelism.plots import plot_amdahl, plot_size_sweep
from labkit.parallelism.shares import PeakShares, peak_report, peak_shares, python_gap
from labkit.parallelism.sweep import SizeSweep, sweep_add, sweep_matmul
from labkit.parallelism.threads import cpu_threads, torch_threads

__all__ = [
    "GRAIN_SIZE",
    "GrainSweep",
    "PeakShares",
    "SizeSweep",
    "ThreadScaling",
    "amdahl_speedup",
    "cpu_threads",
    "grain_sweep",
    "launch_overhead",
    "measure_thread_scaling",
    "peak_report",
    "peak_shares",
    "plot_amdahl",
    "plot_size_sweep",
    "python_gap",
    "sweep_add",
    "sweep_matmul",
    "torch_threads",
]
