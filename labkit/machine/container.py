"""The memory limit of this process's container (cgroup v2 or v1), for labkit.machine.memory.

psutil reports the host's memory. Inside a container (a JupyterHub pod with a
``mem_limit``, a Docker or Kubernetes job) the kernel kills the process at
the cgroup's limit, long before the host runs out, so labkit.machine.memory bounds
what it calls free by the headroom read here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: Where the cgroup file systems are mounted and the file naming this process's cgroups.
#: Tests point these at a fake tree in a temporary folder.
_CGROUP_ROOT = Path("/sys/fs/cgroup")
_PROC_SELF_CGROUP = Path("/proc/self/cgroup")
#: cgroup v1 writes "no limit" as a huge number (LONG_MAX rounded down to a page).
_UNLIMITED_BYTES = 1 << 60


@dataclass(frozen=True)
class ContainerMemory:
    """The tightest cgroup memory limit on this process, and how much of it is in use.

    A JupyterHub pod, a Docker container or a Slurm job with a memory limit
    is killed when it passes ``limit_bytes``, however much memory the host
    has free. ``used_bytes`` leaves out the inactive page cache, which the
    kernel reclaims before it kills anything (as ``docker stats`` and
    Kubernetes' working set do).
    """

    limit_bytes: int
    used_bytes: int
    path: str

    @property
    def headroom_bytes(self) -> int:
        """What this process can still allocate before it reaches the limit."""
        return max(0, self.limit_bytes - self.used_bytes)


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):  # missing, unreadable, or not a file: no limit
        return None


def _read_bytes_value(path: Path) -> int | None:
    """A byte count from a cgroup file; None for "max", a huge value, or a missing file."""
    text = (_read_text(path) or "").strip()
    if not text.isdigit():
        return None
    value = int(text)
    return value if value < _UNLIMITED_BYTES else None


def _stat_value(path: Path, *keys: str) -> int:
    for line in (_read_text(path) or "").splitlines():
        key, _, value = line.partition(" ")
        if key in keys and value.strip().isdigit():
            return int(value)
    return 0


def _own_cgroups(controller: str = "memory") -> tuple[str, str]:
    """This process's (cgroup v2 path, cgroup v1 path for ``controller``), "/" when not listed."""
    v2 = v1 = "/"
    for line in (_read_text(_PROC_SELF_CGROUP) or "").splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            v2 = path
        elif controller in controllers.split(","):
            v1 = path
    return v2, v1


def _cgroup_dirs(mount: Path, own: str) -> list[Path]:
    """The process's cgroup folder under ``mount`` and every parent up to the mount.

    Limits nest: a parent's limit binds its children, so all are read. In a
    container without a cgroup namespace the listed path does not exist under
    the mount (the mount *is* the container's cgroup); walking up reaches it.
    """
    parts = [p for p in own.split("/") if p not in ("", ".", "..")]
    return [mount.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]


def container_memory() -> ContainerMemory | None:
    """The cgroup memory limit that binds this process (v2 or v1), or None where there is none.

    Reads ``memory.max`` and ``memory.current`` (cgroup v2) or
    ``memory.limit_in_bytes`` and ``memory.usage_in_bytes`` (cgroup v1) of
    the process's own cgroup (from ``/proc/self/cgroup``) and of its parents.
    Missing or unreadable files, "max" and v1's huge "unlimited" value all
    mean no limit. Not Linux: None.
    """
    v2_path, v1_path = _own_cgroups()
    layouts = (
        (_CGROUP_ROOT, v2_path, "memory.max", "memory.current", ("inactive_file",)),
        (_CGROUP_ROOT / "unified", v2_path, "memory.max", "memory.current", ("inactive_file",)),
        (
            _CGROUP_ROOT / "memory",
            v1_path,
            "memory.limit_in_bytes",
            "memory.usage_in_bytes",
            ("total_inactive_file", "inactive_file"),
        ),
    )
    tightest: ContainerMemory | None = None
    for mount, own, limit_file, usage_file, inactive_keys in layouts:
        for folder in _cgroup_dirs(mount, own):
            limit = _read_bytes_value(folder / limit_file)
            if limit is None:
                continue
            usage = _read_bytes_value(folder / usage_file) or 0
            inactive = _stat_value(folder / "memory.stat", *inactive_keys)
            found = ContainerMemory(limit, max(0, usage - inactive), str(folder))
            if tightest is None or found.headroom_bytes < tightest.headroom_bytes:
                tightest = found
    return tightest


def container_cpus() -> float | None:
    """How many CPUs' worth of time the cgroup CPU quota allows (2.0 = two CPUs); None: no quota.

    A JupyterHub ``cpu_limit`` or a Docker ``--cpus`` is a CFS quota, not an
    affinity: ``os.sched_getaffinity`` still lists every CPU of the node, but
    the process gets only quota / period of CPU time. Reads ``cpu.max``
    (cgroup v2) or ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (v1) of the
    process's cgroup and its parents; the tightest wins.
    """
    v2_path, v1_path = _own_cgroups("cpu")
    found: list[float] = []
    for mount in (_CGROUP_ROOT, _CGROUP_ROOT / "unified"):
        for folder in _cgroup_dirs(mount, v2_path):
            fields = (_read_text(folder / "cpu.max") or "").split()
            if len(fields) == 2 and fields[0].isdigit() and fields[1].isdigit() and int(fields[1]):
                found.append(int(fields[0]) / int(fields[1]))
    for mount in (_CGROUP_ROOT / "cpu", _CGROUP_ROOT / "cpu,cpuacct"):
        for folder in _cgroup_dirs(mount, v1_path):
            quota = (_read_text(folder / "cpu.cfs_quota_us") or "").strip()
            period = (_read_text(folder / "cpu.cfs_period_us") or "").strip()
            if quota.isdigit() and period.isdigit() and int(quota) > 0 and int(period) > 0:
                found.append(int(quota) / int(period))
    return min(found) if found else None
