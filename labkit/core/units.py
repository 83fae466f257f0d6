"""Rates and counts as text: 3 significant digits, the unit always spelled out.

Notebooks print measurements through these formatters so that the strict
nbval sanitize file can mask the hardware-dependent numbers (see
``notebooks/nbval_sanitize.cfg``): "184 GFLOP/s", "1.87 TFLOP/s",
"1.23 G elements/s", "2.15 GFLOP".
"""

from __future__ import annotations

import decimal
import math

from labkit.core.validate import check_choice

_SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def three_digits(value: float) -> str:
    """3 significant digits without exponent: 1.23, 12.3, 123, 0.00123."""
    if value == 0:
        return "0"
    # The decimal exponent after rounding to 3 digits (9.996 -> "1.00e+01").
    exponent = int(f"{value:.2e}".rsplit("e", 1)[1])
    digits = max(0, 2 - exponent)
    return f"{value:.{digits}f}"


def _scaled(value: float) -> tuple[str, str]:
    """The digits and the SI prefix; rounding first, so 999.6e6 reads "1.00 G", not "1000 M"."""
    rounded = abs(float(f"{value:.3g}"))
    for scale, prefix in _SI:
        if rounded >= scale:
            return three_digits(value / scale), prefix
    return three_digits(value), ""


def format_rate(per_s: float, unit: str) -> str:
    """A rate with an SI prefix: ``format_rate(1.234e9, "elements/s")`` is "1.23 G elements/s"."""
    digits, prefix = _scaled(per_s)
    return f"{digits} {prefix} {unit}" if prefix else f"{digits} {unit}"


def format_gflop_per_s(gflop_per_s: float) -> str:
    """A compute rate: "184 GFLOP/s", "0.00213 GFLOP/s", and "1.87 TFLOP/s" from 1000 GFLOP/s up."""
    if abs(float(f"{gflop_per_s:.3g}")) >= 1e3:
        return f"{three_digits(gflop_per_s / 1e3)} TFLOP/s"
    return f"{three_digits(gflop_per_s)} GFLOP/s"


def format_count(value: float, unit: str) -> str:
    """A count with a decimal SI prefix glued to the unit: "2.15 GFLOP", "12.6 MB", "640 B"."""
    digits, prefix = _scaled(value)
    return f"{digits} {prefix}{unit}"


def round3(value: float) -> int:
    """A number rounded to 3 significant digits, as an integer: 123456.7 -> 123000."""
    return round(decimal.Decimal(f"{value:.3g}"))


def format_bytes(n: int | None) -> str:
    """Binary units with 3 significant digits: "48 KiB", "2 MiB", "23.4 GiB"."""
    if n is None:
        return "unknown"
    value = float(n)
    unit = "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            break
        value /= 1024
    if value == int(value):  # exact sizes such as caches: "48 KiB", "2 MiB"
        return f"{int(value)} {unit}"
    decimals = 0 if value >= 100 else 1 if value >= 10 else 2
    return f"{value:.{decimals}f} {unit}"


def duration_unit(ms: float) -> str:
    """The unit :func:`format_duration` picks for ``ms`` ("ns", "µs", "ms" or "s")."""
    return format_duration(ms).rsplit(" ", 1)[1]


def format_duration(ms: float, unit: str | None = None) -> str:
    """A duration given in ms as text with 3 significant digits: "812 µs", "1.23 ms", "2.05 s".

    The unit is chosen so the number is at least 1 (ns below 1 µs), and there is
    always a space before it, so notebooks print stable, greppable text. Pass
    ``unit`` ("ns", "µs", "ms" or "s") to write several values in one unit, so
    a reader can compare them digit by digit (``Timing.__str__`` does this).
    """
    scales = dict(_UNITS_MS)
    if unit is not None:
        check_choice("unit", unit, tuple(scales))
    if ms == 0:
        return f"0 {unit or 'ns'}"
    rounded = float(f"{ms:.3g}")  # round first: 999.6 µs must become "1.00 ms"
    if unit is None:
        unit = next((name for name, scale in _UNITS_MS if abs(rounded) >= scale), "ns")
    value = ms / scales[unit]
    # The decimal exponent after rounding to 3 digits, as in three_digits.
    digits = max(0, 2 - int(f"{value:.2e}".rsplit("e", 1)[1]))
    return f"{value:.{digits}f} {unit}"


_UNITS_MS: tuple[tuple[str, float], ...] = (("s", 1e3), ("ms", 1.0), ("µs", 1e-3), ("ns", 1e-6))


def format_speedup(speedup: float) -> str:
    """3.2147 -> "3.21×", 152.3 -> "152×"; how many times faster than the baseline."""
    if math.isinf(speedup):
        return "inf×"
    return f"{speedup:.2f}×" if speedup < 100 else f"{speedup:.0f}×"


def format_gb_per_s(gb_per_s: float) -> str:
    """A bandwidth with 3 significant digits and its unit: "25.3 GB/s", "4790 GB/s"."""
    value = float(gb_per_s)
    if not math.isfinite(value):
        return f"{value} GB/s"
    digits = 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2
    return f"{value:.{digits}f} GB/s"


def format_samples_per_s(value: float, *, round_to_3: bool = False) -> str:
    """A rate as text: "179,347 samples/s" from 100 up, 3 significant digits below.

    ``round_to_3`` keeps 3 significant digits from 100 up too ("21,300
    samples/s"): for rates whose run-to-run spread is over 1% (notebook 10's
    multi-process runs), the last digits would be noise.
    """
    if value < 100:
        return f"{three_digits(value)} samples/s"
    return f"{round3(value):,} samples/s" if round_to_3 else f"{value:,.0f} samples/s"


def align_columns(rows: list[list[str]]) -> list[str]:
    """Rows of cells as aligned lines: the first column left-aligned, the others right-aligned.

    Columns are two spaces apart, each as wide as its widest cell; trailing
    spaces are stripped.
    """
    widths = [max(len(row[col]) for row in rows) for col in range(len(rows[0]))]
    return [
        "  ".join(
            cell.ljust(width) if col == 0 else cell.rjust(width)
            for col, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]
