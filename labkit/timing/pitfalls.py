"""The naive-timing pitfall: a bare host clock around GPU work times the launch, not the work.

``naive_timing`` measures the same function twice: once the way most first
attempts do (``t0 = time.perf_counter(); for ...: fn(); t1 = ...``, with no
synchronization) and once with :func:`labkit.bench`. On the CPU the two agree,
because a CPU call has finished when it returns. On a GPU the naive number is
the time to *queue* kernels, often a hundred times too small.

``labkit bench timing`` (:mod:`labkit.cli.bench.timing`) runs this on every
device here; with ``--record`` on a GPU machine it stores the GPU result as
the recording that CPU-only learners see in notebook 00.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from labkit.core.optional import import_optional, is_installed
from labkit.core.results import JsonRecord
from labkit.core.units import format_duration, format_speedup
from labkit.core.validate import check_function, check_int, check_positive_int, check_torch_device
from labkit.machine.memory import require_memory_fits
from labkit.machine.report import resolve_torch_device
from labkit.timing import sync as _sync
from labkit.timing.bench import Timing, bench, check_bench_args

#: The name of the recording that ``labkit bench timing --record`` writes.
REFERENCE_NAME = "naive_timing"

#: Matrix sizes per device: big enough that the work dwarfs launch overhead on
#: a GPU, small enough that the CPU row takes well under a second on 2 cores.
CPU_MATMUL_N = 256
GPU_MATMUL_N = 2048
NAIVE_REPS = 20


#: Below this synchronized/naive ratio the GPU time per call is well under the
#: host's launch time per call: the GPU idles between launches ("In some cases
#: the GPU execution time is lower than the launch time itself", HTA's
#: cuda_kernel_launch_stats documentation). Between it and 2 the two are close.
LAUNCH_BOUND_RATIO = 0.5


@dataclass(frozen=True)
class NaiveVsSynced(JsonRecord):
    """The same work timed with a naive host clock and with :func:`labkit.bench`."""

    json_extra = ("ratio", "on_gpu")

    label: str
    device: str
    naive_ms: float
    naive_reps: int
    synced: Timing

    @property
    def ratio(self) -> float:
        """Synchronized median / naive per-call time: how much the naive clock under-reports."""
        if self.naive_ms > 0:
            return self.synced.median_ms / self.naive_ms
        return 1.0 if self.synced.median_ms == 0 else math.inf

    @property
    def on_gpu(self) -> bool:
        """Whether the work ran on an accelerator (asynchronously)."""
        return not _sync.is_host_device(self.device)

    def summary(self) -> str:
        """One line: both measurements and their ratio."""
        return (
            f"{self.label} on {self.device}: naive clock {format_duration(self.naive_ms)} per call, "
            f"synchronized median {format_duration(self.synced.median_ms)} "
            f"(synchronized/naive = {format_speedup(self.ratio)})"
        )

    def explanation(self) -> str:
        """What the ratio means on this device, in one sentence."""
        if not self.on_gpu:
            return (
                "On the CPU both clocks time the work: CPU work is synchronous, so each call has "
                "finished when it returns. Any gap between them comes from measuring "
                f"differently (a mean of {self.naive_reps} calls after one untimed call, which "
                "slow calls pull up, against a median after warm-up) and from noise between two "
                "measurements made at different moments."
            )
        if self.ratio >= 2:
            return (
                "The naive clock stopped when the work was queued, not when the GPU finished "
                "it: GPU calls are asynchronous. Synchronize before reading a clock "
                "(labkit.bench does)."
            )
        if self.ratio < LAUNCH_BOUND_RATIO:
            return (
                "The GPU finishes each call faster than the host can launch it: the naive clock "
                "measures the launch rate, and so does the program (it is launch-bound). Batch "
                "more work per call (or use CUDA Graphs), and time with device events "
                "(labkit.bench does)."
            )
        return (
            "Here the two are close: each call takes the GPU about as long as the host takes "
            "to launch it, so the GPU keeps up with the host and the time to queue the work "
            "is about the time to do it. Do not rely on that: synchronize before reading a "
            "clock (labkit.bench does)."
        )

    def __str__(self) -> str:
        return f"{self.summary()}\n{self.explanation()}"


def naive_timing(
    fn: Callable[..., Any],
    *args: Any,
    reps: int = NAIVE_REPS,
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    device: str | _sync.Synchronizer | None = None,
    label: str | None = None,
    clock: Callable[[], float] = time.perf_counter,
    warn: bool = True,
    **kwargs: Any,
) -> NaiveVsSynced:
    """Time ``fn(*args, **kwargs)`` naively and with :func:`labkit.bench`.

    The naive measurement calls ``fn`` once untimed (so compilation is not the
    difference), then reads ``clock`` around ``reps`` calls with no
    synchronization at all and divides by ``reps``. Afterwards it drains the
    device, so the work it left queued does not leak into the ``bench`` run.
    ``warmup_ms``, ``rep_ms``, ``device``, ``label``, ``clock`` and ``warn``
    are passed to ``bench``; other keyword arguments go to ``fn``.
    """
    reps = check_positive_int("reps", reps)
    # bench's own checks, before the naive loop runs: a bad rep_ms must not cost a measurement
    check_function("fn", fn, "naive_timing(f, x), not naive_timing(f(x)).")
    check_bench_args(warmup_ms, rep_ms, 5, 100_000)
    if label is None:
        name = getattr(fn, "__name__", None)
        label = name if isinstance(name, str) and name.isidentifier() else "fn"
    group = _sync.group_for(device, [*args, *kwargs.values()])
    result = fn(*args, **kwargs)
    if device is None:
        group = _sync.refine(group, result)
    del result
    group.synchronize()

    start = clock()
    for _ in range(reps):
        fn(*args, **kwargs)
    naive_ms = (clock() - start) * 1e3 / reps
    group.synchronize()  # drain what the naive loop left queued, after the clock read

    synced = bench(
        fn,
        *args,
        warmup_ms=warmup_ms,
        rep_ms=rep_ms,
        device=device,
        label=label,
        clock=clock,
        warn=warn,
        **kwargs,
    )
    return NaiveVsSynced(
        label=label,
        device=group.primary.name,
        naive_ms=max(naive_ms, 0.0),
        naive_reps=reps,
        synced=synced,
    )


def matmul_workload(n: int, device: str = "cpu") -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """``(fn, args)`` for an n×n float32 matrix product on ``device``.

    ``device`` is a torch device ("cpu", "cuda", "cuda:1", "mps") or "cupy"
    (CuPy on its current GPU). The inputs are random and made once, so a
    timing measures only the product.
    """
    n = check_int("n", n, minimum=1, maximum=32768)
    if device != "cupy":
        try:  # only 'cpu', 'cuda', 'cuda:N', 'mps', 'xpu': torch knows more types than it can run
            check_torch_device(device, allow_none=False)
        except ValueError:
            raise ValueError(
                f"device={device!r} is not a torch device ('cpu', 'cuda', 'cuda:1', 'mps') "
                "or 'cupy'"
            ) from None
    require_memory_fits(
        2 * 4 * n * n, arrays=1, what=f"matmul_workload(n={n}) (two float32 inputs)"
    )
    if device == "cupy":
        cupy = import_optional("cupy", "the CuPy matmul workload")
        rng = cupy.random.default_rng(0)
        a = rng.random((n, n), dtype=cupy.float32)
        b = rng.random((n, n), dtype=cupy.float32)
        return cupy.matmul, (a, b)
    torch = import_optional("torch", "the matmul workload")
    where = torch.device(device)
    if where.type != "cpu":  # a GPU that is not here: say so, not a CUDA assertion from torch
        resolve_torch_device(where, "device")
    generator = torch.Generator().manual_seed(0)
    a = torch.rand(n, n, generator=generator, dtype=torch.float32).to(where)
    b = torch.rand(n, n, generator=generator, dtype=torch.float32).to(where)
    return torch.matmul, (a, b)


# --------------------------------------------------------------------------- the CLI benchmark


def available_devices() -> list[tuple[str, int]]:
    """(device, matmul size) for every device ``labkit bench timing`` runs on here."""
    torch = import_optional("torch", "labkit bench timing")
    cases = [("cpu", CPU_MATMUL_N)]
    if torch.cuda.is_available():
        cases.append(("cuda", GPU_MATMUL_N))
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        cases.append(("mps", GPU_MATMUL_N))
    if is_installed("cupy"):
        with contextlib.suppress(Exception):  # a CuPy that cannot load is "no CuPy device"
            cupy = import_optional("cupy", "labkit bench timing")
            if cupy.is_available():
                cases.append(("cupy", GPU_MATMUL_N))
    return cases


@dataclass(frozen=True)
class ClockCost(JsonRecord):
    """What one pair of host-clock reads costs: the floor under every host-clock sample.

    ``pair_ns`` is the median over ``samples`` batches of ``reads_per_batch``
    back-to-back pairs. The batch is timed by the same clock, once, so its
    own two reads are spread over thousands of pairs; the Python loop around
    them runs ten pairs per iteration, so its cost is a small part of a pair.
    """

    pair_ns: float
    samples: int
    reads_per_batch: int

    def __str__(self) -> str:
        return (
            f"one pair of clock reads costs {format_duration(self.pair_ns * 1e-6)} "
            f"(median of {self.samples} batches of {self.reads_per_batch:,} pairs)"
        )


def clock_cost(
    clock: Callable[[], float] = time.perf_counter, *, samples: int = 21, pairs: int = 20_000
) -> ClockCost:
    """Measure the cost of ``start = clock(); ...; end = clock()`` with nothing between.

    A sample that reads the clock around one call carries this cost once, so
    a call not much longer than it is overestimated: the reason
    :func:`labkit.bench` times many short calls per sample.
    """
    samples = check_positive_int("samples", samples)
    pairs = check_positive_int("pairs", pairs)
    costs = []
    rounds = max(1, pairs // 10)
    for _ in range(samples):
        begin = clock()
        for _ in range(rounds):  # ten pairs per iteration: the loop's own cost is a tenth
            clock(), clock(), clock(), clock(), clock(), clock(), clock(), clock(), clock(), clock()
            clock(), clock(), clock(), clock(), clock(), clock(), clock(), clock(), clock(), clock()
        costs.append((clock() - begin) / (10 * rounds) * 1e9)
    costs.sort()
    return ClockCost(pair_ns=costs[len(costs) // 2], samples=samples, reads_per_batch=10 * rounds)
