"""The "Python loop" backend of notebook 01's sweeps: an add and a matmul in plain Python.

Why a module of its own: it is the baseline every vectorised library is measured
against, and it must do the same work as they do (a new output list per call,
float64 arithmetic), with nothing of NumPy or torch inside. A test can replace
these functions to check that the sweep refuses a wrong result.
"""

from __future__ import annotations


def add(a: list[float], b: list[float]) -> list[float]:
    """Elementwise a + b, one Python float operation per element."""
    return [x + y for x, y in zip(a, b, strict=True)]


def matmul(a: list[list[float]], b: list[list[float]]) -> list[list[float]]:
    """The n³ triple loop: every row of ``a`` against every column of ``b``."""
    columns = list(zip(*b, strict=True))
    return [[sum(x * y for x, y in zip(row, col, strict=True)) for col in columns] for row in a]
