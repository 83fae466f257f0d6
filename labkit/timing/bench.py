"""Time a function correctly on a CPU or a GPU: :func:`bench` returns a :class:`Timing`.

Timing GPU code with a bare host clock measures how long it took to *queue*
the work, because GPU calls return before the GPU has run them. ``bench``
does what the references do (triton's ``do_bench``, torch.utils.benchmark):

1. it synchronizes every device the work may run on before it reads a clock,
   and on CUDA it times each call with device events instead;
2. it calls ``fn`` once on its own (lazy initialisation, compilation, cuDNN
   autotuning) and keeps that call out of the samples (``first_call_ms``);
3. it warms up and repeats for a *time budget* in ms, not a fixed count, so a
   1 µs kernel and a 1 s training step both get a sensible number of samples;
4. when one call is short (under :data:`MIN_SAMPLE_MS`), each sample times
   many calls in a row and divides, so the clock's own cost (≈0.1 µs per read
   pair) is a small part of every sample (``calls_per_sample``), as
   ``timeit`` and torch.utils.benchmark do;
5. it keeps every sample and reports the median and the IQR, and warns when
   the spread says the measurement is unreliable.

The IQR describes the noise *within one run*. Load that shifts a whole run
(another program, a lower clock) leaves the IQR small and moves the median:
only repeated runs show it. :func:`labkit.timing.interleave.interleave` runs
variants round-robin and reports both spreads.

This module imports no framework and not even numpy: the statistics are pure
Python (linear-interpolation quantiles, numpy's default method).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from labkit.core.results import JsonRecord
from labkit.core.units import duration_unit, format_duration
from labkit.core.validate import check_function, check_int, check_ms, check_positive_int
from labkit.machine.allocator import minor_faults
from labkit.timing import sync as _sync

#: A timing whose IQR exceeds this fraction of its median is flagged as noisy.
#: torch.utils.benchmark uses the same threshold.
NOISY_THRESHOLD = 0.10

#: A host-clock sample shorter than this (ms) is made of several calls: a pair
#: of perf_counter reads costs 0.1–0.2 µs (149 and 188 ns measured on two VMs), so a
#: 0.2 ms sample carries about 0.1% of it.
MIN_SAMPLE_MS = 0.2

#: At most this many calls make one sample.
MAX_CALLS_PER_SAMPLE = 100_000


class NoisyTimingWarning(UserWarning):
    """The samples of a timing spread so widely that its median is unreliable."""


# --------------------------------------------------------------------------- statistics


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """The q-quantile of already-sorted values by linear interpolation (numpy's default).

    Position ``(n - 1) * q`` between the two nearest order statistics. The
    result is clamped between them, so rounding can never put a quartile
    outside the samples or out of order.
    """
    n = len(sorted_values)
    position = (n - 1) * q
    lower = math.floor(position)
    upper = min(lower + 1, n - 1)
    a, b = float(sorted_values[lower]), float(sorted_values[upper])
    t = position - lower
    value = a + (b - a) * t if t < 0.5 else b - (b - a) * (1.0 - t)
    return min(max(value, a), b)


@dataclass(frozen=True)
class Timing(JsonRecord):
    """Every sample of one measurement and the statistics that summarise them.

    All durations are in milliseconds (``_ms``). The median and the
    interquartile range (IQR, from ``q1_ms`` to ``q3_ms``) describe the
    typical call without being dragged by the odd slow one (a context switch,
    a page fault); ``min_ms`` is the fastest sample of this run: a best case
    for this run, not what the hardware does undisturbed (a load that lasts
    the whole run slows every sample). The
    derived fields are computed from ``samples_ms`` when the object is made.

    ``device`` names where the work ran (with any other device that was
    drained, e.g. "cpu (+ synced cuda:0)"); ``method`` is "device events" or
    "host clock"; ``warmup_calls`` counts the calls between the first call
    (``first_call_ms``, not a sample) and the samples. Each sample is the
    mean time per call of ``calls_per_sample`` calls made back to back (1
    unless one call is shorter than :data:`MIN_SAMPLE_MS`). ``relative_spread``
    is IQR / median; above 0.10 the timing is ``noisy``.
    ``minor_faults_per_call`` is the process's minor page faults during the
    measured calls over their number (None where the OS does not count
    them): a call that faults in fresh pages every time is timing the
    kernel as well (:mod:`labkit.machine.allocator`), and every call pays
    it alike, so the spread does not show it.

    A notebook exercise may build one by hand from its own samples, so the
    samples are checked (at least one, each finite and >= 0); nothing else is.
    """

    json_extra = ("noisy",)

    samples_ms: tuple[float, ...]
    label: str | None = None
    device: str = "cpu"
    warmup_calls: int = 0
    first_call_ms: float | None = None
    method: str = "host clock"
    calls_per_sample: int = 1
    minor_faults_per_call: float | None = None
    n: int = field(init=False)
    median_ms: float = field(init=False)
    q1_ms: float = field(init=False)
    q3_ms: float = field(init=False)
    iqr_ms: float = field(init=False)
    min_ms: float = field(init=False)
    max_ms: float = field(init=False)
    mean_ms: float = field(init=False)
    relative_spread: float = field(init=False)

    def __post_init__(self) -> None:
        samples = _check_samples(self.samples_ms)
        ordered = sorted(samples)
        q1, median, q3 = (quantile(ordered, q) for q in (0.25, 0.5, 0.75))
        iqr = q3 - q1
        if median > 0:
            spread = iqr / median
        else:
            spread = 0.0 if iqr == 0 else math.inf
        values = {
            "samples_ms": samples,
            "n": len(samples),
            "median_ms": median,
            "q1_ms": q1,
            "q3_ms": q3,
            "iqr_ms": iqr,
            "min_ms": ordered[0],
            "max_ms": ordered[-1],
            "mean_ms": min(max(math.fsum(samples) / len(samples), ordered[0]), ordered[-1]),
            "relative_spread": spread,
        }
        for name, value in values.items():
            object.__setattr__(self, name, value)

    @property
    def noisy(self) -> bool:
        """Whether the IQR is more than 10% of the median (see :class:`NoisyTimingWarning`)."""
        return self.relative_spread > NOISY_THRESHOLD

    def __str__(self) -> str:
        unit = duration_unit(self.median_ms)
        head = f"{self.label}: " if self.label else ""
        text = (
            f"{head}median {format_duration(self.median_ms)} "
            f"(IQR {format_duration(self.iqr_ms, unit)}, min {format_duration(self.min_ms, unit)}, "
            f"n={self.n}) on {self.device}"
        )
        if self.noisy:
            text += f" [noisy: IQR is {_percent(self.relative_spread)} of the median]"
        return text


def _percent(fraction: float) -> str:
    return "more than 100%" if math.isinf(fraction) else f"{fraction * 100:.0f}%"


def _check_samples(samples: Iterable[float]) -> tuple[float, ...]:
    values = tuple(samples)
    if not values:
        raise ValueError("samples_ms is empty: a Timing needs at least one sample")
    for i, value in enumerate(values):
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"samples_ms[{i}] must be a finite duration >= 0 ms, got {value!r}")
    return tuple(map(float, values))


def noisy_message(timing: Timing) -> str:
    """The text of the :class:`NoisyTimingWarning` for ``timing``: causes and what to do."""
    name = f"{timing.label!r}" if timing.label else "this timing"
    return (
        f"{name}: IQR is {_percent(timing.relative_spread)} of the median "
        f"({format_duration(timing.iqr_ms)} around {format_duration(timing.median_ms)}, "
        f"n={timing.n}), so the median is unreliable. Likely causes: other processes using "
        "the CPU or GPU, frequency scaling (turbo, power saving, thermal throttling), or work "
        "too short to time (under ~10 µs, clock and launch overhead dominate). Close other "
        "programs, time more work per call, or raise rep_ms; compare medians, not single runs."
    )


# --------------------------------------------------------------------------- bench


def bench(
    fn: Callable[..., Any],
    *args: Any,
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    min_reps: int = 5,
    max_reps: int = 100_000,
    calls_per_sample: int | None = None,
    device: str | _sync.Synchronizer | None = None,
    flush_l2: bool = False,
    grad_to_none: Iterable[Any] | None = None,
    label: str | None = None,
    clock: Callable[[], float] = time.perf_counter,
    warn: bool = True,
    **kwargs: Any,
) -> Timing:
    """Time ``fn(*args, **kwargs)`` and return every sample with its statistics.

    Args:
        fn: the work to time. Its result is discarded.
        *args, **kwargs: passed to ``fn``. Because keyword arguments go to
            ``fn``, bench's own options below cannot be passed through to it;
            wrap ``fn`` with :func:`functools.partial` (or a lambda) if it has
            a parameter with one of those names.
        warmup_ms: time budget in ms for warm-up calls after the first call
            (caches, clocks and allocators settle). 0 skips warm-up.
        rep_ms: time budget in ms for the measured calls. Calls stop at the
            first sample that takes the total to ``rep_ms`` or beyond, so each
            budget is overrun by at most one call.
        min_reps: at least this many samples, however long a call takes.
        max_reps: at most this many warm-up calls and at most this many
            samples (keeps sub-µs functions from building huge lists).
        calls_per_sample: how many calls one host-clock sample times (their
            mean is the sample). None chooses from the warm-up: enough calls
            for a sample of at least :data:`MIN_SAMPLE_MS`, so the clock's own
            cost does not inflate sub-µs calls. Always 1 with ``flush_l2`` or
            ``grad_to_none`` (they run before every call) and with device
            events (each call has its own pair).
        device: where the work runs. None infers it from the arguments and
            the first call's result (torch tensors and modules, CuPy arrays,
            TensorFlow tensors) and also drains any framework already running
            a GPU context. A string ("cpu", "cuda", "cuda:1", "mps", "xpu",
            "cupy", "tf") or a synchronizer object is used as given.
        flush_l2: overwrite a buffer of twice the device's L2 (on the CPU: of
            twice the last-level cache read from /sys, 64 MiB if unknown)
            before every call, outside the timed region, so each call reads its
            inputs from memory rather than from cache.
        grad_to_none: tensors whose ``.grad`` is set to None before each call,
            so a timed backward pass allocates gradients as in training instead
            of accumulating into old ones.
        label: a name for the result (default: ``fn.__name__``).
        clock: a host clock in seconds (tests pass a fake one).
        warn: emit a :class:`NoisyTimingWarning` when the IQR exceeds 10% of
            the median.

    On CUDA (torch or CuPy data) every measured call is bracketed by device
    events and the device is synchronized once per batch of calls; elsewhere
    the device is synchronized before every clock read.
    """
    check_function("fn", fn, "bench(f, x), not bench(f(x)).")
    warmup_ms, rep_ms, min_reps, max_reps = check_bench_args(warmup_ms, rep_ms, min_reps, max_reps)
    if calls_per_sample is not None:
        calls_per_sample = check_int(
            "calls_per_sample", calls_per_sample, minimum=1, maximum=MAX_CALLS_PER_SAMPLE
        )
    grads = () if grad_to_none is None else tuple(grad_to_none)
    if label is None:
        name = getattr(fn, "__name__", None)
        label = name if isinstance(name, str) and name.isidentifier() else None

    group = _sync.group_for(device, [*args, *kwargs.values()])

    def prepare() -> None:
        for tensor in grads:
            tensor.grad = None

    # 1. The first call, timed on its own: it may include compilation.
    prepare()
    group.synchronize()
    start = clock()
    result = fn(*args, **kwargs)
    if device is None:
        group = _sync.refine(group, result)
    del result
    group.synchronize()
    first_call_ms = (clock() - start) * 1e3

    flush = _flusher(group) if flush_l2 else None

    def prepare_and_flush() -> None:
        prepare()
        if flush is not None:
            flush()

    def timed_call() -> float:
        prepare_and_flush()
        group.synchronize()
        begin = clock()
        fn(*args, **kwargs)
        group.synchronize()
        return (clock() - begin) * 1e3

    # 2. Warm-up, by time: also measures the per-call time that sizes event batches.
    warmup_samples: list[float] = []
    warmup_total_ms = 0.0
    while warmup_total_ms < warmup_ms and len(warmup_samples) < max_reps:
        elapsed = timed_call()
        warmup_samples.append(elapsed)
        warmup_total_ms += elapsed

    # 3. The measured calls, by time, with the page faults they take.
    faults_before = minor_faults()
    events = group.event_timer
    calls = 1
    if events is None:
        if not grads and flush is None:
            calls = _calls_per_sample(calls_per_sample, warmup_samples, first_call_ms)

        def timed_sample() -> float:
            if calls == 1:
                return timed_call()
            group.synchronize()
            begin = clock()
            for _ in range(calls):
                fn(*args, **kwargs)
            group.synchronize()
            return (clock() - begin) * 1e3 / calls

        if calls > 1 and calls_per_sample is None:
            calls = _checked_batch(calls, timed_sample() * calls)

        samples: list[float] = []
        total_ms = 0.0
        while (total_ms < rep_ms or len(samples) < min_reps) and len(samples) < max_reps:
            elapsed = timed_sample()
            samples.append(elapsed)
            total_ms += elapsed * calls
        method = "host clock"
    else:
        estimate_ms = _median(warmup_samples[-5:]) if warmup_samples else first_call_ms
        samples = _event_samples(
            fn,
            args,
            kwargs,
            group,
            events,
            prepare_and_flush,
            estimate_ms,
            rep_ms,
            min_reps,
            max_reps,
        )
        method = "device events"
    faults = _per_call(faults_before, minor_faults(), len(samples) * calls)

    timing = Timing(
        samples_ms=tuple(samples),
        label=label,
        device=group.name,
        warmup_calls=len(warmup_samples),
        first_call_ms=first_call_ms,
        method=method,
        calls_per_sample=calls,
        minor_faults_per_call=faults,
    )
    if warn and timing.noisy:
        warnings.warn(noisy_message(timing), NoisyTimingWarning, stacklevel=2)
    return timing


def _event_samples(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    group: _sync.SyncGroup,
    events: _sync.EventSynchronizer,
    prepare: Callable[[], None],
    estimate_ms: float,
    rep_ms: float,
    min_reps: int,
    max_reps: int,
) -> list[float]:
    """Time calls with device events in batches sized from the per-call estimate.

    Within a batch the host never waits: start and end events are queued
    around each call and the device is synchronized once at the end (triton's
    scheme). Each batch is sized to fill the rest of the budget from the
    latest estimate, so a host-side estimate that was too high (it includes
    a synchronize) only costs another batch, never an overrun.
    """
    samples: list[float] = []
    total_ms = 0.0
    while (total_ms < rep_ms or len(samples) < min_reps) and len(samples) < max_reps:
        wanted = math.ceil((rep_ms - total_ms) / estimate_ms) if estimate_ms > 0 else min_reps
        count = max(wanted, min_reps - len(samples), 1)
        count = min(count, max_reps - len(samples))
        pairs = [(events.create_event(), events.create_event()) for _ in range(count)]
        for begin, end in pairs:
            prepare()
            begin.record()
            fn(*args, **kwargs)
            end.record()
        group.synchronize()
        batch = [max(0.0, float(events.elapsed_ms(begin, end))) for begin, end in pairs]
        samples.extend(batch)
        total_ms += math.fsum(batch)
        estimate_ms = _median(batch)
    return samples


def _per_call(before: int | None, after: int | None, calls: int) -> float | None:
    """Page faults per call from two counts (None where the OS does not count them)."""
    if before is None or after is None:
        return None
    return (after - before) / calls


def _calls_per_sample(
    requested: int | None, warmup_samples: Sequence[float], first_call_ms: float
) -> int:
    """Calls per host-clock sample: as requested, or enough for :data:`MIN_SAMPLE_MS`.

    The estimate is the median of the warm-up calls (the first call when there
    was no warm-up, which can only overestimate and so batch too little).
    """
    if requested is not None:
        return requested
    estimate_ms = _median(warmup_samples) if warmup_samples else first_call_ms
    if estimate_ms >= MIN_SAMPLE_MS:
        return 1
    if estimate_ms <= 0:
        return MAX_CALLS_PER_SAMPLE
    return min(math.ceil(MIN_SAMPLE_MS / estimate_ms), MAX_CALLS_PER_SAMPLE)


def _checked_batch(calls: int, trial_ms: float) -> int:
    """Calls per sample after one untimed trial batch of ``calls`` that took ``trial_ms``.

    The warm-up timed one call at a time, with a synchronize and a clock pair
    around each, which overstates a tiny call and so sizes the batch short (a
    seventh-review finding: samples of 0.14 ms, not 0.2). A trial batch well
    under :data:`MIN_SAMPLE_MS` is scaled up to it.
    """
    if 0 < trial_ms < 0.95 * MIN_SAMPLE_MS:
        return min(math.ceil(calls * MIN_SAMPLE_MS / trial_ms * 1.05), MAX_CALLS_PER_SAMPLE)
    return calls


def _median(values: Sequence[float]) -> float:
    return quantile(sorted(values), 0.5)


def _flusher(group: _sync.SyncGroup) -> Callable[[], None]:
    make = getattr(group.primary, "cache_flusher", None)
    if not callable(make):
        raise ValueError(
            f"flush_l2=True, but device {group.primary.name!r} has no cache_flusher(): "
            "labkit cannot flush its cache. Use flush_l2=False for this device."
        )
    return make()


def check_bench_args(
    warmup_ms: float, rep_ms: float, min_reps: int, max_reps: int
) -> tuple[float, float, int, int]:
    """``bench``'s budgets and counts, checked (also by :func:`~labkit.timing.pitfalls.naive_timing`)."""
    warmup = check_ms("warmup_ms", warmup_ms, allow_zero=True)
    rep = check_ms("rep_ms", rep_ms)
    low = check_positive_int("min_reps", min_reps)
    high = check_int("max_reps", max_reps, minimum=1)
    if high < low:
        raise ValueError(f"max_reps must be >= min_reps ({low}), got {max_reps!r}")
    return warmup, rep, low, high
