"""Amdahl's law with a serial fraction inferred from measured speedups.

If a fraction f of a program cannot run in parallel, n workers speed it up by
at most S(n) = 1 / (f + (1 − f) / n), and never by more than 1/f however many
workers there are. Most texts assume an f. Here it is inferred:
:func:`measure_thread_scaling` times a workload on 1, 2, ... threads, and the
Karp–Flatt metric e = (1/S − 1/n) / (1 − 1/n) turns each measured speedup
into the serial fraction that would explain it. Thread start-up, joins and
shared memory bandwidth count as "serial" too, which is the point: e is what
the hardware actually delivers, not what the code looks like.

The default workload has a serial part we chose (``python_steps`` of a
pure-Python loop, which runs on one core whatever torch's thread count)
followed by a parallel torch matmul (``matmul_size``), so f is set by those
two constants and by the machine. On a 2-core machine f rests on one
speedup, S(2); its uncertainty comes from the spread of that speedup over
interleaved rounds (:attr:`ScalingPoint.speedup_low` / ``speedup_high``).
Any prediction beyond the thread counts measured is an extrapolation: it
assumes the parallel part keeps scaling perfectly. The formulas are pure
functions.

Amdahl's law gives 1 <= S(n) <= n for every f in [0, 1]. A run outside that
range is not described by it: S < 1 (Karp–Flatt e > 1) means the threads
cost more than they save (fork and join, contention for cores that other
programs hold), and S > n (e < 0) is super-linear (e.g. each thread's share
now fits in its core's cache). :attr:`ThreadScaling.regime` says which, and
then no serial fraction is reported and nothing is extrapolated.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from labkit.core.optional import import_optional
from labkit.core.validate import check_choice, check_ms, check_positive_int, check_real, check_sizes
from labkit.machine.memory import require_memory_fits
from labkit.parallelism.threads import cpu_threads, torch_threads
from labkit.timing.bench import Timing, bench

#: The built-in workloads of :func:`measure_thread_scaling`.
WORKLOADS: dict[str, str] = {
    "matmul+python": "a pure-Python loop (serial) followed by a torch matmul (parallel)",
    "matmul": "a torch matmul alone (parallel; what is left of f is threading overhead)",
}


# --------------------------------------------------------------------------- formulas


def amdahl_speedup(serial_fraction: float, n: float) -> float:
    """Amdahl's law: the speedup on ``n`` workers when ``serial_fraction`` of the work is serial.

    S(n) = 1 / (f + (1 − f) / n). With f = 0.1: S(2) = 1/0.55 ≈ 1.82,
    S(10) = 1/0.19 ≈ 5.26, and S(n) never exceeds 1/f = 10.
    """
    f = check_real("serial_fraction", serial_fraction, low=0.0, high=1.0)
    workers = check_real("n", n, low=1.0)
    return 1.0 / (f + (1.0 - f) / workers)


def karp_flatt(speedup: float, n: float) -> float:
    """The Karp–Flatt metric: the serial fraction that explains a measured ``speedup`` on ``n``.

    e = (1/S − 1/n) / (1 − 1/n), Amdahl's law solved for f. Example: a
    speedup of 1.6 on 2 threads gives e = (0.625 − 0.5) / 0.5 = 0.25. A
    perfect speedup (S = n) gives 0; no speedup at all (S = 1) gives 1; a
    super-linear one (S > n, e.g. the data now fits in the caches) gives e < 0.
    """
    s = check_real("speedup", speedup, low=0.0, low_open=True)
    workers = check_real("n", n, low=1.0, low_open=True)  # one worker has no parallel part
    return (1.0 / s - 1.0 / workers) / (1.0 - 1.0 / workers)


def fit_serial_fraction(
    threads: Sequence[float], speedups: Sequence[float], *, clamp: bool = True
) -> float:
    """The serial fraction f that best fits several measured speedups, clamped to [0, 1].

    Amdahl's law rearranges to 1/S − 1/n = f · (1 − 1/n): a line through the
    origin, so f is its least-squares slope
    Σ (1/S − 1/n)(1 − 1/n) / Σ (1 − 1/n)². With one point (n = 2) this is
    exactly the Karp–Flatt value. Points with n = 1 carry no information and
    are ignored. A negative fit (super-linear speedup) is clamped to 0 and a
    fit above 1 (a slowdown) to 1, since Amdahl's law has no serial part
    outside [0, 1]; ``clamp=False`` returns the raw slope, which is how
    :func:`measure_thread_scaling` tells such runs apart (see
    :attr:`ThreadScaling.regime`).
    """
    if len(threads) != len(speedups):
        raise ValueError(
            f"threads and speedups must have the same length, got {len(threads)} and "
            f"{len(speedups)}"
        )
    numerator = denominator = 0.0
    for i, (n_raw, s_raw) in enumerate(zip(threads, speedups, strict=True)):
        n = check_real(f"threads[{i}]", n_raw, low=1.0)
        s = check_real(f"speedups[{i}]", s_raw, low=0.0, low_open=True)
        if n == 1:
            continue
        x = 1.0 - 1.0 / n
        numerator += (1.0 / s - 1.0 / n) * x
        denominator += x * x
    if denominator == 0:
        raise ValueError(
            f"threads must include a count above 1 (with a speedup for it): fit_serial_fraction "
            f"needs a measurement on more than 1 thread, got threads={list(threads)!r}"
        )
    slope = numerator / denominator
    return min(1.0, max(0.0, slope)) if clamp else slope


# --------------------------------------------------------------------------- measurement


@dataclass(frozen=True)
class ScalingPoint:
    """The workload on one thread count: its time, speedup over 1 thread, and Karp–Flatt e."""

    threads: int
    median_ms: float
    speedup: float
    serial_fraction: float | None  # Karp–Flatt; None on 1 thread
    timing: Timing
    #: The lowest and highest speedup over the interleaved rounds (each round's
    #: 1-thread median ÷ this count's median in the same round); None with 1 round.
    speedup_low: float | None = None
    speedup_high: float | None = None


#: :attr:`ThreadScaling.regime`: the speedups lie between 1 and n, as Amdahl's law allows.
AMDAHL = "amdahl"
#: The speedups are below 1 (Karp–Flatt e > 1): overhead or contention dominates the run.
OVERHEAD = "overhead"
#: The speedups are above n (Karp–Flatt e < 0): super-linear, e.g. the shares now fit in cache.
SUPERLINEAR = "superlinear"


@dataclass(frozen=True)
class ThreadScaling:
    """Measured speedups over thread counts and the serial fraction fitted to them.

    ``serial_fraction`` is None when no serial fraction can be inferred:
    when only 1 thread could be measured (a 1-core machine), or when the
    speedups lie outside what Amdahl's law allows (:attr:`regime` is
    :data:`OVERHEAD` or :data:`SUPERLINEAR`), where a fitted f would be a
    clamp, not an inference. ``serial_fraction_low`` / ``_high`` are the
    fits to the highest and the lowest speedups over the rounds (None with 1
    round): the band that :meth:`predicted_range` and the plot carry into
    the extrapolation. ``band_clamped`` is True when a round's speedup fell
    outside [1, n], so an end of that band was clamped to 0 or 1.
    """

    workload: str
    points: tuple[ScalingPoint, ...]
    serial_fraction: float | None
    device: str = "cpu"
    serial_fraction_low: float | None = None
    serial_fraction_high: float | None = None
    rounds: int = 1
    band_clamped: bool = False

    @property
    def max_measured_threads(self) -> int:
        """The largest thread count measured: predictions beyond it are extrapolations."""
        return max(p.threads for p in self.points)

    @property
    def raw_serial_fraction(self) -> float | None:
        """The least-squares Karp–Flatt fit before clamping (None: nothing above 1 thread)."""
        measured = [p for p in self.points if p.threads > 1 and math.isfinite(p.speedup)]
        if not measured:
            return None
        return fit_serial_fraction(
            [p.threads for p in measured], [p.speedup for p in measured], clamp=False
        )

    @property
    def regime(self) -> str | None:
        """:data:`AMDAHL`, :data:`OVERHEAD` (e > 1) or :data:`SUPERLINEAR` (e < 0); None on 1 thread.

        Amdahl's law allows 1 <= S(n) <= n, i.e. a fit e in [0, 1]. Outside
        that range the law does not describe the run, and nothing is
        extrapolated from it.
        """
        e = self.raw_serial_fraction
        if e is None:
            return None
        if e > 1.0:
            return OVERHEAD
        if e < 0.0:
            return SUPERLINEAR
        return AMDAHL

    def _fraction_band(self) -> tuple[float, float] | None:
        """(highest f, lowest f) of the band, or None where Amdahl does not apply or no spread."""
        if (
            self.regime != AMDAHL
            or self.serial_fraction_low is None
            or self.serial_fraction_high is None
        ):
            return None
        return self.serial_fraction_high, self.serial_fraction_low

    def predicted_range(self, n: float) -> tuple[float, float] | None:
        """Amdahl's S(n) for the highest and the lowest fitted f (None without a spread)."""
        band = self._fraction_band()
        if band is None:
            return None
        return amdahl_speedup(band[0], n), amdahl_speedup(band[1], n)

    def predicted_speedup(self, n: float) -> float:
        """Amdahl's prediction for ``n`` threads from the fitted serial fraction."""
        if self.regime in (OVERHEAD, SUPERLINEAR):
            raise ValueError(
                f"the measured speedups are {'below 1' if self.regime == OVERHEAD else 'above n'}"
                ", which Amdahl's law does not describe, so nothing can be predicted from them"
            )
        if self.serial_fraction is None:
            raise ValueError(
                "no serial fraction was measured (only 1 thread ran), so nothing can be predicted"
            )
        return amdahl_speedup(self.serial_fraction, n)

    @property
    def max_speedup(self) -> float | None:
        """1 / f: the speedup no number of threads can beat (inf when f = 0)."""
        if self.serial_fraction is None or self.regime != AMDAHL:
            return None
        return math.inf if self.serial_fraction == 0 else 1.0 / self.serial_fraction

    def max_speedup_range(self) -> tuple[float, float] | None:
        """1/f for the highest and the lowest f of the band (None without a spread).

        The cap belongs with the band: for the band's lowest f the speedup can
        exceed the median f's cap, so one cap beside a band would contradict it.
        """
        band = self._fraction_band()
        if band is None:
            return None
        high, low = band
        return (1.0 / high if high > 0 else math.inf, 1.0 / low if low > 0 else math.inf)

    def regime_text(self) -> str:
        """One sentence on why Amdahl's law does not apply ("" when it does, or on 1 thread)."""
        counts = ", ".join(str(p.threads) for p in self.points if p.threads > 1)
        plural = "s" if len(self.points) > 2 else ""
        e = self.raw_serial_fraction
        if self.regime == OVERHEAD:
            return (
                f"the speedup{plural} on {counts} threads {'are' if plural else 'is'} below 1 "
                f"(Karp–Flatt e = {e:.3f}, above 1): the threads cost more than they save, so "
                "overhead or contention for the cores (other programs, thread wake-up and "
                "joins) dominates this run. Amdahl's law gives a speedup of at least 1 for "
                "every serial fraction, so it does not describe this run: no serial fraction "
                "is inferred and nothing is extrapolated"
            )
        if self.regime == SUPERLINEAR:
            return (
                f"the speedup{plural} on {counts} threads {'are' if plural else 'is'} above the "
                f"thread count (Karp–Flatt e = {e:.3f}, below 0): super-linear, e.g. each "
                "thread's share of the data now fits in its core's cache. Amdahl's law gives at "
                "most S(n) = n, so it does not describe this run: no serial fraction is "
                "inferred and nothing is extrapolated"
            )
        return ""

    def __str__(self) -> str:
        from labkit.core.units import format_duration, format_speedup

        lines = [f"{self.workload}: speedup over 1 thread"]
        for p in self.points:
            e = "" if p.serial_fraction is None else f", Karp–Flatt e = {p.serial_fraction:.3f}"
            lines.append(
                f"  {p.threads:>3} {'thread: ' if p.threads == 1 else 'threads:'} "
                f"{format_duration(p.median_ms)}, "
                f"speedup {format_speedup(p.speedup)}{e}"
            )
        if self.regime in (OVERHEAD, SUPERLINEAR):
            lines.append(f"  {self.regime_text()}.")
            return "\n".join(lines)
        if self.serial_fraction is None:
            lines.append("  only 1 thread here: the serial fraction cannot be inferred")
            return "\n".join(lines)
        top = self.max_measured_threads
        lines.append(
            f"  serial fraction inferred from the speedup{'s' if len(self.points) > 2 else ''} "
            f"on {', '.join(str(p.threads) for p in self.points if p.threads > 1)} "
            f"thread{'s' if top > 1 else ''}: f = {self.serial_fraction:.3f}"
        )
        if self.serial_fraction_low is not None and self.serial_fraction_high is not None:
            clamped = (
                " (clamped to [0, 1]: in some round the speedup fell outside 1 to n)"
                if self.band_clamped
                else ""
            )
            lines.append(
                f"  over {self.rounds} interleaved rounds the speedups give f between "
                f"f = {self.serial_fraction_low:.3f} and f = {self.serial_fraction_high:.3f}"
                f"{clamped}"
            )
        if top < 64:
            band = self.predicted_range(64)
            spread = (
                ""
                if band is None
                else f" (from {format_speedup(band[0])} to {format_speedup(band[1])} over that range)"
            )
            cap = self.max_speedup_range()
            cap_spread = (
                ""
                if cap is None
                else f" ({_format_cap(cap[0])} to {_format_cap(cap[1])} over that range)"
            )
            lines.append(
                f"  extrapolated beyond the {top} threads measured, assuming the parallel part "
                f"keeps scaling perfectly: {format_speedup(self.predicted_speedup(64))} on 64 "
                f"threads{spread}, never more than 1/f = "
                f"{_format_cap(self.max_speedup or math.inf)}{cap_spread}"
            )
        return "\n".join(lines)


def _format_cap(speedup: float) -> str:
    from labkit.core.units import format_speedup

    return "no limit" if math.isinf(speedup) else format_speedup(speedup)


def default_thread_counts(max_threads: int | None = None) -> tuple[int, ...]:
    """1, 2, ..., up to the core count (8 or fewer cores), else powers of two plus the count."""
    top = cpu_threads() if max_threads is None else check_positive_int("max_threads", max_threads)
    if top <= 8:
        return tuple(range(1, top + 1))
    counts = {2**k for k in range(top.bit_length()) if 2**k <= top}
    return tuple(sorted(counts | {top}))


def measure_thread_scaling(
    workload: str | Callable[[], Any] = "matmul+python",
    threads: Sequence[int] | None = None,
    *,
    matmul_size: int = 512,
    python_steps: int = 30_000,
    rounds: int = 5,
    warmup_ms: float = 20.0,
    rep_ms: float = 40.0,
    show_progress: bool | None = None,
) -> ThreadScaling:
    """Time a workload with torch on each thread count and derive the serial fraction.

    Args:
        workload: "matmul+python" (default), "matmul" (see :data:`WORKLOADS`),
            or any callable that does the work with torch's current threads.
        threads: the thread counts; must include 1, the baseline. Default
            :func:`default_thread_counts`.
        matmul_size: n of the n×n float32 matmul in the built-in workloads.
        python_steps: iterations of the serial Python loop ("matmul+python").
        rounds: the thread counts are timed in turn, ``rounds`` times over,
            and each count's samples are pooled. Interleaving spreads a burst
            of background load over all counts instead of biasing one ratio;
            the per-round speedups give the spread of S and of f.
        warmup_ms, rep_ms: :func:`labkit.bench` budgets per count per round.
        show_progress: a progress bar; None follows :mod:`labkit.core.progress`.

    torch's thread count is restored afterwards, also when the workload raises.
    """
    from labkit.core.progress import progress

    if not callable(workload):
        check_choice("workload", workload, tuple(WORKLOADS))
    counts = default_thread_counts() if threads is None else _check_threads(threads)
    rounds = check_positive_int("rounds", rounds)
    warmup = check_ms("warmup_ms", warmup_ms, allow_zero=True)
    rep = check_ms("rep_ms", rep_ms)
    matmul_size = check_positive_int("matmul_size", matmul_size)
    python_steps = check_positive_int("python_steps", python_steps)
    if not callable(workload):  # a, b and c of the built-in workloads' matmul, float32
        require_memory_fits(3 * 4 * matmul_size**2, what=f"matmul_size={matmul_size}")
    name, fn = _workload(workload, matmul_size, python_steps)

    samples: dict[int, list[float]] = {n: [] for n in counts}
    round_medians: dict[int, list[float]] = {n: [] for n in counts}
    first_call: dict[int, float | None] = {}
    warmups: dict[int, int] = dict.fromkeys(counts, 0)
    plan = [(r, n) for r in range(rounds) for n in counts]
    for _, n in progress(plan, desc="thread scaling", total=len(plan), show=show_progress):
        with torch_threads(n):
            t = bench(fn, warmup_ms=warmup, rep_ms=rep, device="cpu", warn=False)
        samples[n].extend(t.samples_ms)
        round_medians[n].append(t.median_ms)
        first_call.setdefault(n, t.first_call_ms)
        warmups[n] += t.warmup_calls
    timings = {
        n: Timing(
            samples_ms=tuple(samples[n]),
            label=f"{name}, {n} thread{'s' if n > 1 else ''}",
            device="cpu",
            warmup_calls=warmups[n],
            first_call_ms=first_call[n],
        )
        for n in counts
    }
    base_ms = timings[1].median_ms
    points = []
    for n in counts:
        speedup = base_ms / timings[n].median_ms if timings[n].median_ms > 0 else math.inf
        e = karp_flatt(speedup, n) if n > 1 and math.isfinite(speedup) else None
        per_round = [
            one / mine
            for one, mine in zip(round_medians[1], round_medians[n], strict=True)
            if mine > 0
        ]
        low, high = (min(per_round), max(per_round)) if rounds > 1 and per_round else (None, None)
        points.append(ScalingPoint(n, timings[n].median_ms, speedup, e, timings[n], low, high))
    measured = [p for p in points if p.threads > 1 and math.isfinite(p.speedup)]
    f = f_low = f_high = None
    clamped = False
    if measured:
        threads_measured = [p.threads for p in measured]
        raw = fit_serial_fraction(threads_measured, [p.speedup for p in measured], clamp=False)
        if 0.0 <= raw <= 1.0:  # else Amdahl's law does not describe the run: no f at all
            f = raw
            highs = [p.speedup_high for p in measured]
            lows = [p.speedup_low for p in measured]
            if all(s is not None for s in highs + lows):
                raw_low = fit_serial_fraction(threads_measured, highs, clamp=False)  # type: ignore[arg-type]
                raw_high = fit_serial_fraction(threads_measured, lows, clamp=False)  # type: ignore[arg-type]
                f_low, f_high = min(1.0, max(0.0, raw_low)), min(1.0, max(0.0, raw_high))
                clamped = (f_low, f_high) != (raw_low, raw_high)
    return ThreadScaling(
        workload=name,
        points=tuple(points),
        serial_fraction=f,
        serial_fraction_low=f_low,
        serial_fraction_high=f_high,
        rounds=rounds,
        band_clamped=clamped,
    )


def _check_threads(threads: Sequence[int]) -> tuple[int, ...]:
    counts = check_sizes(threads, "threads")
    if counts[0] != 1:
        raise ValueError(
            f"threads must include 1: speedups are measured against one thread, got {threads!r}"
        )
    return counts


def _workload(
    workload: str | Callable[[], Any], matmul_size: int, python_steps: int
) -> tuple[str, Callable[[], Any]]:
    if callable(workload):
        return getattr(workload, "__name__", "workload"), workload
    n, steps = matmul_size, python_steps
    torch = import_optional("torch", "measuring thread scaling")
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=generator)
    b = torch.randn(n, n, generator=generator)
    c = torch.empty(n, n)

    def parallel_part() -> Any:
        return torch.matmul(a, b, out=c)

    if workload == "matmul":
        return workload, parallel_part

    def serial_then_parallel() -> Any:
        _python_serial_step(steps)  # one core, whatever torch's thread count
        return parallel_part()

    return workload, serial_then_parallel


def _python_serial_step(steps: int) -> int:
    total = 0
    for i in range(steps):
        total += i * i
    return total
