"""NVIDIA Nsight Systems (``nsys``) and Nsight Compute (``ncu``): the commands, and whether they exist.

The framework profilers see operators; NVIDIA's tools see the whole process:

- **Nsight Systems** (``nsys profile``) records a timeline of CUDA API calls,
  kernels, copies, OS runtime calls and NVTX ranges (``profile_training``
  marks each phase with one), and ``--stats=true`` prints summary tables
  (the kernels by total time, the NVTX ranges) when it finishes.
- **Nsight Compute** (``ncu``) replays single kernels many times to read the
  hardware counters (achieved occupancy, memory throughput, the roofline).
  It is slow, so it is aimed at one kernel: ``-k regex:NAME -c 1``.

Both come with the CUDA toolkit (or as separate downloads from NVIDIA), not
with pip's torch, and both need a GPU to record anything. ``ncu`` also needs
access to the GPU's performance counters (``ERR_NVGPUCTRPERM`` otherwise: run
as root or allow non-admin profiling in the driver settings).
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit.core.results import JsonRecord
from labkit.core.validate import check_int, check_positive_int, check_real

#: Where to get the tools when they are missing.
NSYS_HINT = (
    "Nsight Systems ships with the CUDA toolkit (or from developer.nvidia.com/nsight-systems)"
)
NCU_HINT = (
    "Nsight Compute ships with the CUDA toolkit (or from developer.nvidia.com/nsight-compute)"
)

#: The ``--stats=true`` reports worth keeping from an nsys run.
STATS_REPORTS: tuple[str, ...] = (
    "nvtx_sum",
    "cuda_gpu_kern_sum",
    "cuda_api_sum",
    "cuda_gpu_mem_time_sum",
)


@dataclass(frozen=True)
class NsightTools:
    """Paths of ``nsys`` and ``ncu`` on the PATH, or None where a tool is missing."""

    nsys: str | None
    ncu: str | None

    def __str__(self) -> str:
        lines = []
        for name, path, hint in (("nsys", self.nsys, NSYS_HINT), ("ncu", self.ncu, NCU_HINT)):
            lines.append(f"{name}: {path}" if path else f"{name}: not found on the PATH ({hint})")
        return "\n".join(lines)


def find_nsight() -> NsightTools:
    """Whether ``nsys`` and ``ncu`` are on the PATH (CUDA toolkits often leave them off it)."""
    return NsightTools(nsys=shutil.which("nsys"), ncu=shutil.which("ncu"))


def nsight_commands(
    script: str = "train.py",
    *,
    args: Sequence[str] = (),
    kernel_regex: str = "KERNEL_FROM_NSYS",
    output: str = "report",
    python: str = "python",
) -> list[str]:
    """The two commands to profile ``python script args`` with Nsight, ready to paste in a shell.

    1. ``nsys profile -t cuda,nvtx,osrt --stats=true -o OUTPUT ...``: the
       timeline (``OUTPUT.nsys-rep``, opened with ``nsys-ui``) and, in the
       terminal, summary tables of the kernels and NVTX ranges.
    2. ``ncu --set full -k regex:KERNEL -c 1 -o OUTPUT ...``: every hardware
       metric for the first kernel whose name matches ``kernel_regex``
       (``OUTPUT.ncu-rep``, opened with ``ncu-ui``). The default is a placeholder
       to replace with a name from the nsys report: library kernels (cuDNN,
       CUTLASS) need not contain the layer's name, so a guess such as "conv"
       may match nothing.

    ``script`` may be ``"-m labkit.profiling.nsys_target"`` to profile the
    course CNN's training steps.
    """
    if isinstance(args, str):  # a str is a Sequence[str] to a type checker: each letter an arg
        raise TypeError(
            f"args must be a sequence of strings such as ('--steps', '20'), got {args!r}"
        )
    target = [python, *shlex.split(script), *args]
    nsys = [
        "nsys",
        "profile",
        "-t",
        "cuda,nvtx,osrt",
        "--stats=true",
        "--force-overwrite",
        "true",
        "-o",
        output,
        *target,
    ]
    ncu = [
        "ncu",
        "--set",
        "full",
        "-k",
        f"regex:{kernel_regex}",
        "-c",
        "1",
        "-f",
        "-o",
        output,
        *target,
    ]
    return [shlex.join(nsys), shlex.join(ncu)]


@dataclass(frozen=True)
class NsysRun(JsonRecord):
    """What one ``nsys profile --stats=true`` run did: the command, its outcome, its tables."""

    command: str
    ok: bool
    returncode: int | None
    seconds: float
    report_files: tuple[str, ...] = ()
    stats: dict[str, list[str]] = field(default_factory=dict)
    error: str = ""

    def summary(self) -> list[str]:
        if not self.ok:
            return [f"nsys profile --stats=true: failed ({self.error})"]
        lines = [f"nsys profile --stats=true: ran in {self.seconds:.1f} s"]
        for report, rows in self.stats.items():
            lines.append(f"nsys {report}:")
            lines += [f"  {row}" for row in rows]
        return lines

    def __str__(self) -> str:
        return "\n".join(self.summary())


def parse_stats(text: str, *, rows: int = 12) -> dict[str, list[str]]:
    """The first ``rows`` lines of each table in :data:`STATS_REPORTS` from nsys's ``--stats`` output.

    Recent nsys releases head each report ``[6/8] Executing 'cuda_gpu_kern_sum'
    stats report``; older ones ``** CUDA GPU Kernel Summary (cuda_gpu_kern_sum):``.
    Both are recognised. A report with no data says so in a line of its own
    ("SKIPPED: ... does not contain CUDA kernel data"), which is kept too.
    """
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        found = _EXECUTING.search(line) or (
            _OLD_HEADING.search(line) if line.startswith("**") else None
        )
        if found or _PROGRESS.match(line):
            current = found.group(1) if found and found.group(1) in STATS_REPORTS else None
            if current is not None:
                sections[current] = []
            continue
        if current is not None and line and len(sections[current]) < rows:
            sections[current].append(raw.rstrip())
    return sections


_EXECUTING = re.compile(r"Executing '([a-z_]+)' stats report")
_OLD_HEADING = re.compile(r"\(([a-z_]+)\):?\s*$")
_PROGRESS = re.compile(r"^(\[\d+/\d+\]|Generating |Generated:)")


def run_nsys(
    *,
    steps: int = 20,
    batch: int = 64,
    image_size: int = 32,
    timeout_s: float = 300.0,
    out_dir: Any = None,
    nsys: str | None = None,
) -> NsysRun:
    """Run ``nsys profile --stats=true`` on the course CNN's training steps, best effort.

    Runs ``python -m labkit.profiling.nsys_target`` under ``nsys`` in a
    subprocess with a timeout. Never raises for a failed run: a missing
    ``nsys``, a timeout or a non-zero exit comes back as ``ok=False`` with
    the reason, because a profiler that cannot attach (containers, missing
    permissions) must not take a benchmark down with it.
    """
    steps = check_positive_int("steps", steps)
    batch = check_positive_int("batch", batch)
    image_size = check_int("image_size", image_size, minimum=2)
    check_real("timeout_s", timeout_s, low=0, low_open=True)
    exe = nsys or find_nsight().nsys
    if exe is None:
        return NsysRun("nsys profile ...", False, None, 0.0, error=f"nsys not found ({NSYS_HINT})")
    folder = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="labkit-nsys-"))
    folder.mkdir(parents=True, exist_ok=True)
    output = folder / "report"
    cmd = [
        exe,
        "profile",
        "-t",
        "cuda,nvtx,osrt",
        "--stats=true",
        "--sample=none",
        "--cpuctxsw=none",
        "--force-overwrite",
        "true",
        "-o",
        str(output),
        sys.executable,
        "-m",
        "labkit.profiling.nsys_target",
        "--steps",
        str(steps),
        "--batch",
        str(batch),
        "--image-size",
        str(image_size),
    ]
    command = shlex.join(cmd)
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return NsysRun(
            command,
            False,
            None,
            time.perf_counter() - start,
            error=f"timed out after {timeout_s:g} s",
        )
    except OSError as exc:
        return NsysRun(command, False, None, time.perf_counter() - start, error=str(exc))
    seconds = time.perf_counter() - start
    files = tuple(sorted(str(p) for p in folder.glob("report*")))
    stats = parse_stats(done.stdout)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return NsysRun(
            command,
            False,
            done.returncode,
            seconds,
            files,
            stats,
            error=f"exit code {done.returncode}: " + " | ".join(tail),
        )
    return NsysRun(command, True, 0, seconds, files, stats)
