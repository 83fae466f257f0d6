"""``labkit bench kernels``: the no-GPU line here, and the whole run on a fake GPU.

The fake GPU (tests/test_kernels_cupy.py) emulates each kernel with NumPy and
checks every launch against its .cu file's contract, so these runs exercise
all of the benchmark's code (sizing, verification, timing, bars, the record
path) except the GPU itself. Their numbers mean nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import labkit.machine.memory
from labkit.cli.bench import kernels as bench_kernels
from labkit.kernels import autotune, cupy_run, experiments, tuning
from labkit.kernels import cupy_run as cupy_run_
from labkit.machine import reference

sys.path.insert(0, str(Path(__file__).parent))
from test_kernels_cupy import FakeCupy, _install_linalg  # noqa: E402

try:  # imported now, before a test puts a fake CuPy in sys.modules: kernel_tuner imports torch
    from test_kernels_tuning import write_kt_cache
except pytest.skip.Exception:  # kernel_tuner is not installed
    write_kt_cache = None

needs_kernel_tuner = pytest.mark.skipif(
    write_kt_cache is None, reason="kernel_tuner is not installed"
)


@pytest.fixture(autouse=True)
def _private_reference_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    folder = tmp_path / "reference"
    monkeypatch.setenv(reference.ENV_VAR, str(folder))
    return folder


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeCupy:
    fake = FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    _install_linalg(monkeypatch, fake)
    monkeypatch.setattr(labkit.machine.memory, "available_bytes", lambda device="cpu": 16 << 20)
    monkeypatch.setattr(cupy_run, "_MODULES", {})
    monkeypatch.setattr(bench_kernels, "SGEMM_TILED_CONFIGS", bench_kernels.SGEMM_TILED_CONFIGS[:1])
    monkeypatch.setattr(bench_kernels, "PADDED_CONFIGS", bench_kernels.PADDED_CONFIGS[:1])

    def fake_search(kernel: str) -> Any:
        """A search's result as Kernel Tuner would leave it (its cache, where Kernel Tuner is here)."""

        def search(*args: Any, **kwargs: Any) -> Any:
            if write_kt_cache is not None:
                path = write_kt_cache(tmp_path / f"{kernel}.json", device="Fake GPU 9000")
                return tuning.replay(path, use_kernel_tuner=False)
            configs = (
                tuning.TunedConfig({"TILE_DIM": 32, "BLOCK_ROWS": 8}, 0.125),
                tuning.TunedConfig({"TILE_DIM": 16, "BLOCK_ROWS": 4}, 0.3),
            )
            return tuning.TuningReplay(
                "transpose_padded",
                "Fake GPU 9000",
                (4096, 4096),
                {"TILE_DIM": (16, 32), "BLOCK_ROWS": (4, 8)},
                configs,
                "fake",
            )

        return search

    monkeypatch.setattr(bench_kernels, "kernel_tuner_available", lambda: True)
    monkeypatch.setattr(autotune, "tune_transpose", fake_search("transpose"))
    monkeypatch.setattr(autotune, "tune_sgemm", fake_search("sgemm"))
    return fake


# --------------------------------------------------------------------------- no GPU here


def test_no_gpu_prints_one_line_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    cupy = pytest.importorskip("cupy")
    if cupy.is_available():  # pragma: no cover - a GPU machine
        pytest.skip("this machine has a GPU")
    assert bench_kernels.run_kernels_benchmark(as_json=False, record=False, quick=True) == 0
    out = capsys.readouterr()
    assert out.out == bench_kernels.no_gpu_line() + "\n" and out.err == ""
    assert "no CUDA GPU here" in out.out and "nothing was measured" in out.out
    assert bench_kernels.run_kernels_benchmark(as_json=True, record=True, quick=False) == 0
    assert capsys.readouterr().out.count("\n") == 1
    assert reference.available() == []


def test_missing_cupy_exits_1_with_the_install_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)
    assert bench_kernels.run_kernels_benchmark(quick=True) == 1
    assert "pip install cupy-cuda12x" in capsys.readouterr().err


def test_record_with_quick_is_refused() -> None:
    with pytest.raises(ValueError, match="--record cannot be combined with --quick"):
        bench_kernels.run_kernels_benchmark(record=True, quick=True)


def test_importing_the_benchmark_imports_no_framework() -> None:
    code = "import labkit.cli.bench.kernels, sys, json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout.splitlines()[-1]))
    assert not loaded & {"cupy", "torch", "kernel_tuner", "matplotlib", "tensorflow"}


def test_learners_are_told_the_right_command() -> None:
    assert reference.record_command("kernels") == "labkit bench kernels --record"


# --------------------------------------------------------------------------- on a fake GPU


def test_quick_run_on_a_fake_gpu(fake_gpu: FakeCupy, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_kernels.run_kernels_benchmark(quick=True) == 0
    out = capsys.readouterr()
    text = out.out
    assert text.startswith("CUDA kernels in CuPy on Fake GPU 9000")
    for name, bar in bench_kernels.BARS:
        assert f"  {name}: " in text and f"(bar {bar:.2f})" in text
    for title in (
        "Strided copy on",
        "Matrix transpose on",
        "SGEMM on",
        "Sum reduction on",
        "Block-size sweep of strided_copy on",
        "Kernel Tuner search of transpose_padded",
    ):
        assert title in text, title
    assert "Failed (each part" not in text and "--quick: toy sizes" in text
    assert "labkit bench kernels: stride sweep..." in out.err  # progress goes to stderr
    assert reference.available() == []  # nothing recorded without --record


def test_json_run_and_bars(fake_gpu: FakeCupy, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_kernels.run_kernels_benchmark(as_json=True, quick=True) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["benchmark"] == "kernels" and data["device"] == "Fake GPU 9000"
    assert [b["name"] for b in data["bars"]] == [name for name, _ in bench_kernels.BARS]
    assert all(b["fraction"] is not None and b["verdict"] in ("PASS", "MISS") for b in data["bars"])
    assert set(data["experiments"]) == {
        "stride sweep",
        "transposes",
        "reductions",
        "sgemm",
        "block sizes",
    }
    assert data["bars"][1]["detail"] in ("padded", "padded 32x16")
    assert data["errors"] == {} and data["recorded"] is None
    assert set(data["tuning"]) == {"transpose", "sgemm"}


def test_one_failing_part_does_not_stop_the_others(
    fake_gpu: FakeCupy, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_gpu.break_kernel = "sgemm_tiled"
    assert bench_kernels.run_kernels_benchmark(quick=True) == 0
    text = capsys.readouterr().out
    assert (
        "Failed (each part runs on its own):\n  sgemm: WrongResultError: sgemm_tiled gave a wrong result"
        in text
    )
    assert (
        "tiled SGEMM / cuBLAS FP32: -- (bar 0.50) NOT MEASURED (sgemm failed: WrongResultError"
        in text
    )
    assert "Sum reduction on Fake GPU 9000" in text and "Block-size sweep" in text


@needs_kernel_tuner
def test_record_writes_the_recording_and_the_tuner_caches(
    fake_gpu: FakeCupy,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    _private_reference_dir: Path,
) -> None:
    from labkit.machine import reference

    monkeypatch.setattr(
        reference,
        "gpu_identity",
        lambda: {"gpu_name": "Fake GPU 9000", "driver": None, "cuda": None, "torch": None},
    )
    real_measure = bench_kernels.measure
    monkeypatch.setattr(bench_kernels, "measure", lambda quick=False: real_measure(quick=True))
    assert bench_kernels.run_kernels_benchmark(record=True) == 0
    out = capsys.readouterr()
    assert "Recorded the GPU results to" in out.out
    recording = reference.load("kernels")
    assert recording is not None and recording.gpu == "Fake GPU 9000"
    summary = recording.results["summary"]
    assert summary[0].startswith("Fake GPU 9000: strided copy, stride 1 / device copy: ")
    assert any(line.startswith("Kernel Tuner search of transpose_padded") for line in summary)
    assert reference.available() == ["kernels"]  # the caches are not mistaken for recordings
    for kernel in ("transpose", "sgemm"):
        cache = _private_reference_dir / f"kernel_tuner_{kernel}.cache.json"
        assert cache.is_file(), kernel
        assert tuning.replay(kernel=kernel, use_kernel_tuner=False).recorded is not None
    assert "recorded the Kernel Tuner cache of transpose" in out.err


@needs_kernel_tuner
def test_sgemm_tuning_is_skipped_when_time_is_short(
    fake_gpu: FakeCupy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench_kernels, "SGEMM_TUNING_DEADLINE_S", -1.0)
    monkeypatch.setattr(experiments, "DEFAULT_ARRAY_BYTES", 1 << 16)  # keep the full-size path tiny
    monkeypatch.setattr(bench_kernels, "SGEMM_N", 128)
    monkeypatch.setattr(bench_kernels, "FULL_BUDGET", {"warmup_ms": 0.0, "rep_ms": 0.5})
    result, caches = bench_kernels.measure(quick=False)
    assert set(caches) == {"transpose"}
    assert any("SGEMM search was skipped" in note for note in result.tuning_notes)


def test_bench_constants_are_valid() -> None:
    for config in bench_kernels.SGEMM_TILED_CONFIGS:
        assert cupy_run.sgemm_tiled_problems(**config) == []
        assert (
            bench_kernels.SGEMM_N % config["BM"] == 0 and bench_kernels.SGEMM_N % config["BK"] == 0
        )
    for tile, rows in bench_kernels.PADDED_CONFIGS:
        cupy_run_.check_tile(tile, rows)
    quick = bench_kernels._QUICK_SGEMM_PARAMS
    assert all(
        bench_kernels.QUICK_SGEMM_N % v == 0 for key in ("BM", "BN", "BK") for v in quick[key]
    )


def test_notebook_07_states_the_sgemm_search_deadline() -> None:
    """07 md 30 tells the learner when the recorder skips the SGEMM search (review round 6)."""
    notebook = json.loads(
        (Path(__file__).parent.parent / "notebooks" / "07_kernel_tuning.ipynb").read_text()
    )
    text = "".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "markdown")
    assert f"once the run has taken {bench_kernels.SGEMM_TUNING_DEADLINE_S:g} s" in text


def test_notebook_07_states_the_tuning_sizes() -> None:
    """07 md 30 names the sizes the recorder tunes at (review round 11)."""
    notebook = json.loads(
        (Path(__file__).parent.parent / "notebooks" / "07_kernel_tuning.ipynb").read_text()
    )
    text = "".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "markdown")
    assert (
        f"at n = {bench_kernels.TUNE_TRANSPOSE_N} for the transpose and "
        f"{bench_kernels.TUNE_SGEMM_N} for the SGEMM"
    ) in text
