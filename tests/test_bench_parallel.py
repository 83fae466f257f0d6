"""``labkit bench parallel``: quick runs on this CPU, and the GPU recording path with fakes.

The quick runs check structure only (toy sizes measure nothing worth
asserting); the recording is made by the real recording code from made-up
sweeps, since the machine running the tests usually has no GPU.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.cli.bench import parallel as bench_parallel
from labkit.cli.main import main
from labkit.machine import gpu, reference
from labkit.parallelism import sweep as parallel
from labkit.parallelism.crossover import LaunchOverhead
from labkit.timing.bench import Timing

pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _private_reference_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    folder = tmp_path / "reference"
    monkeypatch.setenv(reference.ENV_VAR, str(folder))
    monkeypatch.setenv("LABKIT_PROGRESS", "0")
    return folder


def test_importing_the_module_imports_no_framework() -> None:
    code = (
        "import labkit.cli.bench.parallel, labkit.cli.bench.roofline, sys, json; "
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout.splitlines()[-1]))
    assert not loaded & {"torch", "numpy", "matplotlib", "tensorflow", "cupy"}


# --------------------------------------------------------------------------- quick runs here


def test_quick_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "parallel", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "a + b (float32), throughput by size" in out
    assert "n×n matmul (float32), throughput by size" in out
    assert "Summary:" in out and "--quick: toy sizes" in out
    if not gpu.has_gpu():
        assert "GPU launch overhead and crossover: not measured (no CUDA GPU here" in out


def test_quick_json(capsys: pytest.CaptureFixture[str], _private_reference_dir: Path) -> None:
    assert main(["bench", "parallel", "--quick", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["benchmark"] == "parallel" and data["quick"] is True
    assert data["recorded"] is None and all(isinstance(s, str) for s in data["summary"])
    for op, sizes in bench_parallel.QUICK_SIZES.items():
        sweep = data[op]
        assert sweep["op"] == op and sweep["sizes"] == list(sizes)
        numpy = sweep["backends"]["numpy"]
        assert [size for size, _ in numpy["points"]] == list(sizes)
        assert all(ms > 0 for _, ms in numpy["points"])
    if not gpu.has_gpu():
        assert data["launch_overhead"] is None
        assert data["crossover_n"] == {"add": None, "matmul": None}
        assert "torch-cuda" not in data["add"]["backends"]
    assert not _private_reference_dir.exists()


# --------------------------------------------------------------------------- refusals


def test_learners_are_told_the_right_command_to_make_the_recording(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert reference.record_command(bench_parallel.REFERENCE_NAME) == (
        "labkit bench parallel --record"
    )
    monkeypatch.setattr(gpu, "has_gpu", lambda: False)
    lines = gpu.no_gpu_lines("the crossover", reference=bench_parallel.REFERENCE_NAME)
    assert lines[-1].endswith("make one on a GPU machine with: labkit bench parallel --record")


def test_record_without_a_gpu_writes_and_measures_nothing(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    _private_reference_dir: Path,
) -> None:
    monkeypatch.setattr(gpu, "has_gpu", lambda: False)
    monkeypatch.setattr(bench_parallel, "measure", lambda **kw: pytest.fail("measured"))
    assert main(["bench", "parallel", "--record"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "needs a CUDA GPU" in out and "nothing was recorded" in out
    assert not _private_reference_dir.exists() or list(_private_reference_dir.iterdir()) == []


def test_record_with_quick_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "parallel", "--record", "--quick"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("labkit: error: --record cannot be combined with --quick")


def test_missing_torch_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # how Python marks a module as missing
    assert main(["bench", "parallel", "--quick"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert "torch is not installed" in captured.err and "pip install torch" in captured.err


def test_bad_flag_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["bench", "parallel", "--fast"])
    assert info.value.code == 2 and capsys.readouterr().err.startswith("labkit: error:")


# --------------------------------------------------------------------------- the GPU path, faked


def _backend(op: str, key: str, label: str, ms_by_size: dict[int, float]) -> parallel.BackendSweep:
    points = tuple(parallel._point(op, size, Timing((ms,))) for size, ms in ms_by_size.items())
    return parallel.BackendSweep(
        backend=key, label=label, device="cuda" if key == "torch-cuda" else "cpu", points=points
    )


def fake_results() -> bench_parallel.ParallelResults:
    """Made-up sweeps where the GPU wins add from n = 1000 and matmul from n = 64."""
    add_sizes, mm_sizes = (10, 100, 1000, 10_000), (16, 64, 256)
    add = parallel.SizeSweep(
        "add",
        "float32",
        add_sizes,
        (
            _backend("add", "numpy", "NumPy", {s: 1e-4 + s * 5e-6 for s in add_sizes}),
            _backend(
                "add", "torch-all-threads", "torch, 8 threads", {s: s * 1e-5 for s in add_sizes}
            ),
            _backend("add", "torch-cuda", "torch, CUDA", {s: 0.01 for s in add_sizes}),
        ),
    )
    matmul = parallel.SizeSweep(
        "matmul",
        "float32",
        mm_sizes,
        (
            _backend(
                "matmul", "torch-all-threads", "torch, 8 threads", {16: 0.001, 64: 0.1, 256: 1.0}
            ),
            _backend("matmul", "torch-cuda", "torch, CUDA", {16: 0.01, 64: 0.01, 256: 0.02}),
        ),
    )
    launch = LaunchOverhead(
        device="cuda:0",
        kernel_us=4.5,
        round_trip_us=12.0,
        kernel=Timing((0.0045,)),
        round_trip=Timing((0.012,)),
    )
    return bench_parallel.ParallelResults(add=add, matmul=matmul, launch=launch)


def test_summary_of_made_up_sweeps() -> None:
    results = fake_results()
    assert results.crossover_n("add") == pytest.approx(1000)
    lines = results.summary()
    assert lines[0].startswith("GPU launch overhead on cuda:0: 4.50 µs per kernel")
    assert lines[1] == (
        "a + b (float32): the GPU is faster than the CPU (torch, 8 threads) from n ≈ 1,000 on"
    )
    assert lines[2].startswith("n×n matmul (float32): the GPU is faster than the CPU")
    assert lines[3] == (
        "a + b (float32) peak: torch, CUDA 1.00 G elements/s at n = 10,000; "
        "NumPy 200 M elements/s at n = 10,000"
    )
    assert lines[4].startswith("n×n matmul (float32) peak: torch, CUDA 1.68 TFLOP/s at n = 256; ")
    text = str(results)
    assert "The GPU is faster than the CPU (all threads) from n ≈ 1,000 on." in text
    assert text.endswith("\n".join(["Summary:", *(f"  {line}" for line in lines)]))
    with pytest.raises(ValueError, match="op must be 'add' or 'matmul'"):
        results.crossover_n("conv")


def test_record_with_a_gpu_stores_a_recording_learners_can_read(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import labkit.machine.reference

    monkeypatch.setattr(gpu, "has_gpu", lambda: True)
    monkeypatch.setattr(bench_parallel, "measure", lambda quick=False: fake_results())
    monkeypatch.setattr(
        labkit.machine.reference,
        "gpu_identity",
        lambda: {"gpu_name": "Test GPU", "driver": "1.0", "cuda": "12.4", "torch": "2.13.0"},
    )
    assert main(["bench", "parallel", "--record", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    saved = reference.load("parallelism")
    assert saved is not None and saved.gpu == "Test GPU"
    assert printed["recorded"] == str(saved.path)
    summary = saved.results["summary"]
    assert summary and all(isinstance(line, str) for line in summary)
    assert summary == fake_results().summary()
    assert saved.results["launch_overhead"] == {
        "device": "cuda:0",
        "kernel_us": 4.5,
        "round_trip_us": 12.0,
    }
    assert saved.results["crossover_n"]["add"] == pytest.approx(1000)
    assert saved.results["matmul"]["backends"]["torch-cuda"]["points"] == [
        [16, 0.01],
        [64, 0.01],
        [256, 0.02],
    ]
    monkeypatch.setattr(gpu, "has_gpu", lambda: False)
    lines = gpu.no_gpu_lines("the CPU/GPU crossover", reference="parallelism")
    assert lines[1].startswith("Result recorded on Test GPU on ")
    assert lines[2] == f"  {summary[0]}"
