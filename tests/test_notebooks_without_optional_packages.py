"""Learners without an optional package run the notebooks top to bottom: one clear line, no traceback.

Without TensorFlow (notebooks 04, 06, 08, 09), and without CuPy or Kernel
Tuner (notebook 07, whose CPU route must not need them).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

RUNNER = r"""
import json, os, sys
for missing in sys.argv[3].split(","):
    sys.modules[missing] = None           # the package is "not installed"
os.environ["MPLBACKEND"] = "Agg"
os.environ["LABKIT_PROGRESS"] = "0"
os.chdir(sys.argv[2])
nb = json.load(open(sys.argv[1]))
namespace = {"__name__": "__main__"}
for cell in nb["cells"]:
    if cell["cell_type"] == "code":
        exec(compile("".join(cell["source"]), "<cell>", "exec"), namespace)
"""


def run_without(name: str, missing: str) -> subprocess.CompletedProcess[str]:
    path = ROOT / "notebooks" / name
    assert json.loads(path.read_text())["cells"], name
    return subprocess.run(
        [sys.executable, "-c", RUNNER, str(path), str(path.parent), missing],
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.parametrize(
    "name",
    [
        "04_framework_acceleration.ipynb",
        "06_rnn_tensorflow.ipynb",
        "08_data_pipelines_and_batching.ipynb",
        "09_profiling.ipynb",
    ],
)
def test_notebook_runs_without_tensorflow(name: str) -> None:
    result = run_without(name, "tensorflow")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    skipped = [ln for ln in result.stdout.splitlines() if ln.startswith("Skipped: tensorflow")]
    assert len(skipped) == 1, result.stdout[-3000:]
    assert "pip install" in skipped[0]


def test_kernel_notebook_runs_without_cupy_and_kernel_tuner() -> None:
    result = run_without("07_kernel_tuning.ipynb", "cupy,kernel_tuner")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    # the CPU route ran: the simulator verified the kernels, the GPU cell said why it skipped
    assert "CUDA simulator" in result.stdout and "No GPU here" in result.stdout


def test_notebook_12_runs_without_triton() -> None:
    """macOS and Windows have no Triton wheels: one line, then everything that needs no Triton."""
    result = run_without("12_triton_kernels.ipynb", "triton")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    skipped = [ln for ln in result.stdout.splitlines() if ln.startswith("Skipped: triton")]
    assert len(skipped) == 1, result.stdout[-3000:]
    assert "pip install" in skipped[0]
    # the parts without Triton still ran: the exercises' checks and Inductor's C++
    assert "Inductor wrote 1 C++ kernel(s)" in result.stdout
    assert "example cost of 400 µs per program" in result.stdout
