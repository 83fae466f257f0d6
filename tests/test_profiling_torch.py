"""labkit.profiling with torch: the profile, its trace file, and the sync points in it.

Toy sizes (2 steps of 4 images of 8×8 px): these tests check what the
profiler records and where it writes it, never how fast anything is.
"""

from __future__ import annotations

import gzip
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from labkit.profiling import (
    PHASES,
    STABLE_OPS,
    SyncReport,
    TorchProfile,
    find_sync_points,
    plot_phases,
    profile_training,
    read_trace,
    summarize_trace,
    time_sync_stall,
)
from labkit.profiling import torch_profile as tp

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[1]
TOY = {"steps": 2, "batch": 4, "image_size": 8, "device": "cpu"}


@pytest.fixture(scope="module")
def once(tmp_path_factory: pytest.TempPathFactory) -> TorchProfile:
    return profile_training(**TOY, trace_dir=tmp_path_factory.mktemp("once"))


@pytest.fixture(scope="module")
def every(tmp_path_factory: pytest.TempPathFactory) -> TorchProfile:
    return profile_training(**TOY, trace_dir=tmp_path_factory.mktemp("every"), sync_every_step=True)


# --------------------------------------------------------------------------- the trace file


def test_default_trace_goes_to_a_new_temporary_folder_not_the_repo() -> None:
    profile = profile_training(**TOY)
    path = Path(profile.trace_path)
    try:
        assert path.is_file() and path.name == "cnn_training_sync_once.pt.trace.json"
        assert path.parent.name.startswith("labkit-profile-")
        assert path.resolve().is_relative_to(Path(tempfile.gettempdir()).resolve())
        assert not path.resolve().is_relative_to(REPO)
    finally:
        shutil.rmtree(path.parent)


def test_trace_is_valid_chrome_json(once: TorchProfile) -> None:
    data = json.loads(Path(once.trace_path).read_text(encoding="utf-8"))
    assert isinstance(data["traceEvents"], list) and data["traceEvents"]
    names = {e.get("name") for e in data["traceEvents"]}
    assert set(PHASES) <= names and "ProfilerStep#2" in names  # 1 wait + 1 warm-up step first


def test_trace_dir_is_created_and_used(tmp_path: Path) -> None:
    folder = tmp_path / "a" / "b"
    profile = profile_training(**TOY, trace_dir=folder)
    assert Path(profile.trace_path).parent == folder


def test_summarize_trace(once: TorchProfile) -> None:
    summary = summarize_trace(once.trace_path, top=5)
    assert summary.steps == 2 and summary.n_events > 50 and summary.size_bytes > 1000
    assert {"cpu_op", "user_annotation"} <= set(summary.categories)
    assert list(summary.categories) == sorted(summary.categories)
    assert summary.device_events == 0 and summary.device_busy_ms == 0
    totals = [e.total_ms for e in summary.top_events]
    assert len(totals) == 5 and totals == sorted(totals, reverse=True)
    text = str(summary)
    assert "https://ui.perfetto.dev" in text and "longest events" in text
    assert "no kernels or copies" in text
    stable = summarize_trace(once.trace_path, top=0)
    assert stable.top_events == () and "longest events" not in str(stable)
    assert json.dumps(stable.to_dict())


def test_read_trace_formats_and_errors(tmp_path: Path) -> None:
    events = [{"ph": "X", "name": "a", "cat": "cpu_op", "ts": 0, "dur": 5, "pid": 1, "tid": 1}]
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(events))
    assert read_trace(bare)["traceEvents"] == events
    packed = tmp_path / "t.json.gz"
    with gzip.open(packed, "wt", encoding="utf-8") as handle:
        json.dump({"traceEvents": events}, handle)
    assert summarize_trace(packed).n_events == 1
    with pytest.raises(FileNotFoundError, match="no trace file"):
        read_trace(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not a JSON trace file"):
        read_trace(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text('{"a": 1}')
    with pytest.raises(ValueError, match="no 'traceEvents' list"):
        read_trace(tmp_path / "other.json")
    with pytest.raises(ValueError, match="top must be"):
        summarize_trace(bare, top=-1)


# --------------------------------------------------------------------------- the profile


def test_operator_table_has_the_training_ops(once: TorchProfile) -> None:
    names = {o.name for o in once.ops}
    for expected in (
        "aten::conv2d",
        "aten::convolution",
        "aten::convolution_backward",
        "aten::linear",
        "aten::addmm",
        "Optimizer.step#SGD.step",
    ):
        assert expected in names, expected
    assert once.op("aten::conv2d").calls == 2 and once.op("aten::mm").calls == 4
    assert not names & set(PHASES) and not any(n.startswith("ProfilerStep") for n in names)
    assert all(o.self_cpu_ms >= 0 and o.total_cpu_ms >= o.self_cpu_ms - 1e-9 for o in once.ops)
    assert all(o.self_device_ms == 0 and not o.on_device for o in once.ops)
    assert once.op("aten::item") is None


def test_phases_steps_and_totals(once: TorchProfile) -> None:
    assert [p.name for p in once.phases] == list(PHASES)
    assert all(p.cpu_ms_per_step > 0 and p.device_ms_per_step == 0 for p in once.phases)
    assert len(once.step_ms) == 2 and once.median_step_ms > 0
    assert once.self_cpu_total_ms > 0 and once.span_ms > 0
    assert not once.device_timeline and once.device_idle_fraction is None
    assert "no device timeline: the run was on cpu" in once.totals_line()
    assert once.phase("forward").cpu_ms_per_step > 0
    with pytest.raises(ValueError, match="name must be one of"):
        once.phase("loss")


def test_printed_profile_has_a_stable_structure(once: TorchProfile, every: TorchProfile) -> None:
    for profile, item_calls in ((once, "0"), (every, "2")):
        lines = str(profile).splitlines()
        assert lines[0].startswith(
            "PyTorch profile: labkit.models.cnn.CNN training on cpu, batch 4"
        )
        header = next(i for i, line in enumerate(lines) if line.strip().startswith("operator "))
        assert lines[header].split() == ["operator", "calls", "self", "CPU", "total", "CPU"]
        rows = lines[header + 1 : header + 1 + len(STABLE_OPS)]
        assert [r.split()[0] for r in rows] == list(STABLE_OPS)
        assert rows[-2].split()[1] == item_calls  # aten::item
        assert all("  " in r.strip() for r in rows)  # columns separated by 2+ spaces
        assert lines[-1].startswith("  trace: ") and "ui.perfetto.dev" in lines[-1]
    assert "(loss.item() every step)" in str(every).splitlines()[0]


def test_top_ops_and_operator_order(once: TorchProfile) -> None:
    top = once.top_ops(3)
    assert len(top) == 3 and [o.self_cpu_ms for o in top] == sorted(
        (o.self_cpu_ms for o in top), reverse=True
    )
    table = once.table(top=3).splitlines()
    assert len(table) == 4 and [r.split()[0] for r in table[1:]] == [o.name for o in top]
    names = once.operators_by_self_time()
    assert names[:3] == tuple(o.name for o in top)
    from labkit import check

    assert check.top_operator(names[0], names)
    with pytest.raises(ValueError, match="sort_by must be one of"):
        once.top_ops(3, "self_gpu_ms")
    with pytest.raises(ValueError, match="n must be"):
        once.top_ops(0)


def test_to_dict_is_json(once: TorchProfile) -> None:
    data = once.to_dict(top=3)
    assert json.loads(json.dumps(data))["steps"] == 2
    assert {o["name"] for o in data["ops"]} >= {"aten::conv2d", "Optimizer.step#SGD.step"}
    assert len(once.to_dict()["ops"]) == len(once.ops)
    assert once.summary()[0].startswith("cpu: labkit.models.cnn.CNN training on cpu")


def test_profiling_prints_nothing(capfd: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    capfd.readouterr()
    profile = profile_training(**TOY, trace_dir=tmp_path)
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    assert all(isinstance(m, str) for m in profile.profiler_messages)  # kept, not printed


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"steps": 0}, ValueError, "steps must be a positive integer"),
        ({"steps": 1.5}, TypeError, "steps must be a positive integer"),
        ({"batch": True}, TypeError, "batch must be a positive integer"),
        ({"image_size": 1}, ValueError, "image_size must be an integer >= 2"),
        ({"device": 3}, TypeError, "device must be None, a string"),
        ({"seed": -1}, ValueError, "seed must be an integer from 0"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        profile_training(**{**TOY, **kwargs})


def test_trace_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "f"
    file.write_text("x")
    with pytest.raises(ValueError, match="is not a folder"):
        profile_training(**TOY, trace_dir=file)


def test_too_big_for_the_memory_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    import labkit.machine.memory
    from labkit.machine.memory import MemoryBudgetError

    monkeypatch.setattr(labkit.machine.memory, "available_bytes", lambda device="cpu": 1000)
    with pytest.raises(MemoryBudgetError, match="profile_training needs"):
        profile_training(**TOY)


# --------------------------------------------------------------------------- sync points


def test_sync_points_count_the_item_calls(every: TorchProfile, once: TorchProfile) -> None:
    report = find_sync_points(every)
    assert isinstance(report, SyncReport) and len(report) == 1 and report.calls == 2
    (point,) = report
    assert (point.name, point.phase, point.calls) == ("aten::item", "logging", 2)
    assert point.calls_per_step == 1 and point.host_ms > 0
    assert not report.on_gpu and report.device_to_host_copies == 0
    text = str(report)
    assert "aten::item in logging: 2 calls, 1 per step" in text
    assert "On the CPU these cost no waiting" in text
    none = find_sync_points(once.trace_path)  # a path works too
    assert not none and none.calls == 0 and str(none).startswith("No sync points in 2 profiled")
    assert json.dumps(report.to_dict())


def _x(name: str, cat: str, ts: float, dur: float, tid: int = 1, **args: Any) -> dict[str, Any]:
    event = {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": tid}
    if args:
        event["args"] = args
    return event


def _gpu_trace(tmp_path: Path) -> Path:
    """One CUDA step as Kineto writes it: phases, a nested .item(), kernels with correlation ids."""
    events = [
        _x("ProfilerStep#2", "user_annotation", 0, 1000),
        _x("forward", "user_annotation", 10, 100),
        _x("cudaLaunchKernel", "cuda_runtime", 20, 5, correlation=7),
        _x("backward", "user_annotation", 120, 100),
        _x("cudaLaunchKernel", "cuda_runtime", 130, 5, tid=2, correlation=8),  # autograd thread
        _x("logging", "user_annotation", 300, 600),
        _x("aten::item", "cpu_op", 310, 580),
        _x("aten::_local_scalar_dense", "cpu_op", 311, 578),
        _x("cudaMemcpyAsync", "cuda_runtime", 312, 570, correlation=9),
        _x("cudaStreamSynchronize", "cuda_runtime", 883, 5),
        _x("conv_kernel", "kernel", 30, 400, tid=7, correlation=7),
        _x("wgrad_kernel", "kernel", 430, 300, tid=7, correlation=8),
        _x("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", 880, 2, tid=7, correlation=9),
        _x("forward", "gpu_user_annotation", 30, 400, tid=7),
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
    ]
    path = tmp_path / "gpu.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_sync_points_on_a_gpu_trace(tmp_path: Path) -> None:
    report = find_sync_points(_gpu_trace(tmp_path))
    assert report.on_gpu and report.steps == 1
    (point,) = report.points  # the nested _local_scalar_dense and runtime calls are not extra
    assert (point.name, point.phase, point.calls) == ("aten::item", "logging", 1)
    assert point.host_ms == pytest.approx(0.58)
    assert report.device_to_host_copies == 1 and report.device_to_host_ms == pytest.approx(0.002)
    text = str(report)
    assert "blocked the host until the kernels queued on its stream" in text
    assert "device-to-host copies" in text


def test_the_profilers_own_closing_synchronize_is_not_a_sync_point(tmp_path: Path) -> None:
    """On CUDA, torch's profiler calls torch.cuda.synchronize() when it stops, after the last
    step and still recording (torch/autograd/profiler.py, profile.__exit__): not the loop's."""
    path = _gpu_trace(tmp_path)
    trace = json.loads(path.read_text())
    trace["traceEvents"].append(_x("cudaDeviceSynchronize", "cuda_runtime", 1100, 50))
    path.write_text(json.dumps(trace))
    report = find_sync_points(path)
    assert [p.name for p in report.points] == ["aten::item"] and report.calls == 1
    trace["traceEvents"] = [
        e for e in trace["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep")
    ]
    path.write_text(json.dumps(trace))  # no profiled steps: the whole trace counts
    assert {p.name for p in find_sync_points(path).points} == {
        "aten::item",
        "cudaDeviceSynchronize",
    }


def test_device_time_is_charged_to_the_launching_phase(tmp_path: Path) -> None:
    profile = tp._from_trace(
        _gpu_trace(tmp_path),
        device="cuda",
        batch=4,
        image_size=8,
        steps=1,
        sync_every_step=True,
        ops=(),
        self_cpu_total_ms=1.0,
        fallback_device_ms={},
        messages=(),
    )
    device = {p.name: p.device_ms_per_step for p in profile.phases}
    assert device == pytest.approx(
        {"data": 0, "forward": 0.4, "backward": 0.3, "optimizer": 0, "logging": 0.002}
    )
    assert profile.device_timeline and profile.device_total_ms == pytest.approx(0.702)
    assert profile.device_busy_ms == pytest.approx(0.702)
    assert profile.span_ms == pytest.approx(1.0)
    assert profile.device_idle_fraction == pytest.approx(1 - 0.702)
    assert "device busy" in profile.totals_line() and "30% idle" in profile.totals_line()
    assert "self device" in str(profile)


def test_device_time_falls_back_to_torch_without_correlation_ids(tmp_path: Path) -> None:
    events = [
        _x("ProfilerStep#1", "user_annotation", 0, 100),
        _x("forward", "user_annotation", 0, 50),
        _x("k", "kernel", 10, 20, tid=7),
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    profile = tp._from_trace(
        path,
        device="cuda",
        batch=1,
        image_size=8,
        steps=1,
        sync_every_step=False,
        ops=(),
        self_cpu_total_ms=0.0,
        fallback_device_ms={"forward": 0.02},
        messages=(),
    )
    assert profile.phase("forward").device_ms_per_step == pytest.approx(0.02)


def test_time_sync_stall_measures_both_loops() -> None:
    stall = time_sync_stall(2, 4, image_size=8, device="cpu", warmup_ms=0, rep_ms=1, min_reps=1)
    assert stall.steps == 2 and stall.sync_once.n >= 1 and stall.item_every_step.n >= 1
    assert stall.ms_per_step_item == pytest.approx(stall.loop_item_ms / 2)
    assert stall.ratio_low <= stall.ratio <= stall.ratio_high  # the median of the rounds' ratios
    assert stall.rounds == 4
    assert stall.ratio > 0
    text = str(stall)
    assert "loss.item() every step" in text and "no queue to drain" in text
    assert json.dumps(stall.to_dict())
    with pytest.raises(ValueError, match="rep_ms must be"):
        time_sync_stall(2, 4, rep_ms=0)
    with pytest.raises(TypeError, match="steps must be"):
        time_sync_stall("2")


# --------------------------------------------------------------------------- plot


def test_plot_phases(once: TorchProfile, every: TorchProfile) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ax = plot_phases(once, every)
    try:
        assert ax.get_xlabel() == "time per step (ms)" and ax.get_xscale() == "linear"
        assert any(t.get_text().strip().endswith("%") for t in ax.texts)  # shares of the step
        assert ax.get_ylabel() == "phase"
        assert [t.get_text() for t in ax.get_yticklabels()] == list(PHASES)
        assert len(ax.patches) == 2 * len(PHASES)  # host bars only: no device on a CPU
        assert ax.get_title().startswith("Where a training step's time goes")
    finally:
        plt.close(ax.figure)
    with pytest.raises(ValueError, match="at least one"):
        plot_phases()
