"""``labkit bench batching``: a quick run on this CPU, the refusals, the GPU recording with fakes.

The quick run checks structure only (its numbers mean nothing). The recording
is made by the real recording code from made-up measurements.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from labkit.batching.largest import BatchTrial, CudaBatchSearch  # noqa: E402
from labkit.batching.sweep import BatchCurve, BatchPoint, BatchSweep  # noqa: E402
from labkit.cli.bench import batching as bench_batching  # noqa: E402
from labkit.machine import gpu, reference
from labkit.timing.bench import Timing  # noqa: E402

run = bench_batching.run_batching_benchmark


@pytest.fixture(autouse=True)
def _private_reference_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    folder = tmp_path / "reference"
    monkeypatch.setenv(reference.ENV_VAR, str(folder))
    monkeypatch.setenv("LABKIT_PROGRESS", "0")
    return folder


@pytest.fixture(scope="module")
def quick_json() -> dict:
    """One quick run, shared by the tests that read it (it takes a few seconds)."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert run(as_json=True, quick=True) == 0
    return json.loads(out.getvalue())


def test_learners_are_told_the_right_command() -> None:
    assert reference.record_command("batching") == "labkit bench batching --record"


def test_quick_json(quick_json: dict) -> None:
    data = quick_json
    assert data["benchmark"] == "batching" and data["quick"] is True and data["recorded"] is None
    assert data["device"] == ("cuda" if gpu.has_gpu() else "cpu")
    curves = data["sweep"]["curves"]
    assert set(curves) == {"train", "inference"}
    assert [p["batch_size"] for p in curves["train"]["points"]] == list(
        bench_batching.QUICK_BATCHES
    )
    largest = data["largest_batch"]
    if data["device"] == "cpu":
        assert largest["method"] == "predict-then-verify" and largest["verified"] is True
        assert largest["budget_bytes"] <= bench_batching.QUICK_CPU_BUDGET
    assert data["summary"][-1].startswith("(--quick")
    assert any("largest training batch for CNN" in line for line in data["summary"])


def test_quick_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(quick=True) == 0
    out = capsys.readouterr().out
    assert out.startswith("Samples/s by batch size: MLP 256 → 512 → 512 → 10 on ")
    assert "Largest training batch of CNN (3×16×16 inputs, adam)" in out
    assert out.rstrip().endswith("the numbers mean little)")


def test_record_without_a_gpu_writes_and_measures_nothing(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    _private_reference_dir: Path,
) -> None:
    monkeypatch.setattr(gpu, "has_gpu", lambda: False)
    monkeypatch.setattr(bench_batching, "measure", lambda **kw: pytest.fail("measured"))
    assert run(record=True) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "needs a CUDA GPU" in out and "nothing was recorded" in out
    assert not _private_reference_dir.exists()


def test_record_with_quick_is_an_error() -> None:
    with pytest.raises(ValueError, match="--record cannot be combined with --quick"):
        run(record=True, quick=True)


def test_missing_torch_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    assert run() == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert "torch is not installed" in captured.err


# --------------------------------------------------------------------------- the GPU path, faked


def _point(mode: str, batch: int, ms: float) -> BatchPoint:
    t = Timing((ms,), device="cuda")
    return BatchPoint(mode, batch, ms, 0.0, batch / (ms / 1e3), t)


def fake_results() -> bench_batching.BatchingResults:
    batches_ms = ((1, 0.1), (64, 0.12), (4096, 2.0), (16384, 7.5))
    sweep = BatchSweep(
        model="MLP 256 → 512 → 512 → 10",
        device="cuda",
        input_shape=(256,),
        optimizer="adam",
        curves=(
            BatchCurve("train", tuple(_point("train", b, ms) for b, ms in batches_ms)),
            BatchCurve("inference", tuple(_point("inference", b, ms / 3) for b, ms in batches_ms)),
        ),
    )
    largest = CudaBatchSearch(
        model="CNN",
        device="cuda",
        input_shape=(3, 64, 64),
        optimizer="adam",
        limit_bytes=35 << 30,
        trials=(
            BatchTrial(8192, True, 13 << 30),
            BatchTrial(16384, True, 26 << 30),
            BatchTrial(32768, False, None, "CUDA out of memory. Tried to allocate 12.00 GiB"),
            BatchTrial(24576, True, 34 << 30),
        ),
        reached_max_batch=False,
    )
    return bench_batching.BatchingResults(device="cuda", sweep=sweep, largest=largest)


def test_fake_summary_reads_well() -> None:
    summary = fake_results().summary()
    head = "cuda: MLP 256 → 512 → 512 → 10 on cuda"
    assert summary[0] == f"{head}, float32, adam training steps"
    assert summary[1] == (
        "cuda: train: peak 2,184,533 samples/s at batch 16384, 218.45× batch 1; "
        "knee (≥ 90% of peak) at batch 4096"
    )
    assert summary[-1].startswith(
        "cuda: largest training batch for CNN, adam: largest batch 24,576, peak 34 GiB"
    )
    assert "batch 32,768 ran out of memory" in summary[-1]


def test_record_with_a_gpu_stores_a_recording_learners_can_read(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(gpu, "has_gpu", lambda: True)
    monkeypatch.setattr(bench_batching, "measure", lambda quick=False: fake_results())
    monkeypatch.setattr(
        reference,
        "gpu_identity",
        lambda: {"gpu_name": "Test GPU", "driver": "1.0", "cuda": "12.4", "torch": "2.13.0"},
    )
    assert run(record=True) == 0
    assert "Recorded the GPU results to" in capsys.readouterr().out
    saved = reference.load("batching")
    assert saved is not None and saved.gpu == "Test GPU"
    summary = saved.results["summary"]
    assert summary == fake_results().summary()
    assert saved.results["device"] == "cuda"
    assert saved.results["largest_batch"]["largest_batch"] == 24576
    monkeypatch.setattr(gpu, "has_gpu", lambda: False)
    lines = gpu.no_gpu_lines("samples/s by batch size on a GPU", reference="batching")
    assert lines[1].startswith("Result recorded on Test GPU on ") and lines[2] == f"  {summary[0]}"
