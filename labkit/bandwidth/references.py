"""labkit's STREAM probes next to NumPy's copy and a compiled C STREAM loop, for notebook 02.

``labkit bench bandwidth`` (:mod:`labkit.cli.bench.bandwidth`) times labkit's
copy and triad in turns with the references, so load hits all of them alike.
:func:`format_references` prints that comparison in a form that reads the
same on every run: bandwidths and ratios (which the notebooks' sanitizer
masks), and a verdict from fixed bands (within 10% of the reference, below
three quarters of it, or in between), not a single bar that noise on a
shared machine can cross either way.

Only references with the same kind of stores are compared. NumPy's
``np.copyto`` on contiguous arrays of one dtype ends in ``memmove``
(NumPy's ``lowlevel_strided_loops``), and glibc's x86 ``memmove``, like its
``memcpy``, switches to non-temporal stores above a size threshold; so
NumPy's copy is shown beside the memcpy row, not used as the bar. It is
also single-threaded. The bar for copy is the C loop ``c[i] = a[i]``, which
GCC at ``-O3`` keeps as a vector loop with ordinary stores.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit.bandwidth import cstream as _cstream
from labkit.bandwidth import sizes as bw_sizes
from labkit.bandwidth import stream as _bandwidth
from labkit.core.results import JsonRecord
from labkit.core.units import format_bytes, format_gb_per_s
from labkit.core.validate import check_int, check_positive_int
from labkit.machine import memory as _memory
from labkit.timing.bench import Timing, bench

#: labkit's probe must reach this fraction of the best reference.
BAR = 0.90
CPU_KERNELS = ("copy", "triad")
#: Samples each contender takes per turn (after one unrecorded call).
SAMPLES_PER_TURN = 3
#: Why a libc memcpy can beat every loop, and why it is shown but not used as the bar.
WRITE_ALLOCATE_NOTE = (
    "for large copies glibc's x86 memcpy and memmove (which NumPy's np.copyto calls for "
    "contiguous arrays) use non-temporal stores, which skip the read of each destination line "
    "that ordinary stores cause on most x86 cores (write-allocate). torch's kernels and the C "
    "loops use ordinary stores, so they can move 1.5× (copy) or 1.33× (triad) the bytes STREAM "
    "credits them with; a gap to the memcpy and NumPy rows can be that extra read."
)
#: Label of NumPy's copy: shown, not compared (see :data:`WRITE_ALLOCATE_NOTE`).
NUMPY_COPY = "NumPy np.copyto(a, b), 1 thread"


@dataclass(frozen=True)
class CReference(JsonRecord):
    """How the C reference went: "ok" (with compiler and flags) or "skipped" (with why)."""

    status: str
    note: str
    compiler: str | None = None
    flags: tuple[str, ...] = ()


# --------------------------------------------------------------------------- the CPU part


@dataclass(frozen=True)
class CpuBandwidth:
    """labkit's copy and triad, the references, and labkit / best reference per kernel."""

    bytes_per_array: int
    rounds: int
    labkit: dict[str, _bandwidth.BandwidthResult]
    references: dict[str, tuple[_bandwidth.BandwidthResult, ...]]
    c_reference: CReference
    notes: tuple[str, ...] = ()
    #: Shown but not in the bar: a copy with non-temporal stores (see :data:`WRITE_ALLOCATE_NOTE`).
    informational: tuple[_bandwidth.BandwidthResult, ...] = field(default_factory=tuple)

    def best_reference(self, kernel: str) -> _bandwidth.BandwidthResult | None:
        return max(self.references.get(kernel, ()), key=lambda r: r.gb_per_s, default=None)

    def ratio(self, kernel: str) -> float | None:
        """labkit's median GB/s over the best reference's."""
        best = self.best_reference(kernel)
        return None if best is None else self.labkit[kernel].gb_per_s / best.gb_per_s

    @property
    def bar_met(self) -> bool | None:
        """Every ratio that could be measured is at least :data:`BAR` (None if none could)."""
        ratios = [r for r in (self.ratio(k) for k in CPU_KERNELS) if r is not None]
        return None if not ratios else all(r >= BAR for r in ratios)

    def to_dict(self) -> dict[str, Any]:
        """The recording's schema, which the notebooks' GPU cells read: a view, not the fields."""
        return {
            "bytes_per_array": self.bytes_per_array,
            "rounds": self.rounds,
            "labkit": {k: r.to_dict() for k, r in self.labkit.items()},
            "references": {k: [r.to_dict() for r in rs] for k, rs in self.references.items()},
            "c_reference": self.c_reference.to_dict(),
            "ratios": {k: self.ratio(k) for k in CPU_KERNELS},
            "bar": BAR,
            "bar_met": self.bar_met,
            "informational": [r.to_dict() for r in self.informational],
            "notes": list(self.notes),
        }


def cpu_bytes_per_array(max_bytes: int | None = None, *, arrays: int = 3) -> tuple[int, list[str]]:
    """Main-memory bytes per array (:func:`~labkit.bandwidth.sizes.main_memory_bytes_per_array`),
    at most ``max_bytes``, shrunk so ``arrays`` of them fit."""
    check_positive_int("arrays", arrays)
    notes: list[str] = []
    wanted = bw_sizes.main_memory_bytes_per_array("cpu", arrays=arrays)
    if max_bytes is not None:
        wanted = min(wanted, check_int("max_bytes", max_bytes, minimum=4096))
    size = _memory.fit_bytes(wanted, device="cpu", arrays=arrays)
    size -= size % 4096
    if size < 4096:
        _memory.require_fits(wanted, device="cpu", arrays=arrays, what="labkit bench bandwidth")
    if size < wanted:
        last = bw_sizes.last_level_cache_bytes("cpu")
        times = f", still {size / last:.1f}× the last-level cache" if last else ""
        notes.append(
            f"measured {format_bytes(size)} per array instead of {format_bytes(wanted)}{times}: "
            f"{arrays} arrays of {format_bytes(wanted)} (3 here"
            f"{', 3 in the C process' if arrays > 3 else ''}) exceed "
            f"{_memory.DEFAULT_FRACTION:.0%} of the free memory"
        )
    return size, notes


def _stream_result(
    kernel: str, n: int, samples: list[float], text: str, threads: int | None, calls: int = 1
) -> _bandwidth.BandwidthResult:
    """A BandwidthResult for a reference measured outside :func:`labkit.bandwidth.stream.measure_kernel`."""
    traffic_kernel = "copy" if kernel == "memcpy" else kernel
    return _bandwidth.BandwidthResult(
        kernel=traffic_kernel,
        device="cpu",
        dtype="float64",
        n_elements=n,
        bytes_per_array=8 * n,
        bytes_per_call=_bandwidth.stream_bytes(traffic_kernel, n),
        calls_per_sample=calls,
        timing=Timing(tuple(samples), label=text, device="cpu"),
        implementation=text,
        threads=threads,
    )


def run_cpu(max_bytes: int | None = None, rounds: int = 4) -> CpuBandwidth:
    """Measure labkit, NumPy and the C loops on the same array length, taking turns."""
    import numpy as np

    rounds = check_int("rounds", rounds, minimum=1)
    compiler = _cstream.find_compiler()
    size, notes = cpu_bytes_per_array(max_bytes, arrays=6 if compiler else 3)
    n = size // 8
    c_ref = CReference("skipped", _cstream.NO_COMPILER_NOTE)
    buffers = _bandwidth.allocate_arrays(n, 3, "cpu")
    prepared = {k: _bandwidth.prepare_kernel(k, buffers, n, "cpu") for k in CPU_KERNELS}
    a_np, b_np = buffers[0].numpy(), buffers[1].numpy()

    def numpy_copy() -> None:
        for _ in range(prepared["copy"].calls_per_sample):
            np.copyto(a_np, b_np)

    turns: dict[str, Any] = {
        "labkit copy": prepared["copy"].sample,
        "labkit triad": prepared["triad"].sample,
        "numpy copy": numpy_copy,
    }
    samples: dict[str, list[float]] = {name: [] for name in turns}
    with tempfile.TemporaryDirectory(prefix="labkit-stream-") as tmp:
        proc = None
        if compiler is not None:
            try:
                exe, flags = _cstream.compile_stream(Path(tmp), compiler)
                proc = _cstream.CStream(exe, n)
                build = f"{Path(compiler).name} {' '.join(flags)}"
                c_ref = CReference(
                    "ok",
                    f"compiled with {build}" + ("" if proc.openmp else " (no OpenMP: 1 thread)"),
                    compiler,
                    flags,
                )
            except _cstream.CStreamError as exc:
                c_ref = CReference("skipped", str(exc), compiler)
        if proc is not None:
            for kernel in _cstream.KERNELS:
                samples[f"c {kernel}"] = []
        names = list(samples)
        try:
            for r in range(rounds):
                shift = r % len(names)
                for name in names[shift:] + names[:shift]:  # rotate who goes first
                    if name.startswith("c "):
                        if proc is None:
                            continue
                        calls = prepared["copy"].calls_per_sample
                        try:
                            ms = proc.run(name[2:], (SAMPLES_PER_TURN + 1) * calls)[calls:]
                        except _cstream.CStreamError as exc:  # it crashed: go on without it
                            c_ref = CReference("skipped", str(exc), compiler)
                            proc.close()
                            proc = None
                            continue
                        samples[name] += [sum(ms[i : i + calls]) for i in range(0, len(ms), calls)]
                    else:
                        timing = bench(
                            turns[name],
                            warmup_ms=0.0,
                            rep_ms=1e-3,
                            min_reps=SAMPLES_PER_TURN,
                            device="cpu",
                            warn=False,
                        )
                        samples[name] += list(timing.samples_ms)
        finally:
            if proc is not None:
                proc.close()
        if proc is not None and proc.valid is False:
            c_ref = CReference("skipped", "the C reference computed wrong values", compiler)
        if c_ref.status != "ok":
            samples = {k: v for k, v in samples.items() if not k.startswith("c ")}
    calls_by_kernel = {k: prepared[k].calls_per_sample for k in CPU_KERNELS}
    labkit = {
        k: prepared[k].result(Timing(tuple(samples[f"labkit {k}"]), label=k, device="cpu"))
        for k in CPU_KERNELS
    }
    threads = proc.threads if proc is not None else None
    refs: dict[str, list[_bandwidth.BandwidthResult]] = {"copy": [], "triad": []}
    info: list[_bandwidth.BandwidthResult] = [
        _stream_result("copy", n, samples["numpy copy"], NUMPY_COPY, 1, calls_by_kernel["copy"])
    ]
    for kernel in _cstream.KERNELS:
        if f"c {kernel}" in samples:
            text = _cstream.DESCRIPTIONS[kernel]
            if kernel != "memcpy":
                text += f" ({c_ref.note.removeprefix('compiled with ')})"
            row = _stream_result(
                kernel, n, samples[f"c {kernel}"], text, threads, calls_by_kernel["copy"]
            )
            (info if kernel == "memcpy" else refs[kernel]).append(row)
    return CpuBandwidth(
        bytes_per_array=size,
        rounds=rounds,
        labkit=labkit,
        references={k: tuple(v) for k, v in refs.items()},
        c_reference=c_ref,
        notes=tuple(notes),
        informational=tuple(info),
    )


#: labkit's probe is "within 10%" of a reference from this fraction ...
COMPARABLE = 0.90
#: ... up to this one; above it, the probe is faster than the reference.
FASTER = 1.10
#: ... and "well below" it under this one; in between, "somewhat below".
WELL_BELOW = 0.75


def reference_comparison(rounds: int = 4) -> CpuBandwidth:
    """Run the CPU part of ``labkit bench bandwidth`` (DRAM-sized float64 arrays, in turns)."""
    return run_cpu(rounds=rounds)


def format_references(cpu: CpuBandwidth) -> str:
    """One row per measurement, labkit / best reference per kernel, and a verdict per kernel."""
    size = cpu.labkit["copy"].bytes_per_array
    lines = [f"every row on arrays of {format_bytes(size)} ({cpu.labkit['copy'].dtype})"]
    lines += [f"  ({note})" for note in cpu.notes]
    kernels = ("copy", "triad")
    for kernel in kernels:
        rows = [("labkit (torch)", cpu.labkit[kernel])]
        # the full implementation: "C loop ... (flags it was compiled with)"
        rows += [(r.implementation, r) for r in cpu.references.get(kernel, ())]
        rows += [
            (
                r.implementation
                + (
                    " [memmove: may use non-temporal stores, not compared]"
                    if r.implementation == NUMPY_COPY
                    else " [may use non-temporal stores, not compared]"
                ),
                r,
            )
            for r in cpu.informational
            if r.kernel == kernel
        ]
        width = max(len(name) for name, _ in rows)
        for name, row in rows:
            lines.append(f"{kernel:<6} {name.ljust(width)}  {format_gb_per_s(row.gb_per_s):>10}")
    if cpu.c_reference.status != "ok":
        lines.append(f"(no C reference: {cpu.c_reference.note})")
    for kernel in kernels:
        ratio, best = cpu.ratio(kernel), cpu.best_reference(kernel)
        if ratio is None or best is None:
            lines.append(f"{kernel}: no reference to compare with")
            continue
        if ratio > FASTER:
            verdict = (
                f"faster than the reference by {ratio - 1:.0%}: here the C loop is not this "
                "machine's ceiling (load, its threads or its build slowed it), and the probe is "
                "at least as fast as compiled code"
            )
        elif ratio >= COMPARABLE:
            verdict = "within 10% of the reference: the probe measures the memory, not torch"
        elif ratio >= WELL_BELOW:
            verdict = "somewhat below the reference: noise, or torch costs part of the bandwidth"
        else:
            verdict = (
                "well below the reference: the probe is limited by something other than memory"
            )
        lines.append(
            f"{kernel}: labkit / best reference ({best.implementation.split(' (')[0]}) = "
            f"{ratio:.2f}×, {verdict}"
        )
    return "\n".join(lines)
