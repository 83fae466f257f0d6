"""``labkit bench timing``: naive versus synchronized timing of the same work on every device here.

The measurement is :func:`labkit.timing.pitfalls.naive_timing`; this module runs it
on each device, prints the table, and with ``--record`` on a GPU stores the GPU rows
as the ``naive_timing`` recording that CPU-only learners see in notebook 00.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from labkit.core.optional import MissingPackageError
from labkit.core.results import json_safe
from labkit.core.units import format_duration, format_speedup
from labkit.machine import reference as _reference
from labkit.timing.pitfalls import (
    REFERENCE_NAME,
    NaiveVsSynced,
    available_devices,
    matmul_workload,
    naive_timing,
)


def run_timing_benchmark(as_json: bool = False, record: bool = False) -> int:
    """``labkit bench timing``: naive versus synchronized timing on every device here.

    Prints a table (or JSON with ``as_json``) and returns the exit code.
    With ``record`` on a machine with a CUDA GPU, stores the GPU rows as the
    ``naive_timing`` recording. Without a GPU, ``record`` prints one line
    saying a GPU is needed, measures nothing, writes nothing and returns 0:
    asking is not an error, there is just nothing to record. Without torch
    it prints the install command and returns 1, since nothing was measured.
    """
    from labkit import __version__
    from labkit.machine.gpu import has_gpu

    try:
        cases = available_devices()
    except MissingPackageError as exc:
        print(f"labkit: {exc}", file=sys.stderr)
        return 1
    if record and not has_gpu():
        print(
            "labkit bench timing --record needs a CUDA GPU and this machine has none, so "
            "nothing was recorded; run it on a GPU machine (`labkit doctor` shows what is here)."
        )
        return 0

    results: list[NaiveVsSynced] = []
    for device, n in cases:
        fn, args = matmul_workload(n, device)
        results.append(naive_timing(fn, *args, label=f"matmul {n}²", warn=False))

    recorded_path = None
    if record:
        recorded_path = _record(results)

    if as_json:
        payload = {
            "benchmark": "timing",
            "labkit_version": __version__,
            "results": [json_safe(r.to_dict()) for r in results],
            "recorded": None if recorded_path is None else str(recorded_path),
        }
        print(json.dumps(payload, indent=2, allow_nan=False))
        return 0
    print(format_results(results))
    if recorded_path is not None:
        print(f"\nRecorded the GPU rows to {recorded_path}")
    return 0


def format_results(results: list[NaiveVsSynced]) -> str:
    """The table ``labkit bench timing`` prints, then one explanation per kind of device."""
    header = ["device", "work", "naive clock", "synchronized", "IQR", "n", "synced/naive"]
    table = [header]
    for r in results:
        table.append(
            [
                r.device,
                r.label,
                f"{format_duration(r.naive_ms)}/call",
                format_duration(r.synced.median_ms),
                format_duration(r.synced.iqr_ms),
                f"n={r.synced.n}",
                format_speedup(r.ratio),
            ]
        )
    widths = [max(len(row[col]) for row in table) for col in range(len(header))]
    lines = ["Same work, timed with a bare host clock and with labkit.bench (median):", ""]
    flags = [False] + [r.synced.noisy for r in results]
    for row, noisy in zip(table, flags, strict=True):
        cells = [
            cell.ljust(width) if col < 2 else cell.rjust(width)
            for col, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip() + ("  *" if noisy else ""))
    if any(r.synced.noisy for r in results):
        lines.append("* noisy: IQR is more than 10% of the median")
    lines.append("")
    explained: set[str] = set()
    for r in results:
        text = r.explanation()
        if text not in explained:
            explained.add(text)
            lines.append(f"{r.device}: {text}")
    return "\n".join(lines)


def _record(results: list[NaiveVsSynced]) -> Any:
    """Store the GPU rows as the ``naive_timing`` recording; None when there are none."""
    gpu_rows = [r for r in results if r.on_gpu]
    if not gpu_rows:
        return None
    identity = _reference.gpu_identity()
    results_json = {
        "summary": [r.summary() for r in gpu_rows],
        "measurements": [json_safe(r.to_dict()) for r in gpu_rows],
    }
    return _reference.record(REFERENCE_NAME, results_json, **identity)
