"""Each Triton kernel against torch, on random inputs and on sizes that are not multiples of a block.

Why these checks and not ``torch.allclose`` alone: a kernel that forgets its
mask, or an interpreter that silently returns nothing, can pass a loose
comparison on zeros. So the outputs start as NaN (:mod:`launch`), the inputs
are random with a known spread, and a check also asks that the output has
as many non-zero elements as torch's and no NaN. The error is relative to
the largest element of torch's answer, so one tolerance fits every size.
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

    @property
    def ok(self) -> bool:
        return self.nan == 0 and self.nonzero == self.ref_nonzero and self.rel_err <= self.rtol


def compare(kernel: str, shape: str, block: str, out: Any, ref: Any) -> KernelCheck:
    """A :class:`KernelCheck` of ``out`` against torch's ``ref``."""
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
    )


def _cases(kit: Kernels, gen: Any) -> list[tuple[str, str, str, Callable[[], tuple[Any, Any]]]]:
    import torch

    dev = kit.device

    def randn(*shape: int) -> Any:
        return torch.randn(*shape, generator=gen).to(dev)

    def copy_case(x: Any) -> tuple[Any, Any]:
        return kit.copy(x, block=256), x

    def strided_case(x: Any, s: int) -> tuple[Any, Any]:
        return kit.strided_copy(x, s, block=128), x.view(-1, s).t().reshape(-1)

    def softmax_case(x: Any) -> tuple[Any, Any]:
        return kit.softmax(x), torch.softmax(x, dim=1)

    def matmul_case(a: Any, b: Any) -> tuple[Any, Any]:
        return kit.matmul(a, b, block_m=32, block_n=32, block_k=16), a @ b

    cases: list[tuple[str, str, str, Callable[[], tuple[Any, Any]]]] = []
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
            out, ref = run()
            checks.append(compare(kernel, shape, block, out, ref))
    return checks


def checks_table(checks: Sequence[KernelCheck]) -> str:
    """The checks as aligned text: size, error relative to torch's largest element, verdict."""
    rows = [["kernel", "size", "max |err| / max |torch|", "tolerance", "non-zero", "NaN", ""]]
    for c in checks:
        rows.append(
            [
                c.kernel,
                c.shape,
                f"{c.rel_err:.1e}" if c.rel_err else "0 (exact)",
                f"{c.rtol:.0e}" if c.rtol else "exact",
                f"{c.nonzero:,} of {c.ref_nonzero:,}",
                str(c.nan),
                "ok" if c.ok else "FAILED",
            ]
        )
    return "\n".join(align_columns(rows))
