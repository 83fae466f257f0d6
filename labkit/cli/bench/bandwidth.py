"""``labkit bench bandwidth``: labkit's bandwidth probes next to references from the same run.

A probe that reports 20 GB/s teaches nothing unless we know the machine can
do no better. So this benchmark measures, on float64 arrays of one
DRAM-sized length and in the same run, labkit's CPU copy and triad
(:mod:`labkit.bandwidth.stream`) and two references:

- NumPy's ``np.copyto`` (a single-threaded ``memcpy``);
- a C STREAM loop (``labkit/native/stream.c``, see :mod:`labkit.bandwidth.cstream`)
  compiled here with ``-O3 -march=native -fopenmp``. Without a C compiler
  it is skipped with a note.

A shared machine is noisy: another program can halve a measurement for a few
seconds. So the contenders take turns, a few calls each, for ``rounds``
rounds, and each one's median is taken over all its samples; load then hits
all of them alike. The benchmark prints each ratio labkit / best reference
and whether it clears the bar (:data:`BAR`).

With a CUDA GPU it adds a device-to-device copy against torch (raw CUDA
events), CuPy and the card's datasheet peak, host↔device transfers
(pageable and pinned), copy/compute overlap and strided reads; ``--record``
stores those as the ``bandwidth`` recording that CPU-only learners see.
"""

from __future__ import annotations

import json
from typing import Any

from labkit.bandwidth import overlap
from labkit.bandwidth import sizes as bw_sizes
from labkit.bandwidth.references import (
    BAR,
    CPU_KERNELS,
    WRITE_ALLOCATE_NOTE,
    CpuBandwidth,
    run_cpu,
)
from labkit.cli.bench.run import part_failed
from labkit.core import units
from labkit.core.units import format_bytes, format_duration
from labkit.core.validate import check_int
from labkit.machine import memory as _memory
from labkit.machine import reference as _reference
from labkit.machine.report import CPU_OR_CUDA, resolve_device

#: The recording ``--record`` writes.
REFERENCE_NAME = "bandwidth"


# --------------------------------------------------------------------------- the GPU part


def run_gpu(max_bytes: int | None = None) -> dict[str, Any]:
    """Device-to-device copy (required), then transfers, overlap and strided reads.

    Each later part that fails is reported as an error string in its place,
    so one unsupported feature does not lose the rest of a GPU run.
    """
    from labkit.bandwidth import strided, transfers

    device = resolve_device("cuda", kinds=CPU_OR_CUDA)
    size = None
    if max_bytes is not None:
        size = min(bw_sizes.dram_bytes_per_array(device), max_bytes)
        size = _memory.fit_bytes(size, device=device, arrays=2)
    d2d = transfers.device_copy(size, device)
    parts: dict[str, Any] = {"device": device, "d2d": d2d}
    top = min(1024**3, max_bytes or 1024**3)
    sizes = sorted({min(s, top) for s in (1024**2, 16 * 1024**2, 256 * 1024**2, 1024**3)})
    for name, run in (
        ("transfers", lambda: transfers.host_device_sweep(sizes, device, show_progress=False)),
        ("overlap", lambda: overlap.copy_compute_overlap(device=device)),
        ("strided", lambda: strided.strided_read(device=device, show_progress=False)),
    ):
        try:
            parts[name] = run()
        except Exception as exc:  # keep the D2D result; say what failed
            parts[name] = part_failed("labkit bench bandwidth", name, exc)
    return parts


def gpu_summary(parts: dict[str, Any]) -> list[str]:
    """Lines for people: the GPU results, as printed and as stored in the recording."""
    d2d = parts["d2d"]
    fmt = units.format_gb_per_s
    lines = [
        f"device-to-device copy, {format_bytes(d2d.labkit.bytes_per_array)} per array "
        f"(read + write counted): labkit {fmt(d2d.labkit.gb_per_s)}"
    ]
    for ref in d2d.references:
        lines.append(f"  {ref.implementation}: {fmt(ref.gb_per_s)}")
    if d2d.ratio_to_best is not None:
        lines.append(f"  labkit / best reference: {d2d.ratio_to_best:.2f}×")
    if d2d.peak_gb_per_s:
        lines.append(
            f"  theoretical peak (memory clock × bus width) {fmt(d2d.peak_gb_per_s)}: labkit reaches "
            f"{d2d.fraction_of_peak:.2f}× of it"
        )
    lines += [f"  note: {n}" for n in d2d.notes]
    sweep = parts.get("transfers")
    if isinstance(sweep, str) or sweep is None:
        lines.append(f"host<->device transfers: not measured ({sweep})")
    else:
        for direction in ("h2d", "d2h"):
            cells = [
                f"{kind} {fmt(sweep.peak(direction, kind).gb_per_s)}"
                for kind in ("pageable", "pinned")
            ]
            lines.append(f"{direction} best: {', '.join(cells)}")
    overlap = parts.get("overlap")
    lines.append(
        f"overlap: {overlap}"
        if not isinstance(overlap, str)
        else f"overlap: not measured ({overlap})"
    )
    stride = parts.get("strided")
    if isinstance(stride, str) or stride is None:
        lines.append(f"strided reads: not measured ({stride})")
    else:
        slow = ", ".join(f"stride {r.stride}: {r.slowdown:.2f}×" for r in stride.rows)
        lines.append(f"strided reads ({stride.dtype}), slowdown vs stride 1: {slow}")
    return lines


def _gpu_json(parts: dict[str, Any]) -> dict[str, Any]:
    return {
        k: (v if isinstance(v, str) else v.to_dict()) for k, v in parts.items() if k != "device"
    } | {"device": parts["device"]}


# --------------------------------------------------------------------------- output


def format_cpu(cpu: CpuBandwidth) -> str:
    """The CPU table and the ratio line."""
    fmt = units.format_gb_per_s
    header = ["kernel", "measured by", "bandwidth", "median", "threads"]
    table = [header]
    for kernel in CPU_KERNELS:
        info = tuple(r for r in cpu.informational if r.kernel == kernel)
        for row in (cpu.labkit[kernel], *cpu.references.get(kernel, ()), *info):
            who = "labkit (torch): " if row is cpu.labkit[kernel] else ""
            mark = " [info]" if row in info else ""
            table.append(
                [
                    kernel,
                    who + row.implementation + mark,
                    fmt(row.gb_per_s),
                    format_duration(row.median_ms),
                    str(row.threads or ""),
                ]
            )
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines = [
        f"STREAM copy and triad on the CPU: float64, {format_bytes(cpu.bytes_per_array)} per "
        f"array, bytes counted as STREAM does; medians over {cpu.rounds} rounds of turns",
        "",
    ]
    for cells_in in table:
        cells = [
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells_in, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    lines.append("")
    parts = []
    for kernel in CPU_KERNELS:
        ratio, best = cpu.ratio(kernel), cpu.best_reference(kernel)
        if ratio is None or best is None:
            parts.append(f"{kernel} not compared (no reference)")
        else:
            parts.append(f"{kernel} {ratio:.2f}× (vs {best.implementation.split(' (')[0]})")
    met = cpu.bar_met
    verdict = "no reference to compare" if met is None else "met" if met else "NOT met"
    lines.append(f"labkit / best reference: {'; '.join(parts)}")
    lines.append(f"bar: {BAR:.2f}× or better: {verdict}")
    lines.append(f"C reference: {cpu.c_reference.note}")
    everyone = [*cpu.labkit.values(), *(r for rs in cpu.references.values() for r in rs)]
    noisy = [r for r in everyone if r.timing.noisy]
    if noisy:
        worst = max(r.timing.relative_spread for r in noisy)
        lines.append(
            f"noisy: {len(noisy)} of {len(everyone)} measurements have an IQR above 10% of the "
            f"median (up to {worst:.0%}): another program is using the CPU or memory. Close it "
            "and run again; the ratios are less certain than they look."
        )
    if cpu.informational:
        lines.append(f"[info] not in the bar: {WRITE_ALLOCATE_NOTE}")
    lines += [f"note: {n}" for n in cpu.notes]
    return "\n".join(lines)


def _torch_sees_cuda() -> bool:
    """The GPU part runs through torch; a GPU only CuPy can see is not enough."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # torch missing or broken: no GPU part
        return False


def run_bandwidth_benchmark(
    as_json: bool = False,
    record: bool = False,
    max_bytes: int | None = None,
    rounds: int = 4,
) -> int:
    """``labkit bench bandwidth``; returns the exit code.

    ``record`` without a GPU prints one line, measures and writes nothing,
    and returns 0. ``max_bytes`` caps the bytes per array (tests use a tiny
    size; a cache-sized array measures the cache, not DRAM).
    """
    if max_bytes is not None:
        check_int("max_bytes", max_bytes, minimum=4096)
    check_int("rounds", rounds, minimum=1)
    from labkit import __version__
    from labkit.core.results import json_safe
    from labkit.machine.gpu import has_gpu
    from labkit.machine.reference import gpu_identity

    gpu_here = has_gpu() and _torch_sees_cuda()
    if record and not gpu_here:
        print(
            "labkit bench bandwidth --record needs a CUDA GPU and this machine has none, so "
            "nothing was recorded; run it on a GPU machine (`labkit doctor` shows what is here)."
        )
        return 0
    cpu = run_cpu(max_bytes=max_bytes, rounds=rounds)
    gpu_parts = run_gpu(max_bytes) if gpu_here else None
    recorded = None
    if record and gpu_parts is not None:
        results = {"summary": gpu_summary(gpu_parts), **json_safe(_gpu_json(gpu_parts))}
        recorded = _reference.record(REFERENCE_NAME, results, **gpu_identity())
    if as_json:
        payload = {
            "benchmark": "bandwidth",
            "labkit_version": __version__,
            "dtype": "float64",
            "cpu": cpu.to_dict(),
            "gpu": None if gpu_parts is None else _gpu_json(gpu_parts),
            "recorded": None if recorded is None else str(recorded),
        }
        print(json.dumps(json_safe(payload), indent=2, allow_nan=False))
        return 0
    print(format_cpu(cpu))
    print()
    if gpu_parts is None:
        print("No GPU here: no device-to-device or host<->device numbers (`labkit doctor`).")
    else:
        print("\n".join(gpu_summary(gpu_parts)))
    if recorded is not None:
        print(f"\nRecorded the GPU results to {recorded}")
    return 0
