"""labkit.accel on TensorFlow/Keras: placement, TF32, Keras mixed precision, XLA, memory."""

from __future__ import annotations

import math
import sys

import pytest

pytest.importorskip("tensorflow")

from labkit.accel import (  # noqa: E402
    MixedPrecisionResult,
    PlacementDemo,
    TfMemoryStatus,
    mixed_precision_keras,
    tf32_defaults,
    tf_device_log,
    tf_memory_growth_status,
    tf_soft_placement_demo,
    tf_xla_benchmark,
)
from labkit.accel.precision import KERAS_POLICIES  # noqa: E402
from labkit.accel.tf_memory import HOW_TO  # noqa: E402
from labkit.core.optional import MissingPackageError, import_tensorflow  # noqa: E402
from labkit.timing.bench import Timing  # noqa: E402

FAST = {"warmup_ms": 1.0, "rep_ms": 5.0}
tf = import_tensorflow()
NO_GPU = not tf.config.list_physical_devices("GPU")


@pytest.mark.skipif(not NO_GPU, reason="the fallback only happens without a GPU")
def test_soft_placement_demo_on_cpu_machine() -> None:
    before = tf.config.get_soft_device_placement()
    r = tf_soft_placement_demo(size=4)
    assert isinstance(r, PlacementDemo)
    assert r.gpus_visible == 0
    assert r.actual_device.endswith("device:CPU:0") and r.fell_back
    assert r.strict_error_type == "InvalidArgumentError"
    assert "Could not satisfy device specification" in r.strict_error
    assert "\n" not in r.strict_error and r.strict_device is None
    assert r.soft_placement_restored and tf.config.get_soft_device_placement() == before
    assert "silently ran on another device" in str(r)


def test_soft_placement_restored_when_it_was_off() -> None:
    tf.config.set_soft_device_placement(False)
    try:
        r = tf_soft_placement_demo(size=2)
        assert r.soft_placement_default is False
        assert tf.config.get_soft_device_placement() is False
    finally:
        tf.config.set_soft_device_placement(True)


def test_soft_placement_cpu_request_does_not_fall_back() -> None:
    r = tf_soft_placement_demo("/CPU:0", size=2)
    assert not r.fell_back and r.strict_error is None
    assert r.strict_device is not None and r.strict_device.endswith("CPU:0")


@pytest.mark.parametrize(
    ("kwargs", "name"), [({"requested_device": ""}, "requested_device"), ({"size": 0}, "size")]
)
def test_soft_placement_validates(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        tf_soft_placement_demo(**kwargs)


def test_device_log_reports_result_devices_and_switches_logging_off() -> None:
    log = tf_device_log(lambda: tf.matmul([[1.0]], [[2.0]]))
    assert log.result_devices and log.result_devices[0].endswith("CPU:0") or not NO_GPU
    assert isinstance(log.log_lines, tuple)
    assert "devices of the results" in str(log)
    assert not tf.debugging.get_log_device_placement()


def test_tf32_defaults_both_frameworks() -> None:
    d = tf32_defaults()
    assert isinstance(d["tf_tensor_float_32_execution_enabled"], bool)
    assert d["tf_tensor_float_32_execution_enabled"] is True  # TF's documented default
    if "torch" in sys.modules:
        assert d["torch.backends.cudnn.conv.fp32_precision"] in ("tf32", "ieee", "none")


def test_mixed_precision_keras_runs_and_restores_policy() -> None:
    keras = pytest.importorskip("keras")
    before = keras.mixed_precision.global_policy().name
    r = mixed_precision_keras(batch=32, features=8, hidden=16, classes=4, steps=2, **FAST)
    assert isinstance(r, MixedPrecisionResult) and r.framework == "keras"
    assert 0 < r.max_abs_error < 1 and math.isfinite(r.loss_mixed)
    assert not r.used_loss_scaling  # bfloat16 needs none
    assert keras.mixed_precision.global_policy().name == before


def test_mixed_precision_keras_float16_uses_loss_scaling() -> None:
    r = mixed_precision_keras(
        "mixed_float16", batch=16, features=4, hidden=8, classes=3, steps=1, **FAST
    )
    assert r.used_loss_scaling and r.max_abs_error > 0


def test_mixed_precision_keras_restores_policy_on_error(monkeypatch: pytest.MonkeyPatch) -> None:
    keras = pytest.importorskip("keras")
    before = keras.mixed_precision.global_policy().name

    def boom(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise RuntimeError("boom")

    monkeypatch.setattr(keras.Sequential, "train_on_batch", boom)
    with pytest.raises(RuntimeError, match="boom"):
        mixed_precision_keras(batch=8, features=4, hidden=8, classes=2, steps=1, **FAST)
    assert keras.mixed_precision.global_policy().name == before


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [({"policy": "float32"}, "policy"), ({"batch": 0}, "batch"), ({"seed": 1.5}, "seed")],
)
def test_mixed_precision_keras_validates(kwargs: dict, name: str) -> None:
    with pytest.raises((ValueError, TypeError), match=name):
        mixed_precision_keras(**kwargs)
    assert set(KERAS_POLICIES) == {"mixed_bfloat16", "mixed_float16"}


def test_xla_benchmark_tiny() -> None:
    r = tf_xla_benchmark(size=256, **FAST)
    assert all(isinstance(t, Timing) for t in r.timings())
    assert r.graph_first_call_s > 0 and r.xla_first_call_s > 0
    assert r.xla_vs_graph > 0 and "XLA" in str(r)
    with pytest.raises(ValueError, match="size"):
        tf_xla_benchmark(size=0)


def test_memory_status_without_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TF_FORCE_GPU_ALLOW_GROWTH", raising=False)
    s = tf_memory_growth_status()
    assert isinstance(s, TfMemoryStatus)
    if NO_GPU:
        assert s.gpus == () and not s.grabs_all_memory and "no GPU" in str(s)
    assert HOW_TO in str(s) or s.gpus


def test_memory_status_logic() -> None:
    grab = TfMemoryStatus(gpus=("GPU:0",), memory_growth={"GPU:0": False}, env_allow_growth=None)
    assert grab.grabs_all_memory and "nearly all" in str(grab)
    env = TfMemoryStatus(gpus=("GPU:0",), memory_growth={"GPU:0": False}, env_allow_growth="true")
    assert not env.grabs_all_memory
    grow = TfMemoryStatus(gpus=("GPU:0",), memory_growth={"GPU:0": True}, env_allow_growth=None)
    assert not grow.grabs_all_memory


@pytest.mark.parametrize(
    "call",
    [
        lambda: tf_soft_placement_demo(),
        lambda: tf_memory_growth_status(),
        lambda: tf_xla_benchmark(size=4),
        lambda: tf32_defaults(("tensorflow",)),
        lambda: mixed_precision_keras(),
        lambda: tf_device_log(lambda: None),
    ],
)
def test_missing_tensorflow(monkeypatch: pytest.MonkeyPatch, call) -> None:  # noqa: ANN001
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    with pytest.raises(MissingPackageError, match="pip install"):
        call()
