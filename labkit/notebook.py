"""The first cell of every notebook: ``labkit.notebook.setup()``.

It makes a run reproducible and its output comparable by nbval: seeds fixed,
figures one size, the noisy-timing warning shown once inline (as the
``[noisy: ...]`` flag in a Timing's text) instead of as a stderr block that
appears on one run and not the next, and labkit's memory-budget warnings
printed as one line on stdout (``note: ...``), where the sanitize file masks
their sizes, instead of as a stderr block. Under a profile
(:mod:`labkit.machine.profile`, as ``make test`` runs the notebooks) it also checks
that torch runs the profile's thread count.
"""

from __future__ import annotations

import random
import sys
import warnings

from labkit.core.validate import check_seed
from labkit.machine import profile as _profile
from labkit.machine.memory import MemoryBudgetWarning
from labkit.timing.bench import NoisyTimingWarning

SEED = 0


def setup(seed: int = SEED) -> None:
    """Fix seeds and plot defaults for a notebook; prints nothing."""
    seed = check_seed("seed", seed)
    random.seed(seed)
    warnings.simplefilter("ignore", NoisyTimingWarning)
    _print_memory_warnings()
    if "numpy" in sys.modules or _importable("numpy"):
        import numpy as np

        np.random.seed(seed)
    if "torch" in sys.modules:  # seed torch only if the notebook already uses it
        torch = sys.modules["torch"]
        torch.manual_seed(seed)
        profile = _profile.active()
        if profile is not None and torch.get_num_threads() != profile.threads:
            torch.set_num_threads(profile.threads)
    if _importable("matplotlib"):
        import matplotlib as mpl

        mpl.rcParams.update({"figure.figsize": (7, 3.5), "figure.dpi": 100, "axes.grid": True})


def _importable(name: str) -> bool:
    from labkit.core.optional import is_installed

    return is_installed(name)


def _print_memory_warnings() -> None:
    """Show :class:`~labkit.machine.memory.MemoryBudgetWarning` as a ``note:`` line on stdout.

    Whether a probe had to shrink depends on the memory free at that moment,
    so the warning appears on some machines only; on stdout its sizes are
    masked by the sanitize file like any other measured value, and the
    learner still reads it beside the result it qualifies.
    """
    show = warnings.showwarning
    if getattr(show, "_labkit", False):
        return

    def showwarning(message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
        if issubclass(category, MemoryBudgetWarning):
            print(f"note: {message}", file=sys.stdout)
        else:
            show(message, category, filename, lineno, file, line)

    showwarning._labkit = True  # type: ignore[attr-defined]
    warnings.showwarning = showwarning
    warnings.simplefilter("always", MemoryBudgetWarning)
