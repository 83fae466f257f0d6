"""tools/gpu_checks.sh: the one script a session with a GPU machine runs; it must at least parse.

Its real run needs a GPU; here it is parsed, and run with no time budget so
that every step is skipped, which checks the bookkeeping around the steps.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "gpu_checks.sh"
STEPS = (
    "doctor",
    "doctor_json",
    "bench_timing",
    "bench_bandwidth",
    "bench_parallel",
    "bench_roofline",
    "bench_accel",
    "bench_cnn",
    "bench_levers",
    "bench_rnn",
    "bench_kernels",
    "bench_batching",
    "bench_profile",
    "bench_attention",
    "bench_triton",
    "gpu_notebooks",  # before the tests: on the H200 they left it too little time
    "pytest_gpu",
    "notebook_times",
)

needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="no bash here")


@needs_bash
def test_the_script_parses() -> None:
    result = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@needs_bash
def test_with_no_budget_every_step_is_skipped_and_logged(tmp_path: Path) -> None:
    env = {**os.environ, "OUT": str(tmp_path), "GPU_CHECKS_BUDGET_S": "0", "PYTHON": sys.executable}
    result = subprocess.run(
        ["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60, cwd=tmp_path
    )
    assert result.returncode == 1  # nothing ran, so not everything was ok
    summary = (tmp_path / "summary.txt").read_text(encoding="utf-8").splitlines()
    assert summary[0].startswith("gpu_checks.sh on ") and summary[-1].startswith("done in ")
    for name in STEPS:
        assert any(line.split()[:2] == [name, "skipped"] for line in summary), name
    assert all(line in result.stdout for line in summary)
    assert (tmp_path / "reference").is_dir() and (tmp_path / "environment.txt").exists()


def test_notebook_times_runs_last_within_a_budget_that_fits_one_device_call() -> None:
    """The notebooks take ~220 s on 2 cores: the step goes last and gets what the others leave."""
    text = SCRIPT.read_text(encoding="utf-8")
    steps = re.findall(r"^\s*step (\w+) ", text, flags=re.MULTILINE)
    assert steps[-1] == "notebook_times" and tuple(steps) == STEPS
    assert '--json "$OUT/notebook_times.json"' in text
    budget = re.search(r"GPU_CHECKS_BUDGET_S:-(\d+)", text)
    assert budget is not None and 560 <= int(budget.group(1)) < 590
