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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from labkit.batching.memory_fit import (
    PROBE_BATCHES,
    MemoryFit,
    StepMemory,
    check_model_fn,
    check_probes,
    fit_memory,
    require_params_fit,
    step_memory,
)
from labkit.batching.step import OPTIMIZERS
from labkit.core.results import JsonRecord
from labkit.core.units import format_bytes
from labkit.core.validate import check_choice, check_positive_int, check_real
from labkit.machine.memory import DEFAULT_FRACTION

#: The image shape of the largest-batch search that ``labkit bench batching --record`` records
#: (labkit.models.cnn.CNN on 3×64×64 images), so that notebook 08's GPU cell runs the same search.
RECORDED_SHAPE = (3, 64, 64)

# --------------------------------------------------------------------------- one step


# --------------------------------------------------------------------------- the line


# ------------------------------------------------------------------- CPU: predict, then verify


@dataclass(frozen=True)
class CpuBatchFit(JsonRecord):
    """The line fitted to measured steps, the batch it predicts, and the run that checked it."""

    method: ClassVar[str] = "predict-then-verify"
    json_extra = ("method", "predicted_bytes", "verified", "prediction_error")

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
                f"verified: batch {v.batch_size:,} ran; {v.method}: {format_bytes(v.peak_bytes)} "
                f"(its tensors, not the process's whole memory), {verdict} "
                f"(prediction off by {self.prediction_error:+.1%})"
            )
        return lines

    def summary(self) -> list[str]:
        return [
            f"{self.device}: largest training batch for {self.model}, {self.optimizer}: {line}"
            for line in self._lines()
        ]

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
    from labkit.machine.memory import require_fits

    if budget_bytes is None:
        return labkit_budget(device=device)
    budget = check_positive_int("budget_bytes", budget_bytes)
    return require_fits(budget, device=device, what="budget_bytes")


def largest_batch_cpu(
    model_fn: Callable[[], Any],
    input_shape: Sequence[int],
    budget_bytes: int | None = None,
    *,
    probe_batches: Sequence[int] = PROBE_BATCHES,
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
    from labkit.batching.step import check_shape

    model_fn = check_model_fn(model_fn)
    shape = check_shape(input_shape)
    optimizer = check_choice("optimizer", optimizer, OPTIMIZERS)
    check_probes(probe_batches)
    if max_batch is not None:
        max_batch = check_positive_int("max_batch", max_batch)
    budget = _check_budget(budget_bytes, "cpu")
    import torch

    require_params_fit(model_fn, optimizer, budget)

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
class BatchTrial(JsonRecord):
    """One attempted batch: whether its training steps ran, and their peak memory."""

    batch_size: int
    fits: bool
    peak_bytes: int | None
    error: str = ""


@dataclass(frozen=True)
class CudaBatchSearch(JsonRecord):
    """Doubling then bisecting on a GPU: the largest batch that ran, and every trial."""

    method: ClassVar[str] = "double-then-bisect"
    json_extra = ("method", "largest_batch", "peak_bytes", "first_oom_batch")

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
    # "cuda" with no index: torch.cuda.get_per_process_memory_fraction (torch 2.11) wants
    # an index, so the current device is named.
    return dev if dev.index is not None else torch.device("cuda", torch.cuda.current_device())


def _is_oom(exc: BaseException) -> bool:
    import torch

    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


def search_batch(fits: Callable[[int], bool], start: int, max_batch: int, tolerance: float) -> bool:
    """Double from ``start`` until ``fits`` fails or ``max_batch`` is reached, then bisect.

    Returns whether ``max_batch`` was reached without a failure. Bisection
    narrows the gap between the largest batch that fitted and the smallest
    that failed until it is at most ``max(1, tolerance × largest)``.
    """
    start = check_positive_int("start", start)
    max_batch = check_positive_int("max_batch", max_batch)
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
    from labkit.batching.step import check_shape, make_optimizer
    from labkit.core.validate import check_torch_device
    from labkit.machine.memory import budget_bytes as labkit_budget
    from labkit.machine.memory import check_fraction

    check_torch_device(device, allow_none=False)
    model_fn = check_model_fn(model_fn)
    shape = check_shape(input_shape)
    optimizer = check_choice("optimizer", optimizer, OPTIMIZERS)
    start = check_positive_int("start_batch", start_batch)
    top = check_positive_int("max_batch", max_batch)
    if top < start:
        raise ValueError(f"max_batch must be >= start_batch ({start}), got {max_batch!r}")
    fraction = check_fraction(fraction)
    tolerance = check_real("tolerance", tolerance, low=0, high=1, high_open=True)
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
