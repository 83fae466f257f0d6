"""Bytes a row-wise softmax moves: as five separate ops, and fused into one kernel.

Triton's fused-softmax tutorial (python/tutorials/02-fused-softmax.py)
counts a naive softmax of an M × N matrix written as separate torch ops (max
over rows, subtract, exp, sum over rows, divide) as reading 5MN + 2M
elements and writing 3MN + 2M; a fused kernel that keeps each row on chip
reads MN and writes MN. (``torch.softmax`` itself is one fused kernel; the
naive version is what writing the formula op by op in eager mode gives.)
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.core.validate import check_positive_int


@dataclass(frozen=True)
class SoftmaxBytes:
    rows: int
    cols: int
    bytes_per_element: int
    naive_bytes: int  # (5MN + 2M) read + (3MN + 2M) written
    fused_bytes: int  # MN read + MN written

    @property
    def ratio(self) -> float:
        return self.naive_bytes / self.fused_bytes


def softmax_bytes(rows: int, cols: int, *, bytes_per_element: int = 4) -> SoftmaxBytes:
    """The tutorial's counts for a ``rows`` × ``cols`` softmax, in bytes."""
    m = check_positive_int("rows", rows)
    n = check_positive_int("cols", cols)
    b = check_positive_int("bytes_per_element", bytes_per_element)
    naive = ((5 * m * n + 2 * m) + (3 * m * n + 2 * m)) * b
    return SoftmaxBytes(m, n, b, naive, 2 * m * n * b)
