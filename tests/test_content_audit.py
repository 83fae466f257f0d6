"""docs/content-audit.md keeps one row per review ID, each with a verdict.

The expert reviews in ``../shared/reviews/`` number their findings (A1-A37, AM1-AM10, AP1-AP10 for
notebooks 00-03; B1-B37, BM1-BM12, BP1-BP10 for 04-06; C1-C40, CM1-CM14, CP1-CP10 for 07-10); the issues that fix them ask for exactly
one row per ID. A lost or doubled row is easy to miss in a 100-row table, so this test counts them.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

AUDIT = Path(__file__).resolve().parents[1] / "docs" / "content-audit.md"

# The ID families reviewed so far, with how many findings each review numbered.
EXPECTED = {
    "A": 37, "AM": 10, "AP": 10, "B": 37, "BM": 12, "BP": 10, "C": 40, "CM": 14, "CP": 10,
}  # fmt: skip
# Families being handled (none now): rows so far, each ID at most once.
PARTIAL: dict[str, int] = {}
VERDICTS = ("holds; fixed", "holds; partly fixed", "holds in part; fixed", "does not hold")
ROW = re.compile(r"^\|\s*([A-Z]+)(\d+)\s*\|\s*([^|]+?)\s*\|")


def _rows() -> list[tuple[str, int, str]]:
    rows = []
    for line in AUDIT.read_text(encoding="utf-8").splitlines():
        match = ROW.match(line)
        if match and (match.group(1) in EXPECTED or match.group(1) in PARTIAL):
            rows.append((match.group(1), int(match.group(2)), match.group(3)))
    return rows


def test_every_review_id_has_exactly_one_row() -> None:
    counts = Counter((family, number) for family, number, _ in _rows() if family in EXPECTED)
    expected = {(f, n) for f, total in EXPECTED.items() for n in range(1, total + 1)}
    missing = sorted(expected - counts.keys())
    doubled = sorted(key for key, count in counts.items() if count > 1)
    extra = sorted(counts.keys() - expected)
    assert not missing, f"no row for {missing}"
    assert not doubled, f"more than one row for {doubled}"
    assert not extra, f"rows for IDs no review has: {extra}"


def test_every_row_has_a_known_verdict() -> None:
    bad = [(f"{f}{n}", v) for f, n, v in _rows() if not v.startswith(VERDICTS)]
    assert not bad, f"verdicts must start with one of {VERDICTS}: {bad}"


def test_partial_families_have_each_id_at_most_once_and_in_range() -> None:
    counts = Counter((family, number) for family, number, _ in _rows() if family in PARTIAL)
    doubled = sorted(key for key, count in counts.items() if count > 1)
    extra = sorted((f, n) for f, n in counts if not 1 <= n <= PARTIAL[f])
    assert not doubled, f"more than one row for {doubled}"
    assert not extra, f"rows for IDs the review does not have: {extra}"
