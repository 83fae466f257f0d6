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


# ---- fourth review: WSL2 driver text, launch-bound GPU branch, CPU gap wording ----


@pytest.mark.parametrize(("major", "expected"), [(12, ">= 527.41"), (11, ">= 452.39")])
def test_wsl_states_the_windows_minimum_and_where_to_install(major, expected):
    text = min_driver_text(major, "Linux", wsl=True)
    assert expected in text and "install the driver on Windows, not inside WSL" in text
    assert MIN_LINUX_DRIVER[major] not in text  # the Linux floor does not apply under WSL2


def test_wsl_cuda_13_gives_the_windows_branch():
    text = min_driver_text(13, "Linux", wsl=True)
    assert "Windows NVIDIA driver of branch 580 or newer" in text and "580.65.06" not in text


def test_linux_and_windows_unchanged_without_wsl():
    assert min_driver_text(12, "Linux", wsl=False) == "NVIDIA driver >= 525.60.13"
    assert min_driver_text(12, "Linux") == "NVIDIA driver >= 525.60.13"
    assert (
        min_driver_text(12, "Windows") == "NVIDIA driver >= 527.41 (Windows) / >= 525.60.13 (Linux)"
    )


def test_wsl_missing_driver_says_windows_not_ubuntu_drivers():
    missing = only(
        run(GPU_WITHOUT_DRIVER, torch(devices=()), system="Linux", wsl=True),
        "nvidia-driver-missing",
    )
    assert "ubuntu-drivers" not in missing.fix and "525.60.13" not in missing.fix
    assert "install the driver on Windows, not inside WSL" in missing.fix
    assert ">= 527.41 (for CUDA 12)" in missing.fix
    linux = only(
        run(GPU_WITHOUT_DRIVER, torch(devices=()), system="Linux"), "nvidia-driver-missing"
    )
    assert "ubuntu-drivers" in linux.fix and ">= 525.60.13" in linux.fix and "WSL" not in linux.fix


def test_wsl_wheel_newer_than_driver_and_cuda_without_gpu():
    too_old = only(
        run(driver(cuda="11.8", version="522.06"), torch(cuda="12.8", devices=()), wsl=True),
        "torch-driver-too-old",
    )
    assert ">= 527.41" in too_old.fix and "not inside WSL" in too_old.fix
    assert "525.60.13" not in too_old.fix
    mismatch = only(
        run(driver(cuda="12.4", version="551.61"), cupy("cupy-cuda13x", devices=()), wsl=True),
        "cupy-cuda-mismatch",
    )
    assert "branch 580 or newer" in mismatch.fix and "not inside WSL" in mismatch.fix
    no_gpu = only(run(no_nvidia(), cupy(devices=()), wsl=True), "cupy-cuda-without-gpu")
    assert ">= 527.41" in no_gpu.fix and "not inside WSL" in no_gpu.fix


def test_gpu_launch_bound_ratio_has_its_own_sentence():
    text = _naive(1.0, 0.2, "cuda:0").explanation()
    assert "faster than the host can launch it" in text and "launch-bound" in text
    assert "Here the two are close" not in text
    assert "Here the two are close" in _naive(1.0, 0.6, "cuda:0").explanation()


def test_cpu_gap_is_named_as_a_difference_in_method():
    text = _naive(1.0, 0.9, "cpu").explanation()
    assert "a mean of 20 calls after one untimed call" in text and "slow calls pull up" in text
    assert text.index("measuring differently") < text.index("noise")
