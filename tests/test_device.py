"""device_report() on this machine, and pick_device() fallbacks with patched availability."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import pytest

import labkit
from labkit.core.optional import MissingPackageError, is_installed
from labkit.machine import report as device
from labkit.machine.diagnose import Finding
from labkit.machine.report import DeviceReport, device_report, pick_device

needs_torch = pytest.mark.skipif(not is_installed("torch"), reason="torch is not installed")
needs_cupy = pytest.mark.skipif(not is_installed("cupy"), reason="cupy is not installed")
needs_tf = pytest.mark.skipif(not is_installed("tensorflow"), reason="tensorflow is not installed")


@pytest.fixture(scope="module")
def report() -> DeviceReport:
    return device_report()


def test_public_api_is_exported():
    assert labkit.device_report is device_report
    assert labkit.pick_device is pick_device
    assert labkit.DeviceReport is DeviceReport


def test_report_on_this_machine_does_not_crash(report):
    """Whatever this machine has (GPU or not), the report is built and self-consistent."""
    assert [fw.name for fw in report.frameworks] == ["torch", "tensorflow", "cupy"]
    assert all(isinstance(f, Finding) for f in report.findings)
    assert report.has_gpu == any(fw.gpu_available for fw in report.frameworks)
    assert report.framework("torch") is report.frameworks[0]
    assert report.framework("jax") is None
    no_gpu_at_all = not report.has_gpu and not report.nvidia.hardware_present
    if no_gpu_at_all and report.system.cuda_visible_devices is None:
        assert "no-gpu" in [f.code for f in report.findings]
    for fw in report.frameworks:
        assert fw.installed == is_installed(fw.name)


def test_report_to_dict_is_json_native(report):
    data = report.to_dict()
    assert json.loads(json.dumps(data)) == data  # only dicts, lists, str, numbers, bools, None
    assert set(data) >= {"system", "cpu", "nvidia", "frameworks", "findings", "has_gpu"}
    assert isinstance(data["nvidia"]["hardware_present"], bool)
    assert [fw["name"] for fw in data["frameworks"]] == ["torch", "tensorflow", "cupy"]
    assert all(set(f) == {"code", "severity", "message", "fix"} for f in data["findings"])


def test_report_str_is_plain_text_sections(report):
    text = str(report)
    assert "\033[" not in text
    for section in ("CPU", "NVIDIA driver", "torch", "TensorFlow", "CuPy", "Findings"):
        assert f"\n{section}\n" in text


def test_report_pretty_prints_as_text_in_a_notebook(report):
    class Printer:
        text_parts: list[str] = []

        def text(self, value: str) -> None:
            self.text_parts.append(value)

    printer = Printer()
    report._repr_pretty_(printer, cycle=False)
    assert printer.text_parts == [str(report)]


def test_report_is_frozen(report):
    with pytest.raises(AttributeError):
        report.findings = ()  # type: ignore[misc]


def test_report_of_some_frameworks_only():
    report = device_report(frameworks=("cupy", "torch"))
    assert [fw.name for fw in report.frameworks] == [
        "torch",
        "cupy",
    ]  # printed order, not the caller's


@pytest.mark.parametrize("bad", ["jax", ["jax"], [1]])
def test_report_validates_frameworks(bad):
    with pytest.raises(ValueError, match=r"frameworks\[0\] must be one of"):
        device_report(frameworks=bad)


def test_import_labkit_imports_no_framework():
    import subprocess

    code = (
        "import sys, labkit, labkit.machine.report, labkit.machine.report, labkit.machine.diagnose\n"
        "heavy = {'torch', 'tensorflow', 'cupy', 'numba', 'jax'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# pick_device -------------------------------------------------------------------------------


@needs_torch
def test_pick_device_torch_prefers_cuda(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pick_device("torch") == torch.device("cuda")
    assert pick_device() == torch.device("cuda")  # torch is the default


@needs_torch
def test_pick_device_torch_then_mps_then_xpu_then_cpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert pick_device("torch") == torch.device("mps")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    if hasattr(torch, "xpu"):
        monkeypatch.setattr(torch.xpu, "is_available", lambda: True)
        assert pick_device("torch") == torch.device("xpu")
        monkeypatch.setattr(torch.xpu, "is_available", lambda: False)
    assert pick_device("torch") == torch.device("cpu")


@needs_torch
def test_pick_device_torch_on_this_machine_is_usable():
    import torch

    dev = pick_device("torch")
    assert torch.ones(2, device=dev).sum().item() == 2.0


def test_pick_device_tensorflow(monkeypatch):
    gpus: list[str] = []
    fake_tf = SimpleNamespace(config=SimpleNamespace(list_physical_devices=lambda kind: gpus))
    monkeypatch.setattr(device, "import_tensorflow", lambda purpose=None: fake_tf)
    assert pick_device("tensorflow") == "/CPU:0"
    gpus.append("/physical_device:GPU:0")
    assert pick_device("tensorflow") == "/GPU:0"


@needs_tf
def test_pick_device_real_tensorflow():
    assert pick_device("tensorflow") in ("/GPU:0", "/CPU:0")


@needs_cupy
def test_pick_device_cupy(monkeypatch):
    import cupy

    monkeypatch.setattr(cupy, "is_available", lambda: False)
    assert pick_device("cupy") == "cpu"
    monkeypatch.setattr(cupy, "is_available", lambda: True)
    dev = pick_device("cupy")
    assert isinstance(dev, cupy.cuda.Device) and dev.id == 0


@pytest.mark.parametrize("bad", ["jax", "Torch", "", None, 0])
def test_pick_device_unknown_framework(bad):
    with pytest.raises(
        ValueError, match=r"framework must be one of 'torch', 'tensorflow', 'cupy', got"
    ):
        pick_device(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "hint"), [("cupy", "pip install cupy"), ("torch", "pip install torch")]
)
def test_pick_device_missing_package(monkeypatch, name, hint):
    monkeypatch.setitem(sys.modules, name, None)  # how Python marks a module unimportable
    with pytest.raises(MissingPackageError, match=hint):
        pick_device(name)


def test_pick_device_broken_install_points_at_doctor(monkeypatch):
    def broken(name, purpose=None):
        raise OSError("libcudnn.so.9: cannot open shared object file")

    monkeypatch.setattr(device, "import_optional", broken)
    with pytest.raises(ImportError, match="torch is installed but fails to import .*labkit doctor"):
        pick_device("torch")
