"""A script for Nsight to profile: training steps of the course CNN, each phase an NVTX range.

Run it under Nsight Systems to see the phases (data, forward, backward,
optimizer, logging) as NVTX ranges above the kernels they launched::

    nsys profile -t cuda,nvtx,osrt --stats=true -o report \\
        python -m labkit.profiling.nsys_target --steps 20 --item-every-step

:func:`labkit.profiling.nsight_commands` prints that command and the
Nsight Compute one.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m labkit.profiling.nsys_target",
        description="Training steps of labkit.models.cnn.CNN with NVTX ranges, for Nsight.",
    )
    parser.add_argument("--steps", type=int, default=20, help="training steps (default 20)")
    parser.add_argument("--batch", type=int, default=64, help="images per step (default 64)")
    parser.add_argument("--image-size", type=int, default=32, help="image side in pixels")
    parser.add_argument(
        "--item-every-step",
        action="store_true",
        help="read loss.item() every step (a sync point) instead of once",
    )
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: the best)")
    args = parser.parse_args(argv)
    for name in ("steps", "batch", "image_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")

    from labkit.core.optional import import_optional
    from labkit.machine.report import resolve_torch_device
    from labkit.profiling.torch_profile import (
        Trainer,
        phase_labels,
        require_step_fits,
    )

    torch = import_optional("torch", "the Nsight target")
    dev = resolve_torch_device(args.device)
    require_step_fits(dev, args.batch, args.image_size, "nsys_target")
    trainer = Trainer(torch, dev, args.batch, args.image_size)
    label = phase_labels(torch, dev)
    trainer.step(args.item_every_step, label)  # warm-up: cuDNN and allocator set-up
    trainer.total.item()
    trainer.total.zero_()
    trainer.logged.clear()
    for i in range(args.steps):
        with label(f"step {i}"):
            trainer.step(args.item_every_step, label)
    total = sum(trainer.logged) if args.item_every_step else float(trainer.total.item())
    print(f"{args.steps} training steps on {dev}, mean loss {total / args.steps:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
