"""The memory of one training step, measured, and a line through it: bytes = fixed + per-sample × batch.

:func:`step_memory` measures one step (torch.profiler's allocation peak, CUDA's peak, or the
tensors counted); :func:`fit_memory` fits the line from a few small batches and checks that it is
one. :mod:`labkit.batching.largest` reads the largest batch that fits off it.
"""

from __future__ import annotations

import gc
import math
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from labkit.core.results import JsonRecord
from labkit.core.units import format_bytes
from labkit.core.validate import check_choice, check_positive_int, check_sizes

PROBE_BATCHES: tuple[int, ...] = (2, 4)


METHOD_PROFILER = "torch.profiler allocations (peak)"


METHOD_CUDA = "torch.cuda.max_memory_allocated (peak)"


METHOD_COUNTED = "tensors counted (a lower bound: temporaries missed)"


@dataclass(frozen=True)
class StepMemory(JsonRecord):
    """The memory of one training step at ``batch_size``, in bytes.

    ``peak_bytes`` is the measured peak (see ``method``); the other fields
    break it down. ``other_bytes`` is what the breakdown does not name:
    gradients of activations and workspaces alive during backward, the
    targets, the allocator's rounding.
    """

    json_extra = ("other_bytes",)

    batch_size: int
    params_bytes: int
    grads_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    peak_bytes: int
    method: str

    @property
    def counted_bytes(self) -> int:
        return self.params_bytes + self.grads_bytes + self.optimizer_bytes + self.activations_bytes

    @property
    def other_bytes(self) -> int:
        return max(0, self.peak_bytes - self.counted_bytes)

    def breakdown(self) -> dict[str, int]:
        return {
            "parameters": self.params_bytes,
            "gradients": self.grads_bytes,
            "optimizer state": self.optimizer_bytes,
            "saved activations": self.activations_bytes,
            "other (temporaries)": self.other_bytes,
        }

    def __str__(self) -> str:
        parts = ", ".join(f"{k} {format_bytes(v)}" for k, v in self.breakdown().items())
        return f"batch {self.batch_size}: peak {format_bytes(self.peak_bytes)} ({parts})"


def check_model_fn(model_fn: Callable[[], Any]) -> Callable[[], Any]:
    """``model_fn``, unless it is a model instead of a function that builds one.

    A type checker cannot tell the two apart (an ``nn.Module`` is callable);
    called without an input, a model fails deep inside the measurement.
    """
    torch = sys.modules.get("torch")  # a Module instance means torch is imported already
    if torch is not None and isinstance(model_fn, torch.nn.Module):
        raise TypeError(
            "model_fn must be a function that builds a fresh model (the class itself, or "
            f"lambda: MyNet()), not {type(model_fn).__name__}: each measurement starts from a new "
            "model so its memory is counted from zero"
        )
    return model_fn


def check_probes(probe_batches: Sequence[int]) -> tuple[int, ...]:
    probes = check_sizes(probe_batches, "probe_batches")
    if len(probes) < 2:
        raise ValueError(
            f"probe_batches must hold at least two different batch sizes, got {probes!r}"
        )
    return probes


def _unique_bytes(tensors: Iterable[Any], skip: set[int] | None = None) -> int:
    seen: set[int] = set(skip or ())
    total = 0
    for t in tensors:
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key and key not in seen:
            seen.add(key)
            total += storage.nbytes()
    return total


def _counted_step(model: Any, optimizer: Any, x: Any, y: Any) -> dict[str, int]:
    """One training step with every tensor saved for backward counted once (parameters aside)."""
    import torch

    from labkit.batching.step import loss_fn

    params = list(model.parameters())
    param_keys = {p.untyped_storage().data_ptr() for p in params}
    saved: list[Any] = []

    def pack(t: Any) -> Any:
        saved.append(t)
        return t

    optimizer.zero_grad(set_to_none=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_fn(model(x), y)
    activations = _unique_bytes(saved, skip=param_keys)
    saved.clear()
    loss.backward()
    optimizer.step()
    del loss
    state = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    return {
        "params_bytes": _unique_bytes(params),
        "grads_bytes": _unique_bytes(p.grad for p in params if p.grad is not None),
        "optimizer_bytes": _unique_bytes(state),
        "activations_bytes": activations,
    }


def _allocation_peak(prof: Any) -> int | None:
    """Peak bytes allocated during a profiled region, from the allocator's running totals."""
    try:
        from torch._C._profiler import _EventType

        roots = prof.profiler.kineto_results.experimental_event_tree()
    except (ImportError, AttributeError, RuntimeError):  # private API: gone in some torch
        return None
    allocations: list[tuple[int, int, int]] = []
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node.tag == _EventType.Allocation:
            extra = node.extra_fields
            if str(getattr(extra, "device_type", "cpu")).lower().endswith("cpu"):
                allocations.append(
                    (node.start_time_ns, int(extra.alloc_size), int(extra.total_allocated))
                )
        stack.extend(node.children)
    if not allocations:
        return None
    allocations.sort()
    _, size, total = allocations[0]
    start = total - size  # what was allocated (and tracked) before the region
    return max(0, max(t for _, _, t in allocations) - start)


def _cpu_peak(run: Callable[[], None]) -> int | None:
    """Run ``run`` under torch.profiler's memory profiling: its peak bytes (None if unreadable)."""
    from torch.profiler import ProfilerActivity, profile

    from labkit.core.optional import stderr_fd_silenced

    with warnings.catch_warnings(), stderr_fd_silenced():  # kineto logs to fd 2
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            run()
    return _allocation_peak(prof)


def step_memory(
    model_fn: Callable[[], Any],
    input_shape: Sequence[int],
    batch_size: int,
    *,
    device: Any = "cpu",
    optimizer: str = "adam",
    seed: int = 0,
) -> StepMemory:
    """Build a fresh model and run two training steps at ``batch_size``; their peak memory.

    Everything is allocated inside the measurement (model, optimizer,
    inputs), so the peak is the whole cost of training at this batch. The
    second step is the one that counts: after the first, Adam's state exists
    and stays alive through forward and backward, as in a real run.
    """
    from labkit.batching.step import OPTIMIZERS, check_shape, make_batch, make_optimizer, train_step
    from labkit.core.validate import check_seed, check_torch_device
    from labkit.machine.report import resolve_torch_device

    model_fn = check_model_fn(model_fn)
    shape = check_shape(input_shape)
    batch = check_positive_int("batch_size", batch_size)
    optimizer = check_choice("optimizer", optimizer, OPTIMIZERS)
    seed = check_seed("seed", seed)
    check_torch_device(device, allow_none=False)
    import torch

    dev = resolve_torch_device(device)
    counts: dict[str, int] = {}

    def run() -> None:
        torch.manual_seed(seed)
        model = model_fn().to(dev)
        model.train()
        opt = make_optimizer(model, optimizer)
        x, y = make_batch(model, shape, batch, dev, seed=seed)
        train_step(model, opt, x, y)
        counts.update(_counted_step(model, opt, x, y))
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    peak: int | None
    if dev.type == "cpu":
        peak, method = _cpu_peak(run), METHOD_PROFILER
    elif dev.type == "cuda":
        gc.collect()
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        base = torch.cuda.memory_allocated(dev)
        run()
        peak, method = max(0, torch.cuda.max_memory_allocated(dev) - base), METHOD_CUDA
    else:
        run()
        peak = None
    counted = sum(counts.values())
    if peak is None or peak < counted:
        peak, method = counted, METHOD_COUNTED
    return StepMemory(batch_size=batch, peak_bytes=peak, method=method, **counts)


@dataclass(frozen=True)
class MemoryFit:
    """``bytes ≈ fixed_bytes + per_sample_bytes × batch``, through the two largest steps.

    ``points`` holds every step measured, smallest batch first. At small
    batches the peak sits on a floor (the optimizer step's temporaries, for
    instance, do not depend on the batch), so the line is drawn through the
    two largest batches, where activations dominate; the floor points lie
    above it, which ``max_residual_fraction`` shows.
    """

    points: tuple[StepMemory, ...]
    fixed_bytes: float
    per_sample_bytes: float

    @property
    def method(self) -> str:
        return self.points[-1].method

    @property
    def fitted_batches(self) -> tuple[int, int]:
        return self.points[-2].batch_size, self.points[-1].batch_size

    def predict_bytes(self, batch_size: int) -> float:
        return self.fixed_bytes + self.per_sample_bytes * batch_size

    def largest_batch_under(self, budget_bytes: int) -> int:
        """The largest batch whose predicted peak fits ``budget_bytes`` (0 if none)."""
        return max(0, math.floor((budget_bytes - self.fixed_bytes) / self.per_sample_bytes))

    @property
    def max_residual_fraction(self) -> float:
        """The worst relative gap between a measured point and the line."""
        return max(
            abs(p.peak_bytes - self.predict_bytes(p.batch_size)) / p.peak_bytes for p in self.points
        )

    def __str__(self) -> str:
        return (
            f"bytes ≈ {format_bytes(round(self.fixed_bytes))} + "
            f"{format_bytes(round(self.per_sample_bytes))} × batch"
        )


#: At most this many extra probes while fitting, and by at most this factor each.
MAX_REFINEMENTS = 12


MAX_PROBE_GROWTH = 16


def _line(points: Sequence[StepMemory]) -> tuple[float, float]:
    """Intercept and slope through the last two points; the slope is at least the activations'."""
    p, q = points[-2], points[-1]
    slope = (q.peak_bytes - p.peak_bytes) / (q.batch_size - p.batch_size)
    # On the floor the peak may not move at all; the saved activations grow at least this fast.
    slope = max(slope, q.activations_bytes / q.batch_size, 1.0)
    return q.peak_bytes - slope * q.batch_size, slope


def _slope(p: StepMemory, q: StepMemory) -> float:
    return (q.peak_bytes - p.peak_bytes) / (q.batch_size - p.batch_size)


def _linear(points: Sequence[StepMemory]) -> bool:
    """Whether the last three points lie on one line (slopes within 5%) that the batch dominates.

    On the floor the peak can grow a little, and linearly, with the batch
    (the inputs stay alive through the optimizer step), so straightness alone
    is not enough: the batch must also account for at least half of the last peak.
    """
    if len(points) < 3:
        return False
    a, b = _slope(points[-3], points[-2]), _slope(points[-2], points[-1])
    last = points[-1]
    return (
        a > 0
        and b > 0
        and abs(a - b) <= 0.05 * max(a, b)
        and b * last.batch_size >= 0.5 * last.peak_bytes
    )


def fit_memory(
    model_fn: Callable[[], Any],
    input_shape: Sequence[int],
    *,
    probe_batches: Sequence[int] = PROBE_BATCHES,
    device: Any = "cpu",
    optimizer: str = "adam",
    budget_bytes: int | None = None,
    target_batch: int | None = None,
) -> MemoryFit:
    """Measure a training step at growing batches and fit the line through the two largest.

    First the ``probe_batches``, smallest first. Small batches may sit on a
    floor (temporaries that do not depend on the batch), where the line
    would come out too flat and predict too much. So, until the last three
    points lie on one line (slopes within 5%) and the batch accounts for at
    least half of the last peak, one more probe goes towards
    the batch that matters (``target_batch``, else the largest the line
    allows under ``budget_bytes``): at half of it, at most 16× the last
    probe, and predicted to take at most half of ``budget_bytes``, so a
    line that is still too flat cannot lead far past the budget. The probes
    stop once the last is within 1.5× of that half. A measured peak over
    the budget raises ``MemoryBudgetError``.
    """
    from labkit.batching.step import OPTIMIZERS, check_shape
    from labkit.core.validate import check_torch_device

    check_model_fn(model_fn)
    check_shape(input_shape)
    check_choice("optimizer", optimizer, OPTIMIZERS)
    check_torch_device(device, allow_none=False)
    probes = check_probes(probe_batches)
    if target_batch is not None:
        target_batch = check_positive_int("target_batch", target_batch)
    if budget_bytes is not None:
        budget_bytes = check_positive_int("budget_bytes", budget_bytes)
        # a model too big for the budget is refused before any step allocates
        require_params_fit(model_fn, optimizer, budget_bytes)

    def measure(b: int) -> StepMemory:
        point = step_memory(model_fn, input_shape, b, device=device, optimizer=optimizer)
        if budget_bytes is not None and point.peak_bytes > budget_bytes:
            raise _budget_error(point, budget_bytes)
        return point

    points: list[StepMemory] = []
    for b in probes:
        if budget_bytes is not None and len(points) >= 2:
            fixed, slope = _line(points)
            if fixed + slope * b > budget_bytes / 2:
                break
        points.append(measure(b))
    if len(points) < 2:
        raise _budget_error(points[-1], budget_bytes or 0, probes[1])
    for _ in range(MAX_REFINEMENTS):
        if _linear(points):
            break
        fixed, slope = _line(points)
        goals = [] if target_batch is None else [target_batch]
        if budget_bytes is not None:
            goals.append(math.floor((budget_bytes - fixed) / slope))
        if not goals:
            break
        last = points[-1].batch_size
        half = min(min(goals) // 2, last * MAX_PROBE_GROWTH)
        if budget_bytes is not None:
            half = min(half, math.floor((budget_bytes / 2 - fixed) / slope))
        if half <= last * 3 // 2:
            break
        points.append(measure(half))
    fixed, slope = _line(points)
    return MemoryFit(points=tuple(points), fixed_bytes=fixed, per_sample_bytes=slope)


def _params_bytes(model_fn: Callable[[], Any]) -> int:
    """Bytes of the model's parameters, counted on torch's meta device (nothing is allocated)."""
    import torch

    try:
        with torch.device("meta"):
            model = model_fn()
    except Exception:  # a model that cannot be built on the meta device is built for real
        model = model_fn()
    return sum(p.numel() * p.element_size() for p in model.parameters())


def require_params_fit(model_fn: Callable[[], Any], optimizer: str, budget: int) -> None:
    """Raise MemoryBudgetError when weights and gradients (and Adam's state) exceed ``budget``."""
    copies = 4 if optimizer == "adam" else 2  # weights, gradients (+ Adam's two moments)
    params = _params_bytes(model_fn)
    if params * copies > budget:
        raise _budget_error(StepMemory(0, params, 0, 0, 0, params * copies, METHOD_COUNTED), budget)


def _budget_error(point: StepMemory, budget: int, next_batch: int | None = None) -> ValueError:
    from labkit.machine.memory import MemoryBudgetError

    if point.batch_size == 0:
        return MemoryBudgetError(
            f"the budget of {format_bytes(budget)} is too small for this model: its weights and "
            f"gradients (and Adam's state) alone take {format_bytes(point.peak_bytes)}. Use a "
            "smaller model, or close other programs to free memory"
        )
    what = f"batch {next_batch}" if next_batch else f"batch {point.batch_size}"
    return MemoryBudgetError(
        f"the budget of {format_bytes(budget)} is too small to measure {what}: a training step "
        f"at batch {point.batch_size} already peaks at {format_bytes(point.peak_bytes)}. Use a "
        "smaller model or input, smaller probe_batches, or free memory"
    )
