"""tf.distribute.MirroredStrategy on 2 logical CPUs, in a fresh process; TensorFlow missing."""

from __future__ import annotations

import math

import pytest

from labkit import MissingPackageError
from labkit.core import optional as _optional
from labkit.scaling import mirrored
from labkit.scaling.mirrored import MirroredRun, run_mirrored


def test_two_logical_cpus_run_two_replicas_in_sync() -> None:
    if not _optional.is_installed("tensorflow"):
        pytest.skip("TensorFlow is not installed")
    run = run_mirrored(2, steps=4, epochs=2, batch_per_replica=8, width=16, baseline=False)
    assert isinstance(run, MirroredRun)
    assert run.replicas == 2 and len(run.devices) == 2
    assert run.devices[0].endswith("CPU:0") and run.devices[1].endswith("CPU:1")
    assert run.global_batch == 16 and run.replicas_identical
    assert len(run.epoch_losses) == 2 and all(math.isfinite(v) for v in run.epoch_losses)
    assert run.loss_decreased
    assert run.step.n == 4 * 2 - mirrored.WARMUP_STEPS and run.step.median_ms > 0
    assert run.baseline_step is None and run.efficiency is None
    text = str(run)
    assert "2 replicas in sync" in text and "global batch 16 = 2 replicas × 8" in text


def test_missing_tensorflow_is_one_line_with_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_optional, "is_installed", lambda name: name != "tensorflow")
    with pytest.raises(MissingPackageError) as info:
        run_mirrored()
    message = str(info.value)
    assert "\n" not in message and "tensorflow is not installed" in message
    assert "pip install" in message


def test_module_main_says_so_when_tensorflow_is_missing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def missing(*args: object, **kwargs: object) -> dict:
        raise MissingPackageError("tensorflow", "tf.distribute.MirroredStrategy")

    monkeypatch.setattr(mirrored, "measure", missing)
    assert mirrored.main(["--json"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("labkit: tensorflow is not installed") and err.count("\n") == 1


def test_from_dict_reads_a_baseline() -> None:
    run = {
        "replicas": 2,
        "devices": ["/cpu:0", "/cpu:1"],
        "cross_device_ops": "X",
        "global_batch": 8,
        "parameter_count": 10,
        "step_ms": [2.0, 2.0],
        "epoch_losses": [1.0, 0.5],
        "replicas_identical": True,
    }
    base = {**run, "replicas": 1, "devices": ["/cpu:0"], "global_batch": 4, "step_ms": [1.0]}
    data = {"tf_version": "x", "batch_per_replica": 4, "width": 8, "runs": [base, run]}
    result = MirroredRun.from_dict(data)
    assert result.samples_per_s == pytest.approx(4000)
    assert result.efficiency == pytest.approx(0.5)
    assert "efficiency 50%" in str(result)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n_logical": 0}, ValueError, "n_logical"),
        ({"steps": 1, "epochs": 1}, ValueError, "warm-up"),
        ({"timeout_s": 0}, ValueError, "timeout_s"),
    ],
)
def test_arguments_are_validated(kwargs: dict, error: type, match: str) -> None:
    if "timeout_s" in kwargs and not _optional.is_installed("tensorflow"):
        pytest.skip("the timeout is checked after the TensorFlow check")
    with pytest.raises(error, match=match):
        run_mirrored(**kwargs)
