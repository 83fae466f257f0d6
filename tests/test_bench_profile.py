"""``labkit bench profile``: a quick run on this CPU, and the GPU recording path with fakes.

The quick run checks structure only: its numbers mean nothing. The recording
is made by the real recording code from made-up measurements.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from labkit.cli.bench import profile as bench_profile
from labkit.machine import gpu, reference
from labkit.profiling import (
    PHASES,
    NsysRun,
    OpStat,
    PhaseStat,
    SyncPoint,
    SyncReport,
    SyncStallTiming,
    TorchProfile,
)
from labkit.timing.bench import Timing

pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _private_reference_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    folder = tmp_path / "reference"
    monkeypatch.setenv(reference.ENV_VAR, str(folder))
    monkeypatch.setenv("LABKIT_PROGRESS", "0")
    return folder


def test_importing_the_modules_imports_no_framework() -> None:
    code = (
        "import labkit.cli.bench.profile, labkit.profiling, sys, json; "
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout.splitlines()[-1]))
    assert not loaded & {"torch", "matplotlib", "tensorflow", "cupy", "keras"}


def test_learners_are_told_the_right_command() -> None:
    assert reference.record_command("profile") == "labkit bench profile --record"


# --------------------------------------------------------------------------- quick runs here


@pytest.fixture(scope="module")
def quick() -> bench_profile.ProfileResults:
    return bench_profile.measure(quick=True)


def test_quick_measure_runs_every_part(quick: bench_profile.ProfileResults) -> None:
    assert quick.failed == () and quick.complete and quick.quick
    assert quick.device == ("cuda" if gpu.has_gpu() else "cpu")
    assert quick.item_every_step.sync_every_step and not quick.sync_once.sync_every_step
    assert quick.sync_once.steps == bench_profile.QUICK_SHAPE["steps"]
    assert (
        not quick.sync_points_once and quick.sync_points_item.calls == quick.item_every_step.steps
    )
    assert quick.nsys is None  # never in --quick


def test_quick_text(
    quick: bench_profile.ProfileResults,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    results = quick
    monkeypatch.setattr(bench_profile, "measure", lambda quick=False: results)
    assert bench_profile.run_profile_benchmark(quick=True) == 0
    out = capsys.readouterr().out
    assert out.startswith("3 training steps of labkit.models.cnn.CNN on ")
    assert "PyTorch profile:" in out and "(loss.item() every step)" in out
    assert "aten::item in logging: 2 calls" in out
    if quick.device == "cpu":
        assert "No sync points in 2 profiled steps" in out
    assert out.rstrip().endswith(
        "(--quick: toy sizes and tiny time budgets; the numbers mean little)"
    )


def test_quick_json_end_to_end(
    capsys: pytest.CaptureFixture[str], _private_reference_dir: Path
) -> None:
    assert bench_profile.run_profile_benchmark(quick=True, as_json=True) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["benchmark"] == "profile" and data["quick"] is True and data["recorded"] is None
    assert data["summary"][-1].startswith("(--quick")
    assert set(data["profiles"]) == {"sync_once", "item_every_step"}
    points = data["sync_points"]["item_every_step"]["points"]
    assert {"name": "aten::item", "phase": "logging", "calls": 2} in [
        {k: p[k] for k in ("name", "phase", "calls")} for p in points
    ]
    assert data["stall"]["steps"] == 3 and data["failed"] == [] and data["nsys"] is None
    assert not _private_reference_dir.exists()


# --------------------------------------------------------------------------- refusals


def test_record_without_a_gpu_writes_and_measures_nothing(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    _private_reference_dir: Path,
) -> None:
    monkeypatch.setattr(gpu, "has_gpu", lambda: False)
    monkeypatch.setattr(bench_profile, "measure", lambda **kw: pytest.fail("measured"))
    assert bench_profile.run_profile_benchmark(record=True) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "needs a CUDA GPU" in out and "nothing was recorded" in out
    assert not _private_reference_dir.exists() or list(_private_reference_dir.iterdir()) == []


def test_record_with_quick_is_an_error() -> None:
    with pytest.raises(ValueError, match="--record cannot be combined with --quick"):
        bench_profile.run_profile_benchmark(record=True, quick=True)


def test_missing_torch_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    assert bench_profile.run_profile_benchmark() == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert "torch is not installed" in captured.err


# --------------------------------------------------------------------------- the GPU path, faked


def _t(ms: float) -> Timing:
    return Timing((ms,))


def _profile(sync: bool) -> TorchProfile:
    logging_ms = 0.9 if sync else 0.01
    ops = (
        OpStat("aten::convolution_backward", 5, 0.5, 0.6, 2.0),
        OpStat("aten::conv2d", 5, 0.05, 0.4, 0.0),
        OpStat("aten::cudnn_convolution", 5, 0.2, 0.3, 1.5),
        OpStat("void cudnn::conv_fprop_kernel<float, 128>(...)", 5, 0.0, 0.0, 1.5, True),
    ) + ((OpStat("aten::item", 5, 0.01, 4.5, 0.0),) if sync else ())
    phases = tuple(PhaseStat(p, logging_ms if p == "logging" else 0.1, 0.3) for p in PHASES)
    return TorchProfile(
        device="cuda",
        model="labkit.models.cnn.CNN",
        batch=128,
        image_size=128,
        steps=5,
        sync_every_step=sync,
        ops=ops,
        phases=phases,
        step_ms=(1.5,) * 5 if sync else (0.6,) * 5,
        self_cpu_total_ms=5.0,
        device_total_ms=5.5,
        device_busy_ms=5.5,
        span_ms=8.0 if sync else 6.0,
        device_timeline=True,
        trace_path="/tmp/x.json",
    )


def fake_results(**overrides: Any) -> bench_profile.ProfileResults:
    item = SyncReport(
        "/tmp/x.json", 5, True, (SyncPoint("aten::item", "logging", 5, 4.5, 5),), 5, 0.01
    )
    values: dict[str, Any] = dict(
        device="cuda",
        shape=dict(bench_profile.SHAPE),
        sync_once=_profile(False),
        item_every_step=_profile(True),
        sync_points_once=SyncReport("/tmp/y.json", 5, True, ()),
        sync_points_item=item,
        stall=SyncStallTiming("cuda", 10, 128, 128, sync_once=_t(10.0), item_every_step=_t(16.0)),
        nsys=NsysRun(
            "nsys profile ...",
            True,
            0,
            12.5,
            ("/tmp/report.nsys-rep",),
            {"cuda_gpu_kern_sum": [" Time (%)  Name", " 70.0  conv"]},
        ),
    )
    values.update(overrides)
    return bench_profile.ProfileResults(**values)


def test_fake_summary_reads_well() -> None:
    lines = fake_results().summary()
    assert lines[0] == (
        "cuda: 10 training steps (labkit.models.cnn.CNN, batch 128 of 3×128×128): "
        "loss read once 1.00 ms per step, loss.item() every step 1.60 ms per step "
        "(1.60× the time)"
    )
    assert lines[1].startswith("cuda: profile, sync once: host 600 µs per step; ")
    assert "device busy 5.50 ms of 6.00 ms (8% idle)" in lines[1]
    assert lines[2].endswith("logging phase 900 µs of host time per step")
    assert lines[3] == "cuda: sync points, sync once: none"
    assert (
        lines[4]
        == "cuda: sync points, .item() every step: aten::item in logging ×5 (4.50 ms on the host)"
    )
    assert lines[5].startswith(
        "cuda: top operators by self device time (sync once): aten::convolution_backward 2.00 ms"
    )
    assert lines[6] == "cuda: nsys profile --stats=true: ran in 12.5 s"
    assert len(lines) == 7
    failed = fake_results(nsys=None, failed=(("nsys", "RuntimeError: x"),)).summary()
    assert failed[-1] == "cuda: nsys: not measured (RuntimeError: x)"


def test_record_with_a_gpu_stores_a_recording_learners_can_read(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import labkit.machine.reference

    monkeypatch.setattr(gpu, "has_gpu", lambda: True)
    monkeypatch.setattr(bench_profile, "measure", lambda quick=False: fake_results())
    monkeypatch.setattr(
        labkit.machine.reference,
        "gpu_identity",
        lambda: {"gpu_name": "Test GPU", "driver": "1.0", "cuda": "12.4", "torch": "2.13.0"},
    )
    assert bench_profile.run_profile_benchmark(record=True) == 0
    out = capsys.readouterr().out
    assert "Recorded the GPU results to" in out and "self device" in out
    saved = reference.load("profile")
    assert saved is not None and saved.gpu == "Test GPU"
    summary = saved.results["summary"]
    assert summary == fake_results().summary()
    assert saved.results["profiles"]["item_every_step"]["sync_every_step"] is True
    assert saved.results["nsys"]["stats"]["cuda_gpu_kern_sum"][1] == " 70.0  conv"
    monkeypatch.setattr(gpu, "has_gpu", lambda: False)
    lines = gpu.no_gpu_lines("the profile", reference="profile")
    assert lines[1].startswith("Result recorded on Test GPU on ") and lines[2] == f"  {summary[0]}"


def test_an_incomplete_gpu_run_is_not_recorded(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    _private_reference_dir: Path,
) -> None:
    broken = fake_results(
        item_every_step=None, failed=(("profile item every step", "RuntimeError: CUPTI"),)
    )
    monkeypatch.setattr(gpu, "has_gpu", lambda: True)
    monkeypatch.setattr(bench_profile, "measure", lambda quick=False: broken)
    assert bench_profile.run_profile_benchmark(record=True) == 0
    captured = capsys.readouterr()
    assert (
        "nothing was recorded (parts of it failed: profile item every step: RuntimeError: CUPTI)"
        in captured.err
    )
    assert "Recorded" not in captured.out
    assert reference.load("profile") is None
