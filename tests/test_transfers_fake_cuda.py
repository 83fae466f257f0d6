"""The GPU-only probes, run end to end on CPU tensors behind a fake ``torch.cuda``.

CI has no GPU, so without this the code of :mod:`labkit.bandwidth.transfers` would
never execute before it reaches a learner's GPU. The fakes stand in for
streams, events and pinned memory; the tests check control flow, stream
discipline (copies on the side stream, compute waiting for its chunk's
event) and the results' arithmetic, not speed.
"""

from __future__ import annotations

import contextlib
import time
from types import SimpleNamespace

import pytest
import torch

from labkit.bandwidth import overlap, transfers
from labkit.bandwidth import transfers as transfers_

MiB = 1024**2


class FakeStream:
    def __init__(self, name: str = "side", device=None) -> None:
        self.name = name
        self.log: list[str] = []

    def wait_stream(self, other: FakeStream) -> None:
        self.log.append(f"wait_stream {other.name}")

    def wait_event(self, event: FakeEvent) -> None:
        self.log.append(f"wait_event {event.id}")


class FakeEvent:
    count = 0

    def __init__(self, enable_timing: bool = False) -> None:
        FakeEvent.count += 1
        self.id = FakeEvent.count
        self.t = 0.0
        self.stream: str | None = None

    def record(self, stream: FakeStream | None = None) -> None:
        self.t = time.perf_counter()
        self.stream = None if stream is None else stream.name

    def elapsed_time(self, end: FakeEvent) -> float:
        return max(0.0, (end.t - self.t) * 1e3)


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> dict:
    main = FakeStream("main")
    state = {"current": main, "main": main, "copies_on": []}

    @contextlib.contextmanager
    def stream(s: FakeStream):
        previous, state["current"] = state["current"], s
        try:
            yield
        finally:
            state["current"] = previous

    def side_stream(device=None) -> FakeStream:
        s = FakeStream("side", device)
        state["side"] = s
        return s

    real_ones, real_empty, real_copy = torch.ones, torch.empty, torch.Tensor.copy_

    def drop_pin(fn):
        def wrapper(*args, pin_memory=False, **kwargs):
            return fn(*args, **kwargs)

        return wrapper

    def logged_copy(self, src, non_blocking=False):
        state["copies_on"].append(state["current"].name)
        return real_copy(self, src, non_blocking=non_blocking)

    props = SimpleNamespace(
        L2_cache_size=4 * MiB, memory_clock_rate=2_619_000, memory_bus_width=5120
    )
    monkeypatch.setattr(transfers_, "require_cuda", lambda device, what: "cpu")
    monkeypatch.setattr(overlap, "require_cuda", lambda device, what: "cpu")
    monkeypatch.setattr(torch.cuda, "Stream", side_stream)
    monkeypatch.setattr(torch.cuda, "stream", stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: state["current"])
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
    monkeypatch.setattr(torch, "ones", drop_pin(real_ones))
    monkeypatch.setattr(torch, "empty", drop_pin(real_empty))
    monkeypatch.setattr(torch.Tensor, "copy_", logged_copy)
    return state


def test_theoretical_peak_from_clock_and_bus(fake_cuda: dict) -> None:
    # an H100 SXM reports 2619 MHz and 5120 bits: NVIDIA's 3.35 TB/s
    assert transfers.theoretical_peak_gb_per_s("cuda") == pytest.approx(3352.3, abs=0.1)


def test_device_copy_runs_references_and_compares(fake_cuda: dict) -> None:
    result = transfers.device_copy(256 * 1024, "cuda", warmup_ms=0, rep_ms=1, min_reps=2)
    assert result.labkit.kernel == "copy" and result.labkit.bytes_per_call == 2 * 256 * 1024
    names = [r.implementation for r in result.references]
    assert names[0] == "torch dst.copy_(src), raw CUDA events"
    assert result.references[0].bytes_per_call == 2 * 256 * 1024
    assert result.peak_gb_per_s == pytest.approx(3352.3, abs=0.1)
    assert result.ratio_to_best is not None and result.fraction_of_peak is not None
    if len(names) == 1:  # no usable CuPy here: said in a note, not an error
        assert result.notes and result.notes[0].startswith("CuPy references skipped")


def test_host_device_sweep_covers_every_combination(fake_cuda: dict) -> None:
    sweep = transfers.host_device_sweep(
        [64 * 1024, MiB], "cuda", warmup_ms=0, rep_ms=1, show_progress=False
    )
    kinds = {r.kernel for r in sweep.rows}
    assert kinds == {"h2d pageable", "h2d pinned", "d2h pageable", "d2h pinned"}
    assert len(sweep.rows) == 8
    for row in sweep.rows:
        assert row.bytes_per_call == row.bytes_per_array  # bytes cross the bus once
        assert row.gb_per_s > 0
    assert sweep.peak("h2d", "pinned").kernel == "h2d pinned"


def test_overlap_copies_on_the_side_stream_and_waits_per_chunk(fake_cuda: dict) -> None:
    result = overlap.copy_compute_overlap(3, 64 * 1024, "cuda", rep_ms=2)
    assert result.n_chunks == 3 and result.chunk_bytes == 64 * 1024
    assert result.compute_repeats >= 1
    for timing in (result.copy, result.compute, result.serialized, result.overlapped):
        assert timing.n >= 1
    side, main = fake_cuda["side"], fake_cuda["main"]
    # every overlapped call: the side stream first waits for main, then main waits for
    # each chunk's event in turn
    assert side.log[0] == "wait_stream main"
    waits = [entry for entry in main.log if entry.startswith("wait_event")]
    assert len(waits) >= 3 and len(waits) % 3 == 0
    assert "side" in fake_cuda["copies_on"] and "main" in fake_cuda["copies_on"]
    assert result.speedup > 0 and result.ideal_ms > 0


def test_overlap_validates(fake_cuda: dict) -> None:
    with pytest.raises(ValueError, match="n_chunks"):
        overlap.copy_compute_overlap(1, 64 * 1024, "cuda")
    with pytest.raises(ValueError, match="chunk_bytes"):
        overlap.copy_compute_overlap(2, 100, "cuda")
    with pytest.raises(ValueError, match="compute_repeats"):
        overlap.copy_compute_overlap(2, 64 * 1024, "cuda", compute_repeats=0)
