"""Run a command on a smaller or busier machine than this one: CI's three conditions for strict nbval.

    python3 tools/constrain.py --memory-limit 8G -- make test-nbval   # an 8 GiB pod
    python3 tools/constrain.py --cpus 0 -- make test-nbval            # like taskset -c 0
    python3 tools/constrain.py --busy-cores 1 -- make test-nbval      # another program busy

A student's laptop, a JupyterHub pod with ``mem_limit: 8G`` and a loaded
shared node must all pass `make test`, so CI runs its strict nbval under each
(docs/reliability.md, section 5):

- ``--memory-limit SIZE``: COMMAND and everything it starts run in a new child
  cgroup with that memory limit (and no swap beyond it), as a container's
  limit would be: cgroup v2 (``memory.max``) where the unified hierarchy has
  the memory controller, else cgroup v1 (``memory.limit_in_bytes``). Needs
  root (or a delegated cgroup). The cgroup is removed afterwards.
- ``--cpus LIST``: COMMAND may run only on these CPUs (``0`` or ``0,2``), as
  ``taskset -c LIST`` does.
- ``--busy-cores N``: N busy-looping processes, each pinned to one of the
  allowed CPUs (the last ones), run for as long as COMMAND does.

It prints one line saying what it set up, runs COMMAND, cleans up, and exits
with COMMAND's status; 2 if the condition cannot be set up here (it never
runs COMMAND unconstrained in that case).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
#: Where the kernel lists mounts; tests point it at a fake file.
MOUNTINFO = Path("/proc/self/mountinfo")


class ConstraintError(RuntimeError):
    """The condition cannot be set up on this machine (the message says why)."""


def parse_size(text: str) -> int:
    """ "8G", "512M", "8GiB", "1073741824" -> bytes (powers of 1024)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.I)
    if not match:
        raise argparse.ArgumentTypeError(
            f"--memory-limit must be a size such as 8G or 512M, got {text!r}"
        )
    value = int(float(match.group(1)) * _UNITS[match.group(2).upper()])
    if value < 64 * 1024**2:
        raise argparse.ArgumentTypeError(
            f"--memory-limit must be at least 64M (a Python process needs more), got {text!r}"
        )
    return value


def parse_cpus(text: str) -> set[int]:
    """ "0" or "0,2" or "0-3" -> a set of CPU numbers, as taskset -c reads them."""
    cpus: set[int] = set()
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:-(\d+))?\s*", part)
        if not match:
            raise argparse.ArgumentTypeError(
                f"--cpus must list CPU numbers such as 0 or 0,2 or 0-3, got {text!r}"
            )
        low, high = int(match.group(1)), int(match.group(2) or match.group(1))
        if high < low:
            raise argparse.ArgumentTypeError(f"--cpus range {part!r} runs backwards")
        cpus.update(range(low, high + 1))
    return cpus


# --------------------------------------------------------------------------- cgroups


@dataclass(frozen=True)
class CgroupMount:
    """A mounted cgroup hierarchy that has the memory controller: v2 (unified) or v1."""

    version: int
    path: Path


def memory_mounts(mountinfo: Path | None = None) -> list[CgroupMount]:
    """Every cgroup hierarchy with the memory controller, v2 first."""
    found: list[CgroupMount] = []
    try:
        lines = (mountinfo or MOUNTINFO).read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or not tail:
            continue
        mount_point, fstype = Path(fields[4]), tail[0]
        options = tail[2].split(",") if len(tail) > 2 else []
        if fstype == "cgroup2":
            controllers = (mount_point / "cgroup.controllers")
            try:
                has_memory = "memory" in controllers.read_text().split()
            except OSError:
                has_memory = False
            if has_memory:
                found.append(CgroupMount(2, mount_point))
        elif fstype == "cgroup" and "memory" in options:
            found.append(CgroupMount(1, mount_point))
    return sorted(found, key=lambda m: -m.version)


def _write(path: Path, text: str) -> None:
    path.write_text(text)


@dataclass
class MemoryCgroup:
    """A child cgroup with a memory limit; ``join`` moves the calling process into it."""

    mount: CgroupMount
    path: Path
    limit_bytes: int

    @classmethod
    def create(cls, mount: CgroupMount, limit_bytes: int, name: str) -> MemoryCgroup:
        path = mount.path / name
        try:
            if mount.version == 2:
                # A child of the root gets the controller only if the root hands it down.
                control = mount.path / "cgroup.subtree_control"
                if "memory" not in control.read_text().split():
                    _write(control, "+memory")
            path.mkdir()
            if mount.version == 2:
                _write(path / "memory.max", str(limit_bytes))
                if (path / "memory.swap.max").exists():
                    _write(path / "memory.swap.max", "0")
            else:
                _write(path / "memory.limit_in_bytes", str(limit_bytes))
                if (path / "memory.memsw.limit_in_bytes").exists():  # swap accounting on
                    _write(path / "memory.memsw.limit_in_bytes", str(limit_bytes))
        except OSError as exc:
            if path.is_dir():
                _remove(path)
            raise ConstraintError(
                f"cannot make a memory-limited cgroup under {mount.path} (cgroup v{mount.version}): "
                f"{exc}. Run as root, or in a cgroup delegated to this user."
            ) from exc
        return cls(mount, path, limit_bytes)

    def join(self) -> None:
        """Move this process into the cgroup (called in the child, before it runs COMMAND)."""
        _write(self.path / "cgroup.procs", str(os.getpid()))

    def peak_bytes(self) -> int | None:
        """The most memory the cgroup used (None where the kernel does not say)."""
        name = "memory.peak" if self.mount.version == 2 else "memory.max_usage_in_bytes"
        try:
            return int((self.path / name).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def remove(self) -> None:
        _remove(self.path)


def _remove(path: Path, attempts: int = 20) -> None:
    """rmdir a cgroup; its last processes may take a moment to exit."""
    for _ in range(attempts):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.25)
    print(f"constrain: could not remove the cgroup {path}; remove it with rmdir", file=sys.stderr)


def memory_cgroup(limit_bytes: int, mounts: list[CgroupMount] | None = None) -> MemoryCgroup:
    """A new child cgroup with ``limit_bytes``, in the first hierarchy where one can be made."""
    mounts = memory_mounts() if mounts is None else mounts
    if not mounts:
        raise ConstraintError(
            "no cgroup hierarchy with the memory controller is mounted here (neither cgroup v2 "
            "with 'memory' in cgroup.controllers nor a v1 'memory' hierarchy)"
        )
    errors = []
    for mount in mounts:
        try:
            return MemoryCgroup.create(mount, limit_bytes, f"labkit-constrain-{os.getpid()}")
        except ConstraintError as exc:
            errors.append(str(exc))
    raise ConstraintError("; ".join(errors))


# --------------------------------------------------------------------------- busy cores

BUSY_LOOP = "while True:\n    pass\n"


def start_busy(n: int, allowed: list[int]) -> list[subprocess.Popen[bytes]]:
    """``n`` processes that each keep one CPU (the last allowed ones) busy."""
    if n > len(allowed):
        raise ConstraintError(f"--busy-cores {n} is more than the {len(allowed)} CPU(s) allowed here")
    procs = []
    for cpu in allowed[len(allowed) - n :]:
        procs.append(subprocess.Popen(
            [sys.executable, "-c", BUSY_LOOP],
            preexec_fn=lambda cpu=cpu: os.sched_setaffinity(0, {cpu}),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ))  # fmt: skip
    return procs


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.kill()
    for proc in procs:
        proc.wait()


# --------------------------------------------------------------------------- main


def run(command: list[str], preexec: Callable[[], None] | None) -> int:
    """Run COMMAND (in the foreground, signals passed on); its exit status."""
    proc = subprocess.Popen(command, preexec_fn=preexec)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        return proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="constrain.py", description=__doc__.splitlines()[0],
        usage="%(prog)s [--memory-limit SIZE] [--cpus LIST] [--busy-cores N] -- COMMAND ...",
    )  # fmt: skip
    parser.add_argument("--memory-limit", type=parse_size, metavar="SIZE")
    parser.add_argument("--cpus", type=parse_cpus, metavar="LIST")
    parser.add_argument("--busy-cores", type=int, default=0, metavar="N")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --, e.g. -- make test-nbval")
    if args.busy_cores < 0:
        parser.error(f"--busy-cores must be 0 or more, got {args.busy_cores}")
    allowed = sorted(os.sched_getaffinity(0))
    if args.cpus is not None and not args.cpus <= set(allowed):
        parser.error(f"--cpus {sorted(args.cpus)}: this process may only use CPUs {allowed}")
    said, cgroup, busy = [], None, []
    try:
        if args.memory_limit:
            cgroup = memory_cgroup(args.memory_limit)
            said.append(f"memory limit {args.memory_limit / 1024**3:g} GiB "
                        f"(cgroup v{cgroup.mount.version}, {cgroup.path})")  # fmt: skip
        if args.busy_cores:
            busy = start_busy(args.busy_cores, allowed)
            said.append(f"{args.busy_cores} busy process(es) on CPU(s) "
                        f"{allowed[len(allowed) - args.busy_cores:]}")  # fmt: skip
        if args.cpus is not None:
            said.append(f"pinned to CPU(s) {sorted(args.cpus)}")
    except ConstraintError as exc:
        stop(busy)
        if cgroup is not None:
            cgroup.remove()
        print(f"constrain: {exc}. COMMAND was not run.", file=sys.stderr)
        return 2

    def preexec() -> None:
        if cgroup is not None:
            cgroup.join()
        if args.cpus is not None:
            os.sched_setaffinity(0, args.cpus)

    print(f"constrain: {'; '.join(said) or 'no constraint'}: {' '.join(command)}", flush=True)
    start = time.perf_counter()
    try:
        status = run(command, preexec)
    finally:
        stop(busy)
        peak = cgroup.peak_bytes() if cgroup is not None else None
        if cgroup is not None:
            cgroup.remove()
    used = f"; peak memory {peak / 1024**3:.2f} GiB" if peak else ""
    print(f"constrain: exit status {status} after {time.perf_counter() - start:.0f} s{used}",
          flush=True)  # fmt: skip
    return status


if __name__ == "__main__":
    raise SystemExit(main())
