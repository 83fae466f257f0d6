"""What every labkit worker under torchrun does: join the group, pick its device, time, report.

The two worker modules (:mod:`labkit.scaling.train_ddp` and
:mod:`labkit.scaling.allreduce`) run in separate processes started by
``torchrun``. This module holds what they share:

- :func:`init` joins the process group with the backend that fits the
  hardware (NCCL where CUDA exists, gloo on CPUs), puts each process on the
  GPU of its ``LOCAL_RANK``, and sets its thread count. Without torchrun's
  variables it starts a one-process group, so a worker also runs on its own.
- :func:`timed_samples` times a fixed number of calls. ``labkit.bench`` sizes
  its runs by a time budget, which each rank would measure differently; ranks
  that disagree on the number of collectives wait for each other forever.
  So every rank runs the same count, starts each call after a barrier (the
  ranks begin together, as they do after each all-reduce in training),
  synchronizes the device before reading the clock, and the slowest rank's
  time counts for each call (:func:`slowest`): a collective is done when its
  last participant is.
- :func:`write_json` writes rank 0's result atomically, so a launcher never
  reads half a file.
- :func:`finish` leaves the group so that gloo's threads are gone before
  Python shuts down (see there: otherwise a few runs in a hundred die with
  SIGABRT as they exit, their work done).

torch is imported inside the functions, as everywhere in labkit.
"""

from __future__ import annotations

import gc
import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Context:
    """One worker's place in the job: ranks, sizes, backend and device."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    group_rank: int
    backend: str
    device: Any  # torch.device
    device_name: str
    hostname: str
    threads: int

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"


def add_common_args(parser: Any) -> None:
    """The options every worker takes: --out, --backend, --threads."""
    parser.add_argument(
        "--out", default=None, help="rank 0 writes its JSON result here (default: print it)"
    )
    parser.add_argument(
        "--backend",
        choices=("auto", "gloo", "nccl"),
        default="auto",
        help="auto: nccl where CUDA is available, else gloo",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads per process (default: torch's own, which follows OMP_NUM_THREADS)",
    )


def pick_backend(requested: str, local_world_size: int | None = None) -> str:
    """NCCL when every local process gets a GPU of its own, else gloo on CPUs.

    NCCL for CUDA GPUs, gloo for CPUs is what torch's documentation
    recommends. NCCL needs one GPU per process, so a machine with fewer GPUs
    than processes (a one-GPU Colab or hub profile running notebook 10's
    two-process jobs) runs them on its CPUs with gloo rather than failing.
    """
    import torch
    import torch.distributed as dist

    if requested != "auto":
        return requested
    if local_world_size is None:
        local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    if (
        torch.cuda.is_available()
        and dist.is_nccl_available()
        and torch.cuda.device_count() >= local_world_size
    ):
        return "nccl"
    return "gloo"


def _import_before_the_group() -> None:
    """Import ``torch.distributed.nn.functional`` while no process group exists yet.

    Its functions take ``group=group.WORLD`` as a default argument, which
    Python evaluates once, at import. DDP imports the module lazily, in its
    constructor; imported then, the defaults hold the live world group for
    good, so :func:`finish` could not free it (and stop its threads). Imported
    here, before :func:`init` creates the group, the defaults are ``None``.
    """
    try:
        import torch.distributed.nn.functional  # noqa: F401
    except ImportError:  # pragma: no cover - a torch built without it cannot pin the group
        pass


def init(backend: str = "auto", threads: int | None = None) -> Context:
    """Join the process group torchrun describes in the environment (or a group of one)."""
    import torch
    import torch.distributed as dist

    if threads is not None:
        if threads < 1:
            raise ValueError(f"--threads must be >= 1, got {threads}")
        torch.set_num_threads(threads)
    backend = pick_backend(backend)
    env = os.environ
    standalone = "RANK" not in env  # run directly, without torchrun: a group of one
    rank = int(env.get("RANK", 0))
    world_size = int(env.get("WORLD_SIZE", 1))
    local_rank = int(env.get("LOCAL_RANK", 0))
    local_world_size = int(env.get("LOCAL_WORLD_SIZE", 1))
    group_rank = int(env.get("GROUP_RANK", 0))
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise RuntimeError("--backend nccl needs CUDA GPUs, and torch sees none here; use gloo")
        if local_rank >= torch.cuda.device_count():
            raise RuntimeError(
                f"LOCAL_RANK {local_rank} has no GPU: this node has {torch.cuda.device_count()}. "
                "Start at most one process per GPU (--nproc-per-node)."
            )
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        device_name = torch.cuda.get_device_name(device)
    else:
        device = torch.device("cpu")
        device_name = "cpu"
    kwargs: dict[str, Any] = {"backend": backend}
    if backend == "nccl":
        kwargs["device_id"] = device  # binds the communicator to this GPU at once
    if standalone:
        kwargs.update(store=dist.HashStore(), rank=0, world_size=1)
    _import_before_the_group()
    dist.init_process_group(**kwargs)
    return Context(
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        local_world_size=local_world_size,
        group_rank=group_rank,
        backend=backend,
        device=device,
        device_name=device_name,
        hostname=socket.gethostname(),
        threads=torch.get_num_threads(),
    )


def synchronize(ctx: Context) -> None:
    """Wait for the device: GPU work is queued, so a clock read before this times the queueing."""
    if ctx.is_cuda:
        import torch

        torch.cuda.synchronize(ctx.device)


def time_call(ctx: Context, fn: Callable[[], Any]) -> float:
    """One call of ``fn()`` in ms: the ranks start together (a barrier), the device is drained."""
    import torch.distributed as dist

    dist.barrier()
    synchronize(ctx)
    start = time.perf_counter()
    fn()
    synchronize(ctx)
    return (time.perf_counter() - start) * 1e3


def timed_samples(ctx: Context, fn: Callable[[], Any], *, reps: int, warmup: int) -> list[float]:
    """``reps`` timings of ``fn()`` in ms after ``warmup`` untimed calls: the same count on every rank."""
    for _ in range(warmup):
        fn()
    synchronize(ctx)
    return [time_call(ctx, fn) for _ in range(reps)]


def slowest(ctx: Context, samples_ms: list[float]) -> list[float]:
    """For each call, the time of the slowest rank (every rank must pass the same number)."""
    import torch
    import torch.distributed as dist

    if ctx.world_size == 1:
        return list(samples_ms)
    tensor = torch.tensor(samples_ms, dtype=torch.float64, device=ctx.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return [float(v) for v in tensor.cpu().tolist()]


def gather(value: Any) -> list[Any]:
    """Every rank's ``value`` (any picklable object), in rank order, on every rank."""
    import torch.distributed as dist

    values: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return values


def describe(ctx: Context) -> dict[str, Any]:
    """What the result files share: the job's shape and where each rank ran."""
    import torch

    per_rank = gather(
        {
            "device": ctx.device_name,
            "host": ctx.hostname,
            "threads": ctx.threads,
            "group_rank": ctx.group_rank,
            # The CPUs this rank may run on (what Slurm's or taskset's binding left it).
            "cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        }
    )
    return {
        "world_size": ctx.world_size,
        "nnodes": len({r["group_rank"] for r in per_rank}),
        "local_world_size": ctx.local_world_size,
        "backend": ctx.backend,
        "devices": [r["device"] for r in per_rank],
        "hosts": [r["host"] for r in per_rank],
        "threads_per_rank": [r["threads"] for r in per_rank],
        "cpus_per_rank": [r["cpus"] for r in per_rank],
        "torch_version": torch.__version__,
    }


def write_json(path: str | None, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` atomically (a temporary file, then a rename); None prints it."""
    text = json.dumps(data, indent=2, allow_nan=False)
    if path is None:
        print(text)
        return
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


def finish(*, clean: bool = True) -> None:
    """Leave the process group and free it, so that its threads are gone before Python exits.

    Why it matters: gloo runs every collective on worker threads of the
    process group. ``wait()`` returns as soon as the result is there, and
    the worker thread lets go of the collective's tensors a moment later;
    for a tensor made in Python that takes the GIL. If the main thread has
    meanwhile reached the end of the script, Python is shutting down and
    ends any thread that asks for the GIL; the worker thread dies inside a
    C++ destructor, and the process aborts ("terminate called without an
    active exception", SIGABRT) after its work was done. So, with ``clean``
    (the run succeeded), every rank first waits for the others (a barrier:
    nobody closes its connections while a peer still talks), then the
    garbage collector frees DDP and its reducer, which sit in reference
    cycles and hold the group, and :func:`~torch.distributed.destroy_process_group`
    drops the last reference (:func:`init` saw to it that nothing else keeps
    one, see :func:`_import_before_the_group`): the group's destructor joins
    its threads, the GIL released so they can finish. Without ``clean`` (a rank
    failed) there is no barrier, which would wait for ranks that may never
    come.
    """
    import torch.distributed as dist

    if not dist.is_initialized():
        return
    if clean:
        dist.barrier()
    gc.collect()
    dist.destroy_process_group()


def run_worker(args: Any, work: Callable[[Context, Any], dict[str, Any]]) -> int:
    """Join the group, run ``work(ctx, args)``, let rank 0 write its result, and leave cleanly.

    The one body of every worker module's ``_main``: on failure the group is
    left without a barrier, since the other ranks may never get there.
    """
    ctx = init(args.backend, args.threads)
    try:
        result = work(ctx, args)
        if ctx.rank == 0:
            write_json(args.out, result)
    except BaseException:
        finish(clean=False)  # no barrier: the other ranks may never get there
        raise
    finish()
    return 0
