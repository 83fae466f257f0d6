"""The NVIDIA probe: bandwidth on known cards, parsers, and the ctypes driver path.

The driver path is exercised against a fake ``libcuda`` compiled from the C
source below (it describes an H100 SXM), so the ctypes calls, argument types
and attribute numbers are tested on a machine without any NVIDIA driver.
"""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.machine import nvidia
from labkit.machine.nvidia import (
    CUDA_ERROR_NO_DEVICE,
    NvidiaInfo,
    cuda_version_text,
    format_uuid,
    normalize_uuid,
    parse_smi_output,
    theoretical_bandwidth_gb_per_s,
)

# (card, memory clock in kHz as CUDA reports it, bus width in bits, NVIDIA's spec in GB/s)
KNOWN_CARDS = [
    ("H100 SXM5 80GB", 2_619_000, 5120, 3350),
    ("A100 SXM4 40GB", 1_215_000, 5120, 1555),
    ("V100 SXM2 16GB", 877_000, 4096, 900),
    ("GeForce RTX 3090", 9_751_000, 384, 936),
    ("GeForce RTX 4090", 10_501_000, 384, 1008),
    ("Tesla T4", 5_001_000, 256, 320),
]


@pytest.mark.parametrize(("card", "clock_khz", "bus_bits", "spec_gb_per_s"), KNOWN_CARDS)
def test_bandwidth_formula_matches_published_specs(card, clock_khz, bus_bits, spec_gb_per_s):
    bandwidth = theoretical_bandwidth_gb_per_s(clock_khz, bus_bits)
    assert bandwidth == pytest.approx(spec_gb_per_s, rel=0.01), card


def test_bandwidth_h100_exact_value():
    # 2 transfers/cycle x 2619 MHz x 5120 bit / 8 bit per byte
    assert theoretical_bandwidth_gb_per_s(2_619_000, 5120) == pytest.approx(3352.32)


@pytest.mark.parametrize(
    ("clock", "bus"), [(None, 5120), (2_619_000, None), (0, 5120), (2_619_000, 0)]
)
def test_bandwidth_unknown_when_an_input_is_missing(clock, bus):
    assert theoretical_bandwidth_gb_per_s(clock, bus) is None


@pytest.mark.parametrize(
    ("version", "text"), [(12040, "12.4"), (13000, "13.0"), (12090, "12.9"), (11080, "11.8")]
)
def test_cuda_version_text(version, text):
    assert cuda_version_text(version) == text


def test_uuid_formatting_and_normalising_agree():
    raw = bytes(range(16))
    text = format_uuid(raw)
    assert text == "00010203-0405-0607-0809-0a0b0c0d0e0f"
    assert normalize_uuid("GPU-00010203-0405-0607-0809-0A0B0C0D0E0F") == text
    assert normalize_uuid(None) is None


def test_parse_smi_output():
    text = (
        "NVIDIA H100 80GB HBM3, 550.54.15, 81559 MiB\n"
        "NVIDIA GeForce RTX 4090, 550.54.15, 24564 MiB\n"
        "\n"
    )
    gpus = parse_smi_output(text)
    assert [g.name for g in gpus] == ["NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090"]
    assert gpus[0].driver_version == "550.54.15"
    assert gpus[0].memory_bytes == 81559 * 1024**2


def test_parse_smi_output_tolerates_not_supported_memory():
    (gpu,) = parse_smi_output("NVIDIA Jetson, 540.3.0, [N/A]\n")
    assert gpu.memory_bytes is None


def _fake_sysfs(root: Path, entries: dict[str, tuple[str, str, str]]) -> Path:
    for address, (vendor, klass, device) in entries.items():
        d = root / address
        d.mkdir(parents=True)
        (d / "vendor").write_text(vendor + "\n")
        (d / "class").write_text(klass + "\n")
        (d / "device").write_text(device + "\n")
    return root


def test_pci_probe_finds_nvidia_display_and_3d_controllers_only(tmp_path):
    root = _fake_sysfs(
        tmp_path,
        {
            "0000:01:00.0": ("0x10de", "0x030000", "0x2684"),  # RTX 4090, VGA controller
            "0000:01:00.1": ("0x10de", "0x040300", "0x22ba"),  # its HDMI audio function
            "0000:02:00.0": ("0x10de", "0x030200", "0x2330"),  # H100, 3D controller
            "0000:00:02.0": ("0x8086", "0x030000", "0xa780"),  # Intel iGPU
        },
    )
    gpus = nvidia._probe_pci(root)
    assert [(g.address, g.device_id) for g in gpus] == [
        ("0000:01:00.0", "0x2684"),
        ("0000:02:00.0", "0x2330"),
    ]


def test_pci_probe_missing_sysfs_is_empty(tmp_path):
    assert nvidia._probe_pci(tmp_path / "nope") == ()


def _fake_smi(tmp_path: Path, body: str) -> None:
    script = tmp_path / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


@pytest.mark.skipif(sys.platform == "win32", reason="uses a shell script as fake nvidia-smi")
def test_smi_probe_reads_fake_nvidia_smi(tmp_path, monkeypatch):
    _fake_smi(tmp_path, 'echo "NVIDIA H100 80GB HBM3, 550.54.15, 81559 MiB"')
    monkeypatch.setenv("PATH", str(tmp_path))
    gpus, error = nvidia._probe_smi()
    assert error is None
    assert gpus[0].driver_version == "550.54.15"


@pytest.mark.skipif(sys.platform == "win32", reason="uses a shell script as fake nvidia-smi")
def test_smi_probe_reports_driver_failure(tmp_path, monkeypatch):
    _fake_smi(
        tmp_path,
        'echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver."; exit 9',
    )
    monkeypatch.setenv("PATH", str(tmp_path))
    gpus, error = nvidia._probe_smi()
    assert gpus == ()
    assert "couldn't communicate with the NVIDIA driver" in error


@pytest.mark.skipif(sys.platform == "win32", reason="uses a shell script as fake nvidia-smi")
def test_smi_probe_times_out(tmp_path, monkeypatch):
    _fake_smi(tmp_path, "exec sleep 10")
    monkeypatch.setenv("PATH", str(tmp_path) + ":/bin:/usr/bin")
    gpus, error = nvidia._probe_smi(timeout_s=0.3)
    assert gpus == ()
    assert "did not answer within 0.3 s" in error


def test_smi_missing_from_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert nvidia._probe_smi() == ((), "nvidia-smi is not on the PATH")


def test_nvidia_info_on_this_machine_never_raises():
    info = nvidia.nvidia_info()
    assert isinstance(info, NvidiaInfo)
    assert isinstance(info.hardware_present, bool)
    assert (info.library is None) == (info.library_error is not None)
    for gpu in info.devices:
        assert gpu.name


FAKE_LIBCUDA = r"""
#include <stdlib.h>
#include <string.h>
typedef int CUresult;
typedef int CUdevice;
static int status_from_env(void) {
    const char *s = getenv("FAKE_CUINIT_STATUS");
    return s ? atoi(s) : 0;
}
CUresult cuDriverGetVersion(int *v) { *v = 12040; return 0; }
CUresult cuInit(unsigned int flags) { return status_from_env(); }
CUresult cuGetErrorName(CUresult e, const char **name) {
    if (e == 100) { *name = "CUDA_ERROR_NO_DEVICE"; return 0; }
    return 1;
}
CUresult cuDeviceGetCount(int *n) { *n = 1; return 0; }
CUresult cuDeviceGet(CUdevice *d, int i) { *d = i; return 0; }
CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
    strncpy(name, "NVIDIA H100 80GB HBM3", len); return 0;
}
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) { *bytes = 85520809984ULL; return 0; }
CUresult cuDeviceGetUuid(unsigned char *uuid, CUdevice d) {
    for (int i = 0; i < 16; i++) uuid[i] = (unsigned char)(0xa0 + i);
    return 0;
}
CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
    switch (attr) {
    case 16: *v = 132; return 0;       /* SM count */
    case 36: *v = 2619000; return 0;   /* memory clock, kHz */
    case 37: *v = 5120; return 0;      /* bus width, bits */
    case 38: *v = 52428800; return 0;  /* L2 bytes */
    case 75: *v = 9; return 0;
    case 76: *v = 0; return 0;
    }
    return 1;
}
"""


@pytest.fixture(scope="module")
def fake_libcuda(tmp_path_factory) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None or not sys.platform.startswith("linux"):
        pytest.skip("needs a C compiler on Linux to build a fake libcuda")
    d = tmp_path_factory.mktemp("fakecuda")
    (d / "fake.c").write_text(FAKE_LIBCUDA)
    lib = d / "libcuda.so.1"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(lib), str(d / "fake.c")], check=True)
    return lib


@pytest.fixture
def use_fake_driver(fake_libcuda, monkeypatch):
    monkeypatch.setattr(nvidia, "_library_names", lambda: (str(fake_libcuda),))
    monkeypatch.setattr(nvidia, "_probe_smi", lambda: ((), "nvidia-smi is not on the PATH"))
    monkeypatch.setattr(nvidia, "_probe_pci", lambda: ())
    monkeypatch.setattr(nvidia, "_kernel_module_version", lambda: "550.54.15")
    monkeypatch.delenv("FAKE_CUINIT_STATUS", raising=False)


def test_driver_probe_through_ctypes(use_fake_driver):
    info = nvidia.nvidia_info()
    assert info.library_error is None and info.init_error is None
    assert info.cuda_driver_version == "12.4"
    assert info.cuda_driver_major == 12
    assert info.driver_version == "550.54.15"
    (gpu,) = info.devices
    assert gpu.name == "NVIDIA H100 80GB HBM3"
    assert gpu.compute_capability == "9.0"
    assert gpu.sm_count == 132
    assert gpu.memory_bytes == 85520809984
    assert gpu.l2_cache_bytes == 50 * 1024**2
    assert gpu.bandwidth_gb_per_s == pytest.approx(3352.32)
    assert gpu.uuid == "a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf"
    assert info.hardware_present


def test_driver_probe_reports_cuinit_failure(use_fake_driver, monkeypatch):
    monkeypatch.setenv("FAKE_CUINIT_STATUS", str(CUDA_ERROR_NO_DEVICE))
    info = nvidia.nvidia_info()
    assert info.init_error == "CUDA_ERROR_NO_DEVICE (100)"
    assert info.init_error_code == CUDA_ERROR_NO_DEVICE
    assert info.cuda_driver_version == "12.4"  # known before cuInit
    assert info.devices == ()
    assert not info.hardware_present


def test_driver_probe_unknown_error_name(use_fake_driver, monkeypatch):
    monkeypatch.setenv("FAKE_CUINIT_STATUS", "999")
    assert nvidia.nvidia_info().init_error == "CUDA driver error (999)"


def test_missing_driver_library_is_reported_not_raised(monkeypatch):
    monkeypatch.setattr(nvidia, "_library_names", lambda: ("libcuda-does-not-exist.so.1",))
    info = nvidia.nvidia_info()
    assert info.library is None
    assert "libcuda-does-not-exist.so.1" in info.library_error
    assert info.devices == ()
