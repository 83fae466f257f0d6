"""torch, TensorFlow and CuPy: how each was built and which devices it sees.

Each probe imports its framework (only here, only when asked) and turns
whatever it finds into a :class:`FrameworkInfo`. A missing framework is
``installed=False``; a broken one (an ``OSError`` for a missing ``.so``, an
exception half-way through the import) becomes ``error=...``. Nothing here
raises, because one broken framework must not hide the report on the others.

Probe order matters: torch and CuPy before TensorFlow, since importing
triton (which torch may pull in) after TensorFlow kills the process.
"""

from __future__ import annotations

import contextlib
import functools
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

from labkit.core.optional import MissingPackageError, import_optional, is_installed
from labkit.core.validate import check_choice
from labkit.machine.nvidia import (
    DriverGpu,
    NvidiaInfo,
    cuda_version_text,
    format_uuid,
    normalize_uuid,
    theoretical_bandwidth_gb_per_s,
)

#: The frameworks a report covers, in the order they are printed.
FRAMEWORKS: tuple[str, ...] = ("torch", "tensorflow", "cupy")
#: The order they are imported in: TensorFlow last (see the module docstring).
PROBE_ORDER: tuple[str, ...] = ("torch", "cupy", "tensorflow")
DISPLAY_NAMES: dict[str, str] = {"torch": "torch", "cupy": "CuPy", "tensorflow": "TensorFlow"}


@dataclass(frozen=True)
class GpuDevice:
    """One accelerator as a framework sees it.

    ``kind`` is how the framework addresses it: "cuda", "rocm", "mps", "xpu"
    or "gpu" (TensorFlow's plug-in devices). Fields the framework does not
    expose are filled from the NVIDIA driver when the device can be matched
    by UUID (or by index and name), and are ``None`` otherwise.
    """

    index: int
    kind: str
    name: str
    compute_capability: str | None = None
    sm_count: int | None = None
    memory_bytes: int | None = None
    bandwidth_gb_per_s: float | None = None
    uuid: str | None = None


@dataclass(frozen=True)
class FrameworkInfo:
    """What one framework is, how it was built, and what it can run on.

    ``cuda_major`` is the CUDA major version the installed wheel needs from
    the driver (12 for ``cupy-cuda12x`` or a torch ``+cu128`` build); it is
    what decides whether the driver is new enough. ``memory_growth`` is
    TensorFlow's: whether every visible GPU has memory growth set.
    """

    name: str
    installed: bool
    version: str | None = None
    distributions: tuple[str, ...] = ()
    built_with_cuda: bool | None = None
    built_with_rocm: bool | None = None
    cuda_version: str | None = None
    cuda_major: int | None = None
    cudnn_version: str | None = None
    gpu_available: bool = False
    devices: tuple[GpuDevice, ...] = ()
    device_error: str | None = None
    mps_built: bool | None = None
    mps_available: bool | None = None
    memory_growth: bool | None = None
    error: str | None = None

    @property
    def display_name(self) -> str:
        return DISPLAY_NAMES.get(self.name, self.name)

    @property
    def usable(self) -> bool:
        """Installed and imported without error."""
        return self.installed and self.error is None


@functools.lru_cache(maxsize=1)
def _all_distributions() -> dict[str, list[str]]:
    # Scans every installed distribution (~0.1 s), so once per report.
    import importlib.metadata  # ~25 ms to import: only when a report is made

    return dict(importlib.metadata.packages_distributions())


def clear_distribution_cache() -> None:
    """Forget the installed distributions, e.g. after a ``%pip install`` in the notebook."""
    _all_distributions.cache_clear()


def distributions_of(module: str) -> tuple[str, ...]:
    """The pip distributions that install ``module`` ("cupy" -> ("cupy-cuda12x",)), normalised."""
    names = _all_distributions().get(module, [])
    return tuple(sorted({re.sub(r"[-_.]+", "-", n).lower() for n in names}))


def cupy_wheel_cuda_major(distribution: str) -> int | None:
    """The CUDA major version a CuPy wheel targets: cupy-cuda12x -> 12, cupy-cuda117 -> 11."""
    match = re.fullmatch(r"cupy-cuda(\d+)x", distribution)
    if match:
        return int(match.group(1))
    match = re.fullmatch(r"cupy-cuda(\d\d)\d", distribution)  # pre-v12 wheels: cupy-cuda117
    return int(match.group(1)) if match else None


def cudnn_version_text(version: int) -> str:
    """cuDNN's integer version as text: 90100 -> "9.1.0" (cuDNN 9), 8902 -> "8.9.2" (cuDNN 8)."""
    if version >= 90000:
        return f"{version // 10000}.{(version % 10000) // 100}.{version % 100}"
    return f"{version // 1000}.{(version % 1000) // 100}.{version % 100}"


def _major(version: str | None) -> int | None:
    match = re.match(r"\s*(\d+)", version or "")
    return int(match.group(1)) if match else None


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return text if len(text) <= 300 else text[:297] + "..."


def _dist_version(distributions: tuple[str, ...]) -> str | None:
    import importlib.metadata

    for dist in distributions:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _match_driver(device: GpuDevice, driver: NvidiaInfo | None) -> DriverGpu | None:
    """The driver's view of ``device``: by UUID, else by index when the names agree."""
    if driver is None or device.kind != "cuda":
        return None
    uuid = normalize_uuid(device.uuid)
    for candidate in driver.devices:
        if uuid and normalize_uuid(candidate.uuid) == uuid:
            return candidate
    for candidate in driver.devices:
        if candidate.index == device.index and candidate.name == device.name:
            return candidate
    return None


def fill_from_driver(device: GpuDevice, driver: NvidiaInfo | None) -> GpuDevice:
    """Fill the fields a framework leaves empty (often bandwidth) from the driver probe."""
    match = _match_driver(device, driver)
    if match is None:
        return device
    return replace(
        device,
        compute_capability=device.compute_capability or match.compute_capability,
        sm_count=device.sm_count or match.sm_count,
        memory_bytes=device.memory_bytes or match.memory_bytes,
        bandwidth_gb_per_s=device.bandwidth_gb_per_s or match.bandwidth_gb_per_s,
        uuid=device.uuid or match.uuid,
    )


def _torch_uuid(value: object) -> str | None:
    """torch's ``_CUuuid`` (16 bytes; str() is the bare 8-4-4-4-12 form) as text."""
    if value is None:
        return None
    raw = getattr(value, "bytes", None)
    if isinstance(raw, bytes) and len(raw) == 16:
        return format_uuid(raw)
    return normalize_uuid(str(value))


def _probe_torch(torch: ModuleType, driver: NvidiaInfo | None) -> dict[str, Any]:
    cuda = getattr(torch.version, "cuda", None)
    hip = getattr(torch.version, "hip", None)
    facts: dict[str, Any] = {
        "version": torch.__version__,
        "built_with_cuda": cuda is not None,
        "built_with_rocm": hip is not None,
        "cuda_version": cuda,
        "cuda_major": _major(cuda),
    }
    if cuda or hip:
        try:
            cudnn = torch.backends.cudnn.version()
            facts["cudnn_version"] = cudnn_version_text(cudnn) if cudnn else None
        except Exception:  # cuDNN's library failed to load: leave it unknown
            facts["cudnn_version"] = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        available = bool(torch.cuda.is_available())
    devices: list[GpuDevice] = []
    if available:
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            uuid = getattr(p, "uuid", None)
            device = GpuDevice(
                index=i,
                kind="rocm" if hip else "cuda",
                name=p.name,
                compute_capability=getattr(p, "gcnArchName", None)
                if hip
                else f"{p.major}.{p.minor}",
                sm_count=p.multi_processor_count,
                memory_bytes=p.total_memory,
                bandwidth_gb_per_s=theoretical_bandwidth_gb_per_s(
                    getattr(p, "memory_clock_rate", None), getattr(p, "memory_bus_width", None)
                ),
                uuid=_torch_uuid(uuid),
            )
            devices.append(fill_from_driver(device, driver))
    elif caught and (cuda or hip):
        facts["device_error"] = str(caught[-1].message).strip().splitlines()[0]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None:
        facts["mps_built"] = bool(mps.is_built())
        facts["mps_available"] = bool(mps.is_available())
        if facts["mps_available"]:
            devices.append(GpuDevice(index=0, kind="mps", name="Apple GPU (Metal, unified memory)"))
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        for i in range(xpu.device_count()):
            p = xpu.get_device_properties(i)
            devices.append(GpuDevice(index=i, kind="xpu", name=p.name, memory_bytes=p.total_memory))
    facts["devices"] = tuple(devices)
    facts["gpu_available"] = bool(devices)
    return facts


def _probe_cupy(
    cupy: ModuleType, driver: NvidiaInfo | None, dists: tuple[str, ...]
) -> dict[str, Any]:
    runtime = cupy.cuda.runtime
    hip = bool(getattr(runtime, "is_hip", False))
    majors = [m for m in (cupy_wheel_cuda_major(d) for d in dists) if m is not None]
    facts: dict[str, Any] = {
        "version": cupy.__version__,
        "built_with_cuda": not hip,
        "built_with_rocm": hip,
    }
    if not hip:
        version = runtime.runtimeGetVersion()  # the CUDA version CuPy was built for
        facts["cuda_version"] = cuda_version_text(version)
        facts["cuda_major"] = majors[0] if len(majors) == 1 else version // 1000
    cudnn = getattr(cupy.cuda, "cudnn", None)  # CuPy 14 no longer wraps cuDNN
    if cudnn is not None:
        with contextlib.suppress(Exception):  # a cuDNN that cannot say: its version stays unknown
            facts["cudnn_version"] = cudnn_version_text(cudnn.getVersion())
    try:
        count = runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError: no driver, or one too old
        facts["device_error"] = _one_line(exc)
        count = 0
    devices = []
    for i in range(count):
        p = runtime.getDeviceProperties(i)
        name = p.get("name", b"")
        raw_uuid = p.get("uuid")
        device = GpuDevice(
            index=i,
            kind="rocm" if hip else "cuda",
            name=name.decode(errors="replace") if isinstance(name, bytes) else str(name),
            compute_capability=f"{p['major']}.{p['minor']}",
            sm_count=p.get("multiProcessorCount"),
            memory_bytes=p.get("totalGlobalMem"),
            bandwidth_gb_per_s=theoretical_bandwidth_gb_per_s(
                p.get("memoryClockRate"), p.get("memoryBusWidth")
            ),
            uuid=format_uuid(raw_uuid)
            if isinstance(raw_uuid, bytes) and len(raw_uuid) == 16
            else None,
        )
        devices.append(fill_from_driver(device, driver))
    facts["devices"] = tuple(devices)
    facts["gpu_available"] = bool(devices) and bool(cupy.is_available())
    return facts


def _probe_tensorflow(tf: ModuleType, driver: NvidiaInfo | None) -> dict[str, Any]:
    build = dict(tf.sysconfig.get_build_info())
    built_cuda = bool(tf.test.is_built_with_cuda())
    built_rocm = bool(tf.test.is_built_with_rocm())
    cuda_version = build.get("cuda_version") if built_cuda else None
    gpus = tf.config.list_physical_devices("GPU")
    devices = []
    for i, gpu in enumerate(gpus):
        details = tf.config.experimental.get_device_details(gpu)
        cc = details.get("compute_capability")
        kind = "cuda" if built_cuda else "rocm" if built_rocm else "gpu"
        device = GpuDevice(
            index=i,
            kind=kind,
            name=details.get("device_name", gpu.name),
            compute_capability=".".join(str(x) for x in cc) if isinstance(cc, tuple) else cc,
        )
        devices.append(fill_from_driver(device, driver))
    growth = all(tf.config.experimental.get_memory_growth(g) for g in gpus) if gpus else None
    return {
        "version": tf.__version__,
        "built_with_cuda": built_cuda,
        "built_with_rocm": built_rocm,
        "cuda_version": str(cuda_version) if cuda_version else None,
        "cuda_major": _major(str(cuda_version)) if cuda_version else None,
        "cudnn_version": str(build["cudnn_version"])
        if built_cuda and build.get("cudnn_version")
        else None,
        "devices": tuple(devices),
        "gpu_available": bool(devices),
        "memory_growth": growth,
    }


_PROBES: dict[str, Callable[..., dict[str, Any]]] = {
    "torch": lambda m, drv, _dists: _probe_torch(m, drv),
    "cupy": _probe_cupy,
    "tensorflow": lambda m, drv, _dists: _probe_tensorflow(m, drv),
}


def probe_framework(
    name: str,
    driver: NvidiaInfo | None = None,
    importer: Callable[[str], ModuleType] = import_optional,
) -> FrameworkInfo:
    """Import ``name`` and describe it; every failure becomes a field, never an exception.

    ``importer`` is the import step, replaceable so tests can simulate a
    broken install without breaking the real one.
    """
    check_choice("name", name, FRAMEWORKS)
    dists = distributions_of(name)
    if not is_installed(name):
        return FrameworkInfo(name=name, installed=False)
    try:
        module = importer(name)
    except MissingPackageError as exc:
        cause = exc.__cause__
        if cause is None:  # not installed after all
            return FrameworkInfo(name=name, installed=False, distributions=dists)
        return FrameworkInfo(
            name=name,
            installed=True,
            version=_dist_version(dists),
            distributions=dists,
            error=f"the import fails: {_one_line(cause)}",
        )
    except Exception as exc:  # OSError for a missing .so, or anything a broken install raises
        return FrameworkInfo(
            name=name,
            installed=True,
            version=_dist_version(dists),
            distributions=dists,
            error=f"the import fails: {_one_line(exc)}",
        )
    try:
        facts = _PROBES[name](module, driver, dists)
    except Exception as exc:
        version = getattr(module, "__version__", None) or _dist_version(dists)
        return FrameworkInfo(
            name=name,
            installed=True,
            version=str(version) if version else None,
            distributions=dists,
            error=f"imported, but probing it failed: {_one_line(exc)}",
        )
    return FrameworkInfo(name=name, installed=True, distributions=dists, **facts)
