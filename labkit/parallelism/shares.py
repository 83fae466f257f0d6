"""How much of the CPU's theoretical FP32 peak the size sweeps reached, and whether that peak holds.

:func:`peak_report` says, per backend of one sweep, where its throughput
peaks and whether its largest size falls far below that peak.

:func:`peak_shares` puts the best torch matmul and add rates of two size
sweeps (:mod:`labkit.parallelism.sweep`) next to a
:class:`~labkit.machine.peak.CpuPeak`, and checks the peak itself: the best
1-thread matmul rate divided by one core's FP32 FLOP per cycle gives the
lowest clock that could have produced it. When that implied clock is above
the clock the peak assumed (``/proc/cpuinfo`` "cpu MHz" is the nominal clock
in many VMs), the real clock is higher and every share of the peak is an
overestimate: the printout says so.

The add's share is not the matmul's on equal terms: an add counts one FLOP per
element (torch computes it as a fused multiply-add with multiplier 1,
aten/src/ATen/native/ufunc/add.h, where the peak counts an FMA as 2), so even
with its data in cache it can reach at most half of an FMA peak. The printout gives the bytes its best
point held next to the last-level cache that the run's threads could use (at
most one cache instance per thread, :func:`labkit.machine.cpu.threads_last_level_cache_bytes`:
under the reference profile 2 threads on a 64-core server touch one or two of
its L3 slices, not all of them). That compares sizes, it measures nothing: data
that fit *could* run from cache (other programs sharing the cache may still
evict them), data that do not fit cannot all stay there. Notebook 02 measures
the cache cliff itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from labkit.core.results import JsonRecord

if TYPE_CHECKING:
    from labkit.machine.peak import CpuPeak
    from labkit.parallelism.sweep import SizeSweep

#: The verdicts on the peak's clock and the add's best point (the sanitize file masks exactly these).
CLOCK_TOO_LOW = (
    "above the {clock} the peak assumed: the reported clock or the assumed FMA count is too "
    "low, so the shares of peak above are overestimates"
)
CLOCK_PLAUSIBLE = (
    "not above the {clock} the peak assumed: no sign that the reported clock is too low"
)
IN_CACHE = (
    "within the last-level cache its {threads} could use ({cache}, at most one cache instance "
    "per thread), so that point could run from cache rather than main memory (sizes compared, "
    "nothing measured)"
)
BEYOND_CACHE = (
    "more than the last-level cache its {threads} could use ({cache}, at most one cache instance "
    "per thread), so not all of that point's data could stay in that cache"
)
CACHE_UNKNOWN = "the last-level cache size of this run's cores is unknown here"


@dataclass(frozen=True)
class PeakShares(JsonRecord):
    """The best measured rates as shares of the theoretical FP32 peak, and a check of that peak."""

    peak_gflop_per_s: float
    matmul_gflop_per_s: float
    add_gflop_per_s: float
    #: The three float32 arrays of the add's fastest size, in bytes.
    add_best_bytes: int
    #: The last-level cache the add's threads could use: at most one instance per thread,
    #: :func:`labkit.machine.cpu.threads_last_level_cache_bytes` (None: unknown).
    last_level_cache_bytes: int | None
    one_thread_matmul_gflop_per_s: float
    one_core_peak_gflop_per_s: float
    flop_per_cycle_per_core: int
    reported_clock_ghz: float
    #: The threads the all-threads add ran on (:func:`labkit.parallelism.threads.cpu_threads`).
    add_threads: int = 1

    @property
    def matmul_share(self) -> float:
        return self.matmul_gflop_per_s / self.peak_gflop_per_s

    @property
    def add_share(self) -> float:
        return self.add_gflop_per_s / self.peak_gflop_per_s

    @property
    def one_thread_share(self) -> float:
        """The best 1-thread matmul rate over one core's peak (above 1: the clock is too low)."""
        return self.one_thread_matmul_gflop_per_s / self.one_core_peak_gflop_per_s

    @property
    def implied_clock_ghz(self) -> float:
        """The lowest clock that delivers the 1-thread rate: rate ÷ FP32 FLOP per cycle per core."""
        return self.one_thread_matmul_gflop_per_s / self.flop_per_cycle_per_core

    @property
    def clock_too_low(self) -> bool:
        """Whether the 1-thread matmul needs a faster clock than the peak assumed."""
        return self.implied_clock_ghz > self.reported_clock_ghz

    def __str__(self) -> str:
        from labkit.core.units import format_bytes, format_gflop_per_s

        clock = f"{self.reported_clock_ghz:.2f} GHz"
        if self.last_level_cache_bytes is None:
            cache = CACHE_UNKNOWN
        else:
            template = (
                IN_CACHE if self.add_best_bytes <= self.last_level_cache_bytes else BEYOND_CACHE
            )
            cache = template.format(
                cache=format_bytes(self.last_level_cache_bytes),
                threads=f"{self.add_threads} thread{'s' if self.add_threads > 1 else ''}",
            )
        verdict = (CLOCK_TOO_LOW if self.clock_too_low else CLOCK_PLAUSIBLE).format(clock=clock)
        return "\n".join(
            [
                f"best matmul, torch on all threads: {format_gflop_per_s(self.matmul_gflop_per_s)}, "
                f"{self.matmul_share:.0%} of the theoretical FP32 peak",
                f"best add, torch on all threads: {format_gflop_per_s(self.add_gflop_per_s)}, "
                f"{self.add_share:.0%} of the theoretical FP32 peak; an add is one FLOP per element "
                "(one FMA with multiplier 1, where the peak counts an FMA as 2), so even from cache "
                "it can reach at most half of that peak",
                f"the add's fastest size holds {format_bytes(self.add_best_bytes)} in its three "
                f"arrays, {cache}",
                f"the matmul's share of the peak is {self.matmul_share / self.add_share:.1f}× the "
                "add's: the matmul reuses every number it loads and runs FMAs; the add reuses "
                "nothing and counts one FLOP per element",
                f"best 1-thread matmul, torch: {format_gflop_per_s(self.one_thread_matmul_gflop_per_s)}"
                f", {self.one_thread_share:.0%} of the theoretical FP32 peak of one core "
                f"({format_gflop_per_s(self.one_core_peak_gflop_per_s)})",
                f"that rate needs a clock of at least {self.implied_clock_ghz:.2f} GHz (rate ÷ the "
                f"FP32 FLOP per cycle per core assumed above), {verdict}",
            ]
        )


def peak_shares(adds: SizeSweep, matmuls: SizeSweep, peak: CpuPeak) -> PeakShares:
    """The best torch rates of an add and a matmul sweep against ``peak`` (see the module text).

    Both sweeps need the "torch-all-threads" and "torch-1-thread" backends
    (the default sweeps have them).
    """
    from labkit.machine.cpu import threads_last_level_cache_bytes
    from labkit.parallelism.threads import cpu_threads

    if adds.op != "add" or matmuls.op != "matmul":
        raise ValueError(
            f"peak_shares needs an add sweep and a matmul sweep, in that order; got "
            f"{adds.op!r} and {matmuls.op!r}"
        )
    add_points = adds.backend("torch-all-threads").points
    matmul_points = matmuls.backend("torch-all-threads").points
    one_thread = matmuls.backend("torch-1-thread").points
    if not (add_points and matmul_points and one_thread):
        raise ValueError("peak_shares needs at least one measured point on each torch backend")
    best_add = max(add_points, key=lambda p: p.gflop_per_s)  # 1 FLOP per element
    item = 4 if adds.dtype == "float32" else 8
    threads = cpu_threads()  # what the "torch-all-threads" backend ran on
    return PeakShares(
        peak_gflop_per_s=peak.gflop_per_s_fp32,
        matmul_gflop_per_s=max(p.gflop_per_s for p in matmul_points),
        add_gflop_per_s=best_add.gflop_per_s,
        add_best_bytes=3 * item * best_add.size,
        last_level_cache_bytes=threads_last_level_cache_bytes(threads),
        one_thread_matmul_gflop_per_s=max(p.gflop_per_s for p in one_thread),
        one_core_peak_gflop_per_s=peak.gflop_per_s_fp32 / peak.cores,
        flop_per_cycle_per_core=peak.flop_per_cycle_fp32,
        reported_clock_ghz=peak.clock_ghz,
        add_threads=threads,
    )


def peak_report(sweep: SizeSweep) -> str:
    """Per backend of ``sweep``: where throughput peaks, and whether the largest size is far below.

    "Far below" means under half the peak, so noise cannot flip the
    verdict; the fall beyond the caches (notebook 02) need not appear in
    the grid when the threads together have caches larger than the data.
    """
    from labkit.core.units import format_gflop_per_s, format_rate

    lines = []
    for result in sweep.backends:
        if not result.points:
            continue
        best = max(result.points, key=lambda p: getattr(p, sweep.metric))
        last = result.points[-1]
        peak, at_last = getattr(best, sweep.metric), getattr(last, sweep.metric)
        share = at_last / peak if peak > 0 else 1.0
        shown = (
            format_gflop_per_s(peak) if sweep.op == "matmul" else format_rate(peak, "elements/s")
        )
        if last.size == best.size:
            verdict = "its largest size is its fastest"
        elif share < 0.5:
            verdict = f"its largest size, n = {last.size:,}, runs at {share:.0%} of that: far below"
        else:
            verdict = (
                f"its largest size, n = {last.size:,}, runs at {share:.0%} of that: not far below"
            )
        lines.append(f"{result.label}: peaks at n = {best.size:,} ({shown}); {verdict}")
    return "\n".join(lines)


def python_gap(sweep: SizeSweep) -> str:
    """How many times each vectorised backend's rate is the Python loop's, at its smallest and largest n.

    At the smallest size a vectorised call is mostly its fixed per-call cost
    (torch's dispatch is larger than NumPy's), which a one-element list
    comprehension can match or beat; at the loop's largest size that cost is
    amortised and the per-element interpreter overhead decides. The last line
    says whether every backend is at least 100× or at least 10× faster there
    (bands far apart, so one noisy median does not move the verdict).
    "" when the sweep has no Python loop or it ran fewer than two sizes.
    """
    if not sweep.has_backend("python"):
        return ""
    loop = sweep.backend("python")
    if len(loop.points) < 2:
        return ""
    small, large = loop.points[0], loop.points[-1]
    lines = [
        f"each vectorised backend's rate ÷ the Python loop's, at n = {small.size:,} and at "
        f"n = {large.size:,} (the loop's largest):"
    ]
    at_large = []
    for result in sweep.backends:
        if result.backend == "python":
            continue
        first, last = result.point(small.size), result.point(large.size)
        if first is None or last is None:
            continue
        low = getattr(first, sweep.metric) / getattr(small, sweep.metric)
        high = getattr(last, sweep.metric) / getattr(large, sweep.metric)
        at_large.append(high)
        lines.append(f"  {result.label}: {low:.2f}× and {high:,.0f}×")
    if not at_large:
        return ""
    least = min(at_large)
    if least >= 100:
        verdict = "every vectorised backend is at least 100× faster than the Python loop"
    elif least >= 10:
        verdict = "every vectorised backend is at least 10× faster than the Python loop"
    else:
        verdict = "some vectorised backend is less than 10× faster than the Python loop"
    lines.append(f"at n = {large.size:,}: {verdict}")
    return "\n".join(lines)
