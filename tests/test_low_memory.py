"""Low memory, simulated: every probe and sweep shrinks to fit or stops with a clear message.

The fixture makes labkit read 64 MiB, 8 MiB, 1 MiB or nothing as the free
memory (it replaces what :func:`labkit.machine.memory.available_bytes` reads, the one
source every probe sizes its buffers from). Each probe in :data:`PROBES` then
either returns results for what fits, saying what it dropped, or raises
:class:`~labkit.machine.memory.MemoryBudgetError` with the sizes and the free memory;
and what it allocates never exceeds its fraction of the free memory:

- NumPy and Python objects are traced with :mod:`tracemalloc` (NumPy reports
  its buffers to it);
- torch's CPU tensors with ``torch.profiler``'s memory events (each carries
  the allocator's running total), as :mod:`labkit.batching.largest` does.

The peak may exceed the budget by :data:`SLACK_BYTES` only: Python objects
(timings, closures, a progress bar) that no probe sizes. With nothing free,
every probe must refuse. GPU sweeps run behind a fake ``torch.cuda`` whose
allocations fail above a size, and must end cleanly (the rows so far kept,
memory released, the largest size that fit printed and in the result).

Left out of :data:`PROBES`, on purpose:

- GPU-only probes (``transfers.device_copy``, ``copy_compute_overlap``,
  ``accel.async_launch_demo``, the CuPy kernels): no GPU here. Their sizing
  is tested through the fake GPU below and through ``cupy_run``'s sizing
  helpers; the allocations themselves run only on a real GPU.
- TensorFlow probes (``tf_xla_benchmark``, ``mixed_precision_keras``,
  ``measure_tf_pipeline``, ``profile_keras_training``, the Keras RNNs): TF's
  allocator is invisible to both tracers, and importing TF costs seconds.
  Their refusal when nothing fits is checked before TF is imported.
- Multi-process probes (``labkit.scaling``): the workers allocate in other
  processes; the launcher's check (before any process starts) is tested.
- ``largest_batch_cpu``, ``batch_sweep`` and ``profile_training`` run
  ``torch.profiler`` themselves, and profilers do not nest: their steps'
  peaks are read from their own measurements instead (see the tests below),
  and ``profile_training`` is checked for its outcome only.
- Probes with constant tiny buffers: ``crossover.launch_overhead`` (three
  1-element tensors), ``accel.tf_soft_placement_demo`` (64×64 by default),
  ``roofline.py`` (arithmetic only), ``input_pipeline.sample_cost`` and
  ``thread_scaling`` (one sample at a time).
"""

from __future__ import annotations

import contextlib
import re
import tracemalloc
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from labkit.bandwidth import transfers as transfers_
from labkit.batching import memory_fit
from labkit.kernels import experiments
from labkit.machine import memory
from labkit.machine.memory import DEFAULT_FRACTION, MemoryBudgetError, MemoryBudgetWarning

KiB, MiB, GiB = 1024, 1024**2, 1024**3

#: The free memory each probe is run with.
FREE_LEVELS = (64 * MiB, 8 * MiB, 1 * MiB, 0)
#: Allowance over the budget for Python objects no probe sizes (timings, closures,
#: interpreter caches): small next to the 16 MiB budget of 64 MiB free.
SLACK_BYTES = 512 * KiB
#: Time budgets: the smallest each probe accepts (labkit.accel's must be above 0).
FAST = {"warmup_ms": 0.0, "rep_ms": 1.0}
FAST_ACCEL = {"warmup_ms": 0.1, "rep_ms": 1.0}

#: A size in a message: "4 MiB", "256 KiB", "0 B".
SIZE_IN_TEXT = re.compile(r"\b\d+(\.\d+)? (B|KiB|MiB|GiB|TiB)\b")


@pytest.fixture(params=FREE_LEVELS, ids=lambda b: f"{b // KiB}KiB-free")
def free_bytes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """labkit reads ``request.param`` bytes free on the host and on any GPU."""
    return _simulate_free(monkeypatch, request.param)


def _simulate_free(monkeypatch: pytest.MonkeyPatch, free: int) -> int:
    monkeypatch.setattr(memory, "_host_available_bytes", lambda: free)
    monkeypatch.setattr(memory, "_cuda_free_bytes", lambda index: free)
    monkeypatch.setattr(memory, "_cuda_total_bytes", lambda index: 80 * GiB)
    return free


# --------------------------------------------------------------------------- measuring


@dataclass
class Outcome:
    """What a probe did: its result or its exception, its peak allocation, its warnings."""

    result: Any
    error: BaseException | None
    peak_bytes: int
    warnings: list[warnings.WarningMessage]

    def warned(self) -> bool:
        return any(issubclass(w.category, MemoryBudgetWarning) for w in self.warnings)


def run_measured(probe: Callable[[], Any], *, torch_too: bool) -> Outcome:
    """Run ``probe``; its peak is NumPy/Python's (tracemalloc) plus torch's (profiler).

    The two tracers see disjoint allocations (a tensor made ``from_numpy``
    shares NumPy's buffer), so the sum bounds the peak from above.
    """
    result = error = None
    profiler: Any = contextlib.nullcontext()
    if torch_too:
        from torch.profiler import ProfilerActivity, profile

        profiler = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with warnings.catch_warnings(record=True) as caught, profiler as prof:
        warnings.simplefilter("always")
        tracemalloc.start()
        try:
            result = probe()
        except Exception as exc:  # the outcome is checked by the caller
            error = exc
        traced = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()  # before the profiler turns its events into Python objects
    torch_peak = 0
    if torch_too:
        from labkit.batching.memory_fit import _allocation_peak

        torch_peak = _allocation_peak(prof) or 0
    return Outcome(result, error, traced + torch_peak, list(caught))


def assert_clear_refusal(error: BaseException | None) -> None:
    """A MemoryBudgetError that gives sizes and says what is free."""
    if not isinstance(error, MemoryBudgetError):
        raise AssertionError(f"expected MemoryBudgetError, got {error!r}") from error
    text = str(error)
    assert "free" in text, text
    assert SIZE_IN_TEXT.search(text), text


# --------------------------------------------------------------------------- the probes


def _tiny_mlp() -> Any:
    import torch

    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))


def _dropped_stream(result: Any) -> bool:
    return bool(result.dropped_bytes_per_array)


def _dropped_parallel(result: Any) -> bool:
    from labkit.parallelism.sweep import PYTHON_MAX_SIZE

    limit = PYTHON_MAX_SIZE[result.op]
    return any(
        any(size <= limit or b.backend != "python" for size in b.skipped) for b in result.backends
    )


def _probe_table() -> list[tuple[str, Callable[[], Any], bool, Callable[[Any], bool] | None]]:
    """(name, call, torch allocates, "did it drop sizes?" for sweeps) for every probe."""
    from labkit.accel import compilers, side_by_side, sync_points
    from labkit.bandwidth import pipeline, strided
    from labkit.bandwidth import stream as bandwidth
    from labkit.bandwidth import sweep as stream_sweep
    from labkit.batching.loaders import measure_loader
    from labkit.batching.synthetic import SyntheticImages
    from labkit.models import data
    from labkit.models.throughput import throughput_by_batch
    from labkit.parallelism import sweep as parallel
    from labkit.parallelism.amdahl import measure_thread_scaling
    from labkit.profiling.stalls import time_sync_stall
    from labkit.roofline.measure import measure_op, measure_peak_compute
    from labkit.roofline.model import add_cost, matmul_cost
    from labkit.timing.bench import bench
    from labkit.timing.pitfalls import matmul_workload

    def cnn() -> Any:
        from labkit.models.cnn import CNN

        return CNN()

    return [
        # STREAM kernels: the default (DRAM-sized) array shrinks; an explicit one is checked
        (
            "stream_kernel default size",
            lambda: bandwidth.stream_kernel("copy", min_reps=1, **FAST),
            True,
            None,
        ),
        (
            "stream_kernel 4 MiB",
            lambda: bandwidth.stream_kernel("triad", 4 * MiB, min_reps=1, **FAST),
            True,
            None,
        ),
        (
            "peak_bandwidth default size",
            lambda: bandwidth.peak_bandwidth(min_reps=1, **FAST),
            True,
            None,
        ),
        (
            "stream_sweep default sizes",
            lambda: stream_sweep.stream_sweep(
                ("copy", "add"), points_per_decade=1, min_reps=1, show_progress=False, **FAST
            ),
            True,
            _dropped_stream,
        ),
        (
            "stream_sweep explicit sizes",
            lambda: stream_sweep.stream_sweep(
                ("triad",), [64 * KiB, MiB, 4 * MiB], min_reps=1, show_progress=False, **FAST
            ),
            True,
            _dropped_stream,
        ),
        (
            "strided_read default n, no flush",
            lambda: strided.strided_read(
                (1, 4), flush_cache=False, rep_ms=1.0, max_reps=3, show_progress=False
            ),
            True,
            None,
        ),
        (
            "strided_read with cache flush",
            lambda: strided.strided_read(
                (1, 2), n_elements=1024, rep_ms=1.0, max_reps=3, show_progress=False
            ),
            True,
            None,
        ),
        (
            "bench with a cache flush",
            lambda: bench(lambda: None, flush_l2=True, warn=False, **FAST),
            False,
            None,
        ),
        (
            "pipeline_breakdown 1 MiB",
            lambda: pipeline.pipeline_breakdown(MiB, "scale", "cpu", **FAST),
            True,
            None,
        ),
        (
            "sweep_add default sizes",
            lambda: parallel.sweep_add(
                backends=("python", "numpy", "torch-1-thread"),
                python_max_call_ms=20.0,
                show_progress=False,
                **FAST,
            ),
            True,
            _dropped_parallel,
        ),
        (
            "sweep_matmul explicit sizes",
            lambda: parallel.sweep_matmul(
                [16, 128, 512], backends=("numpy", "torch-all-threads"), show_progress=False, **FAST
            ),
            True,
            _dropped_parallel,
        ),
        (
            "measure_peak_compute",
            lambda: measure_peak_compute(
                "cpu", ("float32", "bfloat16"), (64, 256, 1024), show_progress=False, **FAST
            ),
            True,
            None,
        ),
        ("measure_op add 1M", lambda: measure_op(add_cost(1 << 20), "cpu", **FAST), True, None),
        (
            "measure_op matmul 512",
            lambda: measure_op(matmul_cost(512, 512, 512), "cpu", **FAST),
            True,
            None,
        ),
        (
            "throughput_by_batch",
            lambda: throughput_by_batch(cnn(), [1, 8, 64], image_size=16, device="cpu", **FAST),
            True,
            None,
        ),
        (
            "time_sync_stall",
            lambda: time_sync_stall(1, 8, image_size=16, device="cpu", min_reps=1, **FAST),
            True,
            None,
        ),
        (
            "measure_loader",
            lambda: measure_loader(
                batch_size=8,
                steps=2,
                warmup_steps=0,
                step_ms=0.0,
                dataset=SyntheticImages(64, decode_px=32, image_size=16),
            ),
            True,
            None,
        ),
        ("synthetic_images 512", lambda: data.synthetic_images(512, 16), True, None),
        ("matmul_workload 512", lambda: matmul_workload(512), True, None),
        (
            "measure_thread_scaling",
            lambda: measure_thread_scaling(
                "matmul", (1,), matmul_size=256, rounds=1, show_progress=False, **FAST
            ),
            True,
            None,
        ),
        ("sync_points_benchmark", lambda: sync_points_benchmark_fast(sync_points), True, None),
        (
            "torch_compile_benchmark (no compile)",
            lambda: compilers.torch_compile_benchmark(
                size=1 << 18, compiler=lambda f: f, device="cpu", **FAST_ACCEL
            ),
            True,
            None,
        ),
        (
            "mlp_side_by_side torch",
            lambda: side_by_side.mlp_side_by_side(
                64, (64, 128, 10), variants=("torch",), **FAST_ACCEL
            ),
            True,
            None,
        ),
    ]


def sync_points_benchmark_fast(sync_points: Any) -> Any:
    return sync_points.sync_points_benchmark(2, 128, device="cpu", **FAST_ACCEL)


PROBE_NAMES = [name for name, *_ in _probe_table()]


@pytest.mark.parametrize("name", PROBE_NAMES)
def test_every_probe_fits_its_budget_or_refuses_clearly(name: str, free_bytes: int) -> None:
    ((_, call, torch_too, dropped),) = [p for p in _probe_table() if p[0] == name]
    with warnings.catch_warnings(), contextlib.suppress(MemoryBudgetError):
        warnings.simplefilter("ignore")
        call()  # untraced first: modules a probe imports on first use are not its buffers
    outcome = run_measured(call, torch_too=torch_too)
    budget = int(free_bytes * DEFAULT_FRACTION)
    if free_bytes == 0 or outcome.error is not None:
        assert_clear_refusal(outcome.error)
        assert outcome.peak_bytes <= SLACK_BYTES, "it allocated before it refused"
        return
    assert outcome.peak_bytes <= budget + SLACK_BYTES, (
        f"{name} allocated {outcome.peak_bytes:,} bytes with {free_bytes:,} free "
        f"(budget {budget:,} + slack {SLACK_BYTES:,})"
    )
    if dropped is not None and dropped(outcome.result):
        # A sweep says so either in its table (the rows stay, marked skipped: stream_sweep,
        # issue 13) or with one MemoryBudgetWarning.
        assert outcome.warned() or "skipped: does not fit" in str(outcome.result), (
            f"{name} dropped sizes without saying so"
        )


# --------------------------------------------------------------------------- probes that measure themselves


@pytest.mark.parametrize("free", [64 * MiB, 1 * MiB, 0], ids=lambda b: f"{b // KiB}KiB-free")
def test_largest_batch_cpu_stays_within_its_budget(
    monkeypatch: pytest.MonkeyPatch, free: int
) -> None:
    """It measures its own steps with torch.profiler: each step's peak must fit the budget."""
    from labkit.batching import largest as largest_batch

    _simulate_free(monkeypatch, free)
    budget = int(free * DEFAULT_FRACTION)
    measured: list[int] = []
    real_step = memory_fit.step_memory

    def recording_step(*args: Any, **kwargs: Any) -> Any:
        point = real_step(*args, **kwargs)
        measured.append(point.peak_bytes)
        return point

    monkeypatch.setattr(memory_fit, "step_memory", recording_step)
    try:
        result = largest_batch.largest_batch_cpu(_tiny_mlp, (16,), max_batch=4096)
    except MemoryBudgetError as exc:
        assert_clear_refusal(exc)
        assert not measured or budget < 64 * KiB, "a refused search still ran large steps"
        return
    assert measured and max(measured) <= budget + SLACK_BYTES
    assert result.verification is None or result.verified


@pytest.mark.parametrize("free", [64 * MiB, 8 * MiB, 0], ids=lambda b: f"{b // KiB}KiB-free")
def test_batch_sweep_times_only_batches_whose_step_fits(
    monkeypatch: pytest.MonkeyPatch, free: int
) -> None:
    """batch_sweep fits a memory line with torch.profiler; its largest timed step is re-measured."""
    from labkit.batching import step as training_step
    from labkit.batching import sweep as batching

    _simulate_free(monkeypatch, free)
    budget = int(free * DEFAULT_FRACTION)
    try:
        sweep = batching.batch_sweep(
            "mlp",
            batch_sizes=(1, 16, 256, 4096, 65536),
            modes=("train",),
            device="cpu",
            min_reps=1,
            **FAST,
        )
    except MemoryBudgetError as exc:
        assert_clear_refusal(exc)
        return
    largest = max(sweep.curve("train").batch_sizes)
    assert 65536 in sweep.dropped and "budget" in sweep.memory_note
    step = memory_fit.step_memory(
        lambda: training_step.mlp(), (256,), largest, device="cpu", optimizer="sgd"
    )
    assert step.peak_bytes <= budget + SLACK_BYTES


def test_profile_training_refuses_what_does_not_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    from labkit.profiling.torch_profile import profile_training

    _simulate_free(monkeypatch, 1 * MiB)
    with pytest.raises(MemoryBudgetError) as info:
        profile_training(steps=1, batch=64)
    assert_clear_refusal(info.value)


@pytest.mark.parametrize("free", [8 * MiB, 0], ids=lambda b: f"{b // KiB}KiB-free")
def test_gpu_kernel_sizes_shrink_or_refuse(monkeypatch: pytest.MonkeyPatch, free: int) -> None:
    """The CuPy experiments' sizing, which runs before any GPU work."""

    _simulate_free(monkeypatch, free)
    budget = int(free * DEFAULT_FRACTION)
    if free == 0:
        for size_of in (
            lambda: experiments._elements(None, arrays=3, multiple=1024, what="x", quick=True),
            lambda: experiments._square_side(None, arrays=3, quick=True, what="x"),
        ):
            with pytest.raises(MemoryBudgetError):
                size_of()
        return
    n = experiments._elements(None, arrays=3, multiple=1024, what="the stride sweep", quick=False)
    assert 0 < 3 * 4 * n <= budget
    side = experiments._square_side(None, arrays=3, quick=False, what="the transpose comparison")
    assert 0 < 3 * 4 * side * side <= budget
    with pytest.raises(MemoryBudgetError, match="stride sweep"):
        experiments._elements(1 << 24, arrays=3, multiple=1, what="the stride sweep", quick=False)


def test_launchers_refuse_before_starting_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    from labkit.scaling import launch

    _simulate_free(monkeypatch, 1 * MiB)
    started: list[Any] = []
    monkeypatch.setattr(launch, "run_torchrun", lambda *a, **k: started.append(a))
    with pytest.raises(MemoryBudgetError, match="sizes_bytes") as info:
        launch.allreduce_cost([1024**2, 64 * 1024**2])
    assert_clear_refusal(info.value)
    with pytest.raises(MemoryBudgetError) as info:
        launch.run_ddp(2, width=4096)
    assert_clear_refusal(info.value)
    assert started == []


def test_allreduce_cost_sends_only_the_sizes_that_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    from labkit.scaling import launch

    _simulate_free(monkeypatch, 64 * MiB)  # 16 MiB budget; 2 processes × 3 copies each

    class Launched(Exception):
        pass

    def fake_torchrun(module: str, args: list[str], **kwargs: Any) -> Any:
        raise Launched(args[args.index("--sizes") + 1])

    monkeypatch.setattr(launch, "run_torchrun", fake_torchrun)
    with pytest.raises(Launched) as info:
        launch.allreduce_cost([1024, MiB, 64 * MiB], nproc=2)
    assert str(info.value) == f"1024,{MiB}"


def test_tensorflow_probes_refuse_before_importing_tensorflow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    from labkit.accel.compilers import tf_xla_benchmark
    from labkit.batching.tf_data import measure_tf_pipeline

    _simulate_free(monkeypatch, 0)
    had_tf = "tensorflow" in sys.modules
    for probe in (
        lambda: tf_xla_benchmark(1 << 20),
        lambda: measure_tf_pipeline("parallel+cache", step_ms=1.0),
    ):
        with pytest.raises(MemoryBudgetError) as info:
            probe()
        assert_clear_refusal(info.value)
    assert had_tf or "tensorflow" not in sys.modules


# --------------------------------------------------------------------------- sizes beyond the machine


@pytest.fixture
def one_gib_free(monkeypatch: pytest.MonkeyPatch) -> int:
    """A plausible machine: 1 GiB free of a 16 GiB host, and a GPU with 1 GiB free of 80."""
    monkeypatch.setattr(memory, "_host_total_bytes", lambda: 16 * GiB)
    return _simulate_free(monkeypatch, GiB)


def test_explicit_sizes_beyond_the_machine_are_refused_before_allocating(
    one_gib_free: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from labkit.bandwidth import pipeline, strided
    from labkit.bandwidth import stream as bandwidth
    from labkit.bandwidth import sweep as stream_sweep
    from labkit.parallelism import sweep as parallel
    from labkit.roofline.measure import measure_peak_compute

    allocated: list[int] = []
    monkeypatch.setattr(bandwidth, "allocate_arrays", lambda n, count, device: allocated.append(n))
    monkeypatch.setattr(strided, "_allocate", lambda n, device, dtype: allocated.append(n))
    huge = 10**15
    cases = [
        ("sizes_bytes", lambda: stream_sweep.stream_sweep(sizes_bytes=[64 * KiB, huge])),
        ("bytes_per_array", lambda: bandwidth.stream_kernel("triad", huge)),
        ("n_elements", lambda: strided.strided_read((1, 2), n_elements=huge)),
        ("n_bytes", lambda: pipeline.pipeline_breakdown(huge, device="cpu")),
        ("sizes", lambda: parallel.sweep_add([1024, huge], backends=("numpy",))),
        ("sizes", lambda: measure_peak_compute("cpu", ("float32",), (64, 10**8))),
    ]
    for name, call in cases:
        with pytest.raises(MemoryBudgetError) as info:
            call()
        text = str(info.value)
        assert name in text and "1 GiB" in text and "free" in text, text
    assert allocated == []


def test_a_sweep_drops_sizes_over_the_budget_but_within_the_machine(one_gib_free: int) -> None:
    from labkit.bandwidth import sweep as stream_sweep

    sweep = stream_sweep.stream_sweep(
        ("copy",), [64 * KiB, 512 * MiB], min_reps=1, show_progress=False, **FAST
    )
    assert sweep.sizes_bytes == (64 * KiB,) and sweep.dropped_bytes_per_array == (512 * MiB,)
    assert "512 MiB" in sweep.table() and "skipped: does not fit in memory" in sweep.table()


# --------------------------------------------------------------------------- out of GPU memory mid-sweep


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> dict:
    """A CUDA device as torch would show it, on CPU tensors: 1 GiB free, caches emptied on demand.

    Nothing is timed on it: the tests replace each sweep's measurement, so
    what they check is the control flow around an out-of-memory error.
    """
    from types import SimpleNamespace

    import torch

    _simulate_free(monkeypatch, GiB)
    state = {"empty_cache": 0}
    props = SimpleNamespace(L2_cache_size=4 * MiB, total_memory=80 * GiB)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)

    def empty_cache() -> None:
        state["empty_cache"] += 1

    monkeypatch.setattr(torch.cuda, "empty_cache", empty_cache)
    return state


def _oom(what: str) -> Exception:
    import torch

    return torch.cuda.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {what}")


def _fake_row(kernel: str, nbytes: int, device: str) -> Any:
    from labkit.bandwidth.stream import BandwidthResult
    from labkit.timing.bench import Timing

    timing = Timing((1.0, 1.0, 1.0), label=kernel, device=device)
    return BandwidthResult(
        kernel, device, "float64", max(1, nbytes // 8), nbytes, 2 * nbytes, 1, timing, "fake"
    )


SWEEP_BYTES = [64 * KiB, MiB, 16 * MiB, 64 * MiB]


@pytest.mark.parametrize("fails_at", ["allocation", "measurement"])
def test_stream_sweep_on_gpu_ends_cleanly_when_memory_runs_out(
    fake_gpu: dict, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, fails_at: str
) -> None:
    from labkit.bandwidth import stream as bandwidth
    from labkit.bandwidth import sweep as stream_sweep

    def allocate(n: int, count: int, device: str) -> list[int]:
        if fails_at == "allocation" and 8 * n > MiB:
            raise _oom(f"{8 * n} bytes")
        return [n] * count

    def measure(kernel: str, buffers: Any, n: int, device: str, **kwargs: Any) -> Any:
        if fails_at == "measurement" and 8 * n >= 16 * MiB:
            raise _oom("a workspace")
        return _fake_row(kernel, 8 * n, device)

    monkeypatch.setattr(bandwidth, "allocate_arrays", allocate)
    monkeypatch.setattr(stream_sweep, "measure_kernel", measure)
    sweep = stream_sweep.stream_sweep(("copy",), SWEEP_BYTES, "cuda", show_progress=False)
    assert sweep.sizes_bytes == (64 * KiB, MiB)  # the rows so far are kept
    assert sweep.largest_bytes_per_array == MiB
    assert set(sweep.dropped_bytes_per_array) == {16 * MiB, 64 * MiB}
    assert "ran out of cuda:0 memory" in sweep.out_of_memory
    assert "the largest size that fit is 1 MiB per array" in sweep.out_of_memory
    assert sweep.out_of_memory in capsys.readouterr().out
    assert sweep.to_dict()["out_of_memory"] == sweep.out_of_memory
    assert fake_gpu["empty_cache"] >= 1  # the failed attempt's memory went back to the device


def test_stream_sweep_on_gpu_where_nothing_fits_is_an_error(
    fake_gpu: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    from labkit.bandwidth import stream as bandwidth
    from labkit.bandwidth import sweep as stream_sweep

    def allocate(n: int, count: int, device: str) -> Any:
        raise _oom(f"{8 * n} bytes")

    monkeypatch.setattr(bandwidth, "allocate_arrays", allocate)
    with pytest.raises(MemoryBudgetError, match="ran out of cuda:0 memory") as info:
        stream_sweep.stream_sweep(("copy",), SWEEP_BYTES, "cuda", show_progress=False)
    assert "64 KiB" in str(info.value)


def test_host_device_sweep_ends_cleanly_when_memory_runs_out(
    fake_gpu: dict, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import torch

    from labkit.bandwidth import transfers

    real_empty, real_ones = torch.empty, torch.ones

    def empty(size: int, *, dtype: Any = None, device: Any = None) -> Any:
        if size > 16 * MiB:
            raise _oom(f"{size} bytes")
        return real_empty(size, dtype=dtype)

    def ones(size: int, *, dtype: Any = None, pin_memory: bool = False) -> Any:
        return real_ones(size, dtype=dtype)

    def row(
        on_device: Any,
        hosts: Any,
        size: int,
        direction: str,
        kind: str,
        device: str,
        warmup_ms: float,
        rep_ms: float,
    ) -> Any:
        if size >= 16 * MiB:
            raise _oom("a staging buffer")
        return _fake_row(f"{direction} {kind}", size, device)

    monkeypatch.setattr(transfers_, "require_cuda", lambda device, what: "cuda:0")
    monkeypatch.setattr(torch, "empty", empty)
    monkeypatch.setattr(torch, "ones", ones)
    monkeypatch.setattr(transfers, "_transfer_row", row)
    sweep = transfers.host_device_sweep(SWEEP_BYTES, "cuda", show_progress=False)
    assert sweep.largest_bytes == MiB  # 64 MiB failed to allocate, 16 MiB while copying
    assert {r.bytes_per_array for r in sweep.rows} == {64 * KiB, MiB}
    assert "the largest size that fit is 1 MiB" in sweep.out_of_memory
    assert sweep.out_of_memory in capsys.readouterr().out
    assert fake_gpu["empty_cache"] >= 2


def test_size_sweep_on_gpu_ends_that_backend_cleanly(
    fake_gpu: dict, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from labkit.machine import gpu
    from labkit.parallelism import sweep as parallel

    real_case = parallel._make_case

    def make_case(op: str, key: str, size: int, dtype: str) -> Any:
        if key == "torch-cuda":
            if size >= 4096:
                raise _oom(f"{size} floats")
            key = "torch-1-thread"  # the same work on the CPU
        return real_case(op, key, size, dtype)

    monkeypatch.setattr(gpu, "has_gpu", lambda: True)
    monkeypatch.setattr(parallel, "_make_case", make_case)
    monkeypatch.setattr(
        parallel, "_device_of", lambda key: "cpu" if key != "torch-cuda" else "cuda"
    )
    sweep = parallel.sweep_add(
        [64, 1024, 4096, 16384], ("numpy", "torch-cuda"), show_progress=False, **FAST
    )
    assert sweep.backend("numpy").sizes == (64, 1024, 4096, 16384)
    cuda = sweep.backend("torch-cuda")
    assert cuda.sizes == (64, 1024) and cuda.skipped == (4096, 16384)
    assert "the largest size that fit is n=1,024" in cuda.out_of_memory
    assert cuda.out_of_memory in capsys.readouterr().out
    assert fake_gpu["empty_cache"] >= 1


def test_peak_compute_stops_a_dtype_at_the_size_that_ran_out(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from labkit.roofline import measure as roofline_measure

    _simulate_free(monkeypatch, GiB)
    real_pair = roofline_measure._random_pair

    def pair(torch: Any, m: int, n: int, k: int, dtype: str, dev: str) -> Any:
        if n >= 256:
            raise _oom(f"a {n} x {n} matrix")
        return real_pair(torch, m, n, k, dtype, dev)

    monkeypatch.setattr(roofline_measure, "_random_pair", pair)
    peaks = roofline_measure.measure_peak_compute(
        "cpu", ("float32",), (32, 64, 256, 512), max_call_ms=1e9, show_progress=False, **FAST
    )
    assert peaks["float32"].sizes == (32, 64)
    assert "the largest size that fit is n=64" in peaks["float32"].out_of_memory
    assert peaks["float32"].out_of_memory in capsys.readouterr().out


def test_batch_sweep_ends_a_curve_cleanly_when_memory_runs_out(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from types import SimpleNamespace

    from labkit.batching import largest as largest_batch
    from labkit.batching import sweep as batching

    _simulate_free(monkeypatch, GiB)
    real_batch = batching.make_batch

    def make_batch(model: Any, shape: Any, batch: int, device: Any, seed: int = 0) -> Any:
        if batch >= 64:
            raise _oom(f"batch {batch}")
        return real_batch(model, shape, batch, device, seed=seed)

    monkeypatch.setattr(
        largest_batch, "fit_memory", lambda *a, **k: SimpleNamespace(predict_bytes=lambda b: 1)
    )
    monkeypatch.setattr(batching, "make_batch", make_batch)
    sweep = batching.batch_sweep(
        "mlp", batch_sizes=(1, 8, 64, 512), device="cpu", min_reps=1, **FAST
    )
    assert sweep.curve("train").batch_sizes == (1, 8)
    assert sweep.curve("inference").batch_sizes == (1, 8)
    assert sweep.out_of_memory_batch == 64
    assert "the largest size that fit is batch 8" in sweep.memory_note
    assert "batch 64 ran out of host memory" in capsys.readouterr().out


def test_throughput_by_batch_ends_cleanly_when_memory_runs_out(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from labkit.models import throughput
    from labkit.models.cnn import CNN

    _simulate_free(monkeypatch, GiB)
    real_time = throughput._time_batch

    def time_batch(torch: Any, model: Any, batch: int, *args: Any) -> Any:
        if batch >= 16:
            raise _oom(f"batch {batch}")
        return real_time(torch, model, batch, *args)

    monkeypatch.setattr(throughput, "_time_batch", time_batch)
    results = throughput.throughput_by_batch(
        CNN(), [1, 4, 16, 64], image_size=16, device="cpu", **FAST
    )
    assert [r.batch_size for r in results] == [1, 4]
    assert "the largest size that fit is batch 4" in capsys.readouterr().out
