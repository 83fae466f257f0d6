"""Kernel fusion, measured: the same arithmetic with fewer bytes moved.

The tanh approximation of GELU,
``0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³))``, is nine elementwise
operations when written out in torch. Run one by one, each reads its inputs
from memory and writes its output back: on arrays far larger than the
caches, the chain moves about 21 arrays' worth of bytes for one result.
``torch.nn.functional.gelu(x, approximate="tanh")`` is one fused kernel: it
reads ``x`` once and writes ``y`` once, 2 arrays. Both do the same FLOPs, so
fusion raises the arithmetic intensity 7.7- to 10.5-fold, and for a memory-bound
op that is the speedup to expect.

The byte counts are STREAM's, each array read or written counted once. A
write to a line not read first also costs a read (write-allocate): seven of
the chain's nine ops write in place into a buffer they have just read, so the
chain moves about 23 arrays and the fused kernel 3, a ratio of about 7.7 rather
than 10.5; every GB/s printed is a lower bound on what the memory moved.

Both variants write into preallocated buffers (``out=``), so neither pays
for allocation or page faults inside the timed call, and they are timed
interleaved (:func:`labkit.timing.interleave.interleave`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from labkit.bandwidth.sizes import dram_bytes_per_array
from labkit.core.optional import import_optional
from labkit.core.results import JsonRecord
from labkit.core.units import format_bytes, format_duration, format_gb_per_s, format_speedup
from labkit.machine.memory import require_fits
from labkit.timing.interleave import Interleaved, interleave

#: Arrays each variant reads or writes per element, counted one op at a time
#: (an op that reads ``x`` twice, ``x * x``, reads it once).
UNFUSED_ARRAYS = 21
FUSED_ARRAYS = 2

#: Elementwise operations in the written-out formula.
UNFUSED_OPS = 9


def unfused_gelu(x: Any, tmp: Any, out: Any) -> Any:
    """The tanh-GELU as nine separate torch ops, each a full pass over memory."""
    torch = import_optional("torch", "the fusion example")
    torch.mul(x, x, out=tmp)  # x²: read x, write tmp (2 arrays)
    torch.mul(tmp, x, out=tmp)  # x³ (3)
    torch.mul(tmp, 0.044715, out=tmp)  # (2)
    torch.add(x, tmp, out=tmp)  # x + 0.044715 x³ (3)
    torch.mul(tmp, math.sqrt(2 / math.pi), out=tmp)  # (2)
    torch.tanh(tmp, out=tmp)  # (2)
    torch.add(tmp, 1.0, out=tmp)  # (2)
    torch.mul(tmp, x, out=tmp)  # (3)
    return torch.mul(tmp, 0.5, out=out)  # (2): 21 arrays in all


def fused_gelu(x: Any, out: Any) -> Any:
    """The same function as one kernel: read x, write out."""
    torch = import_optional("torch", "the fusion example")
    return torch.ops.aten.gelu.out(x, approximate="tanh", out=out)


@dataclass(frozen=True)
class FusionResult(JsonRecord):
    """The unfused and the fused GELU on ``n_elements`` float32 values, timed interleaved.

    ``*_bytes`` count the traffic the ops imply (arrays × 4 bytes × n);
    ``*_gb_per_s`` is that traffic over the median time. ``speedup`` is the
    median per-round ratio unfused / fused, with ``speedup_low`` and
    ``speedup_high`` its range over the rounds.
    """

    n_elements: int
    unfused_ms: float
    fused_ms: float
    unfused_bytes: int
    fused_bytes: int
    unfused_gb_per_s: float
    fused_gb_per_s: float
    speedup: float
    speedup_low: float
    speedup_high: float
    runs: Interleaved

    @property
    def bytes_ratio(self) -> float:
        return self.unfused_bytes / self.fused_bytes

    @property
    def verdict(self) -> str:
        """A conclusion that holds whatever the load: only when the worst round is 2× apart."""
        if self.speedup_low >= 2:
            return "fusion was at least 2× faster in every round"
        return (
            "fusion was not at least 2× faster in every round: load, or the fused kernel's own "
            "arithmetic (its GB/s far below the memory roof) can hold it back"
        )

    def __str__(self) -> str:
        size = format_bytes(self.n_elements * 4)
        lines = [
            f"tanh-GELU on {self.n_elements:,} float32 values ({size} per array)",
            f"  unfused, {UNFUSED_OPS} ops: {format_duration(self.unfused_ms)}, "
            f"{format_bytes(self.unfused_bytes)} moved, {format_gb_per_s(self.unfused_gb_per_s)}",
            f"  fused, 1 kernel: {format_duration(self.fused_ms)}, "
            f"{format_bytes(self.fused_bytes)} moved, {format_gb_per_s(self.fused_gb_per_s)}",
            f"  bytes: {self.bytes_ratio:.1f}× fewer when fused; time: "
            f"{format_speedup(self.speedup)} faster ({format_speedup(self.speedup_low)} to "
            f"{format_speedup(self.speedup_high)} over {self.runs.rounds} rounds)",
            f"  {self.verdict}",
        ]
        return "\n".join(lines)


def fusion_example(
    n_elements: int | None = None, *, rounds: int = 3, rep_ms: float = 300.0
) -> FusionResult:
    """Time the unfused and the fused tanh-GELU on the CPU, interleaved.

    ``n_elements`` defaults to a quarter of :func:`labkit.bandwidth.sizes.dram_bytes_per_array`
    in float32 values (128 MiB per array), far larger than a last-level cache;
    the four buffers (x, a temporary, two outputs) must fit the free memory.
    """
    torch = import_optional("torch", "the fusion example")
    if n_elements is None:
        n_elements = dram_bytes_per_array("cpu") // 4 // 4
    from labkit.core.validate import check_positive_int

    n_elements = check_positive_int("n_elements", n_elements)
    require_fits(4 * n_elements, arrays=4, what="fusion_example's four arrays", name="n_elements")
    x = torch.randn(n_elements, dtype=torch.float32)
    tmp = torch.empty_like(x)
    out_unfused = torch.empty_like(x)
    out_fused = torch.empty_like(x)
    unfused_gelu(x, tmp, out_unfused)
    fused_gelu(x, out_fused)
    torch.testing.assert_close(out_fused, out_unfused, rtol=1e-4, atol=1e-5)
    del out_unfused
    runs = interleave(
        {
            "unfused": functools.partial(unfused_gelu, x, tmp, out_fused),
            "fused": functools.partial(fused_gelu, x, out_fused),
        },
        rounds=rounds,
        rep_ms=rep_ms,
        warmup_ms=0.0,
        min_reps=3,
        device="cpu",
    )
    unfused, fused = runs["unfused"], runs["fused"]
    unfused_bytes = UNFUSED_ARRAYS * 4 * n_elements
    fused_bytes = FUSED_ARRAYS * 4 * n_elements
    return FusionResult(
        n_elements=n_elements,
        unfused_ms=unfused.median_ms,
        fused_ms=fused.median_ms,
        unfused_bytes=unfused_bytes,
        fused_bytes=fused_bytes,
        unfused_gb_per_s=unfused_bytes / (unfused.median_ms * 1e6),
        fused_gb_per_s=fused_bytes / (fused.median_ms * 1e6),
        speedup=fused.ratio,
        speedup_low=fused.ratio_low,
        speedup_high=fused.ratio_high,
        runs=runs,
    )
