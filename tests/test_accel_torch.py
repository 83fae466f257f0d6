"""labkit.accel on torch: sync points, mixed precision, torch.compile bookkeeping."""

from __future__ import annotations

import math
import os
import sys

import pytest

torch = pytest.importorskip("torch")

from labkit.accel import (  # noqa: E402
    CompileResult,
    MixedPrecisionResult,
    SyncPointsResult,
    async_launch_demo,
    elementwise_chain,
    mixed_precision_torch,
    sync_points_benchmark,
    tf32,  # noqa: E402
    tf32_defaults,
    torch_compile_benchmark,
)
from labkit.timing.bench import Timing  # noqa: E402

FAST = {"warmup_ms": 1.0, "rep_ms": 5.0}


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(64, 16, generator=g), torch.randint(0, 4, (64,), generator=g)


def test_sync_points_structure_and_text() -> None:
    r = sync_points_benchmark(steps=3, size=8, device="cpu", **FAST)
    assert isinstance(r, SyncPointsResult)
    assert r.device == "cpu" and r.steps == 3
    assert all(isinstance(t, Timing) for t in r.timings())
    # the headline is the median of the per-round ratios, inside the printed per-round range
    item = r.rounds[".item() every step"]
    assert r.item_ratio == pytest.approx(1 / item.ratio)
    assert item.ratio_low <= 1 / r.item_ratio <= item.ratio_high
    assert r.item_median_ms == item.median_ms
    text = str(r)
    assert ".item() every step" in text and "×" in text and "the same work in each" in text
    assert "per round" in text and r.rounds is not None


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [({"steps": 0}, "steps"), ({"size": -1}, "size"), ({"rep_ms": 0}, "rep_ms")],
)
def test_sync_points_validates(kwargs: dict, name: str) -> None:
    with pytest.raises((ValueError, TypeError), match=name):
        sync_points_benchmark(**kwargs)


def test_async_launch_demo_skips_without_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    if torch.cuda.is_available():
        pytest.skip("has a GPU")
    assert async_launch_demo(size=8) is None
    assert "No GPU here" in capsys.readouterr().out


def test_tf32_defaults_torch_types() -> None:
    d = tf32_defaults(("torch",))
    names = [name for name, _ in tf32.TORCH_FP32_SETTINGS]
    assert list(d) == names
    assert all(d[key] in (None, "ieee", "tf32", "bf16", "none") for key in names)
    if hasattr(torch.backends, "fp32_precision"):  # torch 2.9+: cuDNN convs and RNNs allow TF32
        assert d["torch.backends.cudnn.conv.fp32_precision"] == "tf32"
        assert d["torch.backends.cudnn.rnn.fp32_precision"] == "tf32"
    assert not any(k.startswith("tf_") for k in d)
    with pytest.raises(ValueError, match="frameworks"):
        tf32_defaults(("jax",))


def test_tf32_defaults_changes_nothing() -> None:
    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    tf32_defaults(("torch",))
    assert (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32) == before


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_mixed_precision_torch(dtype: str) -> None:
    r = mixed_precision_torch(_model, _data(), dtype=dtype, device="cpu", steps=2, **FAST)
    assert isinstance(r, MixedPrecisionResult)
    assert r.dtype == dtype and r.framework == "torch" and not r.used_loss_scaling
    assert 0 < r.max_abs_error < 1 and math.isfinite(r.max_abs_error)
    assert math.isfinite(r.loss_fp32) and math.isfinite(r.loss_mixed)
    assert len(r.timings()) == 4
    assert "unit roundoff" in str(r)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"dtype": "float8"}, "dtype"),
        ({"steps": 0}, "steps"),
        ({"lr": -1.0}, "lr"),
    ],
)
def test_mixed_precision_torch_validates(kwargs: dict, name: str) -> None:
    with pytest.raises((ValueError, TypeError), match=name):
        mixed_precision_torch(_model, _data(), **kwargs)


def test_compile_benchmark_bookkeeping_with_injected_compiler() -> None:
    calls = []

    def fake_compile(fn):  # noqa: ANN001, ANN202 - a stand-in for torch.compile
        calls.append(fn)
        return fn

    r = torch_compile_benchmark(size=1000, compiler=fake_compile, device="cpu", **FAST)
    assert isinstance(r, CompileResult)
    # Inductor's start-up on a one-op function first, then the chain cold, then warm
    assert calls[1:] == [elementwise_chain, elementwise_chain] and len(calls) == 3
    assert r.startup_s is not None and r.arrays_moved == (11, 3)
    assert "memory traffic: eager 11 arrays of 1,000 float32" in str(r)
    assert r.compiler == "fake_compile" and r.elements == 1000
    assert r.first_call_s >= 0
    assert isinstance(r.eager, Timing) and isinstance(r.compiled, Timing)
    assert "first call, cold caches" in str(r) and "×" in str(r)
    assert r.warm_first_call_s is not None and r.new_shape_first_call_s is not None
    assert r.faults_per_call is not None and set(r.faults_per_call) == {"returned", "kept"}


def test_compile_benchmark_custom_fn_and_result_check() -> None:
    x = torch.ones(10)
    r = torch_compile_benchmark(lambda a: a + 1, x, compiler=lambda f: f, **FAST)
    assert r is not None and r.elements is None

    def wrong(fn):  # noqa: ANN001, ANN202 - a "compiler" that changes the result
        return lambda a: fn(a) + 1

    with pytest.raises(AssertionError, match="differs"):
        torch_compile_benchmark(lambda a: a + 1, x, compiler=wrong, **FAST)


def test_compile_benchmark_break_even() -> None:
    eager, compiled = Timing(samples_ms=(10.0,)), Timing(samples_ms=(2.0,))
    r = CompileResult("torch", "c", None, eager, compiled, first_call_s=1.0)
    assert r.speedup == pytest.approx(5.0) and r.break_even_calls == 125
    slow = CompileResult("torch", "c", None, compiled, eager, first_call_s=1.0)
    assert slow.break_even_calls is None and "never pays off" in str(slow)


def test_break_even_is_a_range_over_the_rounds_savings() -> None:
    from labkit.timing.interleave import Interleaved, VariantRuns

    def runs(label: str, medians: tuple[float, ...]) -> VariantRuns:
        timings = tuple(Timing((m,), label=label) for m in medians)
        return VariantRuns(label, timings, sorted(medians)[1], 0.0, 0.0, 0.0, 1.0, 1.0, 1.0)

    rounds = Interleaved(
        (runs("eager", (10.0, 10.0, 10.0)), runs("compiled", (6.0, 8.0, 9.0))), 0, 3
    )
    r = CompileResult(
        "torch",
        "c",
        None,
        rounds["eager"].pooled(),
        rounds["compiled"].pooled(),
        1.0,
        rounds=rounds,
    )
    # savings 4, 2 and 1 ms per call: 1 s is repaid after 250 to 1,000 calls (500 at the median)
    assert r.break_even_range(1.0) == (250, 1000) and r.break_even_calls == 500
    assert "after n=250 to n=1000 calls" in str(r)
    assert rounds.versus("compiled", "eager") == (pytest.approx(10 / 8), 10 / 9, 10 / 6)
    never = Interleaved(
        (runs("eager", (10.0, 10.0, 10.0)), runs("compiled", (6.0, 8.0, 11.0))), 0, 3
    )
    r2 = CompileResult(
        "torch", "c", None, never["eager"].pooled(), never["compiled"].pooled(), 1.0, rounds=never
    )
    assert r2.break_even_range(1.0) is None and "may never pay off" in str(r2)


def test_compile_benchmark_run_false(capsys: pytest.CaptureFixture[str]) -> None:
    assert torch_compile_benchmark(run=False) is None
    assert "Skipped" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "kwargs", "name"),
    [
        ((), {"size": 0}, "size"),
        ((lambda x: x,), {}, "fn"),
        ((5,), {}, "fn"),
    ],
)
def test_compile_benchmark_validates(args: tuple, kwargs: dict, name: str) -> None:
    with pytest.raises((ValueError, TypeError), match=name):
        torch_compile_benchmark(*args, **kwargs)


@pytest.mark.skipif(
    not os.environ.get("LABKIT_SLOW_TESTS"), reason="set LABKIT_SLOW_TESTS=1 (takes ~20 s)"
)
def test_real_torch_compile_tiny() -> None:
    """The real inductor path on a tiny chain (~10-20 s: the C++ compile dominates)."""
    r = torch_compile_benchmark(size=1024, device="cpu", **FAST)
    assert r is not None and r.compiler == "torch.compile" and r.first_call_s > 0


@pytest.mark.parametrize(
    "call",
    [
        lambda: sync_points_benchmark(),
        lambda: mixed_precision_torch(_model, _data()),
        lambda: torch_compile_benchmark(),
        lambda: tf32_defaults(("torch",)),
    ],
)
def test_missing_torch(monkeypatch: pytest.MonkeyPatch, call) -> None:  # noqa: ANN001
    from labkit.core.optional import MissingPackageError

    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(MissingPackageError, match="pip install torch"):
        call()
