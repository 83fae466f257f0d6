"""``labkit bench attention``: a quick run on this CPU, the refusals, the GPU recording with fakes.

The quick runs check structure only (their numbers mean nothing). The summary
and the recording are checked on made-up sweeps, built from labkit's own
result classes, so that every number a line prints can be worked out here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from labkit.cli.bench import attention as bench_attention  # noqa: E402
from labkit.cli.main import main  # noqa: E402
from labkit.machine import gpu, reference  # noqa: E402
from labkit.transformers.config import GPTConfig  # noqa: E402
from labkit.transformers.decode import DecodePoint, DecodeSweep  # noqa: E402
from labkit.transformers.sdpa import SdpaRun, SdpaSweep  # noqa: E402

run = bench_attention.run_attention_benchmark
MiB = 1 << 20


@pytest.fixture(autouse=True)
def _private_reference_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    folder = tmp_path / "reference"
    monkeypatch.setenv(reference.ENV_VAR, str(folder))
    monkeypatch.setenv("LABKIT_PROGRESS", "0")
    return folder


def test_importing_the_module_imports_no_framework() -> None:
    code = "import labkit.cli.bench.attention, sys, json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout.splitlines()[-1]))
    assert not loaded & {"torch", "matplotlib", "tensorflow", "cupy"}


def test_learners_are_told_the_right_command() -> None:
    assert reference.record_command("attention") == "labkit bench attention --record"


# --------------------------------------------------------------------------- quick runs here


def test_quick_json(capsys: pytest.CaptureFixture[str], _private_reference_dir: Path) -> None:
    assert main(["bench", "attention", "--quick", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["benchmark"] == "attention" and data["quick"] is True and data["recorded"] is None
    assert data["device"] == ("cuda" if gpu.has_gpu() else "cpu") and data["failed"] == []
    sdpa, decode = data["sdpa"], data["decode"]
    assert sdpa["seq_lens"] == [64, 128] and sdpa["left_out_seq_lens"] == []
    ran = {r["backend"] for r in sdpa["runs"]}
    assert "math" in ran and ran | set(sdpa["missing"]) == {"math", "flash", "efficient", "cudnn"}
    for r in sdpa["runs"]:
        assert r["median_ms"] > 0 and r["peak_bytes"] >= 0 and r["score_bytes"] > 0
    assert [p["batch"] for p in decode["points"]] == [1, 2] and decode["prompt"] == 8
    assert decode["config"]["d_model"] == 32 and decode["bandwidth_gb_per_s"] is None
    assert all(p["tokens_per_s"] > 0 for p in decode["points"])
    summary = data["summary"]
    assert summary and all(isinstance(line, str) for line in summary)
    assert summary[-1].startswith("(--quick")
    assert any(" at N = 128: " in line for line in summary)
    assert any("tokens/s by batch: 1 → " in line for line in summary)
    assert not _private_reference_dir.exists()


def test_quick_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "attention", "--quick"]) == 0
    out = capsys.readouterr().out
    device = "cuda" if gpu.has_gpu() else "cpu"
    assert out.startswith(f"causal attention on {device}, ")
    assert f"\ndecode on {device}, " in out and "tokens/s" in out
    assert out.rstrip().endswith("the numbers mean little)")


def test_a_failing_part_keeps_the_other(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError("no attention today")

    monkeypatch.setattr("labkit.transformers.sdpa.sdpa_sweep", broken)
    results = bench_attention.measure(quick=True)
    assert results.sdpa is None and results.decode is not None and results.measured
    assert results.failed == (
        ("scaled_dot_product_attention sweep", "RuntimeError: no attention today"),
    )
    assert f"{results.device}: scaled_dot_product_attention sweep: not measured (Runtime" in (
        "\n".join(results.summary())
    )
    err = capsys.readouterr().err
    assert "labkit bench attention: sdpa failed:" in err and "Traceback" in err


# --------------------------------------------------------------------------- refusals


def test_record_without_a_gpu_writes_and_measures_nothing(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    _private_reference_dir: Path,
) -> None:
    monkeypatch.setattr(gpu, "has_gpu", lambda: False)
    monkeypatch.setattr(bench_attention, "measure", lambda **kw: pytest.fail("measured"))
    assert main(["bench", "attention", "--record"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "needs a CUDA GPU" in out and "nothing was recorded" in out
    assert not _private_reference_dir.exists()


def test_record_with_quick_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "attention", "--quick", "--record"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("labkit: error: --record cannot be combined with --quick")


def test_missing_torch_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    assert run() == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert "torch is not installed" in captured.err


def test_lengths_over_the_budget_are_left_out_but_the_smallest_is_kept() -> None:
    fit = bench_attention.lengths_that_fit
    # 3 × 1 × 16 × N² × 4 bytes (computed in float32): 768 MiB at 2,048, 3 GiB at 4,096
    assert fit((4096, 1024, 2048), batch=1, heads=16, budget=1024 * MiB) == (
        (1024, 2048),
        (4096,),
    )
    assert fit((2048, 4096), batch=1, heads=16, budget=MiB) == ((2048,), (4096,))


# --------------------------------------------------------------------------- the GPU path, faked


def fake_sdpa() -> SdpaSweep:
    runs = (
        SdpaRun("math", 1024, 0.5, 1, 1.0, 1.0, 80 * MiB),
        SdpaRun("flash", 1024, 0.1, 5, 4.5, 5.5, 2 * MiB),
        SdpaRun("efficient", 1024, 0.2, 2.5, 2.4, 2.6, 3 * MiB),
        SdpaRun("math", 4096, 8.0, 1, 1.0, 1.0, 1280 * MiB),
        SdpaRun("flash", 4096, 1.0, 8, 7.5, 8.5, 8 * MiB),
        SdpaRun("efficient", 4096, 1.25, 6.4, 6.0, 6.8, 12 * MiB),
    )
    return SdpaSweep("cuda", "bfloat16", 1, 16, 64, runs, {"cudnn": "not built with cuDNN"})


def fake_decode() -> DecodeSweep:
    config = GPTConfig(vocab=256, context=256, layers=6, heads=12, d_model=768)
    points = (
        DecodePoint(batch=1, median_ms=0.5, bytes_per_step=100_000_000, flops_per_step=80_000_000),
        DecodePoint(
            batch=256, median_ms=0.8, bytes_per_step=160_000_000, flops_per_step=20_480_000_000
        ),
    )
    return DecodeSweep(config, "bfloat16", "cuda", 32, 86_000_000, points)


def fake_results(**changes: Any) -> bench_attention.AttentionResults:
    fields: dict[str, Any] = {
        "device": "cuda",
        "sdpa": fake_sdpa(),
        "decode": fake_decode(),
        "left_out": (16384,),
        "budget_bytes": 35 << 30,
    }
    return bench_attention.AttentionResults(**{**fields, **changes})


def test_fake_summary_is_built_from_the_numbers() -> None:
    summary = fake_results().summary()
    assert summary[0] == (
        "cuda: causal attention (scaled_dot_product_attention), bfloat16, batch 1, 16 heads of "
        "64; peak = the most bytes the call allocated at once, beyond q, k and v"
    )
    # the fastest fused backend against math: 0.5 / 0.1 ms, 80 / 2 MiB; scores 16 × 1024² × 2
    assert summary[1] == (
        "cuda: flash at N = 1,024 (the fastest fused backend here): 100 µs, 2 MiB peak; math "
        "500 µs, 80 MiB peak (flash 5.00× as fast, the median of the rounds (4.50× to 5.50×); 40.00× the memory; "
        "the N×N scores alone are 32 MiB)"
    )
    assert summary[2] == (
        "cuda: flash at N = 4,096 (the fastest fused backend here): 1.00 ms, 8 MiB peak; math "
        "8.00 ms, 1.25 GiB peak (flash 8.00× as fast, the median of the rounds (7.50× to 8.50×); 160.00× the memory; "
        "the N×N scores alone are 512 MiB)"
    )
    assert summary[3] == (
        "cuda: from N = 1,024 to 4,096 (4.00× longer; N² grew 16.00×): math's time grew "
        "16.00×, its peak 16.00×; flash's time grew 10.00×, its peak 4.00×; efficient's time "
        "grew 6.25×, its peak 4.00×"
    )
    assert summary[4] == (
        "cuda: every backend at N = 4,096: math 8.00 ms, 1.25 GiB peak; flash 1.00 ms, 8 MiB "
        "peak; efficient 1.25 ms, 12 MiB peak"
    )
    assert summary[5] == (
        "cuda: N = 16,384 left out: the math backend's scores and softmax would exceed "
        "labkit's memory budget (35 GiB)"
    )
    assert summary[6] == "cuda: cudnn: not available here (not built with cuDNN)"
    assert summary[7] == (
        "cuda: decode, bfloat16, 6 layers of 768 (82.0 MiB of parameters), one new token per "
        "sequence after a 32-token prompt"
    )
    # batch / (ms / 1000): 1 / 0.0005 s and 256 / 0.0008 s
    assert summary[8] == "cuda: tokens/s by batch: 1 → 2,000; 256 → 320,000"
    assert summary[9] == (
        "cuda: batch 256 against batch 1: 160.00× the tokens/s for 256.00× the sequences; a "
        "step takes 800 µs against 500 µs (1.60× as long); FLOP/byte 0.8 → 128"
    )
    assert len(summary) == 10


def test_the_numbers_move_the_lines() -> None:
    """The same sweep with math twice as slow: the times and the per-round ratios printed double."""
    import dataclasses

    sweep = fake_sdpa()
    slower = tuple(
        dataclasses.replace(r, median_ms=2 * r.median_ms)
        if r.backend == "math"
        else dataclasses.replace(
            r, ratio=2 * r.ratio, ratio_low=2 * r.ratio_low, ratio_high=2 * r.ratio_high
        )
        for r in sweep.runs
    )
    lines = bench_attention.sdpa_lines(dataclasses.replace(sweep, runs=slower))
    assert "math 1.00 ms, 80 MiB peak (flash 10.00× as fast" in lines[1]
    assert "(9.00× to 11.00×)" in lines[1]


def test_a_bandwidth_adds_the_ceiling_and_a_lone_math_backend_still_reads() -> None:
    import dataclasses

    decode = dataclasses.replace(fake_decode(), bandwidth_gb_per_s=400.0)
    # the ceiling: batch × 400e9 / bytes; 4,000 and 640,000 tokens/s
    assert bench_attention.decode_lines(decode)[-1] == (
        "cuda: measured / ceiling at 400 GB/s: batch 1 0.50, batch 256 0.50"
    )
    math_only = dataclasses.replace(
        fake_sdpa(), runs=(SdpaRun("math", 1024, 0.5, 1, 1.0, 1.0, 80 * MiB),)
    )
    assert bench_attention.sdpa_lines(math_only)[1] == (
        "cuda: math at N = 1,024: 500 µs, 80 MiB peak (the N×N scores alone are 32 MiB); "
        "no fused backend ran"
    )


def test_record_with_a_gpu_stores_a_recording_learners_can_read(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(gpu, "has_gpu", lambda: True)
    monkeypatch.setattr(bench_attention, "measure", lambda quick=False: fake_results())
    monkeypatch.setattr(
        reference,
        "gpu_identity",
        lambda: {"gpu_name": "Test GPU", "driver": "1.0", "cuda": "12.4", "torch": "2.13.0"},
    )
    assert run(record=True) == 0
    assert "Recorded the GPU results to" in capsys.readouterr().out
    saved = reference.load("attention")
    assert saved is not None and saved.gpu == "Test GPU"
    results = saved.results
    assert results["summary"] == fake_results().summary()
    assert results["sdpa"]["seq_lens"] == [1024, 4096]
    assert results["sdpa"]["left_out_seq_lens"] == [16384]
    assert results["sdpa"]["runs"][3] == {
        "backend": "math",
        "seq_len": 4096,
        "median_ms": 8.0,
        "ratio_low": 1.0,
        "ratio_high": 1.0,
        "peak_bytes": 1280 * MiB,
        "score_bytes": 512 * MiB,
    }
    assert results["decode"]["points"][1]["tokens_per_s"] == pytest.approx(320_000)
    assert results["decode"]["config"]["layers"] == 6 and results["failed"] == []


def test_one_failed_part_is_recorded_with_its_line_and_none_records_nothing(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    _private_reference_dir: Path,
) -> None:
    monkeypatch.setattr(gpu, "has_gpu", lambda: True)
    monkeypatch.setattr(
        reference,
        "gpu_identity",
        lambda: {"gpu_name": "Test GPU", "driver": "1.0", "cuda": "12.4", "torch": "2.13.0"},
    )
    half = fake_results(decode=None, failed=(("decode sweep", "RuntimeError: boom"),))
    monkeypatch.setattr(bench_attention, "measure", lambda quick=False: half)
    assert run(record=True, as_json=True) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["decode"] is None and data["recorded"] is not None
    assert data["summary"][-1] == "cuda: decode sweep: not measured (RuntimeError: boom)"

    (_private_reference_dir / "attention.json").unlink()
    nothing = fake_results(sdpa=None, decode=None, failed=(("decode sweep", "boom"),))
    monkeypatch.setattr(bench_attention, "measure", lambda quick=False: nothing)
    assert run(record=True) == 1
    assert "every part failed, so nothing was recorded" in capsys.readouterr().err
    assert not (_private_reference_dir / "attention.json").exists()
