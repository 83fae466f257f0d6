"""The seed's mental model, measured: copy in → compute → copy back.

"Using a GPU means copying the data in, computing, and copying it back" is
the picture most tutorials start from. :func:`pipeline_breakdown` times each
step and the whole, so a notebook can show *when* that picture is a trap:
for a one-pass operation (``x * 2``) the two copies over PCIe take far
longer than the compute on the GPU, while a matmul of the same data is
compute-bound and the transfers fade. The fix is to keep data resident on
the GPU and overlap what must move (:func:`labkit.bandwidth.overlap.copy_compute_overlap`).

On a CPU-only machine the same function runs and says honestly what it
measures: there is no transfer at all, only a memcpy standing in for one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from labkit.core.results import JsonRecord
from labkit.core.units import format_bytes, format_duration
from labkit.core.validate import check_choice, check_int, check_ms
from labkit.machine import memory as _memory
from labkit.machine.memory import DEFAULT_FRACTION
from labkit.machine.report import CPU_OR_CUDA, resolve_device
from labkit.timing.bench import Timing, bench

OPS = ("scale", "sin", "matmul")

CPU_NOTE = (
    "On the CPU there is nothing to transfer: x.to('cpu') returns x itself and costs nothing. "
    "The copy-in and copy-back rows time a memcpy into a separate, preallocated buffer: what "
    "moving the data would cost at main-memory speed, with no PCIe bus in the way."
)


@dataclass(frozen=True)
class PipelineBreakdown(JsonRecord):
    """The copy-in → compute → copy-back pipeline, each step timed, and the whole.

    ``total`` is the three steps timed together as one call (not the sum,
    which is ``sum_ms``). ``transfer_fraction`` is the share of the steps'
    time spent moving data.
    """

    device: str
    op: str
    n_bytes: int
    host_memory: str
    copy_in: Timing
    compute: Timing
    copy_back: Timing
    total: Timing
    note: str

    json_extra = ("copy_in_ms", "compute_ms", "copy_back_ms", "total_ms", "transfer_fraction")

    @property
    def copy_in_ms(self) -> float:
        return self.copy_in.median_ms

    @property
    def compute_ms(self) -> float:
        return self.compute.median_ms

    @property
    def copy_back_ms(self) -> float:
        return self.copy_back.median_ms

    @property
    def total_ms(self) -> float:
        return self.total.median_ms

    @property
    def sum_ms(self) -> float:
        return self.copy_in_ms + self.compute_ms + self.copy_back_ms

    @property
    def transfer_fraction(self) -> float:
        return (self.copy_in_ms + self.copy_back_ms) / self.sum_ms if self.sum_ms else 0.0

    def table(self) -> str:
        rows = [
            ("copy in", self.copy_in_ms),
            (f"compute ({self.op})", self.compute_ms),
            ("copy back", self.copy_back_ms),
            ("all three, timed together", self.total_ms),
        ]
        width = max(len(name) for name, _ in rows)
        lines = [f"{name.ljust(width)}  {format_duration(ms)}" for name, ms in rows]
        if self.compute_ms > 0:
            ratio = (self.copy_in_ms + self.copy_back_ms) / self.compute_ms
            lines.append(f"copy in + copy back take {ratio:.2f}× the compute time")
        return "\n".join(lines)

    def __str__(self) -> str:
        head = f"{self.op} on {format_bytes(self.n_bytes)} of float32, {self.device}"
        return f"{head}\n{self.table()}\n{self.note}"


def _prepare_op(op: str | Callable[[Any], Any], x: Any) -> tuple[str, Callable[[], Any], Any]:
    """(name, compute, first result) for ``op`` on ``x``.

    The built-in ops write into a preallocated output (``out=``), so the
    compute row times the arithmetic, not the allocator: on a CPU a fresh
    large tensor means fresh pages from the OS on every call.
    """
    import torch

    if callable(op):
        name = getattr(op, "__name__", None)
        return (name if isinstance(name, str) else "op"), (lambda: op(x)), op(x)
    if op == "scale":
        y = torch.empty_like(x)
        return op, (lambda: torch.mul(x, 2.0, out=y)), y
    if op == "sin":
        y = torch.empty_like(x)
        return op, (lambda: torch.sin(x, out=y)), y
    # matmul
    side = math.isqrt(x.numel())
    m = x[: side * side].view(side, side)
    y = torch.empty_like(m)
    return op, (lambda: torch.matmul(m, m, out=y)), y


def pipeline_breakdown(
    n_bytes: int,
    op: str | Callable[[Any], Any] = "scale",
    device: str | None = None,
    *,
    pinned: bool = False,
    fraction: float = DEFAULT_FRACTION,
    warmup_ms: float = 10.0,
    rep_ms: float = 50.0,
) -> PipelineBreakdown:
    """Time copy-in, compute and copy-back of ``n_bytes`` of float32, and all three together.

    ``op`` is "scale" (x * 2: one pass, memory-bound, so transfers dominate
    on a GPU), "sin", "matmul" (the data as a square matrix times itself:
    compute-bound) or any function of one tensor. ``device=None`` picks the
    GPU where there is one. ``pinned`` uses page-locked host buffers on a GPU.
    """
    n_bytes = check_int("n_bytes", n_bytes, minimum=4)
    if not callable(op):
        check_choice("op", op, OPS)  # or a function of one tensor
    warmup_ms = check_ms("warmup_ms", warmup_ms, allow_zero=True)
    rep_ms = check_ms("rep_ms", rep_ms)
    import torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = resolve_device(device, kinds=CPU_OR_CUDA)
    n = n_bytes // 4
    on_gpu = device != "cpu"
    # Host: input and output (and, on the CPU, the "device" input, output and a temporary);
    # GPU: input, output and a temporary.
    _memory.require_fits(
        n * 4,
        device="cpu",
        fraction=fraction,
        arrays=2 if on_gpu else 5,
        what="pipeline_breakdown",
        name="n_bytes",
    )
    if on_gpu:
        _memory.require_fits(
            n * 4,
            device=device,
            fraction=fraction,
            arrays=3,
            what="pipeline_breakdown",
            name="n_bytes",
        )
    pin = pinned and on_gpu
    x_host = torch.ones(n, dtype=torch.float32, pin_memory=pin)
    x_dev = torch.empty(n, dtype=torch.float32, device=device)
    x_dev.copy_(x_host)
    name, compute, y_dev = _prepare_op(op, x_dev)
    y_host = torch.empty(y_dev.shape, dtype=y_dev.dtype, pin_memory=pin)

    def copy_in() -> None:
        x_dev.copy_(x_host, non_blocking=pin)

    def copy_back() -> None:
        y_host.copy_(y_dev, non_blocking=pin)

    def whole() -> None:
        x_dev.copy_(x_host, non_blocking=pin)
        y_host.copy_(compute(), non_blocking=pin)

    kw: dict[str, Any] = {"warmup_ms": warmup_ms, "rep_ms": rep_ms, "device": device, "warn": False}
    timings = {
        key: bench(f, label=key, **kw)
        for key, f in (
            ("copy_in", copy_in),
            ("compute", compute),
            ("copy_back", copy_back),
            ("total", whole),
        )
    }
    if on_gpu:
        note = (
            f"copy-in and copy-back cross the bus between the GPU and "
            f"{'pinned' if pin else 'pageable'} host memory."
        )
    else:
        note = CPU_NOTE
    return PipelineBreakdown(
        device=device,
        op=name,
        n_bytes=n * 4,
        host_memory="pinned" if pin else "pageable",
        note=note,
        **timings,
    )
