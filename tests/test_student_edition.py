"""`make student`: nbgrader strips the solutions, the notebooks still run, nbgrader grades them.

The student edition must give nothing away (no solution line, no output), must
keep everything else byte for byte (so the reference solutions, put back, give
the instructor notebook that strict nbval runs), and must run top to bottom
with every check saying "not solved yet" instead of raising. The last test
runs the real nbgrader CLI on one notebook, as an instructor would on
JupyterHub, and checks the points it gives.
"""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import nbgrader  # noqa: F401  (tools/student.py runs it; gpu_checks.sh leaves this module out without it)
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import student  # noqa: E402
from nbcheck import KERNEL_NAME  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
NAMES = [p.name for p in NOTEBOOKS]
N_EXERCISES = 34
BEGIN, END, STUB = "### BEGIN SOLUTION", "### END SOLUTION", student.CODE_STUB
BLANK = "= ...  # your answer"
# The fastest notebook with exercises (about 15 s): the nbgrader end-to-end run.
NBGRADER_NOTEBOOK, NBGRADER_POINTS = "00_setup_and_devices.ipynb", 5


def _grading(cell: nbformat.NotebookNode) -> dict:
    return cell.metadata.get("nbgrader", {})


def _is_answer(cell: nbformat.NotebookNode) -> bool:
    return bool(_grading(cell).get("solution"))


def _is_check(cell: nbformat.NotebookNode) -> bool:
    return bool(_grading(cell).get("grade"))


def _split(source: str) -> tuple[list[str], list[str]]:
    """The lines outside solution regions, and the lines inside them (markers excluded)."""
    outside, inside, in_solution = [], [], False
    for line in source.split("\n"):
        if BEGIN in line:
            in_solution = True
        elif END in line:
            in_solution = False
        else:
            (inside if in_solution else outside).append(line)
    return outside, inside


def _text(cell: nbformat.NotebookNode) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append(out.get("text", ""))
        parts.append(out.get("data", {}).get("text/plain", ""))
        parts.append(out.get("evalue", ""))
    return "\n".join(parts)


@pytest.fixture(scope="module")
def student_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("student")
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "student.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert f"Wrote {len(NOTEBOOKS)} student notebooks" in result.stdout
    return out


@pytest.fixture(scope="module")
def pairs(student_dir: Path) -> list[tuple[str, nbformat.NotebookNode, nbformat.NotebookNode]]:
    """(name, instructor notebook, student notebook), cell lists aligned."""
    found = []
    for path in NOTEBOOKS:
        teacher = nbformat.read(path, as_version=4)
        pupil = nbformat.read(student_dir / path.name, as_version=4)
        assert [c.cell_type for c in pupil.cells] == [c.cell_type for c in teacher.cells], path.name
        found.append((path.name, teacher, pupil))
    return found


def test_every_notebook_and_exercise_is_built(student_dir: Path, pairs: list) -> None:
    assert len(NOTEBOOKS) == 13
    assert sorted(p.name for p in student_dir.glob("*.ipynb")) == NAMES
    assert not list(student_dir.glob(".*")), "a temporary file was left behind"
    umask = os.umask(0)
    os.umask(umask)
    for path in student_dir.iterdir():  # readable like any file written with open()
        assert path.stat().st_mode & 0o777 == 0o666 & ~umask, path
    answers = [c for _, _, nb in pairs for c in nb.cells if _is_answer(c)]
    checks = [c for _, _, nb in pairs for c in nb.cells if _is_check(c)]
    assert len(answers) == len(checks) == N_EXERCISES


def test_no_outputs_no_execution_counts_no_build_stamp(pairs: list) -> None:
    for name, _, nb in pairs:
        assert "labkit" not in nb.metadata, name
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, (name, cell.source)
            assert "execution" not in cell.metadata, name


def test_nbgrader_metadata_is_kept_and_cells_are_locked(pairs: list) -> None:
    for name, teacher, pupil in pairs:
        for old, new in zip(teacher.cells, pupil.cells, strict=True):
            if not _grading(old):
                assert not _grading(new), name
                continue
            kept = {k: v for k, v in _grading(new).items() if k not in {"checksum", "cell_type"}}
            assert kept == _grading(old), (name, old.source)
            assert new.metadata.get("deletable") is False, (name, old.source)
            if _is_check(old):
                assert new.metadata.get("editable") is False, (name, old.source)


def test_check_cells_are_unchanged(pairs: list) -> None:
    for name, teacher, pupil in pairs:
        for old, new in zip(teacher.cells, pupil.cells, strict=True):
            if _is_check(old):
                assert new.source == old.source, name
            elif not _is_answer(old):
                assert new.source == old.source, name  # so is every other cell


def test_answer_cells_keep_their_blanks_and_get_the_stub(pairs: list) -> None:
    for name, teacher, pupil in pairs:
        for old, new in zip(teacher.cells, pupil.cells, strict=True):
            if not _is_answer(old):
                continue
            blanks = [ln for ln in _split(old.source)[0] if BLANK in ln]
            assert blanks, f"{name}: answer cell without a `{BLANK}` blank:\n{old.source}"
            lines = new.source.split("\n")
            assert lines.count(STUB) == 1, (name, new.source)
            assert all(blank in lines for blank in blanks), (name, new.source)


def test_no_solution_text_is_left(pairs: list) -> None:
    for name, teacher, pupil in pairs:
        outside = "\n".join("\n".join(_split(c.source)[0]) for c in teacher.cells)
        solution = {ln.strip() for c in teacher.cells for ln in _split(c.source)[1] if ln.strip()}
        assert solution, name
        # A line too generic to give anything away (the `}` closing a dict in
        # notebook 03) also occurs outside the solution regions of the same
        # instructor notebook; only such lines are exempt.
        secret = {ln for ln in solution if ln not in outside}
        text = "\n".join(c.source for c in pupil.cells)
        leaked = sorted(ln for ln in secret if ln in text)
        assert not leaked, f"{name}: solution lines left in the student edition: {leaked}"
        for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "BEGIN MARK SCHEME"):
            assert marker not in text, (name, marker)


def test_reference_solutions_put_back_give_the_instructor_notebook(pairs: list) -> None:
    """So strict nbval of notebooks/ (`make test`) runs exactly the student edition, solved."""
    for name, teacher, pupil in pairs:
        for old, new in zip(teacher.cells, pupil.cells, strict=True):
            source = new.source
            if _is_answer(old):
                lines, region = old.source.split("\n"), new.source.split("\n")
                begin, end = lines.index(BEGIN), lines.index(END)
                at = region.index(STUB)
                source = "\n".join(region[:at] + lines[begin : end + 1] + region[at + 1 :])
            assert source == old.source, name


def test_every_reference_solution_passes_its_check(pairs: list) -> None:
    for name, teacher, _ in pairs:
        for cell in teacher.cells:
            if _is_check(cell):
                text = _text(cell)
                assert "✅" in text and ": passed." in text, f"{name}: {cell.source}\n{text}"
                # nbgrader scores a grade cell that writes to stderr 0, even when it passed
                stderr = [o for o in cell.outputs if o.get("name") == "stderr"]
                assert not stderr, f"{name}: {cell.source} writes to stderr: {stderr}"


@pytest.mark.parametrize("name", NAMES)
def test_student_notebook_runs_top_to_bottom(
    name: str, student_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LABKIT_PROGRESS", "0")
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    path = student_dir / name
    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb,
        kernel_name=KERNEL_NAME,
        timeout=900,
        allow_errors=True,
        record_timing=False,
        resources={"metadata": {"path": str(student_dir)}},
        extra_arguments=["--IPKernelApp.capture_fd_output=False"],
    ).execute()
    errors = [
        f"{out.ename}: {out.evalue}\n{cell.source}"
        for cell in nb.cells
        for out in cell.get("outputs", [])
        if out.output_type == "error"
    ]
    assert not errors, "\n\n".join(errors)
    checks = [c for c in nb.cells if _is_check(c)]
    assert checks, name
    for cell in checks:
        text = _text(cell)
        assert "not solved yet" in text and "Hint:" in text, f"{cell.source}\n{text}"


# --- nbgrader itself, on one notebook ---------------------------------------

CONFIG = """\
c = get_config()  # noqa: F821
c.CourseDirectory.root = {root!r}
c.CourseDirectory.course_id = "gpu-labkit"
c.CourseDirectory.db_url = {db_url!r}
c.Exchange.root = {exchange!r}
c.ClearSolutions.code_stub = {{"python": "# YOUR CODE HERE"}}
c.Execute.timeout = 600
"""
STUDENT_CONFIG = """\
c = get_config()  # noqa: F821
c.CourseDirectory.course_id = "gpu-labkit"
c.Exchange.root = {exchange!r}
"""


# nbgrader's gradebook runs the `alembic` command it installs next to python:
# the environment's bin/ must be on PATH, as it is in an activated venv.
PATH = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


def _nbgrader(*args: str, cwd: Path) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, LABKIT_PROGRESS="0", PATH=PATH),
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{output[-5000:]}"
    return output


def test_nbgrader_generates_releases_and_autogrades(tmp_path: Path, student_dir: Path) -> None:
    from nbgrader.api import Gradebook

    course, home, exchange = tmp_path / "course", tmp_path / "home", tmp_path / "exchange"
    for folder in (course / "source" / "ps1", home, exchange):
        folder.mkdir(parents=True)
    db_url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    config = CONFIG.format(root=str(course), db_url=db_url, exchange=str(exchange))
    (course / "nbgrader_config.py").write_text(config)
    shutil.copy(ROOT / "notebooks" / NBGRADER_NOTEBOOK, course / "source" / "ps1")

    _nbgrader("generate_assignment", "ps1", "--force", cwd=course)
    release = nbformat.read(course / "release" / "ps1" / NBGRADER_NOTEBOOK, as_version=4)
    ours = nbformat.read(student_dir / NBGRADER_NOTEBOOK, as_version=4)
    # `make student` is generate_assignment without the database: same cells, same checksums.
    assert release.cells == ours.cells

    # A student fetches the release through the exchange and submits it unsolved ...
    (home / "nbgrader_config.py").write_text(STUDENT_CONFIG.format(exchange=str(exchange)))
    _nbgrader("release_assignment", "ps1", cwd=course)
    _nbgrader("fetch_assignment", "ps1", cwd=home)
    _nbgrader("submit", "ps1", cwd=home)
    _nbgrader("collect", "ps1", cwd=course)
    blank_student = getpass.getuser()
    assert (course / "submitted" / blank_student / "ps1" / NBGRADER_NOTEBOOK).is_file()
    # ... another hands in the reference solutions (the instructor notebook, outputs cleared).
    solved = nbformat.read(ROOT / "notebooks" / NBGRADER_NOTEBOOK, as_version=4)
    for cell in solved.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    (course / "submitted" / "solver" / "ps1").mkdir(parents=True)
    nbformat.write(solved, course / "submitted" / "solver" / "ps1" / NBGRADER_NOTEBOOK)

    autograde_log = _nbgrader("autograde", "ps1", cwd=course)
    # A check cell shows its result as display_data: an execute_result would be
    # read as partial credit, which nbgrader warns will become an error.
    assert "cannot be converted to a float" not in autograde_log
    with Gradebook(db_url, course_id="gpu-labkit") as gradebook:
        scores = {
            who: (
                gradebook.find_submission("ps1", who).score,
                gradebook.find_submission("ps1", who).max_score,
            )
            for who in ("solver", blank_student)
        }
    assert scores == {
        "solver": (NBGRADER_POINTS, NBGRADER_POINTS),
        blank_student: (0, NBGRADER_POINTS),
    }
    graded = nbformat.read(
        course / "autograded" / blank_student / "ps1" / NBGRADER_NOTEBOOK, as_version=4
    )
    failures = [
        out for c in graded.cells if _is_check(c) for out in c.outputs if out.output_type == "error"
    ]
    assert len(failures) == NBGRADER_POINTS
    assert all(f.ename == "AssertionError" and "not solved yet" in f.evalue for f in failures)


def test_a_bad_notebook_fails_cleanly_and_writes_nothing(tmp_path: Path) -> None:
    nb = nbformat.read(NOTEBOOKS[0], as_version=4)
    # a solution region in a cell that nbgrader does not know as an answer cell
    nb.cells.append(nbformat.v4.new_code_cell(f"x = ...  # your answer\n{BEGIN}\nx = 1\n{END}"))
    source = tmp_path / "99_bad.ipynb"
    nbformat.write(nb, source)
    out = tmp_path / "out"
    good = tmp_path / NOTEBOOKS[0].name
    shutil.copy(NOTEBOOKS[0], good)
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "student.py"),
            "--out",
            str(out),
            str(source),
            str(good),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1
    assert "99_bad.ipynb" in result.stderr and "non-solution cell" in result.stderr, result.stderr
    assert list(out.iterdir()) == []  # nothing half-written, and nothing after the failure
