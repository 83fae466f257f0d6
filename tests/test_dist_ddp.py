"""labkit.scaling: real torchrun runs on this CPU (gloo), the launcher's failure and timeout paths.

Each torchrun launch costs a few seconds (every worker imports torch), so the
real runs are shared through module-scoped fixtures and kept tiny. Numbers
are checked for sanity only, never compared: performance is shown by the
notebook, not by unit tests.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import matplotlib
import psutil
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

pytest.importorskip("torch")

from labkit.scaling import launch  # noqa: E402
from labkit.scaling import plots as scaling_plots  # noqa: E402
from labkit.scaling.launch import (  # noqa: E402
    AllreduceCost,
    DdpRun,
    DistRunError,
    DistTimeoutError,
    ModelSizeComm,
    Scaling,
)
from labkit.scaling.train_ddp import build_mlp, mlp_parameter_count  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TINY = {"width": 32, "steps": 3, "batch_per_rank": 8, "timeout_s": 120}


@pytest.fixture(scope="module")
def scaling() -> Scaling:
    """A real weak-scaling run: 1 and 2 gloo processes of 1 thread each."""
    return launch.scaling_efficiency((1, 2), **TINY)


@pytest.fixture(scope="module")
def ddp2(scaling: Scaling) -> DdpRun:
    return scaling.row(2).run


@pytest.fixture(scope="module")
def allreduce() -> AllreduceCost:
    return launch.allreduce_cost((1024, 65536), nproc=2, reps=3, warmup=1, timeout_s=120)


# --------------------------------------------------------------------------- real runs


def test_two_process_ddp_keeps_replicas_identical(ddp2: DdpRun) -> None:
    assert ddp2.nproc == 2 and ddp2.backend == "gloo" and ddp2.devices == ("cpu", "cpu")
    assert ddp2.nnodes == 1 and ddp2.threads_per_proc == 1
    assert ddp2.params_identical and len(ddp2.checksums) == 2
    assert len(set(ddp2.checksums)) == 1
    assert (
        ddp2.parameter_count
        == mlp_parameter_count(32)
        == sum(p.numel() for p in build_mlp(32).parameters())
    )
    assert ddp2.gradient_bytes == 4 * ddp2.parameter_count
    assert ddp2.global_batch == 2 * 8
    assert ddp2.step.n == ddp2.local_step.n == 3 and ddp2.allreduce.n == 10
    assert ddp2.step.median_ms > 0 and ddp2.samples_per_s > 0
    assert math.isfinite(ddp2.loss_first) and math.isfinite(ddp2.loss_last)
    assert "--nproc-per-node=2" in ddp2.command and "labkit.scaling.train_ddp" in ddp2.command
    text = str(ddp2)
    assert "DDP training, 2 processes × 1 thread (gloo on cpu)" in text
    assert "replicas identical after training: yes" in text and "samples/s" in text
    assert all(line.startswith("cpu: ") for line in ddp2.summary())
    assert json.loads(json.dumps(ddp2.to_dict()))["params_identical"] is True


def test_scaling_efficiency_is_throughput_over_n_times_one(scaling: Scaling) -> None:
    one, two = scaling.row(1), scaling.row(2)
    assert one.run.nproc == 1 and one.efficiency == pytest.approx(1.0)
    assert two.speedup == pytest.approx(two.run.samples_per_s / one.run.samples_per_s)
    assert two.efficiency == pytest.approx(two.run.samples_per_s / (2 * one.run.samples_per_s))
    text = str(scaling)
    assert "1 process:" in text and "2 processes:" in text and "efficiency" in text
    with pytest.raises(KeyError, match="measured"):
        scaling.row(3)


def test_allreduce_on_two_processes(allreduce: AllreduceCost) -> None:
    assert allreduce.nproc == 2 and allreduce.backend == "gloo"
    assert [r.size_bytes for r in allreduce.rows] == [1024, 65536]
    for row in allreduce.rows:
        assert row.timing.n == 3 and row.median_ms > 0
        assert row.algbw_gb_per_s == pytest.approx(row.size_bytes / (row.median_ms / 1e3) / 1e9)
        assert row.busbw_gb_per_s == pytest.approx(row.algbw_gb_per_s)  # 2(n-1)/n = 1 for n = 2
    text = str(allreduce)
    assert "1 KiB" in text and "64 KiB" in text and "GB/s" in text and "2(n-1)/n" in text


def test_plots_label_their_axes(scaling: Scaling, allreduce: AllreduceCost, ddp2: DdpRun) -> None:
    for ax in (
        scaling_plots.plot_scaling(scaling),
        scaling_plots.plot_allreduce(allreduce),
        scaling_plots.plot_model_size(ModelSizeComm((ddp2,))),
    ):
        try:
            assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
        finally:
            plt.close(ax.figure)


def test_model_size_table(ddp2: DdpRun) -> None:
    result = ModelSizeComm((ddp2,))
    text = str(result)
    assert "width" in text and f"{ddp2.parameter_count:,}" in text and "DDP overhead" in text
    assert result.summary()[0].startswith("cpu: ")


def test_train_ddp_runs_as_a_file() -> None:
    """Given as a file path (as torchrun accepts it), the script finds labkit and parses its options."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "labkit/scaling/train_ddp.py"), "--help"],
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
    )
    assert "--batch-per-rank" in out.stdout and "--accum-steps" in out.stdout


def test_train_ddp_runs_alone_as_a_group_of_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without torchrun's variables the script trains as a one-process group (here, in-process)."""
    from labkit.scaling import train_ddp

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "alone.json"
    args = [
        "--width",
        "8",
        "--steps",
        "2",
        "--warmup-steps",
        "1",
        "--allreduce-reps",
        "1",
        "--accum-steps",
        "2",
        "--out",
        str(out),
    ]
    assert train_ddp.main(args) == 0
    data = json.loads(out.read_text())
    assert data["world_size"] == 1 and data["params_identical"] is True
    assert data["global_batch"] == 2 * 64 and len(data["step_ms"]) == 2


# --------------------------------------------------------------------------- failures


def test_a_failing_worker_raises_with_its_error(tmp_path: Path) -> None:
    script = tmp_path / "fail.py"
    script.write_text(
        "import os, time\n"
        "if os.environ['RANK'] == '1':\n"
        "    raise RuntimeError('boom from rank 1')\n"
        "time.sleep(60)\n"
    )
    with pytest.raises(DistRunError) as info:
        launch.run_torchrun(str(script), nproc=2, module=False, timeout_s=60, what="the test job")
    message = str(info.value)
    assert "the test job failed: torchrun exited with code 1" in message
    assert "The worker's error: RuntimeError: boom from rank 1" in message
    assert not isinstance(info.value, DistTimeoutError)


def test_a_worker_killed_by_a_signal_shows_what_it_wrote(tmp_path: Path) -> None:
    """torchrun's report of a signal has no traceback; the worker's own stderr says why."""
    script = tmp_path / "abort.py"
    script.write_text(
        "import os, sys, time\n"
        "if os.environ['RANK'] == '1':\n"
        "    sys.stderr.write('terminate called after throwing an instance of gloo::IoException\\n')\n"
        "    sys.stderr.flush()\n"
        "    os.abort()\n"
        "time.sleep(60)\n"
    )
    with pytest.raises(DistRunError) as info:
        launch.run_torchrun(str(script), nproc=2, module=False, timeout_s=60, what="the abort")
    message = str(info.value)
    assert "SIGABRT" in message  # torchrun's report
    assert "What local rank 1 wrote to stderr" in message
    assert "| terminate called after throwing an instance of gloo::IoException" in message
    assert "Fatal Python error: Aborted" in message  # PYTHONFAULTHANDLER=1 in the workers


FINISH_FREES_THE_GROUP = """
import json, os, sys
for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK"):
    os.environ.pop(name, None)
from labkit.scaling import train_ddp, worker

def gloo_threads():
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as handle:
                names.append(handle.read().strip())
        except OSError:
            pass
    return sorted(n for n in names if "gloo" in n)

args = train_ddp.parse_args(["--width", "8", "--steps", "1", "--warmup-steps", "0",
                             "--allreduce-reps", "1", "--batch-per-rank", "4",
                             "--backend", "gloo", "--threads", "1"])
ctx = worker.init(args.backend, args.threads)
train_ddp.train(ctx, args)
during = gloo_threads()
worker.finish()
print(json.dumps({"during": during, "after": gloo_threads()}))
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc")
def test_finish_frees_the_group_so_no_gloo_thread_outlives_it() -> None:
    """Regression: a gloo thread alive at interpreter exit made ~1 run in 30 die with SIGABRT.

    DDP used to pin the process group (torch.distributed.nn.functional, imported
    by DDP after init, captures the live group in its default arguments), so
    destroy_process_group could not join gloo's threads; one still letting go
    of a collective's tensors when Python shut down aborted the process.
    """
    out = subprocess.run(
        [sys.executable, "-c", FINISH_FREES_THE_GROUP],
        cwd=ROOT,
        timeout=120,
        capture_output=True,
        text=True,
        check=True,
    )
    threads = json.loads(out.stdout.splitlines()[-1])
    assert threads["during"], "no gloo thread seen while training: the check sees nothing"
    assert threads["after"] == [], "the process group outlived finish(); see worker.finish"


def test_timeout_stops_torchrun_and_its_workers(tmp_path: Path) -> None:
    script = tmp_path / "hang.py"
    pids = tmp_path / "pids"
    pids.mkdir()
    script.write_text(
        "import os, pathlib, time\n"
        f"pathlib.Path({str(pids)!r}, os.environ['RANK']).write_text(str(os.getpid()))\n"
        "time.sleep(300)\n"
    )
    with pytest.raises(DistTimeoutError) as info:
        launch.run_torchrun(str(script), nproc=2, module=False, timeout_s=8, what="the hang")
    assert "did not finish within 8 s" in str(info.value)
    workers = {int(p.read_text()) for p in pids.iterdir()}
    assert len(workers) == 2, "the workers had not started: raise timeout_s in this test"
    assert workers <= set(info.value.pids)
    for pid in info.value.pids:
        try:
            assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            pass


def test_run_process_stops_the_tree_on_timeout() -> None:
    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); time.sleep(300)"
    with pytest.raises(DistTimeoutError) as info:
        launch.run_process([sys.executable, "-c", code], timeout_s=2, what="a sleeper")
    assert len(info.value.pids) == 2
    assert not any(
        psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
        for p in info.value.pids
    )


def test_worker_error_reads_torchruns_root_cause() -> None:
    stderr = (
        "Traceback ...\nRuntimeError: boom\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "============================================================\n"
        "Root Cause (first observed failure):\n"
        "[0]:\n"
        "  rank      : 1 (local_rank: 1)\n"
        "  exitcode  : 1 (pid: 42)\n"
        "  traceback : Traceback (most recent call last):\n"
        '    File "x.py", line 3, in <module>\n'
        "  RuntimeError: boom\n"
        "  \n"
        "============================================================\n"
    )
    report = launch.worker_error(stderr)
    assert report is not None and "rank      : 1 (local_rank: 1)" in report
    assert report.rstrip().endswith("RuntimeError: boom")
    assert launch.worker_error("no summary here") is None


# --------------------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"nproc": 0}, ValueError, "nproc"),
        ({"width": "wide"}, TypeError, "width"),
        ({"steps": 0}, ValueError, "steps"),
        ({"warmup_steps": -1}, ValueError, "warmup_steps"),
        ({"backend": "mpi"}, ValueError, "backend"),
        ({"threads_per_proc": 1.5}, TypeError, "threads_per_proc"),
        ({"timeout_s": -1}, ValueError, "timeout_s"),
    ],
)
def test_run_ddp_validates_arguments(kwargs: dict, error: type, match: str) -> None:
    args = {"width": 8, "steps": 1, **kwargs}
    with pytest.raises(error, match=match):
        launch.run_ddp(**args)


def test_sweeps_validate_arguments() -> None:
    with pytest.raises(ValueError, match="multiple of 4"):
        launch.allreduce_cost((1022,))
    with pytest.raises(ValueError, match="sizes_bytes"):
        launch.allreduce_cost(())
    with pytest.raises(ValueError, match="nprocs"):
        launch.scaling_efficiency(())
    with pytest.raises(TypeError, match="widths"):
        launch.allreduce_vs_model_size(("wide",))


def test_bus_bandwidth_factor_follows_nccl_tests() -> None:
    assert launch.bus_bandwidth_factor(1) == 0
    assert launch.bus_bandwidth_factor(2) == 1
    assert launch.bus_bandwidth_factor(8) == pytest.approx(1.75)


def test_importing_labkit_dist_imports_no_framework() -> None:
    code = (
        "import labkit.scaling.launch, labkit.scaling.train_ddp, labkit.scaling.allreduce, "
        "labkit.scaling.accumulation, labkit.scaling.mirrored, sys, json; "
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout.splitlines()[-1]))
    assert not loaded & {"torch", "tensorflow", "keras", "matplotlib", "cupy", "numba", "jax"}


@pytest.mark.parametrize(
    ("gpus", "local_world_size", "expected"),
    [(0, 2, "gloo"), (1, 2, "gloo"), (2, 2, "nccl"), (8, 2, "nccl"), (1, 1, "nccl")],
)
def test_auto_backend_uses_nccl_only_with_a_gpu_per_process(
    gpus: int, local_world_size: int, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A one-GPU machine (Colab, a one-GPU hub profile) running notebook 10's
    # two-process jobs must fall back to gloo, not stop with "LOCAL_RANK 1 has no GPU".
    import torch
    import torch.distributed as dist

    from labkit.scaling.worker import pick_backend

    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    assert pick_backend("auto", local_world_size) == expected
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local_world_size))
    assert pick_backend("auto") == expected
    assert pick_backend("gloo", local_world_size) == "gloo"
