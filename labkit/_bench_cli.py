"""What every `labkit bench ...` command checks before it measures anything."""

from __future__ import annotations

import sys

from labkit._optional import MissingPackageError, import_optional


def preflight(command: str, *, record: bool, quick: bool = False, gpu_here: bool | None = None) -> int | None:
    """An exit code to return at once, or None when the benchmark should run.

    - ``--record --quick`` is refused (ValueError, exit 2): a recording made
      at toy sizes would mislead the learners who read it.
    - Missing torch: one line naming the install command, exit 1, since
      nothing can be measured.
    - ``--record`` without a GPU: one line, nothing measured or written, exit 0.
    """
    from labkit.gpu import has_gpu

    if record and quick:
        raise ValueError(
            f"--record cannot be combined with --quick: a recording must use the full sizes "
            f"(run `{command} --record`)"
        )
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
