"""The notebook format check (tools/nbcheck.py), on the real notebooks and on broken ones."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import nbcheck  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_there_are_notebooks() -> None:
    assert NOTEBOOKS, "no notebooks/NN_*.ipynb found: nbval would run nothing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebook_passes_the_check(path: Path) -> None:
    assert nbcheck.check_notebook(path) == []


def _good() -> dict:
    nb = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "gpu-labkit"}},
        "cells": [
            {"cell_type": "markdown", "source": "# Title", "metadata": {}},
            {
                "cell_type": "code",
                "source": "x = 1",
                "execution_count": 1,
                "outputs": [],
                "metadata": {},
            },
            {
                "cell_type": "code",
                "source": "print(x)",
                "execution_count": 2,
                "metadata": {},
                "outputs": [{"output_type": "stream", "name": "stdout", "text": "1\n"}],
            },
        ],
    }
    nb["metadata"]["labkit"] = {
        "built_by": "make notebooks",
        "source_sha256": nbcheck.source_hash(nb),
        "profile": "reference",
    }
    return nb


def _check(tmp_path: Path, nb: dict) -> list[str]:
    path = tmp_path / "00_x.ipynb"
    path.write_text(json.dumps(nb))
    return nbcheck.check_notebook(path)


def test_a_built_notebook_passes(tmp_path: Path) -> None:
    assert _check(tmp_path, _good()) == []


def test_no_outputs_fails(tmp_path: Path) -> None:
    nb = _good()
    nb["cells"][2]["outputs"] = []
    assert any("no outputs" in p for p in _check(tmp_path, nb))


def test_error_output_fails(tmp_path: Path) -> None:
    nb = _good()
    nb["cells"][2]["outputs"] = [
        {"output_type": "error", "ename": "NameError", "evalue": "x", "traceback": []}
    ]
    assert any("stores an error (NameError" in p for p in _check(tmp_path, nb))


@pytest.mark.parametrize("counts", [[2, 1], [1, 3], [None, 1], [1, 1]])
def test_execution_counts_out_of_order_fail(tmp_path: Path, counts: list) -> None:
    nb = _good()
    nb["cells"][1]["execution_count"], nb["cells"][2]["execution_count"] = counts
    assert any("execution counts" in p for p in _check(tmp_path, nb))


def test_unstamped_notebook_fails(tmp_path: Path) -> None:
    nb = _good()
    del nb["metadata"]["labkit"]
    assert any("not produced by `make notebooks`" in p for p in _check(tmp_path, nb))


def test_edited_after_build_fails(tmp_path: Path) -> None:
    nb = copy.deepcopy(_good())
    nb["cells"][2]["source"] = "print(x + 1)"
    assert any("edited after" in p for p in _check(tmp_path, nb))


def test_too_many_ignored_cells_fail(tmp_path: Path) -> None:
    nb = _good()
    for cell in nb["cells"][1:]:
        cell["source"] = "# NBVAL_IGNORE_OUTPUT\n" + cell["source"]
    nb["metadata"]["labkit"]["source_sha256"] = nbcheck.source_hash(nb)
    assert any("excluded from nbval" in p for p in _check(tmp_path, nb))


def test_a_marker_with_trailing_text_is_flagged(tmp_path: Path) -> None:
    nb = _good()
    nb["cells"][2]["source"] = "# NBVAL_IGNORE_OUTPUT: timing\nprint(x)"
    nb["metadata"]["labkit"]["source_sha256"] = nbcheck.source_hash(nb)
    assert any("does not recognise" in p for p in _check(tmp_path, nb))
    nb["cells"][2]["source"] = "# NBVAL_IGNORE_OUTPUT\n# timing\nprint(x)"
    nb["metadata"]["labkit"]["source_sha256"] = nbcheck.source_hash(nb)
    assert not any("does not recognise" in p for p in _check(tmp_path, nb))


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "00_good.ipynb"
    good.write_text(json.dumps(_good()))
    assert nbcheck.main([str(good)]) == 0
    bad = _good()
    bad["cells"][2]["outputs"] = []
    (tmp_path / "01_bad.ipynb").write_text(json.dumps(bad))
    assert nbcheck.main([str(good), str(tmp_path / "01_bad.ipynb")]) == 1
    assert nbcheck.main([]) == 2
    assert "no outputs" in capsys.readouterr().err


def test_every_sanitize_section_is_read_by_nbval() -> None:
    """nbval silently skips a malformed pair (e.g. an empty replace), so count them."""
    import re

    from nbval.plugin import get_sanitize_patterns

    text = (ROOT / "notebooks" / "nbval_sanitize.cfg").read_text()
    sections = re.findall(r"^\[[^\]]+\]$", text, flags=re.MULTILINE)
    patterns = get_sanitize_patterns(text)
    assert len(patterns) == len(sections), "a section of nbval_sanitize.cfg is not read by nbval"
    for regex, _ in patterns:
        re.compile(regex)


@pytest.mark.parametrize(
    ("stored", "fresh"),
    [
        (
            "op: median 1.23 ms (IQR 0.0150 ms, min 1.20 ms, n=81) on cpu [noisy: IQR is 14% of "
            "the median]\n",
            "op: median 812 µs (IQR 3.00 µs, min 800 µs, n=1203) on cpu\n",
        ),
        (
            "                 median      IQR\nbase (baseline)  8.03 ms   878 µs  n=12  1.00×  *\n"
            "fast             2.01 ms  52.7 µs  n=51  3.99×  *\n* noisy: IQR is more than 10% of "
            "the median\n",
            "                 median      IQR\nbase (baseline)  12.1 ms  1.02 ms  n=9  1.00×\n"
            "fast             3.00 ms  10.1 µs  n=40  4.03×\n",
        ),
        ("rate: 155.0 GFLOP/s, 23.5 GiB, 28.1 GB/s\n", "rate: 98.2 GFLOP/s, 7.8 GiB, 3.1 GB/s\n"),
    ],
)
def test_sanitize_masks_measurements_only(stored: str, fresh: str) -> None:
    import re

    from nbval.plugin import get_sanitize_patterns

    patterns = get_sanitize_patterns((ROOT / "notebooks" / "nbval_sanitize.cfg").read_text())

    def sanitize(s: str) -> str:
        for regex, replace in patterns:
            s = re.sub(regex, replace, s)
        return s

    assert sanitize(stored) == sanitize(fresh)


def test_sanitize_leaves_labels_and_deterministic_numbers_alone() -> None:
    import re

    from nbval.plugin import get_sanitize_patterns

    patterns = get_sanitize_patterns((ROOT / "notebooks" / "nbval_sanitize.cfg").read_text())
    text = "matmul 512×512 on 2 threads: 12 samples, (10, 20, 50), 5,050 parameters\n"
    for regex, replace in patterns:
        text = re.sub(regex, replace, text)
    assert text == "matmul 512×512 on 2 threads: 12 samples, (10, 20, 50), 5,050 parameters\n"
