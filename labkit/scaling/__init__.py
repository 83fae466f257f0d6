"""Notebook 10: scaling out beyond one device, measured on this machine, and how to go further.

- :mod:`labkit.scaling.launch`: run torchrun from a notebook cell (``run_ddp``,
  ``scaling_efficiency``, ``allreduce_cost``, ``allreduce_vs_model_size``,
  ``launch_command``) and plot the results;
- :mod:`labkit.scaling.train_ddp` and :mod:`labkit.scaling.allreduce`: the scripts
  torchrun starts (one process per device), on :mod:`labkit.scaling.worker`;
- :mod:`labkit.scaling.ddp_trace`: a profile of DDP steps, split into the reducer,
  contention and the all-reduce time backward did not hide (``ddp_breakdown``);
- :mod:`labkit.scaling.accumulation`: gradient accumulation, the single-device
  alternative to a bigger batch;
- :mod:`labkit.scaling.mirrored`: ``tf.distribute.MirroredStrategy`` on logical CPUs;
- ``labkit/scaling/slurm/train_ddp.sbatch`` and ``docs/multinode.md``: several nodes.

No module here imports a framework at import time, so ``import labkit.scaling``
(which every torchrun worker does) stays light.
"""

from __future__ import annotations

from labkit.scaling.accumulation import Accumulation, accumulate_equivalence
from labkit.scaling.ddp_trace import DdpBreakdown, ddp_breakdown
from labkit.scaling.launch import (
    AllreduceCost,
    DdpRun,
    DistRunError,
    DistTimeoutError,
    ModelSizeComm,
    Scaling,
    allreduce_cost,
    allreduce_vs_model_size,
    launch_command,
    run_ddp,
    scaling_efficiency,
)
from labkit.scaling.mirrored import MirroredRun, run_mirrored
from labkit.scaling.plots import (
    plot_accumulation,
    plot_allreduce,
    plot_ddp_step,
    plot_model_size,
    plot_scaling,
)

__all__ = [
    "Accumulation",
    "AllreduceCost",
    "DdpBreakdown",
    "DdpRun",
    "DistRunError",
    "DistTimeoutError",
    "MirroredRun",
    "ModelSizeComm",
    "Scaling",
    "accumulate_equivalence",
    "allreduce_cost",
    "allreduce_vs_model_size",
    "ddp_breakdown",
    "launch_command",
    "plot_accumulation",
    "plot_allreduce",
    "plot_ddp_step",
    "plot_model_size",
    "plot_scaling",
    "run_ddp",
    "run_mirrored",
    "scaling_efficiency",
]
