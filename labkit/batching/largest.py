"""The largest batch that fits: memory of a training step, measured and extrapolated.

Past the throughput knee (:mod:`labkit.batching.sweep`) the next limit is memory.
A training step holds the weights, their gradients, the optimizer's state
(Adam keeps two more copies of the weights), and every activation the
backward pass needs, plus temporaries while it runs. All but the first three
grow linearly with the batch, so the memory of a step is a straight line:
``bytes = fixed + per_sample × batch``.

Two ways to find the largest batch, one per kind of device:

- :func:`largest_batch_cpu` measures the peak memory of a training step at
  growing batches (at small ones the peak can sit on a floor, such as the
  optimizer step's temporaries, so it grows them until the batch dominates),
  fits the line through the two largest, predicts the largest batch under a
  budget (:mod:`labkit.machine.memory`'s 25% of the free memory by default), then
  runs that batch to check the prediction. It never tries a batch predicted
  to exceed the budget: running out of host memory swaps the machine or
  kills the kernel, so there is no "try and catch" on a CPU.
- :func:`largest_batch_cuda` does what practitioners do on a GPU: double the
  batch until ``torch.cuda.OutOfMemoryError``, then bisect, freeing memory
  after each failure (the error is recoverable on a GPU). The allocator is
  capped at the same budget with ``torch.cuda.set_per_process_memory_fraction``,
  so "out of memory" means "over the budget" unless you raise ``fraction``.

How the peak is measured: on CUDA, ``torch.cuda.max_memory_allocated``. On a
CPU torch keeps no such counter, so the step runs under ``torch.profiler``
with ``profile_memory=True`` and the peak is read from its allocation
events (each carries the allocator's running total). Where that private
part of the profiler is unavailable, the peak falls back to the bytes counted
below, a lower bound, and ``method`` says so. Either way each step is also
broken down: parameters, gradients, optimizer state, and the activations
saved for backward (counted with ``torch.autograd.graph.saved_tensors_hooks``).
"""

from __future__ import annotations

import gc
import math
import numbers
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

#: Batches probed by :func:`largest_batch_cpu` to fit the line.
from labkit.core.units import format_bytes
from labkit.machine.memory import DEFAULT_FRACTION

PROBE_BATCHES: tuple[int, ...] = (2, 4)

METHOD_PROFILER = "torch.profiler allocations (peak)"
METHOD_CUDA = "torch.cuda.max_memory_allocated (peak)"
METHOD_COUNTED = "tensors counted (a lower bound: temporaries missed)"


# --------------------------------------------------------------------------- one step


@dataclass(frozen=True)
class StepMemory:
    """The memory of one training step at ``batch_size``, in bytes.

    ``peak_bytes`` is the measured peak (see ``method``); the other fields
    break it down. ``other_bytes`` is what the breakdown does not name:
    gradients of activations and workspaces alive during backward, the
    targets, the allocator's rounding.
    """

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

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch_size": self.batch_size,
            "peak_bytes": self.peak_bytes,
            "method": self.method,
            "params_bytes": self.params_bytes,
            "grads_bytes": self.grads_bytes,
            "optimizer_bytes": self.optimizer_bytes,
            "activations_bytes": self.activations_bytes,
            "other_bytes": self.other_bytes,
        }

    def __str__(self) -> str:
        parts = ", ".join(f"{k} {format_bytes(v)}" for k, v in self.breakdown().items())
        return f"batch {self.batch_size}: peak {format_bytes(self.peak_bytes)} ({parts})"


def _check_model_fn(model_fn: Any) -> Callable[[], Any]:
    torch = sys.modules.get("torch")  # a Module instance means torch is imported already
    if (torch is not None and isinstance(model_fn, torch.nn.Module)) or not callable(model_fn):
        raise TypeError(
            "model_fn must be a function that builds a fresh model (the class itself, or "
            f"lambda: MyNet()), not {type(model_fn).__name__}: each measurement starts from a new "
            "model so its memory is counted from zero"
        )
    return model_fn


def _check_batch(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def _check_probes(probe_batches: Any) -> list[int]:
    if isinstance(probe_batches, (str, bytes)) or not isinstance(probe_batches, Iterable):
        raise TypeError(f"probe_batches must be a list of batch sizes, got {probe_batches!r}")
    probes = sorted({_check_batch("probe_batches[...]", b) for b in probe_batches})
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
    from labkit.batching.step import (
        check_optimizer,
        check_shape,
        make_batch,
        make_optimizer,
        train_step,
    )
    from labkit.core.validate import check_seed, check_torch_device
    from labkit.machine.report import resolve_torch_device

    model_fn = _check_model_fn(model_fn)
    shape = check_shape(input_shape)
    batch = _check_batch("batch_size", batch_size)
    optimizer = check_optimizer(optimizer)
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


# --------------------------------------------------------------------------- the line


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
    probe_batches: Iterable[int] = PROBE_BATCHES,
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
    from labkit.batching.step import check_optimizer, check_shape
    from labkit.core.validate import check_torch_device

    _check_model_fn(model_fn)
    check_shape(input_shape)
    check_optimizer(optimizer)
    check_torch_device(device, allow_none=False)
    probes = _check_probes(probe_batches)
    if target_batch is not None:
        target_batch = _check_batch("target_batch", target_batch)
    if budget_bytes is not None:
        budget_bytes = _check_batch("budget_bytes", budget_bytes)
        # a model too big for the budget is refused before any step allocates
        _check_params_fit(model_fn, optimizer, budget_bytes)

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


def _check_params_fit(model_fn: Callable[[], Any], optimizer: str, budget: int) -> None:
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


# ------------------------------------------------------------------- CPU: predict, then verify


@dataclass(frozen=True)
class CpuBatchFit:
    """The line fitted to measured steps, the batch it predicts, and the run that checked it."""

    model: str
    device: str
    input_shape: tuple[int, ...]
    optimizer: str
    fit: MemoryFit
    budget_bytes: int
    predicted_batch: int
    capped: bool
    verification: StepMemory | None

    @property
    def predicted_bytes(self) -> float:
        return self.fit.predict_bytes(self.predicted_batch)

    @property
    def verified(self) -> bool:
        """Whether the predicted batch was run and its measured peak stayed within the budget."""
        return self.verification is not None and self.verification.peak_bytes <= self.budget_bytes

    @property
    def prediction_error(self) -> float | None:
        """Measured / predicted - 1 at the predicted batch (positive: the line was low)."""
        if self.verification is None:
            return None
        return self.verification.peak_bytes / self.predicted_bytes - 1

    def _lines(self) -> list[str]:
        lines = [
            f"fit: {self.fit} (through batches {self.fit.fitted_batches[0]:,} and "
            f"{self.fit.fitted_batches[1]:,}; "
            f"{self.fit.method})"
        ]
        cap = " (capped by max_batch)" if self.capped else ""
        lines.append(
            f"predicted largest batch under {format_bytes(self.budget_bytes)}: "
            f"{self.predicted_batch:,}{cap}, about {format_bytes(round(self.predicted_bytes))}"
        )
        v = self.verification
        if v is None:
            lines.append(
                "not verified: nothing fits the budget"
                if self.predicted_batch == 0
                else "not verified (verify=False)"
            )
        else:
            verdict = "within the budget" if self.verified else "OVER the budget: the line was low"
            lines.append(
                f"verified: batch {v.batch_size:,} ran and peaked at {format_bytes(v.peak_bytes)}, "
                f"{verdict} (prediction off by {self.prediction_error:+.1%})"
            )
        return lines

    def summary(self) -> list[str]:
        return [
            f"{self.device}: largest training batch for {self.model}, {self.optimizer}: {line}"
            for line in self._lines()
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": "predict-then-verify",
            "model": self.model,
            "device": self.device,
            "input_shape": list(self.input_shape),
            "optimizer": self.optimizer,
            "fixed_bytes": self.fit.fixed_bytes,
            "per_sample_bytes": self.fit.per_sample_bytes,
            "probes": [p.to_dict() for p in self.fit.points],
            "budget_bytes": self.budget_bytes,
            "predicted_batch": self.predicted_batch,
            "predicted_bytes": self.predicted_bytes,
            "capped": self.capped,
            "verified": self.verified,
            "verification": None if self.verification is None else self.verification.to_dict(),
            "prediction_error": self.prediction_error,
        }

    def __str__(self) -> str:
        shape = "×".join(map(str, self.input_shape))
        lines = [
            f"Largest training batch of {self.model} ({shape} inputs, {self.optimizer}) on "
            f"{self.device}, budget {format_bytes(self.budget_bytes)}:"
        ]
        lines += [f"  measured {p}" for p in self.fit.points]
        lines += [f"  {line}" for line in self._lines()]
        return "\n".join(lines)


def _model_name(model_fn: Any) -> str:
    name = getattr(model_fn, "__name__", None) or type(model_fn).__name__
    return "model" if name == "<lambda>" else name


def _check_budget(budget_bytes: Any, device: str) -> int:
    from labkit.machine.memory import budget_bytes as labkit_budget
    from labkit.machine.memory import check_fits

    if budget_bytes is None:
        return labkit_budget(device=device)
    if (
        isinstance(budget_bytes, bool)
        or not isinstance(budget_bytes, numbers.Integral)
        or budget_bytes < 1
    ):
        raise ValueError(
            f"budget_bytes must be a positive number of bytes or None, got {budget_bytes!r}"
        )
    return check_fits(int(budget_bytes), device=device, what="budget_bytes")


def largest_batch_cpu(
    model_fn: Callable[[], Any],
    input_shape: Sequence[int],
    budget_bytes: int | None = None,
    *,
    probe_batches: Iterable[int] = PROBE_BATCHES,
    optimizer: str = "adam",
    max_batch: int | None = None,
    verify: bool = True,
) -> CpuBatchFit:
    """Predict the largest training batch that fits ``budget_bytes`` of host memory, then check it.

    Args:
        model_fn: builds a fresh model (a class such as ``labkit.models.cnn.CNN``,
            or ``lambda: MyNet()``).
        input_shape: one sample's shape, e.g. (3, 64, 64).
        budget_bytes: default :func:`labkit.machine.memory.budget_bytes` (25% of the
            free memory); a larger value raises ``MemoryBudgetError``.
        probe_batches: the small batches measured to fit the line.
        max_batch: an upper bound on the batch to verify (a huge budget and
            a tiny model would otherwise make the check slow).
        verify: run the predicted batch and measure its real peak.

    The verification runs only the batch the line predicts within the
    budget, so nothing is allocated beyond it unless the line is wrong, and
    then by the (reported) prediction error only.
    """
    from labkit.batching.step import check_optimizer, check_shape

    model_fn = _check_model_fn(model_fn)
    shape = check_shape(input_shape)
    optimizer = check_optimizer(optimizer)
    _check_probes(probe_batches)
    if max_batch is not None:
        max_batch = _check_batch("max_batch", max_batch)
    if not isinstance(verify, bool):
        raise TypeError(f"verify must be True or False, got {type(verify).__name__}")
    budget = _check_budget(budget_bytes, "cpu")
    import torch

    _check_params_fit(model_fn, optimizer, budget)

    fit = fit_memory(
        model_fn,
        shape,
        probe_batches=probe_batches,
        device="cpu",
        optimizer=optimizer,
        budget_bytes=budget,
    )
    predicted = fit.largest_batch_under(budget)
    capped = False
    if max_batch is not None and predicted > max_batch:
        predicted, capped = max_batch, True
    verification = None
    if verify and predicted >= 1:
        verification = step_memory(
            model_fn, shape, predicted, device=torch.device("cpu"), optimizer=optimizer
        )
    return CpuBatchFit(
        model=_model_name(model_fn),
        device="cpu",
        input_shape=shape,
        optimizer=optimizer,
        fit=fit,
        budget_bytes=budget,
        predicted_batch=predicted,
        capped=capped,
        verification=verification,
    )


# ------------------------------------------------------------------- CUDA: double, then bisect


@dataclass(frozen=True)
class BatchTrial:
    """One attempted batch: whether its training steps ran, and their peak memory."""

    batch_size: int
    fits: bool
    peak_bytes: int | None
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch_size": self.batch_size,
            "fits": self.fits,
            "peak_bytes": self.peak_bytes,
            "error": self.error,
        }


@dataclass(frozen=True)
class CudaBatchSearch:
    """Doubling then bisecting on a GPU: the largest batch that ran, and every trial."""

    model: str
    device: str
    input_shape: tuple[int, ...]
    optimizer: str
    limit_bytes: int
    trials: tuple[BatchTrial, ...]
    reached_max_batch: bool

    @property
    def largest_batch(self) -> int:
        """The largest batch that ran (0 when not even the first did)."""
        return max((t.batch_size for t in self.trials if t.fits), default=0)

    @property
    def peak_bytes(self) -> int | None:
        """The peak memory of the largest batch's steps (``torch.cuda.max_memory_allocated``)."""
        best = [t for t in self.trials if t.fits and t.batch_size == self.largest_batch]
        return best[0].peak_bytes if best else None

    @property
    def first_oom_batch(self) -> int | None:
        """The smallest batch that ran out of memory (None if none did)."""
        return min((t.batch_size for t in self.trials if not t.fits), default=None)

    def _lines(self) -> list[str]:
        if self.largest_batch == 0:
            head = f"no batch fits: batch {self.first_oom_batch} ran out of memory"
        else:
            head = (
                f"largest batch {self.largest_batch:,}, peak {format_bytes(self.peak_bytes or 0)}"
            )
        if self.reached_max_batch:
            tail = "stopped at max_batch, no out-of-memory error"
        elif self.first_oom_batch is not None:
            tail = f"batch {self.first_oom_batch:,} ran out of memory"
        else:
            tail = ""
        limit = f"allocator capped at {format_bytes(self.limit_bytes)}"
        return [f"{head} ({limit}; {len(self.trials)} trials{'; ' + tail if tail else ''})"]

    def summary(self) -> list[str]:
        return [
            f"{self.device}: largest training batch for {self.model}, {self.optimizer}: {line}"
            for line in self._lines()
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": "double-then-bisect",
            "model": self.model,
            "device": self.device,
            "input_shape": list(self.input_shape),
            "optimizer": self.optimizer,
            "limit_bytes": self.limit_bytes,
            "largest_batch": self.largest_batch,
            "peak_bytes": self.peak_bytes,
            "first_oom_batch": self.first_oom_batch,
            "reached_max_batch": self.reached_max_batch,
            "trials": [t.to_dict() for t in self.trials],
        }

    def __str__(self) -> str:
        shape = "×".join(map(str, self.input_shape))
        lines = [
            f"Largest training batch of {self.model} ({shape} inputs, {self.optimizer}) "
            f"on {self.device}:"
        ]
        for t in self.trials:
            what = (
                f"ran, peak {format_bytes(t.peak_bytes or 0)}"
                if t.fits
                else f"out of memory ({t.error})"
            )
            lines.append(f"  batch {t.batch_size:>7,}: {what}")
        lines += [f"  {line}" for line in self._lines()]
        return "\n".join(lines)


def _require_cuda(device: Any) -> Any:
    """``device`` as a CUDA torch.device, or a ValueError naming the CPU alternative."""
    import torch

    dev = torch.device(device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        raise ValueError(
            f"largest_batch_cuda needs a CUDA device and got {device!r}"
            f"{'' if torch.cuda.is_available() else ' (no CUDA GPU is usable here)'}; "
            "on a CPU use largest_batch_cpu, which predicts instead of running out of memory"
        )
    return dev


def _is_oom(exc: BaseException) -> bool:
    import torch

    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


def search_batch(fits: Callable[[int], bool], start: int, max_batch: int, tolerance: float) -> bool:
    """Double from ``start`` until ``fits`` fails or ``max_batch`` is reached, then bisect.

    Returns whether ``max_batch`` was reached without a failure. Bisection
    narrows the gap between the largest batch that fitted and the smallest
    that failed until it is at most ``max(1, tolerance × largest)``.
    """
    from labkit.core.validate import check_real

    if not callable(fits):
        raise TypeError(f"fits must be a function of the batch size, got {type(fits).__name__}")
    start = _check_batch("start", start)
    max_batch = _check_batch("max_batch", max_batch)
    if max_batch < start:
        raise ValueError(f"max_batch must be >= start ({start}), got {max_batch!r}")
    tolerance = check_real("tolerance", tolerance, low=0, high=1, high_open=True)
    lo, hi, batch = 0, None, start
    while True:
        if fits(batch):
            lo = batch
            if batch >= max_batch:
                return True
            batch = min(batch * 2, max_batch)
        else:
            hi = batch
            break
    while hi - lo > max(1, tolerance * lo):
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return False


def _cuda_attempt(
    model: Any, opt: Any, shape: tuple[int, ...], batch: int, dev: Any, base: int
) -> BatchTrial:
    """Two training steps at ``batch``; on out-of-memory, free everything and report it."""
    import torch

    from labkit.accel.common import first_line
    from labkit.batching.step import make_batch, train_step

    x = y = None
    error, peak = "", None
    try:
        x, y = make_batch(model, shape, batch, dev)
        torch.cuda.reset_peak_memory_stats(dev)
        train_step(model, opt, x, y)
        train_step(model, opt, x, y)
        torch.cuda.synchronize(dev)
        peak = max(0, torch.cuda.max_memory_allocated(dev) - base)
    except RuntimeError as exc:  # torch.cuda.OutOfMemoryError is a RuntimeError
        if not _is_oom(exc):
            raise
        error = first_line(exc)[:120]
    # Out of the except block the exception and its frames (which hold tensors) are gone.
    del x, y
    opt.zero_grad(set_to_none=True)
    gc.collect()
    torch.cuda.empty_cache()
    return BatchTrial(batch, not error, peak, error)


def largest_batch_cuda(
    model_fn: Callable[[], Any],
    input_shape: Sequence[int],
    *,
    device: Any = "cuda",
    optimizer: str = "adam",
    start_batch: int = 1,
    max_batch: int = 1 << 20,
    fraction: float = DEFAULT_FRACTION,
    tolerance: float = 0.05,
) -> CudaBatchSearch:
    """Double the batch until a training step runs out of GPU memory, then bisect.

    Each trial runs two training steps (the second with the optimizer's
    state alive) and reads ``torch.cuda.max_memory_allocated``. After an
    out-of-memory error the inputs and gradients are dropped,
    ``gc.collect()`` and ``torch.cuda.empty_cache()`` return the memory,
    and the search goes on. Bisection stops when the gap between the largest
    batch that ran and the smallest that failed is within ``tolerance`` of
    it (0 for the exact answer, one more trial per halving).

    The caching allocator is capped at ``fraction`` of the GPU's free memory
    (:func:`labkit.machine.memory.budget_bytes`) for the search and restored after,
    so the search never takes memory other processes are using. Raise
    ``fraction`` (up to 1.0) to find the device's real limit.
    """
    from labkit.batching.step import check_optimizer, check_shape, make_optimizer
    from labkit.core.validate import check_torch_device
    from labkit.machine.memory import budget_bytes as labkit_budget
    from labkit.machine.memory import check_fraction

    check_torch_device(device, allow_none=False)
    model_fn = _check_model_fn(model_fn)
    shape = check_shape(input_shape)
    optimizer = check_optimizer(optimizer)
    start = _check_batch("start_batch", start_batch)
    top = _check_batch("max_batch", max_batch)
    if top < start:
        raise ValueError(f"max_batch must be >= start_batch ({start}), got {max_batch!r}")
    fraction = check_fraction(fraction)
    if (
        isinstance(tolerance, bool)
        or not isinstance(tolerance, numbers.Real)
        or not 0 <= tolerance < 1
    ):
        raise ValueError(
            f"tolerance must be a number from 0 (exact) up to below 1, got {tolerance!r}"
        )
    import torch

    dev = _require_cuda(device)
    where = str(dev)

    gc.collect()
    torch.cuda.empty_cache()
    limit = labkit_budget(device=where, fraction=fraction)
    total = torch.cuda.get_device_properties(dev).total_memory
    getter = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    previous = getter(dev) if getter is not None else 1.0
    base = torch.cuda.memory_allocated(dev)
    cap = min(1.0, (torch.cuda.memory_reserved(dev) + limit) / total)
    torch.cuda.set_per_process_memory_fraction(cap, dev)
    trials: list[BatchTrial] = []
    try:
        torch.manual_seed(0)
        state = {"model": model_fn().to(dev)}
        state["model"].train()
        state["opt"] = make_optimizer(state["model"], optimizer)

        def attempt(batch: int) -> bool:
            trials.append(_cuda_attempt(state["model"], state["opt"], shape, batch, dev, base))
            return trials[-1].fits

        reached = search_batch(attempt, start, top, tolerance)
        state.clear()
    finally:
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.set_per_process_memory_fraction(previous, dev)
    return CudaBatchSearch(
        model=_model_name(model_fn),
        device=where,
        input_shape=shape,
        optimizer=optimizer,
        limit_bytes=limit,
        trials=tuple(trials),
        reached_max_batch=reached,
    )
