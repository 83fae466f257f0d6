"""The SLURM script under a real Slurm: a one-node cluster started for this module (issue 17, C38).

tests/test_dist_slurm.py checks the command the script builds with ``srun``
stood in for; that cannot catch what Slurm itself decides. Here
``tools/slurm_local.py`` starts Debian's ``slurmctld``, ``slurmd`` and
``munged`` on 127.0.0.1 (inside this process's network namespace, so it works
under tools/offline.sh), ``sbatch --wait`` submits
``labkit/scaling/slurm/train_ddp.sbatch`` as a user would, and the tests check
that the two-process DDP job trained, that each worker got the CPUs the job
asked for, and that the job's JSON is the DDP result (the same parameters as
the same training run by ``labkit.scaling.launch.run_ddp``).

Where Slurm is not installed or cannot start, the tests skip and say why;
``.ci/run`` installs it and sets ``LABKIT_REQUIRE_SLURM=1``, which turns the
skip into a failure.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import slurm_local  # noqa: E402

SBATCH = ROOT / "labkit" / "scaling" / "slurm" / "train_ddp.sbatch"
TRAIN = ["--width", "16", "--steps", "6", "--warmup-steps", "1", "--allreduce-reps", "1"]


def _skip_or_fail(message: str) -> NoReturn:
    """Skip where Slurm is optional; CI sets LABKIT_REQUIRE_SLURM=1 to fail instead."""
    if os.environ.get("LABKIT_REQUIRE_SLURM") == "1":
        pytest.fail(f"LABKIT_REQUIRE_SLURM=1 but {message}", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurm_local.Cluster]:
    missing = slurm_local.missing_programs()
    if missing:
        _skip_or_fail(
            f"Slurm is not installed ({', '.join(missing)} missing; {slurm_local.INSTALL})"
        )
    folder = tmp_path_factory.mktemp("slurm")
    try:
        started = slurm_local.start(folder)
    except slurm_local.SlurmUnavailable as error:
        _skip_or_fail(f"a one-node Slurm could not start here: {error}")
    try:
        yield started
    finally:
        slurm_local.stop(folder)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _submit(cluster: slurm_local.Cluster, folder: Path, *, exact: bool) -> dict[str, Any]:
    """sbatch the script (2 workers, all the node's CPUs); return its JSON and log."""
    pytest.importorskip("torch")
    cpus = min(cluster.cpus, 2)
    out = folder / "ddp.json"
    log = folder / "job.out"
    env = {
        **cluster.env,
        "PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        "GPUS_PER_NODE": "2",  # no GPU here: 2 gloo workers on CPUs
        "MASTER_PORT": str(_free_port()),
        "OUT": str(out),
    }
    env.pop("OMP_NUM_THREADS", None)
    env.pop("SLURM_EXACT", None)
    if exact:
        # As at a site whose job steps are exact by default: srun then gives each task only
        # the CPUs srun itself asks for; without --cpus-per-task that is one (finding C37).
        env["SLURM_EXACT"] = "1"
    cmd = [
        "sbatch",
        "--wait",
        "--nodes=1",
        "--gpus-per-node=0",  # the script asks for 4 GPUs; this node has none
        f"--cpus-per-task={cpus}",
        "--time=5",
        f"--output={log}",
        str(SBATCH),
        *TRAIN,
    ]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=folder)
    text = log.read_text() if log.exists() else "(no job log)"
    assert result.returncode == 0, f"{result.stderr}\n--- job log ---\n{text[-3000:]}"
    return {"cpus": cpus, "log": text, "data": json.loads(out.read_text())}


@pytest.fixture(scope="module")
def job(cluster: slurm_local.Cluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _submit(cluster, tmp_path_factory.mktemp("job"), exact=False)


def test_the_node_is_up(cluster: slurm_local.Cluster) -> None:
    result = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N %c %T"], env=cluster.env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [cluster.node, str(cluster.cpus), "idle"]


def test_the_two_process_job_trains(job: dict[str, Any]) -> None:
    data = job["data"]
    assert data["kind"] == "ddp" and data["world_size"] == 2 and data["nnodes"] == 1
    assert data["backend"] == "gloo" and data["steps"] == 6
    assert data["params_identical"] is True
    assert data["loss_last"] < data["loss_first"]
    assert "labkit-ddp: 1 node(s) x 2 worker(s)" in job["log"]
    assert "labkit-ddp: done, result in" in job["log"]


def test_each_worker_got_the_cpus_the_job_asked_for(job: dict[str, Any]) -> None:
    cpus = job["cpus"]
    assert [len(c) for c in job["data"]["cpus_per_rank"]] == [cpus, cpus]
    # OMP_NUM_THREADS = the task's CPUs shared among its 2 workers (at least 1)
    assert job["data"]["threads_per_rank"] == [max(cpus // 2, 1)] * 2


def test_an_exact_step_still_gets_the_jobs_cpus(
    cluster: slurm_local.Cluster, tmp_path: Path
) -> None:
    """Finding C37: srun does not inherit --cpus-per-task (Slurm >= 22.05); the script asks again."""
    if cluster.cpus < 2:
        pytest.skip("needs 2 CPUs to tell 1 CPU from the job's CPUs")
    job = _submit(cluster, tmp_path, exact=True)
    assert [len(c) for c in job["data"]["cpus_per_rank"]] == [2, 2]


def _plain_step_cpus(cluster: slurm_local.Cluster, folder: Path, *, exact: bool) -> int:
    """CPUs a plain ``srun`` step (no --cpus-per-task of its own) gets in a 2-CPU job."""
    log = folder / f"plain-{int(exact)}.out"
    env = {k: v for k, v in cluster.env.items() if k != "SLURM_EXACT"}
    if exact:
        env["SLURM_EXACT"] = "1"  # as srun --exact, which some sites make the default
    probe = "import os; print('cpus', len(os.sched_getaffinity(0)))"
    cmd = [
        "sbatch",
        "--wait",
        "--nodes=1",
        "--ntasks=1",
        "--cpus-per-task=2",
        "--time=2",
        f"--output={log}",
        f'--wrap=srun {sys.executable} -c "{probe}"',
    ]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, cwd=folder)
    text = log.read_text() if log.exists() else "(no job log)"
    assert result.returncode == 0, f"{result.stderr}\n--- job log ---\n{text[-2000:]}"
    (line,) = [ln for ln in text.splitlines() if ln.startswith("cpus ")]
    return int(line.split()[1])


def test_a_plain_step_gets_one_cpu_only_where_steps_are_exact(
    cluster: slurm_local.Cluster, tmp_path: Path
) -> None:
    """What docs/multinode.md section 3 says of a plain srun on this Slurm (finding C37): without
    --exact "all non-GRES resources ... will be used" (srun(1)); with SLURM_EXACT=1 the step gets
    only what srun itself asks for, one CPU, which is why the script repeats --cpus-per-task."""
    if cluster.cpus < 2:
        pytest.skip("needs 2 CPUs to tell 1 CPU from the job's CPUs")
    assert _plain_step_cpus(cluster, tmp_path, exact=False) == 2
    assert _plain_step_cpus(cluster, tmp_path, exact=True) == 1


def test_the_jobs_result_is_the_ddp_result(job: dict[str, Any]) -> None:
    """Same seed, same shapes, same threads: the job ends with the parameters run_ddp ends with."""
    from labkit.scaling import launch

    data = job["data"]
    local = launch.run_ddp(
        2,
        width=16,
        steps=6,
        warmup_steps=1,
        batch_per_rank=64,
        allreduce_reps=1,
        threads_per_proc=data["threads_per_rank"][0],
    )
    assert local.parameter_count == data["parameter_count"]
    assert tuple(data["checksums"]) == local.checksums
    assert local.loss_first == pytest.approx(data["loss_first"], rel=1e-6)
    assert local.loss_last == pytest.approx(data["loss_last"], rel=1e-6)
