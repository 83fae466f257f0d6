"""A kernel measured against its ceiling: results verified before they are timed, and the table notebook 07 prints.

:func:`verify_equal`, :func:`verify_close` and :func:`verify_sum` verify a kernel's output on the GPU;
:class:`KernelComparison` holds the verified runs beside the ceiling they are a fraction of.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from labkit.core.results import JsonRecord
from labkit.core.units import format_duration, format_gb_per_s, format_gflop_per_s
from labkit.kernels.cupy_run import SGEMM_RTOL, WrongResultError
from labkit.timing.bench import Timing


def _xp(*arrays: Any) -> Any:
    """CuPy when any array is a CuPy array, else NumPy: the checks work on both."""
    if any(type(a).__module__.split(".")[0] == "cupy" for a in arrays):
        import cupy

        return cupy
    import numpy

    return numpy


def verify_equal(kernel: str, got: Any, expected: Any) -> float:
    """0.0 when ``got`` equals ``expected`` exactly, else raise :class:`WrongResultError`.

    Copies and transposes move floats without arithmetic, so anything but
    an exact match is a bug (or a race, as in ``transpose_tiled_nosync``).
    """
    cupy = _xp(got, expected)
    if got.shape == expected.shape and bool(cupy.array_equal(got, expected)):
        return 0.0
    if got.shape != expected.shape:
        raise WrongResultError(
            f"{kernel}: wrong shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
        )
    diff = cupy.abs(got - expected)
    wrong = int(cupy.count_nonzero(diff)) if bool(cupy.isfinite(diff).all()) else int(diff.size)
    raise WrongResultError(
        f"{kernel} gave a wrong result: {wrong:,} of {int(got.size):,} elements differ from the "
        f"reference (max error {float(cupy.nanmax(diff)):.3g}, expected 0: this kernel only "
        "moves floats)"
    )


def verify_close(kernel: str, got: Any, expected: Any, *, rtol: float = SGEMM_RTOL) -> float:
    """max|got - expected| / max|expected|; raise :class:`WrongResultError` above ``rtol``."""
    cupy = _xp(got, expected)
    scale = float(cupy.abs(expected).max())
    error = float(cupy.abs(got - expected).max())  # in expected's precision (float64)
    relative = error / scale if scale > 0 else error
    if not math.isfinite(relative) or relative > rtol:
        raise WrongResultError(
            f"{kernel} gave a wrong result: max error {error:.3g} is {relative:.2g} of the largest "
            f"|reference| value {scale:.3g}, above the tolerance {rtol:.1g}. (Strict float32 "
            "matmul errs by ~1e-6 of it; TF32 by ~1e-4 or more.)"
        )
    return relative


def verify_sum(kernel: str, got: Any, x: Any, *, exact: bool = False) -> float:
    """|got - sum(x)| with the sum taken in float64; raise above the tolerance.

    ``exact``: the data are small integers, whose float32 partial sums are
    exact in any order, so any difference is a bug. Otherwise the tolerance
    is ``sqrt(n) * 2**-23 * sum(|x|)``, the rounding a float32 sum in an
    arbitrary order typically stays within.
    """
    cupy = _xp(got, x)
    reference = float(cupy.sum(x, dtype=cupy.float64))
    value = float(got.reshape(-1)[0])
    error = abs(value - reference)
    tolerance = (
        0.0 if exact else math.sqrt(x.size) * 2.0**-23 * float(cupy.abs(x).sum(dtype=cupy.float64))
    )
    if not math.isfinite(error) or error > tolerance:
        raise WrongResultError(
            f"{kernel} gave {value!r}, the float64 sum is {reference!r}: error {error:.3g}, "
            f"tolerance {tolerance:.3g}"
        )
    return error


@dataclass(frozen=True)
class Ceiling(JsonRecord):
    """The measured best the device does on this work: device copy or cuBLAS."""

    json_extra = ("median_ms",)

    name: str
    rate: float
    unit: str
    timing: Timing

    @property
    def median_ms(self) -> float:
        return self.timing.median_ms


@dataclass(frozen=True)
class KernelRun(JsonRecord):
    """One verified, timed kernel: its rate in the comparison's unit and as a fraction of the ceiling.

    ``param`` is the swept value (a stride, a block size) in a sweep.
    ``max_error`` is the verified error (0 for copies and transposes).
    """

    json_extra = ("median_ms",)

    name: str
    label: str
    rate: float
    fraction: float
    timing: Timing
    param: int | None = None
    max_error: float = 0.0
    settings: Mapping[str, int] = field(default_factory=dict)

    @property
    def median_ms(self) -> float:
        return self.timing.median_ms


def _format_rate(value: float, unit: str) -> str:
    return format_gb_per_s(value) if unit == "GB/s" else format_gflop_per_s(value)


@dataclass(frozen=True)
class KernelComparison(JsonRecord):
    """Kernels timed side by side against one ceiling, on one GPU.

    ``counting`` says which bytes or FLOP the rates count; ``fraction`` of a
    run is its rate over the ceiling's (0.9 = 90% of the copy bandwidth).
    """

    experiment: str
    device: str
    problem: str
    unit: str
    counting: str
    ceiling: Ceiling
    runs: tuple[KernelRun, ...]
    param_name: str | None = None
    notes: tuple[str, ...] = ()

    def run(self, label: str) -> KernelRun:
        """The run with this label (or kernel name)."""
        for run in self.runs:
            if label in (run.label, run.name):
                return run
        raise KeyError(f"no run {label!r}; runs: {', '.join(r.label for r in self.runs)}")

    def fraction(self, label: str) -> float:
        return self.run(label).fraction

    @property
    def best(self) -> KernelRun:
        return max(self.runs, key=lambda r: r.rate)

    def summary(self) -> list[str]:
        lines = [
            f"{self.experiment}: {self.problem}; rates count {self.counting}",
            f"  ceiling, {self.ceiling.name}: {_format_rate(self.ceiling.rate, self.unit)} "
            f"({format_duration(self.ceiling.median_ms)})",
        ]
        for r in self.runs:
            lines.append(
                f"  {r.label}: {_format_rate(r.rate, self.unit)} = {r.fraction:.0%} of "
                f"the ceiling ({format_duration(r.median_ms)})"
            )
        lines += [f"  note: {note}" for note in self.notes]
        return lines

    def __str__(self) -> str:
        width = max([len("ceiling"), *(len(r.label) for r in self.runs)])
        lines = [
            f"{self.experiment} on {self.device}: {self.problem}",
            f"  rates count {self.counting}",
            f"  {'ceiling':<{width}}  {format_duration(self.ceiling.median_ms):>9}  "
            f"{_format_rate(self.ceiling.rate, self.unit):>13}  {self.ceiling.name}",
        ]
        for r in self.runs:
            lines.append(
                f"  {r.label:<{width}}  {format_duration(r.median_ms):>9}  "
                f"{_format_rate(r.rate, self.unit):>13}  {r.fraction:4.0%} of ceiling"
            )
        largest = max((r.max_error for r in self.runs), default=0.0)
        lines.append(
            f"  every kernel's output was verified before timing (largest error {largest:.2g})"
        )
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)
