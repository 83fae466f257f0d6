"""The notebook format check: `make check-notebooks`, also run by pytest.

Notebooks are committed *with* their outputs, and strict nbval compares a
fresh run against them. That only means something if the stored outputs came
from one clean top-to-bottom run of the current sources, so this check fails
a notebook that:

- has no outputs at all, or stores an error;
- has execution counts that are not 1, 2, 3, ... in cell order (cells run out
  of order, or by hand);
- was not produced by `make notebooks`, or was edited after it ran: the build
  stamps a hash of every cell's source into the notebook's metadata;
- was not built under the reference profile (labkit/machine/profile.py), which fixes
  the thread count, the memory budget and the hidden GPU the outputs assume;
- has more than 40% of its code cells excluded from comparison, which would
  make "tested outputs" an empty promise.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

BUILT_BY = "make notebooks"
#: The profile (labkit/machine/profile.py) the committed outputs are made and compared under.
PROFILE = "reference"
KERNEL_NAME = "gpu-labkit"
MAX_IGNORED_FRACTION = 0.4
_IGNORE_MARKERS = ("NBVAL_IGNORE_OUTPUT", "NBVAL_SKIP", "NBVAL_RAISES_EXCEPTION")


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _markers(source: str) -> tuple[set[str], list[str]]:
    """nbval's comment markers in a cell, and lines that look like one but are not.

    nbval honours a marker only when the whole comment is the marker
    (``# NBVAL_IGNORE_OUTPUT``); ``# NBVAL_IGNORE_OUTPUT: why`` is silently
    ignored, so the cell would be compared after all.
    """
    found, malformed = set(), []
    for line in source.splitlines():
        text = line.strip()
        if not text.startswith("#") or "NBVAL_" not in text:
            continue
        comment = text.lstrip("#").strip()
        if (
            comment.startswith("NBVAL_")
            and comment.replace("_", "").isalpha()
            and comment.isupper()
        ):
            found.add(comment)
        else:
            malformed.append(text)
    return found, malformed


def source_hash(nb: dict) -> str:
    """A hash of what the notebook says (cell types and sources), not what it printed."""
    payload = [[c.get("cell_type"), _source(c)] for c in nb.get("cells", [])]
    return hashlib.sha256(json.dumps(payload, ensure_ascii=False).encode()).hexdigest()


def check_notebook(path: Path) -> list[str]:
    """Every problem found in one notebook, as sentences that say how to fix it."""
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return [f"{path}: cannot be read as a notebook ({exc})"]
    problems: list[str] = []
    rebuild = "run `make notebooks` and commit the result"
    code = [c for c in nb.get("cells", []) if c.get("cell_type") == "code" and _source(c).strip()]
    if not code:
        return [f"{path}: has no code cells"]
    if not any(c.get("outputs") for c in code):
        problems.append(f"{path}: has no outputs; {rebuild}")
    for i, cell in enumerate(code, start=1):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                problems.append(
                    f"{path}: code cell {i} stores an error ({out.get('ename')}: "
                    f"{out.get('evalue')}); fix the cell, then {rebuild}"
                )
    counts = [c.get("execution_count") for c in code]
    if counts != list(range(1, len(code) + 1)):
        problems.append(
            f"{path}: execution counts are {counts}, not 1..{len(code)} in order: the outputs "
            f"do not come from one clean run; {rebuild}"
        )
    stamp = nb.get("metadata", {}).get("labkit", {})
    if stamp.get("built_by") != BUILT_BY:
        problems.append(f"{path}: was not produced by `make notebooks`; {rebuild}")
    elif stamp.get("source_sha256") != source_hash(nb):
        problems.append(f"{path}: was edited after `make notebooks` ran; {rebuild}")
    elif stamp.get("profile") != PROFILE:
        problems.append(
            f"{path}: was built under profile {stamp.get('profile')!r}, not {PROFILE!r}, so its "
            f"outputs assume another machine; {rebuild}"
        )
    kernel = nb.get("metadata", {}).get("kernelspec", {}).get("name")
    if kernel != KERNEL_NAME:
        problems.append(f"{path}: kernelspec is {kernel!r}, expected {KERNEL_NAME!r}")
    for i, cell in enumerate(code, start=1):
        for line in _markers(_source(cell))[1]:
            problems.append(
                f"{path}: code cell {i} has {line!r}, which nbval does not recognise: put the "
                "marker alone on its line (e.g. '# NBVAL_IGNORE_OUTPUT') and explain on the next"
            )
    ignored = sum(bool(_markers(_source(c))[0] & set(_IGNORE_MARKERS)) for c in code)
    if ignored > MAX_IGNORED_FRACTION * len(code):
        problems.append(
            f"{path}: {ignored} of {len(code)} code cells are excluded from nbval; mask only the "
            "hardware-dependent values in notebooks/nbval_sanitize.cfg instead"
        )
    return problems


def main(argv: list[str]) -> int:
    if not argv:
        print("nbcheck: no notebooks given (expected notebooks/NN_*.ipynb)", file=sys.stderr)
        return 2
    problems = [p for path in argv for p in check_notebook(Path(path))]
    for p in problems:
        print(p, file=sys.stderr)
    if not problems:
        print(f"nbcheck: {len(argv)} notebook(s) OK")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
