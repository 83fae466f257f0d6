"""Is the device waiting for data? PyTorch DataLoader and tf.data, measured the same way.

A training loop alternates two things: get the next batch, run the step.
When preparing a batch (read the files, decode, augment, collate) takes
longer than the step, the device sits idle between steps however fast it
is: the loop is *input-bound*. A faster GPU then changes nothing; more
loader workers, prefetching and caching do. The symptom is in the loop
itself: the consumer's time splits into *waiting for the next batch* and
*computing*, and a high wait fraction is a low "GPU utilization".

This module measures that split. :class:`~labkit.batching.synthetic.SyntheticImages`
(in :mod:`labkit.batching.synthetic`) is a dataset whose samples cost real work to prepare (about 1 ms each on the reference
machine): a JPEG-like decode (an inverse DCT of 8×8 blocks, done in numpy),
then a random crop, flip, brightness jitter and normalisation. Optional
extras: ``io_ms``, a sleep that stands for storage or network latency (real
loaders do wait on I/O, and a waiting thread uses no CPU), and
``python_ms``, pure-Python work that holds the GIL. Nothing is downloaded.
:func:`measure_loader` runs a training-like loop over a
``torch.utils.data.DataLoader``, and :func:`labkit.batching.tf_data.measure_tf_pipeline`
one over a ``tf.data`` pipeline with the same samples and the same step;
:func:`labkit.batching.synthetic.thread_scaling` measures how much a thread pool
(tf.data's parallel map) can gain on a preparation, which the GIL decides.

The step: with ``step_ms`` (the default) it is a fixed wait during which the
host is idle, standing in for an accelerator that computes while the CPU is
free, which is what a GPU does. With ``step_ms=None`` it is a real training
step of :class:`labkit.models.cnn.CNN` on ``device``; on a CPU-only machine that
step competes with the loader's workers for the same cores, which is a
lesson too.

Why not :func:`labkit.timing.bench.bench`: the wait is a property of a running
loop (the workers prepare batches while the step runs), not of a function
that can be called in isolation. Each step reads the clock around
``next(batches)`` and around the step, and synchronises the device before
each read, the rule ``bench`` itself follows; the samples then become
:class:`labkit.timing.bench.Timing` objects (median, IQR) like any other.
"""

from __future__ import annotations

import inspect
import math
import os
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from labkit.batching.synthetic import SyntheticImages
from labkit.core.results import JsonRecord
from labkit.core.units import format_duration
from labkit.core.validate import check_choice, check_int, check_ms
from labkit.timing.bench import Timing

#: A consumer waiting this share of the time or more is called input-bound.
INPUT_BOUND_FRACTION = 0.25

#: The DataLoader configurations :func:`compare_loaders` measures by default.
DEFAULT_LOADER_CONFIGS: tuple[dict[str, Any], ...] = (
    {"num_workers": 0},
    {"num_workers": 1},
    {"num_workers": 2},
    {"num_workers": 3},
    {"num_workers": 4},
)

PIN_MEMORY_CPU_NOTE = (
    "pin_memory=True was not passed on: it pins batches in page-locked host memory so that "
    "copies to a CUDA GPU are faster and can overlap compute; without CUDA it does nothing "
    "(and the DataLoader would warn)"
)


# --------------------------------------------------------------------------- the samples


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class LoaderRun(JsonRecord):
    """The steady state of one input pipeline feeding one step, per step and in total.

    ``wait`` holds the time each step spent in ``next(batches)``, ``compute``
    the time in the step; ``wait_fraction`` is total wait over total time,
    and ``1 - wait_fraction`` is how busy the device was. ``startup_ms`` is
    the time to the first batch (starting workers, filling buffers), kept out
    of everything else.
    """

    json_extra = ("samples_per_s", "wait_fraction", "median_wait_ms")

    label: str
    framework: str
    batch_size: int
    steps: int
    step: str
    device: str
    dataset: str
    wait: Timing = field(repr=False)
    compute: Timing = field(repr=False)
    startup_ms: float
    notes: tuple[str, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def total_ms(self) -> float:
        return math.fsum(self.wait.samples_ms) + math.fsum(self.compute.samples_ms)

    @property
    def wait_fraction(self) -> float:
        return math.fsum(self.wait.samples_ms) / self.total_ms if self.total_ms > 0 else 0.0

    @property
    def device_busy_fraction(self) -> float:
        """The share of the loop's time spent in the step: the best "GPU utilization" can be."""
        return 1.0 - self.wait_fraction

    @property
    def samples_per_s(self) -> float:
        return (
            self.batch_size * self.steps / (self.total_ms / 1e3) if self.total_ms > 0 else math.inf
        )

    @property
    def median_wait_ms(self) -> float:
        return self.wait.median_ms

    @property
    def mean_wait_ms(self) -> float:
        return math.fsum(self.wait.samples_ms) / self.wait.n

    @property
    def mean_compute_ms(self) -> float:
        return math.fsum(self.compute.samples_ms) / self.compute.n

    @property
    def input_bound(self) -> bool:
        return self.wait_fraction >= INPUT_BOUND_FRACTION

    def verdict(self) -> str:
        if self.input_bound:
            return f"input-bound: the step waits for data {self.wait_fraction:.0%} of the time"
        return f"keeps up: the step waits for data {self.wait_fraction:.0%} of the time"

    def __str__(self) -> str:
        from labkit.core.units import format_samples_per_s

        lines = [
            f"{self.label} ({self.framework}), batch {self.batch_size}, "
            f"{self.steps} steps of {self.step}:",
            f"  {format_samples_per_s(self.samples_per_s)}; per step: waiting for data "
            f"{format_duration(self.mean_wait_ms)}, "
            f"computing {format_duration(self.mean_compute_ms)} "
            f"(means; median wait {format_duration(self.median_wait_ms)})",
            f"  {self.verdict()}; first batch after {format_duration(self.startup_ms)}",
        ]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


#: The start of torch's warning about more DataLoader workers than CPUs (torch.utils.data).
_TOO_MANY_WORKERS = r"This DataLoader will create \d+ worker process"


def usable_cpus() -> int:
    """The CPUs this process may use, which DataLoader workers share.

    Its affinity (``taskset``, a Slurm allocation), and no more than a cgroup
    CPU quota allows (a JupyterHub ``cpu_limit``, Docker's ``--cpus``), which
    the affinity does not show. torch's too-many-workers warning reads the
    affinity only.
    """
    from labkit.machine.container import container_cpus
    from labkit.machine.cpu import allowed_cpus

    affinity = allowed_cpus()
    allowed = len(affinity) if affinity is not None else os.cpu_count() or 1
    quota = container_cpus()
    return allowed if quota is None else max(1, min(allowed, math.ceil(quota)))


@dataclass(frozen=True)
class LoaderComparison(JsonRecord):
    """Several pipelines feeding the same step, side by side.

    ``usable_cpus`` is how many CPUs the process could run on when it
    measured (DataLoader workers share them); None where it was not read.
    """

    runs: tuple[LoaderRun, ...]
    usable_cpus: int | None = None

    def run(self, label: str) -> LoaderRun:
        check_choice("label", label, [r.label for r in self.runs])
        return next(r for r in self.runs if r.label == label)

    @property
    def best(self) -> LoaderRun:
        return max(self.runs, key=lambda r: r.samples_per_s)

    def summary(self) -> list[str]:
        from labkit.core.units import format_samples_per_s

        return [
            f"{r.device}: {r.label} ({r.framework}, batch {r.batch_size}, {r.step}): "
            f"{format_samples_per_s(r.samples_per_s)}, "
            f"waiting for data {r.wait_fraction:.0%} of the time"
            for r in self.runs
        ]

    def __str__(self) -> str:
        from labkit.core.units import format_samples_per_s

        first = self.runs[0]
        head = ["pipeline", "samples/s", "wait/step", "compute/step", "waiting", "first batch"]
        rows = [head] + [
            [
                r.label,
                format_samples_per_s(r.samples_per_s),
                format_duration(r.mean_wait_ms),
                format_duration(r.mean_compute_ms),
                f"{r.wait_fraction:.0%}",
                format_duration(r.startup_ms),
            ]
            for r in self.runs
        ]
        widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
        lines = [
            f"Input pipelines, batch {first.batch_size}, step: {first.step} on {first.device}; "
            f"samples: {first.dataset}"
        ]
        for row in rows:
            cells = [row[0].ljust(widths[0])] + [
                c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)
            ]
            lines.append("  " + "  ".join(cells))
        notes = list(dict.fromkeys(n for r in self.runs for n in r.notes))
        lines += [f"  note: {n}" for n in notes]
        if self.usable_cpus is not None:
            lines.append(
                f"  CPUs this process may use: {self.usable_cpus} (worker processes beyond that "
                "take turns on them)"
            )
        return "\n".join(lines)


# --------------------------------------------------------------------------- the loop


def _step_fn(
    step_ms: float | None, device: Any, optimizer: str = "sgd"
) -> tuple[Callable[[Any, Any], None], str]:
    """The consumer's step and its description: a fixed idle wait, or a real CNN training step."""
    import torch

    if step_ms is not None:

        def fixed(x: Any, y: Any) -> None:
            if device.type == "cuda":  # the batch still travels to the GPU, then the host idles
                x.to(device, non_blocking=True)
                torch.cuda.synchronize(device)
            time.sleep(step_ms / 1e3)

        return fixed, f"a fixed {format_duration(step_ms)} step (host idle, like a GPU computing)"
    from labkit.batching.step import make_optimizer, train_step
    from labkit.models.cnn import CNN

    torch.manual_seed(0)
    model = CNN().to(device)
    opt = make_optimizer(model, optimizer)

    def real(x: Any, y: Any) -> None:
        x = torch.as_tensor(x).to(device, non_blocking=True)
        y = torch.as_tensor(y).to(device, non_blocking=True)
        train_step(model, opt, x, y)

    return real, f"a CNN training step on {device}"


def _mp_context() -> Any:
    """forkserver where the platform has it (workers fork from a clean server), else spawn.

    Plain fork copies the notebook's process, TensorFlow's and torch's
    thread pools included, which can deadlock; spawn and forkserver start
    clean and import the dataset class by name, which is why it lives in a
    module (``labkit.batching.synthetic``), not in a notebook. The forkserver
    preloads torch and this module (which imports that one) once, so a worker starts
    in tens of milliseconds instead of re-importing torch.
    """
    import multiprocessing

    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["torch", "labkit.batching.loaders"])
        return ctx
    return multiprocessing.get_context("spawn")


def worker_init(worker_id: int) -> None:
    """One torch thread per worker: N workers × N threads each would oversubscribe the cores."""
    import torch

    torch.set_num_threads(1)


def profile_loop(
    batches: Iterable[Any],
    step: Callable[[Any, Any], None],
    sync: Callable[[], None],
    warmup_steps: int,
    steps: int,
) -> tuple[float, list[float], list[float]]:
    """Clock ``next(batches)`` and ``step`` apart: startup ms, then wait and compute samples."""
    it = iter(batches)
    sync()
    start = time.perf_counter()
    x, y = next(it)
    startup_ms = (time.perf_counter() - start) * 1e3
    step(x, y)
    waits: list[float] = []
    computes: list[float] = []
    for i in range(warmup_steps + steps):
        sync()
        t0 = time.perf_counter()
        x, y = next(it)
        t1 = time.perf_counter()
        step(x, y)
        sync()
        t2 = time.perf_counter()
        if i >= warmup_steps:
            waits.append((t1 - t0) * 1e3)
            computes.append((t2 - t1) * 1e3)
    del it
    return startup_ms, waits, computes


def require_batches_fit(dataset: SyntheticImages, batch_size: int, batches: int, what: str) -> None:
    """Refuse a batch size whose batches held at once exceed labkit's memory budget.

    A sample is its decoded image (3×decode_px²) and its augmented one
    (3×image_size²), float32. Worker processes' own memory is not counted.
    """
    from labkit.machine.memory import require_fits

    sample_bytes = 4 * 3 * (dataset.decode_px**2 + dataset.image_size**2)
    require_fits(batch_size * sample_bytes, arrays=batches, what=what, name="batch_size")


def loop_args(
    batch_size: Any, steps: Any, warmup_steps: Any, step_ms: Any
) -> tuple[int, int, int, float | None]:
    return (
        check_int("batch_size", batch_size, minimum=1),
        check_int("steps", steps, minimum=1),
        check_int("warmup_steps", warmup_steps, minimum=0),
        None if step_ms is None else check_ms("step_ms", step_ms, allow_zero=True),
    )


def _check_loader_args(
    num_workers: Any,
    prefetch_factor: Any,
    batch_size: Any,
    steps: Any,
    warmup_steps: Any,
    step_ms: Any,
    device: Any,
    **_: Any,
) -> tuple[int, int | None, int, int, int, float | None]:
    """:func:`measure_loader`'s arguments, checked before torch is imported or a worker started.

    It takes all of them (``**bound.arguments``) and checks the numbers and the device.
    """
    from labkit.core.validate import check_torch_device

    num_workers = check_int("num_workers", num_workers, minimum=0)
    if prefetch_factor is not None:
        prefetch_factor = check_int("prefetch_factor", prefetch_factor, minimum=1)
        if num_workers == 0:
            raise ValueError(
                "prefetch_factor needs num_workers > 0: without workers nothing is prepared ahead"
            )
    batch_size, steps, warmup_steps, step_ms = loop_args(batch_size, steps, warmup_steps, step_ms)
    check_torch_device(device)
    return num_workers, prefetch_factor, batch_size, steps, warmup_steps, step_ms


def measure_loader(
    *,
    num_workers: int = 0,
    pin_memory: bool = False,
    prefetch_factor: int | None = None,
    batch_size: int = 32,
    steps: int = 20,
    warmup_steps: int = 2,
    step_ms: float | None = 20.0,
    dataset: SyntheticImages | None = None,
    device: Any = None,
    label: str | None = None,
) -> LoaderRun:
    """Feed a step from a ``torch.utils.data.DataLoader`` and measure how long it waits.

    Args:
        num_workers: 0 prepares every batch in the training loop itself
            (nothing overlaps); N > 0 starts N worker processes that prepare
            batches while the step runs.
        pin_memory: page-locked batches for fast, asynchronous copies to a
            CUDA GPU. Without CUDA it is not passed on (a note says so).
        prefetch_factor: batches each worker prepares ahead (DataLoader
            default 2); only with workers.
        batch_size, steps, warmup_steps: the measured steps follow
            ``warmup_steps`` unmeasured ones and the first batch.
        step_ms: a fixed step with the host idle (a stand-in for a GPU
            step); None runs a real CNN training step on ``device``.
        dataset: default ``SyntheticImages()`` (about 1 ms per sample on the reference machine).
        device: where the step runs (None: the best device).
    """
    from labkit.core.optional import import_optional
    from labkit.machine.report import resolve_torch_device
    from labkit.timing.sync import synchronizer_for

    num_workers, prefetch_factor, batch_size, steps, warmup_steps, step_ms = _check_loader_args(
        num_workers, prefetch_factor, batch_size, steps, warmup_steps, step_ms, device
    )
    torch = import_optional("torch", "labkit.batching.loaders.measure_loader")
    dataset = SyntheticImages() if dataset is None else dataset
    # the batch in the step, the next one, and those each worker prepares ahead
    require_batches_fit(
        dataset, batch_size, 2 + num_workers * (prefetch_factor or 2), "measure_loader"
    )
    dev = resolve_torch_device(device)
    sync = synchronizer_for(str(dev)).synchronize
    notes: list[str] = []
    pin = pin_memory and dev.type == "cuda" and torch.cuda.is_available()
    if pin_memory and not pin:
        notes.append(PIN_MEMORY_CPU_NOTE)

    data = dataset.with_length(batch_size * (warmup_steps + steps + 2))
    kwargs: dict[str, Any] = {
        "batch_size": batch_size,
        "shuffle": False,
        "drop_last": True,
        "pin_memory": pin,
    }
    if num_workers:
        kwargs.update(
            num_workers=num_workers,
            multiprocessing_context=_mp_context(),
            worker_init_fn=worker_init,
            prefetch_factor=prefetch_factor or 2,
        )
    step, step_text = _step_fn(step_ms, dev)
    try:
        with warnings.catch_warnings():
            # torch warns on stderr, when the loader is made and again when it starts, if there
            # are more workers than CPUs: the comparison prints the CPU count on every machine.
            warnings.filterwarnings("ignore", message=_TOO_MANY_WORKERS, category=UserWarning)
            loader = torch.utils.data.DataLoader(data, **kwargs)
            startup_ms, waits, computes = profile_loop(loader, step, sync, warmup_steps, steps)
    except RuntimeError as exc:
        if num_workers and "exited unexpectedly" in str(exc):
            raise RuntimeError(
                f"{exc}. Workers start like multiprocessing's spawn: in a script, put the "
                'code that measures under `if __name__ == "__main__":` (notebooks need nothing)'
            ) from exc
        raise
    del loader
    if label is None:
        label = f"num_workers={num_workers}"
        if pin_memory:
            label += ", pin_memory"
        if prefetch_factor is not None:
            label += f", prefetch_factor={prefetch_factor}"
    return LoaderRun(
        label=label,
        framework="torch DataLoader",
        batch_size=batch_size,
        steps=steps,
        step=step_text,
        device=str(dev),
        dataset=dataset.describe(),
        wait=Timing(tuple(waits), label="waiting for the next batch", device="cpu"),
        compute=Timing(tuple(computes), label="the step", device=str(dev)),
        startup_ms=startup_ms,
        notes=tuple(notes),
        settings={
            "num_workers": num_workers,
            "pin_memory": pin,
            "prefetch_factor": prefetch_factor,
            "usable_cpus": usable_cpus(),  # torch's too-many-workers warning is silenced above
        },
    )


def compare_loaders(
    configs: Sequence[dict[str, Any]] | None = None, **common: Any
) -> LoaderComparison:
    """:func:`measure_loader` once per config (default num_workers 0 to 4), same step and samples.

    ``common`` goes to every run (``batch_size``, ``steps``, ``step_ms``,
    ``dataset``, ``device``...); a config's own keys win.
    """
    configs = DEFAULT_LOADER_CONFIGS if configs is None else configs
    if not configs:
        raise ValueError(
            "configs must be a non-empty list of dicts of measure_loader arguments, "
            "e.g. [{'num_workers': 0}, {'num_workers': 2}]"
        )
    signature = inspect.signature(measure_loader)
    for config in configs:  # every run's arguments are checked before the first one starts
        bound = signature.bind(**{**common, **config})
        bound.apply_defaults()
        _check_loader_args(**bound.arguments)
    if "dataset" not in common:
        common["dataset"] = SyntheticImages()
    cpus = usable_cpus()
    return LoaderComparison(
        tuple(measure_loader(**{**common, **config}) for config in configs), usable_cpus=cpus
    )


# --------------------------------------------------------------------------- tf.data


# --------------------------------------------------------------------------- plot
