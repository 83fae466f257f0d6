"""Copies overlapped with compute on CUDA streams: how much of the copy time the compute hides."""

from __future__ import annotations

import math
from dataclasses import dataclass

from labkit.bandwidth.stream import check_budget_ms
from labkit.bandwidth.transfers import require_cuda
from labkit.core.results import JsonRecord
from labkit.core.units import format_bytes, format_duration
from labkit.core.validate import check_int
from labkit.machine import memory as _memory
from labkit.machine.memory import DEFAULT_FRACTION
from labkit.timing.bench import Timing, bench


@dataclass(frozen=True)
class OverlapResult(JsonRecord):
    """N chunks copied host→device and processed: serialized versus overlapped.

    ``copy`` and ``compute`` time each half alone, for all chunks; the best
    overlap can do is about ``max(copy, compute)`` plus one chunk's worth of
    the other, which is ``ideal_ms``.
    """

    device: str
    n_chunks: int
    chunk_bytes: int
    compute_repeats: int
    copy: Timing
    compute: Timing
    serialized: Timing
    overlapped: Timing

    json_extra = ("speedup", "ideal_ms")

    @property
    def speedup(self) -> float:
        """Serialized time over overlapped time."""
        return self.serialized.median_ms / self.overlapped.median_ms

    @property
    def ideal_ms(self) -> float:
        longer = max(self.copy.median_ms, self.compute.median_ms)
        shorter = min(self.copy.median_ms, self.compute.median_ms)
        return longer + shorter / self.n_chunks

    def __str__(self) -> str:
        return (
            f"{self.n_chunks} chunks of {format_bytes(self.chunk_bytes)} on {self.device}: "
            f"copies alone {format_duration(self.copy.median_ms)}, compute alone "
            f"{format_duration(self.compute.median_ms)}; one stream (serialized) "
            f"{format_duration(self.serialized.median_ms)}, copies on a side stream "
            f"(overlapped) {format_duration(self.overlapped.median_ms)}, best possible about "
            f"{format_duration(self.ideal_ms)}: overlap is {self.speedup:.2f}× faster"
        )


def balance_repeats(copy_ms: float, pass_ms: float, *, limit: int = 1000) -> int:
    """How many compute passes make the compute about as long as the copy (1 to ``limit``).

    Overlap pays most when the two are equal; with one far longer than the
    other there is little to hide. Both times are medians labkit measured.
    """
    # a pass too short to time, or a ratio that overflows, gives the limit
    ratio = copy_ms / pass_ms if pass_ms > 0 else math.inf
    return max(1, min(limit, round(ratio) if math.isfinite(ratio) else limit))


def copy_compute_overlap(
    n_chunks: int = 8,
    chunk_bytes: int = 64 * 1024**2,
    device: str = "cuda",
    *,
    compute_repeats: int | None = None,
    fraction: float = DEFAULT_FRACTION,
    rep_ms: float = 200.0,
) -> OverlapResult:
    """Copy ``n_chunks`` pinned host chunks to the GPU and process each, two ways.

    Serialized: every copy and every kernel on the current stream, so the
    copy engine and the SMs take turns. Overlapped: copies go on a side
    stream (``torch.cuda.Stream``) with ``non_blocking=True`` from pinned
    memory; the compute stream waits only for *its* chunk's copy (an event),
    so chunk i+1 crosses the bus while chunk i is processed. The compute is
    ``compute_repeats`` passes of ``torch.sin`` over the chunk (by default
    as many as make it last about as long as the chunk's copy).
    """
    n_chunks = check_int("n_chunks", n_chunks, minimum=2)
    chunk_bytes = check_int("chunk_bytes", chunk_bytes, minimum=4096)
    rep_ms = check_budget_ms("rep_ms", rep_ms)
    if compute_repeats is not None:
        compute_repeats = check_int("compute_repeats", compute_repeats, minimum=1)
    _memory.check_fraction(fraction)
    import torch

    device = require_cuda(device, "copy_compute_overlap")
    n = chunk_bytes // 4
    _memory.require_fits(
        n * 4,
        device="cpu",
        fraction=fraction,
        arrays=n_chunks,
        what="copy_compute_overlap (pinned host chunks)",
    )
    _memory.require_fits(
        n * 4,
        device=device,
        fraction=fraction,
        arrays=2 * n_chunks,
        what="copy_compute_overlap (device chunks)",
    )
    where = torch.device(device)
    hosts = [torch.ones(n, dtype=torch.float32, pin_memory=True) for _ in range(n_chunks)]
    inputs = [torch.empty(n, dtype=torch.float32, device=where) for _ in range(n_chunks)]
    outputs = [torch.empty_like(x) for x in inputs]
    side = torch.cuda.Stream(device=where)
    copied = [torch.cuda.Event() for _ in range(n_chunks)]

    def work(i: int, repeats: int) -> None:
        for _ in range(repeats):
            torch.sin(inputs[i], out=outputs[i])

    if compute_repeats is None:
        one_copy = bench(
            lambda: inputs[0].copy_(hosts[0], non_blocking=True),
            device=device,
            warmup_ms=10,
            rep_ms=30,
            warn=False,
        )
        one_pass = bench(lambda: work(0, 1), device=device, warmup_ms=10, rep_ms=30, warn=False)
        compute_repeats = balance_repeats(one_copy.median_ms, one_pass.median_ms)
    repeats = compute_repeats

    def copies_only() -> None:
        for i in range(n_chunks):
            inputs[i].copy_(hosts[i], non_blocking=True)

    def compute_only() -> None:
        for i in range(n_chunks):
            work(i, repeats)

    def serialized() -> None:
        for i in range(n_chunks):
            inputs[i].copy_(hosts[i], non_blocking=True)
            work(i, repeats)

    def overlapped() -> None:
        main = torch.cuda.current_stream(where)
        # Copies start after everything queued before (the timing's start event, and the
        # previous call's compute, which still reads these input buffers).
        side.wait_stream(main)
        for i in range(n_chunks):
            with torch.cuda.stream(side):
                inputs[i].copy_(hosts[i], non_blocking=True)
                copied[i].record(side)
            main.wait_event(copied[i])
            work(i, repeats)

    overlapped()
    torch.cuda.synchronize(where)
    expected = torch.sin(torch.ones(1, device=where))
    if not torch.allclose(outputs[-1][:1], expected):
        raise RuntimeError(
            "the overlapped pipeline computed a wrong value: a stream dependency "
            "is missing, so its timing would be meaningless"
        )
    timings = {
        name: bench(fn, device=device, warmup_ms=rep_ms / 4, rep_ms=rep_ms, label=name, warn=False)
        for name, fn in (
            ("copy", copies_only),
            ("compute", compute_only),
            ("serialized", serialized),
            ("overlapped", overlapped),
        )
    }
    return OverlapResult(
        device=device, n_chunks=n_chunks, chunk_bytes=n * 4, compute_repeats=repeats, **timings
    )
