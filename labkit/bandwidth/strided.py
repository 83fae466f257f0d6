"""Strided reads: why the *pattern* of memory access matters as much as its amount.

Memory is never read one value at a time. A CPU fetches whole 64-byte cache
lines; a GPU fetches 32-byte sectors, and a warp's loads are merged
(*coalesced*) only when its 32 threads touch neighbouring addresses. So
reading every ``stride``-th float32 costs the same traffic as reading all of
them, up to the stride where each value sits in a line of its own (16 on a
CPU, 8 on a GPU); beyond it, every useful 4 bytes cost a whole line.

:func:`strided_read` sums the same number of values, ``x[::stride]`` over an
array ``stride`` times longer, for strides 1 to 64, and reports the
*effective* bandwidth (useful bytes per second) and the slowdown against
stride 1. Caches are flushed before every call, so every stride reads from
main memory. On the CPU the flush *reads* a buffer of twice the last-level
cache, all its instances summed (:class:`ReadFlushHostSync`): flushing by
writing would leave dirty lines whose write-backs to DRAM can land inside
the next timed read. The flush is *meant* to evict; :meth:`StridedResult.verdicts`
checks that stride 1 reads at main-memory speed before it reads anything
into the slowdowns.

Two things change with the stride, not one: the memory traffic, and the
kernel. torch sums a contiguous tensor with a vectorised loop and a strided
view with a different, gather-like one (in cache ``x[::2].sum()`` can take
longer per value than ``x.sum()``; the verdict says whether it does on a run).
So each stride is also timed on a short view whose whole span is at most a
quarter of the last-level cache, sized per stride (``in_cache`` in each row):
the same kernel without main memory, a compute-only baseline to read the
memory effect against.

On a GPU (torch CUDA tensors) the same code shows uncoalesced loads.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from labkit.bandwidth.stream import check_budget_ms
from labkit.core.progress import progress
from labkit.core.results import JsonRecord
from labkit.core.units import format_bytes, format_duration, format_gb_per_s
from labkit.core.validate import check_choice, check_int, check_sizes
from labkit.machine import memory as _memory
from labkit.machine.memory import DEFAULT_FRACTION, MemoryBudgetWarning
from labkit.machine.report import CPU_OR_CUDA, resolve_device
from labkit.timing.bench import Timing, bench
from labkit.timing.synchronizers import HostSync

DEFAULT_STRIDES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
#: Bytes the memory system moves per access: a CPU cache line (used where the CPU does not
#: report its own, :func:`labkit.machine.cache_line.cpu_cache_line`), a GPU sector.
LINE_BYTES = {"cpu": 64, "cuda": 32}
#: In cache, stride 2 reads twice the lines per value of stride 1; an in-cache slowdown at
#: stride 2 above this multiple of that line ratio points to torch's strided code path.
KERNEL_OVER_LINES = 1.3

#: Growth of the slowdown between two strides that both span at least two cache lines, above
#: which the cost is taken to grow per page touched: both line models predict no growth there.
PAGE_GROWTH = 1.3
#: Useful bytes read per call by default: past the caches once they are flushed,
#: small enough that the 64× longer array for stride 64 fits the memory budget.
DEFAULT_USEFUL_BYTES = {"cpu": 16 * 1024**2, "cuda": 64 * 1024**2}
_DTYPES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2}


@dataclass(frozen=True)
class StridedRow(JsonRecord):
    """One stride: the same ``n_elements`` summed, ``stride`` elements apart.

    ``useful_bytes`` are the bytes of the values summed; ``span_bytes`` the
    stretch of memory they are spread over. ``gb_per_s`` is *effective*:
    useful bytes per second, the number that matters to the program.
    ``slowdown`` is this stride's median time over stride 1's.
    """

    stride: int
    n_elements: int
    useful_bytes: int
    span_bytes: int
    timing: Timing
    slowdown: float
    #: The same strided sum over ``in_cache_elements`` values, spanning at most a quarter of the
    #: last-level cache (no flush).
    in_cache: Timing | None = None
    in_cache_elements: int = 0
    median_ms: float = field(init=False)
    gb_per_s: float = field(init=False)
    ns_per_value: float = field(init=False)
    in_cache_ns_per_value: float | None = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "median_ms", self.timing.median_ms)
        ms = self.timing.median_ms
        object.__setattr__(
            self, "gb_per_s", self.useful_bytes / (ms * 1e-3) / 1e9 if ms else math.inf
        )
        object.__setattr__(self, "ns_per_value", ms * 1e6 / self.n_elements)
        cached = (
            self.in_cache.median_ms * 1e6 / self.in_cache_elements
            if self.in_cache is not None and self.in_cache_elements
            else None
        )
        object.__setattr__(self, "in_cache_ns_per_value", cached)


@dataclass(frozen=True)
class StridedResult(JsonRecord):
    """Every stride's row, ascending, with what the hardware fetches per access."""

    rows: tuple[StridedRow, ...]
    device: str
    dtype: str
    itemsize_bytes: int
    line_bytes: int
    flushed: bool
    #: The cache the in-cache views were sized against (all instances summed; None: unknown).
    last_level_cache_bytes: int | None = None
    #: Where ``line_bytes`` came from on a CPU: "sysfs" or "sysctl" (reported), or "assumed".
    line_source: str = "assumed"

    @property
    def strides(self) -> tuple[int, ...]:
        return tuple(r.stride for r in self.rows)

    def row(self, stride: int) -> StridedRow:
        for r in self.rows:
            if r.stride == stride:
                return r
        raise ValueError(f"stride={stride!r} was not measured; measured: {self.strides}")

    def slowdown(self, stride: int) -> float:
        """Median time at ``stride`` over the median at stride 1."""
        return self.row(stride).slowdown

    def expected_slowdown(self, stride: int) -> float:
        """The slowdown if time were only bytes fetched: lines per value, relative to stride 1.

        ``min(stride × itemsize, line) / itemsize``: 1, 2, 4, ... until each
        value needs a line of its own, then flat. Real hardware departs from it
        (prefetchers, TLB misses, a loop that stops being vectorised), which is
        worth looking at.
        """
        stride = check_int("stride", stride, minimum=1)
        return min(stride * self.itemsize_bytes, self.line_bytes) / self.itemsize_bytes

    def in_cache_slowdown(self, stride: int) -> float | None:
        """Per-value time of the strided sum *in cache* at ``stride`` over stride 1's.

        No main memory is involved, but the views stream from the last-level
        cache, so the lines moved per value still grow with the stride as in
        :meth:`expected_slowdown`: this is the kernel's cost *plus* cache-line
        traffic, not the kernel alone. None when the in-cache baseline was not
        measured.
        """
        here, base = self.row(stride).in_cache_ns_per_value, self.row(1).in_cache_ns_per_value
        return None if here is None or not base else here / base

    def pair_slowdown(self, stride: int) -> float:
        """The bytes-only model if lines are fetched in 128-byte pairs (the L2 spatial prefetcher)."""
        stride = check_int("stride", stride, minimum=1)
        return min(stride * self.itemsize_bytes, 2 * self.line_bytes) / self.itemsize_bytes

    def disturbances(self, dram_gb_per_s: float | None = None) -> tuple[str, ...]:
        """Physically implausible timings in this run, one sentence each (empty: none found).

        A run on a loaded machine can be dominated by a fixed delay per call
        (threads waiting for a core), which the median does not remove when it
        hits most calls. Three checks compare values far apart: stride 1 must
        read at no less than half of ``dram_gb_per_s`` (the STREAM figure
        measured in the same session), since it reads main memory with no
        waste; no stride may be more than 2× *faster* per value in cache than
        stride 1; and no flushed stride may be less than half as slow as the
        lines it must fetch (``expected_slowdown``).
        """
        found = []
        if dram_gb_per_s and 1 in self.strides and self.row(1).gb_per_s < 0.5 * dram_gb_per_s:
            found.append(
                "the stride-1 baseline is not memory-bound: it read at under half the "
                "main-memory bandwidth measured in section 2 (a cost per call besides the "
                "memory: torch's reduction, its threads, or other load), so the slowdowns are "
                "not interpretable."
            )
        cached = [self.in_cache_slowdown(s) for s in self.strides]
        if any(c is not None and c < 0.5 for c in cached):
            found.append(
                "this run was disturbed: in cache, a strided sum took under half the time per "
                "value of the contiguous one, which no kernel does; the stride-1 in-cache time "
                "includes a delay that is not the kernel."
            )
        if self.flushed and any(
            self.slowdown(s) < 0.5 * self.expected_slowdown(s) for s in self.strides
        ):
            found.append(
                "this run was disturbed: a wide stride took less than half the time that fetching "
                "its cache lines takes at stride 1's bandwidth, so stride 1 itself was slowed by "
                "something other than memory."
            )
        return tuple(found)

    def verdicts(self, dram_gb_per_s: float | None = None) -> str:
        """What this run shows, decided by comparing values far apart (printed by notebook 02).

        ``dram_gb_per_s``: this machine's STREAM main-memory bandwidth, to
        check that stride 1 is memory-bound. Where :meth:`disturbances` finds
        a problem, the first one is printed instead of the kernel and
        prefetcher verdicts (always two lines).
        """
        found = self.disturbances(dram_gb_per_s)
        if found:
            # two lines, like a conclusion: the first problem found, and what is withheld
            return found[0] + "\nThe kernel and prefetcher verdicts are not printed for this run."
        lines = []
        if 2 in self.strides:
            kernel = self.in_cache_slowdown(2)
            if kernel is not None:
                lines_ratio = self.expected_slowdown(2)
                lines.append(
                    f"In cache, the strided sum takes {kernel:.2f}× the time per value at "
                    f"stride 2 that it takes at stride 1, against {lines_ratio:.2f}× the lines: "
                    + (
                        f"more than {KERNEL_OVER_LINES}× the line ratio, so torch's strided code "
                        "path costs more per value than its contiguous one, beyond the extra "
                        "lines."
                        if kernel >= KERNEL_OVER_LINES * lines_ratio
                        else f"within {KERNEL_OVER_LINES}× of the line ratio, so the extra "
                        "cache-line traffic can explain it; this run does not single out "
                        "torch's strided code path."
                    )
                )
        widest = max(self.strides)
        if self.device == "cpu" and widest * self.itemsize_bytes >= 2 * self.line_bytes:
            measured = self.slowdown(widest)
            single, pair = self.expected_slowdown(widest), self.pair_slowdown(widest)
            closer = (
                f"closer to lines fetched in {2 * self.line_bytes}-byte pairs ({pair:.2f}×) "
                f"than to single {self.line_bytes}-byte lines ({single:.2f}×)"
                if measured >= math.sqrt(single * pair)
                else f"closer to single {self.line_bytes}-byte lines ({single:.2f}×) than to "
                f"{2 * self.line_bytes}-byte pairs ({pair:.2f}×)"
            )
            line = f"At stride {widest} the slowdown is {measured:.2f}×: {closer}."
            line += self._page_or_pair(widest, measured >= math.sqrt(single * pair))
            lines.append(line)
        return "\n".join(lines)

    def _page_or_pair(self, widest: int, pair_like: bool) -> str:
        """Whether the cost kept growing past two lines per value (pages) or stopped (lines).

        Sixth review: both line models stop growing once a stride spans two
        lines (each value then costs one line, or one pair, whatever the
        stride), while a cost per page keeps growing, since each doubling of
        the stride doubles the pages touched per value. So where two measured
        strides both span at least two lines, their slowdowns tell the two
        apart; otherwise this run cannot (fourth review).
        """
        wide = [
            s for s in self.strides if s < widest and s * self.itemsize_bytes >= 2 * self.line_bytes
        ]
        if not wide:
            if not pair_like:
                return ""
            return (
                " Fetching in pairs is one explanation, the pages are another: with the "
                "number of values fixed, each doubling of the stride doubles the pages "
                "touched per value (more TLB misses, and prefetchers that stop at page "
                "boundaries); this run does not separate the two."
            )
        previous = max(wide)
        growth = self.slowdown(widest) / self.slowdown(previous)
        if growth >= PAGE_GROWTH:
            return (
                f" From stride {previous} to {widest} it still grew {growth:.2f}×, where "
                "fetching by lines or by pairs would keep it flat (one line, or one pair, per "
                "value at either stride): a cost per page touched (TLB misses, prefetchers "
                "that stop at page boundaries) is the likelier cause."
            )
        return (
            f" From stride {previous} to {widest} it grew only {growth:.2f}× (less than "
            f"{PAGE_GROWTH}×), as fetching by lines or pairs predicts: this run shows no cost "
            "per page beyond that."
        )

    def _line_note(self) -> str:
        """ "64-byte lines (reported by the CPU)", "... (assumed: ...)" or "32-byte sectors"."""
        if self.device != "cpu":
            return f"{self.line_bytes}-byte sectors"
        from labkit.machine.cache_line import CacheLine

        return CacheLine(self.line_bytes, self.line_source).describe()

    def _in_cache_span(self) -> str:
        """How large the in-cache views were, against the last-level cache (fixed wording)."""
        spans = [r.in_cache_elements * r.stride * self.itemsize_bytes for r in self.rows]
        cache = self.last_level_cache_bytes
        if not cache:
            return "last-level cache size unknown, so whether the views fit is not known"
        fits = max(spans) <= cache // 2
        return (
            f"each view spans at most {format_bytes(max(spans))}, "
            + ("within half" if fits else "MORE than half")
            + f" of the {format_bytes(cache)} last-level cache"
        )

    def table(self) -> str:
        with_cache = all(r.in_cache is not None for r in self.rows)
        head = ["stride", "median", "effective", "slowdown", "bytes-only model"]
        if with_cache:
            head += ["per value", "in cache", "in-cache slowdown"]
        lines = [head]
        for r in self.rows:
            line = [
                str(r.stride),
                format_duration(r.median_ms),
                format_gb_per_s(r.gb_per_s),
                f"{r.slowdown:.2f}×",
                f"{self.expected_slowdown(r.stride):.2f}×",
            ]
            if with_cache:
                cached = self.in_cache_slowdown(r.stride)
                line += [
                    format_duration(r.ns_per_value * 1e-6),
                    format_duration((r.in_cache_ns_per_value or 0.0) * 1e-6),
                    f"{cached:.2f}×" if cached is not None else "",
                ]
            lines.append(line)
        widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
        return "\n".join(
            "  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) for line in lines
        )

    def __str__(self) -> str:
        first = self.rows[0]
        return (
            f"Summing {first.n_elements:,} {self.dtype} values ({format_bytes(first.useful_bytes)}) "
            f"at increasing strides on {self.device} ({self._line_note()}"
            f"{', caches flushed before each call by reading a large buffer' if self.flushed else ''}"
            f"; 'in cache': the same strided sum, no flush, over fewer values ("
            f"{self._in_cache_span()}):\n{self.table()}"
        )


class ReadFlushHostSync(HostSync):
    """The host, with a cache flush that *reads* twice the last-level cache instead of writing it.

    :class:`~labkit.timing.synchronizers.HostSync` flushes with ``fill(0)``:
    every line of the flush buffer is then dirty, and evicting those lines
    later writes them back to DRAM, possibly during the next timed read
    (the review measured stride 1 at half of STREAM's bandwidth). A
    multithreaded sum evicts the same caches and leaves clean lines.
    """

    def cache_flusher(self) -> Callable[[], None]:
        import torch

        nbytes = _memory.require_fits(
            flush_bytes("cpu"),
            what="strided_read's cache-flush buffer (twice the summed last-level cache; "
            "flush_cache=False needs none)",
        )
        buffer = torch.ones(nbytes // 4, dtype=torch.float32)

        def flush() -> None:
            buffer.sum()

        return flush

    def __repr__(self) -> str:
        return "ReadFlushHostSync()"


def flush_bytes(device: str) -> int:
    """Size of the buffer the flush reads (CPU) or writes (GPU) between calls (in the budget)."""
    if device == "cpu":
        return 2 * _cpu_last_level_cache_bytes()
    import torch

    from labkit.timing.synchronizers import DEFAULT_FLUSH_BYTES

    l2 = int(getattr(torch.cuda.get_device_properties(torch.device(device)), "L2_cache_size", 0))
    return 2 * l2 if l2 > 0 else DEFAULT_FLUSH_BYTES


def _allocate(n_total: int, device: str, dtype: str) -> Any:
    """The array the strided views read, filled with ones (tests replace this to spy on sizes)."""
    import torch

    return torch.ones(n_total, dtype=getattr(torch, dtype), device=device)


def strided_read(
    strides: Sequence[int] = DEFAULT_STRIDES,
    *,
    n_elements: int | None = None,
    device: str = "cpu",
    dtype: str = "float32",
    fraction: float = DEFAULT_FRACTION,
    flush_cache: bool = True,
    rep_ms: float = 150.0,
    max_reps: int = 30,
    show_progress: bool | None = None,
) -> StridedResult:
    """Sum ``n_elements`` values at each stride and compare the effective GB/s.

    Args:
        strides: distances between the values summed, in elements; stride 1
            is always measured, as the baseline.
        n_elements: values summed per call (default: 16 MiB of them on a
            CPU, 64 MiB on a GPU). The array is ``max(strides)`` times longer.
            An explicit value that does not fit the memory budget is an error;
            the default shrinks to fit, with a warning.
        device: "cpu", "cuda" or "cuda:N".
        dtype: "float32" (default), "float64", "float16" or "bfloat16".
        flush_cache: evict the caches before every call so each stride
            reads from main memory (the flush buffer counts in the budget;
            on a CPU it is read, not written, so no dirty lines are left).
        rep_ms, max_reps: per-stride time budget and sample cap for
            :func:`labkit.bench`; at least ``min(10, max_reps)`` samples per stride.

    Each stride is also timed without a flush on a view of
    :func:`in_cache_elements` values whose span fits in a quarter of the
    last-level cache: the kernel's own cost, to read the memory effect against.
    """
    # stride 1 is the baseline of every slowdown
    strides = tuple(sorted({*check_sizes(strides, "strides"), 1}))
    dtype = check_choice("dtype", dtype, tuple(_DTYPES))
    rep_ms = check_budget_ms("rep_ms", rep_ms)
    max_reps = check_int("max_reps", max_reps, minimum=3)
    if n_elements is not None:
        n_elements = check_int("n_elements", n_elements, minimum=1)
    device = resolve_device(device, kinds=CPU_OR_CUDA)
    itemsize = _DTYPES[dtype]
    widest = max(strides)
    extra = flush_bytes(device) if flush_cache else 0
    what = "strided_read"
    if extra:  # the flush buffer alone can exceed a small budget: say how to drop it
        what += f" (its cache flush adds {format_bytes(extra)}; flush_cache=False drops it)"
    if n_elements is not None:
        n = n_elements
        _memory.require_fits(
            n * widest * itemsize,
            device=device,
            fraction=fraction,
            extra_bytes=extra,
            what=what,
            name="n_elements",
        )
    else:
        kind = "cpu" if device == "cpu" else "cuda"
        wanted = DEFAULT_USEFUL_BYTES[kind] * widest
        span = _memory.fit_bytes(wanted, device=device, fraction=fraction, extra_bytes=extra)
        n = span // (widest * itemsize)
        if n < 1024:
            _memory.require_fits(
                wanted, device=device, fraction=fraction, extra_bytes=extra, what=what
            )
        if span < wanted:
            warnings.warn(
                f"strided_read: summing {format_bytes(n * itemsize)} per call instead of "
                f"{format_bytes(DEFAULT_USEFUL_BYTES[kind])}, so that the array for stride "
                f"{widest} fits {fraction:.0%} of the free memory.",
                MemoryBudgetWarning,
                stacklevel=2,
            )
    x = _allocate(n * widest, device, dtype)
    llc = _cpu_last_level_cache_bytes() if device == "cpu" else flush_bytes(device) // 2
    from labkit.machine.cache_line import cpu_cache_line

    line = cpu_cache_line() if device == "cpu" else None
    cached_counts: dict[int, int] = {}
    sync: Any = ReadFlushHostSync() if device == "cpu" else device
    timings: list[tuple[int, Timing, Timing]] = []
    for stride in progress(strides, desc=f"strided reads ({device})", show=show_progress):
        view = x[: n * stride : stride]
        total = float(view.sum())
        if not math.isclose(total, n, rel_tol=1e-3):
            raise RuntimeError(
                f"summing {n} ones at stride {stride} gave {total}: the strided view is wrong"
            )
        timing = bench(
            _sum,
            view,
            warmup_ms=0.0,
            rep_ms=rep_ms,
            min_reps=min(10, max_reps),
            max_reps=max_reps,
            device=sync,
            flush_l2=flush_cache,
            label=f"stride {stride}",
            warn=False,
        )
        n_cached = cached_counts[stride] = min(n, in_cache_elements(device, stride, itemsize))
        cached_view = x[: n_cached * stride : stride]
        in_cache = bench(
            _sum,
            cached_view,
            warmup_ms=10.0,
            rep_ms=min(rep_ms, 50.0),
            min_reps=10,
            device=device,
            label=f"stride {stride}, in cache",
            warn=False,
        )
        timings.append((stride, timing, in_cache))
    del x
    base_ms = timings[0][1].median_ms
    rows = tuple(
        StridedRow(
            stride=stride,
            n_elements=n,
            useful_bytes=n * itemsize,
            span_bytes=n * stride * itemsize,
            timing=timing,
            slowdown=timing.median_ms / base_ms if base_ms > 0 else math.inf,
            in_cache=in_cache,
            in_cache_elements=cached_counts[stride],
        )
        for stride, timing, in_cache in timings
    )
    return StridedResult(
        rows=rows,
        device=device,
        dtype=dtype,
        itemsize_bytes=itemsize,
        line_bytes=line.line_bytes if line is not None else LINE_BYTES["cuda"],
        flushed=flush_cache,
        last_level_cache_bytes=llc or None,
        line_source=line.source if line is not None else "sectors",
    )


def _cpu_last_level_cache_bytes() -> int:
    """All the last-level cache the process's CPUs share, summed over instances.

    :func:`labkit.bandwidth.sizes.last_level_cache_bytes` (a 4-CCD EPYC has
    four L3s; two sockets, two); where sysfs says nothing, the timing
    module's per-CPU figure.
    """
    from labkit.bandwidth.sizes import last_level_cache_bytes
    from labkit.timing.synchronizers import cpu_last_level_cache_bytes

    return last_level_cache_bytes("cpu") or cpu_last_level_cache_bytes()


#: Fewest values an in-cache view sums: below this a call is mostly torch's overhead.
MIN_IN_CACHE_ELEMENTS = 4096


def in_cache_elements(device: str, stride: int, itemsize: int) -> int:
    """Values for the in-cache baseline at ``stride``: its span is a quarter of the last-level cache.

    Sized per stride, so the view fits the cache at every stride on every
    machine (a fixed count would span 16 MiB at stride 64, more than many
    laptops' L3). At least :data:`MIN_IN_CACHE_ELEMENTS`; the span check in
    :class:`StridedResult`'s header says where even that does not fit.
    """
    if device == "cpu":
        cache = _cpu_last_level_cache_bytes()
    else:
        cache = flush_bytes(device) // 2
    return max(MIN_IN_CACHE_ELEMENTS, cache // 4 // (stride * itemsize))


def _sum(view: Any) -> Any:
    return view.sum()
