"""Notebook 07's CUDA kernels: the ``.cu`` sources, CuPy launchers and experiments, Kernel Tuner.

- :mod:`labkit.kernels.sources`: the shipped ``.cu`` files and which kernels
  (and macros) each holds.
- :mod:`labkit.kernels.cupy_run`: launch the kernels on CuPy arrays, verify
  them, and time them against the measured copy bandwidth or cuBLAS.
- :mod:`labkit.kernels.tuning`: Kernel Tuner searches on a GPU, and their
  replay from a recorded cache on any machine.

Importing this package imports no framework (CuPy, Kernel Tuner and
matplotlib are imported inside the functions that use them).
"""

from __future__ import annotations

from labkit.kernels.comparison import KernelComparison
from labkit.kernels.cupy_run import (
    KernelCompileError,
    NoCudaGpuError,
    WrongResultError,
    cupy_gpu_available,
    reduce_sum,
    sgemm,
    strided_copy,
    transpose,
)
from labkit.kernels.experiments import (
    block_size_sweep,
    reduction_versions,
    run_and_verify,
    sgemm_vs_cublas,
    stride_sweep,
    transpose_versions,
)
from labkit.kernels.plots import plot_kernels, plot_tuning
from labkit.kernels.sources import KERNELS, KernelSpec, kernel_path, kernel_source
from labkit.kernels.tuning import TuningReplay, best_configuration, replay

__all__ = [
    "KERNELS",
    "KernelCompileError",
    "KernelComparison",
    "KernelSpec",
    "NoCudaGpuError",
    "TuningReplay",
    "WrongResultError",
    "best_configuration",
    "block_size_sweep",
    "cupy_gpu_available",
    "kernel_path",
    "kernel_source",
    "plot_kernels",
    "plot_tuning",
    "reduce_sum",
    "reduction_versions",
    "replay",
    "run_and_verify",
    "sgemm",
    "sgemm_vs_cublas",
    "stride_sweep",
    "strided_copy",
    "transpose",
    "transpose_versions",
]
