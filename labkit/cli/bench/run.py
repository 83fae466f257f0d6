"""What every `labkit bench ...` command checks before it measures anything."""

from __future__ import annotations

import json
import sys
from typing import Any

from labkit.core.optional import MissingPackageError, import_optional

#: The line a ``--quick`` run's summary and text end with.
QUICK_NOTE = "(--quick: toy sizes and tiny time budgets; the numbers mean little)"


class UsageError(ValueError):
    """A command line that cannot work: the CLI prints it as one line and exits with code 2."""


def check_record_flags(command: str, *, record: bool, quick: bool) -> None:
    """``--record --quick`` is refused: a recording made at toy sizes would mislead learners."""
    if record and quick:
        raise UsageError(
            f"--record cannot be combined with --quick: a recording must use the full sizes "
            f"(run `{command} --record`)"
        )


def part_failed(command: str, what: str, exc: BaseException) -> str:
    """One part of a benchmark failed: its traceback to stderr, its one line for the result.

    A GPU run keeps the parts that worked (a recording costs minutes of a lent
    GPU), but a bug must still be seen: the traceback goes to stderr, and the
    JSON and the summary carry the line this returns.
    """
    import traceback

    from labkit.core.results import error_line

    print(f"{command}: {what} failed:", file=sys.stderr)
    traceback.print_exception(exc, file=sys.stderr)
    return error_line(exc)


def preflight(
    command: str, *, record: bool, quick: bool = False, gpu_here: bool | None = None
) -> int | None:
    """An exit code to return at once, or None when the benchmark should run.

    - ``--record --quick`` is refused (:class:`UsageError`, exit 2): a recording made
      at toy sizes would mislead the learners who read it.
    - Missing torch: one line naming the install command, exit 1, since
      nothing can be measured.
    - ``--record`` without a GPU: one line, nothing measured or written, exit 0.
    """
    from labkit.machine.gpu import has_gpu

    check_record_flags(command, record=record, quick=quick)
    try:
        import_optional("torch", command)
    except MissingPackageError as exc:
        print(f"labkit: {exc}", file=sys.stderr)
        return 1
    if record and not (has_gpu() if gpu_here is None else gpu_here):
        print(
            f"{command} --record needs a CUDA GPU and this machine has none, so nothing was "
            "recorded; run it on a GPU machine (`labkit doctor` shows what is here)."
        )
        return 0
    return None


def record_and_report(
    benchmark: str, reference_name: str, results: Any, *, as_json: bool, record: bool
) -> int:
    """Store ``results`` as the GPU recording when ``record``, then print them as text or JSON.

    ``results`` needs ``summary()`` (the lines CPU-only learners see),
    ``to_dict()`` and ``__str__``. The caller decides whether this run may be
    recorded (a GPU ran it); this only writes and reports.
    """
    from labkit import __version__
    from labkit.core.results import json_safe
    from labkit.machine import reference as _reference
    from labkit.machine.reference import gpu_identity

    recorded = None
    if record:
        data = {"summary": results.summary(), **json_safe(results.to_dict())}
        recorded = _reference.record(reference_name, data, **gpu_identity())
    if as_json:
        payload = {
            "benchmark": benchmark,
            "labkit_version": __version__,
            **results.to_dict(),
            "summary": results.summary(),
            "recorded": None if recorded is None else str(recorded),
        }
        print(json.dumps(json_safe(payload), indent=2, allow_nan=False))
        return 0
    print(results)
    if recorded is not None:
        print(f"\nRecorded the GPU results to {recorded}")
    return 0
