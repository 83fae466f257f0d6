"""labkit.batching.loaders: the costly samples, the DataLoader and tf.data loops, the table, the plot.

Toy sizes (8×8 images decoded from 16×16, a 1 ms step, a few steps): the
tests check what is measured and reported, never how fast.
"""

from __future__ import annotations

import json
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from labkit.batching import loaders as input_pipeline  # noqa: E402
from labkit.batching import (
    synthetic,  # noqa: E402
    tf_data,  # noqa: E402
)
from labkit.batching.loaders import (
    PIN_MEMORY_CPU_NOTE,
    LoaderComparison,
    LoaderRun,
    compare_loaders,
    measure_loader,
)
from labkit.batching.plots import plot_loader_comparison
from labkit.batching.synthetic import SyntheticImages, ThreadScaling, sample_cost, thread_scaling
from labkit.batching.tf_data import compare_tf_pipelines, measure_tf_pipeline
from labkit.core.optional import MissingPackageError, is_installed  # noqa: E402
from labkit.timing.bench import Timing  # noqa: E402

SMALL = SyntheticImages(image_size=8, decode_px=16)
FAST = {
    "batch_size": 4,
    "steps": 3,
    "warmup_steps": 1,
    "step_ms": 1.0,
    "dataset": SMALL,
    "device": "cpu",
}


# --------------------------------------------------------------------------- the samples


def test_samples_are_deterministic_normalised_images() -> None:
    data = SyntheticImages(n=10, image_size=8, decode_px=32, num_classes=3)
    image, label = data[4]
    assert image.shape == (3, 8, 8) and image.dtype == np.float32 and image.flags.c_contiguous
    assert 0 <= label < 3
    assert np.allclose(image.mean(axis=(1, 2)), 0, atol=1e-4)
    again, label_again = data[4]
    assert np.array_equal(image, again) and label == label_again
    assert not np.array_equal(image, data[5][0])
    assert np.array_equal(data[-1][0], data[9][0])
    with pytest.raises(IndexError, match="out of range"):
        data[10]


def test_decode_then_augment_is_what_getitem_does() -> None:
    data = SyntheticImages(n=4, image_size=8, decode_px=16)
    decoded, label = data.decode(2)
    assert decoded.shape == (3, 16, 16)
    assert np.array_equal(data.augment(decoded, 2), data[2][0]) and data[2][1] == label


def test_io_latency_is_a_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(input_pipeline.time, "sleep", slept.append)
    SyntheticImages(n=2, image_size=8, decode_px=16, io_ms=2.5)[1]
    assert slept == [0.0025]


def test_python_work_is_a_fixed_amount_of_bytecode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(synthetic, "_LOOPS_PER_MS", [1000.0])
    assert synthetic._python_work(2.5) == 2500
    data = SyntheticImages(n=2, image_size=8, decode_px=16, python_ms=0.5)
    assert np.array_equal(data[1][0], SyntheticImages(n=2, image_size=8, decode_px=16)[1][0])
    assert "500 µs of Python (holds the GIL)" in data.describe()


def test_dataset_validates() -> None:
    with pytest.raises(ValueError, match="multiple of 8"):
        SyntheticImages(decode_px=20)
    with pytest.raises(ValueError, match="at least image_size"):
        SyntheticImages(image_size=64, decode_px=32)
    with pytest.raises(ValueError, match="io_ms"):
        SyntheticImages(io_ms=-1)
    with pytest.raises(ValueError, match="n must be"):
        SyntheticImages(0)


def test_sample_cost_is_a_timing() -> None:
    t = sample_cost(SMALL, warmup_ms=0, rep_ms=1)
    assert isinstance(t, Timing) and t.label == "one sample" and t.n >= 5


def test_thread_scaling_times_one_thread_and_a_pool() -> None:
    result = thread_scaling(SMALL, threads=2, samples=4, rep_ms=1)
    assert isinstance(result, ThreadScaling) and result.threads == 2 and result.samples == 4
    assert result.serial.n >= 3 and result.threaded.n >= 3
    assert result.speedup == pytest.approx(result.serial.median_ms / result.threaded.median_ms)
    text = str(result)
    assert text.startswith("4 samples (8×8 images decoded from 16×16 per sample): 1 thread ")
    assert text.endswith("× the speed of one")
    with pytest.raises(ValueError, match="threads must be an integer >= 2"):
        thread_scaling(SMALL, threads=1)


# --------------------------------------------------------------------------- DataLoader


def _check_run(run: LoaderRun, steps: int = 3, batch: int = 4) -> None:
    assert run.wait.n == steps and run.compute.n == steps
    assert 0.0 <= run.wait_fraction <= 1.0
    assert run.device_busy_fraction == pytest.approx(1 - run.wait_fraction)
    assert run.samples_per_s == pytest.approx(batch * steps / (run.total_ms / 1e3))
    assert run.startup_ms >= 0 and run.median_wait_ms == run.wait.median_ms


def test_loader_without_workers() -> None:
    run = measure_loader(num_workers=0, **FAST)
    _check_run(run)
    assert run.label == "num_workers=0" and run.framework == "torch DataLoader"
    assert run.step.startswith("a fixed 1.00 ms step") and run.device == "cpu"
    assert run.compute.min_ms >= 0.9  # the step sleeps 1 ms
    text = str(run)
    assert "samples/s" in text and "waiting for data" in text and "first batch after" in text
    assert run.verdict().split(":")[0] in ("input-bound", "keeps up")


def test_loader_with_a_worker_process_and_no_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # pin_memory without CUDA must not warn
        run = measure_loader(num_workers=1, pin_memory=True, prefetch_factor=2, **FAST)
    _check_run(run)
    assert run.label == "num_workers=1, pin_memory, prefetch_factor=2"
    assert run.settings == {
        "num_workers": 1,
        "pin_memory": False,
        "prefetch_factor": 2,
        "usable_cpus": input_pipeline.usable_cpus(),
    }
    assert run.notes == (PIN_MEMORY_CPU_NOTE,)


def test_loader_with_a_real_training_step() -> None:
    run = measure_loader(**{**FAST, "step_ms": None})
    _check_run(run)
    assert run.step == "a CNN training step on cpu"


def test_loader_validates() -> None:
    with pytest.raises(ValueError, match="prefetch_factor needs num_workers > 0"):
        measure_loader(num_workers=0, prefetch_factor=2)
    with pytest.raises(ValueError, match="num_workers must be an integer >= 0"):
        measure_loader(num_workers=-1)
    with pytest.raises(ValueError, match="step_ms"):
        measure_loader(step_ms=-1)


def test_more_workers_than_cpus_is_said_the_same_way_on_every_machine() -> None:
    """Issue 13: torch warns on stderr only where workers outnumber the CPUs; labkit's table
    prints the CPU count on every machine instead (masked by nbval_sanitize.cfg)."""
    import os

    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})  # one CPU, two workers
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = compare_loaders([{"num_workers": 2}], **FAST)
    finally:
        os.sched_setaffinity(0, before)
    assert not [w for w in caught if "worker process" in str(w.message)]
    assert str(result).splitlines()[-1] == (
        "  CPUs this process may use: 1 (worker processes beyond that take turns on them)"
    )


def test_compare_loaders_table_summary_and_plot() -> None:
    result = compare_loaders([{"num_workers": 0}, {"num_workers": 0, "label": "again"}], **FAST)
    assert isinstance(result, LoaderComparison) and [r.label for r in result.runs] == [
        "num_workers=0",
        "again",
    ]
    assert result.run("again") is result.runs[1] and result.best in result.runs
    text = str(result)
    assert text.startswith("Input pipelines, batch 4, step: a fixed 1.00 ms step")
    assert "samples/s" in text and "%" in text
    assert all(line.startswith("cpu: ") for line in result.summary())
    data = json.loads(json.dumps(result.to_dict()))
    assert data["runs"][0]["settings"]["num_workers"] == 0
    assert data["runs"][1]["wait_fraction"] == result.runs[1].wait_fraction
    assert data["runs"][1]["compute"]["median_ms"] == result.runs[1].compute.median_ms
    ax = plot_loader_comparison(result)
    try:
        assert len(ax.patches) == 4  # a wait bar and a step bar per run
        assert ax.get_xlabel().startswith("time per step (ms")
        assert [t.get_text() for t in ax.get_yticklabels()] == ["num_workers=0", "again"]
    finally:
        plt.close(ax.figure)
    with pytest.raises(ValueError, match="configs must be a non-empty list"):
        compare_loaders([])
    with pytest.raises(ValueError, match="label must be one of"):
        result.run("nope")


# --------------------------------------------------------------------------- tf.data


TF_FAST = {
    "batch_size": 4,
    "steps": 2,
    "warmup_steps": 1,
    "step_ms": 1.0,
    "dataset": SMALL,
    "epoch_batches": 2,
}


@pytest.mark.skipif(not is_installed("tensorflow"), reason="TensorFlow is not installed here")
def test_tf_variants_run_and_report() -> None:
    result = compare_tf_pipelines(["map", "parallel+cache+prefetch", "map+defaults"], **TF_FAST)
    plain, cached, defaults = result.runs
    for run in result.runs:
        _check_run(run, steps=2)
    assert defaults.settings["variant"] == "map+defaults"
    assert plain.label == "tf.data map" and plain.framework == "tf.data" and plain.notes == ()
    assert cached.notes and "second epoch" in cached.notes[0]
    assert "tf.data parallel+cache+prefetch" in str(result)


@pytest.mark.skipif(not is_installed("tensorflow"), reason="TensorFlow is not installed here")
def test_tf_variants_turn_the_default_rewrites_off_except_defaults() -> None:
    """All of them, map_and_batch_fusion included: it fills the next batch in a background
    thread, so a "map" row with it on is not sequential (review round 6, R6-08-1)."""

    def rewrites(variant: str) -> tuple:
        ds = tf_data.build_tf_pipeline(variant, SMALL, 4, 2)
        opt = ds.options().experimental_optimization
        return opt.apply_default_optimizations, opt.map_and_batch_fusion

    assert rewrites("map") == (False, None) and rewrites("parallel+prefetch") == (False, None)
    assert rewrites("map+defaults") == (None, None)  # None: tf.data's own default (on)


@pytest.mark.skipif(not is_installed("tensorflow"), reason="TensorFlow is not installed here")
def test_tf_pipeline_yields_the_same_samples_as_the_dataset() -> None:
    ds = tf_data.build_tf_pipeline("parallel+prefetch", SMALL, 4, 2)
    x, y = next(iter(ds))
    assert tuple(x.shape) == (4, 3, 8, 8)
    for i in range(4):
        image, label = SMALL[i]
        assert np.allclose(x[i].numpy(), image) and int(y[i]) == label


def test_tf_validates_and_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="variant must be one of 'map'"):
        measure_tf_pipeline("fast")
    with pytest.raises(ValueError, match="step_ms must be a number"):
        measure_tf_pipeline("map", step_ms=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="variants must be one of 'map'"):
        compare_tf_pipelines(["map", "mapp"])
    with pytest.raises(ValueError, match="variants must name at least one"):
        compare_tf_pipelines([])
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    with pytest.raises(MissingPackageError, match="pip install"):
        measure_tf_pipeline("map", **TF_FAST)
