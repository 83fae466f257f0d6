"""tools/time_notebooks.py: times copies of notebooks, records failures, leaves the originals alone.

The notebooks here are tiny ones the test writes itself (one that succeeds,
one that raises), so the test runs two short kernels; it never asserts on a
duration, only on the shape of what was recorded.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "time_notebooks.py"
sys.path.insert(0, str(ROOT / "tools"))
import time_notebooks  # noqa: E402

OK_SOURCE = """\
import os
assert os.environ.get("LABKIT_PROGRESS") == "0", "the kernel should inherit LABKIT_PROGRESS=0"
open("written_by_the_notebook.txt", "w").write("a notebook may write files next to itself")
print(6 * 7)
"""


def _write_notebook(path: Path, *sources: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# tiny")]
    nb.cells += [nbformat.v4.new_code_cell(src) for src in sources]
    nbformat.write(nb, path)
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    src = tmp_path_factory.mktemp("notebooks")
    ok = _write_notebook(src / "01_ok.ipynb", OK_SOURCE)
    bad = _write_notebook(
        src / "02_bad.ipynb", "x = 1", "raise ZeroDivisionError('boom on purpose')"
    )
    before = {p.name: _digest(p) for p in (ok, bad)}
    out = src / "times.json"
    done = subprocess.run(
        [sys.executable, str(TOOL), "--json", str(out), str(ok), str(bad)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=src,
    )
    return {"src": src, "done": done, "before": before, "json": out}


def test_a_failing_notebook_is_recorded_and_the_run_goes_on(run: dict) -> None:
    done = run["done"]
    assert done.returncode == 1, done.stderr[-3000:]  # one notebook failed
    result = json.loads(run["json"].read_text(encoding="utf-8"))
    assert result["complete"] is True and result["failed"] == 1
    ok, bad = result["notebooks"]
    assert ok["notebook"] == "01_ok.ipynb" and ok["ok"] is True and ok["error"] is None
    assert bad["notebook"] == "02_bad.ipynb" and bad["ok"] is False
    assert bad["error"] == "ZeroDivisionError: boom on purpose"
    for entry in (ok, bad):
        assert isinstance(entry["seconds"], float) and entry["seconds"] >= 0
    assert result["total_seconds"] == pytest.approx(ok["seconds"] + bad["seconds"], abs=0.11)


def test_the_result_names_the_machine_the_date_and_the_kernel(run: dict) -> None:
    result = json.loads(run["json"].read_text(encoding="utf-8"))
    assert result["tool"] == "tools/time_notebooks.py"
    assert result["date"][:4].isdigit() and "T" in result["date"]
    machine = result["machine"]
    assert "probe_error" not in machine, machine
    for key in (
        "cpu_model",
        "logical_cores",
        "memory_total_bytes",
        "memory_total_gib",
        "gpus",
        "torch_version",
        "torch_gpu_available",
        "python_version",
    ):
        assert key in machine, key
    assert isinstance(machine["gpus"], list) and machine["logical_cores"] >= 1
    assert result["kernel"]["name"] == "gpu-labkit"


def test_the_originals_are_untouched_and_nothing_is_written_beside_them(run: dict) -> None:
    src: Path = run["src"]
    after = {name: _digest(src / name) for name in run["before"]}
    assert after == run["before"]
    assert sorted(p.name for p in src.iterdir()) == ["01_ok.ipynb", "02_bad.ipynb", "times.json"]


def test_the_markdown_table_has_a_row_per_notebook_and_a_total(run: dict) -> None:
    lines = run["done"].stdout.strip().splitlines()
    assert lines[0].startswith("Measured ") and "logical cores" in lines[0]
    assert lines[2] == "| notebook | seconds | result |"
    assert lines[4].startswith("| 01_ok.ipynb | ") and lines[4].endswith(" | ok |")
    assert lines[5].startswith("| 02_bad.ipynb | ") and "FAILED: ZeroDivisionError" in lines[5]
    assert lines[6].startswith("| total | ") and lines[6].endswith(" | 1 ok, 1 failed |")


def test_an_unregistered_kernel_gets_a_temporary_spec_for_this_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_client.kernelspec import KernelSpecManager

    name = "labkit-test-no-such-kernel"
    choice = time_notebooks.kernel_choice(name, tmp_path)
    assert choice["registered"] is False and choice["python"] == sys.executable
    monkeypatch.setenv("JUPYTER_PATH", choice["jupyter_path"])
    spec = KernelSpecManager().get_kernel_spec(name)
    assert spec.argv[0] == sys.executable and "ipykernel_launcher" in spec.argv


def test_a_bad_notebook_argument_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.ipynb"
    with pytest.raises(SystemExit, match="NOTEBOOK .*nope.ipynb is not an .ipynb file"):
        time_notebooks.main([str(missing)])


def test_a_machine_without_the_probe_is_still_described() -> None:
    line = time_notebooks.machine_line({"probe_error": "labkit.device_report failed"})
    assert line.startswith("machine: unknown") and "device_report failed" in line
