"""The training script torchrun starts: DistributedDataParallel on an MLP of adjustable width.

Run it on one machine with two processes::

    python -m torch.distributed.run --standalone --nproc-per-node=2 -m labkit.scaling.train_ddp --out ddp.json

(or give the file path instead of ``-m labkit.scaling.train_ddp``; or run it
with plain ``python -m labkit.scaling.train_ddp`` as a group of one). On a
cluster, ``labkit/scaling/slurm/train_ddp.sbatch`` starts it on every node.

What each process does:

1. joins the group: NCCL and the GPU of its ``LOCAL_RANK`` where CUDA
   exists, gloo on the CPU otherwise (:mod:`labkit.scaling.worker`);
2. builds the same MLP (same seed; DDP also copies rank 0's weights to every
   rank when it wraps the model). ``--width`` sets the hidden layers' size,
   so the parameter count, and with it the bytes every all-reduce moves,
   is the knob the notebook turns;
3. draws its own synthetic batches (seeded by rank: each rank sees different
   samples, as with a DistributedSampler) of a fixed regression task;
4. times ``--steps`` training steps, each of ``--accum-steps`` micro-batches
   of ``--batch-per-rank`` samples and one optimizer step. A step with the
   gradient all-reduce alternates with a *local* step: the same forward,
   backward and optimizer step under DDP's ``no_sync()``, so no gradient
   leaves the process (its parameters are restored afterwards, outside the
   timer, so the replicas stay identical). The difference of the medians is
   everything DDP's gradient synchronization adds to a step: its reducer's
   work, its communication threads' contention with the compute, and the
   all-reduce time backward did not hide (``--trace-steps`` profiles steps to split it:
   :mod:`labkit.scaling.ddp_trace`). Alternating the two kinds keeps a
   drift in the machine's load from favouring either;
5. times, apart from training, one all-reduce of a buffer as large as all
   the gradients: the communication cost that DDP tries to hide;
6. checks the result: after training, every rank hashes its parameters and
   the hashes are compared. DDP's promise is that replicas stay *bitwise*
   identical, because every rank applies the same averaged gradient;
7. with ``--trace-steps N``, profiles N more steps of each kind with
   torch.profiler and rank 0 writes the Chrome trace to ``--trace-out``;
   ``--bucket-cap-mb`` sets DDP's bucket size;
8. rank 0 writes everything as JSON to ``--out``;
9. every rank leaves the group and frees it before Python exits
   (:func:`labkit.scaling.worker.finish` says why that matters).

Timing: warm-up steps are excluded; each timed step starts after a barrier
and ends with a device synchronization; the slowest rank's time counts
(see :mod:`labkit.scaling.worker` for why labkit.bench's time budget cannot be
used across ranks). :mod:`labkit.scaling.launch` turns the samples into
:class:`labkit.timing.bench.Timing` (median and IQR).

torch is imported inside the functions: importing this module (as
:mod:`labkit.scaling.accumulation` does, for the model) costs nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import sys
from typing import Any

#: The MLP's shape: inputs -> `depth` hidden layers of `width` -> outputs.
IN_FEATURES = 64
OUT_FEATURES = 16
DEPTH = 2

#: How many distinct micro-batches each rank keeps (and cycles through).
POOL_BATCHES = 8


def _check_mlp(width: Any, in_features: Any, depth: Any, out_features: Any) -> None:
    from labkit.core.validate import check_positive_int

    for name, value in (
        ("width", width),
        ("in_features", in_features),
        ("depth", depth),
        ("out_features", out_features),
    ):
        check_positive_int(name, value)


def mlp_parameter_count(
    width: int,
    *,
    in_features: int = IN_FEATURES,
    depth: int = DEPTH,
    out_features: int = OUT_FEATURES,
) -> int:
    """Weights and biases of :func:`build_mlp` (without batch norm), computed without torch."""
    _check_mlp(width, in_features, depth, out_features)
    hidden = (depth - 1) * (width * width + width)
    return in_features * width + width + hidden + width * out_features + out_features


def build_mlp(
    width: int,
    *,
    in_features: int = IN_FEATURES,
    depth: int = DEPTH,
    out_features: int = OUT_FEATURES,
    batch_norm: bool = False,
) -> Any:
    """Linear -> [BatchNorm] -> ReLU, ``depth`` times, then a Linear head (a torch module).

    Without batch norm no layer mixes the samples of a batch, which is what
    makes gradient accumulation exact (:mod:`labkit.scaling.accumulation`).
    """
    _check_mlp(width, in_features, depth, out_features)
    import torch

    layers: list[Any] = []
    size = in_features
    for _ in range(depth):
        layers.append(torch.nn.Linear(size, width))
        if batch_norm:
            layers.append(torch.nn.BatchNorm1d(width))
        layers.append(torch.nn.ReLU())
        size = width
    layers.append(torch.nn.Linear(size, out_features))
    return torch.nn.Sequential(*layers)


def synthetic_batches(
    count: int,
    batch: int,
    *,
    seed: int,
    rank: int = 0,
    in_features: int = IN_FEATURES,
    out_features: int = OUT_FEATURES,
    dtype: Any = None,
) -> list[tuple[Any, Any]]:
    """``count`` (x, y) pairs of a fixed task; the task is the same on every rank, the samples differ.

    The targets come from a random "teacher" ``y = tanh(x @ W)`` seeded by
    ``seed`` alone, so training has something to learn and its loss falls;
    the inputs are seeded by ``seed`` and ``rank``, so each rank holds its
    own shard of the data.
    """
    import torch

    dtype = dtype or torch.float32
    teacher = torch.Generator().manual_seed(seed)
    weight = torch.randn(in_features, out_features, generator=teacher) / in_features**0.5
    shard = torch.Generator().manual_seed(seed * 1_000_003 + rank + 1)
    out = []
    for _ in range(count):
        x = torch.randn(batch, in_features, generator=shard)
        out.append((x.to(dtype), torch.tanh(x @ weight).to(dtype)))
    return out


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from labkit.scaling.worker import add_common_args

    parser = argparse.ArgumentParser(
        prog="python -m torch.distributed.run ... -m labkit.scaling.train_ddp",
        description="Time DDP training steps of an MLP and check that the replicas stay identical.",
    )
    parser.add_argument("--width", type=_positive_int, default=512, help="hidden layer size")
    parser.add_argument("--depth", type=_positive_int, default=DEPTH, help="hidden layers")
    parser.add_argument("--steps", type=_positive_int, default=20, help="timed steps of each kind")
    parser.add_argument("--warmup-steps", type=int, default=3, help="untimed steps first")
    parser.add_argument(
        "--batch-per-rank",
        type=_positive_int,
        default=64,
        help="samples per micro-batch on each rank",
    )
    parser.add_argument(
        "--accum-steps",
        type=_positive_int,
        default=1,
        help="micro-batches per optimizer step (gradient accumulation)",
    )
    parser.add_argument(
        "--allreduce-reps",
        type=_positive_int,
        default=10,
        help="timed all-reduces of a gradient-sized buffer",
    )
    parser.add_argument(
        "--bucket-cap-mb",
        type=float,
        default=None,
        help="DDP's bucket_cap_mb (default: DDP's own, 25 MiB)",
    )
    parser.add_argument(
        "--trace-steps",
        type=int,
        default=0,
        help="after the timed steps, profile this many DDP and no_sync steps (torch.profiler)",
    )
    parser.add_argument(
        "--trace-out", default=None, help="where rank 0 writes that Chrome trace (JSON)"
    )
    parser.add_argument("--lr", type=float, default=0.3, help="SGD learning rate")
    parser.add_argument("--seed", type=int, default=0)
    add_common_args(parser)
    args = parser.parse_args(argv)
    if args.warmup_steps < 0:
        parser.error(f"--warmup-steps must be >= 0, got {args.warmup_steps}")
    if args.trace_steps < 0 or (args.trace_steps and not args.trace_out):
        parser.error("--trace-steps must be >= 0, and needs --trace-out FILE")
    if args.bucket_cap_mb is not None and not args.bucket_cap_mb > 0:
        parser.error(f"--bucket-cap-mb must be > 0, got {args.bucket_cap_mb}")
    return args


def train(ctx: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Every rank runs this; the returned dict is only complete (and only used) on rank 0."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from labkit.scaling.worker import describe, gather, slowest, time_call, timed_samples

    torch.manual_seed(args.seed)
    model = build_mlp(args.width, depth=args.depth).to(ctx.device)
    parameters = list(model.parameters())
    count = sum(p.numel() for p in parameters)
    buckets = {} if args.bucket_cap_mb is None else {"bucket_cap_mb": args.bucket_cap_mb}
    ddp = DistributedDataParallel(
        model, device_ids=[ctx.local_rank] if ctx.is_cuda else None, **buckets
    )
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    loss_fn = torch.nn.MSELoss()
    pool = [
        (x.to(ctx.device), y.to(ctx.device))
        for x, y in synthetic_batches(
            max(POOL_BATCHES, args.accum_steps),
            args.batch_per_rank,
            seed=args.seed,
            rank=ctx.rank,
        )
    ]
    batches = itertools.cycle(pool)
    losses: list[Any] = []

    def step(sync: bool) -> None:
        optimizer.zero_grad(set_to_none=True)
        total = None
        for micro in range(args.accum_steps):
            x, y = next(batches)
            # Only the last micro-batch of a synchronized step all-reduces (DDP's no_sync).
            last = sync and micro == args.accum_steps - 1
            with contextlib.nullcontext() if last else ddp.no_sync():
                loss = loss_fn(ddp(x), y) / args.accum_steps
                loss.backward()
            total = loss.detach() if total is None else total + loss.detach()
        optimizer.step()
        if sync:
            losses.append(total)

    saved: list[Any] = []

    def snapshot() -> None:
        saved[:] = [p.detach().clone() for p in parameters]

    def restore() -> None:
        with torch.no_grad():
            for p, s in zip(parameters, saved, strict=True):
                p.copy_(s)

    def local_step() -> None:
        step(sync=False)

    for _ in range(args.warmup_steps):
        step(sync=True)
    snapshot()
    local_step()  # warm the no_sync path too
    restore()
    step_ms, local_ms = [], []
    for _ in range(args.steps):
        step_ms.append(time_call(ctx, lambda: step(sync=True)))
        snapshot()
        local_ms.append(time_call(ctx, local_step))
        restore()

    flat = torch.zeros(count, dtype=torch.float32, device=ctx.device)
    allreduce_ms = timed_samples(
        ctx, lambda: dist.all_reduce(flat), reps=args.allreduce_reps, warmup=2
    )

    loss_last = losses[-1]  # before the profiled steps, which train on
    if args.trace_steps:
        _trace(ctx, args, lambda: step(sync=True), local_step, snapshot, restore)

    with torch.no_grad():
        values = torch.cat([p.detach().reshape(-1).float().cpu() for p in parameters])
    digest = hashlib.sha256(values.numpy().tobytes()).hexdigest()[:16]
    checksums = gather(digest)
    first_last = torch.tensor(
        [losses[0].item(), loss_last.item()], dtype=torch.float64, device=ctx.device
    )
    dist.all_reduce(first_last)
    first_last /= ctx.world_size
    result = {
        "kind": "ddp",
        **describe(ctx),
        "width": args.width,
        "depth": args.depth,
        "in_features": IN_FEATURES,
        "out_features": OUT_FEATURES,
        "parameter_count": count,
        "gradient_bytes": count * 4,
        "batch_per_rank": args.batch_per_rank,
        "accum_steps": args.accum_steps,
        "global_batch": args.batch_per_rank * args.accum_steps * ctx.world_size,
        "steps": args.steps,
        "warmup_steps": args.warmup_steps,
        "step_ms": slowest(ctx, step_ms),
        "local_step_ms": slowest(ctx, local_ms),
        "allreduce_ms": slowest(ctx, allreduce_ms),
        "loss_first": float(first_last[0]),
        "loss_last": float(first_last[1]),
        "checksums": checksums,
        "params_identical": len(set(checksums)) == 1,
        "bucket_cap_mb": args.bucket_cap_mb,  # None: DDP's default (25 MiB, the first 1 MiB)
        "trace": args.trace_out if args.trace_steps else None,
    }
    return result


#: The labels of the profiled steps (labkit.scaling.ddp_trace reads them back).
DDP_STEP_LABEL = "labkit:ddp_step"
NO_SYNC_STEP_LABEL = "labkit:no_sync_step"


def _trace(
    ctx: Any,
    args: argparse.Namespace,
    ddp_step: Any,
    local_step: Any,
    snapshot: Any,
    restore: Any,
) -> None:
    """Profile ``args.trace_steps`` DDP steps and as many no_sync steps, interleaved; rank 0 exports.

    Every rank profiles (so that all ranks pay the same profiler overhead and
    the collectives line up); each labelled range ends after a device
    synchronize, so on a GPU it covers the kernels too.
    """
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function

    from labkit.scaling.worker import synchronize

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.is_cuda else [])
    dist.barrier()
    with profile(activities=activities) as prof:
        for _ in range(args.trace_steps):
            dist.barrier()
            with record_function(DDP_STEP_LABEL):
                ddp_step()
                synchronize(ctx)
            snapshot()
            dist.barrier()
            with record_function(NO_SYNC_STEP_LABEL):
                local_step()
                synchronize(ctx)
            restore()
    if ctx.rank == 0:
        prof.export_chrome_trace(args.trace_out)


def _main(argv: list[str] | None) -> int:
    from labkit.scaling.worker import run_worker

    return run_worker(parse_args(argv), train)


def main(argv: list[str] | None = None) -> int:
    """Entry point; torch's ``record`` puts a failing rank's traceback in torchrun's summary."""
    from torch.distributed.elastic.multiprocessing.errors import record

    return int(record(_main)(argv) or 0)


if __name__ == "__main__":
    sys.exit(main())
