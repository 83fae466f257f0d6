"""The CPU's cache-line size, read from the OS where it says, else an assumed 64 bytes.

Why: a strided read's cost is counted in cache lines, and the line is not
64 bytes on every CPU (Apple M-series cores report 128 through
``sysctl hw.cachelinesize``). Code that prints "64-byte lines" must either
have read that figure from the machine or say that it assumed it.

Linux: ``/sys/devices/system/cpu/cpu0/cache/index*/coherency_line_size``
(the largest level's line, which all levels share on the CPUs we know);
macOS: ``sysctl -n hw.cachelinesize``. Anything else, or an unreadable
value, falls back to :data:`ASSUMED_LINE_BYTES` with ``detected=False``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from labkit.core.results import JsonRecord

#: The line size assumed where the OS does not report one (most x86 and Arm server cores).
ASSUMED_LINE_BYTES = 64
#: Where Linux describes cpu0's caches.
SYSFS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")


@dataclass(frozen=True)
class CacheLine(JsonRecord):
    """``line_bytes`` and where it came from (``source``: "sysfs", "sysctl" or "assumed")."""

    line_bytes: int
    source: str

    @property
    def detected(self) -> bool:
        return self.source != "assumed"

    def describe(self) -> str:
        """ "64-byte lines (reported by the CPU)" or "... (assumed: ...)", for headers."""
        how = (
            "reported by the CPU"
            if self.detected
            else "assumed: the CPU did not report its line size"
        )
        return f"{self.line_bytes}-byte lines ({how})"


def _plausible(value: int) -> bool:
    # a power of two between 16 and 512 bytes; anything else is a misreport
    return 16 <= value <= 512 and value & (value - 1) == 0


def _from_sysfs(cache_dir: Path) -> int | None:
    sizes = []
    try:
        entries = sorted(cache_dir.glob("index*"))
    except OSError:
        return None
    for entry in entries:
        try:
            value = int((entry / "coherency_line_size").read_text().strip())
        except (OSError, ValueError):
            continue
        if _plausible(value):
            sizes.append(value)
    return max(sizes) if sizes else None


def _sysctl_line_size() -> str:
    return subprocess.run(
        ["/usr/sbin/sysctl", "-n", "hw.cachelinesize"],
        capture_output=True,
        text=True,
        timeout=5,
        check=True,
    ).stdout


def _from_sysctl(run: Callable[[], str]) -> int | None:
    try:
        value = int(run().strip())
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return value if _plausible(value) else None


def cpu_cache_line(
    *,
    cache_dir: Path = SYSFS_CACHE,
    platform: str | None = None,
    sysctl: Callable[[], str] = _sysctl_line_size,
) -> CacheLine:
    """This CPU's cache-line size, with its source; 64 bytes, marked "assumed", if unknown.

    ``cache_dir``, ``platform`` and ``sysctl`` exist for tests (a fake sysfs
    tree, a fake ``sys.platform``, a fake ``sysctl`` call).
    """
    platform = sys.platform if platform is None else platform
    if platform.startswith("linux"):
        found = _from_sysfs(cache_dir)
        if found is not None:
            return CacheLine(found, "sysfs")
    elif platform == "darwin":
        found = _from_sysctl(sysctl)
        if found is not None:
            return CacheLine(found, "sysctl")
    return CacheLine(ASSUMED_LINE_BYTES, "assumed")
