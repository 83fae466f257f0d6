"""Scaling out beyond one device: data parallelism measured on this machine, and how to go further.

- :mod:`labkit.dist.launch`: run torchrun from a notebook cell (:func:`run_ddp`,
  :func:`scaling_efficiency`, :func:`allreduce_cost`, :func:`allreduce_vs_model_size`,
  :func:`launch_command`) and plot the results;
- :mod:`labkit.dist.train_ddp` and :mod:`labkit.dist.allreduce`: the scripts
  torchrun starts (one process per device);
- :mod:`labkit.dist.accumulation`: gradient accumulation, the single-device
  alternative to a bigger batch;
- :mod:`labkit.dist.mirrored`: ``tf.distribute.MirroredStrategy`` on logical CPUs;
- ``labkit/dist/slurm/train_ddp.sbatch`` and ``docs/multinode.md``: several nodes.

The names below are loaded on first use, so ``import labkit.dist`` (which
every torchrun worker does) stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "run_ddp": "launch",
    "scaling_efficiency": "launch",
    "allreduce_cost": "launch",
    "allreduce_vs_model_size": "launch",
    "launch_command": "launch",
    "plot_scaling": "launch",
    "plot_allreduce": "launch",
    "plot_model_size": "launch",
    "DdpRun": "launch",
    "Scaling": "launch",
    "AllreduceCost": "launch",
    "ModelSizeComm": "launch",
    "DistRunError": "launch",
    "DistTimeoutError": "launch",
    "accumulate_equivalence": "accumulation",
    "plot_accumulation": "accumulation",
    "Accumulation": "accumulation",
    "run_mirrored": "mirrored",
    "MirroredRun": "mirrored",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'labkit.dist' has no attribute {name!r}")
    return getattr(importlib.import_module(f"labkit.dist.{module}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
