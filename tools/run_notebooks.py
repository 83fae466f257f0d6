"""Run the notebooks top to bottom in *this* Python and check that they ran cleanly: `make test-matrix`.

    .venv-matrix/b-torch/bin/python tools/run_notebooks.py \
        [--without MOD,...] [--with MOD,...] [--json OUT.json] [NOTEBOOK ...]

Strict nbval (`make test`) compares every output with the committed one, made
in the full CPU environment. In a smaller environment (torch only; torch and
TensorFlow) the outputs differ by design, so this checks what must hold in
every environment instead:

- every cell runs: no cell raises, and no output is of type error;
- no stream output (stdout or stderr, C-level included) contains "Traceback";
- every optional package missing here is *announced*: each notebook that uses
  it (:data:`OPTIONAL`) prints at least one line in labkit's wording
  (``<name> is not installed ... Install it with: <command>``, see
  ``labkit.core.optional.MissingPackageError``) naming the install command. A cell
  that skips silently is caught;
- no such line names a package that *is* installed: a broken install must
  not pass for a missing one.

Each notebook runs as a copy in a temporary folder (``notebooks/`` is never
touched), in a kernel that is this interpreter: a temporary kernelspec whose
argv is ``sys.executable``, found first on ``JUPYTER_PATH``; a probe notebook
checks the kernel's ``sys.prefix`` before anything else runs, so a kernel
registered for another venv can never stand in. ``--without``/``--with``
check up front that the environment really lacks (or has) those modules.
Prints each notebook's time and status; exit status 1 if any failed, 2 if the
environment is not the one asked for.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_GLOB = "notebooks/[0-9][0-9]_*.ipynb"
NEEDED = ("nbformat", "nbclient", "ipykernel")
CELL_TIMEOUT_S = 900


@dataclass(frozen=True)
class Optional:
    """An optional package, how labkit names it when it is missing, and the notebooks that use it."""

    name: str  # as in "<name> is not installed"
    modules: tuple[str, ...]  # all importable = installed
    hint: str  # the install command the line must contain
    notebooks: tuple[str, ...]  # number prefixes of the notebooks that use it

    def installed(self) -> bool:
        return all(importlib.util.find_spec(m) is not None for m in self.modules)

    def says_missing(self, line: str) -> bool:
        return f"{self.name} is not installed" in line


def optional_packages() -> tuple[Optional, ...]:
    """The table, with the install commands taken from labkit itself (so the wording cannot drift).

    Kernel Tuner is not listed: notebook 07 replays a recorded cache without it
    (``labkit.kernels.tuning.replay`` reads the file directly).
    """
    from labkit.core.optional import INSTALL_HINTS
    from labkit.kernels.simulator import INSTALL_HINT as NUMBA_CUDA_HINT

    return (
        Optional(
            "tensorflow",
            ("tensorflow",),
            INSTALL_HINTS["tensorflow"],
            ("00", "04", "06", "08", "09", "10"),
        ),
        Optional("cupy", ("cupy",), INSTALL_HINTS["cupy"], ("00",)),
        Optional("numba-cuda", ("numba", "numba_cuda"), NUMBA_CUDA_HINT, ("07",)),
        Optional("sklearn", ("sklearn",), INSTALL_HINTS["sklearn"], ("05",)),
        Optional("triton", ("triton",), INSTALL_HINTS["triton"], ("12",)),
    )


@dataclass
class NotebookRun:
    """One notebook's run: wall seconds, problems found (none: it passed), packages it announced."""

    notebook: str
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    announced: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _stream_lines(nb: Any) -> list[tuple[int, str, str]]:
    """(cell index, stream name, line) for every line of every stream output."""
    lines = []
    for index, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if out.get("output_type") == "stream":
                text = out.get("text", "")
                text = "".join(text) if isinstance(text, list) else text
                lines += [(index, out.get("name", "stream"), ln) for ln in text.splitlines()]
    return lines


def check_outputs(nb: Any, notebook: str, optional: tuple[Optional, ...]) -> NotebookRun:
    """What is wrong with an executed notebook's outputs (see the module docstring)."""
    run = NotebookRun(notebook)
    for index, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if out.get("output_type") == "error":
                value = str(out.get("evalue", "")).strip().splitlines()[:1]
                run.problems.append(
                    f"cell {index}: error output {out.get('ename')}: {''.join(value)}"
                )
    lines = _stream_lines(nb)
    for index, name, line in lines:
        if "Traceback" in line:
            run.problems.append(f"cell {index}: 'Traceback' in {name}: {line.strip()[:200]}")
    prefix = notebook[:2]
    for package in optional:
        said = [(i, ln) for i, _, ln in lines if package.says_missing(ln)]
        if package.installed():
            run.problems += [
                f"cell {i}: says {package.name} is missing, but it is installed here "
                f"(a broken install?): {ln.strip()[:200]}"
                for i, ln in said
            ]
        elif prefix in package.notebooks:
            if not said:
                run.problems.append(
                    f"{package.name} is not installed here, but no line says so "
                    f"(expected '{package.name} is not installed ... {package.hint}'): "
                    "a cell that uses it was skipped silently, or failed"
                )
            run.problems += [
                f"cell {i}: the line about {package.name} does not name the install "
                f"command {package.hint!r}: {ln.strip()[:200]}"
                for i, ln in said
                if package.hint not in ln
            ]
            if said:
                run.announced.append(package.name)
    return run


def _kernelspec(workdir: Path) -> str:
    """A temporary kernelspec for this interpreter, first on JUPYTER_PATH; returns its name."""
    name = f"labkit-run-{os.getpid()}"
    spec_dir = workdir / "jupyter" / "kernels" / name
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"{name} ({sys.prefix})",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    old = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(workdir / "jupyter"), old]))
    return name


def _execute(nb: Any, kernel: str, cwd: Path) -> str | None:
    """Run ``nb`` in place; the error that stopped it, if any (its outputs are kept either way)."""
    from nbclient import NotebookClient

    running: dict[str, int] = {}

    def started(cell: Any, cell_index: int) -> None:
        running["cell"] = cell_index

    client = NotebookClient(
        nb,
        kernel_name=kernel,
        timeout=CELL_TIMEOUT_S,
        allow_errors=False,
        record_timing=False,
        resources={"metadata": {"path": str(cwd)}},
        on_cell_execute=started,
    )
    try:
        client.execute()
    except Exception as exc:  # CellExecutionError, a timeout, a dead kernel: all a failure
        reason = stop_reason(exc, running.get("cell"))
        cell = nb.cells[running["cell"]] if "cell" in running else None
        if cell is not None and not any(
            o.get("output_type") == "error" for o in cell.get("outputs", [])
        ):  # not the cell's own exception: mark the cell that was running when it stopped
            from nbformat import from_dict

            error = {"output_type": "error", "ename": type(exc).__name__, "evalue": reason}
            cell.setdefault("outputs", []).append(from_dict(error | {"traceback": []}))
        return reason
    return None


def stop_reason(exc: BaseException, cell: int | None) -> str:
    """Why a notebook stopped, naming the cell that was running.

    A cell's own exception carries ``ename``/``evalue``. Anything else came
    from nbclient: a dead kernel (a crash, or the kernel killed for memory)
    surfaces there as DeadKernelError or, from nbclient's kernel-alive poll, as
    a bare AssertionError; either way the kernel stopped in the cell running then.
    """
    ename = getattr(exc, "ename", None)
    where = f" in cell {cell}" if cell is not None else ""
    if ename is None:
        name = type(exc).__name__
        detail = str(exc).strip().splitlines()[-1:] or [""]
        if name in ("DeadKernelError", "AssertionError"):
            return (
                f"stopped{where}: the kernel died or nbclient lost it ({name}: {detail[0]!r}); "
                "run the notebook as a script to see the crash"
            )[:500]
        return f"stopped{where}: {name}: {detail}"[:500]
    evalue = getattr(exc, "evalue", None) or str(exc)
    return f"stopped: {ename}: {str(evalue).strip().splitlines()[-1:] or ['']}"[:500]


def check_kernel(kernel: str, workdir: Path) -> str:
    """The kernel's sys.prefix; exits with status 2 unless it is this interpreter's."""
    import nbformat

    probe = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("import sys; print(sys.prefix)")]
    )
    error = _execute(probe, kernel, workdir)
    got = [ln for _, _, ln in _stream_lines(probe)]
    if error or got[-1:] != [sys.prefix]:
        raise SystemExit(
            f"run_notebooks: the kernel is not {sys.executable} (its sys.prefix: "
            f"{got[-1:] or error}); the notebooks would run in another environment"
        )
    return got[-1]


def run_notebook(
    path: Path, kernel: str, workdir: Path, optional: tuple[Optional, ...], keep: Path | None = None
) -> NotebookRun:
    """Execute a copy of ``path`` in ``workdir`` and check its outputs; never raises for the notebook.

    With ``keep``, the executed copy is written there (to read a failure's outputs).
    """
    import nbformat

    copy = workdir / path.stem / path.name
    copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, copy)
    nb = nbformat.read(copy, as_version=4)
    start = time.perf_counter()
    error = _execute(nb, kernel, copy.parent)
    seconds = time.perf_counter() - start
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, keep / path.name)
    run = check_outputs(nb, path.name, optional)
    run.seconds = round(seconds, 1)
    if error and not run.problems:  # the error outputs usually say it already
        run.problems.append(error)
    return run


def _modules(text: str) -> list[str]:
    return [m.strip() for m in text.split(",") if m.strip()]


def check_environment(without: list[str], with_: list[str]) -> list[str]:
    """Why this environment is not the one asked for (nothing: it is)."""
    prefix = sys.prefix
    wrong = [
        f"{m} is installed in {prefix}, but this environment must not have it; "
        f"rebuild it: rm -rf {prefix} && make test-matrix"
        for m in without
        if importlib.util.find_spec(m) is not None
    ]
    wrong += [
        f"{m} is not installed in {prefix}, but this environment must have it; "
        f"rebuild it: rm -rf {prefix} && make test-matrix"
        for m in with_
        if importlib.util.find_spec(m) is None
    ]
    return wrong


def _notebook_paths(names: list[str]) -> list[Path]:
    paths = [Path(n) for n in names] or sorted(ROOT.glob(DEFAULT_GLOB))
    if not paths:
        raise SystemExit(f"run_notebooks: no notebooks match {ROOT / DEFAULT_GLOB}")
    for p in paths:
        if p.suffix != ".ipynb" or not p.is_file():
            raise SystemExit(f"run_notebooks: NOTEBOOK {p} is not an .ipynb file")
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "notebooks",
        nargs="*",
        metavar="NOTEBOOK",
        help=f"notebooks to run (default: {DEFAULT_GLOB})",
    )
    parser.add_argument(
        "--without",
        type=_modules,
        default=[],
        metavar="MOD,...",
        help="modules this environment must NOT have (checked first)",
    )
    parser.add_argument(
        "--with",
        dest="with_",
        type=_modules,
        default=[],
        metavar="MOD,...",
        help="modules this environment must have (checked first)",
    )
    parser.add_argument("--json", type=Path, metavar="OUT.json", help="also write the result here")
    parser.add_argument(
        "--keep", type=Path, metavar="DIR", help="write the executed notebooks here"
    )
    args = parser.parse_args(argv)
    paths = _notebook_paths(args.notebooks)
    missing = [m for m in NEEDED if importlib.util.find_spec(m) is None]
    if missing:
        print(
            f"run_notebooks: {', '.join(missing)} not installed in {sys.prefix}; run: "
            f"{sys.executable} -m pip install {' '.join(missing)}",
            file=sys.stderr,
        )
        return 2
    if wrong := check_environment(args.without, args.with_):
        print("\n".join(f"run_notebooks: {w}" for w in wrong), file=sys.stderr)
        return 2
    optional = optional_packages()
    absent = [p.name for p in optional if not p.installed()]
    os.environ["LABKIT_PROGRESS"] = "0"  # the kernels inherit it: no progress bars in outputs
    runs: list[NotebookRun] = []
    with tempfile.TemporaryDirectory(prefix="run_notebooks_") as tmp:
        kernel = _kernelspec(Path(tmp))
        check_kernel(kernel, Path(tmp))
        print(f"run_notebooks: kernel {sys.executable} (sys.prefix {sys.prefix}, checked)")
        print(
            f"run_notebooks: not installed here: {', '.join(absent) or 'none'}"
            + (" (their notebooks must say so, with the install command)" if absent else "")
        )
        for path in paths:
            run = run_notebook(path, kernel, Path(tmp), optional, args.keep)
            runs.append(run)
            said = f"  (announced missing: {', '.join(run.announced)})" if run.announced else ""
            print(
                f"  {'ok' if run.ok else 'FAILED':<7}{run.seconds:7.1f} s  {run.notebook}{said}",
                flush=True,
            )
            for problem in run.problems:
                print(f"      {problem}", flush=True)
    failed = sum(not r.ok for r in runs)
    total_s = sum(r.seconds for r in runs)
    print(f"run_notebooks: {total_s:.1f} s in all; {len(runs) - failed} ok, {failed} failed")
    if args.json:
        result = {
            "python": sys.executable,
            "prefix": sys.prefix,
            "not_installed": absent,
            "total_seconds": round(total_s, 1),
            "failed": failed,
            "notebooks": [asdict(r) | {"ok": r.ok} for r in runs],
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
