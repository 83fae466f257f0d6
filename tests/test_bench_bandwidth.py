"""``labkit bench bandwidth`` and its compiled C reference, on tiny arrays (fast on any machine)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from labkit.bandwidth import cstream, references, strided, transfers
from labkit.bandwidth.stream import BandwidthResult, stream_bytes
from labkit.cli.bench import bandwidth as bench_bandwidth
from labkit.cli.main import main
from labkit.machine import gpu, reference
from labkit.timing.bench import Timing

KiB, MiB = 1024, 1024**2
TINY = 64 * KiB
needs_cc = pytest.mark.skipif(cstream.find_compiler() is None, reason="no C compiler here")


@pytest.fixture(autouse=True)
def _private_reference_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(reference.ENV_VAR, str(tmp_path / "reference"))


def _row(kernel: str, gb_per_s: float, text: str = "test", device: str = "cpu") -> BandwidthResult:
    n = 1_000_000
    ms = stream_bytes(kernel, n) / (gb_per_s * 1e6)
    return BandwidthResult(
        kernel=kernel,
        device=device,
        dtype="float64",
        n_elements=n,
        bytes_per_array=8 * n,
        bytes_per_call=stream_bytes(kernel, n),
        calls_per_sample=1,
        timing=Timing((ms,)),
        implementation=text,
    )


# --------------------------------------------------------------------------- the C reference


@needs_cc
def test_c_stream_compiles_runs_and_checks_itself(tmp_path: Path) -> None:
    exe, flags = cstream.compile_stream(tmp_path, cstream.find_compiler())
    assert flags[0] == "-O3"
    with cstream.CStream(exe, 4096) as proc:
        assert proc.n_elements == 4096 and proc.threads >= 1
        for kernel in cstream.KERNELS:
            times = proc.run(kernel, 3)
            assert len(times) == 3 and all(t >= 0 for t in times)
        with pytest.raises(ValueError, match="kernel"):
            proc.run("scale", 1)
        with pytest.raises(ValueError, match="reps"):
            proc.run("copy", 0)
    assert proc.valid is True


def _fake_compiler(tmp_path: Path, body: str) -> str:
    path = tmp_path / "fakecc"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


@needs_cc
def test_compile_falls_back_to_fewer_flags(tmp_path: Path) -> None:
    real = cstream.find_compiler()
    picky = _fake_compiler(
        tmp_path,
        'for a in "$@"; do case "$a" in -fopenmp|-march=native) '
        f'echo "unsupported: $a" >&2; exit 1;; esac; done\nexec {real} "$@"',
    )
    exe, flags = cstream.compile_stream(tmp_path, picky)
    # fourth review (R4-02-U4): GCC's no-memcpy switch is kept where the compiler accepts it
    assert flags in (("-O3", cstream.NO_LOOP_TO_MEMCPY), ("-O3",)) and exe.exists()


def test_a_broken_compiler_is_a_clear_error(tmp_path: Path) -> None:
    broken = _fake_compiler(tmp_path, 'echo "stream.c:1: error: nope" >&2; exit 1')
    with pytest.raises(cstream.CStreamError, match="fakecc could not compile stream.c: .*nope"):
        cstream.compile_stream(tmp_path, broken)


def test_no_compiler_skips_the_c_reference_cleanly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(cstream.shutil, "which", lambda name: None)
    assert cstream.find_compiler() is None
    result = bench_bandwidth.run_cpu(max_bytes=TINY, rounds=1)
    assert result.c_reference.status == "skipped"
    assert "no C compiler" in result.c_reference.note
    # NumPy's copy (memmove: may use non-temporal stores) is shown, never the bar
    assert result.references["copy"] == () and result.ratio("copy") is None
    assert result.references["triad"] == () and result.ratio("triad") is None
    assert [r.implementation for r in result.informational] == [references.NUMPY_COPY]
    text = bench_bandwidth.format_cpu(result)
    assert "triad not compared (no reference)" in text and "no C compiler" in text


def test_a_broken_compiler_skips_the_c_reference(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    broken = _fake_compiler(tmp_path, "exit 1")
    monkeypatch.setattr(cstream, "find_compiler", lambda: broken)
    result = bench_bandwidth.run_cpu(max_bytes=TINY, rounds=1)
    assert result.c_reference.status == "skipped" and "could not compile" in result.c_reference.note


def test_a_c_reference_that_crashes_is_skipped_not_fatal(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    dies = _fake_compiler(
        tmp_path,
        """echo '{"ready": true, "n_elements": 8, "threads": 1, '"""
        """'"openmp": false}'; exit 9""",
    )
    monkeypatch.setattr(cstream, "find_compiler", lambda: "/usr/bin/cc")
    monkeypatch.setattr(cstream, "compile_stream", lambda workdir, cc: (Path(dies), ("-O3",)))
    result = bench_bandwidth.run_cpu(max_bytes=TINY, rounds=2)
    assert result.c_reference.status == "skipped" and "stopped" in result.c_reference.note
    assert result.references["triad"] == ()
    assert [r.implementation for r in result.informational] == [references.NUMPY_COPY]
    assert result.labkit["copy"].timing.n == 2 * references.SAMPLES_PER_TURN


# --------------------------------------------------------------------------- the CPU contest


@needs_cc
def test_run_cpu_measures_everyone_on_the_same_arrays() -> None:
    result = bench_bandwidth.run_cpu(max_bytes=TINY, rounds=2)
    assert result.bytes_per_array == TINY and result.c_reference.status == "ok"
    rows = [
        *result.labkit.values(),
        *result.references["copy"],
        *result.references["triad"],
        *result.informational,
    ]
    assert len(rows) == 6
    for row in rows:
        assert row.bytes_per_array == TINY and row.dtype == "float64"
        assert row.timing.n == 2 * references.SAMPLES_PER_TURN  # every round, every turn
    assert result.labkit["triad"].bytes_per_call == 3 * TINY
    assert all(r.bytes_per_call == 2 * TINY for r in result.informational)  # counted like copy
    assert [r.implementation for r in result.references["copy"]][0].startswith("C loop")
    assert result.ratio("copy") == pytest.approx(
        result.labkit["copy"].gb_per_s / result.best_reference("copy").gb_per_s
    )


def test_the_bar() -> None:
    def contest(copy: float, triad: float) -> references.CpuBandwidth:
        return references.CpuBandwidth(
            bytes_per_array=8 * 10**6,
            rounds=1,
            labkit={"copy": _row("copy", copy), "triad": _row("triad", triad)},
            references={
                "copy": (_row("copy", 10.0), _row("copy", 20.0)),
                "triad": (_row("triad", 20.0),),
            },
            c_reference=references.CReference("ok", "compiled with cc -O3"),
        )

    met = contest(19.0, 25.0)
    assert met.ratio("copy") == pytest.approx(0.95) and met.bar_met is True
    assert met.best_reference("copy").gb_per_s == pytest.approx(20.0)
    missed = contest(17.0, 25.0)
    assert missed.ratio("copy") == pytest.approx(0.85) and missed.bar_met is False
    text = bench_bandwidth.format_cpu(missed)
    assert "copy 0.85×" in text and "NOT met" in text


# --------------------------------------------------------------------------- the command line


def test_cli_json_on_a_tiny_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "bandwidth", "--json", "--max-bytes", str(TINY), "--rounds", "1"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["benchmark"] == "bandwidth" and data["dtype"] == "float64"
    cpu = data["cpu"]
    assert cpu["bytes_per_array"] == TINY and cpu["bar"] == 0.9
    assert set(cpu["labkit"]) == {"copy", "triad"}
    assert cpu["labkit"]["copy"]["bytes_per_call"] == 2 * TINY
    assert isinstance(cpu["ratios"]["copy"], float)
    assert data["recorded"] is None
    if not gpu.has_gpu():
        assert data["gpu"] is None


def test_cli_text_on_a_tiny_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "bandwidth", "--max-bytes", str(TINY), "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "labkit (torch): a.copy_(b)" in out and "NumPy np.copyto(a, b)" in out
    assert "labkit / best reference:" in out and "bar: 0.90× or better:" in out


@pytest.mark.parametrize("args", [["--max-bytes", "0"], ["--rounds", "x"], ["--max-bytes"]])
def test_cli_rejects_bad_options(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["bench", "bandwidth", *args])
    assert info.value.code == 2
    assert capsys.readouterr().err.startswith("labkit: error:")


def test_record_without_a_gpu_writes_and_measures_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(gpu, "has_gpu", lambda: False)
    monkeypatch.setattr(bench_bandwidth, "run_cpu", lambda **kw: pytest.fail("measured"))
    assert main(["bench", "bandwidth", "--record"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "needs a CUDA GPU" in out and "nothing was recorded" in out
    assert not Path(os.environ[reference.ENV_VAR]).exists()


# --------------------------------------------------------------------------- the GPU path, faked


def _fake_gpu_parts() -> dict:
    d2d = transfers.DeviceCopy(
        labkit=_row("copy", 4300.0, "a.copy_(b)", "cuda:0"),
        references=(_row("copy", 4400.0, "cupy.copyto(dst, src)", "cuda:0"),),
        peak_gb_per_s=4800.0,
    )
    sizes = (MiB, 64 * MiB)
    rows = tuple(
        BandwidthResult(
            kernel=f"{d} {m}",
            device="cuda:0",
            dtype="uint8",
            n_elements=s,
            bytes_per_array=s,
            bytes_per_call=s,
            calls_per_sample=1,
            timing=Timing((s / (bw * 1e6),)),
            implementation="copy_",
        )
        for d in ("h2d", "d2h")
        for m, bw in (("pageable", 20.0), ("pinned", 50.0))
        for s in sizes
    )
    strided_rows = tuple(
        strided.StridedRow(
            stride=s,
            n_elements=1000,
            useful_bytes=4000,
            span_bytes=4000 * s,
            timing=Timing((0.01 * min(s, 8),)),
            slowdown=float(min(s, 8)),
        )
        for s in (1, 8, 64)
    )
    return {
        "device": "cuda:0",
        "d2d": d2d,
        "transfers": transfers.TransferSweep(rows, "cuda:0"),
        "overlap": "RuntimeError: pretend the overlap failed",
        "strided": strided.StridedResult(strided_rows, "cuda:0", "float32", 4, 32, True),
    }


def test_record_with_a_gpu_stores_a_recording_learners_can_read(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import labkit.machine.reference

    monkeypatch.setattr(gpu, "has_gpu", lambda: True)
    monkeypatch.setattr(bench_bandwidth, "_torch_sees_cuda", lambda: True)
    monkeypatch.setattr(bench_bandwidth, "run_gpu", lambda max_bytes=None: _fake_gpu_parts())
    monkeypatch.setattr(
        labkit.machine.reference,
        "gpu_identity",
        lambda: {"gpu_name": "Test GPU", "driver": "1.0", "cuda": "12.4", "torch": "2.13.0"},
    )
    assert main(["bench", "bandwidth", "--record", "--max-bytes", str(TINY), "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "device-to-device copy" in out and "Recorded the GPU results to" in out
    saved = reference.load("bandwidth")
    assert saved is not None and saved.gpu == "Test GPU"
    summary = saved.results["summary"]
    assert "labkit 4300 GB/s" in summary[0]
    assert any(
        "theoretical peak (memory clock × bus width) 4800 GB/s" in line and "0.90×" in line
        for line in summary
    )
    assert any(
        line.startswith("h2d best: pageable 20.0 GB/s, pinned 50.0 GB/s") for line in summary
    )
    assert any("overlap: not measured (RuntimeError" in line for line in summary)
    assert any("stride 64: 8.00×" in line for line in summary)
    assert saved.results["d2d"]["ratio_to_best"] == pytest.approx(4300 / 4400)
    monkeypatch.setattr(gpu, "has_gpu", lambda: False)
    lines = gpu.no_gpu_lines("memory bandwidth", reference="bandwidth")
    assert lines[1].startswith("Result recorded on Test GPU on ")
