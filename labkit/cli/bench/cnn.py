"""``labkit bench cnn``: images/s of the course's CNN by batch size, layout and precision.

Notebook 05 shows that a GPU needs a batch to be busy, and what the layout
(channels_last) and autocast each add. This command runs
:func:`labkit.models.cnn_variants.measure`, the function the notebook's cells
call, with the same sizes: every variant of
:data:`labkit.models.cnn_variants.VARIANTS` this device runs (float32 and
bfloat16 autocast in NCHW and channels_last; float16 autocast on a GPU),
224×224 images on a GPU at batches 1, 8, 32 and 128, 64×64 on a CPU at 1, 4,
16 and 64; inference (forward only).

``--record`` on a GPU machine stores the GPU run as the ``cnn`` recording.
``--quick`` runs toy sizes with tiny time budgets: it checks that the command
works (the tests use it), and its numbers mean little.
"""

from __future__ import annotations

from labkit.models.cnn_variants import CnnResults, VariantCurve

#: The recording ``--record`` writes.
REFERENCE_NAME = "cnn"

__all__ = ["REFERENCE_NAME", "CnnResults", "VariantCurve", "measure", "run_cnn_benchmark"]


def measure(quick: bool = False) -> CnnResults:
    """:func:`labkit.models.cnn_variants.measure` on the best device (cuda where there is one)."""
    from labkit.machine.gpu import has_gpu
    from labkit.models import cnn_variants

    return cnn_variants.measure("cuda" if has_gpu() else "cpu", quick=quick)


def run_cnn_benchmark(as_json: bool = False, record: bool = False, quick: bool = False) -> int:
    """``labkit bench cnn``; returns the exit code (same rules as the other recorders)."""
    from labkit.cli.bench.run import preflight, record_and_report

    early = preflight("labkit bench cnn", record=record, quick=quick)
    if early is not None:
        return early
    results = measure(quick=quick)
    return record_and_report(
        "cnn",
        REFERENCE_NAME,
        results,
        as_json=as_json,
        record=record and results.device != "cpu",
    )
