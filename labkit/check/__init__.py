"""Automatic checks for the notebooks' exercises.

Each checker compares a learner's answer with a reference, with a tolerance,
and returns a :class:`CheckResult` whose text says what to look at when the
answer is off: a check that only says "wrong" teaches nothing. An answer left
as ``None`` or ``...`` (the student edition's blank) is "not solved yet",
never an exception, so a student notebook still runs top to bottom.

``assert check.some_exercise(answer)`` works too (for nbgrader autograding):
a result is truthy only when the answer passed.
"""

from labkit.check.bandwidth import (
    HBM_GB_PER_S,
    PCIE_GEN5_X16_GB_PER_S,
    host_link_vs_hbm,
    stream_bytes,
)
from labkit.check.kernels import bank_conflicts, occupancy, sector_efficiency, strided_copy_rate
from labkit.check.models import (
    SYNC_LINES,
    cnn_head_params,
    cnn_in_features,
    cnn_silent_batch,
    rnn_param_counts,
    sync_points,
)
from labkit.check.parallelism import (
    H100_SMS,
    H100_THREADS_PER_SM,
    amdahl_prediction,
    threads_to_fill,
    tile_waves,
)
from labkit.check.pipelines import knee_batch, largest_batch, loader_workers
from labkit.check.profiling import (
    TIMELINE_KERNELS_MS,
    TIMELINE_STEP_MS,
    idle_fraction,
    top_operator,
)
from labkit.check.result import CheckResult
from labkit.check.roofline import (
    intensity_exercise_op,
    roofline_exercise_ops,
    roofline_intensity,
    roofline_prediction,
)
from labkit.check.scaling import accumulation_steps, bus_bandwidth, scaling_efficiency
from labkit.check.setup import (
    H100_BUS_WIDTH_BITS,
    H100_MEMORY_CLOCK_KHZ,
    TIMING_SAMPLES_MS,
    calls_per_sample,
    elementwise_time,
    on_best_device,
    peak_bandwidth,
    summary_statistics,
)
from labkit.check.transformers import attention_fits, decode_ceiling, kv_cache
from labkit.check.triton_kernels import interpreter_time, tile_reuse, triton_grid

__all__ = [
    "interpreter_time",
    "tile_reuse",
    "triton_grid",
    "attention_fits",
    "decode_ceiling",
    "kv_cache",
    "TIMELINE_KERNELS_MS",
    "TIMELINE_STEP_MS",
    "accumulation_steps",
    "bank_conflicts",
    "bus_bandwidth",
    "idle_fraction",
    "knee_batch",
    "largest_batch",
    "loader_workers",
    "occupancy",
    "scaling_efficiency",
    "sector_efficiency",
    "strided_copy_rate",
    "top_operator",
    "H100_BUS_WIDTH_BITS",
    "H100_MEMORY_CLOCK_KHZ",
    "H100_SMS",
    "H100_THREADS_PER_SM",
    "HBM_GB_PER_S",
    "PCIE_GEN5_X16_GB_PER_S",
    "TIMING_SAMPLES_MS",
    "SYNC_LINES",
    "CheckResult",
    "cnn_head_params",
    "cnn_in_features",
    "cnn_silent_batch",
    "rnn_param_counts",
    "sync_points",
    "amdahl_prediction",
    "calls_per_sample",
    "elementwise_time",
    "on_best_device",
    "peak_bandwidth",
    "intensity_exercise_op",
    "roofline_exercise_ops",
    "roofline_intensity",
    "roofline_prediction",
    "host_link_vs_hbm",
    "stream_bytes",
    "summary_statistics",
    "threads_to_fill",
    "tile_waves",
]
