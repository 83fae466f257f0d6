"""Run torchrun from a notebook cell and read back what its workers measured.

A notebook kernel is one process; data parallelism needs several. So each
experiment here starts ``python -m torch.distributed.run`` in a subprocess
(``sys.executable``, not a ``torchrun`` found on the PATH, which may belong
to another Python), waits for it, and reads the JSON that rank 0 wrote:

- :func:`run_ddp` trains an MLP with DistributedDataParallel
  (:mod:`labkit.scaling.train_ddp`) and returns a :class:`DdpRun`;
- :func:`scaling_efficiency` runs it with 1, 2, ... processes at the same
  batch per process (weak scaling) and returns a :class:`Scaling`;
- :func:`allreduce_cost` times all-reduces of growing messages
  (:mod:`labkit.scaling.allreduce`) and returns an :class:`AllreduceCost`;
- :func:`allreduce_vs_model_size` relates the all-reduce time in a training
  step to the parameter count (:class:`ModelSizeComm`);
- :func:`launch_command` builds the multi-node torchrun command that
  ``labkit/scaling/slurm/train_ddp.sbatch`` runs on every node.

Fair comparisons on a small machine: every process gets ``threads_per_proc``
torch threads (1 by default, through ``OMP_NUM_THREADS`` and the workers'
``--threads``), so one process with one thread is compared with N processes
of one thread each. Without that, one process would use every core and N
processes would fight over them, and the comparison would measure
oversubscription instead of data parallelism. On a 2-core machine, 2
processes of 1 thread fill it.

Robust subprocesses (:mod:`labkit.scaling.process`): every run has a
timeout, after which the whole tree (torchrun and its workers, which
torchrun starts in sessions of their own) is stopped, SIGTERM first and
SIGKILL after a grace period; an interrupted cell stops it too. A worker
that fails raises :class:`DistRunError` quoting the worker's own error, from
torchrun's report. The result classes live in :mod:`labkit.scaling.results`
and are importable from here too.
"""

from __future__ import annotations

import re
import shlex
import sys
import tempfile
from collections.abc import Mapping, Sequence

from labkit.core.validate import (
    check_choice,
    check_int,
    check_positive_int,
    check_real,
    check_sizes,
)
from labkit.scaling.process import (
    GRACE_S,
    DistRunError,
    DistTimeoutError,
    ProcessOutput,
    check_script_args,
    python_executable,
    run_process,
    run_torchrun,
    standalone_command,
    worker_error,
)
from labkit.scaling.results import (
    AllreduceCost,
    AllreduceRow,
    DdpRun,
    ModelSizeComm,
    Scaling,
    ScalingRow,
    bus_bandwidth_factor,
)
from labkit.scaling.train_ddp import DEPTH, IN_FEATURES, OUT_FEATURES, mlp_parameter_count

__all__ = [
    "DEFAULT_ALLREDUCE_SIZES",
    "DEFAULT_WIDTHS",
    "GRACE_S",
    "AllreduceCost",
    "AllreduceRow",
    "DdpRun",
    "DistRunError",
    "DistTimeoutError",
    "ModelSizeComm",
    "ProcessOutput",
    "Scaling",
    "ScalingRow",
    "allreduce_cost",
    "allreduce_vs_model_size",
    "bus_bandwidth_factor",
    "launch_command",
    "run_ddp",
    "run_process",
    "run_torchrun",
    "scaling_efficiency",
    "standalone_command",
    "worker_error",
]

#: Message sizes :func:`allreduce_cost` sweeps by default: 1 KiB to 64 MiB, ×4 each step.
DEFAULT_ALLREDUCE_SIZES: tuple[int, ...] = tuple(1024 * 4**k for k in range(9))

#: MLP widths :func:`allreduce_vs_model_size` compares by default (27 k to 4.4 M parameters).
DEFAULT_WIDTHS: tuple[int, ...] = (128, 512, 2048)

_BACKENDS = ("auto", "gloo", "nccl")

_ENDPOINT = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.-]+)(:(\d{1,5}))?$")


#: torchrun's --numa-binding modes (torch.numa.binding.AffinityMode, torch >= 2.9).
NUMA_BINDINGS = ("node", "socket", "exclusive", "core-complex")


def launch_command(
    nnodes: int,
    nproc_per_node: int | str,
    rdzv_endpoint: str,
    *,
    rdzv_id: str = "labkit-ddp",
    rdzv_backend: str = "c10d",
    module: str = "labkit.scaling.train_ddp",
    script_args: Sequence[str] = (),
    python: str | None = None,
    numa_binding: str | None = None,
) -> list[str]:
    """The torchrun command to run on *every* node of a multi-node job (as a list of arguments).

    Each node runs the same command; the c10d rendezvous at ``rdzv_endpoint``
    (``host:port`` of one of the nodes, usually the first) gathers
    ``nnodes`` torchrun agents whose ``rdzv_id`` matches (use the job id, so
    two jobs never merge), assigns node and global ranks, and each agent
    starts ``nproc_per_node`` workers (an int, or torchrun's "gpu", "cpu",
    "auto"). ``numa_binding`` (torchrun's ``--numa-binding``, torch >= 2.9:
    "node", "socket", "exclusive", "core-complex") pins each worker to the CPUs
    near its GPU; None leaves it out. ``labkit/scaling/slurm/train_ddp.sbatch``
    builds exactly this command; ``docs/multinode.md`` explains each part.
    """
    nnodes = check_positive_int("nnodes", nnodes)
    if isinstance(nproc_per_node, str):
        check_choice("nproc_per_node", nproc_per_node, ("gpu", "cpu", "auto", "xpu"))
    else:
        nproc_per_node = check_positive_int("nproc_per_node", nproc_per_node)
    match = _ENDPOINT.match(rdzv_endpoint)
    if match is None:
        raise ValueError(
            "rdzv_endpoint must be 'host:port' (the port is optional, torchrun's default is "
            f"29400), e.g. 'node001:29500', got {rdzv_endpoint!r}"
        )
    if match.group(3) is not None and int(match.group(3)) > 65535:
        raise ValueError(f"rdzv_endpoint's port must be 0..65535, got {rdzv_endpoint!r}")
    if numa_binding is not None:
        check_choice("numa_binding", numa_binding, NUMA_BINDINGS)
    for name, value in (("rdzv_id", rdzv_id), ("rdzv_backend", rdzv_backend), ("module", module)):
        if not value or any(c.isspace() for c in value):
            raise ValueError(f"{name} must be a non-empty string without spaces, got {value!r}")
    return [
        python_executable(python),
        "-m",
        "torch.distributed.run",
        f"--nnodes={nnodes}",
        f"--nproc-per-node={nproc_per_node}",
        f"--rdzv-id={rdzv_id}",
        f"--rdzv-backend={rdzv_backend}",
        f"--rdzv-endpoint={rdzv_endpoint}",
        *([f"--numa-binding={numa_binding}"] if numa_binding is not None else []),
        "-m",
        module,
        *check_script_args(script_args),
    ]


def _ddp_bytes_per_proc(width: int, depth: int, batch_per_rank: int) -> int:
    """Host memory one worker needs beyond torch itself: parameters, gradients, DDP's buckets,
    the all-reduce buffer and the snapshot (5 copies), plus activations of a micro-batch."""
    params = mlp_parameter_count(width, depth=depth)
    activations = batch_per_rank * (IN_FEATURES + 2 * depth * width + OUT_FEATURES) * 4 * 2
    pool = 8 * batch_per_rank * (IN_FEATURES + OUT_FEATURES) * 4
    return 5 * params * 4 + activations + pool


def run_ddp(
    nproc: int = 2,
    *,
    width: int = 512,
    depth: int = DEPTH,
    steps: int = 20,
    warmup_steps: int = 3,
    batch_per_rank: int = 64,
    accum_steps: int = 1,
    allreduce_reps: int = 10,
    threads_per_proc: int = 1,
    backend: str = "auto",
    bucket_cap_mb: float | None = None,
    trace_steps: int = 0,
    timeout_s: float = 120,
    env: Mapping[str, str] | None = None,
) -> DdpRun:
    """Train with DDP on ``nproc`` processes of ``threads_per_proc`` threads; time it and check it.

    Starts ``python -m torch.distributed.run --standalone`` (gloo on CPUs,
    NCCL on GPUs with ``backend="auto"``) with :mod:`labkit.scaling.train_ddp`.
    A run takes a few seconds beyond its steps: each process imports torch
    and joins the rendezvous first (``DdpRun.wall_s`` includes that).

    ``bucket_cap_mb`` is DDP's (None: its default, 25 MiB). ``trace_steps``
    > 0 profiles that many DDP steps and as many ``no_sync`` steps after the
    timed ones, and keeps rank 0's Chrome trace in a temporary folder
    (``DdpRun.trace_path``): :func:`labkit.scaling.ddp_trace.ddp_breakdown`
    reads where the bucket all-reduces ran.
    """
    nproc = check_positive_int("nproc", nproc)
    width = check_positive_int("width", width)
    depth = check_positive_int("depth", depth)
    steps = check_positive_int("steps", steps)
    batch_per_rank = check_positive_int("batch_per_rank", batch_per_rank)
    accum_steps = check_positive_int("accum_steps", accum_steps)
    allreduce_reps = check_positive_int("allreduce_reps", allreduce_reps)
    threads_per_proc = check_positive_int("threads_per_proc", threads_per_proc)
    warmup_steps = check_int("warmup_steps", warmup_steps)
    trace_steps = check_int("trace_steps", trace_steps, minimum=0, maximum=100)
    if bucket_cap_mb is not None:
        bucket_cap_mb = check_real("bucket_cap_mb", bucket_cap_mb, low=0, low_open=True)
    backend = check_choice("backend", backend, _BACKENDS)
    check_real("timeout_s", timeout_s, low=0, low_open=True)
    from labkit.machine.memory import require_fits

    require_fits(
        _ddp_bytes_per_proc(width, depth, batch_per_rank),
        arrays=nproc,
        what=f"DDP training of an MLP of width {width} on {nproc} processes",
        name="width or batch_per_rank",
    )
    args = [
        "--width",
        str(width),
        "--depth",
        str(depth),
        "--steps",
        str(steps),
        "--warmup-steps",
        str(warmup_steps),
        "--batch-per-rank",
        str(batch_per_rank),
        "--accum-steps",
        str(accum_steps),
        "--allreduce-reps",
        str(allreduce_reps),
        "--threads",
        str(threads_per_proc),
        "--backend",
        backend,
    ]
    if bucket_cap_mb is not None:
        args += ["--bucket-cap-mb", repr(float(bucket_cap_mb))]
    if trace_steps:
        folder = tempfile.mkdtemp(prefix="labkit-ddp-trace-")
        args += ["--trace-steps", str(trace_steps), "--trace-out", f"{folder}/ddp_step.json"]
    data, output, cmd = run_torchrun(
        "labkit.scaling.train_ddp",
        args,
        nproc=nproc,
        threads_per_proc=threads_per_proc,
        timeout_s=timeout_s,
        env=env,
        what=f"DDP training on {nproc} processes",
    )
    return DdpRun.from_dict(data, wall_s=output.wall_s, command=shlex.join(cmd))


def scaling_efficiency(
    nprocs: Sequence[int] = (1, 2),
    *,
    width: int = 512,
    steps: int = 20,
    batch_per_rank: int = 64,
    accum_steps: int = 1,
    threads_per_proc: int = 1,
    backend: str = "auto",
    timeout_s: float = 120,
    env: Mapping[str, str] | None = None,
) -> Scaling:
    """Run :func:`run_ddp` for each process count at the same batch per process (weak scaling).

    Each process has ``threads_per_proc`` threads, so the machine's cores
    are shared the same way in every run (see the module docstring).
    """
    counts = check_sizes(nprocs, "nprocs")
    runs = [
        run_ddp(
            n,
            width=width,
            steps=steps,
            batch_per_rank=batch_per_rank,
            accum_steps=accum_steps,
            threads_per_proc=threads_per_proc,
            backend=backend,
            timeout_s=timeout_s,
            env=env,
        )
        for n in counts
    ]
    return Scaling.from_runs(runs)


def allreduce_cost(
    sizes_bytes: Sequence[int] = DEFAULT_ALLREDUCE_SIZES,
    *,
    nproc: int = 2,
    reps: int = 20,
    warmup: int = 3,
    threads_per_proc: int = 1,
    backend: str = "auto",
    timeout_s: float = 120,
    env: Mapping[str, str] | None = None,
) -> AllreduceCost:
    """Time an all-reduce of each message size across ``nproc`` torchrun workers.

    Small messages cost a fixed latency whatever their size; large ones cost
    size ÷ bandwidth, which is where busbw flattens at what the link (here
    the loopback and memory of one machine, on a GPU server NVLink or the
    network) can carry. Sizes that do not fit the memory budget are skipped
    and listed.
    """
    from labkit.machine.memory import fit_sizes

    sizes = check_sizes(sizes_bytes, "sizes_bytes")
    for i, size in enumerate(sizes):
        if size % 4:
            raise ValueError(
                f"sizes_bytes[{i}] must be a multiple of 4 (float32 elements), got {size}"
            )
    nproc = check_positive_int("nproc", nproc)
    reps = check_positive_int("reps", reps)
    warmup = check_int("warmup", warmup)
    threads_per_proc = check_positive_int("threads_per_proc", threads_per_proc)
    backend = check_choice("backend", backend, _BACKENDS)
    check_real("timeout_s", timeout_s, low=0, low_open=True)
    # each rank's buffer and gloo's copies; none fitting (or one beyond the machine's whole
    # memory) raises MemoryBudgetError naming sizes_bytes, before any process starts
    kept, dropped = fit_sizes(sizes, arrays=3 * nproc, name="sizes_bytes")
    args = [
        "--sizes",
        ",".join(str(s) for s in kept),
        "--reps",
        str(reps),
        "--warmup",
        str(warmup),
        "--threads",
        str(threads_per_proc),
        "--backend",
        backend,
    ]
    data, _output, _cmd = run_torchrun(
        "labkit.scaling.allreduce",
        args,
        nproc=nproc,
        threads_per_proc=threads_per_proc,
        timeout_s=timeout_s,
        env=env,
        what=f"all-reduce timing on {nproc} processes",
    )
    return AllreduceCost.from_dict(data, skipped_bytes=dropped)


def allreduce_vs_model_size(
    widths: Sequence[int] = DEFAULT_WIDTHS,
    *,
    nproc: int = 2,
    steps: int = 10,
    batch_per_rank: int = 64,
    threads_per_proc: int = 1,
    backend: str = "auto",
    timeout_s: float = 120,
    env: Mapping[str, str] | None = None,
) -> ModelSizeComm:
    """One DDP run per width: per-step all-reduce time against the parameter count.

    The all-reduce moves every gradient, 4 bytes per parameter, whatever the
    batch; the compute grows with the parameters *and* the batch (about 6
    FLOPs per parameter per sample for an MLP's training step). So for a
    fixed batch both grow in proportion to the parameters, and what changes
    the communication's share with size is how efficiently each runs: small
    messages are latency-bound, small matrix multiplies run far below peak.
    The batch per GPU is the lever: a smaller one shrinks the compute, not the
    all-reduce.
    """
    checked = check_sizes(widths, "widths")
    runs = tuple(
        run_ddp(
            nproc,
            width=w,
            steps=steps,
            batch_per_rank=batch_per_rank,
            threads_per_proc=threads_per_proc,
            backend=backend,
            timeout_s=timeout_s,
            env=env,
        )
        for w in checked
    )
    return ModelSizeComm(runs)


# --------------------------------------------------------------------------- plots


# --------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    """``python -m labkit.scaling.launch NNODES NPROC_PER_NODE HOST:PORT [-- ARGS]``: print the command.

    ARGS after ``--`` go to :mod:`labkit.scaling.train_ddp`.
    """
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m labkit.scaling.launch",
        description="Print the torchrun command each node of a multi-node job runs; "
        "arguments after -- go to labkit.scaling.train_ddp.",
    )
    parser.add_argument("nnodes", type=int)
    parser.add_argument("nproc_per_node")
    parser.add_argument("rdzv_endpoint", help="host:port of the first node")
    parser.add_argument("--rdzv-id", default="labkit-ddp", help="a job id shared by all nodes")
    parser.add_argument("--python", default="python", help="the interpreter on the nodes")
    parser.add_argument(
        "--numa-binding", choices=NUMA_BINDINGS, help="pin each worker near its GPU (torchrun's)"
    )
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    extra = argv[split + 1 :]
    nproc: int | str = (
        int(args.nproc_per_node) if args.nproc_per_node.isdigit() else args.nproc_per_node
    )
    try:
        cmd = launch_command(
            args.nnodes,
            nproc,
            args.rdzv_endpoint,
            rdzv_id=args.rdzv_id,
            script_args=extra,
            python=args.python,
            numa_binding=args.numa_binding,
        )
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    print(shlex.join(cmd))
    return 0


if __name__ == "__main__":
    sys.exit(main())
