"""``labkit bench triton`` on a GPU, with made-up results; notebook 12's GPU cell without a GPU.

The GPU run itself needs an NVIDIA GPU (tests/test_triton_kernels.py runs the
kernels compiled there). Here the summary, the recording and what the
notebook prints from it are checked on made-up results built from labkit's
own classes, so that every number a line prints can be worked out by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.cli.bench import triton as bench_triton
from labkit.machine import gpu, reference
from labkit.machine.published import gpu_spec
from labkit.triton_kernels.gpu import GpuResults, GpuTime
from labkit.triton_kernels.gpu_prediction import (
    cuda_c_recorded_lines,
    predict_triton,
    recorded_triton_code,
)
from labkit.triton_kernels.inductor import GeneratedCode
from labkit.triton_kernels.verify import KernelCheck

TRITON_SOURCE = (
    "# kernel path: /tmp/x.py\n"
    "triton_per_fused = async_compile.triton('triton_per_fused', '''\n"
    "@triton.jit\ndef triton_per_fused__softmax_add_mul_0(in_ptr0, out_ptr2, xnumel, r0_numel):\n"
    "    xoffset = tl.program_id(0) * XBLOCK\n''', device_str='cuda')\n"
)


@pytest.fixture(autouse=True)
def _private_reference_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    folder = tmp_path / "reference"
    monkeypatch.setenv(reference.ENV_VAR, str(folder))
    return folder


def fake_results() -> bench_triton.TritonResults:
    gpu_results = GpuResults(
        device="Test GPU",
        times=[
            GpuTime("copy", "triton", "1,024 float32", 0.5, 0.52, bytes_moved=2_000_000_000),
            GpuTime("matmul", "torch", "4,096³ float32", 4.0, 4.1, flops=2 * 4096**3),
        ],
        autotune={"best": {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8}, "timings_ms": []},
        compiled={
            "copy, block 1024": {
                "n_regs": 16,
                "n_spills": 0,
                "ptx_ld_global_v4": 2,
                "ptx_ld_global_v2": 0,
                "ptx_ld_global": 2,
                "ptx_cp_async": 0,
            }
        },
        skipped=["strided copy in CUDA C: CuPy cannot run kernels here"],
    )
    check = KernelCheck("copy", "1", "256", 0.0, 1.0, 0.0, 0.0, 1, 1, 0)
    code = GeneratedCode(
        "cuda", "Triton", ("triton_per_fused__softmax_add_mul_0",), TRITON_SOURCE, False, True
    )
    return bench_triton.TritonResults(
        device="Test GPU",
        setup="Triton 3.9.0: compiled for the GPU (NVIDIA GPU: Test GPU)",
        checks=[check],
        interpreter=None,
        sweep=None,
        gpu=gpu_results,
        inductor=code,
    )


def test_the_summary_prints_rates_worked_out_by_hand() -> None:
    lines = fake_results().summary()
    assert lines[1] == (
        "Test GPU: 1 of 1 kernel checks against torch passed; the largest error relative to "
        "torch's largest element: 0.0e+00"
    )
    # 2 GB in 0.5 ms = 4,000 GB/s; 2 × 4096³ FLOP in 4 ms = 34.4 TFLOP/s
    assert "Test GPU: copy, triton (1,024 float32): 500 µs (do_bench 520 µs), 4,000 GB/s" in lines
    assert (
        "Test GPU: matmul, torch (4,096³ float32): 4.00 ms (do_bench 4.10 ms), 34.4 TFLOP/s"
        in lines
    )
    assert any(line.startswith("Test GPU: triton.autotune chose {'BLOCK_M': 128") for line in lines)
    assert "Test GPU: skipped: strided copy in CUDA C: CuPy cannot run kernels here" in lines
    assert (
        "Test GPU: copy, block 1024: 16 registers per thread, 0 words of local memory; in the "
        "PTX 2 ld.global (2 of 4 values, 0 of 2) and 0 cp.async"
    ) in lines
    assert lines[-1] == "cuda: Inductor wrote 1 Triton kernel: triton_per_fused__softmax_add_mul_0"


def test_a_recording_shows_inductors_triton_code_without_a_gpu(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert recorded_triton_code()[0].startswith("No recording of the Triton code")
    monkeypatch.setattr(gpu, "has_gpu", lambda: True)
    monkeypatch.setattr(bench_triton, "measure", lambda quick=False: fake_results())
    monkeypatch.setattr(
        reference,
        "gpu_identity",
        lambda: {"gpu_name": "Test GPU", "driver": "1.0", "cuda": "12.4", "torch": "2.13.0"},
    )
    assert bench_triton.run_triton_benchmark(record=True) == 0
    assert "Recorded the GPU results to" in capsys.readouterr().out
    saved = reference.load("triton")
    assert saved is not None and saved.results["gpu"]["times"][0]["gb_per_s"] == 4000.0
    code = recorded_triton_code()
    assert code[0].startswith("The Triton kernel Inductor wrote for softmax(2x + 1) on an Test GPU")
    assert code[1:3] == [
        "@triton.jit",
        "def triton_per_fused__softmax_add_mul_0(in_ptr0, out_ptr2, xnumel, r0_numel):",
    ]


def test_a_failed_check_records_nothing(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    _private_reference_dir: Path,
) -> None:
    bad = KernelCheck("copy", "1", "256", 1.0, 1.0, 1.0, 0.0, 1, 1, 0)
    results = fake_results()
    broken = bench_triton.TritonResults(**{**results.__dict__, "checks": [bad]})
    monkeypatch.setattr(gpu, "has_gpu", lambda: True)
    monkeypatch.setattr(bench_triton, "measure", lambda quick=False: broken)
    assert bench_triton.run_triton_benchmark(record=True) == 1
    assert "a kernel check failed, or no kernel was timed" in capsys.readouterr().err
    assert not (_private_reference_dir / "triton.json").exists()


def test_the_prediction_is_the_bytes_and_flops_over_the_sheet() -> None:
    h100 = gpu_spec("H100 SXM5 80GB")
    lines = predict_triton(h100).model
    bandwidth, fp32 = h100.need("memory_gb_per_s"), h100.need("fp32_tflop_per_s")
    floor_us = 2 * 256 * 2**20 / (bandwidth * 1e9) * 1e6
    assert lines[0].startswith("copy of 256 MiB (read once, written once): at least ")
    assert f"{floor_us:.0f} µs" in lines[0] or f"{floor_us:.3g}" in lines[0]
    assert f"stride 8 {2 / 9 * bandwidth:,.0f} GB/s" in lines[2]
    assert f"{2 * 4096**3 / (fp32 * 1e12) * 1e3:.2f} ms" in lines[3]


def test_the_cuda_c_lines_come_from_notebook_07s_recording(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(reference.ENV_VAR)  # the package's own recordings
    lines = cuda_c_recorded_lines()
    if reference.load("kernels") is None:
        assert lines[0].startswith("No recording of notebook 07's CUDA C kernels")
        return
    assert lines[0].startswith("Notebook 07's CUDA C kernels, recorded by this kit on an ")
    assert sum(line.strip().startswith("ceiling, device-to-device copy") for line in lines) == 1
    assert any(line.strip().startswith("stride 8:") for line in lines)
    assert any("cuBLAS SGEMM" in line for line in lines)
    assert lines[-1].startswith("  against the ") and "the device copy reached " in lines[-1]


def test_a_gpu_run_that_timed_nothing_records_nothing() -> None:
    results = fake_results()
    empty = GpuResults(device="Test GPU", skipped=["copies: RuntimeError: boom"])
    nothing = bench_triton.TritonResults(**{**results.__dict__, "gpu": empty})
    assert results.measured and not nothing.measured
    assert "Test GPU: skipped: copies: RuntimeError: boom" in nothing.summary()


def test_compiled_facts_count_the_ptx_loads() -> None:
    from labkit.triton_kernels.gpu import compiled_facts

    class Handle:
        n_regs, n_spills = 40, 0
        asm = {"ptx": "ld.global.v4.b32 {%r1, %r2, %r3, %r4}, [%rd1];\nld.global.b32 %r5, [%rd2];"}

    assert compiled_facts(Handle()) == {
        "n_regs": 40,
        "n_spills": 0,
        "ptx_ld_global_v4": 1,
        "ptx_ld_global_v2": 0,
        "ptx_ld_global": 2,
        "ptx_cp_async": 0,
    }


def test_the_gpu_run_checks_each_variant_with_verifys_rules() -> None:
    torch = pytest.importorskip("torch")
    from labkit.triton_kernels.gpu import _check

    ref = torch.randn(100)
    _check("copy", "triton copy", ref.clone(), ref)  # exact: passes
    with pytest.raises(RuntimeError, match=r"triton copy: .*0 non-zero of 100"):
        _check("copy", "triton copy", torch.zeros(100), ref)
    with pytest.raises(RuntimeError, match=r"SGEMM: .*tolerance 1e-05"):
        _check("matmul", "SGEMM", ref * (1 + 1e-3), ref.double())
