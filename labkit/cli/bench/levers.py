"""``labkit bench levers``: every lever of notebooks 04-05 on one training step, before and after.

Notebook 05's closing section applies the levers one at a time to the
course CNN's training step: no ``.item()`` per step, channels_last,
``torch.compile``, bfloat16 autocast. This command runs
:func:`labkit.models.levers.apply_levers`, the function the notebook's cells
call, with the same sizes (:data:`labkit.models.levers.SIZES`: 64 images of
224×224 on a GPU, 16 of 64×64 on a CPU), so a recording shows what the GPU
cell would (BM8).

``--record`` on a GPU machine stores the GPU run as the ``levers`` recording.
``--quick`` runs toy sizes with tiny time budgets and leaves ``torch.compile``
out: it checks that the command works (the tests use it), and its numbers
mean little.
"""

from __future__ import annotations

from labkit.models.levers import LeversResult

#: The recording ``--record`` writes.
REFERENCE_NAME = "levers"

__all__ = ["REFERENCE_NAME", "LeversResult", "measure", "run_levers_benchmark"]


def measure(quick: bool = False) -> LeversResult:
    """:func:`labkit.models.levers.apply_levers` on the best device (cuda where there is one)."""
    from labkit.machine.gpu import has_gpu
    from labkit.models import levers

    return levers.apply_levers("cuda" if has_gpu() else "cpu", quick=quick)


def run_levers_benchmark(as_json: bool = False, record: bool = False, quick: bool = False) -> int:
    """``labkit bench levers``; returns the exit code (same rules as the other recorders)."""
    from labkit.cli.bench.run import preflight, record_and_report

    early = preflight("labkit bench levers", record=record, quick=quick)
    if early is not None:
        return early
    results = measure(quick=quick)
    return record_and_report(
        "levers",
        REFERENCE_NAME,
        results,
        as_json=as_json,
        record=record and results.device != "cpu",
    )
