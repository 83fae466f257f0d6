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
point held next to this CPU's last-level cache, so the reader can see whether
that point ran from cache or from memory.
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
    "within this CPU's last-level cache ({cache}): that point ran from cache, not from main memory"
)
BEYOND_CACHE = "more than this CPU's last-level cache ({cache}): that point ran from main memory"
CACHE_UNKNOWN = "this CPU's last-level cache size is unknown here"


@dataclass(frozen=True)
class PeakShares(JsonRecord):
    """The best measured rates as shares of the theoretical FP32 peak, and a check of that peak."""

    peak_gflop_per_s: float
    matmul_gflop_per_s: float
    add_gflop_per_s: float
    #: The three float32 arrays of the add's fastest size, in bytes.
    add_best_bytes: int
    #: The last-level cache this process's CPUs can use, all instances together (None: unknown).
    last_level_cache_bytes: int | None
    one_thread_matmul_gflop_per_s: float
    one_core_peak_gflop_per_s: float
    flop_per_cycle_per_core: int
    reported_clock_ghz: float

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
            cache = template.format(cache=format_bytes(self.last_level_cache_bytes))
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
    from labkit.machine.cpu import shared_last_level_cache_bytes

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
    return PeakShares(
        peak_gflop_per_s=peak.gflop_per_s_fp32,
        matmul_gflop_per_s=max(p.gflop_per_s for p in matmul_points),
        add_gflop_per_s=best_add.gflop_per_s,
        add_best_bytes=3 * item * best_add.size,
        last_level_cache_bytes=shared_last_level_cache_bytes(),
        one_thread_matmul_gflop_per_s=max(p.gflop_per_s for p in one_thread),
        one_core_peak_gflop_per_s=peak.gflop_per_s_fp32 / peak.cores,
        flop_per_cycle_per_core=peak.flop_per_cycle_fp32,
        reported_clock_ghz=peak.clock_ghz,
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
