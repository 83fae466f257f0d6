"""Notebook 01's GPU cell without a GPU: where a named GPU stops being launch-bound.

The model (notebook 01's): a GPU kernel costs a fixed launch, 5 to 20 µs of
CPU time [HTA documentation], plus its work: for an elementwise add of n
float32 values, 12n bytes at the memory bandwidth; for an n×n matmul, 2n³
FLOPs at the FP32 peak. Below the size where the work equals the launch, the
GPU's time is mostly the launch, and a CPU that finishes that size in a few
µs wins; the crossover with *this* CPU is where its measured time (the sweep
above) passes the GPU's line.
"""

from __future__ import annotations

from labkit.core.units import round3
from labkit.machine.prediction import GpuPrediction, by_id, spec_values
from labkit.machine.published import GpuSpec

REFERENCE_NAME = "parallelism"

#: HTA's launch cost (both ends), and the CUDA.jl graph figures: the same kernels with one launch.
FIGURES = (
    "kernel-launch-cpu-time-typical-low",
    "kernel-launch-cpu-time-typical-high",
    "cudajl-mlp16-eager",
    "cudajl-mlp16-graph",
)


def add_launch_bound_below(launch_us: float, gb_per_s: float) -> float:
    """The n at which an add's 12n bytes take as long as one launch: 12n / B = launch."""
    return launch_us * 1e-6 * gb_per_s * 1e9 / 12


def matmul_launch_bound_below(launch_us: float, tflop_per_s: float) -> float:
    """The n at which an n×n matmul's 2n³ FLOPs take as long as one launch."""
    return (launch_us * 1e-6 * tflop_per_s * 1e12 / 2) ** (1 / 3)


def predict_parallelism(gpu: GpuSpec) -> GpuPrediction:
    """The sizes below which ``gpu`` spends most of an add's or a matmul's time launching it."""
    found, missing = spec_values(gpu, "memory_gb_per_s", "fp32_tflop_per_s")
    l2_mb = gpu.get("l2_mb")
    figures = by_id(FIGURES)
    low, high, eager, graph = (f.value for f in figures)
    model = [f"every kernel costs a launch of {low:g}-{high:g} µs of CPU time (published, below)"]
    verdicts = []
    if "memory_gb_per_s" in found:
        b = found["memory_gb_per_s"]
        n_low, n_high = (add_launch_bound_below(t, b) for t in (low, high))
        model.append(
            f"add of n float32 values: 12n bytes at {b:,.0f} GB/s take as long as the launch at "
            f"n ≈ {round3(n_low):,} to {round3(n_high):,}"
        )
        verdicts.append(
            f"at n ≈ {round3(n_low):,} an add on the {gpu.name} takes about {2 * low:g} µs, half "
            "of it the launch, and below it mostly the launch: the CPU wins at the sizes where "
            "its own time (your sweep above) is below the GPU's"
        )
        if l2_mb:
            verdicts.append(
                f"at n ≈ {round3(n_low):,} to {round3(n_high):,} the add's arrays are "
                f"{12 * n_low / 1e6:.3g} to {12 * n_high / 1e6:.3g} MB against a {l2_mb:g} MB L2: a "
                "sweep that reruns the same buffers can run them from the L2, faster than at the "
                "DRAM rate used here, which moves the crossing to larger n"
            )
    if "fp32_tflop_per_s" in found:
        p = found["fp32_tflop_per_s"]
        m_low, m_high = (matmul_launch_bound_below(t, p) for t in (low, high))
        model.append(
            f"n×n float32 matmul: 2n³ FLOPs at {p:g} TFLOP/s take as long as the launch at "
            f"n ≈ {m_low:.0f} to {m_high:.0f}"
        )
    verdicts.append(
        f"published: the same MLP's kernels launched one by one took {eager:g} µs, as one CUDA "
        f"graph (one launch) {graph:g} µs: {eager / graph:.1f}× faster; the launches removed "
        f"were at least {1 - graph / eager:.0%} of its time"
    )
    return GpuPrediction(
        REFERENCE_NAME, gpu, tuple(model), figures, tuple(verdicts), tuple(found), missing
    )
