"""Each finding, from fake facts: the setups learners actually end up with."""

from __future__ import annotations

import dataclasses

import pytest
from fakes import H100

from labkit.machine.diagnose import Finding, diagnose, min_driver_text
from labkit.machine.frameworks import FrameworkInfo, GpuDevice
from labkit.machine.nvidia import CUDA_ERROR_NO_DEVICE, NvidiaInfo, PciGpu, SmiGpu

CUDA_DEVICE = GpuDevice(index=0, kind="cuda", name=H100.name, compute_capability="9.0")


def no_nvidia(**changes) -> NvidiaInfo:
    """A student laptop: no NVIDIA hardware, no driver."""
    base = NvidiaInfo(
        library=None,
        library_error="libcuda.so.1: cannot open shared object file",
        init_error=None,
        init_error_code=None,
        cuda_driver_version=None,
        driver_version=None,
        devices=(),
        smi_gpus=(),
        smi_error="nvidia-smi is not on the PATH",
        pci_gpus=(),
    )
    return dataclasses.replace(base, **changes)


def driver(cuda: str = "12.4", version: str = "550.54.15", **changes) -> NvidiaInfo:
    """A working driver with an H100."""
    facts = {
        "library": "libcuda.so.1",
        "library_error": None,
        "cuda_driver_version": cuda,
        "driver_version": version,
        "devices": (H100,),
        "smi_gpus": (SmiGpu(H100.name, version, 85520809984),),
        "smi_error": None,
    }
    return no_nvidia(**{**facts, **changes})


GPU_WITHOUT_DRIVER = no_nvidia(pci_gpus=(PciGpu("0000:01:00.0", "0x2330"),))


def torch(cuda: str | None = "12.8", devices=(CUDA_DEVICE,), **changes) -> FrameworkInfo:
    major = int(cuda.split(".")[0]) if cuda else None
    return FrameworkInfo(
        name="torch",
        installed=True,
        version=f"2.13.0+{'cu' + cuda.replace('.', '') if cuda else 'cpu'}",
        distributions=("torch",),
        built_with_cuda=cuda is not None,
        built_with_rocm=False,
        cuda_version=cuda,
        cuda_major=major,
        gpu_available=bool(devices),
        devices=tuple(devices),
        **changes,
    )


def tf(
    dist: str = "tensorflow",
    cuda: str | None = "12.5.1",
    devices=(CUDA_DEVICE,),
    version: str = "2.21.0",
    growth: bool | None = True,
    **changes,
) -> FrameworkInfo:
    return FrameworkInfo(
        name="tensorflow",
        installed=True,
        version=version,
        distributions=(dist,),
        built_with_cuda=cuda is not None,
        built_with_rocm=False,
        cuda_version=cuda,
        cuda_major=int(cuda.split(".")[0]) if cuda else None,
        gpu_available=bool(devices),
        devices=tuple(devices),
        memory_growth=growth if devices else None,
        **changes,
    )


def cupy(dist: str = "cupy-cuda12x", devices=(CUDA_DEVICE,), **changes) -> FrameworkInfo:
    major = int(dist.removeprefix("cupy-cuda").rstrip("x"))
    return FrameworkInfo(
        name="cupy",
        installed=True,
        version="14.2.0",
        distributions=(dist,),
        built_with_cuda=True,
        built_with_rocm=False,
        cuda_version=f"{major}.0",
        cuda_major=major,
        gpu_available=bool(devices),
        devices=tuple(devices),
        **changes,
    )


def run(
    nvidia: NvidiaInfo,
    *fws: FrameworkInfo,
    system: str = "Linux",
    env=None,
    wsl: bool = False,
    cuda_toolkit: bool | None = None,
):
    findings = diagnose(
        nvidia, fws, system=system, env=env or {}, wsl=wsl, cuda_toolkit=cuda_toolkit
    )
    for f in findings:  # every finding is two plain sentences a learner can act on
        assert isinstance(f, Finding)
        assert f.message and f.fix and f.message.strip() == f.message
        assert "None" not in f.message and "None" not in f.fix, f
    return findings


def codes(findings) -> list[str]:
    return [f.code for f in findings]


def only(findings, code: str) -> Finding:
    matches = [f for f in findings if f.code == code]
    assert len(matches) == 1, codes(findings)
    return matches[0]


def test_healthy_gpu_setup_has_no_findings():
    assert run(driver(), torch(), tf(), cupy()) == ()


# 1. an NVIDIA GPU, but torch is a CPU build
@pytest.mark.parametrize(
    "nvidia",
    [driver(), GPU_WITHOUT_DRIVER, no_nvidia(smi_gpus=(SmiGpu("NVIDIA L4", "550.54.15", None),))],
)
def test_nvidia_gpu_with_cpu_torch(nvidia):
    finding = only(run(nvidia, torch(cuda=None, devices=())), "torch-cpu-build")
    assert finding.severity == "error"
    assert "CPU-only build" in finding.message
    assert "https://download.pytorch.org/whl/cu" in finding.fix


def test_cpu_torch_fix_picks_an_index_the_driver_can_run():
    assert (
        "whl/cu126"
        in only(run(driver(cuda="12.4"), torch(cuda=None, devices=())), "torch-cpu-build").fix
    )
    assert (
        "whl/cu130"
        in only(run(driver(cuda="13.0"), torch(cuda=None, devices=())), "torch-cpu-build").fix
    )
    old = only(run(driver(cuda="11.8"), torch(cuda=None, devices=())), "torch-cpu-build").fix
    assert "525.60.13" in old


def test_cpu_torch_without_nvidia_gpu_is_fine():
    assert "torch-cpu-build" not in codes(run(no_nvidia(), torch(cuda=None, devices=())))


# 2. a CUDA wheel, but the driver is missing or too old
def test_cuda_wheels_on_a_gpu_without_driver():
    finding = only(
        run(GPU_WITHOUT_DRIVER, torch(devices=()), cupy(devices=())), "nvidia-driver-missing"
    )
    assert finding.severity == "error"
    assert "torch (CUDA 12) and cupy-cuda12x (CUDA 12) need it." in finding.message
    assert "PCI device 0x2330" in finding.message
    assert "NVIDIA driver >= 525.60.13 (for CUDA 12)" in finding.fix and "reboot" in finding.fix
    # torch needs no toolkit, CuPy does (or its [ctk] extra)
    assert "need no CUDA Toolkit; CuPy does" in finding.fix and "[ctk]" in finding.fix


def test_cuda13_wheel_without_driver_names_the_580_driver():
    finding = only(run(GPU_WITHOUT_DRIVER, torch(cuda="13.0", devices=())), "nvidia-driver-missing")
    assert "580.65.06" in finding.fix


def test_cuda_wheel_on_a_machine_without_nvidia_gpu_is_only_info():
    findings = run(no_nvidia(), torch(cuda="12.8", devices=()), tf(devices=()), cupy(devices=()))
    assert {f.severity for f in findings} == {"info"}
    assert codes(findings) == [
        "torch-cuda-without-gpu",
        "tensorflow-cuda-without-gpu",
        "cupy-cuda-without-gpu",
        "no-gpu",
    ]
    assert "runs on the CPU; that is fine without an NVIDIA GPU" in findings[0].message
    assert "CuPy needs one" in findings[2].message
    # CuPy needs the driver and a toolkit or its [ctk] extra (review finding A3)
    assert 'pip install "cupy-cuda12x[ctk]"' in findings[2].fix
    assert "NVRTC" in findings[2].fix


def test_cupy_without_toolkit_on_a_gpu_machine_is_a_warning():
    finding = only(run(driver(), cupy("cupy-cuda12x"), cuda_toolkit=False), "cupy-without-toolkit")
    assert finding.severity == "warning"
    assert 'pip install "cupy-cuda12x[ctk]"' in finding.fix
    assert "cupy-without-toolkit" not in codes(
        run(driver(), cupy("cupy-cuda12x"), cuda_toolkit=True)
    )
    assert "cupy-without-toolkit" not in codes(run(driver(), cupy("cupy-cuda12x")))  # not looked
    assert "cupy-without-toolkit" not in codes(
        run(no_nvidia(), cupy("cupy-cuda12x", devices=()), cuda_toolkit=False)
    )


def test_torch_newer_than_driver():
    finding = only(run(driver(cuda="12.4"), torch(cuda="13.0", devices=())), "torch-driver-too-old")
    assert finding.severity == "error"
    assert "CUDA 13.0" in finding.message and "supports only CUDA 12.4" in finding.message
    assert "550.54.15" in finding.message
    assert "580.65.06" in finding.fix
    assert "whl/cu126" in finding.fix  # or install a build for the CUDA 12 driver


def test_tensorflow_newer_than_driver():
    finding = only(
        run(driver(cuda="11.8"), tf(cuda="12.5.1", devices=())), "tensorflow-driver-too-old"
    )
    assert "525.60.13" in finding.fix


def test_min_driver_on_windows_states_both_platforms():
    # NVIDIA gives Windows only the branch for CUDA 13.x, full versions for 11.x and 12.x
    assert min_driver_text(13, "Windows") == (
        "an NVIDIA driver of branch 580 or newer (Windows) / >= 580.65.06 (Linux)"
    )
    assert (
        min_driver_text(12, "Windows") == "NVIDIA driver >= 527.41 (Windows) / >= 525.60.13 (Linux)"
    )
    assert min_driver_text(12, "Linux") == "NVIDIA driver >= 525.60.13"
    assert min_driver_text(11, "Linux") == "NVIDIA driver >= 450.80.02"


def test_older_wheel_on_newer_driver_is_fine():
    assert run(driver(cuda="13.0", version="580.65.06"), torch(cuda="12.8")) == ()


# 3. torch sees the GPU, TensorFlow does not
def test_tensorflow_cpu_next_to_a_cuda_torch():
    finding = only(
        run(driver(), torch(), tf(dist="tensorflow-cpu", cuda=None, devices=())),
        "tensorflow-no-gpu",
    )
    assert finding.severity == "warning"
    assert "tensorflow-cpu" in finding.message
    assert "pip uninstall -y tensorflow-cpu && pip install 'tensorflow[and-cuda]'" in finding.fix


def test_cuda_tensorflow_missing_its_libraries():
    finding = only(run(driver(), torch(), tf(devices=())), "tensorflow-no-gpu")
    assert "pip install 'tensorflow[and-cuda]'" in finding.fix
    assert "tensorflow-cpu" not in finding.fix


def test_tensorflow_on_a_mac_needs_metal():
    mps = GpuDevice(index=0, kind="mps", name="Apple GPU")
    fw_torch = torch(cuda=None, devices=(mps,))
    finding = only(
        run(no_nvidia(pci_gpus=()), fw_torch, tf(cuda=None, devices=()), system="Darwin"),
        "tensorflow-no-gpu",
    )
    assert finding.fix == "pip install tensorflow-metal."


# 4. CuPy's CUDA major vs the driver
def test_cupy_newer_than_driver():
    finding = only(run(driver(cuda="12.4"), cupy("cupy-cuda13x", devices=())), "cupy-cuda-mismatch")
    assert finding.severity == "error"
    assert "pip uninstall -y cupy-cuda13x && pip install cupy-cuda12x" in finding.fix
    assert "580.65.06" in finding.fix


def test_cupy_older_than_driver_is_info():
    finding = only(
        run(driver(cuda="13.0", version="580.65.06"), cupy("cupy-cuda12x")), "cupy-cuda-mismatch"
    )
    assert finding.severity == "info"
    assert "cupy-cuda13x" in finding.fix


def test_several_cupy_wheels():
    both = dataclasses.replace(cupy(), distributions=("cupy-cuda11x", "cupy-cuda12x"))
    finding = only(run(driver(), both), "cupy-multiple-wheels")
    assert finding.fix == "pip uninstall -y cupy-cuda11x cupy-cuda12x && pip install cupy-cuda12x"


# 5. TensorFlow > 2.10 on native Windows
def test_tensorflow_on_native_windows():
    findings = run(driver(), torch(), tf(version="2.16.1", cuda=None, devices=()), system="Windows")
    finding = only(findings, "tensorflow-windows-no-gpu")
    assert finding.severity == "warning"
    assert "WSL2" in finding.fix and "tensorflow<2.11" in finding.fix
    assert "tensorflow-no-gpu" not in codes(findings)  # one finding for one cause


def test_tensorflow_2_10_on_windows_is_fine():
    assert "tensorflow-windows-no-gpu" not in codes(
        run(driver(), tf(version="2.10.1"), system="Windows")
    )


def test_tensorflow_on_windows_without_nvidia_gpu_is_info():
    finding = only(
        run(no_nvidia(), tf(version="2.21.0", cuda=None, devices=()), system="Windows"),
        "tensorflow-windows-no-gpu",
    )
    assert finding.severity == "info"


# 6. TensorFlow grabs all GPU memory
def test_tensorflow_memory_growth_off():
    finding = only(run(driver(), torch(), tf(growth=False)), "tensorflow-memory-growth")
    assert finding.severity == "warning"
    assert "tf.config.experimental.set_memory_growth(gpu, True)" in finding.fix
    assert "TF_FORCE_GPU_ALLOW_GROWTH=true" in finding.fix


@pytest.mark.parametrize("value", ["true", "TRUE", " true "])
def test_tensorflow_memory_growth_env_var_counts(value):
    env = {"TF_FORCE_GPU_ALLOW_GROWTH": value}
    assert "tensorflow-memory-growth" not in codes(run(driver(), tf(growth=False), env=env))


def test_tensorflow_memory_growth_env_var_false_does_not_count():
    env = {"TF_FORCE_GPU_ALLOW_GROWTH": "false"}
    assert "tensorflow-memory-growth" in codes(run(driver(), tf(growth=False), env=env))


# no GPU at all
def test_no_gpu_anywhere_is_one_info():
    findings = run(
        no_nvidia(), torch(cuda=None, devices=()), tf(dist="tensorflow-cpu", cuda=None, devices=())
    )
    assert codes(findings) == ["no-gpu"]
    assert findings[0].severity == "info"
    assert "each GPU-only cell says what it would show" in findings[0].message


def test_no_gpu_in_wsl_points_at_the_windows_driver():
    (finding,) = run(no_nvidia(), torch(cuda=None, devices=()), wsl=True)
    assert "install the NVIDIA driver on Windows" in finding.fix


def test_apple_gpu_is_a_gpu():
    mps = GpuDevice(index=0, kind="mps", name="Apple GPU")
    assert run(no_nvidia(), torch(cuda=None, devices=(mps,)), system="Darwin") == ()


# torch is a CUDA build, the driver is fine, but CUDA is not available
def test_cuda_visible_devices_hides_the_gpu():
    nvidia = driver(
        devices=(), init_error="CUDA_ERROR_NO_DEVICE (100)", init_error_code=CUDA_ERROR_NO_DEVICE
    )
    findings = run(nvidia, torch(devices=()), env={"CUDA_VISIBLE_DEVICES": ""})
    finding = only(findings, "torch-cuda-unavailable")
    assert finding.severity == "warning"
    assert "torch.cuda.is_available() is False" in finding.message
    assert "CUDA_VISIBLE_DEVICES is set to ''" in finding.message and "every GPU" in finding.message
    assert "unset CUDA_VISIBLE_DEVICES" in finding.fix
    assert codes(findings) == ["torch-cuda-unavailable"]


def test_hidden_gpu_without_other_witnesses_is_not_called_no_gpu():
    # WSL2: no PCI device in sysfs and nvidia-smi not on the PATH, CUDA_VISIBLE_DEVICES=""
    nvidia = driver(
        devices=(),
        smi_gpus=(),
        init_error="CUDA_ERROR_NO_DEVICE (100)",
        init_error_code=CUDA_ERROR_NO_DEVICE,
    )
    findings = run(nvidia, torch(devices=()), env={"CUDA_VISIBLE_DEVICES": ""}, wsl=True)
    assert codes(findings) == ["torch-cuda-unavailable"]


def test_cuda_unavailable_without_env_quotes_torch():
    findings = run(
        driver(),
        torch(
            devices=(),
            device_error="CUDA unknown error - this may be due to an incorrectly set up environment",
        ),
    )
    finding = only(findings, "torch-cuda-unavailable")
    assert "CUDA unknown error" in finding.message
    assert "torch.cuda.init()" in finding.fix


# the driver itself
def test_driver_that_fails_to_start():
    nvidia = driver(
        devices=(), init_error="CUDA_ERROR_SYSTEM_DRIVER_MISMATCH (803)", init_error_code=803
    )
    findings = run(nvidia, torch(devices=()))
    assert codes(findings) == ["nvidia-driver-init-failed"]
    assert (
        findings[0].severity == "error"
        and "803" in findings[0].message
        and "reboot" in findings[0].fix
    )


def test_container_without_gpu_passed_in():
    nvidia = driver(
        devices=(), init_error="CUDA_ERROR_NO_DEVICE (100)", init_error_code=CUDA_ERROR_NO_DEVICE
    )
    findings = run(nvidia, torch(devices=(), device_error=None))
    assert codes(findings) == ["nvidia-driver-sees-no-gpu"]
    assert "--gpus all" in findings[0].fix


# broken installs
def test_broken_framework_is_an_error_with_a_reinstall_command():
    broken = FrameworkInfo(
        name="torch",
        installed=True,
        version="2.13.0",
        distributions=("torch",),
        error="the import fails: OSError: libcudnn.so.9: cannot open shared object file",
    )
    findings = run(no_nvidia(), broken)
    finding = only(findings, "torch-broken")
    assert finding.severity == "error"
    assert "libcudnn.so.9" in finding.message
    assert finding.fix == "Reinstall it: pip install --force-reinstall torch"
    assert codes(findings) == ["torch-broken", "no-gpu"]


def test_findings_are_sorted_errors_first():
    findings = run(
        GPU_WITHOUT_DRIVER,
        torch(cuda=None, devices=()),
        cupy(devices=()),
        tf(growth=False, devices=()),
    )
    order = [f.severity for f in findings]
    assert order == sorted(order, key=["error", "warning", "info"].index)


def test_finding_is_frozen():
    finding = Finding(code="x", severity="info", message="m", fix="f")
    with pytest.raises(dataclasses.FrozenInstanceError):
        finding.code = "y"  # type: ignore[misc]


def test_not_installed_frameworks_produce_no_findings_of_their_own():
    missing = [FrameworkInfo(name=n, installed=False) for n in ("torch", "tensorflow", "cupy")]
    assert codes(run(no_nvidia(), *missing)) == ["no-gpu"]
