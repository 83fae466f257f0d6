"""Run a subprocess tree with a timeout, and torchrun in particular: commands, errors, cleanup.

torchrun starts each worker in a session (and process group) of its own, so
stopping a run means finding every descendant first: :func:`run_process`
does that on timeout (SIGTERM, then SIGKILL after :data:`GRACE_S`) and when
the caller is interrupted (a notebook's stop button). A worker that fails
makes :func:`run_torchrun` raise :class:`DistRunError` quoting the worker's
own error: torchrun's report (:func:`worker_error`) and the last lines the
failing worker wrote to its stderr. torchrun keeps each worker's output in
a file of its own (``--log-dir`` with ``--redirects``), so those lines are
that worker's alone, not interleaved with the other ranks' and torchrun's;
they are what explains a worker that died of a signal, which torchrun's
report cannot ("Signal 6 (SIGABRT) received by PID ...", no traceback).
Workers also run with ``PYTHONFAULTHANDLER=1``: a crash prints the Python
stack of every thread.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labkit.core.validate import check_positive_int, check_real

#: Seconds between SIGTERM and SIGKILL when a run is stopped.
GRACE_S = 3.0


class DistRunError(RuntimeError):
    """torchrun or one of its workers failed; the message quotes the worker's error."""


class DistTimeoutError(DistRunError, TimeoutError):
    """A run did not finish in time; labkit stopped it. ``pids`` are the processes it stopped."""

    def __init__(self, message: str, pids: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.pids = pids


def python_executable(python: str | None) -> str:
    return sys.executable if python is None else python


def check_script_args(script_args: Sequence[str]) -> list[str]:
    """``script_args`` as a list; one string (a ``Sequence[str]`` to a type checker) is refused."""
    if isinstance(script_args, str):
        raise TypeError(
            f"script_args must be a list of strings such as ['--width', '1024'], got {script_args!r}"
        )
    return list(script_args)


def standalone_command(
    target: str,
    script_args: Sequence[str] = (),
    *,
    nproc: int,
    module: bool = True,
    python: str | None = None,
) -> list[str]:
    """torchrun on this machine only: ``--standalone`` rendezvous on a free port, ``nproc`` workers.

    ``target`` is a module (``module=True``, run with ``-m``) or a script path.
    """
    nproc = check_positive_int("nproc", nproc)
    return _torchrun_command(target, script_args, nproc=nproc, module=module, python=python)


def _torchrun_command(
    target: str,
    script_args: Sequence[str] = (),
    *,
    nproc: int,
    module: bool = True,
    python: str | None = None,
    launcher_args: Sequence[str] = (),
) -> list[str]:
    """:func:`standalone_command`, with ``launcher_args`` for torchrun itself before the target."""
    cmd = [
        python_executable(python),
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        f"--nproc-per-node={nproc}",
        *launcher_args,
    ]
    cmd += ["-m", target] if module else [target]
    return cmd + check_script_args(script_args)


@dataclass(frozen=True)
class ProcessOutput:
    """What a finished subprocess left: exit code, output, and the launch's wall time."""

    returncode: int
    stdout: str
    stderr: str
    wall_s: float  # start-up included: how long the cell waited, not a benchmark


def _stop_tree(proc: subprocess.Popen[str], grace_s: float = GRACE_S) -> tuple[int, ...]:
    """Stop ``proc`` and every process below it: SIGTERM, then SIGKILL after ``grace_s``.

    torchrun starts each worker in a session (and process group) of its own,
    so killing torchrun's group alone would leave the workers running: the
    descendants are listed first, then each of their groups is signalled
    (never our own group).
    """
    import psutil

    try:
        root = psutil.Process(proc.pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        procs = []
    own_group = os.getpgrp()
    groups = {proc.pid}
    for p in procs:
        try:
            groups.add(os.getpgid(p.pid))
        except (ProcessLookupError, PermissionError):
            pass
    groups.discard(own_group)

    def signal_all(sig: signal.Signals) -> None:
        for group in groups:
            try:
                os.killpg(group, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for p in procs:
            try:
                p.send_signal(sig)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass

    signal_all(signal.SIGTERM)
    _gone, alive = psutil.wait_procs(procs, timeout=grace_s)
    if alive:
        signal_all(signal.SIGKILL)
        psutil.wait_procs(alive, timeout=5)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
        pass
    return tuple(p.pid for p in procs)


def _tail(text: str, lines: int = 25) -> str:
    kept = [line for line in text.rstrip().splitlines() if line.strip()][-lines:]
    return "\n".join(f"  | {line}" for line in kept) if kept else "  | (no output)"


def run_process(
    cmd: Sequence[str],
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    what: str = "the run",
) -> ProcessOutput:
    """Run ``cmd`` in a new session, capture its output, and stop its whole tree on timeout.

    Raises :class:`DistTimeoutError` after ``timeout_s`` seconds (with the
    last lines of its output), and stops the tree before re-raising when the
    caller is interrupted (a notebook's stop button). A non-zero exit is
    returned, not raised: the caller knows how to explain it.
    """
    check_real("timeout_s", timeout_s, low=0, low_open=True)
    start = time.perf_counter()
    proc = subprocess.Popen(
        list(cmd),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=None if env is None else dict(env),
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pids = _stop_tree(proc)
        try:
            stdout, stderr = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            stdout, stderr = "", ""  # a process outside the tree still holds a pipe
        raise DistTimeoutError(
            f"{what} did not finish within {timeout_s:g} s, so labkit stopped it and the "
            f"{len(pids)} process(es) it had started (SIGTERM, then SIGKILL). A run that hangs "
            "usually waits at a rendezvous or a collective that not every rank reached. Raise "
            f"timeout_s if the work is simply slow. Last lines of its output:\n"
            f"{_tail(stderr or stdout)}",
            pids,
        ) from None
    except BaseException:
        _stop_tree(proc)
        raise
    return ProcessOutput(proc.returncode, stdout, stderr, time.perf_counter() - start)


_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):\n(.*?)\n\s*={10,}", re.S)


def worker_error(stderr: str) -> str | None:
    """The failing worker's report from torchrun's summary: rank, exit code, and its traceback."""
    match = _ROOT_CAUSE.search(stderr)
    if match is None:
        return None
    lines = [line.rstrip() for line in match.group(1).splitlines() if line.strip()]
    return "\n".join(
        f"  {line.strip()}" if not line.startswith("    ") else f"  {line[2:]}" for line in lines
    )


def _last_exception_line(stderr: str) -> str | None:
    """The last "SomeError: message" line: the worker's own error in a Python traceback."""
    found = re.findall(
        r"^\s*(?:\[rank\d+\]:\s*)?([A-Za-z_][\w.]*(?:Error|Exception|Interrupt)\b.*)$", stderr, re.M
    )
    found = [f for f in found if "ChildFailedError" not in f]
    return found[-1].strip() if found else None


def worker_logs(log_dir: Path) -> dict[int, str]:
    """Each worker's stderr, by local rank, from the files torchrun wrote under ``--log-dir``.

    torchrun writes ``<log_dir>/<run id>/attempt_<n>/<local rank>/stderr.log``;
    the last attempt counts. Ranks whose file is missing are left out.
    """
    found: dict[int, tuple[int, Path]] = {}
    for path in Path(log_dir).glob("*/attempt_*/*/stderr.log"):
        try:
            attempt = int(path.parent.parent.name.removeprefix("attempt_"))
            rank = int(path.parent.name)
        except ValueError:
            continue
        if rank not in found or attempt > found[rank][0]:
            found[rank] = (attempt, path)
    logs = {}
    for rank, (_attempt, path) in sorted(found.items()):
        try:
            logs[rank] = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
    return logs


_FAILED_LOCAL_RANK = re.compile(r"\(local_rank:\s*(\d+)\)")


def _failed_ranks(root: str | None, logs: Mapping[int, str]) -> list[int]:
    """The local rank torchrun names as the first failure, else every rank that wrote to stderr."""
    match = _FAILED_LOCAL_RANK.search(root or "")
    if match and int(match.group(1)) in logs:
        return [int(match.group(1))]
    return [rank for rank, text in logs.items() if text.strip()]


def _workers_output(logs: Mapping[int, str], ranks: Sequence[int]) -> list[str]:
    lines = []
    for rank in ranks:
        lines += [f"What local rank {rank} wrote to stderr (last lines):", _tail(logs[rank])]
    return lines


def _failure_message(
    what: str, output: ProcessOutput, logs: Mapping[int, str] | None = None
) -> str:
    logs = logs or {}
    text = output.stderr
    root = worker_error(text)
    ranks = _failed_ranks(root, logs)
    # With torch's @record the report holds the traceback; without it, the worker printed it.
    first = (
        _last_exception_line(root or "")
        or next(filter(None, (_last_exception_line(logs[r]) for r in ranks)), None)
        or _last_exception_line(text)
    )
    lines = [
        f"{what} failed: torchrun exited with code {output.returncode} after {output.wall_s:.1f} s."
    ]
    if first:
        lines.append(f"The worker's error: {first}")
    if root:
        lines += ["torchrun's report of the first worker that failed:", root]
    lines += _workers_output(logs, ranks)
    if not root and not ranks:
        lines += ["Last lines of its output:", _tail(text or output.stdout)]
    return "\n".join(lines)


def build_worker_env(threads: int, env: Mapping[str, str] | None) -> dict[str, str]:
    merged = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        merged[name] = str(threads)
    root = Path(__file__).resolve().parents[2]
    if root.name != "site-packages":  # a source checkout: make `-m labkit...` import this labkit
        merged["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(root), merged.get("PYTHONPATH")) if p
        )
    merged.setdefault("PYTHONUNBUFFERED", "1")
    merged.setdefault("PYTHONFAULTHANDLER", "1")  # a crash prints every thread's Python stack
    merged.update(env or {})
    return merged


def run_torchrun(
    target: str,
    script_args: Sequence[str] = (),
    *,
    nproc: int,
    module: bool = True,
    threads_per_proc: int = 1,
    timeout_s: float = 120,
    env: Mapping[str, str] | None = None,
    what: str = "torchrun",
) -> tuple[dict[str, Any], ProcessOutput, list[str]]:
    """Run ``target`` under torchrun with ``--out FILE`` appended; return rank 0's JSON.

    Also returns torchrun's own output (each worker's output goes to a file
    of its own, read back when something fails) and the command as a user
    would type it (without the temporary ``--out`` and log folder). Raises
    :class:`DistRunError` when a worker fails or writes nothing, quoting its
    stderr, and :class:`DistTimeoutError` on timeout.
    """
    threads_per_proc = check_positive_int("threads_per_proc", threads_per_proc)
    args = check_script_args(script_args)
    shown = standalone_command(target, args, nproc=nproc, module=module)
    worker_env = build_worker_env(threads_per_proc, env)
    with tempfile.TemporaryDirectory(prefix="labkit-dist-") as folder:
        out = Path(folder) / "result.json"
        log_dir = Path(folder) / "logs"
        cmd = _torchrun_command(
            target,
            [*args, "--out", str(out)],
            nproc=nproc,
            module=module,
            launcher_args=["--log-dir", str(log_dir), "--redirects", "3"],
        )
        try:
            output = run_process(cmd, timeout_s=timeout_s, env=worker_env, what=what)
        except DistTimeoutError as exc:
            logs = worker_logs(log_dir)
            extra = _workers_output(logs, [r for r, text in logs.items() if text.strip()])
            raise DistTimeoutError("\n".join([str(exc), *extra]), exc.pids) from None
        if output.returncode != 0:
            raise DistRunError(_failure_message(what, output, worker_logs(log_dir)))
        if not out.exists():
            logs = worker_logs(log_dir)
            raise DistRunError(
                "\n".join(
                    [
                        f"{what} finished, but rank 0 wrote no result to --out. Last lines of its "
                        f"output:\n{_tail(output.stderr or output.stdout)}",
                        *_workers_output(logs, [r for r, text in logs.items() if text.strip()]),
                    ]
                )
            )
        data = json.loads(out.read_text(encoding="utf-8"))
    return data, output, shown
