"""``labkit bench roofline``: quick runs on this CPU, and the GPU recording path with fakes.

Quick runs check structure only: toy sizes on a shared CPU say nothing
reliable about its roofs. The recording is made by the real recording code
from made-up measurements.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from labkit.bandwidth.stream import BandwidthResult, stream_bytes
from labkit.cli.bench import roofline as bench_roofline
from labkit.cli.main import main
from labkit.machine import gpu, memory, reference
from labkit.roofline import model as roofline
from labkit.roofline.measure import OpMeasurement, PeakCompute
from labkit.timing.bench import Timing

pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _private_reference_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    folder = tmp_path / "reference"
    monkeypatch.setenv(reference.ENV_VAR, str(folder))
    monkeypatch.setenv("LABKIT_PROGRESS", "0")
    return folder


# --------------------------------------------------------------------------- the op set


def test_standard_ops_per_device() -> None:
    cpu = [s.op.name for s in bench_roofline.standard_ops(on_gpu=False)]
    assert cpu == [
        "add 67,108,864",
        "sum 67,108,864",
        "matmul 256×256 @ 256×256",
        "matmul 1024×1024 @ 1024×1024",
        "conv2d 32×64×56×56 * 64×64×3×3 (stride 1, padding 1)",
    ]
    on_gpu = bench_roofline.standard_ops(on_gpu=True)
    assert [(s.op.dtype, s.roof_dtype, s.tf32) for s in on_gpu[-3:]] == [
        ("float32", "tf32", True),
        ("bfloat16", "bfloat16", False),
        ("float16", "float16", False),
    ]
    assert all(s.op.dim("n") == 4096 for s in on_gpu[-3:])
    assert "matmul 4096×4096 @ 4096×4096" in [
        s.op.name for s in on_gpu if s.roof_dtype == "float32"
    ]
    quick = bench_roofline.standard_ops(on_gpu=False, quick=True)
    assert max(s.op.bytes for s in quick) < 2**20


# --------------------------------------------------------------------------- quick runs here


def test_quick_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "roofline", "--quick"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Roofline of cpu: memory roof ")
    assert "float32: compute roof" in out and "add 65,536" in out
    for word in ("FLOP/byte", "achieved", "attainable", "share", "bound"):
        assert word in out
    assert "--quick: toy sizes" in out and "not measured" not in out


def test_quick_json(capsys: pytest.CaptureFixture[str], _private_reference_dir: Path) -> None:
    assert main(["bench", "roofline", "--quick", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["benchmark"] == "roofline" and data["quick"] is True and data["recorded"] is None
    cpu = data["devices"][0]
    assert cpu["device"] == "cpu" and set(cpu["peak_gflop_per_s"]) == {"float32"}
    assert cpu["peak_gb_per_s"] > 0 and cpu["failed"] == []
    assert len(cpu["ops"]) == len(bench_roofline.standard_ops(on_gpu=False, quick=True))
    for op in cpu["ops"]:
        assert op["ai"] == pytest.approx(op["flops"] / op["bytes"])
        assert op["bound"] in (roofline.MEMORY_BOUND, roofline.COMPUTE_BOUND)
        assert op["fraction_of_attainable"] == pytest.approx(
            op["gflop_per_s"] / op["attainable_gflop_per_s"]
        )
    assert all(isinstance(line, str) for line in data["summary"])
    assert len(data["devices"]) == (2 if gpu.has_gpu() else 1)
    assert not _private_reference_dir.exists()


def test_an_op_that_fails_is_reported_and_the_rest_go_on(monkeypatch: pytest.MonkeyPatch) -> None:
    real = memory.require_fits

    def refuse_sums(requested_bytes: int, **kw: object) -> int:
        if "sum" in str(kw.get("what")):
            raise memory.MemoryBudgetError("pretend the sum does not fit")
        return real(requested_bytes, **kw)

    monkeypatch.setattr(memory, "require_fits", refuse_sums)
    result = bench_roofline.measure_device("cpu", quick=True)
    assert result.failed == (("sum 65,536", "MemoryBudgetError: pretend the sum does not fit"),)
    assert [p.measurement.op.kind for p in result.ops] == ["add", "matmul", "matmul", "conv2d"]
    assert "sum 65,536: not measured (MemoryBudgetError" in str(result)


# --------------------------------------------------------------------------- refusals


def test_learners_are_told_the_right_command_to_make_the_recording() -> None:
    assert reference.record_command(bench_roofline.REFERENCE_NAME) == (
        "labkit bench roofline --record"
    )


def test_record_without_a_gpu_writes_and_measures_nothing(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    _private_reference_dir: Path,
) -> None:
    monkeypatch.setattr(gpu, "has_gpu", lambda: False)
    monkeypatch.setattr(bench_roofline, "measure", lambda **kw: pytest.fail("measured"))
    assert main(["bench", "roofline", "--record"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "needs a CUDA GPU" in out and "nothing was recorded" in out
    assert not _private_reference_dir.exists() or list(_private_reference_dir.iterdir()) == []


def test_record_with_quick_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "roofline", "--quick", "--record"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("labkit: error: --record cannot be combined with --quick")


def test_missing_torch_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    assert main(["bench", "roofline"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert "torch is not installed" in captured.err and "pip install torch" in captured.err


# --------------------------------------------------------------------------- the GPU path, faked


def _peak(dtype: str, gflop_per_s: float, n: int = 8192) -> PeakCompute:
    ms = 2 * n**3 / (gflop_per_s * 1e9) * 1e3
    return PeakCompute(
        dtype=dtype,
        device="cuda",
        gflop_per_s=gflop_per_s,
        size=n,
        sizes=(n,),
        timings=(Timing((ms,)),),
    )


def fake_gpu_roofline() -> bench_roofline.DeviceRoofline:
    """A made-up GPU: 4000 GB/s, 50 TFLOP/s float32, 800 TFLOP/s bfloat16."""
    peaks = {"float32": _peak("float32", 50_000.0), "bfloat16": _peak("bfloat16", 800_000.0)}
    n = 2**28 // 8
    memory_row = BandwidthResult(
        kernel="copy",
        device="cuda",
        dtype="float64",
        n_elements=n,
        bytes_per_array=8 * n,
        bytes_per_call=stream_bytes("copy", n),
        calls_per_sample=1,
        timing=Timing((stream_bytes("copy", n) / 4e9,)),
        implementation="a.copy_(b)",
    )
    line = roofline.Roofline("cuda", {d: p.gflop_per_s for d, p in peaks.items()}, 4000.0)
    placed = []
    for cost, dtype, ms in (
        (roofline.add_cost(2**26), "float32", 0.0604),
        (roofline.matmul_cost(4096, 4096, 4096, "bfloat16"), "bfloat16", 0.25),
    ):
        measured = OpMeasurement(
            op=cost,
            device="cuda",
            median_ms=ms,
            gflop_per_s=cost.flops / ms / 1e6,
            gb_per_s=cost.bytes / ms / 1e6,
            timing=Timing((ms,)),
        )
        placed.append(
            bench_roofline.PlacedOp(
                measurement=measured,
                roof_dtype=dtype,
                attainable_gflop_per_s=line.attainable_gflop_per_s(
                    cost.arithmetic_intensity, dtype
                ),
                bound=line.bound(cost, dtype),
            )
        )
    return bench_roofline.DeviceRoofline(
        roofline=line,
        peaks=peaks,
        memory=memory_row,
        ops=tuple(placed),
        failed=(("conv2d x", "RuntimeError: pretend cuDNN failed"),),
    )


def test_summary_of_a_made_up_gpu() -> None:
    lines = fake_gpu_roofline().summary()
    assert lines[0] == "cuda: memory roof 4000 GB/s (best of copy and triad, 256 MiB per array)"
    assert lines[1] == (
        "cuda: float32 compute roof 50.0 TFLOP/s (matmul n = 8192), ridge point 12.5 FLOP/byte"
    )
    assert lines[3] == (
        "cuda: add 67,108,864 (float32): 0.0833 FLOP/byte, 1.11 TFLOP/s = 333% of "
        "the 333 GFLOP/s attainable (float32 roof): memory-bound (above its roof: "
        "the data came from cache, or the roof run was disturbed)"
    )
    assert lines[4].startswith(
        "cuda: matmul 4096×4096 @ 4096×4096 (bfloat16): 1365 FLOP/byte, "
        "550 TFLOP/s = 69% of the 800 TFLOP/s attainable"
    )
    assert lines[4].endswith("compute-bound")
    assert lines[5] == "cuda: conv2d x: not measured (RuntimeError: pretend cuDNN failed)"


def test_record_with_a_gpu_stores_a_recording_learners_can_read(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import labkit.machine.reference

    monkeypatch.setattr(gpu, "has_gpu", lambda: True)
    monkeypatch.setattr(bench_roofline, "measure", lambda quick=False: [fake_gpu_roofline()])
    monkeypatch.setattr(
        labkit.machine.reference,
        "gpu_identity",
        lambda: {"gpu_name": "Test GPU", "driver": "1.0", "cuda": "12.4", "torch": "2.13.0"},
    )
    assert main(["bench", "roofline", "--record"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Roofline of cuda: memory roof 4000 GB/s")
    assert "Recorded the GPU roofline to" in out
    saved = reference.load("roofline")
    assert saved is not None and saved.gpu == "Test GPU"
    summary = saved.results["summary"]
    assert summary == fake_gpu_roofline().summary()
    assert all(isinstance(line, str) for line in summary)
    results = saved.results
    assert results["peak_gflop_per_s"] == {"float32": 50_000.0, "bfloat16": 800_000.0}
    assert results["peak_gb_per_s"] == pytest.approx(4000.0)
    assert results["ridge_point"]["float32"] == pytest.approx(12.5)
    assert [op["name"] for op in results["ops"]] == [
        "add 67,108,864",
        "matmul 4096×4096 @ 4096×4096",
    ]
    assert results["ops"][1]["ai"] == pytest.approx(2 * 4096 / 6)
    assert results["ops"][1]["gflop_per_s"] == pytest.approx(2 * 4096**3 / 0.25e-3 / 1e9)
    monkeypatch.setattr(gpu, "has_gpu", lambda: False)
    lines = gpu.no_gpu_lines("the GPU's roofline", reference="roofline")
    assert lines[1].startswith("Result recorded on Test GPU on ") and lines[2] == f"  {summary[0]}"
