"""The seed's mental model, measured: copy in → compute → copy back.

"Using a GPU means copying the data in, computing, and copying it back" is
the picture most tutorials start from. :func:`pipeline_breakdown` times each
step and the whole, so a notebook can show *when* that picture is a trap:
for a one-pass operation (``x * 2``) the two copies over PCIe take far
longer than the compute on the GPU, while a matmul of the same data does far
more work per byte, so the copies take a smaller share (on an H100 at FP32
still about two thirds, by :func:`predict_gpu`'s datasheet arithmetic). The fix is to keep data resident on
the GPU and overlap what must move (:func:`labkit.bandwidth.overlap.copy_compute_overlap`).

On a CPU-only machine the same function runs and says honestly what it
measures: there is no transfer at all, only a host-to-host ``copy_``
(ordinary stores, on torch's threads) standing in for one, so the CPU
breakdown says nothing about a PCIe link. :meth:`PipelineBreakdown.copy_reading`
checks the stand-in against this machine's main-memory bandwidth.
:func:`predict_gpu` turns the breakdown into a *prediction* for a named GPU:
the copies at the datasheet's host-link bandwidth, the compute at the
datasheet's HBM bandwidth or FLOP/s, whichever bounds the op. The lesson,
which the prediction prints from the numbers: the copies get cheaper on a
GPU too, but far less than the compute, so the copies' share rises.

The four rows (copy in, compute, copy back, all three together) are timed
*interleaved*, several rounds in rotating order
(:func:`labkit.timing.interleave`): timed one after the other, a change in
the machine's load between them shows up as a difference between "all
three" and the sum of the parts (the review saw 70.8 against 54.3 ms).
``total_over_sum`` gives that ratio per round, with its range.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from labkit.core.results import JsonRecord
from labkit.core.units import format_bytes, format_duration, format_gb_per_s
from labkit.core.validate import check_choice, check_int, check_ms
from labkit.machine import memory as _memory
from labkit.machine.memory import DEFAULT_FRACTION
from labkit.machine.report import CPU_OR_CUDA, resolve_device
from labkit.timing.bench import Timing
from labkit.timing.interleave import interleave

OPS = ("scale", "sin", "matmul")

CPU_NOTE = (
    "On the CPU there is nothing to transfer: x.to('cpu') returns x itself and costs nothing. "
    "The copy-in and copy-back rows time torch's copy_ into a separate, preallocated buffer "
    "(a host-to-host copy with ordinary stores, on torch's threads), with no PCIe bus in the way."
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
    #: Rounds of interleaved timing, and (all three together) / (sum of the parts) per round.
    rounds: int = 1
    total_over_sum: tuple[float, ...] = ()

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

    @property
    def on_gpu(self) -> bool:
        return self.device != "cpu"

    @property
    def copy_gb_per_s(self) -> float:
        """The copy-in's rate.

        On the CPU, STREAM counting (read + write of ``n_bytes`` in main
        memory): compare with STREAM copy. On a GPU, ``n_bytes`` per second,
        host to device in one direction: compare with the host link's peak
        per direction (a host-to-device copy crosses the link once; counting
        it twice would print double the link rate).
        """
        if not self.copy_in_ms:
            return math.inf
        counted = self.n_bytes if self.on_gpu else 2 * self.n_bytes
        return counted / (self.copy_in_ms * 1e-3) / 1e9

    def disturbed(self, dram_gb_per_s: float) -> bool:
        """On the CPU: did the stand-in copy run at under half of ``dram_gb_per_s``?

        Always False on a GPU, whose copies cross the host link and are not
        comparable with the CPU's main-memory bandwidth.
        """
        return not self.on_gpu and self.copy_gb_per_s < 0.5 * dram_gb_per_s

    def copy_reading(self, dram_gb_per_s: float) -> str:
        """Is the stand-in copy memory-bound? A fixed sentence (printed by notebook 02).

        A host copy of a DRAM-sized buffer should run near the STREAM
        bandwidth measured in the same session (``dram_gb_per_s``); under
        half of it, its time includes a delay that is not memory traffic. On
        a GPU the copy-in crosses the host link, so no such comparison is made.
        """
        if self.on_gpu:
            return (
                "On a GPU the copy-in crosses the host link, not main memory: its rate (one "
                "direction) compares with the link's peak per direction (PCIe Gen5 x16: 63 GB/s, "
                "section 1), not with the main-memory bandwidth of section 2."
            )
        if self.disturbed(dram_gb_per_s):
            return (
                "this run was disturbed: the copies ran at under half the main-memory bandwidth "
                "measured in section 2 (both STREAM counting), so their times include a delay "
                "that is not memory traffic."
            )
        return (
            "The copies ran at main-memory speed: at least half the bandwidth measured in "
            "section 2 (both STREAM counting)."
        )

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
        lines.append(
            f"copy in: {format_gb_per_s(self.copy_gb_per_s)}, "
            + (
                f"host to device, one direction ({format_bytes(self.n_bytes)})"
                if self.on_gpu
                else f"STREAM counting (read + write of {format_bytes(self.n_bytes)})"
            )
        )
        if self.total_over_sum:
            ratios = sorted(self.total_over_sum)
            lines.append(
                f"all three together / sum of the parts, per round: "
                f"{ratios[len(ratios) // 2]:.2f}× ({ratios[0]:.2f}× to {ratios[-1]:.2f}×, "
                f"{self.rounds} rounds, timed interleaved)"
            )
        return "\n".join(lines)

    def __str__(self) -> str:
        head = f"{self.op} on {format_bytes(self.n_bytes)} of float32, {self.device}"
        return f"{head}\n{self.table()}\n{self.note}"


def flush_reading(
    unflushed: PipelineBreakdown, flushed: PipelineBreakdown, dram_gb_per_s: float
) -> str:
    """Did the cache flush change the pipeline's (all three) / (sum of the parts)? Printed by 02.

    Compares the median per-round ratio without the flush with the one with
    it (more than 1.25× apart: the flush mattered). A breakdown that
    :meth:`PipelineBreakdown.disturbed` flags has copy times that include a
    delay besides memory traffic, so no verdict is read from it.
    """
    if unflushed.disturbed(dram_gb_per_s) or flushed.disturbed(dram_gb_per_s):
        return (
            "The flush's effect cannot be read from this run: a breakdown's copies ran at under "
            "half the main-memory bandwidth of section 2, so its times include a delay that is "
            "not memory traffic."
        )
    without, with_flush = (
        sorted(b.total_over_sum)[len(b.total_over_sum) // 2] if b.total_over_sum else math.nan
        for b in (unflushed, flushed)
    )
    if without > 1.25 * with_flush:
        return (
            "Without the flush the parts look faster than the whole: each step, timed alone, "
            "found its buffers still in cache."
        )
    return (
        "The flush changes little here: the buffers do not stay in cache between calls on "
        "this machine (or they always do)."
    )


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
    rounds: int = 5,
    flush_cache: bool = True,
) -> PipelineBreakdown:
    """Time copy-in, compute and copy-back of ``n_bytes`` of float32, and all three together.

    ``op`` is "scale" (x * 2: one pass, memory-bound, so transfers dominate
    on a GPU), "sin", "matmul" (the data as a square matrix times itself:
    compute-bound) or any function of one tensor. ``device=None`` picks the
    GPU where there is one. ``pinned`` uses page-locked host buffers on a GPU.
    The four rows are timed interleaved for ``rounds`` rounds (each row's
    Timing holds the samples of all its rounds). ``flush_cache`` evicts the
    caches before every call (on a CPU by reading a large buffer): without
    it, one step timed on its own finds its buffers still in cache from its
    previous call, which the steps of a real pipeline do not.
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
    from labkit.bandwidth.strided import flush_bytes

    _memory.require_fits(
        n * 4,
        device="cpu",
        fraction=fraction,
        arrays=2 if on_gpu else 5,
        # the CPU's cache flush reads a buffer of twice the last-level cache
        extra_bytes=flush_bytes("cpu") if flush_cache and not on_gpu else 0,
        what="pipeline_breakdown"
        + (" (its cache flush adds a buffer; flush_cache=False drops it)" if flush_cache else ""),
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

    rounds = check_int("rounds", rounds, minimum=2)
    from labkit.bandwidth.strided import ReadFlushHostSync

    # Flush before every call: timed alone, a 16 MiB step's buffers (32 MiB) can stay in a
    # last-level cache between calls, while the whole pipeline's four buffers cannot.
    runs = interleave(
        {"copy_in": copy_in, "compute": compute, "copy_back": copy_back, "total": whole},
        rounds=rounds,
        rep_ms=rep_ms / rounds * 2,
        warmup_ms=warmup_ms,
        device=ReadFlushHostSync() if device == "cpu" else device,
        flush_l2=flush_cache,
    )
    timings = {
        key: Timing(
            tuple(t for run in runs[key].runs for t in run.samples_ms), label=key, device=device
        )
        for key in ("copy_in", "compute", "copy_back", "total")
    }
    per_round = tuple(
        total.median_ms / (a.median_ms + b.median_ms + c.median_ms)
        for a, b, c, total in zip(
            runs["copy_in"].runs,
            runs["compute"].runs,
            runs["copy_back"].runs,
            runs["total"].runs,
            strict=True,
        )
    )
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
        rounds=rounds,
        total_over_sum=per_round,
        **timings,
    )


# --------------------------------------------------------------------------- the GPU prediction


@dataclass(frozen=True)
class GpuSpec(JsonRecord):
    """A GPU's datasheet peaks, with where each comes from: the inputs of :func:`predict_gpu`.

    Peaks, not measurements: real copies and kernels reach less (published
    measurements are quoted in ``measured_note``). FLOP/s are *dense*
    (datasheets often print the 2:4-sparse figure, twice as high).
    """

    name: str
    host_link: str
    host_link_gb_per_s: float
    memory_gb_per_s: float
    fp32_tflop_per_s: float
    tf32_dense_tflop_per_s: float
    source: str
    measured_note: str


#: PCIe Gen5 x16: 32 GT/s per lane, 16 lanes, 128b/130b encoding = 63 GB/s each way
#: (NVIDIA's "128 GB/s" counts both directions, and its "64 GB/s in each direction" rounds).
PCIE_GEN5_X16_GB_PER_S = 32e9 * 16 * 128 / 130 / 8 / 1e9
#: PCIe Gen4 x16: half of Gen5, 31.5 GB/s each way.
PCIE_GEN4_X16_GB_PER_S = PCIE_GEN5_X16_GB_PER_S / 2

#: Measured pinned copies on H100 systems, quoted beside the prediction.
H100_MEASURED_NOTE = (
    "measured pinned copies on H100 systems reach about 57 GB/s host to device (nvbandwidth, "
    "three of four GPUs of one VM: github.com/NVIDIA/nvbandwidth/issues/6) and, in one "
    "report its author found anomalous, 35 GB/s host to device against 53 GB/s back "
    "(SM copies: github.com/NVIDIA/nvbandwidth/issues/24); pageable memory adds a staging "
    "copy on top"
)


def spec_sheet_gpu(
    name: str = "H100 SXM5 80GB", measured_note: str = H100_MEASURED_NOTE
) -> GpuSpec:
    """The peaks :func:`predict_gpu` needs, from labkit's spec table, each with its source.

    The host link is the PCIe Gen5 x16 rate computed from the lanes and the
    encoding (:data:`PCIE_GEN5_X16_GB_PER_S`, 63 GB/s), which notebook 02 derives.
    """
    from labkit.machine.published import gpu_spec

    spec = gpu_spec(name)
    if "5" not in spec.host_link:
        raise ValueError(
            f"spec_sheet_gpu uses the PCIe Gen5 x16 rate notebook 02 derives; {spec.name}'s host "
            f"link is {spec.host_link!r}"
        )
    fields = ("memory_gb_per_s", "fp32_tflop_per_s", "tf32_tflop_per_s")
    values = {f: spec.need(f) for f in fields}
    sources = "; ".join(f"{f}: {spec.source(f).label()}" for f in fields)
    return GpuSpec(
        name=spec.name,
        host_link="PCIe Gen5 x16",
        host_link_gb_per_s=PCIE_GEN5_X16_GB_PER_S,
        memory_gb_per_s=values["memory_gb_per_s"],
        fp32_tflop_per_s=values["fp32_tflop_per_s"],
        tf32_dense_tflop_per_s=values["tf32_tflop_per_s"],
        source=f"labkit's spec table (labkit.machine.published): {sources}",
        measured_note=measured_note,
    )


H100_SXM = spec_sheet_gpu()


@dataclass(frozen=True)
class GpuPrediction(JsonRecord):
    """A measured CPU breakdown next to the same pipeline predicted for a GPU from its datasheet.

    GPU times are lower bounds: bytes / peak bandwidth for the copies and for
    a memory-bound op, FLOPs / peak FLOP/s for the matmul (FP32, which is
    what torch uses for float32 matmuls by default, and TF32 tensor cores,
    which ``torch.set_float32_matmul_precision("high")`` or
    ``torch.backends.cuda.matmul.allow_tf32 = True`` enables). The copies
    use the pinned link peak, while a plain ``.to("cuda")`` copies pageable
    memory through a staging buffer, so real pageable copies are slower still.
    """

    cpu: PipelineBreakdown
    gpu: GpuSpec
    copy_in_ms: float
    compute_ms: float
    copy_back_ms: float
    compute_basis: str
    compute_tf32_ms: float | None = None

    @property
    def copies_ms(self) -> float:
        return self.copy_in_ms + self.copy_back_ms

    @property
    def transfer_fraction(self) -> float:
        """Predicted share of the GPU pipeline's time spent copying."""
        return self.copies_ms / (self.copies_ms + self.compute_ms)

    def __str__(self) -> str:
        cpu = self.cpu
        rows = [
            ("copy in", cpu.copy_in_ms, self.copy_in_ms),
            (f"compute ({cpu.op})", cpu.compute_ms, self.compute_ms),
            ("copy back", cpu.copy_back_ms, self.copy_back_ms),
        ]
        width = max(len(r[0]) for r in rows)
        here = "this CPU" if not cpu.on_gpu else f"this GPU ({cpu.device})"
        col = max(10, len(here))
        lines = [
            f"{cpu.op} on {format_bytes(cpu.n_bytes)} of float32: {here} (measured) against "
            f"an {self.gpu.name} (predicted from its spec-sheet peaks)",
            f"{''.ljust(width)}  {here:>{col}}  {self.gpu.name:>10}",
        ]
        for name, c, g in rows:
            lines.append(
                f"{name.ljust(width)}  {format_duration(c):>{col}}  {format_duration(g):>10}"
            )
        lines.append(
            f"{'share spent copying'.ljust(width)}  {cpu.transfer_fraction:>{col}.0%}  "
            f"{self.transfer_fraction:>10.0%}"
        )
        lines.append(f"GPU compute: {self.compute_basis}")
        if self.compute_tf32_ms is not None:
            share = self.copies_ms / (self.copies_ms + self.compute_tf32_ms)
            lines.append(
                f"with TF32 tensor cores (dense): compute {format_duration(self.compute_tf32_ms)},"
                f" copying {share:.0%} of the time"
            )
        copies_cheaper = (cpu.copy_in_ms + cpu.copy_back_ms) / self.copies_ms
        compute_cheaper = cpu.compute_ms / self.compute_ms if self.compute_ms else math.inf
        whose = "this CPU's" if not cpu.on_gpu else "this GPU's"
        copies = (
            f"1/{copies_cheaper:.0f} of {whose} copy time"
            if copies_cheaper >= 1.5
            else f"{1 / copies_cheaper:.2f}× {whose} copy time"
        )
        lines.append(
            f"on the {self.gpu.name if cpu.on_gpu else 'GPU'} the copies take {copies}, the "
            f"compute 1/{compute_cheaper:.0f} of its compute time: "
            + (
                "the compute gets far cheaper than the copies, so the copies' share rises."
                if compute_cheaper >= 3 * copies_cheaper
                else "the compute gets not much cheaper than the copies here, so the share of "
                "copying does not rise much."
            )
        )
        lines.append(
            f"GPU copies: {format_bytes(cpu.n_bytes)} each way over {self.gpu.host_link} at its "
            f"theoretical {self.gpu.host_link_gb_per_s:.0f} GB/s per direction; "
            f"{self.gpu.measured_note}"
        )
        return "\n".join(lines)


def predict_gpu(breakdown: PipelineBreakdown, gpu: GpuSpec = H100_SXM) -> GpuPrediction:
    """Predict ``breakdown``'s pipeline on ``gpu`` from its datasheet peaks (lower bounds).

    scale and sin read and write ``n_bytes`` once each, so their compute is
    bytes / HBM bandwidth (a sine is still memory-bound on a GPU); the matmul
    does 2·side³ FLOPs, at the FP32 peak (and at the dense TF32 peak, shown
    beside it). The copies move ``n_bytes`` each way over the host link.
    """
    if breakdown.op not in OPS:
        raise ValueError(f"predict_gpu knows the work of {', '.join(OPS)}; got op={breakdown.op!r}")
    n = breakdown.n_bytes
    copy_ms = n / (gpu.host_link_gb_per_s * 1e9) * 1e3
    tf32_ms = None
    if breakdown.op == "matmul":
        side = math.isqrt(n // 4)
        flops = 2 * side**3
        compute_ms = flops / (gpu.fp32_tflop_per_s * 1e12) * 1e3
        tf32_ms = flops / (gpu.tf32_dense_tflop_per_s * 1e12) * 1e3
        basis = (
            f"2 × {side}³ = {flops / 1e9:.1f} GFLOP at the FP32 peak of "
            f"{gpu.fp32_tflop_per_s:g} TFLOP/s (compute-bound)"
        )
    else:
        compute_ms = 2 * n / (gpu.memory_gb_per_s * 1e9) * 1e3
        basis = (
            f"read and write {format_bytes(n)} at the HBM peak of "
            f"{gpu.memory_gb_per_s:,.0f} GB/s (memory-bound)"
        )
    return GpuPrediction(
        cpu=breakdown,
        gpu=gpu,
        copy_in_ms=copy_ms,
        compute_ms=compute_ms,
        copy_back_ms=copy_ms,
        compute_basis=basis,
        compute_tf32_ms=tf32_ms,
    )
