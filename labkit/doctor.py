"""``labkit doctor``: the device report as an aligned text table, or as JSON.

The text is what a learner pastes into a help request, so it is plain,
aligned and complete; colour (plain ANSI codes, no dependency) is added only
on a terminal and never when NO_COLOR is set (https://no-color.org).
"""

from __future__ import annotations

import json
import math
import numbers
import os
import sys
from collections.abc import Mapping
from typing import TextIO

from labkit._checks import check_bool, check_optional_bool
from labkit._optional import INSTALL_HINTS
from labkit.device import DeviceReport, device_report
from labkit.frameworks import FrameworkInfo, GpuDevice
from labkit.nvidia import NvidiaInfo

_LABEL_WIDTH = 14
_SEVERITY_WIDTH = 9
_ANSI = {"bold": "1", "red": "31", "green": "32", "yellow": "33", "cyan": "36", "dim": "2"}
_SEVERITY_COLOR = {"error": "red", "warning": "yellow", "info": "cyan"}


def format_bytes(n: int | None) -> str:
    """Binary units with 3 significant digits: "48 KiB", "2 MiB", "23.4 GiB"."""
    if n is None:
        return "unknown"
    if isinstance(n, bool) or not isinstance(n, numbers.Real):
        raise TypeError(f"n must be a number of bytes or None, got {type(n).__name__} ({n!r})")
    value = float(n) if n < 2**1000 else math.inf  # float() of a huge int raises OverflowError
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"n must be a finite number of bytes >= 0, got {n!r:.40}")
    unit = "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            break
        value /= 1024
    if value == int(value):  # exact sizes such as caches: "48 KiB", "2 MiB"
        return f"{int(value)} {unit}"
    decimals = 0 if value >= 100 else 1 if value >= 10 else 2
    return f"{value:.{decimals}f} {unit}"


def _paint(text: str, style: str, color: bool) -> str:
    return f"\033[{_ANSI[style]}m{text}\033[0m" if color else text


def use_color(color: bool | None, stream: TextIO, env: Mapping[str, str]) -> bool:
    """Explicit choice wins; otherwise colour only on a terminal with NO_COLOR unset or empty."""
    check_optional_bool("color", color)
    if not isinstance(env, Mapping):
        raise TypeError(f"env must be a mapping such as os.environ, got {type(env).__name__}")
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
    if nvidia.library is None:
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
    if not isinstance(report, DeviceReport):
        raise TypeError(
            f"report must be a DeviceReport from labkit.device_report(), got {type(report).__name__}"
        )
    check_bool("color", color)
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


def run_doctor(as_json: bool = False, color: bool | None = None) -> int:
    """Print the device report; exit code 0 whenever the report could be built.

    TensorFlow's import-time C++ banner is kept off stderr by
    :func:`labkit._optional.import_tensorflow`, so the output stays clean
    without changing TensorFlow's defaults (oneDNN stays on).
    """
    check_bool("as_json", as_json)
    check_optional_bool("color", color)
    try:
        report = device_report()
    except Exception as exc:  # a bug in labkit, not in the learner's setup
        print(
            f"labkit doctor: could not build the report: {type(exc).__name__}: {exc}",
            file=sys.stderr,
        )
        return 1
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(format_report(report, color=use_color(color, sys.stdout, os.environ)))
    return 0
