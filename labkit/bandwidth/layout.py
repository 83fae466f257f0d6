"""What a transposed (non-contiguous) matrix costs: ``.contiguous()`` and a matmul, measured.

Notebook 02, section 3: the strided reads show what a non-contiguous layout costs
a reading kernel; this is the price of the usual remedy (one full copy) beside a
consumer that needs no remedy (BLAS takes a transposed operand as a flag).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from labkit.core.results import JsonRecord
from labkit.core.units import format_bytes
from labkit.core.validate import check_int


@dataclass(frozen=True)
class LayoutCosts(JsonRecord):
    """What a transposed (non-contiguous) matrix costs, measured: ``.contiguous()`` and a matmul.

    "copy" is ``out.copy_(x)``, what ``x.clone()`` does without allocating
    the result (one read and one write pass); "transposed copy" is
    ``out.copy_(x.t())``, what ``x.t().contiguous()`` does without
    allocating: the same bytes in the other order. The allocation and the
    first touch of its pages are left out of both, on purpose: they are the
    same for both and would hide the memory pattern. ``matmul`` is ``a @ b`` and ``matmul_transposed`` is ``a @ b.t()``:
    BLAS takes a transposed operand as a flag, so no copy is made.
    """

    side: int
    timings: Any  # labkit.timing.interleave.Interleaved

    def ms(self, label: str) -> float:
        return float(self.timings[label].median_ms)

    def __str__(self) -> str:
        contiguous = self.ms(TRANSPOSED) / self.ms(COPY)
        matmul = self.ms("a @ b.t()") / self.ms("a @ b")
        copy_share = self.ms(TRANSPOSED) / self.ms("a @ b")
        lines = [
            f"{self.side}×{self.side} float32 ({format_bytes(self.side**2 * 4)}), timed interleaved:",
            str(self.timings),
        ]
        if contiguous < 0.5:
            # the same bytes in a worse order cannot take half the time of the plain copy
            lines.append(
                "this run was disturbed: the transposed copy took under half the time of the "
                "plain copy of the same bytes, so the copy's time includes a delay that is not "
                "memory traffic; the two are not comparable here."
            )
        else:
            lines.append(
                f"The transposed copy (what x.t().contiguous() does) reads and writes the whole "
                f"matrix ({format_bytes(2 * self.side**2 * 4)} moved): its median time is "
                f"{contiguous:.2f}× the plain copy's, {copy_share:.2f}× one matmul's of this size."
            )
        lines.append(
            f"a @ b.t() takes {matmul:.2f}× the time of a @ b: "
            + (
                "about the same, because BLAS reads the transposed operand in place"
                if 1 / MATMUL_SAME <= matmul <= MATMUL_SAME
                else ("slower here" if matmul > MATMUL_SAME else "faster here")
            )
            + "."
        )
        return "\n".join(lines)


#: Labels of the two copies :func:`layout_costs` times (what is timed, not the method it stands for).
COPY = "out.copy_(x)"
TRANSPOSED = "out.copy_(x.t())"
#: ``a @ b.t()`` is "about the same" as ``a @ b`` within this time ratio either way (the noise
#: between rounds): from 1/MATMUL_SAME to MATMUL_SAME.
MATMUL_SAME = 1.2


def layout_costs(side: int = 1024, *, rounds: int = 3, rep_ms: float = 100.0) -> LayoutCosts:
    """Time ``.contiguous()`` of a transposed matrix against a copy, and a matmul with ``b.t()``.

    Why: "make it contiguous" is advice with a price, a full pass over memory;
    whether it pays depends on what reads the tensor next. A matmul does not
    need it (BLAS handles transposes); a strided elementwise kernel may.
    """
    from labkit.timing.interleave import interleave

    side = check_int("side", side, minimum=2)
    import torch

    x = torch.rand(side, side)
    a, b = torch.rand(side, side), torch.rand(side, side)
    out_copy = torch.empty_like(x)
    out_mm = torch.empty(side, side)
    timings = interleave(
        {
            COPY: lambda: out_copy.copy_(x),
            TRANSPOSED: lambda: out_copy.copy_(x.t()),
            "a @ b": lambda: torch.matmul(a, b, out=out_mm),
            "a @ b.t()": lambda: torch.matmul(a, b.t(), out=out_mm),
        },
        rounds=rounds,
        rep_ms=rep_ms,
        device="cpu",
    )
    return LayoutCosts(side=side, timings=timings)
