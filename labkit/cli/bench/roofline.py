"""``labkit bench roofline``: measure each device's roofs and place standard ops under them.

Notebook 03 asks "is this op limited by arithmetic or by memory?" and answers
with a roofline (:mod:`labkit.roofline.model`). This command measures one per
device here (the CPU, and the GPU where there is one): compute roofs per
dtype from the best n×n matmul, the memory roof from the best of copy and
triad (:func:`labkit.roofline.measure.measure_peak_compute`,
:func:`labkit.bandwidth.stream.peak_bandwidth`). Then it runs a fixed set of
operations (:func:`standard_ops`) and reports for each its arithmetic
intensity, achieved GFLOP/s, the share of the rate its roof allows at that
intensity, and which roof binds.

``--record`` on a GPU machine stores the GPU's roofline as the ``roofline``
recording, with the structured numbers a notebook needs to plot it.
``--quick`` runs toy sizes with tiny time budgets: it checks that the
command works (the tests use it), and its numbers mean little.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from labkit.bandwidth.stream import BandwidthResult
from labkit.cli.bench.run import part_failed
from labkit.core.units import (
    format_bytes,
    format_duration,
    format_gb_per_s,
    format_gflop_per_s,
    three_digits,
)
from labkit.machine import reference as _reference
from labkit.roofline.measure import OpMeasurement, PeakCompute
from labkit.roofline.model import OpCost, Roofline, add_cost, conv2d_cost, matmul_cost, sum_cost

#: The recording ``--record`` writes.
REFERENCE_NAME = "roofline"

#: An op whose achieved rate is this far above its attainable rate gets a note.
_ABOVE_ROOF = 1.05


@dataclass(frozen=True)
class OpSpec:
    """One op of the standard set: its cost, the roof it is compared with, TF32 on or off."""

    op: OpCost
    roof_dtype: str
    tf32: bool = False


def standard_ops(on_gpu: bool, quick: bool = False) -> tuple[OpSpec, ...]:
    """The ops ``labkit bench roofline`` places under the roofline of a CPU or a GPU.

    Two memory-bound ops on 2^26 float32 elements (256 MiB per array, well
    past any cache), float32 matmuls whose intensity grows with n (4096 only
    on a GPU: on a laptop CPU it takes a second a call), a ResNet-style
    convolution, and on a GPU the same 4096 matmul with TF32, bfloat16 and
    float16 tensor cores. ``quick`` shrinks everything to toy sizes.
    """
    n = 2**16 if quick else 2**26
    sizes = (64, 128) if quick else ((256, 1024, 4096) if on_gpu else (256, 1024))
    conv = (1, 8, 16, 16, 8) if quick else (32, 64, 56, 56, 64)
    specs = [
        OpSpec(add_cost(n), "float32"),
        OpSpec(sum_cost(n), "float32"),
        *(OpSpec(matmul_cost(s, s, s), "float32") for s in sizes),
        OpSpec(conv2d_cost(*conv[:4], conv[4], 3, 3, padding=1), "float32"),
    ]
    if on_gpu:
        big = sizes[-1]
        specs.append(
            OpSpec(
                matmul_cost(big, big, big, name=f"matmul {big}×{big} @ {big}×{big} (TF32)"),
                "tf32",
                tf32=True,
            )
        )
        for dtype in ("bfloat16", "float16"):
            specs.append(OpSpec(matmul_cost(big, big, big, dtype), dtype))
    return tuple(specs)


@dataclass(frozen=True)
class PlacedOp:
    """A measured op and where it sits under its roof."""

    measurement: OpMeasurement
    roof_dtype: str
    attainable_gflop_per_s: float
    bound: str

    @property
    def fraction_of_attainable(self) -> float:
        """Achieved / attainable at this intensity; above 1 means the roof was measured low."""
        return self.measurement.gflop_per_s / self.attainable_gflop_per_s

    def summary(self) -> str:
        m = self.measurement
        line = (
            f"{m.op.name} ({m.op.dtype}): {three_digits(m.arithmetic_intensity)} FLOP/byte, "
            f"{_gflops(m.gflop_per_s)} = {self.fraction_of_attainable:.0%} of the "
            f"{_gflops(self.attainable_gflop_per_s)} attainable ({self.roof_dtype} roof): "
            f"{self.bound}"
        )
        if self.fraction_of_attainable > _ABOVE_ROOF:
            line += " (above its roof: the data came from cache, or the roof run was disturbed)"
        return line

    def to_dict(self) -> dict[str, Any]:
        """The recording's schema, which the notebooks' GPU cells read: a view, not the fields."""
        m = self.measurement
        return {
            "name": m.op.name,
            "kind": m.op.kind,
            "dtype": m.op.dtype,
            "roof_dtype": self.roof_dtype,
            "flops": m.op.flops,
            "bytes": m.op.bytes,
            "ai": m.arithmetic_intensity,
            "median_ms": m.median_ms,
            "gflop_per_s": m.gflop_per_s,
            "gb_per_s": m.gb_per_s,
            "attainable_gflop_per_s": self.attainable_gflop_per_s,
            "fraction_of_attainable": self.fraction_of_attainable,
            "bound": self.bound,
        }


def _gflops(value: float) -> str:
    return format_gflop_per_s(value) if math.isfinite(value) else "too fast to time"


@dataclass(frozen=True)
class DeviceRoofline:
    """One device's measured roofline, the runs behind it, and the ops placed under it.

    ``failed`` holds (op name, error) for ops that could not run (too big
    for the free memory, an unsupported dtype), so one failure does not lose
    the rest of a GPU run.
    """

    roofline: Roofline
    peaks: Mapping[str, PeakCompute]
    memory: BandwidthResult
    ops: tuple[PlacedOp, ...]
    failed: tuple[tuple[str, str], ...] = ()
    quick: bool = False

    @property
    def device(self) -> str:
        return self.roofline.device

    def summary(self) -> list[str]:
        """Lines for people: the roofs, then each op (the recording's summary for a GPU)."""
        r = self.roofline
        lines = [
            f"{self.device}: memory roof {format_gb_per_s(r.peak_gb_per_s)} (best of copy and "
            f"triad, {format_bytes(self.memory.bytes_per_array)} per array)"
        ]
        for dtype, peak in self.peaks.items():
            lines.append(
                f"{self.device}: {dtype} compute roof {_gflops(peak.gflop_per_s)} (matmul "
                f"n = {peak.size}), ridge point {three_digits(r.ridge_point(dtype))} FLOP/byte"
            )
        lines += [f"{self.device}: {op.summary()}" for op in self.ops]
        lines += [f"{self.device}: {name}: not measured ({error})" for name, error in self.failed]
        if self.quick:
            lines.append("(--quick: toy sizes and tiny time budgets; the numbers mean little)")
        return lines

    def to_dict(self) -> dict[str, Any]:
        """The numbers a notebook needs to draw this roofline and its points."""
        r = self.roofline
        return {
            "device": self.device,
            "quick": self.quick,
            "peak_gflop_per_s": dict(r.peak_gflop_per_s),
            "peak_matmul_n": {d: p.size for d, p in self.peaks.items()},
            "peak_gb_per_s": r.peak_gb_per_s,
            "memory_kernel": self.memory.kernel,
            "memory_bytes_per_array": self.memory.bytes_per_array,
            "ridge_point": {d: r.ridge_point(d) for d in r.dtypes},
            "ops": [op.to_dict() for op in self.ops],
            "failed": [{"name": name, "error": error} for name, error in self.failed],
        }

    def __str__(self) -> str:
        header = ["op", "dtype", "FLOP/byte", "time", "achieved", "attainable", "share", "bound"]
        rows = [header]
        for op in self.ops:
            m = op.measurement
            rows.append(
                [
                    m.op.name,
                    op.roof_dtype,
                    three_digits(m.arithmetic_intensity),
                    format_duration(m.median_ms),
                    _gflops(m.gflop_per_s),
                    _gflops(op.attainable_gflop_per_s),
                    f"{op.fraction_of_attainable:.0%}",
                    op.bound,
                ]
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        lines = [str(self.roofline), ""]
        for row in rows:
            cells = [
                c.ljust(w) if i in (0, 1, 7) else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            ]
            lines.append("  ".join(cells).rstrip())
        lines += [f"{name}: not measured ({error})" for name, error in self.failed]
        if any(op.fraction_of_attainable > _ABOVE_ROOF for op in self.ops):
            lines.append(
                "A share above 100% means the op beat its measured roof: its data came from "
                "cache (small ops), or something disturbed the roof measurement; run again."
            )
        return "\n".join(lines)


def measure_device(
    device: str, quick: bool = False, show_progress: bool | None = None
) -> DeviceRoofline:
    """Measure ``device``'s roofs, then run :func:`standard_ops` on it and place each one."""
    from labkit.bandwidth.stream import peak_bandwidth
    from labkit.machine.memory import require_fits
    from labkit.roofline.measure import measure_op, measure_peak_compute

    on_gpu = device != "cpu"
    specs = standard_ops(on_gpu, quick)
    options: dict[str, Any] = {}
    dtypes = None
    if quick:
        options = {"sizes": (64, 128), "warmup_ms": 0.0, "rep_ms": 5.0}
        dtypes = sorted(
            {s.roof_dtype for s in specs}, key=("float32", "tf32", "bfloat16", "float16").index
        )
    peaks = measure_peak_compute(device, dtypes, show_progress=show_progress, **options)
    quick_memory: dict[str, Any] = {"bytes_per_array": 1024**2, "warmup_ms": 1.0, "rep_ms": 5.0}
    memory = peak_bandwidth(device, **(quick_memory if quick else {}))
    roofline = Roofline(
        device=device,
        peak_gflop_per_s={d: p.gflop_per_s for d, p in peaks.items()},
        peak_gb_per_s=memory.gb_per_s,
    )
    placed: list[PlacedOp] = []
    failed: list[tuple[str, str]] = []
    budgets: dict[str, Any] = {"warmup_ms": 0.0, "rep_ms": 5.0} if quick else {}
    for spec in specs:
        try:
            require_fits(spec.op.bytes, device=device, what=f"the roofline point {spec.op.name}")
            m = measure_op(spec.op, device, tf32=spec.tf32, **budgets)
        except Exception as exc:  # keep the rest of the run; say what failed
            failed.append((spec.op.name, part_failed("labkit bench roofline", spec.op.name, exc)))
            continue
        placed.append(
            PlacedOp(
                measurement=m,
                roof_dtype=spec.roof_dtype,
                attainable_gflop_per_s=roofline.attainable_gflop_per_s(
                    spec.op.arithmetic_intensity, spec.roof_dtype
                ),
                bound=roofline.bound(spec.op, spec.roof_dtype),
            )
        )
    return DeviceRoofline(
        roofline=roofline,
        peaks=peaks,
        memory=memory,
        ops=tuple(placed),
        failed=tuple(failed),
        quick=quick,
    )


def measure(quick: bool = False, show_progress: bool | None = None) -> list[DeviceRoofline]:
    """The CPU's roofline and, where torch sees a CUDA GPU, the GPU's."""
    from labkit.machine.gpu import has_gpu

    devices = ["cpu", *(["cuda"] if has_gpu() else [])]
    return [measure_device(d, quick, show_progress) for d in devices]


def run_roofline_benchmark(as_json: bool = False, record: bool = False, quick: bool = False) -> int:
    """``labkit bench roofline``; returns the exit code.

    ``record`` without a GPU prints one line, measures and writes nothing,
    and returns 0. Without torch it prints the install command and returns
    1. ``record`` with ``quick`` is a UsageError (exit 2): toy sizes would
    misrepresent the GPU to every learner who reads the recording.
    """
    from labkit import __version__
    from labkit.cli.bench.run import preflight
    from labkit.core.results import json_safe
    from labkit.machine.reference import gpu_identity

    early = preflight("labkit bench roofline", record=record, quick=quick)
    if early is not None:
        return early
    results = measure(quick=quick)
    recorded = None
    gpu_rooflines = [r for r in results if r.device != "cpu"]
    if record and gpu_rooflines:
        gpu = gpu_rooflines[0]
        data = {"summary": gpu.summary(), **json_safe(gpu.to_dict())}
        recorded = _reference.record(REFERENCE_NAME, data, **gpu_identity())
    if as_json:
        payload = {
            "benchmark": "roofline",
            "labkit_version": __version__,
            "quick": quick,
            "devices": [r.to_dict() for r in results],
            "summary": [line for r in results for line in r.summary()],
            "recorded": None if recorded is None else str(recorded),
        }
        print(json.dumps(json_safe(payload), indent=2, allow_nan=False))
        return 0
    print("\n\n".join(str(r) for r in results))
    if quick:
        print("\n(--quick: toy sizes and tiny time budgets; the numbers mean little)")
    if recorded is not None:
        print(f"\nRecorded the GPU roofline to {recorded}")
    return 0
