"""Images per second against batch size: the measurement behind "batch for the GPU".

One image leaves most of a GPU idle; a batch fills more of it. Each point of
the curve of images/s against batch size is timed with :func:`labkit.bench`
(synchronised, warmed up, median of many calls, with its IQR and the page
faults per call), and batches that would not fit in memory are skipped with a
note rather than taking the machine down (:mod:`labkit.machine.memory`).

What is timed: by default a forward pass under ``torch.inference_mode``
(inference: no autograd records), on the same random batch every call, so the
input stays in whatever cache holds it. ``inference=False`` times a training
step's compute instead. On CUDA, ``torch.backends.cudnn.benchmark`` is on
while the points are timed (cuDNN tries its algorithms once per shape and
keeps the fastest), since every call has the same shape.

On a CPU, a point can be slow because the C allocator hands freed activations
back to the OS and faults them in again on every call
(:mod:`labkit.machine.allocator`): ``minor_faults_per_call`` shows it.

Two switches that notebook 04 turns on, both also usable on the CPU:

- ``amp_dtype``: run under ``torch.autocast(device_type, dtype)``.
  bfloat16 works on CPUs too (float16 autocast needs a GPU, or a recent torch).
- ``channels_last``: store images and weights NHWC
  (``memory_format=torch.channels_last``), the layout Tensor Cores prefer.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from labkit.core.optional import import_optional

#: Bytes held per input byte during one forward pass of the course's one-conv CNN
#: (input, 32-channel conv output, ReLU output, pooled map; with slack). A
#: rough, deliberately high estimate: it only decides which batches to skip.
ACTIVATION_FACTOR = 30


@dataclass(frozen=True)
class BatchThroughput:
    """One point of the curve: a batch size, its median time per call, and images/s.

    ``images_per_s_low`` and ``_high`` are the images/s at the slower and
    faster quartile of the calls (the IQR, as a rate); ``minor_faults_per_call``
    the page faults each call took (None where the OS does not count them).
    """

    batch_size: int
    image_size: int
    images_per_s: float
    median_ms: float
    device: str
    dtype: str
    channels_last: bool
    inference: bool
    timing: Any  # labkit.Timing

    @property
    def images_per_s_low(self) -> float:
        return self.batch_size / (self.timing.q3_ms / 1e3) if self.timing.q3_ms > 0 else math.inf

    @property
    def images_per_s_high(self) -> float:
        return self.batch_size / (self.timing.q1_ms / 1e3) if self.timing.q1_ms > 0 else math.inf

    @property
    def minor_faults_per_call(self) -> float | None:
        faults: float | None = self.timing.minor_faults_per_call
        return faults

    def __str__(self) -> str:
        faults = self.minor_faults_per_call
        fault_text = "" if faults is None else f", {faults:,.0f} page faults per call"
        return (
            f"batch {self.batch_size:>4}: {self.images_per_s:>10,.0f} images/s "
            f"(IQR {self.images_per_s_low:,.0f} to {self.images_per_s_high:,.0f}; "
            f"{self.median_ms:.3g} ms per batch{fault_text}; {self.dtype}, "
            f"{'channels_last' if self.channels_last else 'NCHW'}, {self.device})"
        )


def throughput_by_batch(
    model: Any,
    batch_sizes: Sequence[int],
    image_size: int,
    *,
    device: Any = None,
    channels_last: bool = False,
    amp_dtype: Any = None,
    inference: bool = True,
    warmup_ms: float = 25.0,
    rep_ms: float = 200.0,
    memory_fraction: float = 0.25,
) -> list[BatchThroughput]:
    """Time ``model`` on random 3×image_size×image_size batches; one point per batch size.

    ``inference=True`` times a forward pass under ``torch.inference_mode``;
    ``False`` times a training step's compute (forward, backward, gradients
    cleared before each call; no optimizer step). ``device=None`` picks the
    best device. ``amp_dtype`` (e.g. ``torch.bfloat16``) runs under autocast;
    it raises ``ValueError`` naming the problem if this device's autocast
    does not support that dtype.

    Batch sizes whose estimated memory exceeds ``memory_fraction`` of the free
    memory are skipped with a warning. The model is moved to the device (and
    to channels_last) in place.
    """
    from labkit.core.validate import (
        check_int,
        check_ms,
        check_real,
        check_sizes,
        check_torch_device,
    )
    from labkit.machine.memory import (
        MemoryBudgetError,
        MemoryBudgetWarning,
        budget_bytes,
        fit_sizes,
        format_bytes,
        is_out_of_memory,
        memory_device,
        out_of_memory_message,
        release_memory,
    )
    from labkit.machine.report import resolve_torch_device

    sizes = list(check_sizes(batch_sizes, "batch_sizes"))
    image_size = check_int("image_size", image_size, minimum=2)  # pixels per side
    check_ms("warmup_ms", warmup_ms, allow_zero=True)
    check_ms("rep_ms", rep_ms)
    check_real("memory_fraction", memory_fraction, low=0, high=1, low_open=True)
    check_torch_device(device)
    torch = import_optional("torch", "throughput_by_batch")
    device = resolve_torch_device(device)

    def autocast() -> Any:
        if amp_dtype is None:
            return contextlib.nullcontext()
        try:
            return torch.autocast(device_type=device.type, dtype=amp_dtype)
        except (RuntimeError, ValueError) as exc:
            raise ValueError(
                f"autocast to {amp_dtype} is not supported on {device.type} here ({exc}); "
                "on a CPU use amp_dtype=torch.bfloat16, or amp_dtype=None for float32"
            ) from exc

    with warnings.catch_warnings():  # torch warns (not raises) for unsupported autocast dtypes
        warnings.simplefilter("error", UserWarning)
        try:
            autocast()
        except UserWarning as exc:
            raise ValueError(
                f"autocast to {amp_dtype} is not supported on {device.type} ({exc}); "
                "on a CPU use amp_dtype=torch.bfloat16, or amp_dtype=None for float32"
            ) from exc

    bytes_per_image = 3 * image_size * image_size * 4
    where = str(device)
    kept, dropped = fit_sizes(
        [b * bytes_per_image * ACTIVATION_FACTOR for b in sizes],
        device=where if device.type in ("cpu", "cuda") else "cpu",
        fraction=memory_fraction,
    )
    fitting = sorted({b for b in sizes if b * bytes_per_image * ACTIVATION_FACTOR in set(kept)})
    if dropped:
        budget = budget_bytes(device=memory_device(device), fraction=memory_fraction)
        too_big = sorted(set(sizes) - set(fitting))
        text = (
            f"throughput_by_batch: skipped {len(too_big)} batch size(s) "
            f"({', '.join(map(str, too_big))}): a batch "
            f"of {too_big[0]} needs about {format_bytes(too_big[0] * bytes_per_image * ACTIVATION_FACTOR)} "
            f"(inputs and activations), over the {format_bytes(budget)} budget "
            f"({memory_fraction:.0%} of the free memory)"
        )
        if not fitting:
            raise MemoryBudgetError(
                text + ". Pass smaller batch_sizes or image_size, or close other programs."
            )
        warnings.warn(
            text + f"; the largest batch measured is {fitting[-1]}.",
            MemoryBudgetWarning,
            stacklevel=2,
        )

    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(device=device, memory_format=memory_format)
    model.train(not inference)
    params = [p for p in model.parameters() if p.requires_grad]
    dtype_name = str(amp_dtype).replace("torch.", "") if amp_dtype is not None else "float32"

    results: list[BatchThroughput] = []
    cudnn = torch.backends.cudnn if device.type == "cuda" else None
    tuned_before = cudnn.benchmark if cudnn is not None else False
    if cudnn is not None:
        cudnn.benchmark = True  # one shape per point: let cuDNN pick its fastest algorithm
    try:
        for batch in fitting:
            try:
                timing = _time_batch(
                    torch,
                    model,
                    batch,
                    image_size,
                    memory_format,
                    inference,
                    autocast,
                    params,
                    where,
                    warmup_ms,
                    rep_ms,
                )
            except Exception as exc:  # out of memory: the sweep ends at the batches that fit
                if not is_out_of_memory(exc):
                    raise
                timing = None
            if timing is None:
                largest = f"batch {results[-1].batch_size}" if results else None
                note = out_of_memory_message(
                    "throughput_by_batch", f"batch {batch}", largest, where
                )
                release_memory(where)
                if not results:
                    raise MemoryBudgetError(note)
                print(note)  # the largest batch that fit is results[-1].batch_size
                break
            results.append(
                BatchThroughput(
                    batch_size=batch,
                    image_size=image_size,
                    images_per_s=batch / (timing.median_ms / 1e3),
                    median_ms=timing.median_ms,
                    device=where,
                    dtype=dtype_name,
                    channels_last=channels_last,
                    inference=inference,
                    timing=timing,
                )
            )
    finally:
        if cudnn is not None:
            cudnn.benchmark = tuned_before
    return results


def _time_batch(
    torch: Any,
    model: Any,
    batch: int,
    image_size: int,
    memory_format: Any,
    inference: bool,
    autocast: Any,
    params: list[Any],
    where: str,
    warmup_ms: float,
    rep_ms: float,
) -> Any:
    """Time the model on one random batch (see :func:`throughput_by_batch`)."""
    from labkit.timing.bench import bench

    x = torch.randn(batch, 3, image_size, image_size, device=where)
    x = x.contiguous(memory_format=memory_format)

    if inference:

        def step(x: Any = x) -> Any:
            with torch.inference_mode(), autocast():
                return model(x)

    else:

        def step(x: Any = x) -> Any:
            with autocast():
                out = model(x)
            out.float().sum().backward()
            return out

    return bench(
        step,
        warmup_ms=warmup_ms,
        rep_ms=rep_ms,
        device=where,
        grad_to_none=None if inference else params,
        label=f"batch {batch}",
        warn=False,
    )
