"""Framework probes: fake torch/CuPy/TensorFlow modules for GPU builds, broken installs, the real ones.

Fake modules stand in for a CUDA build on an H100 so the device and
bandwidth logic is tested here, where the real frameworks see no GPU.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
from fakes import H100, H100_UUID

from labkit.core.optional import MissingPackageError, is_installed
from labkit.machine import frameworks
from labkit.machine.frameworks import (
    FrameworkInfo,
    cudnn_version_text,
    cupy_wheel_cuda_major,
    probe_framework,
)
from labkit.machine.nvidia import NvidiaInfo


def driver_with_h100() -> NvidiaInfo:
    gpu = H100
    return NvidiaInfo(
        library="libcuda.so.1",
        library_error=None,
        init_error=None,
        init_error_code=None,
        cuda_driver_version="12.4",
        driver_version="550.54.15",
        devices=(gpu,),
        smi_gpus=(),
        smi_error=None,
        pci_gpus=(),
    )


class FakeUuid:
    """Like torch's _CUuuid: 16 raw bytes, str() is the bare 8-4-4-4-12 form."""

    bytes = bytes(range(0xA0, 0xB0))

    def __str__(self) -> str:
        return H100_UUID


def fake_torch(*, cuda_available: bool = True, memory_clock: int = 0, warn: str | None = None):
    import warnings

    props = SimpleNamespace(
        name="NVIDIA H100 80GB HBM3",
        major=9,
        minor=0,
        multi_processor_count=132,
        total_memory=85520809984,
        uuid=FakeUuid(),
        memory_clock_rate=memory_clock,
        memory_bus_width=5120,
    )

    def is_available():
        if warn:
            warnings.warn(warn, UserWarning, stacklevel=2)
        return cuda_available

    return SimpleNamespace(
        __version__="2.13.0+cu128",
        version=SimpleNamespace(cuda="12.8", hip=None),
        backends=SimpleNamespace(
            cudnn=SimpleNamespace(version=lambda: 91002),
            mps=SimpleNamespace(is_built=lambda: False, is_available=lambda: False),
        ),
        cuda=SimpleNamespace(
            is_available=is_available,
            device_count=lambda: 1,
            get_device_properties=lambda i: props,
        ),
        xpu=SimpleNamespace(is_available=lambda: False),
    )


@pytest.fixture
def everything_installed(monkeypatch):
    """Let fake modules stand in even where the real package is absent."""
    monkeypatch.setattr(frameworks, "is_installed", lambda name: True)


@pytest.mark.parametrize(
    ("dist", "major"),
    [
        ("cupy-cuda12x", 12),
        ("cupy-cuda13x", 13),
        ("cupy-cuda11x", 11),
        ("cupy-cuda117", 11),
        ("cupy", None),
        ("cupy-rocm-6-0", None),
    ],
)
def test_cupy_wheel_cuda_major(dist, major):
    assert cupy_wheel_cuda_major(dist) == major


@pytest.mark.parametrize(
    ("version", "text"), [(91002, "9.10.2"), (90100, "9.1.0"), (8902, "8.9.2"), (8600, "8.6.0")]
)
def test_cudnn_version_text(version, text):
    assert cudnn_version_text(version) == text


def test_torch_cuda_build_fills_bandwidth_from_driver(everything_installed):
    info = probe_framework("torch", driver_with_h100(), importer=lambda name: fake_torch())
    assert info.usable and info.built_with_cuda and not info.built_with_rocm
    assert (info.cuda_version, info.cuda_major, info.cudnn_version) == ("12.8", 12, "9.10.2")
    (device,) = info.devices
    assert (device.kind, device.index, device.name) == ("cuda", 0, "NVIDIA H100 80GB HBM3")
    assert (device.compute_capability, device.sm_count) == ("9.0", 132)
    assert device.uuid == H100_UUID
    assert device.bandwidth_gb_per_s == pytest.approx(3352.32)  # from the driver, matched by UUID
    assert info.gpu_available


def test_torch_props_with_memory_clock_need_no_driver(everything_installed):
    info = probe_framework("torch", None, importer=lambda name: fake_torch(memory_clock=2_619_000))
    assert info.devices[0].bandwidth_gb_per_s == pytest.approx(3352.32)


def test_torch_cuda_build_without_driver_records_torch_warning(everything_installed):
    torch = fake_torch(
        cuda_available=False, warn="CUDA initialization: Found no NVIDIA driver on your system."
    )
    info = probe_framework("torch", None, importer=lambda name: torch)
    assert info.devices == () and not info.gpu_available
    assert info.device_error == "CUDA initialization: Found no NVIDIA driver on your system."


def test_cupy_devices_and_errors(everything_installed, monkeypatch):
    monkeypatch.setattr(frameworks, "distributions_of", lambda name: ("cupy-cuda12x",))
    props = {
        "name": b"NVIDIA H100 80GB HBM3",
        "totalGlobalMem": 85520809984,
        "multiProcessorCount": 132,
        "major": 9,
        "minor": 0,
        "memoryClockRate": 2_619_000,
        "memoryBusWidth": 5120,
        "uuid": bytes(range(0xA0, 0xB0)),
    }
    runtime = SimpleNamespace(
        is_hip=False,
        runtimeGetVersion=lambda: 12090,
        getDeviceCount=lambda: 1,
        getDeviceProperties=lambda i: props,
    )
    cupy = SimpleNamespace(
        __version__="14.2.0", cuda=SimpleNamespace(runtime=runtime), is_available=lambda: True
    )
    info = probe_framework("cupy", None, importer=lambda name: cupy)
    assert (info.cuda_version, info.cuda_major, info.cudnn_version) == ("12.9", 12, None)
    assert info.distributions == ("cupy-cuda12x",)
    (device,) = info.devices
    assert device.uuid == H100_UUID and device.bandwidth_gb_per_s == pytest.approx(3352.32)
    assert info.gpu_available

    def no_driver():
        raise RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient")

    runtime.getDeviceCount = no_driver
    cupy.is_available = lambda: False
    info = probe_framework("cupy", None, importer=lambda name: cupy)
    assert info.usable and info.devices == () and not info.gpu_available
    assert (
        info.device_error
        == "RuntimeError: cudaErrorInsufficientDriver: CUDA driver version is insufficient"
    )


def fake_tf(*, gpus: int = 1, growth: bool = False, cuda: bool = True):
    physical = [
        SimpleNamespace(name=f"/physical_device:GPU:{i}", device_type="GPU") for i in range(gpus)
    ]
    build = (
        {"is_cuda_build": cuda, "cuda_version": "12.5.1", "cudnn_version": "9"}
        if cuda
        else {"is_cuda_build": False}
    )
    return SimpleNamespace(
        __version__="2.21.0",
        sysconfig=SimpleNamespace(get_build_info=lambda: build),
        test=SimpleNamespace(is_built_with_cuda=lambda: cuda, is_built_with_rocm=lambda: False),
        config=SimpleNamespace(
            list_physical_devices=lambda kind: physical,
            experimental=SimpleNamespace(
                get_device_details=lambda d: {
                    "device_name": "NVIDIA H100 80GB HBM3",
                    "compute_capability": (9, 0),
                },
                get_memory_growth=lambda d: growth,
            ),
        ),
    )


def test_tensorflow_gpu_build(everything_installed):
    info = probe_framework("tensorflow", driver_with_h100(), importer=lambda name: fake_tf())
    assert (info.cuda_version, info.cuda_major, info.cudnn_version) == ("12.5.1", 12, "9")
    (device,) = info.devices
    assert device.compute_capability == "9.0"
    assert device.sm_count == 132  # TF has no SM count: matched to the driver by index and name
    assert device.bandwidth_gb_per_s == pytest.approx(3352.32)
    assert info.memory_growth is False


def test_tensorflow_cpu_build(everything_installed):
    info = probe_framework("tensorflow", None, importer=lambda name: fake_tf(gpus=0, cuda=False))
    assert (
        info.built_with_cuda is False and info.cuda_version is None and info.cudnn_version is None
    )
    assert info.devices == () and info.memory_growth is None


def _raise(exc: BaseException):
    def importer(name):
        raise exc

    return importer


def test_oserror_on_import_becomes_an_error_field(everything_installed):
    exc = OSError("libcudnn.so.9: cannot open shared object file: No such file or directory")
    info = probe_framework("torch", None, importer=_raise(exc))
    assert info.installed and not info.usable
    assert info.error == (
        "the import fails: OSError: libcudnn.so.9: cannot open shared object file: No such file or directory"
    )


def test_importerror_inside_an_installed_package_is_an_error(everything_installed):
    try:
        try:
            raise ImportError("DLL load failed while importing _pywrap_tensorflow_internal")
        except ImportError as cause:
            raise MissingPackageError("tensorflow") from cause
    except MissingPackageError as exc:
        error = exc
    info = probe_framework("tensorflow", None, importer=_raise(error))
    assert info.installed
    assert "DLL load failed" in info.error


def test_missing_package_is_not_installed(everything_installed):
    info = probe_framework("cupy", None, importer=_raise(MissingPackageError("cupy")))
    assert info == FrameworkInfo(name="cupy", installed=False, distributions=info.distributions)


def test_module_hidden_in_sys_modules_is_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    info = probe_framework("cupy")
    assert not info.installed and info.error is None


def test_exception_while_probing_is_an_error(everything_installed):
    torch = fake_torch()

    def broken():
        raise RuntimeError("CUDA error: unspecified launch failure")

    torch.cuda.is_available = broken
    info = probe_framework("torch", None, importer=lambda name: torch)
    assert info.installed and info.version == "2.13.0+cu128"
    assert (
        info.error
        == "imported, but probing it failed: RuntimeError: CUDA error: unspecified launch failure"
    )


def test_unknown_framework_is_rejected():
    with pytest.raises(
        ValueError, match="name must be one of 'torch', 'tensorflow', 'cupy', got 'jax'"
    ):
        probe_framework("jax")


@pytest.mark.skipif(not is_installed("torch"), reason="torch is not installed")
def test_real_torch_probe_is_consistent_with_torch():
    import torch

    info = probe_framework("torch")
    assert info.usable and info.version == torch.__version__
    assert info.built_with_cuda == (torch.version.cuda is not None)
    assert bool([d for d in info.devices if d.kind == "cuda"]) == torch.cuda.is_available()
    assert "torch" in info.distributions


@pytest.mark.skipif(not is_installed("cupy"), reason="cupy is not installed")
def test_real_cupy_probe_is_consistent_with_cupy():
    import cupy

    info = probe_framework("cupy")
    assert info.usable and info.version == cupy.__version__
    assert info.gpu_available == cupy.is_available()
    if info.built_with_cuda:
        assert info.cuda_major is not None and info.cuda_version is not None
