"""Notebook 03: is an operation limited by arithmetic or by memory traffic?

- :mod:`labkit.roofline.model`: FLOPs and bytes of each op (:class:`OpCost`) and the :class:`Roofline`;
- :mod:`labkit.roofline.measure`: the roofs measured on this machine, and real ops placed under them.
"""

from __future__ import annotations

from labkit.roofline.measure import (
    OpMeasurement,
    PeakCompute,
    measure_op,
    measure_peak_compute,
    measure_roofline,
    tf32_mode,
)
from labkit.roofline.model import OpCost, Roofline, add_cost, conv2d_cost, matmul_cost, sum_cost
from labkit.roofline.plots import plot_roofline

__all__ = [
    "OpCost",
    "OpMeasurement",
    "PeakCompute",
    "Roofline",
    "add_cost",
    "conv2d_cost",
    "matmul_cost",
    "measure_op",
    "measure_peak_compute",
    "measure_roofline",
    "plot_roofline",
    "sum_cost",
    "tf32_mode",
]
