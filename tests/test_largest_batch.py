"""labkit.batching.largest: step memory, the fitted line, the CPU prediction and the CUDA search.

The CPU path runs for real at toy sizes under a patched (tiny) memory budget.
The CUDA path runs on CPU tensors behind a fake ``torch.cuda`` whose model
raises ``torch.cuda.OutOfMemoryError`` above a threshold, as a GPU would.
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from labkit.batching import largest as largest_batch  # noqa: E402
from labkit.batching import memory_fit
from labkit.batching.largest import (
    CpuBatchFit,
    CudaBatchSearch,
    largest_batch_cpu,
    largest_batch_cuda,
    search_batch,
)
from labkit.batching.memory_fit import METHOD_COUNTED, METHOD_PROFILER, fit_memory, step_memory
from labkit.machine import memory  # noqa: E402
from labkit.machine.memory import MemoryBudgetError  # noqa: E402

GiB = 1 << 30


def tiny() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


PARAM_BYTES = (16 * 32 + 32 + 32 * 4 + 4) * 4


def _free_for_budget(monkeypatch: pytest.MonkeyPatch, budget: int) -> None:
    """Make labkit's budget (25% of the free memory) exactly ``budget`` bytes."""
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": 4 * budget)


# --------------------------------------------------------------------------- one step


def test_step_memory_breaks_down_a_training_step() -> None:
    m = step_memory(tiny, (16,), 8)
    assert m.batch_size == 8
    assert m.params_bytes == PARAM_BYTES and m.grads_bytes == PARAM_BYTES
    assert m.optimizer_bytes >= 2 * PARAM_BYTES  # Adam's two moments (+ step counters)
    assert m.activations_bytes >= 8 * 16 * 4  # at least the input, saved for fc1's weight gradient
    assert m.method == METHOD_PROFILER
    assert m.peak_bytes >= m.counted_bytes and m.other_bytes == m.peak_bytes - m.counted_bytes
    assert "batch 8: peak" in str(m) and "optimizer state" in str(m)
    sgd = step_memory(tiny, (16,), 8, optimizer="sgd")
    assert sgd.optimizer_bytes == 0 and sgd.peak_bytes < m.peak_bytes


def test_step_memory_grows_with_the_batch() -> None:
    small, big = step_memory(tiny, (16,), 4), step_memory(tiny, (16,), 64)
    assert big.activations_bytes == pytest.approx(16 * small.activations_bytes, rel=0.1)
    assert big.peak_bytes > small.peak_bytes
    assert big.params_bytes == small.params_bytes


def test_step_memory_falls_back_to_counting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory_fit, "_allocation_peak", lambda prof: None)
    m = step_memory(tiny, (16,), 4)
    assert m.method == METHOD_COUNTED and m.peak_bytes == m.counted_bytes and m.other_bytes == 0


def test_step_memory_validates() -> None:
    with pytest.raises(TypeError, match="model_fn must be a function that builds"):
        step_memory(tiny(), (16,), 4)
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        step_memory(tiny, (16,), 0)
    with pytest.raises(ValueError, match="input_shape"):
        step_memory(tiny, (), 4)


# --------------------------------------------------------------------------- the line


def test_fit_is_a_line_through_the_probes() -> None:
    fit = fit_memory(tiny, (16,), probe_batches=(16, 32, 64))
    assert [p.batch_size for p in fit.points] == [16, 32, 64]
    assert fit.per_sample_bytes > 0 and fit.fixed_bytes > 0
    assert fit.max_residual_fraction < 0.1
    budget = math.ceil(fit.predict_bytes(100))
    assert fit.largest_batch_under(budget) == 100
    assert fit.largest_batch_under(int(fit.fixed_bytes) - 1) == 0
    assert "bytes ≈ " in str(fit) and " × batch" in str(fit)
    with pytest.raises(ValueError, match="at least two"):
        fit_memory(tiny, (16,), probe_batches=(4, 4))


# ------------------------------------------------------------------- CPU: predict, then verify


def test_cpu_finder_stops_at_the_right_size_under_a_tiny_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fit = fit_memory(tiny, (16,), probe_batches=(128, 256))  # off the floor: the true line
    budget = math.ceil(fit.predict_bytes(300))
    _free_for_budget(monkeypatch, budget)
    result = largest_batch_cpu(tiny, (16,))
    assert isinstance(result, CpuBatchFit) and result.budget_bytes == budget
    assert result.predicted_batch == result.fit.largest_batch_under(budget)
    assert abs(result.predicted_batch - 300) <= 3  # the same line, measured again
    assert result.fit.predict_bytes(result.predicted_batch) <= budget
    assert result.fit.predict_bytes(result.predicted_batch + 1) > budget
    assert (
        result.verification is not None and result.verification.batch_size == result.predicted_batch
    )
    assert result.verified and abs(result.prediction_error) < 0.05
    text = str(result)
    assert "predicted largest batch under" in text and "verified: batch" in text
    assert all(line.startswith("cpu: largest training batch for tiny") for line in result.summary())
    data = json.loads(json.dumps(result.to_dict()))
    assert data["method"] == "predict-then-verify" and data["verified"] is True
    assert data["fit"]["per_sample_bytes"] == result.fit.per_sample_bytes
    assert data["verification"]["other_bytes"] == result.verification.other_bytes


def test_cpu_finder_skips_probes_that_would_not_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    fit = fit_memory(tiny, (16,), probe_batches=(2, 4))
    budget = int(fit.predict_bytes(10))
    _free_for_budget(monkeypatch, budget)
    result = largest_batch_cpu(tiny, (16,), probe_batches=(2, 4, 64, 256))
    assert [p.batch_size for p in result.fit.points] == [2, 4]  # 64 would have exceeded it
    assert 8 <= result.predicted_batch <= 12


def test_cpu_finder_caps_and_skips_verification(monkeypatch: pytest.MonkeyPatch) -> None:
    _free_for_budget(monkeypatch, 1 << 20)
    result = largest_batch_cpu(tiny, (16,), max_batch=50, verify=False)
    assert result.predicted_batch == 50 and result.capped and result.verification is None
    assert not result.verified and result.prediction_error is None
    assert "capped by max_batch" in str(result) and "not verified (verify=False)" in str(result)


def test_cpu_finder_refuses_budgets_it_may_not_use(monkeypatch: pytest.MonkeyPatch) -> None:
    _free_for_budget(monkeypatch, 64 << 20)
    with pytest.raises(MemoryBudgetError, match="budget_bytes needs"):
        largest_batch_cpu(tiny, (16,), budget_bytes=1 << 30)
    with pytest.raises(MemoryBudgetError, match="too small"):
        largest_batch_cpu(
            tiny, (16,), budget_bytes=PARAM_BYTES
        )  # Adam needs 4 copies of the weights
    with pytest.raises(ValueError, match="budget_bytes must be a positive"):
        largest_batch_cpu(tiny, (16,), budget_bytes=0)


# --------------------------------------------------------------------------- the search itself


@pytest.mark.parametrize("threshold", [1, 2, 37, 64, 1000])
def test_search_doubles_then_bisects_to_the_exact_threshold(threshold: int) -> None:
    tried: list[int] = []

    def fits(batch: int) -> bool:
        tried.append(batch)
        return batch <= threshold

    reached = search_batch(fits, 1, 1 << 20, 0.0)
    assert not reached
    assert max(b for b in tried if b <= threshold) == threshold
    assert min(b for b in tried if b > threshold) == threshold + 1
    doubling = tried[: tried.index(next(b for b in tried if b > threshold)) + 1]
    assert doubling == [2**i for i in range(len(doubling))]
    assert len(tried) <= 2 * math.log2(threshold + 1) + 2


def test_search_stops_at_max_batch_and_within_tolerance() -> None:
    assert search_batch(lambda b: True, 1, 100, 0.0) is True
    tried: list[int] = []
    search_batch(lambda b: tried.append(b) or b <= 700, 1, 1 << 20, 0.05)
    ok = max(b for b in tried if b <= 700)
    bad = min(b for b in tried if b > 700)
    assert bad - ok <= 0.05 * ok and ok <= 700


# --------------------------------------------------------------------------- CUDA with a fake


class OomAbove(torch.nn.Module):
    """A model that, like a GPU, runs out of memory when the batch is too large."""

    threshold = 37
    last_batch = 0

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        OomAbove.last_batch = x.shape[0]
        if x.shape[0] > OomAbove.threshold:
            raise torch.cuda.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {x.shape[0]} MiB (fake)"
            )
        return self.fc(x)


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> dict:
    calls: dict = {"empty_cache": 0, "fractions": [], "resets": 0, "gc": 0}
    monkeypatch.setattr(
        largest_batch.gc, "collect", lambda *a: calls.__setitem__("gc", calls["gc"] + 1) or 0
    )
    monkeypatch.setattr(largest_batch, "_require_cuda", lambda device: torch.device("cpu"))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(
        torch.cuda,
        "empty_cache",
        lambda: calls.__setitem__("empty_cache", calls["empty_cache"] + 1),
    )
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(
        torch.cuda,
        "reset_peak_memory_stats",
        lambda device=None: calls.__setitem__("resets", calls["resets"] + 1),
    )
    monkeypatch.setattr(
        torch.cuda, "max_memory_allocated", lambda device=None: 1000 + 100 * OomAbove.last_batch
    )
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 1000)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 0)
    monkeypatch.setattr(
        torch.cuda,
        "get_device_properties",
        lambda device=None: SimpleNamespace(total_memory=80 * GiB),
    )
    monkeypatch.setattr(
        torch.cuda, "get_per_process_memory_fraction", lambda device=None: 1.0, raising=False
    )
    monkeypatch.setattr(
        torch.cuda,
        "set_per_process_memory_fraction",
        lambda fraction, device=None: calls["fractions"].append(fraction),
    )
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": 40 * GiB)
    OomAbove.threshold = 37
    return calls


def test_cuda_search_finds_the_largest_batch_and_frees_after_oom(fake_cuda: dict) -> None:
    result = largest_batch_cuda(OomAbove, (4,), tolerance=0)
    assert isinstance(result, CudaBatchSearch)
    assert result.largest_batch == 37 and result.first_oom_batch == 38
    assert result.peak_bytes == 100 * 37  # max_memory_allocated minus what was held before
    assert result.limit_bytes == 10 * GiB and not result.reached_max_batch
    sizes = [t.batch_size for t in result.trials]
    assert sizes[:7] == [1, 2, 4, 8, 16, 32, 64]
    failed = [t for t in result.trials if not t.fits]
    assert failed and all("out of memory" in t.error for t in failed)
    assert all(t.peak_bytes is None for t in failed)
    assert fake_cuda["empty_cache"] >= len(result.trials)  # freed after every trial
    assert fake_cuda["gc"] >= len(result.trials)
    assert fake_cuda["fractions"] == [pytest.approx(10 / 80), 1.0]  # capped, then restored
    assert "largest batch 37" in str(result) and "batch 38 ran out of memory" in str(result)
    data = json.loads(json.dumps(result.to_dict()))
    assert data["method"] == "double-then-bisect" and data["first_oom_batch"] == 38
    assert data["largest_batch"] == 37 and len(data["trials"]) == len(result.trials)


def test_cuda_search_reports_when_nothing_fits_or_max_is_reached(fake_cuda: dict) -> None:
    OomAbove.threshold = 0
    none = largest_batch_cuda(OomAbove, (4,))
    assert none.largest_batch == 0 and none.peak_bytes is None and none.first_oom_batch == 1
    assert "no batch fits" in str(none)
    OomAbove.threshold = 10**9
    capped = largest_batch_cuda(OomAbove, (4,), max_batch=16)
    assert capped.largest_batch == 16 and capped.reached_max_batch
    assert "stopped at max_batch" in capped.summary()[0]


def test_cuda_search_restores_the_cap_when_something_else_fails(fake_cuda: dict) -> None:
    def broken() -> torch.nn.Module:
        model = tiny()
        model.forward = lambda x: (_ for _ in ()).throw(RuntimeError("cuDNN error: bad param"))
        return model

    with pytest.raises(RuntimeError, match="bad param"):
        largest_batch_cuda(broken, (16,))
    assert fake_cuda["fractions"][-1] == 1.0


def test_cuda_search_needs_a_gpu() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ValueError, match="use largest_batch_cpu"):
        largest_batch_cuda(tiny, (16,))
    with pytest.raises(ValueError, match="tolerance"):
        largest_batch_cuda(tiny, (16,), tolerance=1.5)


def test_a_cuda_device_without_an_index_gets_the_current_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # torch 2.11's get_per_process_memory_fraction rejects torch.device("cuda") (seen on the
    # H200, 2026-12-04: `labkit bench batching` failed there), so the search names the index.
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert largest_batch._require_cuda("cuda") == torch.device("cuda", 0)
    assert largest_batch._require_cuda("cuda:1") == torch.device("cuda", 1)
