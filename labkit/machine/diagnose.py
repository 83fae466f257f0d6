"""From facts to findings: what is wrong with this setup and how to fix it.

``diagnose`` is a pure function of the collected facts (driver, frameworks,
operating system, environment variables), so every scenario a learner can
hit — a CPU-only torch on a GPU machine, a CUDA 13 wheel on a CUDA 12
driver, tensorflow-cpu next to a working torch — is tested with fake facts on
a machine that has none of it. Each finding is one sentence on what is wrong
and one on the fix, with the exact command where there is one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from labkit.machine.frameworks import FrameworkInfo
from labkit.machine.nvidia import CUDA_ERROR_NO_DEVICE, NvidiaInfo

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")

#: Oldest driver that runs each CUDA major version under minor-version
#: compatibility ("with limited feature-set"), per platform. Drivers run older
#: CUDA majors too, so only "driver major < wheel major" is fatal. Sources:
#: NVIDIA's minor-version compatibility page ("450.80.02 (Linux) / 452.39
#: (Windows)" for 11.x; ">= 525" for 12.x and ">= 580" for 13.x,
#: https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html)
#: and the cuDNN support matrix (Linux >=525.60.13 / Windows >=527.41 for
#: CUDA 12.x, >=580.65.06 / "N/A" for CUDA 13.x,
#: https://docs.nvidia.com/deeplearning/cudnn/latest/support-matrix/index.html).
MIN_LINUX_DRIVER: dict[int, str] = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}
#: Windows minimums, where NVIDIA publishes a full version (none for CUDA 13.x).
MIN_WINDOWS_DRIVER: dict[int, str] = {11: "452.39", 12: "527.41"}
#: The driver branch each CUDA major needs: the only figure NVIDIA gives for
#: every platform (and the only Windows figure for CUDA 13.x).
MIN_DRIVER_BRANCH: dict[int, int] = {11: 450, 12: 525, 13: 580}

_TF_AND_CUDA = "pip install 'tensorflow[and-cuda]'"


@dataclass(frozen=True)
class Finding:
    """One problem (or notable fact) about this setup, and what to do about it."""

    code: str
    severity: Severity
    message: str
    fix: str


#: Where the driver goes under WSL2: it runs on the Windows driver, and a Linux
#: driver installed inside WSL would override the one Windows passes in.
WSL_DRIVER_WHERE = "install the driver on Windows, not inside WSL"


def _windows_minimum(cuda_major: int) -> str:
    """The Windows driver a CUDA major needs: the full version, else the branch."""
    if cuda_major in MIN_WINDOWS_DRIVER:
        return f"the Windows NVIDIA driver >= {MIN_WINDOWS_DRIVER[cuda_major]}"
    if cuda_major in MIN_DRIVER_BRANCH:
        return f"a Windows NVIDIA driver of branch {MIN_DRIVER_BRANCH[cuda_major]} or newer"
    return f"a Windows NVIDIA driver that supports CUDA {cuda_major}"


def min_driver_text(cuda_major: int, system: str, wsl: bool = False) -> str:
    """The driver a CUDA major version needs, as a fix can state it.

    On Linux the Linux minimum. Elsewhere both platforms' minimums, since they
    differ (a Windows R525 driver below 527.41 passes ">= 525" but not the
    floor); where NVIDIA gives Windows only a branch (CUDA 13.x), the branch.
    Under WSL2 (``wsl``) the Windows minimum alone: WSL2 runs on the Windows
    driver, installed on Windows and not inside WSL (NVIDIA's CUDA on WSL user
    guide, https://docs.nvidia.com/cuda/wsl-user-guide/).
    """
    linux = MIN_LINUX_DRIVER.get(cuda_major)
    windows = MIN_WINDOWS_DRIVER.get(cuda_major)
    if wsl:
        return f"{_windows_minimum(cuda_major)} ({WSL_DRIVER_WHERE})"
    if system == "Linux" and linux:
        return f"NVIDIA driver >= {linux}"
    if windows and linux:
        return f"NVIDIA driver >= {windows} (Windows) / >= {linux} (Linux)"
    if cuda_major in MIN_DRIVER_BRANCH and linux:
        return (
            f"an NVIDIA driver of branch {MIN_DRIVER_BRANCH[cuda_major]} or newer (Windows) "
            f"/ >= {linux} (Linux)"
        )
    return f"an NVIDIA driver that supports CUDA {cuda_major}"


def _version_tuple(version: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version or "")[:2])


def _dist(fw: FrameworkInfo) -> str:
    return fw.distributions[0] if fw.distributions else fw.name


def _gpu_names(nvidia: NvidiaInfo) -> str:
    if nvidia.devices:
        names = [d.name for d in nvidia.devices]
    elif nvidia.smi_gpus:
        names = [g.name for g in nvidia.smi_gpus]
    else:
        names = [
            f"an NVIDIA GPU (PCI device {p.device_id} at {p.address})" for p in nvidia.pci_gpus
        ]
    return ", ".join(dict.fromkeys(names)) or "an NVIDIA GPU"


def _torch_cuda_install(driver_major: int | None, system: str, wsl: bool = False) -> str:
    """The command that installs a CUDA build of torch that this driver can run."""
    if driver_major is not None and driver_major < 12:
        return (
            f"update to {min_driver_text(12, system, wsl)} first (torch no longer ships CUDA "
            f"{driver_major} builds), then pip install --force-reinstall torch --index-url "
            "https://download.pytorch.org/whl/cu126"
        )
    # torch 2.12 and later build CUDA 12.6, 13.0 and 13.2 (12.8 was dropped, pytorch#178665):
    # a CUDA 12 driver runs the 12.6 build (minor-version compatibility)
    tag = "cu126" if driver_major == 12 else "cu130"
    return (
        f"pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/{tag} "
        "(https://pytorch.org/get-started/locally/ lists the CUDA builds of the current "
        "release; pick one whose CUDA major version your driver supports)"
    )


def _driver_words(nvidia: NvidiaInfo) -> str:
    return (
        f"the NVIDIA driver {nvidia.driver_version}"
        if nvidia.driver_version
        else "the NVIDIA driver"
    )


def _rule_broken(frameworks: Sequence[FrameworkInfo]) -> list[Finding]:
    return [
        Finding(
            code=f"{fw.name}-broken",
            severity="error",
            message=f"{fw.display_name} is installed but unusable: {fw.error}.",
            fix=f"Reinstall it: pip install --force-reinstall {_dist(fw)}",
        )
        for fw in frameworks
        if fw.installed and fw.error
    ]


def _rule_driver(
    nvidia: NvidiaInfo,
    cuda_wheels: list[FrameworkInfo],
    system: str,
    env: Mapping[str, str],
    wsl: bool = False,
) -> list[Finding]:
    """NVIDIA hardware without a working driver, and CUDA wheels on machines without a GPU."""
    if not nvidia.hardware_present:
        if nvidia.cuda_driver_version is not None:
            return []  # a driver without a visible GPU: the "no GPU" finding covers it
        return [
            Finding(
                code=f"{fw.name}-cuda-without-gpu",
                severity="info",
                message=(
                    f"{_dist(fw)} {fw.version} is a CUDA {fw.cuda_major} build, but "
                    + (
                        "GPUs are hidden here (the reference profile plays a machine without one): "
                        if nvidia.not_probed
                        else "this machine has no NVIDIA GPU: "
                    )
                    + (
                        "CuPy needs one, so its cells say what they would show instead; "
                        if fw.name == "cupy"
                        else f"{fw.display_name} runs on the CPU; "
                    )
                    + "that is fine without an NVIDIA GPU."
                ),
                fix=(
                    "Nothing to do. On a machine with an NVIDIA GPU this build needs "
                    f"{min_driver_text(fw.cuda_major or 0, system, wsl)}"
                    + (f" and {cupy_toolkit_text(fw)}." if fw.name == "cupy" else ".")
                ),
            )
            for fw in cuda_wheels
        ]
    if nvidia.library is None:
        needed = max((fw.cuda_major or 0 for fw in cuda_wheels), default=0)
        wheels = " and ".join(f"{_dist(fw)} (CUDA {fw.cuda_major})" for fw in cuda_wheels)
        if wheels:
            wheels = f"; {wheels} need{'s' if len(cuda_wheels) == 1 else ''} it"
        how = (
            "with sudo ubuntu-drivers install (Ubuntu) or your distribution's nvidia-driver package"
            if system == "Linux"
            else "from https://www.nvidia.com/drivers"
        )
        driver = (
            min_driver_text(needed, system) + f" (for CUDA {needed})"
            if needed
            else "the NVIDIA driver"
        )
        install = f"Install {driver} {how}, then reboot."
        if wsl:  # WSL2 runs on the Windows driver (NVIDIA WSL user guide)
            windows = _windows_minimum(needed) + f" (for CUDA {needed})" if needed else "it"
            install = (
                f"WSL2 runs on the Windows driver, so {WSL_DRIVER_WHERE}: {windows}, from "
                "https://www.nvidia.com/drivers, then reboot."
            )
        return [
            Finding(
                code="nvidia-driver-missing",
                severity="error",
                message=(
                    f"This machine has {_gpu_names(nvidia)}, but no NVIDIA driver is installed "
                    f"({nvidia.library_error}), so no framework can use it{wheels}."
                ),
                fix=(
                    f"{install} torch's CUDA wheels and "
                    "tensorflow[and-cuda] bring their own CUDA runtime and cuDNN, so they need no "
                    "CUDA Toolkit"
                    + (
                        f"; CuPy does: {cupy_toolkit_text(cupy_wheel)}."
                        if (
                            cupy_wheel := next(
                                (fw for fw in cuda_wheels if fw.name == "cupy"), None
                            )
                        )
                        else "."
                    )
                ),
            )
        ]
    if nvidia.init_error and nvidia.init_error_code != CUDA_ERROR_NO_DEVICE:
        return [
            Finding(
                code="nvidia-driver-init-failed",
                severity="error",
                message=f"The NVIDIA driver is installed but failed to start: {nvidia.init_error}.",
                fix=(
                    "Run nvidia-smi for the driver's own diagnosis; a driver update without "
                    "a reboot (library and kernel module out of step) is a common cause, "
                    "and a reboot fixes it."
                ),
            )
        ]
    if nvidia.init_error and "CUDA_VISIBLE_DEVICES" not in env:
        return [
            Finding(
                code="nvidia-driver-sees-no-gpu",
                severity="warning",
                message=(
                    f"The NVIDIA driver is installed and {_gpu_names(nvidia)} is present, but the "
                    f"driver reports no usable GPU ({nvidia.init_error})."
                ),
                fix=(
                    "In a container, start it with the GPU passed in (docker run --gpus all ...); "
                    "otherwise run nvidia-smi to see the driver's diagnosis."
                ),
            )
        ]
    return []


def _rule_wheel_vs_driver(
    nvidia: NvidiaInfo, cuda_wheels: list[FrameworkInfo], system: str, wsl: bool = False
) -> list[Finding]:
    """A CUDA wheel newer than the driver (scenario 2), CuPy's wheel/driver mismatch (scenario 4)."""
    driver_major = nvidia.cuda_driver_major
    if driver_major is None:
        return []
    findings = []
    driver = _driver_words(nvidia)
    for fw in cuda_wheels:
        major = fw.cuda_major or 0
        if fw.name == "cupy" and major != driver_major:
            replacement = f"cupy-cuda{driver_major}x"
            swap = f"pip uninstall -y {_dist(fw)} && pip install {replacement}"
            if major > driver_major:
                severity: Severity = "error"
                consequence = ", so CuPy cannot run."
                fix = f"Install the CuPy wheel for your driver: {swap}; or update to {min_driver_text(major, system, wsl)}."
                if driver_major < 11:
                    fix = f"Update to {min_driver_text(major, system, wsl)}."
            else:
                severity = "info"
                consequence = (
                    "; it works (drivers run older CUDA versions), but "
                    f"{replacement} matches your driver."
                )
                fix = f"Optional: {swap}"
            findings.append(
                Finding(
                    code="cupy-cuda-mismatch",
                    severity=severity,
                    message=(
                        f"{_dist(fw)} is built for CUDA {major}, but {driver} supports CUDA "
                        f"{nvidia.cuda_driver_version}{consequence}"
                    ),
                    fix=fix,
                )
            )
        elif fw.name != "cupy" and major > driver_major:
            alternative = ""
            if fw.name == "torch" and driver_major >= 12:
                alternative = f"; or install a build for your driver: {_torch_cuda_install(driver_major, system, wsl)}"
            findings.append(
                Finding(
                    code=f"{fw.name}-driver-too-old",
                    severity="error",
                    message=(
                        f"{fw.display_name} {fw.version} is built for CUDA {fw.cuda_version}, but "
                        f"{driver} supports only CUDA {nvidia.cuda_driver_version}, so "
                        f"{fw.display_name} cannot use the GPU."
                    ),
                    fix=f"Update to {min_driver_text(major, system, wsl)} (CUDA {major}.x){alternative}.",
                )
            )
    return findings


def _rule_torch(
    torch: FrameworkInfo | None,
    nvidia: NvidiaInfo,
    system: str,
    env: Mapping[str, str],
    wsl: bool = False,
) -> list[Finding]:
    if torch is None or not torch.usable:
        return []
    findings = []
    if nvidia.hardware_present and not torch.built_with_cuda and not torch.built_with_rocm:
        findings.append(
            Finding(
                code="torch-cpu-build",
                severity="error",
                message=(
                    f"This machine has {_gpu_names(nvidia)}, but torch {torch.version} is a "
                    "CPU-only build, so it cannot use the GPU."
                ),
                fix=f"Install a CUDA build of torch: {_torch_cuda_install(nvidia.cuda_driver_major, system, wsl)}",
            )
        )
    driver_major = nvidia.cuda_driver_major
    cuda_devices = [d for d in torch.devices if d.kind == "cuda"]
    hidden = env.get("CUDA_VISIBLE_DEVICES")
    if (
        torch.built_with_cuda
        and not cuda_devices
        and driver_major is not None
        and driver_major >= (torch.cuda_major or 0)
        and (nvidia.init_error is None or hidden is not None)  # else a driver finding says why
    ):
        if hidden is not None:
            what = "every GPU" if hidden.strip() in ("", "-1") else "the GPUs it does not list"
            reason = f" CUDA_VISIBLE_DEVICES is set to {hidden!r}, which hides {what}."
            fix = (
                "Unset it before Python starts (unset CUDA_VISIBLE_DEVICES), or list the GPU "
                "to use (CUDA_VISIBLE_DEVICES=0); in a notebook, change it before importing torch."
            )
        else:
            reason = f" torch says: {torch.device_error}." if torch.device_error else ""
            fix = (
                'Run python -c "import torch; torch.cuda.init()" to see CUDA\'s own error, '
                "and nvidia-smi to check that the driver sees the GPU."
            )
        findings.append(
            Finding(
                code="torch-cuda-unavailable",
                severity="warning",
                message=(
                    f"torch {torch.version} is a CUDA {torch.cuda_version} build and the driver "
                    f"supports CUDA {nvidia.cuda_driver_version}, but torch.cuda.is_available() "
                    f"is False.{reason}"
                ),
                fix=fix,
            )
        )
    return findings


def _tf_windows_without_gpu(tf: FrameworkInfo, system: str) -> bool:
    return system == "Windows" and _version_tuple(tf.version) > (2, 10)


def _rule_tensorflow(
    tf: FrameworkInfo | None,
    torch: FrameworkInfo | None,
    nvidia: NvidiaInfo,
    system: str,
    env: Mapping[str, str],
) -> list[Finding]:
    if tf is None or not tf.usable:
        return []
    findings = []
    if _tf_windows_without_gpu(tf, system):
        findings.append(
            Finding(
                code="tensorflow-windows-no-gpu",
                severity="warning" if nvidia.hardware_present else "info",
                message=(
                    f"TensorFlow {tf.version} has no GPU support on native Windows (2.10 was the "
                    "last release with it), so it runs on the CPU."
                ),
                fix=(
                    f"Use WSL2 (Ubuntu) and run {_TF_AND_CUDA} there; or, on native Windows, "
                    "pip install 'tensorflow<2.11' (Python <= 3.10, with CUDA 11.2 and cuDNN 8.1 installed)."
                ),
            )
        )
    torch_gpu = torch is not None and torch.usable and torch.gpu_available
    if torch_gpu and not tf.gpu_available and not _tf_windows_without_gpu(tf, system):
        if system == "Darwin":
            why, fix = "needs Apple's Metal plug-in", "pip install tensorflow-metal"
        elif "tensorflow-cpu" in tf.distributions:
            why = "is installed as tensorflow-cpu, which has no GPU support"
            fix = f"pip uninstall -y tensorflow-cpu && {_TF_AND_CUDA} (Linux or WSL2)"
        elif tf.built_with_cuda:
            why = "is a CUDA build but could not load the CUDA and cuDNN libraries it needs"
            fix = f"{_TF_AND_CUDA} (Linux or WSL2) installs the versions it was built against"
        else:
            why = "is a build without GPU support"
            fix = f"{_TF_AND_CUDA} (Linux or WSL2)"
        findings.append(
            Finding(
                code="tensorflow-no-gpu",
                severity="warning",
                message=f"torch sees the GPU, but TensorFlow {tf.version} does not: it {why}.",
                fix=fix + ".",
            )
        )
    growth_env = env.get("TF_FORCE_GPU_ALLOW_GROWTH", "").strip().lower() == "true"
    if tf.gpu_available and tf.memory_growth is not True and not growth_env:
        findings.append(
            Finding(
                code="tensorflow-memory-growth",
                severity="warning",
                message=(
                    "TensorFlow will reserve nearly all GPU memory the first time it uses the GPU, "
                    "so torch or CuPy in the same process (or notebook kernel) can run out of memory."
                ),
                fix=(
                    "Before TensorFlow touches the GPU, run: for gpu in "
                    "tf.config.list_physical_devices('GPU'): "
                    "tf.config.experimental.set_memory_growth(gpu, True); or set "
                    "TF_FORCE_GPU_ALLOW_GROWTH=true before starting Python or Jupyter."
                ),
            )
        )
    return findings


def cupy_toolkit_text(cupy: FrameworkInfo) -> str:
    """What CuPy needs besides the driver: it compiles its kernels at run time (NVRTC).

    CuPy's install guide: "You need to install CUDA Toolkit ... locally to use
    these packages", or the ``[ctk]`` extra, which installs the toolkit's
    libraries from pip (docs.cupy.dev/en/stable/install.html).
    """
    return (
        "a CUDA Toolkit, or the wheel's [ctk] extra that brings its libraries from pip "
        f'(pip install "{_dist(cupy)}[ctk]"): the wheel does not bundle the CUDA libraries it '
        "loads (NVRTC, with which it compiles its kernels at run time, cuBLAS, cuFFT and others)"
    )


def _rule_cupy_toolkit(
    cupy: FrameworkInfo | None, nvidia: NvidiaInfo, toolkit: bool | None
) -> list[Finding]:
    """A CuPy CUDA wheel on a GPU machine where neither a toolkit nor the [ctk] extra is found."""
    if (
        cupy is None
        or toolkit is not False
        or not cupy.built_with_cuda
        or not nvidia.hardware_present
    ):
        return []
    return [
        Finding(
            code="cupy-without-toolkit",
            severity="warning",
            message=(
                f"{_dist(cupy)} is installed, but no CUDA Toolkit was found (no nvcc on PATH, "
                "no CUDA_PATH or /usr/local/cuda) and its [ctk] extra is not installed: CuPy "
                "imports, but its first kernel fails to compile."
            ),
            fix=f"Install {cupy_toolkit_text(cupy)}.",
        )
    ]


def _rule_cupy_wheels(cupy: FrameworkInfo | None, nvidia: NvidiaInfo) -> list[Finding]:
    if cupy is None or len(cupy.distributions) < 2:
        return []
    keep = (
        f"cupy-cuda{nvidia.cuda_driver_major}x"
        if nvidia.cuda_driver_major
        else cupy.distributions[-1]
    )
    return [
        Finding(
            code="cupy-multiple-wheels",
            severity="error",
            message=(
                f"Several CuPy wheels are installed at once ({', '.join(cupy.distributions)}); "
                "they overwrite each other's files."
            ),
            fix=f"pip uninstall -y {' '.join(cupy.distributions)} && pip install {keep}",
        )
    ]


def _rule_no_gpu(
    nvidia: NvidiaInfo, frameworks: Sequence[FrameworkInfo], env: Mapping[str, str], wsl: bool
) -> list[Finding]:
    if nvidia.hardware_present or any(fw.gpu_available for fw in frameworks):
        return []
    if nvidia.library is not None and "CUDA_VISIBLE_DEVICES" in env:
        return []  # a driver, with its GPUs possibly hidden: torch-cuda-unavailable says so
    fix = (
        "Nothing to do. To run the GPU cells yourself, open the course on a machine with an "
        "NVIDIA GPU (for example Colab with a GPU runtime) and run labkit doctor there."
    )
    if wsl:
        fix += (
            " In WSL2: if this PC has an NVIDIA GPU, install the NVIDIA driver on Windows "
            "(not inside WSL); WSL2 then sees it."
        )
    return [
        Finding(
            code="no-gpu",
            severity="info",
            message=(
                (
                    "No GPU visible (the reference profile hides any there is)"
                    if nvidia.not_probed
                    else "No GPU on this machine"
                )
                + ": the course runs on the CPU; each GPU-only cell says "
                "what it would show, and shows a recording from a real GPU where the kit "
                "ships one (labkit/reference/)."
            ),
            fix=fix,
        )
    ]


def diagnose(
    nvidia: NvidiaInfo,
    frameworks: Sequence[FrameworkInfo],
    *,
    system: str,
    env: Mapping[str, str],
    wsl: bool = False,
    cuda_toolkit: bool | None = None,
) -> tuple[Finding, ...]:
    """Findings for these facts, errors first.

    ``system`` is ``platform.system()`` ("Linux", "Windows", "Darwin"); ``env``
    the environment variables that matter (CUDA_VISIBLE_DEVICES,
    TF_FORCE_GPU_ALLOW_GROWTH); ``wsl`` whether Linux runs under WSL2;
    ``cuda_toolkit`` whether a CUDA Toolkit or CuPy's [ctk] libraries were
    found (None: not looked for).
    """
    by_name = {fw.name: fw for fw in frameworks}
    cuda_wheels = [fw for fw in frameworks if fw.usable and fw.built_with_cuda and fw.cuda_major]
    findings = [
        *_rule_broken(frameworks),
        *_rule_driver(nvidia, cuda_wheels, system, env, wsl),
        *_rule_wheel_vs_driver(nvidia, cuda_wheels, system, wsl),
        *_rule_torch(by_name.get("torch"), nvidia, system, env, wsl),
        *_rule_tensorflow(by_name.get("tensorflow"), by_name.get("torch"), nvidia, system, env),
        *_rule_cupy_wheels(by_name.get("cupy"), nvidia),
        *_rule_cupy_toolkit(by_name.get("cupy"), nvidia, cuda_toolkit),
        *_rule_no_gpu(nvidia, frameworks, env, wsl),
    ]
    order = {severity: i for i, severity in enumerate(SEVERITIES)}
    return tuple(sorted(findings, key=lambda f: order[f.severity]))
