"""torch's default grain size: below it ``a + b`` runs on one thread whatever you set.

ATen splits an elementwise loop across threads only when it has more than
its grain size. The default, ``at::internal::GRAIN_SIZE`` = 32,768 elements
(``aten/src/ATen/TensorIterator.h``), is the default ``grain_size`` argument of
``TensorIteratorBase::for_each``, which ``a + b`` and the other kernels
built on ``cpu_kernel`` / ``cpu_kernel_vec`` use. Other ops pass their own:
the vectorised unary kernels (exp, log, sin, tanh, sqrt, erf, ...) in
``aten/src/ATen/native/cpu/UnaryOpsKernel.cpp`` use ``grain_size = 2048``,
so they split much smaller inputs. ``for_each`` runs the whole loop
serially when ``numel < grain_size``, and ``at::parallel_for``
(``aten/src/ATen/Parallel-inl.h``) only goes parallel when
``end - begin > grain_size``. ``invoke_parallel`` (``ParallelOpenMP.h``)
then opens ``#pragma omp parallel`` *without* a ``num_threads`` clause (its
comment: "can't use num_threads clause due to bugs in GOMP's thread pool
(See #32008)"): every thread of the pool is woken and joins the closing
barrier, and only the first ``min(threads, ceil(n / grain_size))`` get a
chunk. So at n <= 32,768 the "1 thread" and "2 threads" settings run the
same one-thread code for ``a + b``, and at n = 32,769 the add is split in
two halves of about 16,385 elements while the whole pool pays the fork and
join: the first size where splitting can cost more than it saves.

:func:`grain_sweep` times ``c = a + b`` (float32, output preallocated) on a
fine grid across that threshold with 1 thread and with all threads,
interleaved round by round, and reports each size's 1-thread ÷ all-threads
time ratio with its range over the rounds, and what splitting cost at the
first split size (all threads' median minus 1 thread's). Its printed
verdict compares sizes far apart (far below against far above the grain
size), which noise cannot flip; the points just above the threshold are
shown, not judged.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from labkit.core.optional import import_optional
from labkit.core.results import JsonRecord
from labkit.core.validate import check_ms, check_positive_int, check_sizes
from labkit.parallelism.threads import cpu_threads, torch_threads
from labkit.timing.bench import bench

#: ``at::internal::GRAIN_SIZE`` in aten/src/ATen/TensorIterator.h: ATen's default grain size, the
#: most elements ``a + b`` (and every op using the default) runs on one thread.
GRAIN_SIZE = 32_768

#: The default grid: ×2 steps far from the threshold, fine steps around it, and 32,769.
GRAIN_SIZES: tuple[int, ...] = (
    8_192,
    16_384,
    24_576,
    32_768,
    32_769,
    40_960,
    49_152,
    65_536,
    131_072,
    262_144,
)

#: The two verdicts :meth:`GrainSweep.verdict` can print (the sanitize file masks exactly these).
FASTER_FAR_ABOVE = "all threads are faster far above the grain size than far below it on this run"
NOT_FASTER_FAR_ABOVE = (
    "all threads are not clearly faster far above the grain size on this run (a loaded machine?)"
)


@dataclass(frozen=True)
class GrainPoint(JsonRecord):
    """One size: median times with 1 thread and all threads, and their ratio over the rounds."""

    size: int
    one_thread_ms: float
    all_threads_ms: float
    #: 1-thread time ÷ all-threads time: the median, lowest and highest over the rounds.
    ratio: float
    ratio_low: float
    ratio_high: float

    @property
    def split(self) -> bool:
        """Whether ATen splits this size across threads at all (n > GRAIN_SIZE)."""
        return self.size > GRAIN_SIZE

    @property
    def split_cost_ms(self) -> float:
        """All threads' median minus 1 thread's: the fork and join minus the time saved (< 0: saved)."""
        return self.all_threads_ms - self.one_thread_ms


def format_ratio(ratio: float) -> str:
    """A time ratio that stays readable when tiny: 1.37 -> "1.37×", 0.000294 -> "1/3,400×".

    Below 0.1 the ratio is printed as 1/k with k to 2 significant digits, so
    a 3,400-fold slowdown does not collapse into "0.00×".
    """
    from labkit.core.units import format_speedup

    if ratio <= 0 or not math.isfinite(ratio) or ratio >= 0.1:
        return format_speedup(ratio)
    inverse = 1.0 / ratio
    digits = max(0, len(str(int(inverse))) - 2)
    return f"1/{round(inverse, -digits):,.0f}×"


@dataclass(frozen=True)
class GrainSweep(JsonRecord):
    """The add timed across torch's grain size; ``str()`` gives the table and the verdict."""

    threads: int
    rounds: int
    points: tuple[GrainPoint, ...]
    grain_size: int = GRAIN_SIZE

    def verdict(self) -> str:
        """Far above against far below the threshold: faster only if the ranges do not overlap."""
        below, above = self.points[0], self.points[-1]
        return FASTER_FAR_ABOVE if above.ratio_low > below.ratio_high else NOT_FASTER_FAR_ABOVE

    def first_split(self) -> GrainPoint | None:
        """The smallest size ATen splits (n > grain size), or None if none was measured."""
        return next((p for p in self.points if p.size > self.grain_size), None)

    def __str__(self) -> str:
        from labkit.core.units import format_duration

        header = ["n", "1 thread", f"{self.threads} threads", "1 thread ÷ all", "range", "ATen"]
        rows = [header]
        for p in self.points:
            rows.append(
                [
                    f"{p.size:,}",
                    format_duration(p.one_thread_ms),
                    format_duration(p.all_threads_ms),
                    format_ratio(p.ratio),
                    f"{format_ratio(p.ratio_low)} to {format_ratio(p.ratio_high)}",
                    "split in 2+ chunks" if p.split else "one thread either way",
                ]
            )
        widths = [max(len(r[c]) for r in rows) for c in range(len(header))]
        lines = [
            f"c = a + b (float32) across torch's grain size ({self.grain_size:,} elements): "
            f"1 thread against {self.threads}, {self.rounds} interleaved rounds"
        ]
        lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
        below, above = self.points[0], self.points[-1]
        lines.append(
            f"n = {below.size:,} against n = {above.size:,}: {self.verdict()}."
            if below.size <= self.grain_size < above.size
            else "The sizes do not straddle the grain size, so no verdict is printed."
        )
        split = self.first_split()
        if split is not None:
            cost = split.split_cost_ms
            lines.append(
                f"The net effect of splitting at n = {split.size:,} ({self.threads} threads' "
                "median minus 1 thread's: the fork and join of the pool minus the time the other "
                "threads save; positive: the split cost more than it saved, negative: it paid "
                f"off; on a busy machine it includes waiting for a free core): "
                f"{'+' if cost >= 0 else '-'}{format_duration(abs(cost))}, against "
                f"{format_duration(split.one_thread_ms)} for the whole add on 1 thread."
            )
        return "\n".join(lines)


def grain_sweep(
    sizes: Sequence[int] | None = None,
    *,
    rounds: int = 5,
    warmup_ms: float = 2.0,
    rep_ms: float = 15.0,
) -> GrainSweep:
    """Time ``torch.add(a, b, out=c)`` with 1 thread and all threads at each size, interleaved.

    Args:
        sizes: elements per vector; default :data:`GRAIN_SIZES` (8,192 to
            262,144, fine around 32,768). Sorted, duplicates dropped.
        rounds: every (size, threads) pair is timed once per round, in turn,
            so background load spreads over all of them; each ratio is the
            median over the rounds, and its range the lowest and highest.
        warmup_ms, rep_ms: :func:`labkit.bench` budgets per pair per round.

    Needs at least 2 threads (:func:`cpu_threads`): on one core there is
    nothing to compare, and a ValueError says so (a notebook checks
    :func:`cpu_threads` first and prints one line instead).
    """
    sizes_t = check_sizes(GRAIN_SIZES if sizes is None else sizes)
    rounds = check_positive_int("rounds", rounds)
    warmup = check_ms("warmup_ms", warmup_ms, allow_zero=True)
    rep = check_ms("rep_ms", rep_ms)
    threads = cpu_threads()
    if threads < 2:
        raise ValueError(
            "grain_sweep compares 1 thread with all threads, but this process may use only "
            "1 CPU; run it where at least 2 cores are available"
        )
    torch = import_optional("torch", "the grain-size sweep")
    cases = {}
    for n in sizes_t:
        generator = torch.Generator().manual_seed(n)
        a, b = torch.randn(n, generator=generator), torch.randn(n, generator=generator)
        cases[n] = (a, b, torch.empty(n))
    medians: dict[tuple[int, int], list[float]] = {
        (n, t): [] for n in sizes_t for t in (1, threads)
    }
    for _ in range(rounds):
        for n in sizes_t:
            a, b, c = cases[n]
            for t in (1, threads):
                with torch_threads(t):
                    timing = bench(
                        lambda a=a, b=b, c=c: torch.add(a, b, out=c),
                        warmup_ms=warmup,
                        rep_ms=rep,
                        device="cpu",
                        warn=False,
                    )
                medians[n, t].append(timing.median_ms)
    points = []
    for n in sizes_t:
        ones, alls = medians[n, 1], medians[n, threads]
        ratios = [o / m for o, m in zip(ones, alls, strict=True) if m > 0]
        points.append(
            GrainPoint(
                size=n,
                one_thread_ms=statistics.median(ones),
                all_threads_ms=statistics.median(alls),
                ratio=statistics.median(ratios),
                ratio_low=min(ratios),
                ratio_high=max(ratios),
            )
        )
    return GrainSweep(threads=threads, rounds=rounds, points=tuple(points))
