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
import contextlib
import ctypes
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
            controllers = mount_point / "cgroup.controllers"
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


#: The file naming this process's cgroups; tests point it at a fake one.
PROC_SELF_CGROUP = Path("/proc/self/cgroup")


def own_cgroup(version: int) -> str:
    """This process's cgroup path in the v2 hierarchy, or in v1's memory hierarchy ("/" if unlisted)."""
    try:
        lines = PROC_SELF_CGROUP.read_text().splitlines()
    except OSError:
        return "/"
    for line in lines:
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        if (version == 2 and parts[1] == "") or (version == 1 and "memory" in parts[1].split(",")):
            return parts[2] or "/"
    return "/"


def parent_for_child(mount: CgroupMount) -> Path:
    """Where the new cgroup goes, so that it stays inside every limit this process is under.

    v1: inside this process's own memory cgroup (v1 lets a cgroup hold both
    processes and children). v2 forbids that ("no internal processes": a
    cgroup that holds processes cannot hand controllers to children), except
    at the root, so the new cgroup goes beside this process's own, under its
    parent, which already hands the memory controller down to it.
    """
    parts = [p for p in own_cgroup(mount.version).split("/") if p not in ("", ".", "..")]
    if mount.version == 2 and parts:
        parts = parts[:-1]
    path = mount.path.joinpath(*parts)
    # In a container without a cgroup namespace the listed path does not exist here:
    # the mount is the container's own cgroup.
    return path if path.is_dir() else mount.path


@dataclass
class MemoryCgroup:
    """A child cgroup with a memory limit; ``join`` moves the calling process into it."""

    mount: CgroupMount
    path: Path
    limit_bytes: int

    swap_limited: bool = True

    @classmethod
    def create(
        cls, mount: CgroupMount, limit_bytes: int, name: str, parent: Path | None = None
    ) -> MemoryCgroup:
        parent = mount.path if parent is None else parent
        path = parent / name
        swap_limited = True
        try:
            if mount.version == 2:
                # The new cgroup gets the controller only if its parent hands it down.
                control = parent / "cgroup.subtree_control"
                if "memory" not in control.read_text().split():
                    _write(control, "+memory")
            path.mkdir()
            if mount.version == 2:
                _write(path / "memory.max", str(limit_bytes))
                swap_limited = (path / "memory.swap.max").exists()
                if swap_limited:
                    _write(path / "memory.swap.max", "0")
            else:
                _write(path / "memory.limit_in_bytes", str(limit_bytes))
                swap_limited = (path / "memory.memsw.limit_in_bytes").exists()
                if swap_limited:  # swap accounting on
                    _write(path / "memory.memsw.limit_in_bytes", str(limit_bytes))
        except OSError as exc:
            if path.is_dir():
                _remove(path)
            why = (
                " (cgroup v2 lets a cgroup that holds processes hand no controller to children)"
                if mount.version == 2 and getattr(exc, "errno", None) == 16  # EBUSY
                else ""
            )
            raise ConstraintError(
                f"cannot make a memory-limited cgroup under {parent} (cgroup v{mount.version}): "
                f"{exc}{why}. Run as root, or in a cgroup delegated to this user."
            ) from exc
        return cls(mount, path, limit_bytes, swap_limited)

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

    def kill_leftovers(self) -> None:
        """SIGKILL whatever COMMAND left in the cgroup (an orphaned kernel, a worker)."""
        for _ in range(40):
            try:
                pids = [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
            except (OSError, ValueError):
                return
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)

    def oom_kills(self) -> int:
        """How many processes the kernel killed for reaching the limit (v2's memory.events; v1: 0)."""
        try:
            text = (self.path / "memory.events").read_text()
        except OSError:
            return 0
        return next(
            (
                int(v)
                for k, v in (ln.split() for ln in text.splitlines() if ln.strip())
                if k == "oom_kill"
            ),
            0,
        )

    def remove(self) -> None:
        self.kill_leftovers()
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
            return MemoryCgroup.create(
                mount, limit_bytes, f"labkit-constrain-{os.getpid()}", parent_for_child(mount)
            )
        except ConstraintError as exc:
            errors.append(str(exc))
    raise ConstraintError("; ".join(errors))


# --------------------------------------------------------------------------- busy cores

BUSY_LOOP = "while True:\n    pass\n"


def _die_with_parent() -> None:
    """In a child: get SIGKILL when this script dies, however it dies (Linux's PR_SET_PDEATHSIG)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1


def start_busy(n: int, allowed: list[int]) -> list[subprocess.Popen[bytes]]:
    """``n`` processes that each keep one CPU (the last of ``allowed``) busy."""
    if n > len(allowed):
        raise ConstraintError(
            f"--busy-cores {n} is more than the {len(allowed)} CPU(s) allowed here"
        )

    def pin(cpu: int) -> None:
        _die_with_parent()
        os.sched_setaffinity(0, {cpu})

    procs = []
    for cpu in allowed[len(allowed) - n :]:
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", BUSY_LOOP],
                preexec_fn=lambda cpu=cpu: pin(cpu),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    return procs


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.kill()
    for proc in procs:
        proc.wait()


# --------------------------------------------------------------------------- main


def run(command: list[str], preexec: Callable[[], None] | None) -> int:
    """Run COMMAND; its exit status, 128 + N if a signal N ended it (as a shell says).

    Ctrl-C reaches COMMAND from the terminal by itself; a SIGTERM or SIGHUP
    sent to this script (a CI time limit) is passed on to COMMAND, and this
    script still cleans up after it.
    """
    proc = subprocess.Popen(command, preexec_fn=preexec)

    def forward(signum: int, frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)

    saved = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGHUP)}
    saved[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        status = proc.wait()
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    return 128 - status if status < 0 else status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="constrain.py",
        description=__doc__.splitlines()[0],
        usage="%(prog)s [--memory-limit SIZE] [--cpus LIST] [--busy-cores N] -- COMMAND ...",
    )
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
            swap = "" if cgroup.swap_limited else "; swap is not limited (no swap accounting)"
            said.append(
                f"memory limit {args.memory_limit / 1024**3:g} GiB "
                f"(cgroup v{cgroup.mount.version}, {cgroup.path}{swap})"
            )
        if args.busy_cores:
            # beside COMMAND: on the CPUs it may use (all of them without --cpus)
            shared = sorted(args.cpus) if args.cpus is not None else allowed
            busy = start_busy(args.busy_cores, shared)
            said.append(
                f"{args.busy_cores} busy process(es) on CPU(s) "
                f"{shared[len(shared) - args.busy_cores :]}"
            )
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
    peak, oom = None, 0
    try:
        status = run(command, preexec)
    except FileNotFoundError:
        print(f"constrain: {command[0]!r} is not a command here", file=sys.stderr)
        status = 127
    except (OSError, subprocess.SubprocessError) as exc:  # joining the cgroup or pinning failed
        print(
            f"constrain: could not start {command[0]!r} under the constraint: {exc}",
            file=sys.stderr,
        )
        status = 2
    finally:
        stop(busy)
        if cgroup is not None:
            peak, oom = cgroup.peak_bytes(), cgroup.oom_kills()
            cgroup.remove()
    used = f"; peak memory {peak / 1024**3:.2f} GiB" if peak else ""
    used += f"; {oom} process(es) killed at the memory limit" if oom else ""
    print(
        f"constrain: exit status {status} after {time.perf_counter() - start:.0f} s{used}",
        flush=True,
    )
    return status


if __name__ == "__main__":
    raise SystemExit(main())
