"""labkit.batching.sweep: the samples/s-by-batch sweep, its knee, the latency trade-off, the plot.

Sweeps run at toy sizes with tiny time budgets: the tests check structure and
arithmetic, never speed.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from labkit.batching.plots import plot_batch_sweep
from labkit.batching.step import mlp  # noqa: E402
from labkit.batching.sweep import (
    BatchCurve,
    BatchPoint,
    BatchSweep,
    batch_sweep,
    latency_budget_batch,
)
from labkit.machine import memory  # noqa: E402
from labkit.timing.bench import Timing  # noqa: E402

TINY = {"warmup_ms": 0.0, "rep_ms": 1.0, "min_reps": 1}


def _point(mode: str, batch: int, ms: float) -> BatchPoint:
    t = Timing(samples_ms=(ms, ms, ms), label=f"{mode} {batch}", device="cpu")
    return BatchPoint(mode, batch, t.median_ms, t.iqr_ms, batch / (ms / 1e3), t)


def _sweep() -> BatchSweep:
    # samples/s: 1000, 1600, 2000, 2100 (train); inference twice as fast
    train = BatchCurve(
        "train",
        tuple(_point("train", b, ms) for b, ms in ((1, 1.0), (2, 1.25), (4, 2.0), (8, 8 / 2.1))),
    )
    infer = BatchCurve(
        "inference", tuple(_point("inference", p.batch_size, p.median_ms / 2) for p in train.points)
    )
    return BatchSweep(
        model="toy",
        device="cpu",
        input_shape=(4,),
        optimizer="adam",
        curves=(train, infer),
        threads=2,
    )


def test_importing_the_modules_imports_no_framework() -> None:
    code = (
        "import labkit.batching.sweep, labkit.batching.largest, labkit.batching.loaders, "
        "labkit.cli.bench.batching, sys, json; print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout.splitlines()[-1]))
    assert not loaded & {"torch", "tensorflow", "matplotlib", "cupy", "keras"}


def test_mlp_layers_and_validation() -> None:
    model = mlp(8, (16,), 3)
    assert [type(m).__name__ for m in model] == ["Linear", "ReLU", "Linear"]
    assert model(torch.zeros(5, 8)).shape == (5, 3)
    with pytest.raises(ValueError, match="in_features must be a positive integer"):
        mlp(0)
    with pytest.raises(ValueError, match=r"hidden\[1\] must be a positive integer"):
        mlp(8, (16, 0))


def test_knee_peak_and_gain_from_known_points() -> None:
    curve = _sweep().train
    assert curve.peak.batch_size == 8
    assert curve.peak_samples_per_s == pytest.approx(2100)
    assert curve.knee_batch == 4  # 2000 >= 0.9 * 2100 = 1890; 1600 is not
    assert curve.gain == pytest.approx(2.1) and curve.flattened
    sweep = _sweep()
    assert sweep.knee_batch("inference") == 4 and sweep.gain("inference") == pytest.approx(2.1)
    with pytest.raises(ValueError, match="mode must be one of 'train', 'inference'"):
        sweep.curve("eval")


def test_past_the_peak_the_budget_takes_the_faster_smaller_batch() -> None:
    """Review round 8 (R8-08-1): the largest batch within budget can be slower than a smaller one."""
    points = tuple(
        _point("inference", b, ms) for b, ms in ((256, 1.3), (512, 2.36), (1024, 4.84))
    )  # samples/s: 196,923, 216,949, 211,570: the peak at 512
    sweep = dataclasses.replace(_sweep(), curves=(BatchCurve("inference", points),))
    assert latency_budget_batch(sweep, 10.0) == 512
    assert latency_budget_batch(sweep, 1.5) == 256  # the only batch within 1.5 ms


def test_a_curve_still_rising_has_no_plateau_yet() -> None:
    rising = BatchCurve("train", tuple(_point("train", b, 1.0) for b in (1, 2, 4)))
    assert rising.knee_batch == 4 and not rising.flattened
    assert rising.describe().endswith("no plateau yet: still rising at batch 4")


def test_latency_budget_batch_takes_the_best_batch_within_budget() -> None:
    sweep = _sweep()  # inference latencies: 0.5, 0.625, 1.0, 1.9 ms (samples/s still rising)
    assert latency_budget_batch(sweep, 1.0) == 4
    assert latency_budget_batch(sweep, 10.0) == 8
    assert latency_budget_batch(sweep, 0.1) is None
    assert latency_budget_batch(sweep, 1.5, mode="train") == 2
    with pytest.raises(ValueError, match="max_latency_ms"):
        latency_budget_batch(sweep, 0)


def test_text_uses_masked_units() -> None:
    text = str(_sweep())
    assert text.startswith("Samples/s by batch size: toy on cpu, 2 torch threads")
    assert "2,100 samples/s" in text and "1.00 ms" in text
    assert (
        "train: peak 2,100 samples/s at batch 8, 2.10× batch 1; knee (≥ 90% of peak) at batch 4"
        in text
    )
    summary = _sweep().summary()
    assert all(line.startswith("cpu: ") for line in summary)
    assert json.dumps(_sweep().to_dict())


def test_sweep_runs_both_modes_on_the_mlp() -> None:
    result = batch_sweep("mlp", batch_sizes=[4, 1, 2, 2], device="cpu", **TINY)
    assert result.device == "cpu" and result.input_shape == (256,)
    assert [c.mode for c in result.curves] == ["train", "inference"]
    for curve in result.curves:
        assert curve.batch_sizes == (1, 2, 4)
        for p in curve.points:
            assert p.samples_per_s == pytest.approx(p.batch_size / (p.median_ms / 1e3))
            assert p.latency_ms == p.median_ms and p.timing.n >= 1
        assert curve.knee_batch in curve.batch_sizes
    assert result.dropped == () and "samples/s" in str(result)


def test_sweep_trains_a_copy_of_a_custom_model() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(6, 4))
    before = [p.detach().clone() for p in model.parameters()]
    result = batch_sweep(
        model,
        input_shape=(6,),
        batch_sizes=[2],
        modes=("train",),
        device="cpu",
        optimizer="sgd",
        **TINY,
    )
    assert result.model == "Sequential" and result.inference is None
    for a, b in zip(before, model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_sweep_skips_batches_over_the_memory_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    from labkit.batching.memory_fit import fit_memory
    from labkit.models.cnn import CNN

    # the CNN's memory is all activations (about 100 KiB per 16×16 image): the line is exact
    fit = fit_memory(CNN, (3, 16, 16), probe_batches=(8, 16))
    # room for batch 8 but not 64 (a quarter of the "free" memory is the budget)
    free = int(4 * fit.predict_bytes(12))
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": free)
    result = batch_sweep(
        "cnn",
        input_shape=(3, 16, 16),
        batch_sizes=[1, 8, 64],
        modes="inference",
        device="cpu",
        **TINY,
    )
    assert result.inference.batch_sizes == (1, 8)
    assert result.dropped == (64,)
    assert result.memory_note.startswith("skipped batch 64 and up")
    assert result.memory_note in str(result)


def test_sweep_validates_its_arguments() -> None:
    with pytest.raises(ValueError, match="model must be one of 'mlp', 'cnn'"):
        batch_sweep("resnet")
    with pytest.raises(TypeError, match="model must be"):
        batch_sweep(42)
    with pytest.raises(ValueError, match="input_shape is required"):
        batch_sweep(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match=r"batch_sizes\[0\] must be a positive integer"):
        batch_sweep("mlp", batch_sizes=[0])
    with pytest.raises(ValueError, match="modes must be"):
        batch_sweep("mlp", modes=("eval",))
    with pytest.raises(ValueError, match="optimizer must be one of"):
        batch_sweep("mlp", optimizer="lbfgs")
    with pytest.raises(ValueError, match="input_shape for the MLP"):
        batch_sweep("mlp", input_shape=(3, 4))


def test_cnn_sweep_runs() -> None:
    result = batch_sweep("cnn", input_shape=(3, 8, 8), batch_sizes=[1, 2], device="cpu", **TINY)
    assert result.model.startswith("labkit.models.cnn.CNN") and result.train.batch_sizes == (1, 2)


def test_plot_marks_the_knee_and_shows_latency() -> None:
    ax = plot_batch_sweep(_sweep())
    try:
        assert ax.get_xscale() == "log" and ax.get_ylabel() == "throughput (samples/s)"
        assert ax.get_title().startswith("Samples/s and latency")
        lat = ax.latency_ax  # a panel of its own below, not a second y axis
        assert lat.get_yscale() == "log" and "latency" in lat.get_ylabel()
        assert "batch size" in lat.get_xlabel()
        labels = [t.get_text() for t in ax.texts]
        assert labels.count("knee: 4") == 2
        assert len(ax.get_legend().get_texts()) == 2 and len(ax.collections) == 2  # IQR bands
    finally:
        plt.close(ax.figure)
