"""Profiling (notebook 09): where a training step's time goes, and how to see it.

- :mod:`~labkit.profiling.torch_profile`: :func:`profile_training` runs the
  course CNN under ``torch.profiler`` and returns the operator table, the
  phase breakdown and the path of a Chrome/Perfetto trace.
- :mod:`~labkit.profiling.stalls`: :func:`find_sync_points` finds the calls
  that make the host wait for the device (``loss.item()``) in a trace, and
  :func:`time_sync_stall` times what they cost.
- :mod:`~labkit.profiling.trace`: :func:`summarize_trace` reads a trace file
  back (proof that it is complete and what it holds).
- :mod:`~labkit.profiling.tf_profile`: :func:`profile_keras_training`, the
  TensorFlow profiler's trace of a Keras CNN, read offline.
- :mod:`~labkit.profiling.nsight`: the Nsight Systems and Nsight Compute
  commands, and whether they are installed.

Importing this package imports no framework: each function imports torch or
TensorFlow when it runs, and writes its files to a new temporary folder
unless told otherwise, never into the working directory (the course folder).
"""

from __future__ import annotations

from labkit.profiling.nsight import NsightTools, NsysRun, find_nsight, nsight_commands, run_nsys
from labkit.profiling.plots import plot_phases
from labkit.profiling.stalls import (
    SYNC_OPS,
    SyncPoint,
    SyncReport,
    SyncStallTiming,
    find_sync_points,
    time_sync_stall,
)
from labkit.profiling.tf_profile import (
    TfOpStat,
    TfProfile,
    XPlaneSummary,
    keras_cnn,
    profile_keras_training,
    read_xplane,
)
from labkit.profiling.torch_profile import profile_training
from labkit.profiling.torch_results import PHASES, STABLE_OPS, OpStat, PhaseStat, TorchProfile
from labkit.profiling.trace import TraceEventStat, TraceSummary, read_trace, summarize_trace

__all__ = [
    "PHASES",
    "STABLE_OPS",
    "SYNC_OPS",
    "NsightTools",
    "NsysRun",
    "OpStat",
    "PhaseStat",
    "SyncPoint",
    "SyncReport",
    "SyncStallTiming",
    "TfOpStat",
    "TfProfile",
    "TorchProfile",
    "TraceEventStat",
    "TraceSummary",
    "XPlaneSummary",
    "find_nsight",
    "find_sync_points",
    "keras_cnn",
    "nsight_commands",
    "plot_phases",
    "profile_keras_training",
    "profile_training",
    "read_trace",
    "read_xplane",
    "run_nsys",
    "summarize_trace",
    "time_sync_stall",
]
