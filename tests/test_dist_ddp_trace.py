"""Where DDP's overhead goes (issue 17, C31): the profile of DDP steps, split into its parts."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from labkit import scaling  # noqa: E402
from labkit.scaling import ddp_trace  # noqa: E402


def _x(name: str, ts: float, dur: float, tid: int = 1, cat: str = "cpu_op") -> dict:
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "tid": tid, "cat": cat}


def _trace(tmp_path: Path) -> Path:
    """Two steps, in µs: a DDP step whose 2 all-reduces run 300-500 and 800-1300 (backward
    200-900, optimizer at 1400), and a no_sync step with backward 200-800."""
    bwd = "autograd::engine::evaluate_function: AddmmBackward0"
    events = [
        _x(ddp_trace.DDP_STEP, 0, 1500),
        _x("DistributedDataParallel.forward", 10, 150),
        _x(bwd, 200, 300),
        _x("torch::distributed::reducer::mul_out", 290, 10),
        _x("c10d::allreduce_", 295, 5),
        _x(bwd, 500, 400),
        _x("c10d::allreduce_", 795, 5),
        _x("torch.distributed.ddp.reducer::copy_bucket_to_grad", 1310, 20),
        _x("Optimizer.step#SGD.step", 1400, 90),
        _x("gloo:all_reduce", 300, 200, tid=7),
        _x("gloo:all_reduce", 800, 500, tid=8),
        _x(ddp_trace.NO_SYNC_STEP, 2000, 1000),
        _x(bwd, 2200, 600),
        _x("Optimizer.step#SGD.step", 2850, 90),
    ]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_a_profiled_step_is_split_into_hidden_and_exposed(tmp_path: Path) -> None:
    run = SimpleNamespace(
        trace_path=str(_trace(tmp_path)),
        width=8,
        nproc=2,
        backend="gloo",
        bucket_cap_mb=None,
        gradient_bytes=2**20,
    )
    b = scaling.ddp_breakdown(run)
    ddp, no_sync = b.steps
    assert (ddp.kind, no_sync.kind) == ("ddp", "no_sync")
    assert ddp.backward_ms == pytest.approx(0.7) and no_sync.backward_ms == pytest.approx(0.6)
    assert ddp.allreduces_ms == ((0.3, 0.5), (0.8, 1.3))
    assert ddp.hidden_ms == pytest.approx(0.3)  # 300-500, and 800-900 inside backward
    assert ddp.exposed_ms == pytest.approx(0.4)  # 900-1300: the thread waits for it
    assert ddp.first_allreduce_at == pytest.approx(1 / 7)
    assert ddp.reducer_ms == pytest.approx(0.02)  # mul_out and the launches, during backward
    assert ddp.reducer_after_ms == pytest.approx(0.02)  # copy_bucket_to_grad, after it
    assert b.allreduces_per_step == 2
    assert b.overhead_ms == pytest.approx(0.5)  # 1.5 ms against 1.0 ms
    assert b.backward_extra_ms == pytest.approx(0.1)
    text = str(b)
    assert "all-reduces per step: 2 (one per bucket)" in text
    assert "the first started at 14% of the backward pass" in text
    assert "DDP's default buckets (closed at 25 MiB; the first at 1 MiB)" in text
    ax = scaling.plot_ddp_step(b)
    try:
        assert ax.get_title().startswith("One profiled DDP step")
        assert len(ax.get_yticklabels()) == 2
    finally:
        plt.close(ax.figure)


def test_a_run_without_a_trace_says_how_to_make_one() -> None:
    with pytest.raises(ValueError, match=r"trace_steps=5"):
        scaling.ddp_breakdown(SimpleNamespace(trace_path=None))


def test_a_trace_without_labelled_steps_is_named(tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"traceEvents": [_x("aten::mm", 0, 5)]}))
    with pytest.raises(ValueError, match="no labelled DDP and no_sync steps"):
        scaling.ddp_breakdown(SimpleNamespace(trace_path=str(path)))


def test_run_ddp_traces_real_steps_and_buckets() -> None:
    """A real 2-process gloo run: every profiled DDP step has its bucket all-reduces."""
    pytest.importorskip("torch")
    run = scaling.run_ddp(
        2, width=64, depth=4, steps=2, warmup_steps=1, allreduce_reps=1,
        bucket_cap_mb=0.01, trace_steps=2,
    )  # fmt: skip
    assert run.bucket_cap_mb == 0.01 and run.trace_path and Path(run.trace_path).is_file()
    b = scaling.ddp_breakdown(run)
    assert [s.kind for s in b.steps] == ["ddp", "no_sync", "ddp", "no_sync"]
    # 64-wide layers: 16 KiB weights, each over the 10 KB cap: one bucket per weight at least
    assert b.allreduces_per_step >= 4
    assert all(s.allreduces_ms == () for s in b.steps if s.kind == "no_sync")
    assert "bucket_cap_mb=0.01 (every bucket closed at it, the first too)" in str(b)
    with pytest.raises(ValueError, match="bucket_cap_mb"):
        scaling.run_ddp(2, bucket_cap_mb=0)
