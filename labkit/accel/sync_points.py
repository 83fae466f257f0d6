"""Sync points in a training loop: ``.item()`` every step vs one sync at the end.

A GPU runs work from a queue. The host only *enqueues* kernels, so a loop that
never asks for a value races ahead and keeps the queue full. ``.item()``,
``.cpu()``, ``print(tensor)`` and ``if tensor > 0`` need the value *now*: the
host blocks until the queue is empty, the GPU idles while the host prepares
the next launch, and every step pays a full round trip.

On the CPU there is no queue: each op has finished when its call returns, so
a sync point costs only the conversion itself and the ratios stay near 1×.
On CUDA the same loop with ``.item()`` per step is often several times slower.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

from labkit.accel.common import ratio, times
from labkit.core.optional import import_optional
from labkit.core.units import format_duration
from labkit.core.validate import check_ms, check_positive_int, check_torch_device
from labkit.machine.memory import require_memory_fits
from labkit.machine.report import resolve_torch_device
from labkit.timing.bench import Timing, bench

PURPOSE = "the sync-point demo"


@dataclass(frozen=True)
class SyncPointsResult:
    """Medians of the same loop with different sync habits; ratios are vs ``deferred``.

    ``item_ratio`` = item-per-step median / deferred median (> 1 means the
    per-step sync costs time), likewise ``cpu_ratio`` and ``print_ratio``.
    """

    device: str
    steps: int
    deferred: Timing
    item_per_step: Timing
    cpu_per_step: Timing
    print_per_step: Timing

    @property
    def deferred_median_ms(self) -> float:
        return self.deferred.median_ms

    @property
    def item_median_ms(self) -> float:
        return self.item_per_step.median_ms

    @property
    def item_ratio(self) -> float:
        return ratio(self.item_per_step.median_ms, self.deferred.median_ms)

    @property
    def cpu_ratio(self) -> float:
        return ratio(self.cpu_per_step.median_ms, self.deferred.median_ms)

    @property
    def print_ratio(self) -> float:
        return ratio(self.print_per_step.median_ms, self.deferred.median_ms)

    def timings(self) -> list[Timing]:
        """The four timings, for :func:`labkit.compare`."""
        return [self.deferred, self.item_per_step, self.cpu_per_step, self.print_per_step]

    def __str__(self) -> str:
        rows = [
            ("one sync at the end", self.deferred, None),
            (".item() every step", self.item_per_step, self.item_ratio),
            (".cpu() every step", self.cpu_per_step, self.cpu_ratio),
            ("print() every step", self.print_per_step, self.print_ratio),
        ]
        lines = [f"{self.steps} training-like steps on {self.device}:"]
        for name, timing, r in rows:
            extra = "" if r is None else f"  ({times(r)} the time of one sync at the end)"
            lines.append(f"  {name:<20} {format_duration(timing.median_ms)}{extra}")
        if self.device == "cpu":
            lines.append(
                "  On the CPU every op has finished when it returns (no queue), so syncing "
                "costs little. On a GPU, expect the per-step syncs to be much slower."
            )
        return "\n".join(lines)


def _loop(torch: Any, w: Any, x0: Any, steps: int, mode: str) -> Any:
    x = x0
    total = torch.zeros((), device=x0.device)
    sink = io.StringIO()
    values = []
    for _ in range(steps):
        x = torch.tanh(x @ w)
        loss = x.square().mean()
        if mode == "deferred":
            total = total + loss.detach()
        elif mode == "item":
            values.append(loss.item())
        elif mode == "cpu":
            values.append(loss.detach().cpu())
        else:  # print: formatting a tensor reads its value, which is a sync
            print(loss.detach(), file=sink)
    if mode == "deferred":
        return total.item()  # the one sync
    return values


def sync_points_benchmark(
    steps: int = 50,
    size: int = 256,
    *,
    device: Any = None,
    warmup_ms: float = 20.0,
    rep_ms: float = 200.0,
) -> SyncPointsResult:
    """Time ``steps`` small matmul steps with each sync habit, on ``device``.

    ``device=None`` picks the best torch device (:func:`labkit.pick_device`).
    """
    steps = check_positive_int("steps", steps)
    size = check_positive_int("size", size)
    warmup_ms = check_ms("warmup_ms", warmup_ms)
    rep_ms = check_ms("rep_ms", rep_ms)
    check_torch_device(device)
    torch = import_optional("torch", PURPOSE)
    dev = resolve_torch_device(device)
    require_memory_fits(4 * size * size, dev, arrays=4, what=f"sync_points_benchmark(size={size})")
    gen = torch.Generator().manual_seed(0)
    w = (torch.randn(size, size, generator=gen) / size**0.5).to(dev)
    x0 = torch.randn(size, size, generator=gen).to(dev)
    results = {}
    for mode, label in (
        ("deferred", "sync once"),
        ("item", ".item() per step"),
        ("cpu", ".cpu() per step"),
        ("print", "print per step"),
    ):
        results[mode] = bench(
            _loop,
            torch,
            w,
            x0,
            steps,
            mode,
            warmup_ms=warmup_ms,
            rep_ms=rep_ms,
            label=label,
            warn=False,
        )
    return SyncPointsResult(
        device=str(dev),
        steps=steps,
        deferred=results["deferred"],
        item_per_step=results["item"],
        cpu_per_step=results["cpu"],
        print_per_step=results["print"],
    )


@dataclass(frozen=True)
class AsyncLaunchResult:
    """Host time to *launch* work vs the time until the GPU has *finished* it (ms)."""

    device: str
    launch_ms: float
    synchronized_ms: float

    @property
    def hidden_ratio(self) -> float:
        """synchronized / launch: how much a naive host clock under-reports."""
        return ratio(self.synchronized_ms, self.launch_ms)

    def __str__(self) -> str:
        return (
            f"on {self.device}: the call returned after {format_duration(self.launch_ms)}, "
            f"the work finished after {format_duration(self.synchronized_ms)} "
            f"({times(self.hidden_ratio)}): the host ran ahead of the GPU"
        )


def async_launch_demo(size: int = 4096, repeats: int = 10) -> AsyncLaunchResult | None:
    """On a CUDA GPU, time ``repeats`` matmuls: host return vs synchronized finish.

    Returns None (after printing why) on a machine without a CUDA GPU, where
    there is no asynchrony to show.
    """
    size = check_positive_int("size", size)
    repeats = check_positive_int("repeats", repeats)
    from labkit.machine.gpu import require_gpu

    if not require_gpu("the host returning from a matmul launch before the GPU finishes it"):
        return None
    require_memory_fits(4 * size * size, "cuda", arrays=2, what=f"async_launch_demo(size={size})")
    import time

    torch = import_optional("torch", PURPOSE)
    a = torch.randn(size, size, device="cuda")
    for _ in range(2):  # warm-up: cuBLAS handles, allocator
        a @ a
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        out = a @ a
    launched = time.perf_counter()
    torch.cuda.synchronize()
    finished = time.perf_counter()
    del out
    return AsyncLaunchResult(
        device=torch.cuda.get_device_name(0),
        launch_ms=(launched - start) * 1e3,
        synchronized_ms=(finished - start) * 1e3,
    )


__all__ = ["AsyncLaunchResult", "SyncPointsResult", "async_launch_demo", "sync_points_benchmark"]
