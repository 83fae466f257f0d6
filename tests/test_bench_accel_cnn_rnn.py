"""``labkit bench accel|cnn|levers|rnn``: quick runs on this CPU, and the GPU recording path with fakes.

Quick runs check structure only: their numbers mean nothing. The recordings
are made by the real recording code from made-up measurements.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from labkit.accel import AsyncLaunchResult, CompileResult, MixedPrecisionResult, SyncPointsResult
from labkit.cli.bench import accel as bench_accel
from labkit.cli.bench import cnn as bench_cnn
from labkit.cli.bench import levers as bench_levers
from labkit.cli.bench import rnn as bench_rnn
from labkit.cli.main import main
from labkit.machine import gpu, reference
from labkit.timing.bench import Timing

pytest.importorskip("torch")

COMMANDS = ("accel", "cnn", "levers", "rnn")


@pytest.fixture(autouse=True)
def _private_reference_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    folder = tmp_path / "reference"
    monkeypatch.setenv(reference.ENV_VAR, str(folder))
    monkeypatch.setenv("LABKIT_PROGRESS", "0")
    return folder


@pytest.fixture
def no_tensorflow(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU machine has no TensorFlow: take the torch path (and keep the tests fast)."""
    monkeypatch.setattr(bench_rnn, "tensorflow_available", lambda: False)


def test_importing_the_modules_imports_no_framework() -> None:
    code = (
        "import labkit.cli.bench.accel, labkit.cli.bench.cnn, labkit.cli.bench.levers, "
        "labkit.cli.bench.rnn, sys, json; "
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout.splitlines()[-1]))
    assert not loaded & {"torch", "matplotlib", "tensorflow", "cupy"}


@pytest.mark.parametrize("name", COMMANDS)
def test_learners_are_told_the_right_command(name: str) -> None:
    assert reference.record_command(name) == f"labkit bench {name} --record"


# --------------------------------------------------------------------------- quick runs here


def test_accel_quick_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "accel", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "training steps (forward, backward, SGD step) on cpu" in out
    assert ".item() every step" in out
    assert "torch bfloat16 vs float32 on cpu" in out
    assert "torch.compile: skipped (--quick" in out and "--quick: toy sizes" in out


def test_cnn_quick_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "cnn", "--quick"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "labkit.models.cnn.CNN, 32×32 images, inference (forward only) on cpu, images/s"
    )
    for name in (
        "float32, NCHW",
        "float32, channels_last",
        "bfloat16 autocast, NCHW",
        "bfloat16 autocast, channels_last",
    ):
        assert f"  {name}:" in out
    assert "  float16 autocast" not in out  # GPU only
    assert "page faults per call" in out and "not measured" not in out


def test_levers_quick_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "levers", "--quick"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "course CNN training step (forward, cross-entropy, backward, SGD), batch 2"
    )
    for label in ("before: float32", "+ no .item() per step", "+ channels_last", "+ bfloat16"):
        assert label in out
    assert "+ torch.compile" not in out  # --quick leaves the cold compile out
    assert out.rstrip().endswith("no torch.compile; the numbers mean little)")


def test_rnn_quick_text_torch(no_tensorflow: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "rnn", "--quick"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Recurrent layers, torch (TensorFlow is not installed here) on cpu")
    assert "nn.LSTMCell loop / nn.LSTM = " in out and "nn.RNN / nn.LSTM = " in out


@pytest.mark.parametrize("name", COMMANDS)
def test_quick_json(
    name: str, no_tensorflow: None, capsys: pytest.CaptureFixture[str], _private_reference_dir: Path
) -> None:
    assert main(["bench", name, "--quick", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["benchmark"] == name and data["quick"] is True and data["recorded"] is None
    assert data["summary"] and all(isinstance(line, str) for line in data["summary"])
    assert data["summary"][-1].startswith("(--quick")
    assert data["device"] == ("cuda" if gpu.has_gpu() else "cpu")
    if name == "accel":
        assert [p["dtype"] for p in data["mixed_precision"]] == ["bfloat16", "float16"]
        assert data["sync_points"]["item_ratio"] > 0 and data["torch_compile"] is None
    elif name == "levers":
        assert (data["batch"], data["image_size"]) == (2, 16) and data["first_call_s"] == {}
        assert [c["label"] for c in data["configurations"]][-1] == "+ bfloat16 autocast"
    elif name == "cnn":
        assert data["largest_common_batch"] == 4 and data["failed"] == []
        assert set(data["gain_vs_float32_nchw"]) == {
            "float32, channels_last",
            "bfloat16 autocast, NCHW",
            "bfloat16 autocast, channels_last",
        }
        point = data["variants"][0]["points"][0]
        assert point["minor_faults_per_call"] is not None and len(point["images_per_s_iqr"]) == 2
    else:
        assert data["framework"] == "torch" and set(data["ratios"]) == {
            "nn.LSTMCell loop / nn.LSTM",
            "nn.RNN / nn.LSTM",
        }
    assert not _private_reference_dir.exists()


def test_rnn_quick_with_tensorflow_uses_keras(capsys: pytest.CaptureFixture[str]) -> None:
    if not bench_rnn.tensorflow_available():
        pytest.skip("TensorFlow is not installed here")
    assert main(["bench", "rnn", "--quick", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["framework"] == "tensorflow"
    assert list(data["median_ms"]) == [
        f"{kind} ({mode})"
        for kind in ("SimpleRNN", "LSTM", "LSTM-no-cudnn")
        for mode in ("eager", "graph")
    ]
    assert set(data["ratios"]) == {
        "LSTM-no-cudnn / LSTM (graph)",
        "SimpleRNN / LSTM (graph)",
        "LSTM eager / graph",
    }


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("name", COMMANDS)
def test_record_without_a_gpu_writes_and_measures_nothing(
    name: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    _private_reference_dir: Path,
) -> None:
    module = {"accel": bench_accel, "cnn": bench_cnn, "levers": bench_levers, "rnn": bench_rnn}[
        name
    ]
    monkeypatch.setattr(gpu, "has_gpu", lambda: False)
    monkeypatch.setattr(module, "measure", lambda **kw: pytest.fail("measured"))
    assert main(["bench", name, "--record"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "needs a CUDA GPU" in out and "nothing was recorded" in out
    assert not _private_reference_dir.exists() or list(_private_reference_dir.iterdir()) == []


@pytest.mark.parametrize("name", COMMANDS)
def test_record_with_quick_is_an_error(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", name, "--quick", "--record"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("labkit: error: --record cannot be combined with --quick")


@pytest.mark.parametrize("name", COMMANDS)
def test_missing_torch_is_one_line(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    assert main(["bench", name]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert "torch is not installed" in captured.err


# --------------------------------------------------------------------------- the GPU path, faked


def _t(ms: float) -> Timing:
    return Timing((ms,))


def fake_accel() -> bench_accel.AccelResults:
    sync = SyncPointsResult(
        device="cuda",
        steps=50,
        deferred=_t(2.0),
        item_per_step=_t(8.0),
        cpu_per_step=_t(9.0),
        print_per_step=_t(20.0),
    )
    mixed = MixedPrecisionResult(
        framework="torch",
        device="cuda",
        dtype="float16",
        steps=5,
        forward_fp32=_t(0.2),
        forward_mixed=_t(0.1),
        train_fp32=_t(0.6),
        train_mixed=_t(0.4),
        max_abs_error=2.0**-11,
        loss_fp32=2.30,
        loss_mixed=2.31,
        used_loss_scaling=True,
    )
    compiled = CompileResult(
        "torch", "torch.compile", 2**24, eager=_t(1.0), compiled=_t(0.25), first_call_s=3.0
    )
    return bench_accel.AccelResults(
        device="cuda",
        launch=AsyncLaunchResult("Test GPU", launch_ms=0.5, synchronized_ms=20.0),
        sync=sync,
        precision=(mixed,),
        compiled=compiled,
        failed=(("bfloat16 autocast", "RuntimeError: pretend"),),
    )


def fake_cnn() -> bench_cnn.CnnResults:
    from labkit.models.throughput import BatchThroughput

    def curve(name: str, per_s: tuple[float, float]) -> bench_cnn.VariantCurve:
        return bench_cnn.VariantCurve(
            name,
            tuple(
                BatchThroughput(
                    batch_size=b,
                    image_size=224,
                    images_per_s=r,
                    median_ms=b / r * 1e3,
                    device="cuda",
                    dtype="float32",
                    channels_last=True,
                    inference=True,
                    timing=_t(b / r * 1e3),
                )
                for b, r in zip((1, 256), per_s, strict=True)
            ),
        )

    return bench_cnn.CnnResults(
        device="cuda",
        image_size=224,
        curves=(
            curve("float32, NCHW", (1000.0, 40_000.0)),
            curve("float16 autocast, channels_last", (900.0, 100_000.0)),
        ),
    )


@functools.cache
def fake_levers() -> bench_levers.LeversResult:
    """A real --quick run on this CPU, relabelled as a GPU's (its numbers are not the point)."""
    import dataclasses

    from labkit.models import levers

    return dataclasses.replace(levers.apply_levers("cpu", quick=True), device="cuda", quick=False)


def fake_rnn() -> bench_rnn.RnnResults:
    return bench_rnn.RnnResults(
        "torch",
        "cuda",
        dict(bench_rnn.SHAPE),
        {"nn.RNN": 0.2, "nn.LSTM": 0.25, "nn.LSTMCell loop": 5.0},
        note="TensorFlow is not installed here",
    )


FAKES: dict[str, tuple[Any, Any]] = {
    "accel": (bench_accel, fake_accel),
    "cnn": (bench_cnn, fake_cnn),
    "levers": (bench_levers, fake_levers),
    "rnn": (bench_rnn, fake_rnn),
}


def test_sync_points_line_says_when_its_two_statistics_disagree() -> None:
    # The H200 recording's numbers: the medians say .item() is slower, the per-round ratio faster.
    line = bench_accel.sync_points_line(
        "cuda",
        steps=20,
        deferred_ms=13.8,
        item_ms=15.3,
        item_ratio=0.92,
        cpu_ratio=1.0,
        print_ratio=2.0,
    )
    assert "13.8 ms" in line and "15.3 ms" in line and ".item() 0.92×" in line
    assert line.endswith("the rounds disagree: no consistent cost of .item() at this size")
    same = bench_accel.sync_points_line(
        "cpu",
        steps=20,
        deferred_ms=10.0,
        item_ms=10.2,
        item_ratio=1.03,
        cpu_ratio=1.0,
        print_ratio=1.0,
    )
    assert same.endswith("within 10%: no measurable cost of .item() here")


def test_fake_summaries_read_well() -> None:
    accel = fake_accel().summary()
    assert accel[0].startswith("cuda: matmuls launched: the host got control back after 500 µs")
    assert "(40.00×)" in accel[0]
    assert accel[1].startswith("cuda: 50 training steps: one sync at the end")
    assert ".item() 4.00×" in accel[1] and accel[1].endswith(".item() every step costs time here")
    assert accel[2].startswith(
        "cuda: float16 autocast vs float32 (MLP 512→1024→10, batch 256, "
        "GradScaler): forward 2.00×, train step 1.50×"
    )
    assert "(1.00× the unit roundoff)" in accel[2]
    assert (
        "first call 3.00 s (cold caches)" in accel[3] and "(4.00× steady-state speedup)" in accel[3]
    )
    assert accel[4] == "cuda: bfloat16 autocast: not measured (RuntimeError: pretend)"
    cnn = fake_cnn().summary()
    assert cnn[0].startswith("cuda: float32, NCHW: peak 40,000 images/s at batch 256")
    assert cnn[-1] == "cuda: float16 autocast, channels_last vs float32, NCHW at batch 256: 2.50×"
    rnn = fake_rnn().summary()
    assert rnn[0].startswith("cuda: measured torch (TensorFlow is not installed here) on cuda")
    assert "cuda: nn.LSTMCell loop / nn.LSTM = 20.00× (nn.LSTM: one cuDNN call per sequence)" in rnn
    # torch's nn.RNN is one cuDNN call too (only Keras' SimpleRNN has no cuDNN path)
    assert "cuda: nn.RNN / nn.LSTM = 0.80× (both: one cuDNN call per sequence)" in rnn


@pytest.mark.parametrize("name", COMMANDS)
def test_record_with_a_gpu_stores_a_recording_learners_can_read(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import labkit.machine.reference

    module, fake = FAKES[name]
    monkeypatch.setattr(gpu, "has_gpu", lambda: True)
    monkeypatch.setattr(module, "measure", lambda quick=False: fake())
    monkeypatch.setattr(
        labkit.machine.reference,
        "gpu_identity",
        lambda: {"gpu_name": "Test GPU", "driver": "1.0", "cuda": "12.4", "torch": "2.13.0"},
    )
    assert main(["bench", name, "--record"]) == 0
    assert "Recorded the GPU results to" in capsys.readouterr().out
    saved = reference.load(name)
    assert saved is not None and saved.gpu == "Test GPU"
    summary = saved.results["summary"]
    assert summary == fake().summary() and all(isinstance(line, str) for line in summary)
    assert saved.results["device"] == "cuda"
    monkeypatch.setattr(gpu, "has_gpu", lambda: False)
    lines = gpu.no_gpu_lines("the demo", reference=name)
    assert lines[1].startswith("Result recorded on Test GPU on ") and lines[2] == f"  {summary[0]}"
