"""Notebook 03: is an operation limited by arithmetic or by memory traffic?

- :mod:`labkit.roofline.model`: FLOPs and bytes of each op (:class:`OpCost`) and the :class:`Roofline`;
- :mod:`labkit.roofline.measure`: the roofs measured on this machine, and real ops placed under them;
- :mod:`labkit.roofline.published`: cited GPU peaks and the ridge points they imply.
"""

from __future__ import annotations

from labkit.roofline.measure import (
    OpMeasurement,
    PeakCompute,
    RooflinePlacement,
    dram_elements,
    measure_op,
    measure_peak_compute,
    measure_roofline,
    place,
    placement_table,
    tf32_mode,
)
from labkit.roofline.model import (
    OpCost,
    Roofline,
    add_cost,
    conv2d_cost,
    matmul_cost,
    ridge_position,
    separate_gemv_gflop_per_s,
    sum_cost,
    weight_reuse,
)
from labkit.roofline.plots import plot_roofline
from labkit.roofline.published import (
    RIDGE_GPU,
    PublishedPeak,
    compare_ridge,
    published_ridges,
)

__all__ = [
    "RIDGE_GPU",
    "OpCost",
    "OpMeasurement",
    "PeakCompute",
    "PublishedPeak",
    "Roofline",
    "RooflinePlacement",
    "add_cost",
    "compare_ridge",
    "conv2d_cost",
    "dram_elements",
    "matmul_cost",
    "measure_op",
    "measure_peak_compute",
    "measure_roofline",
    "place",
    "placement_table",
    "plot_roofline",
    "published_ridges",
    "ridge_position",
    "separate_gemv_gflop_per_s",
    "sum_cost",
    "tf32_mode",
    "weight_reuse",
]
