"""The NVIDIA driver and hardware, probed without any framework.

Frameworks only say "CUDA is not available"; they cannot say *why*. To tell
"no NVIDIA GPU", "a GPU but no driver" and "a driver too old for this wheel"
apart, this module asks three independent witnesses:

1. the driver library itself (``libcuda``/``nvcuda.dll``) through ``ctypes``:
   the driver's CUDA version and each device's properties;
2. ``nvidia-smi``, when it is on the PATH: the driver version (e.g. 550.54.15);
3. the PCI bus (Linux): NVIDIA hardware is visible there even with no driver.
"""

from __future__ import annotations

import ctypes
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from labkit.core.results import JsonRecord
from labkit.machine import profile as _profile

NVIDIA_PCI_VENDOR = "0x10de"

# CUdevice_attribute values from cuda.h (stable since CUDA 2.x/5.x).
_ATTR_SM_COUNT = 16
_ATTR_MEMORY_CLOCK_KHZ = 36
_ATTR_BUS_WIDTH_BITS = 37
_ATTR_L2_CACHE_BYTES = 38
_ATTR_CC_MAJOR = 75
_ATTR_CC_MINOR = 76


@dataclass(frozen=True)
class DriverGpu:
    """One device as the CUDA driver API describes it (indices honour CUDA_VISIBLE_DEVICES)."""

    index: int
    name: str
    uuid: str | None
    compute_capability: str | None
    sm_count: int | None
    memory_bytes: int | None
    memory_clock_khz: int | None
    memory_bus_width_bits: int | None
    l2_cache_bytes: int | None
    bandwidth_gb_per_s: float | None


@dataclass(frozen=True)
class SmiGpu:
    """One line of ``nvidia-smi --query-gpu=name,driver_version,memory.total``."""

    name: str
    driver_version: str
    memory_bytes: int | None


@dataclass(frozen=True)
class PciGpu:
    """An NVIDIA display/3D controller on the PCI bus, found with or without a driver."""

    address: str
    device_id: str


@dataclass(frozen=True)
class NvidiaInfo(JsonRecord):
    """Everything known about NVIDIA hardware and its driver on this machine.

    ``cuda_driver_version`` is the newest CUDA version the installed driver
    supports ("12.4"), which is what decides whether a CUDA 12 or 13 wheel can
    run. ``driver_version`` is the driver's own release number ("550.54.15").
    """

    library: str | None
    library_error: str | None
    init_error: str | None
    init_error_code: int | None
    cuda_driver_version: str | None
    driver_version: str | None
    devices: tuple[DriverGpu, ...]
    smi_gpus: tuple[SmiGpu, ...]
    smi_error: str | None
    pci_gpus: tuple[PciGpu, ...]
    #: Why nothing was probed (a profile that hides GPUs), or None where the probes ran.
    not_probed: str | None = None

    json_extra = ("hardware_present",)

    @property
    def hardware_present(self) -> bool:
        """Whether any witness saw NVIDIA hardware (a driver library alone is not proof)."""
        return bool(self.devices or self.smi_gpus or self.pci_gpus)

    @property
    def cuda_driver_major(self) -> int | None:
        if not self.cuda_driver_version:
            return None
        return int(self.cuda_driver_version.split(".")[0])


def theoretical_bandwidth_gb_per_s(
    memory_clock_khz: int | None, bus_width_bits: int | None
) -> float | None:
    """Peak DRAM bandwidth in GB/s (10^9 bytes/s) from the clock and bus width CUDA reports.

    CUDA reports the memory clock such that data moves twice per cycle (the
    DDR convention, for HBM and GDDR alike), so the peak is
    ``2 x clock x bus width / 8`` bytes/s. Check: an H100 SXM reports 2619 MHz
    and a 5120-bit bus, giving 3352 GB/s, NVIDIA's 3.35 TB/s.
    """
    if not memory_clock_khz or not bus_width_bits or memory_clock_khz < 0 or bus_width_bits < 0:
        return None
    return 2 * memory_clock_khz * 1e3 * bus_width_bits / 8 / 1e9


def format_uuid(raw: bytes) -> str:
    """16 raw UUID bytes as the 8-4-4-4-12 hex text torch and nvidia-smi use (without "GPU-")."""
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def normalize_uuid(text: str | None) -> str | None:
    """Lower-case a GPU UUID and drop nvidia-smi's "GPU-" prefix so sources can be matched."""
    if not text:
        return None
    text = str(text).strip().lower()
    return text[4:] if text.startswith("gpu-") else text


def cuda_version_text(version: int) -> str:
    """CUDA's integer versions (12040) as text ("12.4")."""
    return f"{version // 1000}.{(version % 1000) // 10}"


def _library_names() -> tuple[str, ...]:
    if sys.platform == "win32":
        return ("nvcuda.dll",)
    if sys.platform == "darwin":
        return ()  # NVIDIA dropped macOS after CUDA 10.2
    return ("libcuda.so.1", "libcuda.so")


#: CUresult values the findings treat specially.
CUDA_ERROR_NO_DEVICE = 100


def _error_name(lib: ctypes.CDLL, code: int) -> str:
    name = ctypes.c_char_p()
    try:
        if lib.cuGetErrorName(code, ctypes.byref(name)) == 0 and name.value:
            return f"{name.value.decode()} ({code})"
    except AttributeError:
        pass
    return f"CUDA driver error ({code})"


@dataclass(frozen=True)
class _LibraryProbe:
    library: str | None = None
    library_error: str | None = None
    init_error: str | None = None
    init_error_code: int | None = None
    cuda_driver_version: str | None = None
    devices: tuple[DriverGpu, ...] = ()


def _probe_driver_library() -> _LibraryProbe:
    """What libcuda says: its CUDA version, and each device once cuInit succeeds."""
    names = _library_names()
    if not names:
        return _LibraryProbe(library_error=f"no NVIDIA driver exists for {platform.system()}")
    lib = None
    errors = []
    for name in names:
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError as exc:
            errors.append(str(exc))
    if lib is None:
        return _LibraryProbe(library_error=errors[0])
    library = names[len(errors)]

    version = ctypes.c_int()
    cuda_version = None
    if lib.cuDriverGetVersion(ctypes.byref(version)) == 0 and version.value > 0:
        cuda_version = cuda_version_text(version.value)
    count = ctypes.c_int()
    status = lib.cuInit(0)
    if status == 0:
        status = lib.cuDeviceGetCount(ctypes.byref(count))
    if status != 0:
        return _LibraryProbe(
            library=library,
            init_error=_error_name(lib, status),
            init_error_code=status,
            cuda_driver_version=cuda_version,
        )
    devices = tuple(_probe_device(lib, i) for i in range(count.value))
    return _LibraryProbe(library=library, cuda_driver_version=cuda_version, devices=devices)


def _probe_device(lib: ctypes.CDLL, index: int) -> DriverGpu:
    device = ctypes.c_int()
    lib.cuDeviceGet(ctypes.byref(device), index)

    def attribute(attr: int) -> int | None:
        value = ctypes.c_int()
        ok = lib.cuDeviceGetAttribute(ctypes.byref(value), attr, device) == 0
        return value.value if ok else None

    name = ctypes.create_string_buffer(256)
    lib.cuDeviceGetName(name, 256, device)
    memory = ctypes.c_size_t()
    memory_bytes = (
        memory.value if lib.cuDeviceTotalMem_v2(ctypes.byref(memory), device) == 0 else None
    )
    raw_uuid = ctypes.create_string_buffer(16)
    uuid = format_uuid(raw_uuid.raw) if lib.cuDeviceGetUuid(raw_uuid, device) == 0 else None
    major, minor = attribute(_ATTR_CC_MAJOR), attribute(_ATTR_CC_MINOR)
    clock_khz, bus_bits = attribute(_ATTR_MEMORY_CLOCK_KHZ), attribute(_ATTR_BUS_WIDTH_BITS)
    return DriverGpu(
        index=index,
        name=name.value.decode(errors="replace"),
        uuid=uuid,
        compute_capability=f"{major}.{minor}" if major is not None and minor is not None else None,
        sm_count=attribute(_ATTR_SM_COUNT),
        memory_bytes=memory_bytes,
        memory_clock_khz=clock_khz,
        memory_bus_width_bits=bus_bits,
        l2_cache_bytes=attribute(_ATTR_L2_CACHE_BYTES),
        bandwidth_gb_per_s=theoretical_bandwidth_gb_per_s(clock_khz, bus_bits),
    )


def parse_smi_output(text: str) -> tuple[SmiGpu, ...]:
    """Parse ``nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader``."""
    gpus = []
    for line in text.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) != 3 or not parts[0]:
            continue
        memory_bytes = None
        fields = parts[2].split()
        if fields and fields[0].isdigit():
            unit = fields[1] if len(fields) > 1 else "MiB"
            memory_bytes = int(fields[0]) * {"KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}.get(
                unit, 1024**2
            )
        gpus.append(SmiGpu(name=parts[0], driver_version=parts[1], memory_bytes=memory_bytes))
    return tuple(gpus)


def _probe_smi(timeout_s: float = 5.0) -> tuple[tuple[SmiGpu, ...], str | None]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return (), "nvidia-smi is not on the PATH"
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return (), f"nvidia-smi did not answer within {timeout_s:g} s"
    except OSError as exc:
        return (), f"nvidia-smi could not run: {exc}"
    if out.returncode != 0:
        message = (out.stdout + out.stderr).strip().splitlines()
        return (), f"nvidia-smi failed: {message[0] if message else f'exit code {out.returncode}'}"
    return parse_smi_output(out.stdout), None


def _probe_pci(root: Path = Path("/sys/bus/pci/devices")) -> tuple[PciGpu, ...]:
    """NVIDIA display (0x0300) and 3D (0x0302) controllers in Linux sysfs."""
    gpus = []
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return ()
    for entry in entries:
        try:
            vendor = (entry / "vendor").read_text().strip().lower()
            klass = (entry / "class").read_text().strip().lower()
            device_id = (entry / "device").read_text().strip().lower()
        except OSError:
            continue
        if vendor == NVIDIA_PCI_VENDOR and klass.startswith("0x03"):
            gpus.append(PciGpu(address=entry.name, device_id=device_id))
    return tuple(gpus)


def _kernel_module_version() -> str | None:
    """The Linux kernel module's version, readable even when nvidia-smi is missing."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    for word in text.split():
        parts = word.split(".")
        if len(parts) >= 2 and all(p.isdigit() for p in parts):
            return word
    return None


def nvidia_info() -> NvidiaInfo:
    """Probe the driver library, nvidia-smi and the PCI bus; never raises for missing pieces.

    ``cuInit`` initialises the driver in this process, as ``torch.cuda.is_available()``
    does, so the usual rule applies afterwards: start worker processes with
    "spawn", not "fork", if they use CUDA. Under a profile that hides GPUs
    (:mod:`labkit.machine.profile`) nothing is probed and no hardware is reported.
    """
    profile = _profile.active()
    if (
        profile is not None and profile.hide_gpu
    ):  # the reference profile plays a machine without a GPU
        hidden = f"not probed: the {_profile.ENV_VAR}={profile.name} profile hides GPUs"
        return NvidiaInfo(
            library=None,
            library_error=hidden,
            init_error=None,
            init_error_code=None,
            cuda_driver_version=None,
            driver_version=None,
            devices=(),
            smi_gpus=(),
            smi_error=hidden,
            pci_gpus=(),
            not_probed=hidden,
        )
    try:
        lib = _probe_driver_library()
    except (OSError, AttributeError) as exc:  # a broken or foreign libcuda
        lib = _LibraryProbe(library_error=f"the driver library is unusable: {exc}")
    smi_gpus, smi_error = _probe_smi()
    pci = _probe_pci() if sys.platform.startswith("linux") else ()
    driver_version = smi_gpus[0].driver_version if smi_gpus else None
    if driver_version is None and sys.platform.startswith("linux"):
        driver_version = _kernel_module_version()
    return NvidiaInfo(
        library=lib.library,
        library_error=lib.library_error,
        init_error=lib.init_error,
        init_error_code=lib.init_error_code,
        cuda_driver_version=lib.cuda_driver_version,
        driver_version=driver_version,
        devices=lib.devices,
        smi_gpus=smi_gpus,
        smi_error=smi_error,
        pci_gpus=pci,
    )
