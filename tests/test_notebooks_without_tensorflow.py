"""A learner without TensorFlow runs notebooks 04 and 06 top to bottom: one clear line, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

RUNNER = r"""
import json, os, sys
sys.modules["tensorflow"] = None          # TensorFlow "not installed"
os.environ["MPLBACKEND"] = "Agg"
os.environ["LABKIT_PROGRESS"] = "0"
os.chdir(sys.argv[2])
nb = json.load(open(sys.argv[1]))
namespace = {"__name__": "__main__"}
for cell in nb["cells"]:
    if cell["cell_type"] == "code":
        exec(compile("".join(cell["source"]), "<cell>", "exec"), namespace)
"""


@pytest.mark.parametrize("name", ["04_framework_acceleration.ipynb", "06_rnn_tensorflow.ipynb"])
def test_notebook_runs_without_tensorflow(name: str) -> None:
    path = ROOT / "notebooks" / name
    assert json.loads(path.read_text())["cells"], name
    result = subprocess.run(
        [sys.executable, "-c", RUNNER, str(path), str(path.parent)],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    skipped = [ln for ln in result.stdout.splitlines() if ln.startswith("Skipped: tensorflow")]
    assert len(skipped) == 1, result.stdout[-3000:]
    assert "pip install" in skipped[0]
