"""Notebook 08: feeding the device, and the batch size.

- :mod:`labkit.batching.sweep`: samples/s against batch size, for training and inference;
- :mod:`labkit.batching.largest`: the largest batch that fits, measured and extrapolated;
- :mod:`labkit.batching.loaders`: is the device waiting for data? DataLoader and tf.data.
"""

from __future__ import annotations

from labkit.batching.largest import largest_batch_cpu, largest_batch_cuda
from labkit.batching.loaders import compare_loaders
from labkit.batching.plots import plot_batch_sweep, plot_loader_comparison
from labkit.batching.sweep import BatchSweep, batch_sweep, latency_budget_batch
from labkit.batching.tf_data import compare_tf_pipelines

__all__ = [
    "BatchSweep",
    "batch_sweep",
    "compare_loaders",
    "compare_tf_pipelines",
    "largest_batch_cpu",
    "largest_batch_cuda",
    "latency_budget_batch",
    "plot_batch_sweep",
    "plot_loader_comparison",
]
