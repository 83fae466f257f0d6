"""The STREAM size sweep: bandwidth from L1-sized to DRAM-sized arrays.

On a quiet machine, arrays that fit in a cache stream faster than main
memory, and small arrays are limited by torch's per-call overhead.
:func:`stream_sweep` measures every size, and
:func:`labkit.bandwidth.plots.plot_stream_sweep` draws it with the cache sizes
marked. What a given run shows is not assumed: :meth:`StreamSweep.reading`
says it from the numbers, including when a loaded machine's scheduling
delays (threads waiting for a core) hide the caches altogether.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from labkit.bandwidth import stream as _bandwidth
from labkit.bandwidth.sizes import cache_sizes, default_sizes, last_level_cache_bytes
from labkit.bandwidth.stream import (
    ARRAYS,
    DTYPE,
    ITEMSIZE_BYTES,
    KERNELS,
    BandwidthResult,
    check_budget_ms,
    check_kernel,
    check_kernels,
    measure_kernel,
)
from labkit.core.progress import progress
from labkit.core.results import JsonRecord, dataclass_json
from labkit.core.units import format_bytes, format_duration, format_gb_per_s
from labkit.core.validate import check_int, check_sizes
from labkit.machine import memory as _memory
from labkit.machine.memory import DEFAULT_FRACTION
from labkit.machine.report import CPU_OR_CUDA, resolve_device

#: torch splits an elementwise kernel across threads only above this many elements
#: (``at::internal::GRAIN_SIZE``, aten/src/ATen/TensorIterator.h).
GRAIN_SIZE = 32_768
#: A threaded call that moves at most SMALL_CALL_BYTES and takes this long is disturbed:
#: waking threads costs µs (tens of µs on many cores), and 4 MiB take under 1 ms at 5 GB/s.
DISTURBED_MS = 1.0
SMALL_CALL_BYTES = 4 * 2**20


@dataclass(frozen=True)
class StreamSweep(JsonRecord):
    """Every (kernel, size) measurement of a sweep, sorted by kernel then size.

    ``caches`` are the cache sizes the plot marks; ``dropped_bytes_per_array``
    the sizes skipped because they did not fit the memory budget (or ran out
    of memory): they stay in :meth:`table` as rows that say so, so the table
    has the same rows on every machine. ``budget_bytes`` is the budget the
    sizes were judged against (all arrays together). ``out_of_memory`` is the
    line the sweep printed when an allocation failed and it stopped early (""
    when none did); :attr:`largest_bytes_per_array` is then the largest size
    that fit.
    """

    rows: tuple[BandwidthResult, ...]
    device: str
    dtype: str
    caches: tuple[tuple[str, int], ...] = ()
    dropped_bytes_per_array: tuple[int, ...] = ()
    out_of_memory: str = ""
    budget_bytes: int | None = None
    arrays: int = 3

    @property
    def largest_bytes_per_array(self) -> int | None:
        """The largest array measured (None when nothing was)."""
        return max((r.bytes_per_array for r in self.rows), default=None)

    @property
    def kernels(self) -> tuple[str, ...]:
        return tuple(k for k in KERNELS if any(r.kernel == k for r in self.rows))

    @property
    def sizes_bytes(self) -> tuple[int, ...]:
        """Bytes per array measured, ascending."""
        return tuple(sorted({r.bytes_per_array for r in self.rows}))

    def rows_for(self, kernel: str) -> tuple[BandwidthResult, ...]:
        """One kernel's rows, smallest array first."""
        kernel = check_kernel(kernel)
        return tuple(r for r in self.rows if r.kernel == kernel)

    def peak(self, kernel: str | None = None, *, min_bytes_per_array: int = 0) -> BandwidthResult:
        """The fastest row (of ``kernel``, or of any), among arrays of at least ``min_bytes_per_array``.

        ``sweep.peak("triad", min_bytes_per_array=labkit.bandwidth.sizes.dram_bytes_per_array())``
        is the main-memory plateau; ``sweep.peak()`` is usually a cache.
        """
        rows = self.rows if kernel is None else self.rows_for(kernel)
        min_bytes_per_array = check_int("min_bytes_per_array", min_bytes_per_array, minimum=0)
        rows = tuple(r for r in rows if r.bytes_per_array >= min_bytes_per_array)
        if not rows:
            raise ValueError(
                f"no rows for kernel={kernel!r} with at least {format_bytes(min_bytes_per_array)} "
                f"per array; the sweep measured {', '.join(map(format_bytes, self.sizes_bytes))}"
            )
        return max(rows, key=lambda r: r.gb_per_s)

    def fixed_cost_ms(self, kernel: str = "triad") -> float | None:
        """The smallest time per call of ``kernel`` over the sweep: a floor on its per-call overhead."""
        rows = self.rows_for(kernel) if kernel in self.kernels else ()
        return min((r.median_ms for r in rows), default=None)

    def overhead_bytes_per_array(self, kernel: str = "triad", *, share: float = 0.2) -> int | None:
        """The largest array up to which the smallest call's time is at least ``share`` of a call.

        Measured, not assumed: on the left of it, a fixed cost per call (at
        least :meth:`fixed_cost_ms`) is a large part of every call, so the
        sweep cannot show what the fastest caches deliver. None: no rows.
        """
        floor = self.fixed_cost_ms(kernel)
        if floor is None:
            return None
        limit = None
        for r in self.rows_for(kernel):
            if floor < share * r.median_ms:
                break
            limit = r.bytes_per_array
        return limit

    def reading(self, kernel: str = "triad") -> str:
        """What this run's sweep shows, in one of a fixed set of sentences (printed by notebook 02).

        First a plausibility check: above torch's grain size (32,768
        elements) a CPU call wakes its other threads, which costs µs (tens
        of µs on many cores); if at least half of the multithreaded calls
        (all kernels) that move at most :data:`SMALL_CALL_BYTES` took
        :data:`DISTURBED_MS` or more, threads were waiting for a core, and
        the cache steps are not visible. Otherwise: whether the *median*
        multithreaded row that fits in the last-level cache beats the largest
        (main memory) by at least 1.5× (a median, so one lucky sample does
        not decide it).
        """
        rows = self.rows_for(kernel) if kernel in self.kernels else ()
        if not rows:
            return f"no {kernel} rows to read"
        threaded = [r for r in self.rows if r.n_elements > GRAIN_SIZE and (r.threads or 1) > 1]
        # calls that move at most SMALL_CALL_BYTES take well under DISTURBED_MS on any machine
        small = [r for r in threaded if r.bytes_per_call <= SMALL_CALL_BYTES]
        if self.device == "cpu" and small:
            stalled = [r for r in small if r.median_ms >= DISTURBED_MS]
            if 2 * len(stalled) >= len(small):
                return (
                    f"this run was disturbed: {len(stalled)} of the {len(small)} multithreaded "
                    f"calls that move at most {format_bytes(SMALL_CALL_BYTES)} took at least "
                    f"{format_duration(DISTURBED_MS)}, far longer than a kernel that size needs, so "
                    "threads probably waited for a core (a loaded machine); the time per call hides the "
                    "caches, and the cache steps are not visible in this run."
                )
        dram = rows[-1]
        cache = last_level_cache_bytes(self.device)
        cached = sorted(
            r.gb_per_s
            for r in rows
            if r is not dram
            and r.n_elements > GRAIN_SIZE
            and (cache is None or r.bytes_per_array * ARRAYS[kernel] <= cache)
        )
        typical = cached[len(cached) // 2] if cached else None
        if typical is not None and typical >= 1.5 * dram.gb_per_s:
            return (
                f"Arrays that fit in a cache streamed faster than main memory: the median {kernel} "
                f"row that fits the last-level cache (and uses torch's threads) reached "
                f"{format_gb_per_s(typical)}, {typical / dram.gb_per_s:.2f}× its "
                f"{format_gb_per_s(dram.gb_per_s)} at the largest size."
            )
        return (
            f"No cache-sized array streamed 1.5× faster than main memory in this run (median "
            f"{kernel} row that fits the last-level cache against the largest size, "
            f"{format_gb_per_s(dram.gb_per_s)}): per-call overhead or the machine's load hides "
            "the caches."
        )

    def table(self) -> str:
        """Bytes per array down, kernels across, GB/s in the cells; skipped sizes say so."""
        header = ["per array", *self.kernels]
        lines = [header]
        skipped = set(self.dropped_bytes_per_array)
        sizes = sorted({*self.sizes_bytes, *skipped})
        for size in sizes:
            cells = [format_bytes(size)]
            for kernel in self.kernels:
                row = next((r for r in self.rows_for(kernel) if r.bytes_per_array == size), None)
                cells.append(format_gb_per_s(row.gb_per_s) if row else "-")
            lines.append(cells)
        widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
        text = ["  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) for line in lines]
        for i, size in enumerate(sizes, start=1):
            if size in skipped:
                text[i] += "  skipped: does not fit in memory"
        if skipped and self.budget_bytes is not None:
            text.append(
                f"(skipped sizes: {self.arrays} arrays of that size exceed this probe's budget of "
                f"{format_bytes(self.budget_bytes)}; close other programs to measure them)"
            )
        return "\n".join(text)

    def __str__(self) -> str:
        return f"STREAM sweep on {self.device} ({self.dtype}, STREAM byte counting)\n{self.table()}"

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON, with ``caches`` as {name: bytes}."""
        return {**dataclass_json(self), "caches": dict(self.caches)}


def stream_sweep(
    kernels: Sequence[str] = KERNELS,
    sizes_bytes: Sequence[int] | None = None,
    device: str = "cpu",
    *,
    fraction: float = DEFAULT_FRACTION,
    points_per_decade: int = 4,
    warmup_ms: float = 10.0,
    rep_ms: float = 40.0,
    min_reps: int = 5,
    show_progress: bool | None = None,
) -> StreamSweep:
    """Run STREAM kernels over array sizes from L1-sized to DRAM-sized; returns every row.

    Args:
        kernels: any of "copy", "scale", "add", "triad".
        sizes_bytes: bytes per array (default :func:`default_sizes`, a fixed
            grid); sizes that do not fit ``fraction`` of the free memory are
            not measured, and stay in the table as rows that say so.
        device: "cpu", "cuda" or "cuda:N".
        points_per_decade: density of the default sizes.
        warmup_ms, rep_ms, min_reps: passed to :func:`labkit.bench` per point.
        show_progress: a progress bar (None follows ``LABKIT_PROGRESS``).

    One set of buffers, as large as the largest size, is allocated once and
    every size uses its leading part. Arrays under ~100 KiB are timed many
    calls per sample, and there the time is mostly torch's per-call overhead,
    not the cache: the same lesson as a GPU's launch overhead.
    :meth:`StreamSweep.overhead_bytes_per_array` measures how far that reaches.
    """
    kernels = check_kernels(kernels)
    points_per_decade = check_int("points_per_decade", points_per_decade, minimum=1)
    device = resolve_device(device, kinds=CPU_OR_CUDA)
    if sizes_bytes is None:
        sizes = default_sizes(device, points_per_decade=points_per_decade)
    else:
        given = check_sizes(sizes_bytes, "sizes_bytes")
        check_int("sizes_bytes", given[0], minimum=ITEMSIZE_BYTES)  # the smallest
        sizes = tuple(sorted({s // ITEMSIZE_BYTES * ITEMSIZE_BYTES for s in given}))
    warmup_ms, rep_ms = check_budget_ms("warmup_ms", warmup_ms), check_budget_ms("rep_ms", rep_ms)
    min_reps = check_int("min_reps", min_reps, minimum=1)
    arrays = max(ARRAYS[k] for k in kernels)
    kept, dropped = _memory.fit_sizes(
        sizes,
        device=device,
        fraction=fraction,
        arrays=arrays,
        name=None if sizes_bytes is None else "sizes_bytes",
    )
    if not kept:
        _memory.require_fits(
            min(sizes),
            device=device,
            fraction=fraction,
            arrays=arrays,
            what="the STREAM sweep's smallest size",
        )
    # Sizes that do not fit stay in the table as rows that say so (no warning: the table
    # has the same rows on every machine, and says which sizes this one could not hold).
    budget = _memory.budget_bytes(device=device, fraction=fraction)
    # On a GPU another process can take memory after the budget was read: an allocation
    # that fails drops that size and the sweep goes on with the sizes below it.
    buffers, kept, failed = _memory.allocate_shrinking(
        kept,
        lambda size: _bandwidth.allocate_arrays(size // ITEMSIZE_BYTES, arrays, device),
        device=device,
        what="stream_sweep",
    )
    points = [(size, kernel) for size in kept for kernel in kernels]
    rows: list[BandwidthResult] = []
    for size, kernel in progress(
        points, desc=f"STREAM sweep ({device})", total=len(points), show=show_progress
    ):
        try:
            rows.append(
                measure_kernel(
                    kernel,
                    buffers,
                    size // ITEMSIZE_BYTES,
                    device,
                    warmup_ms=warmup_ms,
                    rep_ms=rep_ms,
                    min_reps=min_reps,
                )
            )
        except Exception as exc:
            if not _memory.is_out_of_memory(exc):
                raise
            failed += tuple(s for s in kept if s >= size)
            break
    del buffers
    note = ""
    if failed:
        _memory.release_memory(device)
        largest = max((r.bytes_per_array for r in rows), default=None)
        note = _memory.out_of_memory_message(
            "stream_sweep",
            f"{format_bytes(min(failed))} per array",
            None if largest is None else f"{format_bytes(largest)} per array",
            device,
        )
        if not rows:
            raise _memory.MemoryBudgetError(note)
        print(note)
    rows.sort(key=lambda r: (KERNELS.index(r.kernel), r.bytes_per_array))
    return StreamSweep(
        rows=tuple(rows),
        device=device,
        dtype=DTYPE,
        caches=cache_sizes(device),
        dropped_bytes_per_array=tuple(sorted({*dropped, *failed})),
        out_of_memory=note,
        budget_bytes=budget,
        arrays=arrays,
    )
