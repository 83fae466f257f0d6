"""labkit.profiling.nsight: the commands, finding the tools, and a best-effort nsys run (faked)."""

from __future__ import annotations

import json
import os
import shlex
import stat
import sys
from pathlib import Path

import pytest

from labkit.profiling import find_nsight, nsight, nsight_commands, run_nsys

MODERN_STATS = """\
Generating '/tmp/nsys-report-1.qdstrm'
[1/8] [========================100%] report.nsys-rep
[2/8] [========================100%] report.sqlite
[3/8] Executing 'nvtx_sum' stats report

 Time (%)  Total Time (ns)  Instances  Avg (ns)  Style    Range
 --------  ---------------  ---------  --------  -------  --------
     60.0          6000000         20  300000.0  PushPop  backward
     40.0          4000000         20  200000.0  PushPop  forward

[4/8] Executing 'osrt_sum' stats report

 Time (%)  Total Time (ns)  Num Calls  Name
     99.0          1000000         10  poll

[5/8] Executing 'cuda_gpu_kern_sum' stats report

 Time (%)  Total Time (ns)  Instances  Avg (ns)  Name
     70.0          7000000         20  350000.0  cudnn_conv_kernel
[6/8] Executing 'cuda_gpu_mem_size_sum' stats report
SKIPPED: report.sqlite does not contain GPU memory data.
Generated:
    /tmp/report.nsys-rep
"""

OLD_STATS = """\
** CUDA GPU Kernel Summary (cuda_gpu_kern_sum):

 Time (%)  Total Time (ns)  Name
     70.0          7000000  cudnn_conv_kernel

** OS Runtime Summary (osrt_sum):
 poll
"""


def test_nsight_commands() -> None:
    nsys, ncu = nsight_commands()
    assert nsys == (
        "nsys profile -t cuda,nvtx,osrt --stats=true --force-overwrite true "
        "-o report python train.py"
    )
    assert ncu == "ncu --set full -k regex:KERNEL_FROM_NSYS -c 1 -f -o report python train.py"
    nsys, ncu = nsight_commands(
        "-m labkit.profiling.nsys_target",
        args=["--steps", "5"],
        kernel_regex="sgemm|gemm",
        output="my run",
    )
    assert shlex.split(nsys)[-5:] == [
        "python",
        "-m",
        "labkit.profiling.nsys_target",
        "--steps",
        "5",
    ]
    assert "'regex:sgemm|gemm'" in ncu and "'my run'" in ncu


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"args": "--steps 5"}, TypeError, "args must be a sequence of strings"),
    ],
)
def test_nsight_commands_bad_arguments(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        nsight_commands(**kwargs)


def test_find_nsight(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nsight.shutil, "which", lambda name: None)
    tools = find_nsight()
    assert tools.nsys is None and tools.ncu is None
    assert "nsys: not found on the PATH (Nsight Systems ships with the CUDA toolkit" in str(tools)
    monkeypatch.setattr(nsight.shutil, "which", lambda name: f"/opt/nvidia/bin/{name}")
    tools = find_nsight()
    assert str(tools) == "nsys: /opt/nvidia/bin/nsys\nncu: /opt/nvidia/bin/ncu"


def test_parse_stats_modern_and_old() -> None:
    stats = nsight.parse_stats(MODERN_STATS)
    assert list(stats) == ["nvtx_sum", "cuda_gpu_kern_sum"]
    assert stats["nvtx_sum"][0].split()[:2] == ["Time", "(%)"]
    assert stats["nvtx_sum"][-1].split()[-1] == "forward" and len(stats["nvtx_sum"]) == 4
    assert stats["cuda_gpu_kern_sum"][-1].endswith("cudnn_conv_kernel")
    old = nsight.parse_stats(OLD_STATS)
    assert list(old) == ["cuda_gpu_kern_sum"] and old["cuda_gpu_kern_sum"][-1].endswith("kernel")
    assert len(nsight.parse_stats(MODERN_STATS, rows=1)["nvtx_sum"]) == 1


def _fake_nsys(tmp_path: Path, body: str) -> str:
    script = tmp_path / "nsys"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_run_nsys_without_nsys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nsight.shutil, "which", lambda name: None)
    run = run_nsys()
    assert not run.ok and "nsys not found" in run.error
    assert run.summary() == [f"nsys profile --stats=true: failed ({run.error})"]


@pytest.mark.skipif(os.name != "posix", reason="a shell script stands in for nsys")
def test_run_nsys_reads_the_stats(tmp_path: Path) -> None:
    stats_file = tmp_path / "stats.txt"
    stats_file.write_text(MODERN_STATS)
    args_file = tmp_path / "args.txt"
    exe = _fake_nsys(
        tmp_path, f'echo "$@" > {args_file}\ntouch {tmp_path}/out/report.nsys-rep\ncat {stats_file}'
    )
    run = run_nsys(steps=3, batch=2, image_size=8, out_dir=tmp_path / "out", nsys=exe)
    assert run.ok and run.returncode == 0 and run.error == ""
    assert run.report_files == (str(tmp_path / "out" / "report.nsys-rep"),)
    assert list(run.stats) == ["nvtx_sum", "cuda_gpu_kern_sum"]
    passed = args_file.read_text().split()
    assert passed[:4] == ["profile", "-t", "cuda,nvtx,osrt", "--stats=true"]
    assert passed[passed.index(sys.executable) :][1:] == [
        "-m",
        "labkit.profiling.nsys_target",
        "--steps",
        "3",
        "--batch",
        "2",
        "--image-size",
        "8",
    ]
    text = str(run)
    assert text.startswith("nsys profile --stats=true: ran in ") and "nsys nvtx_sum:" in text
    assert json.dumps(run.to_dict())


@pytest.mark.skipif(os.name != "posix", reason="a shell script stands in for nsys")
def test_run_nsys_failures_are_reported_not_raised(tmp_path: Path) -> None:
    exe = _fake_nsys(tmp_path, "echo 'ERROR: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES' >&2\nexit 3")
    run = run_nsys(out_dir=tmp_path, nsys=exe)
    assert not run.ok and run.returncode == 3
    assert run.error == "exit code 3: ERROR: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES"
    slow = _fake_nsys(tmp_path, "sleep 5")
    run = run_nsys(out_dir=tmp_path, nsys=slow, timeout_s=0.3)
    assert not run.ok and run.error == "timed out after 0.3 s"
    with pytest.raises(ValueError, match="timeout_s must be"):
        run_nsys(timeout_s=0)


def test_nsys_target_runs_training_steps(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    from labkit.profiling import nsys_target

    code = nsys_target.main(
        [
            "--steps",
            "2",
            "--batch",
            "2",
            "--image-size",
            "8",
            "--device",
            "cpu",
            "--item-every-step",
        ]
    )
    assert code == 0
    assert capsys.readouterr().out.startswith("2 training steps on cpu, mean loss ")
    with pytest.raises(SystemExit):
        nsys_target.main(["--steps", "0"])
