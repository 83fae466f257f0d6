"""Every notebook on a machine with an NVIDIA GPU, the GPU visible: `make test-gpu`.

    python tools/gpu_notebooks.py [--json OUT.json] [--keep DIR] [NOTEBOOK ...]

Strict nbval (`make test`) compares the notebooks with outputs made on the
CPU reference machine, so it runs with the GPU hidden (the reference profile,
labkit/machine/profile.py). This is the other half: with no profile and the GPU
visible, it executes every notebook and checks what must hold on any GPU:

- no cell raises, and no stream output contains "Traceback";
- every optional package that is missing is announced in labkit's one line
  with its install command (as in `make test-matrix`);
- every GPU cell (one that calls ``labkit.require_gpu``) ran live: it did not
  print "No GPU here", and it printed something. A GPU cell that announced a
  missing package (TensorFlow on a torch-only GPU image) is reported as
  skipped, not passed;
- what a live GPU cell printed is sane: every bandwidth is above zero and at
  most the card's theoretical peak (``2 × memory clock × bus width``, from
  the CUDA driver); every speedup or ratio printed as ``N×`` is a finite
  positive number; no "nan" or "inf" is printed; and each kernel experiment
  of notebook 07 says its kernels were verified before they were timed.

Outputs are not compared with the committed ones: they are GPU results, and
the committed ones are CPU results. The notebooks run as copies in a
temporary folder; ``--keep`` writes the executed copies somewhere to read.

The notebooks run in Jupyter kernels (nbclient) where nbclient and ipykernel
are installed; elsewhere (a bare GPU image) each notebook runs as one Python
script made of its code cells, with a marker printed before each cell, so a
failure still names its cell. Cells after a failing one do not run then.

Exit status: 0 if every check passed, 1 if one failed, 2 if there is no
usable GPU here (or a profile hides it).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "tools"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import run_notebooks  # noqa: E402

#: A GPU cell is one that asks for a GPU.
GPU_CELL = "labkit.require_gpu("
#: The first words labkit.machine.gpu.require_gpu prints where no GPU is usable.
NO_GPU = "No GPU here: this cell would show"
#: labkit's one line for a missing optional package (labkit.core.optional.MissingPackageError).
MISSING_PACKAGE = re.compile(r"(\S+) is not installed\b.*Install it with", re.S)
RATE = re.compile(r"(?<![\w.])([-+]?\d+(?:\.\d+)?) ?([kMGT])(i?)B/s(?:ec)?\b")
_RATE_GB = {"k": 1e-6, "M": 1e-3, "G": 1.0, "T": 1e3}
TIMES = re.compile(r"(?<![\w.])([\w.+-]+) ?×")
NON_FINITE = re.compile(r"(?<![\w.])([-+]?(?:nan|inf))(?![\w×])", re.I)
#: Each kernel experiment of notebook 07 starts its table with this line ...
KERNEL_TABLE = "  rates count "
#: ... and must say that its kernels were checked before timing (labkit.kernels.cupy_run).
KERNEL_VERIFIED = "verified before timing"
#: The script runner's marker line before each cell, followed by the cell's index ...
MARKER = "<<<labkit-test-gpu cell "
#: ... and after a cell that left figures open (Jupyter would have shown them), their count.
FIGURES = "<<<labkit-test-gpu figures "
#: After every cell the script closes its figures, and says how many there were.
_AFTER_CELL = """
def _labkit_after_cell():
    import matplotlib.pyplot as plt
    if plt.get_fignums():
        print("\\n{figures}" + str(len(plt.get_fignums())) + ">>>", flush=True)
        plt.close("all")
"""


@dataclass
class GpuRun:
    """One notebook on the GPU: its time, the problems found, and its GPU cells' fates."""

    notebook: str
    runner: str = ""
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    announced: list[str] = field(default_factory=list)
    gpu_cells_live: list[int] = field(default_factory=list)
    gpu_cells_skipped: dict[int, str] = field(default_factory=dict)
    stopped_at: int | None = None  # the cell whose error stopped the run

    @property
    def ok(self) -> bool:
        return not self.problems


# --------------------------------------------------------------------------- the checks


def cell_text(cell: Any) -> str:
    """Everything a code cell showed: its streams and the plain text of its displays."""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            text = out.get("text", "")
        else:
            text = out.get("data", {}).get("text/plain", "")
        parts.append("".join(text) if isinstance(text, list) else str(text))
    return "".join(parts)


def _source(cell: Any) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def sanity_problems(text: str, *, peak_gb_per_s: float | None) -> list[str]:
    """What is implausible in a live GPU cell's output (empty: nothing)."""
    problems = []
    for match in RATE.finditer(text):
        binary = (1024 / 1000) ** " kMGT".index(match.group(2)) if match.group(3) else 1.0
        value = float(match.group(1)) * _RATE_GB[match.group(2)] * binary
        if value <= 0:
            problems.append(f"a bandwidth of {match.group(0)}, not above zero")
        elif peak_gb_per_s is not None and value > peak_gb_per_s * 1.01:  # 3-digit rounding
            problems.append(
                f"a bandwidth of {match.group(0)}, above the card's theoretical peak of "
                f"{peak_gb_per_s:,.0f} GB/s"
            )
    for match in TIMES.finditer(text):
        token = match.group(1).strip("(+")
        try:
            value = float(token)
        except ValueError:
            continue  # "n×n", "16×16 @": a shape, not a ratio
        if not math.isfinite(value) or value <= 0:
            problems.append(f"a ratio of {match.group(0)}, not a finite positive number")
    problems += [f"{m.group(1)!r} printed" for m in NON_FINITE.finditer(text)]
    tables = text.count(KERNEL_TABLE)
    verified = text.count(KERNEL_VERIFIED)
    if tables and verified < tables:
        problems.append(
            f"{tables} kernel experiment(s), but only {verified} say their kernels were "
            f"{KERNEL_VERIFIED}"
        )
    return problems


def check_gpu_cells(nb: Any, run: GpuRun, *, peak_gb_per_s: float | None) -> None:
    """Record each GPU cell as live or skipped, and every problem with one, in ``run``."""
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or GPU_CELL not in _source(cell):
            continue
        text = cell_text(cell)
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if errors:
            continue  # already reported as an error output
        if NO_GPU in text:
            run.problems.append(f"cell {index}: the GPU cell did not run live ('{NO_GPU} ...')")
            continue
        if run.stopped_at is not None and index > run.stopped_at:
            run.problems.append(
                f"cell {index}: the GPU cell did not run (cell {run.stopped_at} failed first)"
            )
            continue
        missing = MISSING_PACKAGE.search(text)
        rest = [ln for ln in text.splitlines() if ln.strip() and not MISSING_PACKAGE.search(ln)]
        if missing and not rest:  # it only said which package it lacks
            run.gpu_cells_skipped[index] = f"{missing.group(1)} is not installed"
            continue
        if not text.strip():
            run.problems.append(f"cell {index}: the GPU cell printed nothing")
            continue
        run.gpu_cells_live.append(index)
        run.problems += [
            f"cell {index}: {p}" for p in sanity_problems(text, peak_gb_per_s=peak_gb_per_s)
        ]


# --------------------------------------------------------------------------- running


def script_source(nb: Any) -> str:
    """The notebook's code cells as one script: a marker line before each cell, figures counted after.

    The script runs as ``python -c``, so that, as in a Jupyter kernel,
    ``__main__`` has no file: a DataLoader's worker processes (forkserver or
    spawn) then do not re-run the notebook when they start.
    """
    parts = ["import matplotlib\nmatplotlib.use('Agg')\n" + _AFTER_CELL.format(figures=FIGURES)]
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        parts.append(
            f"print('\\n' + {MARKER + str(index) + '>>>'!r}, flush=True)\n"
            f"{_source(cell)}\n_labkit_after_cell()\n"
        )
    return "\n".join(parts)


def split_script_output(nb: Any, output: str, returncode: int) -> tuple[int | None, str | None]:
    """Put the script's output (stdout and stderr together) back into ``nb``'s cells.

    Returns (the cell that was running when the script failed, the error), or
    (None, None) when it ran to the end.
    """
    current = None
    chunks: dict[int, list[str]] = {}
    figures: dict[int, int] = {}
    for line in output.splitlines(keepends=True):
        for marker in (MARKER, FIGURES):
            at = line.find(marker)
            if at >= 0:
                if current is not None and line[:at]:
                    chunks[current].append(line[:at])
                number = int(line[at + len(marker) :].strip().rstrip(">"))
                if marker == MARKER:
                    current = number
                    chunks[current] = []
                elif current is not None:
                    figures[current] = number
                break
        else:
            if current is not None:
                chunks[current].append(line)
    for index, lines in chunks.items():
        text = "".join(lines)
        outputs: list[dict[str, Any]] = []
        if text.strip("\n"):
            outputs.append({"output_type": "stream", "name": "stdout", "text": text.lstrip("\n")})
        outputs += [
            {"output_type": "display_data", "data": {"text/plain": "<Figure>"}, "metadata": {}}
        ] * figures.get(index, 0)
        nb.cells[index]["outputs"] = outputs
    if returncode == 0:
        return None, None
    tail = [ln for ln in output.strip().splitlines() if ln.strip()][-1:] or [f"exit {returncode}"]
    if current is not None:
        nb.cells[current].setdefault("outputs", []).append(
            {"output_type": "error", "ename": "ScriptError", "evalue": tail[0], "traceback": []}
        )
    return current, f"stopped in cell {current}: {tail[0]}"[:500]


def execute_as_script(nb: Any, cwd: Path, timeout_s: float) -> tuple[int | None, str | None]:
    """Run ``nb``'s code cells as one Python script in ``cwd``; fills in the cells' outputs.

    Returns what :func:`split_script_output` does. On a timeout the whole
    process group is killed, DataLoader workers and torchrun children too, so
    nothing keeps holding the GPU.
    """
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", script_source(nb)],
        cwd=cwd,
        env=env,
        text=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        current, _error = split_script_output(nb, output or "", 1)
        return current, f"stopped in cell {current}: timed out after {timeout_s:.0f} s"
    return split_script_output(nb, output, proc.returncode)


def uses_jupyter() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in run_notebooks.NEEDED)


class _Node(dict):
    """A notebook read without nbformat: a dict whose keys also read as attributes."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _nodes(value: Any) -> Any:
    if isinstance(value, dict):
        return _Node({k: _nodes(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_nodes(v) for v in value]
    return value


def read_notebook(path: Path) -> Any:
    """The notebook at ``path``, with nbformat where it is installed (a bare GPU image lacks it)."""
    if importlib.util.find_spec("nbformat") is not None:
        import nbformat

        return nbformat.read(path, as_version=4)
    return _nodes(json.loads(path.read_text(encoding="utf-8")))


def run_notebook(
    path: Path,
    workdir: Path,
    kernel: str | None,
    *,
    peak_gb_per_s: float | None,
    keep: Path | None = None,
    timeout_s: float = run_notebooks.CELL_TIMEOUT_S,
) -> GpuRun:
    """Execute a copy of ``path`` and check it; never raises for the notebook."""
    copy = workdir / path.stem / path.name
    copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, copy)
    nb = read_notebook(copy)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell["outputs"] = []
    start = time.perf_counter()
    stopped_at = None
    if kernel is not None:
        error = run_notebooks._execute(nb, kernel, copy.parent)
        stopped_at = next(
            (
                i
                for i, c in enumerate(nb.cells)
                if any(o.get("output_type") == "error" for o in c.get("outputs", []))
            ),
            None,
        )
    else:
        stopped_at, error = execute_as_script(nb, copy.parent, timeout_s)
    seconds = time.perf_counter() - start
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        (keep / path.name).write_text(
            json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
        )
    checked = run_notebooks.check_outputs(nb, path.name, run_notebooks.optional_packages())
    run = GpuRun(
        path.name,
        runner="jupyter" if kernel else "script",
        seconds=round(seconds, 1),
        problems=list(checked.problems),
        announced=list(checked.announced),
    )
    if error and not run.problems:
        run.problems.append(error)
    run.stopped_at = stopped_at
    check_gpu_cells(nb, run, peak_gb_per_s=peak_gb_per_s)
    return run


def gpu_here() -> tuple[str, float | None] | str:
    """(the GPU's name, its theoretical bandwidth in GB/s), or why there is no usable GPU."""
    import labkit
    from labkit.machine import profile
    from labkit.machine.nvidia import nvidia_info

    if profile.active() is not None:
        return (
            f"{profile.ENV_VAR}={profile.active().name} is set; make test-gpu runs without a "
            "profile (unset it)"
        )
    if not labkit.has_gpu():
        return "no usable CUDA GPU here (labkit doctor says why); make test-gpu needs one"
    devices = nvidia_info().devices
    if not devices:
        return "torch sees a GPU, but the CUDA driver reports no device"
    return devices[0].name, devices[0].bandwidth_gb_per_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", metavar="NOTEBOOK")
    parser.add_argument("--json", type=Path, metavar="OUT.json", help="also write the result here")
    parser.add_argument(
        "--keep", type=Path, metavar="DIR", help="write the executed notebooks here"
    )
    args = parser.parse_args(argv)
    paths = run_notebooks._notebook_paths(args.notebooks)
    found = gpu_here()
    if isinstance(found, str):
        print(f"gpu_notebooks: {found}", file=sys.stderr)
        return 2
    name, peak = found
    os.environ["LABKIT_PROGRESS"] = "0"
    # The notebooks run in a temporary folder: a relative PYTHONPATH=. would lose labkit.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    )
    runs: list[GpuRun] = []
    with tempfile.TemporaryDirectory(prefix="gpu_notebooks_") as tmp:
        kernel = None
        if uses_jupyter():
            kernel = run_notebooks._kernelspec(Path(tmp))
            run_notebooks.check_kernel(kernel, Path(tmp))
        peak_text = f"{peak:,.0f} GB/s" if peak else "unknown"
        print(
            f"gpu_notebooks: {name} (theoretical bandwidth {peak_text}); notebooks run "
            f"{'in Jupyter kernels' if kernel else 'as scripts (no nbclient/ipykernel here)'}"
        )
        for path in paths:
            run = run_notebook(path, Path(tmp), kernel, peak_gb_per_s=peak, keep=args.keep)
            runs.append(run)
            if args.json:  # rewritten after each notebook: a run cut off by a time limit keeps it
                _write_json(args.json, name, peak, runs)
            skipped = "".join(
                f"; GPU cell {i} skipped: {why}" for i, why in run.gpu_cells_skipped.items()
            )
            print(
                f"  {'ok' if run.ok else 'FAILED':<7}{run.seconds:7.1f} s  {run.notebook}  "
                f"{len(run.gpu_cells_live)} GPU cell(s) live{skipped}",
                flush=True,
            )
            for problem in run.problems:
                print(f"      {problem}", flush=True)
    failed = sum(not r.ok for r in runs)
    live = sum(len(r.gpu_cells_live) for r in runs)
    skipped = sum(len(r.gpu_cells_skipped) for r in runs)
    print(
        f"gpu_notebooks: {len(runs) - failed} notebook(s) ok, {failed} failed; GPU cells: {live} "
        f"live, {skipped} skipped for a missing package"
    )
    return 1 if failed else 0


def _write_json(path: Path, gpu: str, peak: float | None, runs: list[GpuRun]) -> None:
    result = {
        "gpu": gpu,
        "theoretical_gb_per_s": peak,
        "failed": sum(not r.ok for r in runs),
        "gpu_cells_live": sum(len(r.gpu_cells_live) for r in runs),
        "gpu_cells_skipped": sum(len(r.gpu_cells_skipped) for r in runs),
        "notebooks": [asdict(r) | {"ok": r.ok} for r in runs],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
