"""The all-reduce timing torchrun runs: one collective of each message size, on every rank.

Run it with, for example::

    python -m torch.distributed.run --standalone --nproc-per-node=2 -m labkit.scaling.allreduce \
        --sizes 1024,1048576 --reps 20 --out allreduce.json

(:func:`labkit.scaling.launch.allreduce_cost` does this and reads the result.)

An all-reduce sums a buffer across all ranks and leaves the sum on every
rank; it is what DDP runs on the gradients of every step. For each size
every rank first checks the collective is right (rank r contributes r + 1,
so every element must end as n(n+1)/2), then zeroes its buffer (summing
zeros keeps the values from growing to infinity over the repetitions) and
times ``--reps`` calls after ``--warmup`` untimed ones. Each call starts after
a barrier, ends with a device synchronization, and counts the slowest rank's
time (:mod:`labkit.scaling.worker`). Rank 0 writes the samples as JSON;
:class:`labkit.scaling.launch.AllreduceCost` turns them into medians, algbw and
busbw as nccl-tests define them (doc/PERFORMANCE.md in NVIDIA/nccl-tests).

The method differs from nccl-tests' on purpose, and it shows at small sizes:
nccl-tests times many back-to-back iterations and divides, while each call
here is timed alone, between a barrier and a synchronization (in training,
DDP launches one all-reduce per bucket asynchronously, without a barrier, and
they can queue behind one another). The barrier itself is outside
the sample (:func:`labkit.scaling.worker.time_call` starts the clock after it),
but the ranks' skew in leaving it, the slowest rank's time and, on a GPU, the
final synchronization land in every sample, so small-message latencies come
out higher than nccl-tests reports.
"""

from __future__ import annotations

import argparse
import functools
import sys
from typing import Any


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated byte counts, got {text!r}"
        ) from None
    if not sizes or any(s < 4 or s % 4 for s in sizes):
        raise argparse.ArgumentTypeError(
            f"every size must be a positive multiple of 4 bytes (float32), got {text!r}"
        )
    return sizes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from labkit.scaling.worker import add_common_args

    parser = argparse.ArgumentParser(
        prog="python -m torch.distributed.run ... -m labkit.scaling.allreduce",
        description="Time all-reduces of float32 buffers of the given sizes.",
    )
    parser.add_argument(
        "--sizes",
        type=_sizes,
        default=[1024, 1024**2],
        help="comma-separated message sizes in bytes",
    )
    parser.add_argument("--reps", type=int, default=20, help="timed calls per size")
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls per size first")
    add_common_args(parser)
    args = parser.parse_args(argv)
    if args.reps < 1 or args.warmup < 0:
        parser.error(f"--reps must be >= 1 and --warmup >= 0, got {args.reps} and {args.warmup}")
    return args


def measure(ctx: Any, sizes: list[int], *, reps: int, warmup: int) -> dict[str, Any]:
    """Check, then time, an all-reduce of each size; every rank runs this."""
    import torch
    import torch.distributed as dist

    from labkit.scaling.worker import describe, slowest, timed_samples

    rows = []
    expected = ctx.world_size * (ctx.world_size + 1) / 2
    # One warm-up for the whole run, before the first size (21 untimed calls: 20 warm-up, and
    # one timed sample that is discarded): the first collectives of a run came out slower than
    # later ones, more than a few per-size warm-ups absorbed (the first, smallest size was
    # slower than the next in every run before). gloo connects its ranks and starts its
    # threads in init_process_group already (unless TORCH_GLOO_LAZY_INIT is set), so this is
    # not connection setup; why the first calls are slower is not measured here.
    first = torch.zeros(max(1, sizes[0] // 4), dtype=torch.float32, device=ctx.device)
    timed_samples(ctx, functools.partial(dist.all_reduce, first), reps=1, warmup=20)
    del first
    for size in sizes:
        buffer = torch.full(
            (size // 4,), float(ctx.rank + 1), dtype=torch.float32, device=ctx.device
        )
        dist.all_reduce(buffer)
        wrong = int((buffer != expected).sum())
        if wrong:
            raise RuntimeError(
                f"all-reduce of {size} bytes is wrong on rank {ctx.rank}: {wrong} elements differ "
                f"from {expected:g}"
            )
        buffer.zero_()
        samples = timed_samples(
            ctx, functools.partial(dist.all_reduce, buffer), reps=reps, warmup=warmup
        )
        rows.append({"size_bytes": size, "samples_ms": slowest(ctx, samples)})
        del buffer
    return {
        "kind": "allreduce",
        **describe(ctx),
        "reps": reps,
        "warmup": warmup,
        "dtype": "float32",
        "op": "sum",
        "rows": rows,
    }


def _main(argv: list[str] | None) -> int:
    from labkit.scaling.worker import run_worker

    return run_worker(
        parse_args(argv), lambda ctx, a: measure(ctx, a.sizes, reps=a.reps, warmup=a.warmup)
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point; torch's ``record`` puts a failing rank's traceback in torchrun's summary."""
    from torch.distributed.elastic.multiprocessing.errors import record

    return int(record(_main)(argv) or 0)


if __name__ == "__main__":
    sys.exit(main())
