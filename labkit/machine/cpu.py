"""What the CPU can do: model, cores, SIMD width, memory and caches.

The course compares every GPU number with the CPU it runs next to, so the CPU
side of the comparison has to be described as carefully as the GPU: a laptop
with AVX2 and a server with AVX-512 and AMX can differ by 10x on the same
matmul. Everything here is read from the operating system (``/proc``,
``/sys``, ``sysctl``, the Windows registry), which is cheap and needs no
framework; numpy's own CPU dispatch table is the cross-platform fallback.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

#: Readable SIMD names, in the order they are printed, with the Linux
#: ``/proc/cpuinfo`` flags that imply each one. These are the extensions that
#: decide how fast a CPU runs the course's matmuls and elementwise kernels.
_LINUX_FLAGS: dict[str, tuple[str, ...]] = {
    "SSE4.2": ("sse4_2",),
    "AVX": ("avx",),
    "AVX2": ("avx2",),
    "FMA3": ("fma",),
    "AVX512F": ("avx512f",),
    "AVX512_VNNI": ("avx512_vnni",),
    "AVX512_BF16": ("avx512_bf16",),
    "AVX512_FP16": ("avx512_fp16",),
    "AMX": ("amx_tile",),
    "AMX_FP16": ("amx_fp16",),
    "AVX_NE_CONVERT": ("avx_ne_convert",),
    "NEON": ("asimd", "neon"),
    "BF16": ("bf16",),
    "SVE": ("sve",),
    "SVE2": ("sve2",),
    "SME": ("sme",),
}

#: macOS ``sysctl hw.optional.*`` keys (Intel and Apple silicon spellings).
_MACOS_SYSCTL: dict[str, tuple[str, ...]] = {
    "SSE4.2": ("hw.optional.sse4_2",),
    "AVX": ("hw.optional.avx1_0",),
    "AVX2": ("hw.optional.avx2_0",),
    "FMA3": ("hw.optional.fma",),
    "AVX512F": ("hw.optional.avx512f",),
    "AVX512_VNNI": ("hw.optional.avx512vnni",),
    "NEON": ("hw.optional.neon", "hw.optional.AdvSIMD"),
    "BF16": ("hw.optional.arm.FEAT_BF16",),
    "SME": ("hw.optional.arm.FEAT_SME",),
}

#: numpy ``__cpu_features__`` keys for each readable name.
_NUMPY_FEATURES: dict[str, tuple[str, ...]] = {
    "SSE4.2": ("SSE42",),
    "AVX": ("AVX",),
    "AVX2": ("AVX2",),
    "FMA3": ("FMA3",),
    "AVX512F": ("AVX512F",),
    "AVX512_VNNI": ("AVX512VNNI",),
    "AVX512_BF16": ("AVX512BF16",),
    "AVX512_FP16": ("AVX512FP16",),
    "NEON": ("ASIMD", "NEON"),
    "SVE": ("SVE",),
}


@dataclass(frozen=True)
class CpuInfo:
    """The host CPU and memory, as the operating system reports them.

    Fields are ``None`` where the platform does not expose a value cheaply;
    nothing is guessed. Cache sizes are those seen by core 0 (L3 is usually
    shared by all cores).
    """

    model: str
    architecture: str
    physical_cores: int | None
    logical_cores: int | None
    simd_features: tuple[str, ...]
    simd_source: str
    memory_total_bytes: int | None
    memory_available_bytes: int | None
    l1d_cache_bytes: int | None
    l2_cache_bytes: int | None
    l3_cache_bytes: int | None
    #: A container's (cgroup's) memory limit below the host's total, else None. Then
    #: ``memory_available_bytes`` is what is left under the limit, if that is less.
    memory_limit_bytes: int | None = None


def simd_from_flags(flags: Iterable[str]) -> tuple[str, ...]:
    """Map Linux ``/proc/cpuinfo`` flags (x86 ``flags`` or Arm ``Features``) to readable names."""
    present = {flag.lower() for flag in flags}
    return tuple(name for name, keys in _LINUX_FLAGS.items() if any(key in present for key in keys))


def simd_from_sysctl(values: Mapping[str, str]) -> tuple[str, ...]:
    """Map macOS ``hw.optional.*`` sysctl values ("1" means present) to readable names."""
    return tuple(
        name
        for name, keys in _MACOS_SYSCTL.items()
        if any(values.get(key, "0").strip() == "1" for key in keys)
    )


def simd_from_numpy(features: Mapping[str, bool]) -> tuple[str, ...]:
    """Map numpy's ``__cpu_features__`` table to readable names."""
    return tuple(
        name for name, keys in _NUMPY_FEATURES.items() if any(features.get(k) for k in keys)
    )


def parse_cache_size(text: str) -> int | None:
    """Parse a Linux sysfs cache size (``"48K"``, ``"2048K"``, ``"105M"``, ``"2GiB"``) into bytes.

    ``None`` for text that is not a positive size, so a garbled sysfs entry
    reads as "unknown" rather than as a zero-byte cache.
    """
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text, flags=re.IGNORECASE)
    if not match:
        return None
    scale = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[match.group(2).upper()]
    value = int(match.group(1)) * scale
    return value if value > 0 else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _cpuinfo_fields(text: str) -> dict[str, str]:
    """First value of each key in /proc/cpuinfo (the first processor block)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())
    return fields


def _sysctl(*names: str) -> dict[str, str]:
    """Values of macOS sysctl keys; keys the kernel does not know are left out."""
    values: dict[str, str] = {}
    for name in names:
        try:
            out = subprocess.run(
                ["/usr/sbin/sysctl", "-n", name],
                capture_output=True,
                text=True,
                timeout=3,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return values
        if out.returncode == 0 and out.stdout.strip():
            values[name] = out.stdout.strip()
    return values


def _linux_caches() -> dict[str, int]:
    caches: dict[str, int] = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        level = (_read(index / "level") or "").strip()
        kind = (_read(index / "type") or "").strip()
        size = parse_cache_size(_read(index / "size") or "")
        if size is None or kind == "Instruction":
            continue
        key = "l1d" if level == "1" else f"l{level}"
        caches.setdefault(key, size)
    return caches


#: Where Linux describes each CPU's caches; tests point it at a fake tree.
_SYS_CPU = Path("/sys/devices/system/cpu")


def allowed_cpus() -> set[int] | None:
    """The CPUs this process may run on (its affinity: ``taskset``, Slurm, a container's cpuset).

    None where the OS cannot say (macOS and Windows have no ``sched_getaffinity``).
    """
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:
        return None


def shared_last_level_cache_bytes(cpus: Iterable[int] | None = None) -> int | None:
    """The last-level cache this process's CPUs can use, all instances together (Linux; else None).

    ``cpu_info().l3_cache_bytes`` is one instance, core 0's. A chip with
    several L3 slices (AMD's CCDs) or a machine with two sockets has one
    instance per group of cores, and a multithreaded STREAM run uses every
    instance its threads touch, so STREAM's "4× the cache" rule counts them
    all: each distinct ``shared_cpu_list`` of the highest cache level is
    counted once, over ``cpus`` (default: this process's affinity).
    """
    instances = last_level_cache_instances(cpus)
    return sum(instances) if instances else None


def last_level_cache_instances(cpus: Iterable[int] | None = None) -> tuple[int, ...]:
    """The size in bytes of each distinct last-level cache over ``cpus``, largest first (Linux).

    ``cpus`` defaults to this process's affinity. Each distinct
    ``shared_cpu_list`` of the highest cache level counts once. Empty where
    sysfs does not say (macOS, Windows, a CPU with no cache entries).
    """
    if cpus is None:
        cpus = allowed_cpus()
        if cpus is None:  # not Linux: no sysfs either
            return ()
    seen: dict[str, int] = {}
    best_level = 0
    for cpu in sorted(cpus):
        levels = []
        for index in (_SYS_CPU / f"cpu{cpu}" / "cache").glob("index*"):
            if (_read(index / "type") or "").strip() == "Instruction":
                continue
            level_text = (_read(index / "level") or "").strip()
            size = parse_cache_size(_read(index / "size") or "")
            if level_text.isdigit() and size is not None:
                shared_cpus = (_read(index / "shared_cpu_list") or "").strip()
                levels.append((int(level_text), shared_cpus, size))
        if not levels:
            continue
        level, shared, size = max(levels)
        if level > best_level:
            best_level, seen = level, {}
        if level == best_level:
            seen[shared or f"cpu{cpu}"] = size
    return tuple(sorted(seen.values(), reverse=True))


def threads_last_level_cache_bytes(threads: int, cpus: Iterable[int] | None = None) -> int | None:
    """The most last-level cache ``threads`` threads can use: at most one instance each (Linux).

    :func:`shared_last_level_cache_bytes` sums every instance over the
    affinity, which is what a run with a thread on every core touches. A run
    on fewer threads (the reference profile's 2 on a 64-core server) touches
    at most one instance per thread, so this sums the ``threads`` largest
    instances over ``cpus`` (default: this process's affinity): an upper
    bound, since two threads may also share one instance. None where sysfs
    does not say.
    """
    from labkit.core.validate import check_positive_int

    count = check_positive_int("threads", threads)
    instances = last_level_cache_instances(cpus)
    return sum(instances[:count]) if instances else None


def _windows_model() -> str | None:
    try:
        import winreg  # type: ignore[import-not-found]

        with winreg.OpenKey(  # type: ignore[attr-defined]
            winreg.HKEY_LOCAL_MACHINE,  # type: ignore[attr-defined]
            r"HARDWARE\DESCRIPTION\System\CentralProcessor\0",
        ) as key:
            return str(winreg.QueryValueEx(key, "ProcessorNameString")[0]).strip()  # type: ignore[attr-defined]
    except (ImportError, OSError):
        return None


def _numpy_simd() -> tuple[str, ...] | None:
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:
        try:  # numpy < 2.0
            from numpy.core._multiarray_umath import __cpu_features__ as features_v1
        except ImportError:
            return None
        return simd_from_numpy(features_v1)
    return simd_from_numpy(features)


def _memory() -> tuple[int | None, int | None]:
    try:
        import psutil
    except ImportError:
        return None, None
    vm = psutil.virtual_memory()
    return int(vm.total), int(vm.available)


def _container_limit(total: int | None, available: int | None) -> tuple[int | None, int | None]:
    """(the cgroup limit if it is below ``total``, available memory under it)."""
    from labkit.machine.container import container_memory

    container = container_memory()
    if container is None or (total is not None and container.limit_bytes >= total):
        return None, available
    headroom = container.headroom_bytes
    return container.limit_bytes, headroom if available is None else min(available, headroom)


def _physical_cores() -> int | None:
    try:
        import psutil
    except ImportError:
        return None
    return psutil.cpu_count(logical=False)


def cpu_info() -> CpuInfo:
    """Describe the host CPU; cheap (no benchmark, no framework import)."""
    system = platform.system()
    architecture = platform.machine() or "unknown"
    model: str | None = None
    simd: tuple[str, ...] | None = None
    source = "numpy"
    caches: dict[str, int] = {}

    if system == "Linux":
        text = _read(Path("/proc/cpuinfo")) or ""
        fields = _cpuinfo_fields(text)
        model = fields.get("model name") or fields.get("hardware") or fields.get("processor name")
        if not model:
            dt_model = _read(Path("/sys/firmware/devicetree/base/model"))
            model = dt_model.strip("\x00\n ") if dt_model else None
        flags = fields.get("flags") or fields.get("features")
        if flags:
            simd, source = simd_from_flags(flags.split()), "/proc/cpuinfo"
        caches = _linux_caches()
    elif system == "Darwin":
        keys = [k for keys in _MACOS_SYSCTL.values() for k in keys]
        values = _sysctl(
            "machdep.cpu.brand_string", "hw.l1dcachesize", "hw.l2cachesize", "hw.l3cachesize", *keys
        )
        model = values.get("machdep.cpu.brand_string")
        if any(k in values for k in keys):
            simd, source = simd_from_sysctl(values), "sysctl"
        for key, name in (
            ("l1d", "hw.l1dcachesize"),
            ("l2", "hw.l2cachesize"),
            ("l3", "hw.l3cachesize"),
        ):
            if values.get(name, "").isdigit() and int(values[name]) > 0:
                caches[key] = int(values[name])
    elif system == "Windows":
        model = _windows_model()

    if simd is None:
        simd = _numpy_simd() or ()
        source = "numpy" if simd else "unavailable"
    total, available = _memory()
    limit, available = _container_limit(total, available)
    return CpuInfo(
        model=model or platform.processor() or architecture,
        architecture=architecture,
        physical_cores=_physical_cores(),
        logical_cores=os.cpu_count(),
        simd_features=simd,
        simd_source=source,
        memory_total_bytes=total,
        memory_available_bytes=available,
        l1d_cache_bytes=caches.get("l1d"),
        l2_cache_bytes=caches.get("l2"),
        l3_cache_bytes=caches.get("l3"),
        memory_limit_bytes=limit,
    )
