"""labkit.timing.pitfalls: naive versus synchronized timing, and ``labkit bench timing``."""

from __future__ import annotations

import datetime
import json
import math
import sys
from pathlib import Path

import pytest

from labkit.cli.bench import timing as timing_cli
from labkit.cli.main import main
from labkit.core.results import json_safe
from labkit.machine import gpu, reference
from labkit.timing import pitfalls
from labkit.timing.bench import Timing

TICK_S = 2.0**-10  # exact in binary, so fake-clock arithmetic is exact
TICK_MS = TICK_S * 1e3


class FakeClock:
    def __init__(self, log):
        self.now = 0.0
        self.log = log

    def __call__(self):
        self.log.append("clock")
        return self.now


class FakeGpu:
    """Calls only queue work; synchronize() waits for it (advances the clock)."""

    name = "fakegpu:0"

    def __init__(self, clock, log):
        self.clock, self.log, self.pending = clock, log, 0.0

    def synchronize(self):
        self.log.append("sync")
        self.clock.now += self.pending
        self.pending = 0.0


@pytest.fixture
def fake_gpu():
    log: list[str] = []
    clock = FakeClock(log)
    device = FakeGpu(clock, log)

    def kernel():
        log.append("call")
        clock.now += TICK_S / 16  # the launch, paid by the host
        device.pending += 4 * TICK_S  # the work, done later by the device

    return clock, device, kernel, log


def test_naive_clock_sees_only_the_launch_on_an_async_device(fake_gpu):
    clock, device, kernel, log = fake_gpu
    result = pitfalls.naive_timing(
        kernel, reps=8, warmup_ms=0, rep_ms=40 * TICK_MS, device=device, clock=clock, label="kernel"
    )
    assert result.naive_ms == TICK_MS / 16
    assert result.synced.median_ms == 4 * TICK_MS + TICK_MS / 16
    assert result.ratio == pytest.approx(65.0)
    assert result.on_gpu and result.device == "fakegpu:0"
    assert "queued" in str(result) and "synchronize" in str(result).lower()
    # The naive loop reads the clock around 8 calls with no synchronize in between ...
    first = log.index("clock")
    assert log[first : first + 10] == ["clock"] + ["call"] * 8 + ["clock"]
    # ... then drains the queue before bench starts.
    assert log[first + 10] == "sync"


def test_close_results_on_a_gpu_are_explained_differently():
    synced = Timing((1.0, 1.0, 1.0), device="cuda:0")
    result = pitfalls.NaiveVsSynced("x", "cuda:0", 0.9, 10, synced)
    assert "close" in result.explanation()


def test_on_the_cpu_both_agree_and_the_text_says_why():
    torch = pytest.importorskip("torch")
    fn, args = pitfalls.matmul_workload(16, "cpu")
    result = pitfalls.naive_timing(
        fn, *args, reps=5, warmup_ms=0.2, rep_ms=1.0, warn=False, label="matmul 16²"
    )
    assert result.device == "cpu" and not result.on_gpu
    assert result.label == "matmul 16²" and result.naive_reps == 5
    assert result.naive_ms > 0 and isinstance(result.synced, Timing)
    text = str(result)
    assert text.splitlines()[0].startswith("matmul 16² on cpu: naive clock ")
    assert text.splitlines()[1].startswith(
        "On the CPU both clocks time the work: CPU work is synchronous"
    )
    assert "noise between two measurements" in text
    data = json.loads(json.dumps(result.to_dict()))
    assert data["on_gpu"] is False and data["synced"]["device"] == "cpu"
    assert torch.is_tensor(args[0])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"reps": 0}, ValueError, "reps must be a positive integer"),
        ({"reps": 2.5}, TypeError, "reps"),
        ({"reps": True}, TypeError, "reps"),
        ({"rep_ms": 0}, ValueError, "rep_ms"),
    ],
)
def test_naive_timing_validates(kwargs, error, match):
    with pytest.raises(error, match=match):
        pitfalls.naive_timing(print, **kwargs)


def test_matmul_workload():
    torch = pytest.importorskip("torch")
    fn, (a, b) = pitfalls.matmul_workload(8)
    assert fn is torch.matmul
    assert a.shape == b.shape == (8, 8) and a.dtype == torch.float32 and a.device.type == "cpu"
    assert torch.equal(fn(a, b), a @ b)
    # Seeded: the same inputs every time.
    assert torch.equal(pitfalls.matmul_workload(8)[1][0], a)


@pytest.mark.parametrize(
    ("n", "device", "error", "match"),
    [
        (0, "cpu", ValueError, "n must be an integer"),
        (2.0, "cpu", TypeError, "n must be an integer"),
        (32769, "cpu", ValueError, "n must be an integer from 1 to 32,768"),
        (8, "gpu0", ValueError, "device='gpu0' is not a torch device"),
        (8, 0, TypeError, "device must be a string"),
    ],
)
def test_matmul_workload_validates(n, device, error, match):
    pytest.importorskip("torch")
    with pytest.raises(error, match=match):
        pitfalls.matmul_workload(n, device)


# --------------------------------------------------------------------------- the CLI benchmark


@pytest.fixture
def small_cpu(monkeypatch, tmp_path):
    monkeypatch.setattr(pitfalls, "CPU_MATMUL_N", 32)
    monkeypatch.setenv(reference.ENV_VAR, str(tmp_path))
    return tmp_path


def test_run_timing_benchmark_prints_a_table(small_cpu, capsys):
    pytest.importorskip("torch")
    assert timing_cli.run_timing_benchmark(as_json=False, record=False) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "Same work, timed with a bare host clock and with labkit.bench (median):"
    assert lines[2].split() == [
        "device",
        "work",
        "naive",
        "clock",
        "synchronized",
        "IQR",
        "n",
        "synced/naive",
    ]
    assert lines[3].startswith("cpu     matmul 32²")
    assert "cpu: On the CPU both clocks time the work" in out


def test_run_timing_benchmark_prints_valid_json(small_cpu, capsys):
    pytest.importorskip("torch")
    assert timing_cli.run_timing_benchmark(as_json=True, record=False) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["benchmark"] == "timing" and data["recorded"] is None
    cpu = data["results"][0]
    assert cpu["device"] == "cpu" and cpu["label"] == "matmul 32²"
    assert cpu["synced"]["n"] == len(cpu["synced"]["samples_ms"]) >= 5


def test_record_without_a_gpu_writes_nothing(small_cpu, monkeypatch, capsys):
    pytest.importorskip("torch")
    monkeypatch.setattr(gpu, "has_gpu", lambda: False)
    package_dir = Path(reference.__file__).resolve().parents[1] / "reference"
    shipped = sorted(package_dir.iterdir())
    assert timing_cli.run_timing_benchmark(as_json=False, record=True) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "needs a CUDA GPU" in out and "nothing was recorded" in out
    assert list(small_cpu.iterdir()) == []
    assert sorted(package_dir.iterdir()) == shipped


def test_cli_dispatches_to_the_benchmark(small_cpu, capsys):
    pytest.importorskip("torch")
    assert main(["bench", "timing", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["benchmark"] == "timing"


def test_missing_torch_is_a_message_not_a_traceback(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # how Python marks a module as missing
    assert timing_cli.run_timing_benchmark(as_json=False, record=False) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "torch is not installed" in captured.err and "pip install torch" in captured.err


def test_recording_stores_gpu_rows_that_require_gpu_then_prints(small_cpu, monkeypatch, capsys):
    """The whole path a CPU-only learner sees, with a recording made by the recording code."""
    monkeypatch.setattr(
        reference,
        "gpu_identity",
        lambda: {"gpu_name": "Test GPU", "driver": None, "cuda": "12.4", "torch": "2.13.0"},
    )
    gpu_row = pitfalls.NaiveVsSynced(
        "matmul 2048²", "cuda:0", 0.01, 20, Timing((0.5, 0.5, 0.5), device="cuda:0")
    )
    cpu_row = pitfalls.NaiveVsSynced("matmul 256²", "cpu", 0.2, 20, Timing((0.2, 0.2, 0.2)))
    path = timing_cli._record([cpu_row, gpu_row])
    assert path == small_cpu / "naive_timing.json"
    saved = reference.load("naive_timing")
    assert saved is not None and saved.gpu == "Test GPU" and saved.cuda == "12.4"
    assert saved.results["summary"] == [gpu_row.summary()]
    assert [m["device"] for m in saved.results["measurements"]] == ["cuda:0"]
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()

    monkeypatch.setattr(gpu, "has_gpu", lambda: False)
    assert gpu.require_gpu("the naive clock under-reporting", reference="naive_timing") is False
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith(f"Result recorded on Test GPU on {today}")
    assert lines[2] == (
        "  matmul 2048² on cuda:0: naive clock 10.0 µs per call, synchronized median 500 µs "
        "(synchronized/naive = 50.00×)"
    )


def test_nothing_is_recorded_without_gpu_rows(small_cpu):
    cpu_row = pitfalls.NaiveVsSynced("m", "cpu", 0.2, 20, Timing((0.2,)))
    assert timing_cli._record([cpu_row]) is None
    assert list(small_cpu.iterdir()) == []


def test_json_safe_replaces_non_finite_numbers():
    data = {"ratio": math.inf, "xs": [1.0, math.nan, (2, -math.inf)], "s": "x"}
    assert json_safe(data) == {"ratio": None, "xs": [1.0, None, [2, None]], "s": "x"}
    json.dumps(json_safe(data), allow_nan=False)
