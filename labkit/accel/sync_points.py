"""Sync points in a training loop: ``.item()`` every step vs one sync at the end.

A GPU runs work from a queue. The host only *enqueues* kernels, so a loop that
never asks for a value races ahead and keeps the queue full. ``.item()``,
``.cpu()``, ``print(tensor)`` and ``if tensor > 0`` need the value *now*: the
host blocks until the queue is empty, the GPU idles while the host prepares
the next launch, and every step pays a full round trip.

On the CPU there is no queue: each op has finished when its call returns, so
a sync point costs only the conversion itself. On a GPU it also drains the
queue, which PyTorch's performance tuning guide tells you to avoid
("Avoid unnecessary CPU-GPU synchronization").
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

from labkit.accel.common import ratio, round_median_ms, times
from labkit.core.optional import import_optional
from labkit.core.units import format_duration
from labkit.core.validate import check_ms, check_positive_int, check_torch_device
from labkit.machine.memory import require_memory_fits
from labkit.machine.report import resolve_torch_device
from labkit.timing.bench import Timing
from labkit.timing.interleave import BAND, band_verdict

PURPOSE = "the sync-point demo"


#: The four habits, in the order they are printed: (mode, label).
MODES: tuple[tuple[str, str], ...] = (
    ("deferred", "one sync at the end"),
    ("item", ".item() every step"),
    ("cpu", ".cpu() every step"),
    ("print", "print() every step"),
)


@dataclass(frozen=True)
class SyncPointsResult:
    """The same training loop with four sync habits, timed round-robin.

    Each Timing pools the samples of every round of its variant;
    ``rounds`` is :func:`labkit.interleave`'s result (per-round ratios), or
    None for a result built by hand. ``item_ratio`` and the others are
    median / deferred median (> 1: the per-step sync costs time).
    """

    device: str
    steps: int
    deferred: Timing
    item_per_step: Timing
    cpu_per_step: Timing
    print_per_step: Timing
    rounds: Any = None  # labkit.timing.interleave.Interleaved

    def _median_ms(self, timing: Timing) -> float:
        return round_median_ms(timing, self.rounds)

    def _ratio(self, timing: Timing) -> float:
        """Time against one sync at the end (> 1: the per-step sync costs time)."""
        if self.rounds is not None:
            speed = self.rounds[timing.label].ratio
            return 1 / speed if speed > 0 else float("inf")
        return ratio(timing.median_ms, self.deferred.median_ms)

    @property
    def deferred_median_ms(self) -> float:
        return self._median_ms(self.deferred)

    @property
    def item_median_ms(self) -> float:
        return self._median_ms(self.item_per_step)

    @property
    def item_ratio(self) -> float:
        return self._ratio(self.item_per_step)

    @property
    def cpu_ratio(self) -> float:
        return self._ratio(self.cpu_per_step)

    @property
    def print_ratio(self) -> float:
        return self._ratio(self.print_per_step)

    def timings(self) -> list[Timing]:
        """The four timings, for :func:`labkit.compare`."""
        return [self.deferred, self.item_per_step, self.cpu_per_step, self.print_per_step]

    def _speed(self, label: str, timing: Timing) -> str:
        """Speed against one sync at the end, its range over rounds and what the range shows."""
        if self.rounds is None:
            return times(ratio(self.deferred.median_ms, timing.median_ms))
        runs = self.rounds[label]
        return (
            f"{times(runs.ratio)} ({times(runs.ratio_low)} to {times(runs.ratio_high)} per round: "
            f"{band_verdict(runs.ratio_low, runs.ratio_high)})"
        )

    def __str__(self) -> str:
        where = "cpu, one thread" if self.device == "cpu" else self.device
        lines = [
            f"{self.steps} training steps (forward, backward, SGD step) on {where}, "
            "the same work in each; speed against one sync at the end:"
        ]
        for (_, label), timing in zip(MODES, self.timings(), strict=True):
            extra = "" if timing is self.deferred else f"  {self._speed(label, timing)}"
            lines.append(f"  {label:<20} {format_duration(self._median_ms(timing))}{extra}")
        if self.rounds is not None:
            lines.append(
                f"{self.rounds.rounds} rounds in rotating order; a difference counts only beyond "
                f"{(BAND - 1) * 100:.0f}% in every round"
            )
        return "\n".join(lines)


def _loop(
    torch: Any, params: tuple[Any, Any], x: Any, target: Any, opt: Any, steps: int, mode: str
) -> Any:
    """``steps`` training steps; every mode does the same work and differs only in its sync."""
    w1, w2 = params
    running = torch.zeros((), device=x.device)
    sink = io.StringIO()
    values = []
    for _ in range(steps):
        loss = (torch.tanh(x @ w1) @ w2 - target).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        running = running + loss.detach()  # every mode keeps the running loss on the device
        if mode == "item":
            values.append(loss.item())
        elif mode == "cpu":
            values.append(loss.detach().cpu())
        elif mode == "print":  # formatting a tensor reads its value, which is a sync
            print(loss.detach(), file=sink)
    values.append(running.item())  # the sync at the end, in every mode
    return values


def sync_points_benchmark(
    steps: int = 20,
    size: int = 128,
    *,
    device: Any = None,
    rounds: int = 3,
    warmup_ms: float = 10.0,
    rep_ms: float = 30.0,
) -> SyncPointsResult:
    """Time ``steps`` training steps with each sync habit on ``device``, round-robin.

    A step is a forward pass through two ``size``×``size`` layers, the
    backward pass and an SGD step; every habit also adds the loss to a
    running total on the device and reads it once at the end, so the
    variants differ only in the per-step sync. ``device=None`` picks the best
    torch device (:func:`labkit.pick_device`). On a CPU the loop runs on one
    thread (restored afterwards): its ops are small, and with
    several threads a busy core makes every op's barrier wait.
    """
    from labkit.timing.interleave import interleave

    steps = check_positive_int("steps", steps)
    size = check_positive_int("size", size)
    rounds = check_positive_int("rounds", rounds)
    warmup_ms = check_ms("warmup_ms", warmup_ms)
    rep_ms = check_ms("rep_ms", rep_ms)
    check_torch_device(device)
    torch = import_optional("torch", PURPOSE)
    dev = resolve_torch_device(device)
    require_memory_fits(4 * size * size, dev, arrays=8, what=f"sync_points_benchmark(size={size})")
    gen = torch.Generator().manual_seed(0)
    w1 = (torch.randn(size, size, generator=gen) / size**0.5).to(dev).requires_grad_()
    w2 = (torch.randn(size, size, generator=gen) / size**0.5).to(dev).requires_grad_()
    x = torch.randn(size, size, generator=gen).to(dev)
    target = torch.randn(size, size, generator=gen).to(dev)
    opt = torch.optim.SGD([w1, w2], lr=1e-3)
    calls = {
        label: (lambda mode=mode: _loop(torch, (w1, w2), x, target, opt, steps, mode))
        for mode, label in MODES
    }
    threads = torch.get_num_threads()
    if dev.type == "cpu":
        # 128×128 ops are too small to split: on several threads each op's barrier can cost
        # more than its work, and a busy core makes every barrier wait (oversubscription).
        torch.set_num_threads(1)
    try:
        result = interleave(
            calls,
            rounds=max(rounds, 2),
            rep_ms=rep_ms,
            warmup_ms=warmup_ms,
            device=str(dev),
            min_reps=3,
        )
    finally:
        torch.set_num_threads(threads)
    pooled = {v.label: v.pooled() for v in result.variants}
    labels = [label for _, label in MODES]
    return SyncPointsResult(
        device=str(dev),
        steps=steps,
        deferred=pooled[labels[0]],
        item_per_step=pooled[labels[1]],
        cpu_per_step=pooled[labels[2]],
        print_per_step=pooled[labels[3]],
        rounds=result,
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
