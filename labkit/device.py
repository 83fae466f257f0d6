"""One call, one report: the CPU, the NVIDIA driver, each framework, and findings.

``device_report()`` is what notebook 00 prints and what ``labkit doctor``
shows. ``pick_device()`` is what every later notebook uses to choose where to
run: the best accelerator a framework can use, falling back to the CPU
without an error, because "no GPU" is the normal case on a student laptop.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from labkit._optional import MissingPackageError, import_optional, import_tensorflow
from labkit.cpu import CpuInfo, cpu_info
from labkit.diagnose import Finding, diagnose
from labkit.frameworks import (
    FRAMEWORKS,
    PROBE_ORDER,
    FrameworkInfo,
    GpuDevice,
    clear_distribution_cache,
    probe_framework,
)
from labkit.nvidia import NvidiaInfo, nvidia_info

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
class DeviceReport:
    """Everything ``labkit doctor`` knows about this machine; ``print(report)`` shows it as text."""

    system: SystemInfo
    cpu: CpuInfo
    nvidia: NvidiaInfo
    frameworks: tuple[FrameworkInfo, ...]
    findings: tuple[Finding, ...]

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

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-native values (dicts, lists, str, int, float, bool, None)."""
        data = _json_native(dataclasses.asdict(self))
        data["nvidia"]["hardware_present"] = self.nvidia.hardware_present
        data["has_gpu"] = self.has_gpu
        return data

    def __str__(self) -> str:
        from labkit.doctor import format_report

        return format_report(self, color=False)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """A notebook cell ending in ``report`` shows the text table, not the dataclass repr."""
        printer.text(str(self))


def _json_native(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_native(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_native(v) for v in value]
    return value


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
    if (
        isinstance(frameworks, (str, bytes))
        or not isinstance(frameworks, Sequence)
        or not all(isinstance(f, str) for f in frameworks)
    ):
        raise TypeError(
            f"frameworks must be a sequence of names such as ('torch',), got {frameworks!r}"
        )
    unknown = [f for f in frameworks if f not in FRAMEWORKS]
    if unknown:
        raise ValueError(f"frameworks must be chosen from {', '.join(FRAMEWORKS)}; got {unknown}")
    clear_distribution_cache()  # a %pip install since the last report must show up
    system = system_info()
    cpu = cpu_info()
    nvidia = nvidia_info()
    # Import in PROBE_ORDER whatever the caller's order (TensorFlow last), print in FRAMEWORKS order.
    probes = {name: probe_framework(name, nvidia) for name in PROBE_ORDER if name in frameworks}
    probed = tuple(probes[name] for name in FRAMEWORKS if name in probes)
    env = {key: os.environ[key] for key in RELEVANT_ENV if key in os.environ}
    findings = diagnose(nvidia, probed, system=system.os, env=env, wsl=system.wsl)
    return DeviceReport(system=system, cpu=cpu, nvidia=nvidia, frameworks=probed, findings=findings)


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
    if not isinstance(framework, str) or framework not in PICKABLE:
        raise ValueError(
            f"framework must be one of {', '.join(repr(p) for p in PICKABLE)}; got {framework!r}"
        )
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
