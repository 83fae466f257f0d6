"""``labkit bench batching``: samples/s by batch size, and the largest batch that fits.

Notebook 08's lessons on the best device: the MLP's samples/s against batch
size, for training steps and for inference (:func:`labkit.batching.sweep.batch_sweep`),
and the largest training batch of :class:`labkit.models.cnn.CNN` on 64×64
images. On a GPU the search doubles the batch until CUDA runs out of memory
(capped at labkit's memory budget), then bisects
(:func:`labkit.batching.largest.largest_batch_cuda`); on a CPU it fits the
memory line and checks its prediction within a 1 GiB budget
(:func:`labkit.batching.largest.largest_batch_cpu`).

``--record`` on a GPU machine stores the GPU run as the ``batching``
recording. ``--quick`` runs toy sizes with tiny time budgets: it checks that
the command works (the tests use it), and its numbers mean little.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from labkit.batching import memory_fit
from labkit.batching.largest import RECORDED_SHAPE
from labkit.cli.bench.run import QUICK_NOTE

#: The recording ``--record`` writes.
REFERENCE_NAME = "batching"

#: The largest-batch search: labkit.models.cnn.CNN on 3×64×64 images (quick: 3×16×16).
LARGEST_SHAPE = RECORDED_SHAPE
QUICK_LARGEST_SHAPE = (3, 16, 16)
#: On a CPU the prediction is checked by running it: 1 GiB keeps that to seconds.
CPU_LARGEST_BUDGET = 1 << 30
QUICK_CPU_BUDGET = 64 << 20
QUICK_BATCHES = (1, 2, 4)


@dataclass(frozen=True)
class BatchingResults:
    """The batch-size sweep and the largest-batch search, on ``device``."""

    device: str
    sweep: Any  # labkit.batching.sweep.BatchSweep
    largest: Any  # labkit.batching.largest.CudaBatchSearch or CpuBatchFit
    quick: bool = False

    def summary(self) -> list[str]:
        lines = self.sweep.summary() + self.largest.summary()
        if self.quick:
            lines.append(QUICK_NOTE)
        return lines

    def to_dict(self) -> dict[str, Any]:
        """The recording's schema, which the notebooks' GPU cells read: a view, not the fields."""
        return {
            "device": self.device,
            "quick": self.quick,
            "sweep": self.sweep.to_dict(),
            "largest_batch": self.largest.to_dict(),
        }

    def __str__(self) -> str:
        text = f"{self.sweep}\n\n{self.largest}"
        return f"{text}\n{QUICK_NOTE}" if self.quick else text


def measure(quick: bool = False) -> BatchingResults:
    """The sweep (train and inference) and the largest-batch search, on a GPU if there is one."""
    from labkit.batching import largest as largest_batch
    from labkit.batching import sweep as batching
    from labkit.machine.gpu import has_gpu
    from labkit.machine.memory import budget_bytes
    from labkit.models.cnn import CNN

    device = "cuda" if has_gpu() else "cpu"
    largest: largest_batch.CudaBatchSearch | largest_batch.CpuBatchFit
    if quick:
        sweep = batching.batch_sweep(
            "mlp", batch_sizes=QUICK_BATCHES, device=device, warmup_ms=0.0, rep_ms=2.0, min_reps=2
        )
    else:
        sweep = batching.batch_sweep("mlp", device=device)
    shape = QUICK_LARGEST_SHAPE if quick else LARGEST_SHAPE
    if device == "cuda":
        largest = largest_batch.largest_batch_cuda(
            CNN, shape, device=device, max_batch=8 if quick else 1 << 20
        )
    else:
        budget = min(QUICK_CPU_BUDGET if quick else CPU_LARGEST_BUDGET, budget_bytes(device="cpu"))
        largest = largest_batch.largest_batch_cpu(
            CNN, shape, budget, probe_batches=(1, 2) if quick else memory_fit.PROBE_BATCHES
        )
    return BatchingResults(device=device, sweep=sweep, largest=largest, quick=quick)


def run_batching_benchmark(
    *, as_json: bool = False, record: bool = False, quick: bool = False
) -> int:
    """``labkit bench batching``; returns the exit code (same rules as the other recorders)."""
    from labkit.cli.bench.run import preflight, record_and_report

    early = preflight("labkit bench batching", record=record, quick=quick)
    if early is not None:
        return early
    results = measure(quick=quick)
    return record_and_report(
        "batching",
        REFERENCE_NAME,
        results,
        as_json=as_json,
        record=record and results.device != "cpu",
    )
