"""Optional frameworks: quiet TensorFlow, and one clear line when a package is missing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from labkit.cli.main import main
from labkit.core import optional as _optional


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(not _optional.is_installed("tensorflow"), reason="TensorFlow not installed")
def test_tensorflow_import_prints_nothing_on_stderr() -> None:
    result = _run(
        "import labkit\n"
        "tf = labkit.import_tensorflow()\n"
        "tf.reduce_sum(tf.ones([4, 4])).numpy()\n"
        "import sys; print('still writable', file=sys.stderr)\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == "still writable\n"  # no C++ banner, and fd 2 restored afterwards


@pytest.mark.skipif(not _optional.is_installed("tensorflow"), reason="TensorFlow not installed")
def test_tensorflow_keeps_its_default_onednn_setting() -> None:
    result = _run(
        "import os, labkit\nlabkit.import_tensorflow()\n"
        "print(os.environ.get('TF_ENABLE_ONEDNN_OPTS'), os.environ['TF_CPP_MIN_LOG_LEVEL'])"
    )
    assert result.stdout.split() == ["None", "3"]


BOTH = _optional.is_installed("tensorflow") and _optional.is_installed("triton")


@pytest.mark.skipif(not BOTH, reason="needs TensorFlow and Triton")
def test_triton_after_tensorflow_still_ends_the_process() -> None:
    """The clash that preload_triton works around: when this fails, the workaround can go."""
    result = _run("import tensorflow\nimport triton\nprint('both imported')")
    assert result.returncode != 0 and "both imported" not in result.stdout
    assert "LLVM ERROR" in result.stderr


@pytest.mark.skipif(not BOTH, reason="needs TensorFlow and Triton")
def test_import_tensorflow_leaves_room_for_triton() -> None:
    # torch._dynamo imports triton at import time wherever it is installed: torch.compile's path.
    result = _run(
        "import labkit\ntf = labkit.import_tensorflow()\nimport torch._dynamo, triton\n"
        "tf.reduce_sum(tf.ones([4])).numpy()\nprint('both work')"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "both work"


def test_missing_package_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    assert not _optional.is_installed("tensorflow")
    with pytest.raises(_optional.MissingPackageError, match=r"pip install") as info:
        _optional.import_tensorflow("notebook 06")
    assert "tensorflow is not installed for notebook 06" in str(info.value)
    assert isinstance(info.value, ImportError)


def test_try_import_prints_one_line_and_returns_none(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)
    assert _optional.try_import("cupy", "the kernel cells") is None
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert out.startswith("Skipped: cupy is not installed for the kernel cells. Install it with:")


def test_try_import_returns_the_module() -> None:
    assert _optional.try_import("json") is sys.modules["json"]


def test_cli_bad_flag_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["doctor", "--bogus"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unrecognized arguments: --bogus" in err
    assert "Traceback" not in err


def test_cli_without_a_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    assert "doctor" in capsys.readouterr().out
