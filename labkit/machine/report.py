"""One call, one report: the CPU, the NVIDIA driver, each framework, and findings.

``device_report()`` is what notebook 00 prints and what ``labkit doctor``
shows. ``pick_device()`` is what every later notebook uses to choose where to
run: the best accelerator a framework can use, falling back to the CPU
without an error, because "no GPU" is the normal case on a student laptop.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from labkit.core.optional import (
    INSTALL_HINTS,
    MissingPackageError,
    import_optional,
    import_tensorflow,
)
from labkit.core.results import JsonRecord
from labkit.core.units import format_bytes
from labkit.core.validate import check_choice, check_torch_device
from labkit.machine.cpu import CpuInfo, cpu_info
from labkit.machine.diagnose import Finding, diagnose
from labkit.machine.frameworks import (
    FRAMEWORKS,
    PROBE_ORDER,
    FrameworkInfo,
    GpuDevice,
    clear_distribution_cache,
    probe_framework,
)
from labkit.machine.nvidia import NvidiaInfo, nvidia_info

#: Environment variables that change what the frameworks see, recorded in the report.
RELEVANT_ENV: tuple[str, ...] = ("CUDA_VISIBLE_DEVICES", "TF_FORCE_GPU_ALLOW_GROWTH")


@dataclass(frozen=True)
class SystemInfo:
    """The operating system and Python the report was made on."""

    os: str
    os_release: str
    wsl: bool
    python_version: str
    labkit_version: str
    cuda_visible_devices: str | None
    tf_force_gpu_allow_growth: str | None


@dataclass(frozen=True)
class DeviceReport(JsonRecord):
    """Everything ``labkit doctor`` knows about this machine; ``print(report)`` shows it as text.

    ``to_dict()`` is the report as JSON-native values (``labkit doctor --json``).
    """

    system: SystemInfo
    cpu: CpuInfo
    nvidia: NvidiaInfo
    frameworks: tuple[FrameworkInfo, ...]
    findings: tuple[Finding, ...]

    json_extra = ("has_gpu",)

    def framework(self, name: str) -> FrameworkInfo | None:
        """The probe of ``name`` ("torch", "tensorflow", "cupy"), or None if it was not probed."""
        return next((fw for fw in self.frameworks if fw.name == name), None)

    @property
    def gpus(self) -> tuple[GpuDevice, ...]:
        """Every accelerator any framework can use (the same GPU may appear once per framework)."""
        return tuple(device for fw in self.frameworks for device in fw.devices)

    @property
    def has_gpu(self) -> bool:
        return any(fw.gpu_available for fw in self.frameworks)

    def __str__(self) -> str:
        return format_report(self, color=False)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """A notebook cell ending in ``report`` shows the text table, not the dataclass repr."""
        printer.text(str(self))


def _is_wsl() -> bool:
    return platform.system() == "Linux" and "microsoft" in platform.release().lower()


def system_info() -> SystemInfo:
    from labkit import __version__

    return SystemInfo(
        os=platform.system() or sys.platform,
        os_release=platform.release(),
        wsl=_is_wsl(),
        python_version=platform.python_version(),
        labkit_version=__version__,
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        tf_force_gpu_allow_growth=os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH"),
    )


def device_report(frameworks: Sequence[str] = FRAMEWORKS) -> DeviceReport:
    """Probe the CPU, the NVIDIA driver and each framework, and diagnose the result.

    Imports the frameworks it probes (torch ~1 s, TensorFlow ~3 s); pass
    ``frameworks=("torch",)`` to skip the others. Never raises because a
    framework is missing or broken: that becomes a field and a finding.
    """
    frameworks = (frameworks,) if isinstance(frameworks, str) else frameworks  # not its letters
    for i, name in enumerate(frameworks):
        check_choice(f"frameworks[{i}]", name, FRAMEWORKS)
    clear_distribution_cache()  # a %pip install since the last report must show up
    system = system_info()
    cpu = cpu_info()
    nvidia = nvidia_info()
    # Import in PROBE_ORDER whatever the caller's order (TensorFlow last), print in FRAMEWORKS order.
    probes = {name: probe_framework(name, nvidia) for name in PROBE_ORDER if name in frameworks}
    probed = tuple(probes[name] for name in FRAMEWORKS if name in probes)
    env = {key: os.environ[key] for key in RELEVANT_ENV if key in os.environ}
    toolkit = cuda_toolkit_found() if "cupy" in probes else None
    findings = diagnose(
        nvidia, probed, system=system.os, env=env, wsl=system.wsl, cuda_toolkit=toolkit
    )
    return DeviceReport(system=system, cpu=cpu, nvidia=nvidia, frameworks=probed, findings=findings)


def cuda_toolkit_found() -> bool:
    """Whether CuPy can find a CUDA Toolkit's NVRTC: nvcc, CUDA_PATH/CUDA_HOME, /usr/local/cuda, or pip's.

    CuPy's ``[ctk]`` extra installs NVRTC as an ``nvidia-cuda-nvrtc*`` (or
    ``cuda-toolkit``) distribution; a system toolkit puts ``nvcc`` on PATH or
    lives where CUDA_PATH or /usr/local/cuda points.
    """
    import importlib.metadata
    import shutil
    from pathlib import Path

    if shutil.which("nvcc") or any(os.environ.get(k) for k in ("CUDA_PATH", "CUDA_HOME")):
        return True
    if Path("/usr/local/cuda").exists():
        return True
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name.startswith("nvidia-cuda-nvrtc") or name == "cuda-toolkit":
            return True
    return False


PICKABLE: tuple[str, ...] = ("torch", "tensorflow", "cupy")


def pick_device(framework: str = "torch") -> Any:
    """The best device ``framework`` can use here, falling back to the CPU (never an error).

    - torch: ``torch.device("cuda")``, else ``"mps"``, else ``"xpu"``, else ``"cpu"``
      (ROCm builds of torch also answer to "cuda").
    - tensorflow: ``"/GPU:0"`` or ``"/CPU:0"``, for ``with tf.device(...)``.
    - cupy: ``cupy.cuda.Device(0)`` when CuPy can run, else the string ``"cpu"``
      (CuPy has no CPU mode: use numpy there).

    Raises ``MissingPackageError`` (with the install command) if the framework
    is not installed, and ``ValueError`` for an unknown framework.
    """
    check_choice("framework", framework, PICKABLE)
    purpose = "pick_device"
    try:
        if framework == "torch":
            torch = import_optional("torch", purpose)
            if torch.cuda.is_available():
                return torch.device("cuda")
            mps = getattr(torch.backends, "mps", None)
            if mps is not None and mps.is_available():
                return torch.device("mps")
            xpu = getattr(torch, "xpu", None)
            if xpu is not None and xpu.is_available():
                return torch.device("xpu")
            return torch.device("cpu")
        if framework == "tensorflow":
            tf = import_tensorflow(purpose)
            return "/GPU:0" if tf.config.list_physical_devices("GPU") else "/CPU:0"
        cupy = import_optional("cupy", purpose)
        return cupy.cuda.Device(0) if cupy.is_available() else "cpu"
    except MissingPackageError as exc:
        if exc.__cause__ is None:
            raise
        raise ImportError(
            f"{framework} is installed but fails to import ({exc.__cause__}); "
            "run `labkit doctor` to see why and how to fix it"
        ) from exc.__cause__
    except OSError as exc:  # a broken install: a shared library that does not load
        raise ImportError(
            f"{framework} is installed but fails to import ({exc}); "
            "run `labkit doctor` to see why and how to fix it"
        ) from exc


#: The devices labkit's CUDA-or-host measurements accept (CUDA events, CUDA memory queries).
CPU_OR_CUDA: tuple[str, ...] = ("cpu", "cuda")


def resolve_device(
    value: Any = None, name: str = "device", *, kinds: Sequence[str] = ("cpu", "cuda", "mps", "xpu")
) -> str:
    """``value`` as a device that exists here: "cpu", "cuda:N" (the index filled in), "mps" or "xpu".

    The one device resolver: every labkit function that takes a device calls
    it (or :func:`resolve_torch_device`). It accepts the spellings of
    :func:`labkit.core.validate.check_torch_device` and ``torch.device``;
    None picks the best of ``kinds`` here (a CUDA GPU when one is usable,
    see :func:`labkit.machine.gpu.has_gpu`, else "cpu"). A kind the function
    cannot measure, or a GPU that is not there, is an error naming the
    argument, not a CUDA assertion from deep inside torch. "cpu" never
    imports torch.
    """
    from labkit.machine.gpu import has_gpu

    spellings = [*kinds, *(f"{kind}:N" for kind in kinds if kind in ("cuda", "xpu"))]
    wrong = (
        f"{name} must be one of {', '.join(map(repr, spellings))} (or None for the best device "
        f"here), got {value!r}"
    )
    if isinstance(value, str):
        value = value.strip().lower()  # " CUDA" is a slip, not another device
    try:
        check_torch_device(value, name)
    except ValueError:
        raise ValueError(wrong) from None
    if value is None:
        if "cuda" in kinds and has_gpu():
            return _cuda_index(name, "cuda")
        if any(kind in kinds for kind in ("mps", "xpu")):
            best = str(pick_device("torch"))
            if best.partition(":")[0] in kinds and not best.startswith("cuda"):
                return best  # under a profile that hides the GPU, cuda is not "best"
        if "cpu" not in kinds:
            raise ValueError(
                f"{name}=None, but none of {', '.join(map(repr, kinds))} is usable here "
                "(`labkit doctor` explains why no GPU is visible)"
            )
        return "cpu"
    text = str(value)
    kind = text.partition(":")[0]
    if kind not in kinds:
        raise ValueError(wrong)
    if kind == "cpu":
        return "cpu"
    if kind == "cuda":
        return _cuda_index(name, text)
    torch = import_optional("torch", f"the {name} argument")
    backend = getattr(torch.backends, "mps", None) if kind == "mps" else None
    backend = backend or getattr(torch, kind, None)
    if backend is None or not backend.is_available():
        raise ValueError(
            f"{name}={text!r}, but torch has no usable {kind} device here; use "
            "None (the best device here) or 'cpu'"
        )
    return text


def _cuda_index(name: str, text: str) -> str:
    """ "cuda" or "cuda:N" as "cuda:N" for a GPU torch can use, else an error naming ``name``."""
    torch = import_optional("torch", f"the {name} argument")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = text.partition(":")[2]
    if count == 0 or (index and int(index) >= count):
        have = f"{count} CUDA GPU{'s' if count != 1 else ''}" if count else "no CUDA GPU"
        raise ValueError(
            f"{name}={text!r}, but torch sees {have} here; use None (the best device here) "
            "or 'cpu' (`labkit doctor` explains why no GPU is visible)"
        )
    return f"cuda:{index or torch.cuda.current_device()}"


def resolve_torch_device(value: Any, name: str = "device") -> Any:
    """:func:`resolve_device` as a ``torch.device`` (None: :func:`labkit.pick_device`'s choice)."""
    torch = import_optional("torch", f"the {name} argument")
    return torch.device(resolve_device(value, name))


# --------------------------------------------------------------------------- as text
# What `labkit doctor` prints and a learner pastes into a help request: plain, aligned,
# complete; colour only on a terminal and never when NO_COLOR is set (https://no-color.org).

_LABEL_WIDTH = 14
_SEVERITY_WIDTH = 9
_ANSI = {"bold": "1", "red": "31", "green": "32", "yellow": "33", "cyan": "36", "dim": "2"}
_SEVERITY_COLOR = {"error": "red", "warning": "yellow", "info": "cyan"}


def _paint(text: str, style: str, color: bool) -> str:
    return f"\033[{_ANSI[style]}m{text}\033[0m" if color else text


def use_color(color: bool | None, stream: TextIO, env: Mapping[str, str]) -> bool:
    """Explicit choice wins; otherwise colour only on a terminal with NO_COLOR unset or empty."""
    if color is not None:
        return color
    if env.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class _Table:
    def __init__(self, color: bool) -> None:
        self.color = color
        self.lines: list[str] = []

    def section(self, title: str) -> None:
        if self.lines:
            self.lines.append("")
        self.lines.append(_paint(title, "bold", self.color))

    def row(self, label: str, value: str) -> None:
        self.lines.append(f"  {label:<{_LABEL_WIDTH}} {value}".rstrip())


def _device_line(device: GpuDevice) -> str:
    details = []
    if device.compute_capability:
        details.append(f"compute capability {device.compute_capability}")
    if device.sm_count:
        details.append(f"{device.sm_count} SMs")
    if device.memory_bytes:
        details.append(format_bytes(device.memory_bytes))
    if device.bandwidth_gb_per_s:
        details.append(f"{device.bandwidth_gb_per_s:.0f} GB/s peak")
    suffix = f" ({', '.join(details)})" if details else ""
    return f"{device.kind}:{device.index}  {device.name}{suffix}"


def _cpu_rows(table: _Table, report: DeviceReport) -> None:
    cpu = report.cpu
    table.section("CPU")
    table.row("model", f"{cpu.model} ({cpu.architecture})")
    physical = f"{cpu.physical_cores} physical" if cpu.physical_cores else "physical unknown"
    table.row("cores", f"{physical}, {cpu.logical_cores or 'unknown'} logical")
    simd = " ".join(cpu.simd_features) or "none detected"
    table.row("SIMD", f"{simd} (from {cpu.simd_source})" if cpu.simd_features else simd)
    limit = getattr(cpu, "memory_limit_bytes", None)
    table.row(
        "memory",
        f"{format_bytes(cpu.memory_total_bytes)} total, "
        f"{format_bytes(cpu.memory_available_bytes)} available"
        + (f" (container limit {format_bytes(limit)})" if limit else ""),
    )
    caches = [
        f"{name} {format_bytes(size)}"
        for name, size in (
            ("L1d", cpu.l1d_cache_bytes),
            ("L2", cpu.l2_cache_bytes),
            ("L3", cpu.l3_cache_bytes),
        )
        if size
    ]
    if caches:
        table.row("caches", ", ".join(caches) + " (per core 0; L3 is usually shared)")


def _nvidia_rows(table: _Table, nvidia: NvidiaInfo, system: str) -> None:
    table.section("NVIDIA driver")
    if nvidia.not_probed:
        table.row("driver", nvidia.not_probed)
    elif nvidia.library is None:
        table.row("driver", f"not found: {nvidia.library_error}")
    else:
        version = f"{nvidia.driver_version}, " if nvidia.driver_version else ""
        cuda = (
            f"supports CUDA <= {nvidia.cuda_driver_version}"
            if nvidia.cuda_driver_version
            else "CUDA version unknown"
        )
        table.row("driver", f"{version}{cuda} ({nvidia.library})")
        if nvidia.init_error:
            table.row("cuInit", f"failed: {nvidia.init_error}")
    for gpu in nvidia.devices:
        details = [
            f"compute capability {gpu.compute_capability}" if gpu.compute_capability else None,
            f"{gpu.sm_count} SMs" if gpu.sm_count else None,
            format_bytes(gpu.memory_bytes) if gpu.memory_bytes else None,
            f"L2 {format_bytes(gpu.l2_cache_bytes)}" if gpu.l2_cache_bytes else None,
            f"{gpu.bandwidth_gb_per_s:.0f} GB/s peak" if gpu.bandwidth_gb_per_s else None,
        ]
        table.row(f"GPU {gpu.index}", f"{gpu.name} ({', '.join(d for d in details if d)})")
        if gpu.uuid:
            table.row("", f"uuid GPU-{gpu.uuid}")
    if nvidia.smi_gpus:
        for smi in nvidia.smi_gpus:
            table.row(
                "nvidia-smi",
                f"{smi.name}, driver {smi.driver_version}, {format_bytes(smi.memory_bytes)}",
            )
    else:
        table.row("nvidia-smi", (nvidia.smi_error or "no GPU listed").removeprefix("nvidia-smi "))
    if nvidia.pci_gpus:
        for pci in nvidia.pci_gpus:
            table.row("PCI", f"NVIDIA device {pci.device_id} at {pci.address}")
    elif nvidia.not_probed:
        table.row("PCI", nvidia.not_probed)
    elif system == "Linux" and not nvidia.devices:  # WSL2 GPUs are not on the PCI bus
        table.row("PCI", "no NVIDIA GPU on the PCI bus")


def _build_text(fw: FrameworkInfo) -> str:
    if fw.built_with_rocm:
        return "ROCm"
    if fw.built_with_cuda:
        parts = [f"CUDA {fw.cuda_version}" if fw.cuda_version else "CUDA"]
        if fw.cudnn_version:
            parts.append(f"cuDNN {fw.cudnn_version}")
        return ", ".join(parts)
    return "CPU only" if fw.built_with_cuda is False else "unknown"


def _framework_rows(table: _Table, fw: FrameworkInfo) -> None:
    table.section(fw.display_name)
    if not fw.installed:
        table.row(
            "installed", f"no; install with: {INSTALL_HINTS.get(fw.name, 'pip install ' + fw.name)}"
        )
        return
    dists = f" (pip: {', '.join(fw.distributions)})" if fw.distributions else ""
    table.row("version", f"{fw.version or 'unknown'}{dists}")
    if fw.error:
        table.row("error", _paint(fw.error, "red", table.color))
        return
    table.row("build", _build_text(fw))
    if fw.devices:
        for i, device in enumerate(fw.devices):
            table.row(
                "devices" if i == 0 else "", _paint(_device_line(device), "green", table.color)
            )
    else:
        table.row("devices", f"no GPU: {fw.device_error}" if fw.device_error else "no GPU")
    if fw.mps_built:
        table.row("MPS", "built, " + ("available" if fw.mps_available else "not available"))
    if fw.memory_growth is not None:
        table.row(
            "memory growth",
            "on" if fw.memory_growth else "off (TensorFlow reserves all GPU memory)",
        )


def _finding_rows(table: _Table, report: DeviceReport) -> None:
    table.section("Findings")
    if not report.findings:
        table.lines.append("  none: this setup looks right")
        return
    indent = " " * (2 + _SEVERITY_WIDTH)
    for finding in report.findings:
        label = f"{finding.severity:<{_SEVERITY_WIDTH}}"
        label = _paint(label, _SEVERITY_COLOR[finding.severity], table.color)
        table.lines.append(f"  {label}{finding.message} [{finding.code}]")
        table.lines.append(f"{indent}Fix: {finding.fix}")


def format_report(report: DeviceReport, color: bool = False) -> str:
    """The report as aligned text in sections: CPU, NVIDIA driver, each framework, findings."""
    table = _Table(color)
    s = report.system
    wsl = " (WSL2)" if s.wsl else ""
    table.lines.append(
        f"gpu-labkit {s.labkit_version} on {s.os} {s.os_release}{wsl}, Python {s.python_version}"
    )
    for key, value in (
        ("CUDA_VISIBLE_DEVICES", s.cuda_visible_devices),
        ("TF_FORCE_GPU_ALLOW_GROWTH", s.tf_force_gpu_allow_growth),
    ):
        if value is not None:
            table.lines.append(f"  {key}={value!r}")
    _cpu_rows(table, report)
    _nvidia_rows(table, report.nvidia, report.system.os)
    for fw in report.frameworks:
        _framework_rows(table, fw)
    _finding_rows(table, report)
    return "\n".join(table.lines)
