"""The SLURM script: valid bash, the command it builds, and its single-node path with srun stubbed.

Here ``srun`` and ``scontrol`` are replaced by two-line stand-ins that do what
they do on a one-node allocation (run the command once; list one host), so
this runs wherever torch does. It checks the command the script builds; it
cannot check what Slurm decides (the CPUs a step gets): tests/test_slurm.py
submits the same script to a real one-node Slurm for that.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.scaling import launch

ROOT = Path(__file__).resolve().parents[1]
SBATCH = ROOT / "labkit" / "scaling" / "slurm" / "train_ddp.sbatch"
DEFAULT_TRAIN_ARGS = ["--width", "1024", "--steps", "50", "--batch-per-rank", "64"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stub(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(0o755)


def test_sbatch_script_is_valid_bash() -> None:
    subprocess.run(["bash", "-n", str(SBATCH)], check=True)


def test_sbatch_script_asks_for_what_a_multi_node_job_needs() -> None:
    text = SBATCH.read_text()
    for line in (
        "#SBATCH --nodes=",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=",
        "#SBATCH --cpus-per-task=",
        "#SBATCH --time=",
        'scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1',
        "--rdzv-backend=c10d",
        "# export NCCL_DEBUG=INFO",
        "NCCL_SOCKET_IFNAME",
        "NCCL_IB_HCA",
    ):
        assert line in text


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_single_node_path_of_the_sbatch_script(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _stub(bin_dir, "srun", 'while [[ "${1:-}" == -* ]]; do shift; done\nexec "$@"\n')
    _stub(bin_dir, "scontrol", '[[ "$1 $2" == "show hostnames" ]] || exit 2\necho localhost\n')
    port = _free_port()
    out = tmp_path / "ddp.json"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        "PYTHON": sys.executable,
        "SLURM_NNODES": "1",
        "SLURM_JOB_NODELIST": "localhost",
        "SLURM_JOB_ID": "4242",
        "SLURM_GPUS_ON_NODE": "2",  # on this CPU machine: 2 gloo workers
        "SLURM_CPUS_PER_TASK": "2",
        "MASTER_PORT": str(port),
        "OUT": str(out),
    }
    env.pop("OMP_NUM_THREADS", None)
    extra = ["--width", "16", "--steps", "2", "--warmup-steps", "1", "--allreduce-reps", "1"]
    result = launch.run_process(
        ["bash", str(SBATCH), *extra], timeout_s=120, env=env, what="the sbatch script"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    printed = [line for line in result.stdout.splitlines() if line.startswith("+ ")]
    assert len(printed) == 1
    expected = launch.launch_command(
        1,
        2,
        f"localhost:{port}",
        rdzv_id="4242",
        python=sys.executable,
        script_args=[*DEFAULT_TRAIN_ARGS, *extra, "--out", str(out)],
    )
    assert shlex.split(printed[0][2:]) == expected
    data = json.loads(out.read_text())
    assert data["world_size"] == 2 and data["nnodes"] == 1 and data["backend"] == "gloo"
    assert data["width"] == 16 and data["params_identical"] is True
    assert data["threads_per_rank"] == [1, 1]  # OMP_NUM_THREADS = 2 cores ÷ 2 workers


def test_launch_command_builds_the_multi_node_form() -> None:
    cmd = launch.launch_command(
        4, 8, "node001:29500", rdzv_id="123", python="python", script_args=["--width", "4096"]
    )
    assert cmd == [
        "python",
        "-m",
        "torch.distributed.run",
        "--nnodes=4",
        "--nproc-per-node=8",
        "--rdzv-id=123",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=node001:29500",
        "-m",
        "labkit.scaling.train_ddp",
        "--width",
        "4096",
    ]
    assert "--nproc-per-node=gpu" in launch.launch_command(2, "gpu", "node001")
    numa = launch.launch_command(2, 4, "node001", numa_binding="node")
    assert numa[numa.index("--rdzv-endpoint=node001") + 1] == "--numa-binding=node"


def test_sbatch_script_asks_srun_for_the_cpus_again() -> None:
    """C37: from Slurm 22.05 srun does not inherit sbatch's --cpus-per-task."""
    srun = [line for line in SBATCH.read_text().splitlines() if line.startswith("srun ")]
    assert srun == [
        'srun --kill-on-bad-exit=1 --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" '
        '--cpu-bind=cores "${CMD[@]}"'
    ]


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((0, 2, "h:1"), ValueError, "nnodes"),
        ((1, "many", "h:1"), ValueError, "nproc_per_node"),
        ((1, 2, "h:port"), ValueError, "rdzv_endpoint"),
        ((1, 2, "h:70000"), ValueError, "port"),
        ((1, 2, ""), ValueError, "rdzv_endpoint"),
    ],
)
def test_launch_command_validates(args: tuple, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        launch.launch_command(*args)


def test_launch_command_names_the_numa_modes() -> None:
    with pytest.raises(ValueError, match="numa_binding.*node"):
        launch.launch_command(1, 2, "h:1", numa_binding="gpu")


def test_launch_module_prints_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert launch.main(["2", "4", "node001:29500", "--rdzv-id", "7", "--", "--width", "64"]) == 0
    out = capsys.readouterr().out.strip()
    assert out == (
        "python -m torch.distributed.run --nnodes=2 --nproc-per-node=4 --rdzv-id=7 "
        "--rdzv-backend=c10d --rdzv-endpoint=node001:29500 -m labkit.scaling.train_ddp "
        "--width 64"
    )
