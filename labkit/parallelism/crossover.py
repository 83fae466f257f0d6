"""When does the GPU pay off? Its fixed cost per kernel, and the size where it overtakes the CPU.

Every GPU kernel launch costs microseconds before any thread starts
(:func:`launch_overhead`), so for small problems the CPU wins. As the problem
grows the fixed cost is amortised and the GPU's throughput takes over:
:func:`crossover_size` finds the size where that happens, from two size
sweeps (:mod:`labkit.parallelism.sweep`). The crossover is a pure function, so it is
tested on made-up data; the launch overhead needs a CUDA GPU.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from labkit.core.optional import import_optional
from labkit.core.units import format_duration
from labkit.core.validate import check_ms, check_real, check_torch_device
from labkit.timing.bench import Timing, bench


def crossover_size(
    sizes: Sequence[float], slow_ms: Sequence[float], fast_ms: Sequence[float]
) -> float | None:
    """The smallest size from which the ``fast`` backend stays faster, interpolated on log size.

    ``slow_ms`` and ``fast_ms`` are the times of the two backends at each of
    ``sizes`` (increasing). "Stays faster" means faster at that size and at
    every larger size measured, so a lucky point at small n does not count.

    Returns None when ``fast`` is not faster at the largest size, the first
    size when it is faster everywhere, and otherwise the size where the log
    of the time ratio crosses 0, interpolated linearly in log(size) between
    the last size where ``fast`` lost and the first where it won. Example:
    sizes (1, 100), slow (1, 100) ms, fast (10, 10) ms: the ratio goes from
    10× slower to 10× faster, so the crossover is at the log-midpoint, 10.
    """
    points = _check_crossover_args(sizes, slow_ms, fast_ms)
    # log(slow / fast) > 0 where the fast backend wins
    gains = [math.log(slow / fast) for _, slow, fast in points]
    if gains[-1] <= 0:
        return None
    first = len(gains) - 1
    while first > 0 and gains[first - 1] > 0:
        first -= 1
    if first == 0:
        return float(points[0][0])
    x0, x1 = math.log(points[first - 1][0]), math.log(points[first][0])
    y0, y1 = gains[first - 1], gains[first]
    return math.exp(x0 + (0.0 - y0) * (x1 - x0) / (y1 - y0))


def _check_crossover_args(
    sizes: Sequence[float], slow_ms: Sequence[float], fast_ms: Sequence[float]
) -> list[tuple[float, float, float]]:
    columns = {"sizes": sizes, "slow_ms": slow_ms, "fast_ms": fast_ms}
    if len(sizes) == 0:
        raise ValueError(f"sizes must be a non-empty sequence of numbers, got {sizes!r}")
    if not len(sizes) == len(slow_ms) == len(fast_ms):
        raise ValueError(
            "sizes, slow_ms and fast_ms must have the same length (one time per size per "
            f"backend), got {len(sizes)}, {len(slow_ms)} and {len(fast_ms)}"
        )
    checked = {
        name: [check_real(f"{name}[{i}]", v, low=0.0, low_open=True) for i, v in enumerate(values)]
        for name, values in columns.items()
    }
    xs = checked["sizes"]
    if any(b <= a for a, b in zip(xs[:-1], xs[1:], strict=True)):
        raise ValueError(f"sizes must be strictly increasing, got {list(sizes)!r}")
    return list(zip(xs, checked["slow_ms"], checked["fast_ms"], strict=True))


@dataclass(frozen=True)
class LaunchOverhead:
    """The fixed cost of one tiny GPU kernel, in µs.

    ``kernel_us`` is the device-event time around a 1-element add when the
    host queues them back to back without waiting. The GPU finishes such a
    kernel in a few µs and then idles until the next one arrives, so this is
    the larger of the kernel's own time and the host's cost to dispatch it:
    the best rate at which tiny ops can run at all. ``round_trip_us`` is
    launch plus ``torch.cuda.synchronize()`` on the host clock: what one
    small op costs a Python loop that waits for each result (``.item()``,
    ``print``). Both are floors that no amount of GPU parallelism removes.
    """

    device: str
    kernel_us: float
    round_trip_us: float
    kernel: Timing
    round_trip: Timing

    def __str__(self) -> str:
        return (
            f"launch overhead on {self.device}: {format_duration(self.kernel_us / 1e3)} per "
            f"kernel (device events), {format_duration(self.round_trip_us / 1e3)} per launch + "
            "synchronize (host clock)"
        )


class _CudaHostClock:
    """A synchronizer without events, so :func:`bench` times a CUDA call with the host clock."""

    def __init__(self, torch: Any, device: Any) -> None:
        self._torch = torch
        self._device = device
        self.name = str(device)

    def synchronize(self) -> None:
        self._torch.cuda.synchronize(self._device)


def launch_overhead(
    device: str = "cuda", *, warmup_ms: float = 25.0, rep_ms: float = 100.0
) -> LaunchOverhead:
    """Measure the time of a trivially small kernel (``c = a + b`` on 1 element) on a GPU.

    Needs a CUDA GPU: guard the notebook cell with :func:`labkit.require_gpu`.
    """
    from labkit.machine.gpu import has_gpu

    check_torch_device(device, allow_none=False)
    if not str(device).startswith("cuda"):
        raise ValueError(f"device must be 'cuda' or 'cuda:N', got {device!r}")
    warmup = check_ms("warmup_ms", warmup_ms, allow_zero=True)
    rep = check_ms("rep_ms", rep_ms)
    if not has_gpu():
        raise RuntimeError(
            "launch_overhead() needs a CUDA GPU and this machine has none that torch can use. "
            "Guard the cell with `if labkit.require_gpu(...)`; `labkit doctor` explains why no "
            "GPU is visible."
        )
    torch = import_optional("torch", "measuring kernel launch overhead")
    dev = torch.device(device)
    a = torch.ones(1, device=dev)
    b = torch.ones(1, device=dev)
    c = torch.empty(1, device=dev)

    def tiny_add() -> Any:
        return torch.add(a, b, out=c)

    kernel = bench(tiny_add, warmup_ms=warmup, rep_ms=rep, device=str(dev), warn=False)
    # One call per sample: each sample is a launch and a synchronize, a real round trip
    # (bench would otherwise put many launches in a sample and amortise the synchronize).
    round_trip = bench(
        tiny_add,
        warmup_ms=warmup,
        rep_ms=rep,
        device=_CudaHostClock(torch, dev),
        warn=False,
        calls_per_sample=1,
    )
    return LaunchOverhead(
        device=str(dev),
        kernel_us=kernel.median_ms * 1e3,
        round_trip_us=round_trip.median_ms * 1e3,
        kernel=kernel,
        round_trip=round_trip,
    )
