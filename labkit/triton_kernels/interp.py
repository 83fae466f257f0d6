"""What Triton's interpreter costs: each kernel against torch on the CPU, and time per program.

Why measure it: the interpreter exists to check a kernel's logic (indices,
masks, reductions) without a GPU, not to run it fast. It runs the programs of
the grid one after another, each as NumPy operations on whole blocks, so its
time grows with the number of programs, not with the elements: a copy of the
same array in blocks of 64 launches 64 times the programs of blocks of 4,096.
That is also the picture to keep for a GPU: a program is a block of work.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from labkit.core.units import align_columns, format_duration
from labkit.triton_kernels.launch import Kernels


@dataclass(frozen=True)
class InterpreterTime:
    """One kernel through the interpreter, and torch's own op on the same input, both on the CPU."""

    kernel: str
    size: str
    programs: int
    interpreter_ms: float  # median over rounds
    torch_ms: float
    ratio_low: float  # interpreter / torch, the lowest and highest round
    ratio_high: float

    @property
    def ratio(self) -> float:
        return self.interpreter_ms / self.torch_ms


def _variants(kit: Kernels, gen: Any) -> list[tuple[str, str, int, Any, Any]]:
    import torch

    n = 1 << 16
    x = torch.randn(n, generator=gen)
    s = torch.randn(64, 1000, generator=gen)
    a, b = torch.randn(128, 128, generator=gen), torch.randn(128, 128, generator=gen)
    return [
        ("copy", f"{n:,} floats, blocks of 1,024", n // 1024,
         lambda: kit.copy(x, block=1024), lambda: x.clone()),
        ("strided_copy", f"{n:,} floats, stride 8", 8 * (n // 8 // 1024),
         lambda: kit.strided_copy(x, 8, block=1024), lambda: x.view(-1, 8).t().contiguous()),
        ("softmax", "64 rows of 1,000", 64,
         lambda: kit.softmax(s), lambda: torch.softmax(s, dim=1)),
        ("matmul", "128 x 128 @ 128 x 128, tiles 32 x 32 x 32", 16,
         lambda: kit.matmul(a, b), lambda: a @ b),
    ]  # fmt: skip


def interpreter_times(
    kit: Kernels, *, rounds: int = 3, rep_ms: float = 150.0, seed: int = 0
) -> list[InterpreterTime]:
    """Each kernel through the interpreter against torch, interleaved round by round."""
    import torch

    from labkit.timing.interleave import interleave

    if not kit.setup.interpreted:
        raise ValueError("interpreter_times measures the interpreter; these kernels are compiled")
    out = []
    for kernel, size, programs, ours, theirs in _variants(kit, torch.Generator().manual_seed(seed)):
        result = interleave(
            {"interpreter": ours, "torch": theirs},
            rounds=rounds,
            rep_ms=rep_ms,
            warmup_ms=min(50.0, rep_ms),
            baseline="interpreter",
            min_reps=3,
        )
        mine, torch_runs = result["interpreter"], result["torch"]
        # ratio is (baseline's run median / torch's), round by round
        out.append(
            InterpreterTime(
                kernel, size, programs, mine.median_ms, torch_runs.median_ms,
                torch_runs.ratio_low, torch_runs.ratio_high,
            )
        )  # fmt: skip
    return out


def times(ratio: float) -> str:
    """A ratio as "4748×" (no thousands comma) from 100 up, "47.2×" below."""
    return f"{ratio:.0f}×" if ratio >= 100 else f"{ratio:.1f}×"


def interpreter_table(results: Sequence[InterpreterTime]) -> str:
    rows = [["kernel", "size", "programs", "interpreter", "torch", "interpreter / torch"]]
    for t in results:
        rows.append(
            [
                t.kernel,
                t.size,
                f"{t.programs:,}",
                format_duration(t.interpreter_ms),
                format_duration(t.torch_ms),
                f"{times(t.ratio)} ({times(t.ratio_low)} to {times(t.ratio_high)})",
            ]
        )
    return "\n".join(align_columns(rows))


@dataclass(frozen=True)
class ProgramSweep:
    """The interpreter's copy of ``n`` floats by block size: time against the number of programs."""

    n: int
    blocks: tuple[int, ...]
    programs: tuple[int, ...]
    median_ms: tuple[float, ...]
    low_ms: tuple[float, ...]  # the fastest and slowest round's median
    high_ms: tuple[float, ...]

    def per_program_us(self) -> float:
        """The slope between the most and the fewest programs, in µs per program."""
        i, j = self.programs.index(max(self.programs)), self.programs.index(min(self.programs))
        return (self.median_ms[i] - self.median_ms[j]) / (self.programs[i] - self.programs[j]) * 1e3

    def __str__(self) -> str:
        rows = [["block", "programs", "median", "rounds' range", "per program"]]
        for b, p, m, lo, hi in zip(
            self.blocks, self.programs, self.median_ms, self.low_ms, self.high_ms, strict=True
        ):
            rows.append(
                [
                    f"{b:,}",
                    f"{p:,}",
                    format_duration(m),
                    f"{format_duration(lo)} to {format_duration(hi)}",
                    format_duration(m / p),
                ]
            )
        return "\n".join(align_columns(rows))


def program_sweep(
    kit: Kernels,
    *,
    n: int = 1 << 16,
    blocks: Sequence[int] = (64, 256, 1024, 4096),
    rounds: int = 3,
    rep_ms: float = 150.0,
) -> ProgramSweep:
    """Copy ``n`` floats through the interpreter in each block size, interleaved by round."""
    import torch

    from labkit.timing.interleave import interleave

    if not kit.setup.interpreted:
        raise ValueError("program_sweep measures the interpreter; these kernels are compiled")
    x = torch.randn(n)
    result = interleave(
        {f"{b}": partial(kit.copy, x, block=b) for b in blocks},
        rounds=rounds,
        rep_ms=rep_ms,
        warmup_ms=min(50.0, rep_ms),
        min_reps=3,
    )
    runs = [result[f"{b}"] for b in blocks]
    return ProgramSweep(
        n=n,
        blocks=tuple(blocks),
        programs=tuple(-(-n // b) for b in blocks),
        median_ms=tuple(r.median_ms for r in runs),
        low_ms=tuple(min(t.median_ms for t in r.runs) for r in runs),
        high_ms=tuple(max(t.median_ms for t in r.runs) for r in runs),
    )
