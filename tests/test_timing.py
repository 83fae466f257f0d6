"""labkit.timing.bench: statistics, formatting, and how bench measures (with fake clocks and devices).

No assertion here depends on how fast this machine is: the semantic tests
drive ``bench`` with a fake clock that only moves when the fake work says so.
"""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.core.units import duration_unit, format_duration, format_samples_per_s
from labkit.timing.bench import NoisyTimingWarning, Timing, bench, noisy_message, quantile

#: One fake-clock tick, in ms. 1/1024 s is exact in binary floating point, so
#: sums of ticks are exact and the budget tests can assert exact call counts.
TICK_S = 2.0**-10
TICK_MS = TICK_S * 1e3


class FakeClock:
    """A host clock (seconds) that moves only when told to, and logs every read."""

    def __init__(self, log: list[str]) -> None:
        self.now = 0.0
        self.log = log
        self.reads = 0

    def __call__(self) -> float:
        self.log.append("clock")
        self.reads += 1
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeDevice:
    """A synchronizer that logs its calls."""

    def __init__(self, log: list[str], name: str = "fake:0") -> None:
        self.name = name
        self.log = log
        self.syncs = 0

    def synchronize(self) -> None:
        self.log.append("sync")
        self.syncs += 1


class FakeEvent:
    def __init__(self, clock: FakeClock, log: list[str]) -> None:
        self.clock = clock
        self.log = log
        self.stamp: float | None = None

    def record(self) -> None:
        self.log.append("record")
        self.stamp = self.clock.now  # the device's own clock, not a host clock read


class FakeEventDevice(FakeDevice):
    """An event-capable device: events stamp the fake clock, like CUDA events stamp the GPU's."""

    def __init__(self, log: list[str], clock: FakeClock, sync_cost_s: float = 0.0) -> None:
        super().__init__(log, name="fakecuda:0")
        self.clock = clock
        self.sync_cost_s = sync_cost_s
        self.created = 0

    def synchronize(self) -> None:
        super().synchronize()
        self.clock.advance(self.sync_cost_s)

    def create_event(self) -> FakeEvent:
        self.created += 1
        return FakeEvent(self.clock, self.log)

    def elapsed_ms(self, start: FakeEvent, end: FakeEvent) -> float:
        assert start.stamp is not None and end.stamp is not None, "event read before recorded"
        return (end.stamp - start.stamp) * 1e3


class FakeAsyncDevice(FakeDevice):
    """A GPU-like device: calls only queue work; synchronize() waits for the queue."""

    def __init__(self, log: list[str], clock: FakeClock) -> None:
        super().__init__(log, name="fakegpu:0")
        self.clock = clock
        self.pending_s = 0.0

    def launch(self, seconds: float) -> None:
        self.pending_s += seconds

    def synchronize(self) -> None:
        super().synchronize()
        self.clock.advance(self.pending_s)
        self.pending_s = 0.0


def work(clock: FakeClock, log: list[str], cost_s: float = TICK_S):
    """A function that logs its call and takes ``cost_s`` of fake time."""

    def fn(*args, **kwargs):
        log.append("call")
        clock.advance(cost_s)

    return fn


@pytest.fixture
def rig():
    log: list[str] = []
    clock = FakeClock(log)
    return SimpleNamespace(log=log, clock=clock, device=FakeDevice(log))


# --------------------------------------------------------------------------- format_duration


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0.000812, "812 ns"),
        (0.812, "812 µs"),
        (1.234, "1.23 ms"),
        (12.0, "12.0 ms"),
        (100.0, "100 ms"),
        (2050.0, "2.05 s"),
        (0.9996, "1.00 ms"),  # rounding to 3 digits moves it up a unit
        (999.96, "1.00 s"),
        (0.0, "0 ns"),
        (5e-7, "0.500 ns"),
        (-1.5, "-1.50 ms"),
    ],
)
def test_format_duration(ms, text):
    assert format_duration(ms) == text


def test_format_duration_in_a_fixed_unit():
    assert format_duration(0.015, "ms") == "0.0150 ms"
    assert format_duration(1.2, "ms") == "1.20 ms"
    assert format_duration(1.5, "µs") == "1500 µs"
    assert duration_unit(0.5) == "µs"


def test_format_duration_rejects_an_unknown_unit():
    with pytest.raises(ValueError, match="unit must be one of"):
        format_duration(1.0, "min")


# --------------------------------------------------------------------------- statistics


def test_statistics_on_a_known_sample_list():
    t = Timing((4.0, 1.0, 3.0, 2.0))
    assert t.n == 4
    assert t.median_ms == 2.5
    assert t.q1_ms == 1.75  # position 0.75 between 1 and 2
    assert t.q3_ms == 3.25
    assert t.iqr_ms == 1.5
    assert (t.min_ms, t.max_ms, t.mean_ms) == (1.0, 4.0, 2.5)
    assert t.relative_spread == pytest.approx(0.6)
    assert t.samples_ms == (4.0, 1.0, 3.0, 2.0)  # every sample kept, in order


def test_statistics_on_one_sample():
    t = Timing((7.0,))
    assert (t.median_ms, t.q1_ms, t.q3_ms, t.iqr_ms, t.relative_spread) == (7.0, 7.0, 7.0, 0, 0)


def test_quantile_matches_numpy_on_odd_list():
    values = sorted([0.3, 9.0, 1.5, 2.25, 4.0, 7.5, 1.0])
    for q in (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0):
        assert quantile(values, q) == pytest.approx(np.percentile(values, q * 100), rel=1e-12)


samples_strategy = st.lists(
    st.floats(min_value=0.0, max_value=1e6, allow_nan=False, allow_infinity=False),
    min_size=1,
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(samples_strategy)
def test_statistics_match_numpy_and_are_ordered(samples):
    t = Timing(tuple(samples))
    assert t.min_ms <= t.q1_ms <= t.median_ms <= t.q3_ms <= t.max_ms
    assert t.min_ms <= t.mean_ms <= t.max_ms
    assert t.iqr_ms >= 0
    q1, median, q3 = np.percentile(samples, [25, 50, 75])
    assert t.q1_ms == pytest.approx(q1, rel=1e-9, abs=1e-9)
    assert t.median_ms == pytest.approx(median, rel=1e-9, abs=1e-9)
    assert t.q3_ms == pytest.approx(q3, rel=1e-9, abs=1e-9)
    assert t.mean_ms == pytest.approx(np.mean(samples), rel=1e-9, abs=1e-9)
    assert t.n == len(samples)


@pytest.mark.parametrize(
    ("samples", "match"),
    [
        ((), "empty"),
        ((1.0, -1.0), r"samples_ms\[1\] must be a finite duration >= 0"),
        ((1.0, math.nan), r"samples_ms\[1\]"),
        ((math.inf,), r"samples_ms\[0\]"),
    ],
)
def test_timing_rejects_bad_samples(samples, match):
    with pytest.raises(ValueError, match=match):
        Timing(samples)


def test_timing_keeps_integer_samples_as_floats():
    assert Timing((2, 1)).samples_ms == (2.0, 1.0)


def test_timing_is_frozen_and_serializable():
    t = Timing((1.0, 2.0), label="x", first_call_ms=5.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.median_ms = 0.0  # type: ignore[misc]
    data = json.loads(json.dumps(t.to_dict()))
    assert data["samples_ms"] == [1.0, 2.0]
    assert data["median_ms"] == 1.5
    assert data["label"] == "x" and data["device"] == "cpu" and data["first_call_ms"] == 5.0
    assert set(data) == {
        "samples_ms",
        "label",
        "device",
        "warmup_calls",
        "first_call_ms",
        "method",
        "calls_per_sample",
        "minor_faults_per_call",
        "n",
        "median_ms",
        "q1_ms",
        "q3_ms",
        "iqr_ms",
        "min_ms",
        "max_ms",
        "mean_ms",
        "relative_spread",
        "noisy",
    }
    assert data["noisy"] is True  # IQR 0.5 ms around a 1.5 ms median


# --------------------------------------------------------------------------- str and noise


def test_str_is_one_line_in_the_documented_format():
    t = Timing((1.20, 1.2225, 1.23, 1.2375, 1.24), label="matmul 512²")
    assert str(t) == "matmul 512²: median 1.23 ms (IQR 0.0150 ms, min 1.20 ms, n=5) on cpu"
    assert "\n" not in str(t)


def test_str_without_label_and_on_another_device():
    t = Timing((0.5, 0.5, 0.5), device="cuda:0")
    assert str(t) == "median 500 µs (IQR 0 µs, min 500 µs, n=3) on cuda:0"


def test_noisy_str_appends_exact_suffix():
    t = Timing((0.93, 0.93, 1.0, 1.07, 1.07), label="x")
    assert t.relative_spread == pytest.approx(0.14)
    assert t.noisy
    assert str(t).endswith(" on cpu [noisy: IQR is 14% of the median]")


def test_not_noisy_at_exactly_ten_percent_or_below():
    exactly_ten = Timing((1.1875, 1.1875, 1.25, 1.3125, 1.3125))  # dyadic: exact in binary
    assert exactly_ten.relative_spread == 0.1
    assert not exactly_ten.noisy
    assert "noisy" not in str(Timing((1.0, 1.0, 1.0)))


def test_noisy_message_names_causes_and_remedies():
    message = noisy_message(Timing((0.5, 1.0, 2.0), label="step"))
    assert "'step'" in message and "IQR is" in message
    for phrase in ("other processes", "frequency scaling", "too short", "rep_ms"):
        assert phrase in message


# --------------------------------------------------------------------------- bench: ordering


def test_device_is_synchronized_before_every_clock_read(rig):
    fn = work(rig.clock, rig.log)
    bench(fn, warmup_ms=5 * TICK_MS, rep_ms=20 * TICK_MS, device=rig.device, clock=rig.clock)
    assert rig.log.count("call") == 1 + 5 + 20
    called_since_sync = False
    for entry in rig.log:
        if entry == "call":
            called_since_sync = True
        elif entry == "sync":
            called_since_sync = False
        elif entry == "clock":
            assert not called_since_sync, "a clock was read after a call without a synchronize"
    # ... and also before the very first read, to drain work queued before bench.
    assert rig.log.index("sync") < rig.log.index("clock")


def test_asynchronous_work_is_measured_in_full():
    """A GPU-like fake: calls only queue work. bench still sees the work's real duration."""
    log: list[str] = []
    clock = FakeClock(log)
    gpu = FakeAsyncDevice(log, clock)

    def launch():
        clock.advance(TICK_S / 64)  # the host only pays the launch
        gpu.launch(TICK_S * 8)  # the device does the work later

    t = bench(launch, warmup_ms=0, rep_ms=100 * TICK_MS, device=gpu, clock=clock)
    assert t.median_ms == pytest.approx(TICK_MS * (8 + 1 / 64))
    assert t.device == "fakegpu:0"
    assert t.method == "host clock"


# --------------------------------------------------------------------------- bench: budgets


def test_budgets_give_exact_counts(rig):
    fn = work(rig.clock, rig.log)
    t = bench(fn, warmup_ms=25 * TICK_MS, rep_ms=100 * TICK_MS, device=rig.device, clock=rig.clock)
    assert t.warmup_calls == 25
    assert t.n == 100
    assert t.samples_ms == (TICK_MS,) * 100
    assert t.first_call_ms == TICK_MS
    assert rig.log.count("call") == 1 + 25 + 100


def test_budgets_are_overrun_by_less_than_one_call(rig):
    fn = work(rig.clock, rig.log, cost_s=3 * TICK_S)
    t = bench(fn, warmup_ms=10 * TICK_MS, rep_ms=100 * TICK_MS, device=rig.device, clock=rig.clock)
    assert t.warmup_calls == 4  # 3 + 3 + 3 < 10 <= 12 ticks
    assert t.n == 34  # 33 * 3 = 99 < 100 <= 102 ticks
    total = sum(t.samples_ms)
    assert 100 * TICK_MS <= total < 100 * TICK_MS + 3 * TICK_MS


@settings(max_examples=60, deadline=None)
@given(
    cost_ticks=st.integers(min_value=1, max_value=40),
    warmup_ticks=st.integers(min_value=0, max_value=80),
    rep_ticks=st.integers(min_value=1, max_value=200),
    min_reps=st.integers(min_value=1, max_value=8),
)
def test_budgets_hold_for_any_call_cost(cost_ticks, warmup_ticks, rep_ticks, min_reps):
    log: list[str] = []
    clock = FakeClock(log)
    fn = work(clock, log, cost_s=cost_ticks * TICK_S)
    t = bench(
        fn,
        warmup_ms=warmup_ticks * TICK_MS,
        rep_ms=rep_ticks * TICK_MS,
        min_reps=min_reps,
        device=FakeDevice(log),
        clock=clock,
    )
    assert t.warmup_calls == math.ceil(warmup_ticks / cost_ticks)
    assert t.n == max(min_reps, math.ceil(rep_ticks / cost_ticks))


def test_min_reps_when_one_call_exceeds_the_budget(rig):
    fn = work(rig.clock, rig.log, cost_s=1.0)  # 1 s per call, budgets of 25 and 100 ms
    t = bench(fn, device=rig.device, clock=rig.clock)
    assert t.warmup_calls == 1
    assert t.n == 5
    t = bench(fn, min_reps=7, device=rig.device, clock=rig.clock)
    assert t.n == 7


def test_max_reps_caps_warmup_and_samples(rig):
    fn = work(rig.clock, rig.log)
    t = bench(
        fn,
        warmup_ms=50 * TICK_MS,
        rep_ms=100 * TICK_MS,
        max_reps=10,
        device=rig.device,
        clock=rig.clock,
    )
    assert t.warmup_calls == 10
    assert t.n == 10


def test_zero_warmup_skips_warmup(rig):
    t = bench(
        work(rig.clock, rig.log),
        warmup_ms=0,
        rep_ms=3 * TICK_MS,
        device=rig.device,
        clock=rig.clock,
    )
    assert t.warmup_calls == 0
    assert rig.log.count("call") == 1 + 5  # first call + min_reps


def test_first_call_is_timed_separately_and_excluded(rig):
    calls = []

    def fn():
        rig.log.append("call")
        calls.append(1)
        rig.clock.advance((50 if len(calls) == 1 else 1) * TICK_S)  # slow first call: compiling

    t = bench(fn, warmup_ms=2 * TICK_MS, rep_ms=10 * TICK_MS, device=rig.device, clock=rig.clock)
    assert t.first_call_ms == 50 * TICK_MS
    assert t.max_ms == TICK_MS
    assert t.n == 10


# --------------------------------------------------------------------------- bench: events


def test_event_path_records_around_each_call_and_syncs_once_per_batch():
    log: list[str] = []
    clock = FakeClock(log)
    device = FakeEventDevice(log, clock)
    fn = work(clock, log)
    t = bench(fn, warmup_ms=4 * TICK_MS, rep_ms=100 * TICK_MS, device=device, clock=clock)
    assert t.method == "device events"
    assert t.device == "fakecuda:0"
    assert t.n == 100
    assert t.samples_ms == (TICK_MS,) * 100
    # After warm-up: start event, call, end event for each sample; one sync at the end.
    sampling = log[len(log) - 3 * 100 - 1 :]
    assert sampling[:-1] == ["record", "call", "record"] * 100
    assert sampling[-1] == "sync"
    assert device.created == 200


def test_event_path_refines_a_too_high_estimate_in_batches():
    """Warm-up uses the host clock, which includes a synchronize; events then correct it."""
    log: list[str] = []
    clock = FakeClock(log)
    device = FakeEventDevice(log, clock, sync_cost_s=TICK_S)  # each sync costs a tick
    fn = work(clock, log)
    t = bench(fn, warmup_ms=4 * TICK_MS, rep_ms=100 * TICK_MS, device=device, clock=clock)
    # Host-clock estimate: 2 ticks per call -> first batch 50 events of 1 tick, then 50 more.
    assert t.n == 100
    assert sum(t.samples_ms) == 100 * TICK_MS
    after_warmup = log[log.index("record") :]
    assert after_warmup.count("sync") == 2


def test_event_path_honours_min_reps():
    log: list[str] = []
    clock = FakeClock(log)
    device = FakeEventDevice(log, clock)
    t = bench(work(clock, log, cost_s=1.0), min_reps=6, device=device, clock=clock)
    assert t.n == 6
    assert t.method == "device events"


# --------------------------------------------------------------------------- bench: options


def test_grad_to_none_clears_grads_before_every_call(rig):
    params = [SimpleNamespace(grad="old"), SimpleNamespace(grad="old")]
    seen = []

    def step():
        rig.clock.advance(TICK_S)
        seen.append(tuple(p.grad for p in params))
        for p in params:
            p.grad = "accumulated"

    t = bench(
        step,
        warmup_ms=3 * TICK_MS,
        rep_ms=5 * TICK_MS,
        grad_to_none=params,
        device=rig.device,
        clock=rig.clock,
    )
    assert len(seen) == 1 + t.warmup_calls + t.n
    assert all(grads == (None, None) for grads in seen)


def test_flush_l2_happens_before_each_call_outside_the_timed_region(rig):
    class FlushingDevice(FakeDevice):
        def cache_flusher(self):
            def flush():
                self.log.append("flush")
                rig.clock.advance(100 * TICK_S)  # flushing is slow, and must not be timed

            return flush

    device = FlushingDevice(rig.log)
    t = bench(
        work(rig.clock, rig.log),
        warmup_ms=2 * TICK_MS,
        rep_ms=6 * TICK_MS,
        flush_l2=True,
        device=device,
        clock=rig.clock,
    )
    assert t.samples_ms == (TICK_MS,) * 6
    timed = rig.log[rig.log.index("flush") :]
    assert timed == ["flush", "sync", "clock", "call", "sync", "clock"] * (2 + 6)


def test_flush_l2_without_support_is_a_clear_error(rig):
    with pytest.raises(ValueError, match="flush_l2=True.*fake:0"):
        bench(work(rig.clock, rig.log), flush_l2=True, device=rig.device, clock=rig.clock)


def test_flush_l2_on_the_cpu_writes_a_buffer(monkeypatch):
    import labkit.timing.synchronizers

    monkeypatch.setattr(labkit.timing.synchronizers, "cpu_last_level_cache_bytes", lambda: 4096)
    t = bench(lambda: None, warmup_ms=0.1, rep_ms=0.5, flush_l2=True, device="cpu", warn=False)
    assert t.device == "cpu" and t.n >= 5


def test_kwargs_reach_fn_and_label_defaults_to_its_name(rig):
    received = []

    def scale(x, *, factor):
        rig.clock.advance(TICK_S)
        received.append((x, factor))

    t = bench(scale, 2, factor=3, warmup_ms=0, rep_ms=TICK_MS, device=rig.device, clock=rig.clock)
    assert set(received) == {(2, 3)}
    assert t.label == "scale"
    t = bench(
        lambda: rig.clock.advance(TICK_S),
        warmup_ms=0,
        rep_ms=TICK_MS,
        device=rig.device,
        clock=rig.clock,
    )
    assert t.label is None


# --------------------------------------------------------------------------- bench: noise


def _cost_schedule(clock: FakeClock, ticks: list[int]):
    state = {"i": 0}

    def fn():
        clock.advance(ticks[state["i"] % len(ticks)] * TICK_S)
        state["i"] += 1

    return fn


def test_noisy_measurement_warns(rig):
    fn = _cost_schedule(rig.clock, [1, 2])  # samples alternate 1 and 2 ticks: IQR ~67% of median
    with pytest.warns(NoisyTimingWarning, match="IQR is .*% of the median") as caught:
        t = bench(fn, warmup_ms=0, rep_ms=40 * TICK_MS, device=rig.device, clock=rig.clock)
    assert t.noisy
    assert "frequency scaling" in str(caught[0].message)
    assert str(t).endswith(f"[noisy: IQR is {t.relative_spread * 100:.0f}% of the median]")


def test_steady_measurement_does_not_warn(rig):
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoisyTimingWarning)
        t = bench(
            _cost_schedule(rig.clock, [1]),
            warmup_ms=0,
            rep_ms=40 * TICK_MS,
            device=rig.device,
            clock=rig.clock,
        )
    assert not t.noisy


def test_warn_false_silences_the_warning(rig):
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoisyTimingWarning)
        t = bench(
            _cost_schedule(rig.clock, [1, 2]),
            warmup_ms=0,
            rep_ms=40 * TICK_MS,
            device=rig.device,
            clock=rig.clock,
            warn=False,
        )
    assert t.noisy


def test_noisy_warning_is_a_user_warning_exported_from_labkit():
    import labkit

    assert labkit.NoisyTimingWarning is NoisyTimingWarning
    assert issubclass(NoisyTimingWarning, UserWarning)


# --------------------------------------------------------------------------- bench: arguments


@pytest.mark.parametrize(
    ("fn", "options", "error", "match"),
    [
        (print, {"warmup_ms": -1}, ValueError, "warmup_ms"),
        (print, {"warmup_ms": math.nan}, ValueError, "warmup_ms"),
        (print, {"warmup_ms": "25"}, TypeError, "warmup_ms"),
        (print, {"rep_ms": 0}, ValueError, r"rep_ms .*> 0"),
        (print, {"rep_ms": math.inf}, ValueError, "rep_ms"),
        (print, {"rep_ms": True}, TypeError, "rep_ms"),
        (print, {"min_reps": 0}, ValueError, "min_reps must be a positive integer"),
        (print, {"min_reps": 2.5}, TypeError, "min_reps"),
        (print, {"min_reps": True}, TypeError, "min_reps"),
        (print, {"max_reps": 3}, ValueError, r"max_reps must be >= min_reps"),
        (print, {"max_reps": 10.0}, TypeError, "max_reps"),
        (print, {"device": "gpu"}, ValueError, r"device='gpu'.*\"cuda\""),
        (print, {"device": "cuda:x"}, ValueError, "device="),
        (print, {"device": 42}, TypeError, "device must be"),
    ],
)
def test_bad_arguments_are_rejected_with_their_name(fn, options, error, match):
    with pytest.raises(error, match=match):
        bench(fn, **options)


def test_validation_happens_before_any_call():
    calls = []
    with pytest.raises(ValueError, match="rep_ms"):
        bench(lambda: calls.append(1), rep_ms=-5)
    assert calls == []


# --------------------------------------------------------------------------- bench: real devices


def test_device_inferred_from_torch_cpu_tensors():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        pytest.skip("an initialized CUDA context is also synchronized and named")
    a = torch.ones(8, 8)
    t = bench(torch.matmul, a, a, warmup_ms=0.2, rep_ms=1.0, warn=False)
    assert t.device == "cpu"
    assert t.method == "host clock"
    assert t.label == "matmul"
    assert t.n >= 5


def test_explicit_cpu_device_with_the_real_clock():
    t = bench(sum, range(100), warmup_ms=0.2, rep_ms=1.0, device="cpu", warn=False)
    assert t.device == "cpu" and t.n >= 5 and t.min_ms > 0


@pytest.mark.parametrize(
    ("value", "round_to_3", "text"),
    [
        (21_347.0, False, "21,347 samples/s"),
        (21_347.0, True, "21,300 samples/s"),
        (51_949.0, True, "51,900 samples/s"),
        (12.345, True, "12.3 samples/s"),
        (12.345, False, "12.3 samples/s"),
    ],
)
def test_format_samples_per_s(value: float, round_to_3: bool, text: str) -> None:
    assert format_samples_per_s(value, round_to_3=round_to_3) == text
