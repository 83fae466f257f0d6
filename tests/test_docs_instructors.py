"""docs/instructors.md stays true to the code and the notebooks it describes.

- Its troubleshooting table names every finding code ``labkit doctor`` can
  emit, and no code that does not exist. The codes are read from
  labkit/machine/diagnose.py's ``Finding(code=...)`` calls, with the f-strings
  (``f"{fw.name}-broken"``) expanded over the frameworks their branch allows.
- Every notebook the syllabi link exists, and every section (``§2 *title*``)
  and exercise (``ex. 1 *title*``) they name is a heading of that notebook.
- The syllabus tables add up: minutes and measured seconds sum to the total
  row, and a notebook has the same measured time in every table.
- Every relative link in docs/instructors.md and README.md resolves, anchors included.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from labkit.machine.frameworks import FRAMEWORKS

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "instructors.md"
README = ROOT / "README.md"
DIAGNOSE = ROOT / "labkit" / "machine" / "diagnose.py"

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
NOTEBOOK_LINK = re.compile(r"\]\((\.\./notebooks/(\d\d)_[a-z0-9_]+\.ipynb)\)")
SECTION_REF = re.compile(r"§(\d+) \*([^*]+)\*")
EXERCISE_REF = re.compile(r"\bex\. (\d+) \*([^*]+)\*")


# --------------------------------------------------------------------------- finding codes


def _conjuncts(test: ast.expr) -> list[ast.expr]:
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return [c for v in test.values for c in _conjuncts(v)]
    return [test]


def _allowed_frameworks(call: ast.Call, parents: dict[ast.AST, ast.AST]) -> set[str]:
    """FRAMEWORKS, narrowed by every ``fw.name == / != "x"`` that guards the call."""
    allowed = set(FRAMEWORKS)
    node = call
    while node in parents:
        parent = parents[node]
        conditions: list[ast.expr] = []
        if isinstance(parent, ast.If) and any(node is n for n in parent.body):
            conditions = _conjuncts(parent.test)
        elif isinstance(parent, (ast.ListComp, ast.GeneratorExp)):
            conditions = [c for gen in parent.generators for i in gen.ifs for c in _conjuncts(i)]
        for cond in conditions:
            if (
                isinstance(cond, ast.Compare)
                and isinstance(cond.left, ast.Attribute)
                and cond.left.attr == "name"
                and len(cond.ops) == 1
                and isinstance(cond.comparators[0], ast.Constant)
            ):
                value = cond.comparators[0].value
                if isinstance(cond.ops[0], ast.Eq):
                    allowed &= {value}
                elif isinstance(cond.ops[0], ast.NotEq):
                    allowed -= {value}
        node = parent
    return allowed


def _render(code: ast.JoinedStr, name: str) -> str:
    parts = []
    for value in code.values:
        if isinstance(value, ast.Constant):
            parts.append(value.value)
        elif (
            isinstance(value, ast.FormattedValue)
            and isinstance(value.value, ast.Attribute)
            and value.value.attr == "name"
        ):
            parts.append(name)
        else:
            raise AssertionError(
                f"diagnose.py: a finding code this test cannot expand: {ast.dump(code)}"
            )
    return "".join(parts)


def emitted_codes() -> set[str]:
    """Every finding code labkit/machine/diagnose.py can emit."""
    tree = ast.parse(DIAGNOSE.read_text(encoding="utf-8"))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    codes: set[str] = set()
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "Finding"):
            continue
        (code,) = [k.value for k in call.keywords if k.arg == "code"]
        if isinstance(code, ast.Constant):
            codes.add(code.value)
        elif isinstance(code, ast.JoinedStr):
            codes |= {_render(code, name) for name in _allowed_frameworks(call, parents)}
        else:
            raise AssertionError(
                f"diagnose.py: a finding code that is neither a string nor an f-string: {ast.dump(code)}"
            )
    return codes


def _section(text: str, title: str) -> str:
    match = re.search(
        rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, flags=re.MULTILINE | re.DOTALL
    )
    assert match, f"docs/instructors.md has no '## {title}' section"
    return match.group(1)


def _table_rows(text: str) -> list[list[str]]:
    rows = [line for line in text.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", row)[1:-1]] for row in rows]


def documented_codes() -> tuple[set[str], list[str]]:
    """The codes in the troubleshooting table's last column, and the rows that name none."""
    rows = _table_rows(_section(GUIDE.read_text(encoding="utf-8"), "Troubleshooting"))
    header, body = rows[0], rows[2:]
    assert "finding" in header[-1], header
    codes, bare = set(), []
    for row in body:
        found = re.findall(r"`([^`]+)`", row[-1])
        codes |= set(found)
        if not found and row[-1] != "not detected by doctor":
            bare.append(row[0])
    return codes, bare


def test_the_code_reader_finds_the_findings() -> None:
    codes = emitted_codes()
    assert {
        "no-gpu",
        "torch-cpu-build",
        "tensorflow-memory-growth",
        "cupy-multiple-wheels",
    } <= codes
    assert {f"{fw}-broken" for fw in FRAMEWORKS} <= codes
    assert (
        "torch-driver-too-old" in codes and "cupy-driver-too-old" not in codes
    )  # the elif excludes CuPy
    assert len(codes) >= 15


def test_every_finding_code_is_in_the_troubleshooting_table() -> None:
    missing = emitted_codes() - documented_codes()[0]
    assert not missing, f"add these `labkit doctor` codes to docs/instructors.md: {sorted(missing)}"


def test_every_code_in_the_troubleshooting_table_exists() -> None:
    codes, bare = documented_codes()
    unknown = codes - emitted_codes()
    assert not unknown, f"docs/instructors.md names codes labkit never emits: {sorted(unknown)}"
    assert not bare, (
        f"rows whose last column names no code and is not 'not detected by doctor': {bare}"
    )


# --------------------------------------------------------------------------- syllabi


def _notebook_headings(path: Path) -> tuple[dict[int, str], dict[int, str]]:
    """Sections ``## N · title`` and exercises (``Exercise N: title``) of a notebook."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    sections = {
        int(n): t.strip() for n, t in re.findall(r"^## (\d+) · (.+)$", text, flags=re.MULTILINE)
    }
    exercises = {
        int(n): t for n, t in re.findall(r"^### Exercise (\d+): (.+)$", text, flags=re.MULTILINE)
    }
    bold = re.findall(r"^\*\*Exercise (\d+): (.+?)\*\*", text, flags=re.MULTILINE)
    exercises.update({int(n): t for n, t in bold})
    for i, title in enumerate(re.findall(r"^## \d+ · Exercise: (.+)$", text, flags=re.MULTILINE)):
        exercises[i + 1] = title
    return sections, exercises


def _norm(title: str) -> str:
    return title.strip().rstrip(".").strip().lower()


def test_every_notebook_section_and_exercise_the_syllabi_name_exists() -> None:
    text = _section(GUIDE.read_text(encoding="utf-8"), "Syllabi")
    text += _section(GUIDE.read_text(encoding="utf-8"), "Running a lab")
    checked, problems = 0, []
    for line in text.splitlines():
        refs = sorted(
            [(m.start(), "nb", m.group(1), "") for m in NOTEBOOK_LINK.finditer(line)]
            + [(m.start(), "§", m.group(1), m.group(2)) for m in SECTION_REF.finditer(line)]
            + [(m.start(), "ex.", m.group(1), m.group(2)) for m in EXERCISE_REF.finditer(line)]
        )
        notebook: Path | None = None
        for _, kind, number, title in refs:
            if kind == "nb":
                notebook = (GUIDE.parent / number).resolve()
                if not notebook.exists():
                    problems.append(f"{number} does not exist")
                continue
            if notebook is None:
                problems.append(
                    f"{kind}{number} *{title}* has no notebook link before it: {line[:80]}"
                )
                continue
            sections, exercises = _notebook_headings(notebook)
            actual = (sections if kind == "§" else exercises).get(int(number))
            if actual is None or _norm(actual) != _norm(title):
                problems.append(f"{notebook.name}: {kind} {number} is {actual!r}, not {title!r}")
            checked += 1
    assert checked >= 50, f"only {checked} section and exercise references found"
    assert not problems, "\n".join(problems)


def test_the_syllabi_cover_every_notebook() -> None:
    text = _section(GUIDE.read_text(encoding="utf-8"), "Syllabi")
    linked = {Path(m.group(1)).name for m in NOTEBOOK_LINK.finditer(text)}
    assert linked == {p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}


def _seconds(cell: str) -> float | None:
    match = re.fullmatch(r"\**([\d.]+) s\**", cell)
    return float(match.group(1)) if match else None


def test_the_syllabus_tables_add_up() -> None:
    text = _section(GUIDE.read_text(encoding="utf-8"), "Syllabi")
    blocks = re.findall(r"^\|.*?(?=^[^|]|\Z)", text, flags=re.MULTILINE | re.DOTALL)
    tables = [t for t in blocks if t.startswith("| Start |")]
    assert len(tables) == 3, "expected three syllabus tables (90 minutes, 3 hours, a day)"
    per_notebook: dict[str, set[float]] = {}
    for table in tables:
        rows = _table_rows(table)[2:]
        *blocks, total = rows
        assert "Total" in total[1], total
        minutes = sum(int(r[3]) for r in blocks)
        assert minutes == int(total[3].strip("*")), (minutes, total)
        seconds = [s for r in blocks if (s := _seconds(r[4])) is not None]
        assert round(sum(seconds), 1) == _seconds(total[4]), (seconds, total)
        for row in blocks:
            for m in NOTEBOOK_LINK.finditer(row[2]):
                per_notebook.setdefault(m.group(2), set()).add(_seconds(row[4]))
            if _seconds(row[4]) is not None:
                assert row[5] == "not measured yet", row  # no GPU has been measured
    inconsistent = {nb: s for nb, s in per_notebook.items() if len(s) != 1}
    assert not inconsistent, f"a notebook's measured time differs between tables: {inconsistent}"


# --------------------------------------------------------------------------- links


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but - and _ dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.MULTILINE)}


@pytest.mark.parametrize("doc", [GUIDE, README], ids=lambda p: p.name)
def test_every_relative_link_resolves(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)
    broken, checked = [], 0
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        checked += 1
        path_part, _, anchor = target.partition("#")
        path = (doc.parent / path_part).resolve() if path_part else doc
        if not path.exists():
            broken.append(f"{target}: {path} does not exist")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{target}: {path.name} has no heading with the anchor #{anchor}")
    assert checked >= 5, f"only {checked} relative links found in {doc.name}"
    assert not broken, "\n".join(broken)


def test_the_readme_has_the_self_study_path_the_last_notebook_links_to() -> None:
    assert "self-study-path" in _anchors(README)
    last = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))[-1]
    assert "README.md#self-study-path" in last.read_text(encoding="utf-8")
