"""Page faults as a cause of slow CPU timings: the same work with freed memory returned and kept.

:mod:`labkit.machine.allocator` explains why a call that frees and allocates
large buffers can take thousands of minor page faults per call on Linux.
:func:`compare_allocation` measures what they cost: the work timed with
:func:`labkit.interleave` in alternating rounds, glibc set to return freed
memory to the OS (its default) before one side's runs and to keep it before
the other's, with the page faults per call of each side.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from labkit.core.results import JsonRecord
from labkit.machine.allocator import set_keep_freed
from labkit.timing.interleave import interleave

#: The labels of :func:`compare_allocation`'s two variants.
AS_ALLOCATED = "freed memory returned to the OS"
KEPT = "freed memory kept"


@dataclass(frozen=True)
class AllocationComparison(JsonRecord):
    """One piece of work timed round-robin with freed memory returned and kept.

    ``rounds`` is :func:`labkit.interleave`'s result; ``faults_per_call``
    maps each label to the median over rounds of its runs' page faults per
    call (None where the OS does not count them).
    """

    allocator: str
    rounds: Any  # labkit.timing.interleave.Interleaved
    faults_per_call: dict[str, float | None]

    def verdict(self) -> str:
        """The faults each way and the speed ratio's range over rounds, with what they show."""
        if not self.faults_per_call or None in self.faults_per_call.values():
            return "page faults are not counted on this OS"
        before, after = self.faults_per_call[AS_ALLOCATED], self.faults_per_call[KEPT]
        kept = self.rounds[KEPT]
        span = f"{kept.ratio_low:.2f}× to {kept.ratio_high:.2f}× per round"
        text = f"page faults per call: {before:,.0f} returned, {after:,.0f} kept; kept: {span}"
        if (before or 0) < 1:
            return text + ": this work took no page faults, so the allocator costs it nothing"
        if kept.ratio_low > 1:
            return text + ": faster in every round, so the faults cost time here"
        if kept.ratio_high < 1:
            return text + ": slower in every round, so the faults are not what costs time here"
        return text + ": faster in some rounds only, so their cost is within the noise here"

    def __str__(self) -> str:
        return f"{self.allocator}\n{self.rounds}\n{self.verdict()}"


def compare_allocation(
    fn: Any, *, rounds: int = 5, rep_ms: float = 100.0, warmup_ms: float = 25.0
) -> AllocationComparison:
    """Time ``fn()`` with freed memory returned to the OS and kept, in alternating rounds.

    Before each run glibc is set one way or the other
    (:func:`labkit.machine.allocator.set_keep_freed`), so both see the same machine state; the
    median page faults per call of each side's runs come with the ratios.
    Where the C library is not glibc, both runs are the same and the
    comparison says so. glibc is left with its default setting.
    """
    name = set_keep_freed(False).allocator

    def setter(keep: bool) -> Callable[[], None]:
        def apply() -> None:
            set_keep_freed(keep)

        return apply

    try:
        result = interleave(
            {AS_ALLOCATED: fn, KEPT: fn},
            rounds=rounds,
            rep_ms=rep_ms,
            warmup_ms=warmup_ms,
            setup={AS_ALLOCATED: setter(False), KEPT: setter(True)},
        )
    finally:
        setter(False)()
    faults: dict[str, float | None] = {}
    for variant in result.variants:
        counts = [t.minor_faults_per_call for t in variant.runs]
        values = sorted(c for c in counts if c is not None)
        faults[variant.label] = values[len(values) // 2] if len(values) == len(counts) else None
    return AllocationComparison(allocator=name, rounds=result, faults_per_call=faults)
