"""Build the student edition of the notebooks: what `make student` runs.

The instructor notebooks in notebooks/ carry reference solutions between
``### BEGIN SOLUTION`` and ``### END SOLUTION`` in cells with nbgrader
metadata. This script strips them with nbgrader's own preprocessors, in the
order ``nbgrader generate_assignment`` runs them, so that the student edition
is exactly what an instructor would release from JupyterHub; it just needs no
course directory and no gradebook database. Left out of that chain:
IncludeHeaderFooter (no header or footer is configured), InstantiateTests
(needs a kernel, and acts only on ``AUTOTEST`` lines, which are refused here)
and SaveCells (writes the gradebook).

A solution region becomes ``# YOUR CODE HERE`` without nbgrader's default
``raise NotImplementedError()``: the ``name = ...  # your answer`` blanks
before each region keep the check cells runnable, so an unsolved notebook runs
top to bottom and every check prints "not solved yet" with a hint instead of a
traceback.

Every notebook is written to a temporary file first and then renamed, so a
failure never leaves a half-written notebook behind.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import nbformat
from nbformat import NotebookNode

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "build" / "student"
CODE_STUB = "# YOUR CODE HERE"
# Instructor-only notebook metadata: the build stamp of `make notebooks`.
INSTRUCTOR_METADATA = ("labkit",)


def _preprocessors() -> list:
    """generate_assignment's chain, minus the steps that need a kernel or a database."""
    from nbgrader.preprocessors import (
        CheckCellMetadata,
        ClearHiddenTests,
        ClearMarkScheme,
        ClearOutput,
        ClearSolutions,
        ComputeChecksums,
        LockCells,
    )

    return [
        LockCells(),
        ClearSolutions(code_stub={"python": CODE_STUB}, enforce_metadata=True),
        ClearOutput(),
        CheckCellMetadata(),
        ComputeChecksums(),
        # (generate_assignment saves the cells to its database here.)
        ClearHiddenTests(enforce_metadata=True),
        ClearMarkScheme(enforce_metadata=True),
        ComputeChecksums(),
        CheckCellMetadata(),
    ]


def student_notebook(nb: NotebookNode) -> NotebookNode:
    """The student version of an instructor notebook (``nb`` is modified in place)."""
    autotest = [c for c in nb.cells if "AUTOTEST" in c.source]
    if autotest:
        raise ValueError(
            "a cell uses nbgrader's AUTOTEST directive, which needs `nbgrader generate_assignment` "
            f"(it runs a kernel); write a labkit.check function instead:\n{autotest[0].source}"
        )
    resources: dict = {}
    for step in _preprocessors():
        nb, resources = step.preprocess(nb, resources)
    for key in INSTRUCTOR_METADATA:
        nb.metadata.pop(key, None)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.execution_count = None
    nbformat.validate(nb)
    return nb


def _file_mode() -> int:
    """What a plain ``open(path, "w")`` would give (mkstemp's files are private, 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_atomically(nb: NotebookNode, path: Path) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".ipynb.tmp")
    os.close(fd)
    try:
        nbformat.write(nb, tmp)
        os.chmod(tmp, _file_mode())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def build(sources: list[Path], out: Path) -> list[Path]:
    """Write the student edition of ``sources`` into ``out``; returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    for source in sources:
        if source.resolve().parent == out.resolve():
            raise ValueError(
                f"--out {out} is the folder of {source}: the student edition would overwrite "
                "the instructor notebooks. Choose another --out (the default is build/student)."
            )
    written = []
    for source in sources:
        try:
            nb = student_notebook(nbformat.read(source, as_version=4))
        except Exception as exc:  # nbgrader's messages do not name the notebook
            raise RuntimeError(f"{source}: {type(exc).__name__}: {exc}") from exc
        target = out / source.name
        write_atomically(nb, target)
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="folder for the student notebooks (default: build/student)",
    )
    parser.add_argument(
        "notebooks",
        nargs="*",
        type=Path,
        help="instructor notebooks (default: every notebooks/NN_*.ipynb)",
    )
    args = parser.parse_args(argv)
    sources = args.notebooks or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if not sources:
        print("student.py: no notebooks found in notebooks/", file=sys.stderr)
        return 2
    missing = [str(p) for p in sources if not p.is_file()]
    if missing:
        print(f"student.py: no such notebook: {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        written = build(sources, args.out)
    except (OSError, ValueError, RuntimeError) as exc:
        print(f"student.py: {exc}", file=sys.stderr)
        return 1
    print(f"Wrote {len(written)} student notebooks (solutions and outputs removed) to {args.out}/.")
    print(f"Open them with `make lab-student`, or `jupyter lab {args.out}`.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
