"""labkit.profiling with TensorFlow: the .xplane.pb file, read offline, and a silent profiler."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from labkit.core.optional import MissingPackageError, is_installed
from labkit.profiling import TfProfile, keras_cnn, profile_keras_training, read_xplane

REPO = Path(__file__).resolve().parents[1]
TOY = {"steps": 2, "batch": 4, "image_size": 8, "warmup_steps": 1}

needs_tf = pytest.mark.skipif(not is_installed("tensorflow"), reason="TensorFlow is not installed")


@pytest.fixture(scope="module")
def tf_profile(tmp_path_factory: pytest.TempPathFactory) -> TfProfile:
    if not is_installed("tensorflow"):
        pytest.skip("TensorFlow is not installed")
    return profile_keras_training(**TOY, logdir=tmp_path_factory.mktemp("tf"))


@needs_tf
def test_writes_an_xplane_under_the_logdir(tf_profile: TfProfile) -> None:
    assert len(tf_profile.files) == 1
    path, size = tf_profile.files[0]
    file = Path(path)
    assert file.name.endswith(".xplane.pb") and file.stat().st_size == size > 0
    assert file.parent.parent == Path(tf_profile.logdir) / "plugins" / "profile"
    assert tf_profile.xplane_path == path and tf_profile.device in ("/CPU:0", "/GPU:0")


@needs_tf
def test_the_xplane_is_read_offline(tf_profile: TfProfile) -> None:
    x = tf_profile.xplane
    assert x is not None and tf_profile.note == ""
    assert "/host:CPU" in x.planes and x.n_events > 0
    if tf_profile.device == "/CPU:0":  # the ops run on the host; a GPU run adds kernels
        assert x.device_kernels == ()
        conv = [o for o in x.host_ops if "Conv2D" in o.name and "Backprop" not in o.name]
        assert conv and conv[0].calls == TOY["steps"]  # one forward convolution per step
    else:
        assert x.device_kernels and x.device_busy_ms > 0
    times = [o.total_ms for o in x.host_ops]
    assert times == sorted(times, reverse=True) and x.host_op_ms == pytest.approx(sum(times))
    again = read_xplane(tf_profile.files[0][0])
    assert {o.name for o in again.host_ops} == {o.name for o in x.host_ops}


@needs_tf
def test_printed_profile(tf_profile: TfProfile) -> None:
    text = str(tf_profile)
    assert text.startswith(
        f"TensorFlow profile: Keras CNN training on {tf_profile.device}, batch 4 of 8×8×3"
    )
    assert "TensorFlow ops by total time:" in text and "pip install xprof" in text
    assert "tensorboard --logdir" in text and tf_profile.logdir in text
    import dataclasses

    stable = str(dataclasses.replace(tf_profile, top=0))
    assert "by total time" not in stable and "TensorFlow op runs of" in stable
    import json

    assert json.dumps(tf_profile.to_dict())


@needs_tf
def test_default_logdir_is_a_temporary_folder() -> None:
    import shutil

    profile = profile_keras_training(**TOY)
    folder = Path(profile.logdir)
    try:
        assert folder.name.startswith("labkit-tfprofile-") and profile.files
        assert folder.resolve().is_relative_to(Path(tempfile.gettempdir()).resolve())
        assert not folder.resolve().is_relative_to(REPO)
    finally:
        shutil.rmtree(folder)


@needs_tf
def test_the_profiler_prints_nothing(capfd: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    capfd.readouterr()
    profile_keras_training(**TOY, logdir=tmp_path)
    out, err = capfd.readouterr()
    assert out == "" and err == ""


@needs_tf
def test_a_fresh_process_prints_nothing_either(tmp_path: Path) -> None:
    """TensorFlow's import and the profiler's start/stop write C++ logs to fd 2 if not silenced."""
    code = (
        "from labkit.profiling import profile_keras_training; "
        f"profile_keras_training(steps=1, batch=4, image_size=8, warmup_steps=1, "
        f"logdir={str(tmp_path)!r})"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    assert done.stdout == "" and done.stderr == ""
    assert list(tmp_path.glob("plugins/profile/*/*.xplane.pb"))


@needs_tf
def test_keras_cnn_matches_the_torch_cnn() -> None:
    assert keras_cnn().count_params() == 6026  # labkit.models.cnn.CNN: 896 + 5,130
    assert keras_cnn(3, 16).output_shape == (None, 3)


@needs_tf
def test_read_xplane_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no .xplane.pb"):
        read_xplane(tmp_path / "missing.xplane.pb")
    bad = tmp_path / "bad.xplane.pb"
    bad.write_bytes(b"\xff\xff\xff not a protobuf")
    with pytest.raises(ValueError, match="is not an XSpace protobuf"):
        read_xplane(bad)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"image_size": 12}, ValueError, "image_size must be a multiple of 8"),
        ({"steps": 0}, ValueError, "steps must be a positive integer"),
        ({"top": -1}, ValueError, "top must be an integer >= 0"),
        ({"batch": 2.0}, TypeError, "batch must be a positive integer"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        profile_keras_training(**{**TOY, **kwargs})


def test_missing_tensorflow_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    with pytest.raises(MissingPackageError, match="tensorflow is not installed") as info:
        profile_keras_training(**TOY)
    assert "pip install" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(MissingPackageError):
        keras_cnn()
