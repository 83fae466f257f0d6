"""Notebook 02: how many GB/s the memory system delivers, and what the access pattern costs.

- :mod:`labkit.bandwidth.stream`: STREAM-style probes (copy, scale, add, triad) and the peak;
- :mod:`labkit.bandwidth.sweep`: the size sweep, from L1-sized to DRAM-sized arrays;
- :mod:`labkit.bandwidth.strided`: strided reads;
- :mod:`labkit.bandwidth.layout`: what a transposed matrix costs (``.contiguous()``, a matmul);
- :mod:`labkit.bandwidth.transfers`: host ↔ device copies and their overlap with compute;
- :mod:`labkit.bandwidth.pipeline`: copy in → compute → copy back, measured.
"""

from __future__ import annotations

from labkit.bandwidth.layout import LayoutCosts, layout_costs
from labkit.bandwidth.overlap import copy_compute_overlap
from labkit.bandwidth.pipeline import PipelineBreakdown, flush_reading, pipeline_breakdown
from labkit.bandwidth.plots import plot_pipeline, plot_stream_sweep, plot_strided
from labkit.bandwidth.sizes import dram_cache_note
from labkit.bandwidth.stream import KERNELS, BandwidthResult, peak_bandwidth, stream_kernel
from labkit.bandwidth.strided import StridedResult, strided_read
from labkit.bandwidth.sweep import StreamSweep, stream_sweep
from labkit.bandwidth.transfers import device_copy, host_device_sweep, theoretical_peak_gb_per_s

__all__ = [
    "BandwidthResult",
    "KERNELS",
    "LayoutCosts",
    "PipelineBreakdown",
    "StreamSweep",
    "StridedResult",
    "copy_compute_overlap",
    "device_copy",
    "dram_cache_note",
    "flush_reading",
    "host_device_sweep",
    "layout_costs",
    "peak_bandwidth",
    "pipeline_breakdown",
    "plot_pipeline",
    "plot_stream_sweep",
    "plot_strided",
    "stream_kernel",
    "stream_sweep",
    "strided_read",
    "theoretical_peak_gb_per_s",
]
