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
stride 1. Caches are flushed before every call (``bench(flush_l2=True)``), so
every stride reads from main memory and only the access pattern differs.
On a GPU (torch CUDA tensors) the same code shows uncoalesced loads.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
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

DEFAULT_STRIDES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
#: Bytes the memory system moves per access: a CPU cache line, a GPU sector.
LINE_BYTES = {"cpu": 64, "cuda": 32}
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
    median_ms: float = field(init=False)
    gb_per_s: float = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "median_ms", self.timing.median_ms)
        ms = self.timing.median_ms
        object.__setattr__(
            self, "gb_per_s", self.useful_bytes / (ms * 1e-3) / 1e9 if ms else math.inf
        )


@dataclass(frozen=True)
class StridedResult(JsonRecord):
    """Every stride's row, ascending, with what the hardware fetches per access."""

    rows: tuple[StridedRow, ...]
    device: str
    dtype: str
    itemsize_bytes: int
    line_bytes: int
    flushed: bool

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

    def table(self) -> str:
        lines = [["stride", "median", "effective", "slowdown", "bytes-only model"]]
        for r in self.rows:
            lines.append(
                [
                    str(r.stride),
                    format_duration(r.median_ms),
                    format_gb_per_s(r.gb_per_s),
                    f"{r.slowdown:.2f}×",
                    f"{self.expected_slowdown(r.stride):.2f}×",
                ]
            )
        widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
        return "\n".join(
            "  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) for line in lines
        )

    def __str__(self) -> str:
        first = self.rows[0]
        return (
            f"Summing {first.n_elements:,} {self.dtype} values ({format_bytes(first.useful_bytes)}) "
            f"at increasing strides on {self.device} ({self.line_bytes}-byte "
            f"{'lines' if self.device == 'cpu' else 'sectors'}"
            f"{', caches flushed before each call' if self.flushed else ''}):\n{self.table()}"
        )


def flush_bytes(device: str) -> int:
    """Size of the buffer ``bench(flush_l2=True)`` writes between calls (counted in the budget)."""
    if device == "cpu":
        from labkit.timing.synchronizers import cpu_last_level_cache_bytes

        return 2 * cpu_last_level_cache_bytes()
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
    rep_ms: float = 20.0,
    max_reps: int = 10,
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
        flush_cache: overwrite the cache before every call so each stride
            reads from main memory (the flush buffer counts in the budget).
        rep_ms, max_reps: per-stride time budget and sample cap for
            :func:`labkit.bench` (a cache flush costs tens of ms on a CPU).
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
    timings: list[tuple[int, Timing]] = []
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
            min_reps=3,
            max_reps=max_reps,
            device=device,
            flush_l2=flush_cache,
            label=f"stride {stride}",
            warn=False,
        )
        timings.append((stride, timing))
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
        )
        for stride, timing in timings
    )
    return StridedResult(
        rows=rows,
        device=device,
        dtype=dtype,
        itemsize_bytes=itemsize,
        line_bytes=LINE_BYTES["cpu" if device == "cpu" else "cuda"],
        flushed=flush_cache,
    )


def _sum(view: Any) -> Any:
    return view.sum()
