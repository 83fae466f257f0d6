"""A real one-node Slurm cluster in a folder: munged, slurmctld and slurmd on 127.0.0.1.

    python3 tools/slurm_local.py start DIR     # prints `export SLURM_CONF=DIR/slurm.conf`
    python3 tools/slurm_local.py stop DIR
    python3 tools/slurm_local.py installed     # exit 0 if every program is there, else 1

Why it exists (issue 17, review finding C38): the SLURM script of notebook 10
was tested with ``srun`` and ``scontrol`` replaced by stand-ins, so nothing
Slurm itself decides (which CPUs a job step gets, what ``sbatch`` passes on,
which ``#SBATCH`` lines it honours) was ever checked. This starts Debian's
``slurm-wlm`` (``slurmctld``, ``slurmd``, ``munge``) for real, with every
file (key, sockets, state, logs) under DIR, on ports picked free, as the
current user (``SlurmUser`` and ``SlurmdUser``): no system file is touched and
nothing else on the machine is affected.

tests/test_slurm.py starts one with :func:`start` inside the test process
itself. That matters under tools/offline.sh: the suite runs in a network
namespace of its own, whose loopback is not the host's, so daemons started by
``.ci/run`` before it could not be reached from the tests.

The node is the whole machine (``CPUs`` = this process's CPU count, cores
allocated one by one with ``select/cons_tres`` and ``CR_Core``) and
``task/affinity`` binds each job step to the CPUs Slurm gave it, as the CPU
binding of a real cluster does; ``proctrack/linuxproc`` because a container
may have no cgroup to delegate. No GPU (GRES) is configured.
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

#: The programs Debian's packages slurmctld, slurmd, slurm-client and munge install.
PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "sinfo", "scontrol")
#: How to get them (printed when one is missing).
INSTALL = "apt-get install slurmctld slurmd slurm-client munge"


class SlurmUnavailable(RuntimeError):
    """Slurm cannot run here; the message says why (a missing program, a daemon that died)."""


@dataclass(frozen=True)
class Cluster:
    """A started cluster: pass ``env`` to sbatch/srun/sinfo so they talk to it."""

    folder: Path
    conf: Path
    node: str
    cpus: int
    env: dict[str, str]


def missing_programs() -> list[str]:
    """The Slurm and munge programs that are not on PATH (or in /usr/sbin)."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return [name for name in PROGRAMS if shutil.which(name, path=path) is None]


def _which(name: str) -> str:
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    found = shutil.which(name, path=path)
    if found is None:
        raise SlurmUnavailable(f"{name} is not installed (Debian: {INSTALL})")
    return found


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _write_conf(folder: Path, node: str, cpus: int, user: str) -> Path:
    ctld_port, d_port = _free_ports(2)
    lines = [
        "ClusterName=labkit",
        f"SlurmctldHost={node}(127.0.0.1)",
        f"SlurmUser={user}",
        f"SlurmdUser={user}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={folder / 'munge' / 'munge.socket'}",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={d_port}",
        f"StateSaveLocation={folder / 'state'}",
        f"SlurmdSpoolDir={folder / 'spool'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
        f"SlurmdPidFile={folder / 'slurmd.pid'}",
        f"SlurmctldLogFile={folder / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={folder / 'log' / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/affinity",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SchedulerType=sched/backfill",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "MpiDefault=none",
        "ReturnToService=2",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
        f"NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN",
        f"PartitionName=labkit Nodes={node} Default=YES MaxTime=INFINITE State=UP",
    ]
    conf = folder / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    return conf


def _log_tail(folder: Path, lines: int = 15) -> str:
    parts = []
    for log in sorted((folder / "log").glob("*.log")):
        tail = log.read_text(errors="replace").splitlines()[-lines:]
        parts.append(f"--- {log.name} ---\n" + "\n".join(tail))
    return "\n".join(parts)


def _run(cmd: list[str], env: dict[str, str], what: str, folder: Path) -> None:
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise SlurmUnavailable(
            f"{what} failed (exit {result.returncode}): {result.stderr.strip()[-500:]}\n"
            + _log_tail(folder)
        )


def start(folder: Path, *, timeout_s: float = 60.0) -> Cluster:
    """Start munged, slurmctld and slurmd with everything under ``folder``; wait for the node.

    Raises :class:`SlurmUnavailable` with the reason (and the daemons' log
    tails) when a program is missing or the node does not come up within
    ``timeout_s``.
    """
    for name in PROGRAMS:
        _which(name)
    folder = folder.resolve()
    for sub in ("munge", "state", "spool", "log"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    (folder / "munge").chmod(0o700)
    key = folder / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    user = pwd.getpwuid(os.getuid()).pw_name
    node = socket.gethostname().split(".")[0] or "localhost"
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    conf = _write_conf(folder, node, int(cpus or 1), user)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    munge_dir = folder / "munge"
    _run(
        [
            _which("munged"),
            "--force",  # it refuses root, and a socket folder others cannot reach, without it
            f"--socket={munge_dir / 'munge.socket'}",
            f"--key-file={key}",
            f"--pid-file={munge_dir / 'munged.pid'}",
            f"--seed-file={munge_dir / 'munged.seed'}",
            f"--log-file={folder / 'log' / 'munged.log'}",
        ],
        env,
        "munged",
        folder,
    )
    _run([_which("slurmctld")], env, "slurmctld", folder)
    _run([_which("slurmd"), "-N", node], env, "slurmd", folder)
    cluster = Cluster(folder=folder, conf=conf, node=node, cpus=int(cpus or 1), env=env)
    deadline = time.monotonic() + timeout_s
    state = ""
    while time.monotonic() < deadline:
        result = subprocess.run(
            [_which("sinfo"), "-h", "-N", "-o", "%T"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        state = result.stdout.strip() or result.stderr.strip()
        if result.returncode == 0 and state.rstrip("*") in ("idle", "mixed", "allocated"):
            return cluster
        time.sleep(0.5)
    stop(folder)
    raise SlurmUnavailable(
        f"the node did not become idle within {timeout_s:.0f} s (sinfo: {state!r})\n"
        + _log_tail(folder)
    )


def stop(folder: Path) -> None:
    """Stop the daemons ``start`` left in ``folder`` (SIGTERM, then SIGKILL after 10 s)."""
    folder = folder.resolve()
    pids = []
    for pid_file in (
        folder / "slurmd.pid",
        folder / "slurmctld.pid",
        folder / "munge" / "munged.pid",
    ):
        try:
            pids.append(int(pid_file.read_text().split()[0]))
        except (OSError, ValueError, IndexError):
            continue
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + 10
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("action", choices=("start", "stop", "installed"))
    parser.add_argument(
        "folder", type=Path, nargs="?", help="where the key, sockets, state and logs go"
    )
    args = parser.parse_args(argv)
    if args.action == "installed":
        missing = missing_programs()
        if missing:
            print(f"slurm_local: missing {', '.join(missing)} ({INSTALL})", file=sys.stderr)
        return 1 if missing else 0
    if args.folder is None:
        parser.error(f"{args.action} needs FOLDER")
    if args.action == "stop":
        stop(args.folder)
        return 0
    try:
        cluster = start(args.folder)
    except SlurmUnavailable as error:
        print(f"slurm_local: {error}", file=sys.stderr)
        return 2
    print(f"export SLURM_CONF={cluster.conf}  # node {cluster.node}, {cluster.cpus} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
