"""The first cell of every notebook: ``labkit.notebook.setup()``.

It makes a run reproducible and its output comparable by nbval: seeds fixed,
figures one size, and the noisy-timing warning shown once inline (as the
``[noisy: ...]`` flag in a Timing's text) instead of as a stderr block that
appears on one run and not the next.
"""

from __future__ import annotations

import random
import sys
import warnings

from labkit.timing import NoisyTimingWarning

SEED = 0


def setup(seed: int = SEED) -> None:
    """Fix seeds and plot defaults for a notebook; prints nothing."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    random.seed(seed)
    warnings.simplefilter("ignore", NoisyTimingWarning)
    if "numpy" in sys.modules or _importable("numpy"):
        import numpy as np

        np.random.seed(seed)
    if "torch" in sys.modules:  # seed torch only if the notebook already uses it
        sys.modules["torch"].manual_seed(seed)
    if _importable("matplotlib"):
        import matplotlib as mpl

        mpl.rcParams.update({"figure.figsize": (7, 3.5), "figure.dpi": 100, "axes.grid": True})


def _importable(name: str) -> bool:
    from labkit._optional import is_installed

    return is_installed(name)
