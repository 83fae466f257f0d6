"""Each Triton kernel against torch, on random inputs and on sizes that are not multiples of a block.

Why these checks and not ``torch.allclose`` alone: a kernel that forgets its
mask, or an interpreter that silently returns nothing, can pass a loose
comparison on zeros. So the outputs start as NaN, the inputs are random with
a known spread, and a check also asks that the output has as many non-zero
elements as torch's and no NaN. The error is relative to the largest element
of torch's answer, so one tolerance fits every size.

A store without its mask writes past the end of the output, and neither the
interpreter (it copies to whatever address a lane computes) nor a GPU stops
it: the element after the output is simply someone else's memory. So each
output here sits inside a larger buffer, :data:`GUARD` NaNs before and after
it, and a check counts the guard elements that are no longer NaN.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from labkit.core.units import align_columns
from labkit.triton_kernels.launch import Kernels

#: Tolerances, relative to max |torch's answer|. The copies move bits: exact.
#: softmax and matmul in float32 round differently from torch (another order of
#: the sums, exp's last bit): a few units of float32's 1.2e-7 per term.
RTOL: dict[str, float] = {"copy": 0.0, "strided_copy": 0.0, "softmax": 1e-5, "matmul": 1e-5}

#: Sizes: one element, one short of a block, one over, and sizes no block divides.
COPY_SIZES: tuple[int, ...] = (1, 255, 257, 1000, 4099)
STRIDED_CASES: tuple[tuple[int, int], ...] = ((1000, 1), (1000, 2), (1000, 8), (999, 3), (4096, 32))
SOFTMAX_SHAPES: tuple[tuple[int, int], ...] = ((1, 1), (3, 100), (37, 129), (64, 1000))
#: NaN elements before and after each output: more than any block of these checks.
GUARD = 4096

MATMUL_SHAPES: tuple[tuple[int, int, int], ...] = (
    (1, 1, 1),
    (33, 17, 65),
    (100, 70, 90),
    (64, 64, 64),
)


@dataclass(frozen=True)
class KernelCheck:
    """One kernel on one size, against torch."""

    kernel: str
    shape: str
    block: str
    max_abs_err: float
    ref_max_abs: float  # max |torch's answer|: the scale of the error
    rel_err: float  # max_abs_err / ref_max_abs
    rtol: float
    nonzero: int  # elements != 0 in the kernel's output
    ref_nonzero: int  # ... and in torch's
    nan: int  # NaN elements in the kernel's output (unwritten ones stay NaN)
    outside_writes: int = 0  # guard elements before or after the output that were written

    @property
    def ok(self) -> bool:
        return (
            self.nan == 0
            and self.outside_writes == 0
            and self.nonzero == self.ref_nonzero
            and self.rel_err <= self.rtol
        )


def guarded_output(shape: tuple[int, ...], device: str) -> tuple[Any, Any]:
    """(a NaN buffer with :data:`GUARD` spare elements on each side, the output inside it)."""
    import torch

    n = 1
    for d in shape:
        n *= d
    buffer = torch.full((n + 2 * GUARD,), float("nan"), device=device)
    return buffer, buffer[GUARD : GUARD + n].view(shape)


def outside_writes(buffer: Any, out: Any) -> int:
    """How many guard elements of ``buffer`` (around ``out``) are no longer NaN."""
    import torch

    guards = torch.cat([buffer[:GUARD], buffer[GUARD + out.numel() :]])
    return int((~torch.isnan(guards)).sum())


def compare(
    kernel: str, shape: str, block: str, out: Any, ref: Any, *, outside: int = 0
) -> KernelCheck:
    """A :class:`KernelCheck` of ``out`` against torch's ``ref``; ``outside``: writes past it."""
    import torch

    out, ref = out.detach().float().cpu(), ref.detach().float().cpu()
    if out.shape != ref.shape:
        raise ValueError(f"{kernel}: output shape {tuple(out.shape)} != torch's {tuple(ref.shape)}")
    nan = int(torch.isnan(out).sum())
    diff = (out - ref).abs()
    max_abs = float(diff.nan_to_num(float("inf")).max()) if out.numel() else 0.0
    scale = float(ref.abs().max()) if ref.numel() else 0.0
    return KernelCheck(
        kernel=kernel,
        shape=shape,
        block=block,
        max_abs_err=max_abs,
        ref_max_abs=scale,
        rel_err=max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf")),
        rtol=RTOL.get(kernel, 1e-5),
        nonzero=int((out != 0).sum()) - nan,
        ref_nonzero=int((ref != 0).sum()),
        nan=nan,
        outside_writes=outside,
    )


#: A case's result: the kernel's output, torch's, and the guarded buffer around the output.
Case = tuple[Any, Any, Any]


def _cases(kit: Kernels, gen: Any) -> list[tuple[str, str, str, Callable[[], Case]]]:
    import torch

    dev = kit.device

    def randn(*shape: int) -> Any:
        return torch.randn(*shape, generator=gen).to(dev)

    def copy_case(x: Any) -> Case:
        buffer, out = guarded_output(tuple(x.shape), dev)
        return kit.copy(x, block=256, out=out), x, buffer

    def strided_case(x: Any, s: int) -> Case:
        buffer, out = guarded_output(tuple(x.shape), dev)
        ref = x.view(-1, s).t().reshape(-1)
        return kit.strided_copy(x, s, block=128, out=out), ref, buffer

    def softmax_case(x: Any) -> Case:
        buffer, out = guarded_output(tuple(x.shape), dev)
        return kit.softmax(x, out=out), torch.softmax(x, dim=1), buffer

    def matmul_case(a: Any, b: Any) -> Case:
        buffer, out = guarded_output((a.shape[0], b.shape[1]), dev)
        c = kit.matmul(a, b, block_m=32, block_n=32, block_k=16, out=out)
        return c, a.double() @ b.double(), buffer

    cases: list[tuple[str, str, str, Callable[[], Case]]] = []
    for n in COPY_SIZES:
        cases.append(("copy", f"{n:,}", "256", partial(copy_case, randn(n))))
    for n, s in STRIDED_CASES:
        cases.append(
            ("strided_copy", f"{n:,}, stride {s}", "128", partial(strided_case, randn(n), s))
        )
    for r, c in SOFTMAX_SHAPES:
        # logits spread over about ±12: a softmax far from uniform
        cases.append(
            ("softmax", f"{r} x {c:,}", "next pow2", partial(softmax_case, randn(r, c) * 4))
        )
    for m, k, n in MATMUL_SHAPES:
        cases.append(
            ("matmul", f"{m} x {k} @ {k} x {n}", "32 x 32 x 16",
             partial(matmul_case, randn(m, k), randn(k, n)))
        )  # fmt: skip
    return cases


def check_kernels(
    kit: Kernels, *, seed: int = 0, only: Sequence[str] | None = None
) -> list[KernelCheck]:
    """Every kernel on every size of this module's tables, against torch."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    checks = []
    for kernel, shape, block, run in _cases(kit, gen):
        if only is None or kernel in only:
            out, ref, buffer = run()
            outside = outside_writes(buffer, out)
            checks.append(compare(kernel, shape, block, out, ref, outside=outside))
    return checks


def checks_table(checks: Sequence[KernelCheck]) -> str:
    """The checks as aligned text: size, error relative to torch's largest element, verdict."""
    rows = [
        ["kernel", "size", "max |err| / max |torch|", "tolerance", "non-zero", "NaN", "outside", ""]
    ]
    for c in checks:
        rows.append(
            [
                c.kernel,
                c.shape,
                f"{c.rel_err:.1e}" if c.rel_err else "0 (exact)",
                f"{c.rtol:.0e}" if c.rtol else "exact",
                f"{c.nonzero:,} of {c.ref_nonzero:,}",
                str(c.nan),
                str(c.outside_writes),
                "ok" if c.ok else "FAILED",
            ]
        )
    return "\n".join(align_columns(rows))
