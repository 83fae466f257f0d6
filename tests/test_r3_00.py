"""Third review of notebook 00: Windows driver minimums, and the GPU naive-timing sentence."""

from __future__ import annotations

import pytest
from test_diagnose import GPU_WITHOUT_DRIVER, cupy, driver, no_nvidia, only, run, torch

from labkit.machine.diagnose import MIN_LINUX_DRIVER, MIN_WINDOWS_DRIVER, min_driver_text
from labkit.timing.bench import Timing
from labkit.timing.pitfalls import NaiveVsSynced


@pytest.mark.parametrize(
    ("major", "windows", "linux"), [(11, "452.39", "450.80.02"), (12, "527.41", "525.60.13")]
)
def test_windows_gets_both_full_minimums(major, windows, linux):
    assert MIN_WINDOWS_DRIVER[major] == windows and MIN_LINUX_DRIVER[major] == linux
    text = min_driver_text(major, "Windows")
    assert f">= {windows} (Windows)" in text and f">= {linux} (Linux)" in text
    # the bare branch (">= 525") would let a Windows 526.xx driver through
    branch = linux.split(".")[0]
    assert f">= {branch} " not in text and f">= {branch})" not in text


def test_cuda_13_on_windows_states_the_branch_nvidia_gives():
    assert 13 not in MIN_WINDOWS_DRIVER
    text = min_driver_text(13, "Windows")
    assert "branch 580 or newer (Windows)" in text and ">= 580.65.06 (Linux)" in text


def test_linux_and_unknown_majors():
    assert min_driver_text(12, "Linux") == "NVIDIA driver >= 525.60.13"
    assert min_driver_text(14, "Windows") == "an NVIDIA driver that supports CUDA 14"
    assert min_driver_text(14, "Linux") == "an NVIDIA driver that supports CUDA 14"


def test_windows_findings_carry_the_windows_minimum():
    missing = only(
        run(GPU_WITHOUT_DRIVER, torch(devices=()), system="Windows"), "nvidia-driver-missing"
    )
    assert "527.41 (Windows)" in missing.fix and "525.60.13 (Linux)" in missing.fix
    too_old = only(
        run(
            driver(cuda="11.8", version="522.06"), torch(cuda="12.8", devices=()), system="Windows"
        ),
        "torch-driver-too-old",
    )
    assert "527.41 (Windows)" in too_old.fix
    no_gpu = only(run(no_nvidia(), cupy(devices=()), system="Windows"), "cupy-cuda-without-gpu")
    assert "527.41 (Windows)" in no_gpu.fix


def _naive(naive_ms: float, synced_ms: float, device: str) -> NaiveVsSynced:
    return NaiveVsSynced(
        label="mm", device=device, naive_ms=naive_ms, naive_reps=20, synced=Timing((synced_ms,))
    )


def test_gpu_ratio_near_one_names_launch_bound_work_not_a_full_queue():
    text = _naive(1.0, 1.2, "cuda:0").explanation()
    assert "keeps up" in text and "synchronize before reading a clock" in text
    # 20 launches fill no launch queue, and naive_timing copies nothing back
    assert "queue," not in text and "copied" not in text


def test_gpu_ratio_far_above_one_and_cpu_unchanged():
    assert "stopped when the work was queued" in _naive(0.01, 5.0, "cuda:0").explanation()
    assert "CPU work is synchronous" in _naive(1.0, 1.0, "cpu").explanation()
