"""Test-wide settings.

Hypothesis: `make test` (and so CI) runs a fixed, derandomized set of examples,
so a run on a loaded 2-core machine is reproducible and a red CI means a change
broke something, not that a new random seed found an old bug. Explore with
fresh random examples locally:

    .venv/bin/python -m pytest --hypothesis-profile=explore tests/test_bad_input_core.py

and fix whatever that finds (a failure is a real bug, never a reason to narrow
a strategy).
"""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

from labkit.core.optional import preload_triton

# Some test files import TensorFlow themselves (pytest.importorskip), and a worker that has
# TensorFlow dies at its first import of Triton (torch.compile imports it): Triton goes first.
# Without a GPU, Triton's kernels run only in its interpreter, which must be chosen before
# Triton is imported (labkit/triton_kernels/setup.py).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
preload_triton()

settings.register_profile(
    "default",
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    database=None,
)
settings.register_profile("explore", deadline=None, max_examples=500)
settings.load_profile("default")


@pytest.fixture(autouse=True)
def _no_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unit tests run without a labkit profile, whatever the shell has set.

    A profile (labkit/machine/profile.py) fixes free memory, threads and GPU for the
    notebooks; tests that play a machine short of memory must see their own
    patched numbers. tests/test_profile.py turns it on where it is the subject.
    """
    monkeypatch.delenv("LABKIT_PROFILE", raising=False)
