"""Size sweeps, torch thread counts, the crossover and rate formatting (labkit.parallelism.sweep & co).

Nothing here depends on how fast this machine is: sweeps run tiny sizes with
tiny budgets and only their structure is checked; the crossover and the
formatters are checked on made-up numbers.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from labkit.core import units as rates
from labkit.parallelism import (
    crossover,
    plots,  # noqa: E402
    python_loops,
    threads,
)
from labkit.parallelism import sweep as parallel
from labkit.timing.bench import Timing  # noqa: E402

TINY = {"warmup_ms": 0, "rep_ms": 0.5, "show_progress": False}
CPU_BACKENDS = ("python", "numpy", "torch-1-thread", "torch-all-threads")


# --------------------------------------------------------------------------- imports


def test_measurement_modules_import_no_framework() -> None:
    code = (
        "import labkit.parallelism.sweep, labkit.parallelism.amdahl, labkit.parallelism.crossover, labkit.core.units, "
        "labkit.roofline.model, labkit.roofline.measure, sys, json; print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout.splitlines()[-1]))
    assert not loaded & {"torch", "numpy", "matplotlib", "tensorflow", "cupy"}


# --------------------------------------------------------------------------- threads


def test_torch_threads_sets_and_restores() -> None:
    before = torch.get_num_threads()
    target = 1 if before != 1 else 2
    with threads.torch_threads(target):
        assert torch.get_num_threads() == target
    assert torch.get_num_threads() == before


def test_torch_threads_restores_when_the_block_raises() -> None:
    before = torch.get_num_threads()
    with pytest.raises(ZeroDivisionError):
        with threads.torch_threads(1 if before != 1 else 2):
            1 / 0  # noqa: B018
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "2"])
def test_torch_threads_validates_n(bad: object) -> None:
    with pytest.raises((TypeError, ValueError), match="n must be a positive integer"):
        with threads.torch_threads(bad):  # type: ignore[arg-type]
            pass


def test_cpu_threads_is_positive() -> None:
    assert threads.cpu_threads() >= 1


# --------------------------------------------------------------------------- sweeps


def test_add_sweep_returns_every_backend_and_size_in_order() -> None:
    before = torch.get_num_threads()
    sweep = parallel.sweep_add([16, 1, 4, 4], CPU_BACKENDS, **TINY)
    assert torch.get_num_threads() == before
    assert sweep.op == "add" and sweep.sizes == (1, 4, 16)
    assert [b.backend for b in sweep.backends] == list(CPU_BACKENDS)
    for result in sweep.backends:
        assert result.sizes == (1, 4, 16) and result.skipped == ()
        for point in result.points:
            assert point.median_ms == point.timing.median_ms > 0
            assert point.timing.n >= 5
            seconds = point.median_ms / 1e3
            assert point.elements_per_s == pytest.approx(point.size / seconds)
            assert point.gflop_per_s == pytest.approx(point.size / seconds / 1e9)
    assert sweep.metric == "elements_per_s"
    assert "elements/s" in str(sweep) and "Python loop" in str(sweep)


def test_matmul_sweep_counts_2n3_flops_and_caps_python() -> None:
    sweep = parallel.sweep_matmul([2, 4, 8], ["python", "numpy"], python_max_size=4, **TINY)
    python, numpy = sweep.backend("python"), sweep.backend("numpy")
    assert python.sizes == (2, 4) and python.skipped == (8,)
    assert numpy.sizes == (2, 4, 8)
    point = numpy.point(8)
    assert point is not None
    assert point.gflop_per_s == pytest.approx(2 * 8**3 / (point.median_ms / 1e3) / 1e9)
    assert point.elements_per_s == pytest.approx(64 / (point.median_ms / 1e3))
    assert sweep.metric == "gflop_per_s"
    assert "—" in str(sweep)  # the skipped Python cell


def test_python_is_skipped_when_predicted_too_slow() -> None:
    sweep = parallel.sweep_add([1, 10**6], ["python"], python_max_call_ms=1e-9, **TINY)
    assert sweep.backend("python").skipped == (10**6,)


def test_sweep_restores_threads_when_timing_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    before = torch.get_num_threads()

    def broken_bench(*args: object, **kwargs: object) -> Timing:
        raise RuntimeError("boom")

    monkeypatch.setattr(parallel, "bench", broken_bench)
    for backend in ("torch-1-thread", "torch-all-threads"):
        with pytest.raises(RuntimeError, match="boom"):
            parallel.sweep_add([4], [backend], **TINY)
        assert torch.get_num_threads() == before


def test_sweep_refuses_a_wrong_result(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(python_loops, "add", lambda a, b: [0.0 for _ in a])
    with pytest.raises(RuntimeError, match="wrong add"):
        parallel.sweep_add([8], ["python"], **TINY)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"op": "conv"}, "op must be one of"),
        ({"op": "add", "sizes": [0]}, r"sizes\[0\] must be a positive integer"),
        ({"op": "add", "sizes": [4, -1]}, r"sizes\[1\] must be a positive integer"),
        ({"op": "add", "sizes": [2.5]}, r"sizes\[0\] must be a positive integer"),
        ({"op": "add", "sizes": []}, "sizes must be a non-empty list"),
        ({"op": "add", "backends": ["gpu"]}, r"backends\[0\] must be one of 'python'"),
        ({"op": "add", "backends": []}, "backends must be a non-empty list"),
        ({"op": "add", "dtype": "int8"}, "dtype must be one of"),
        ({"op": "add", "rep_ms": 0}, "rep_ms must be"),
        ({"op": "add", "python_max_size": 0}, "python_max_size must be"),
    ],
)
def test_sweep_validates_arguments(kwargs: dict[str, object], match: str) -> None:
    options = {"sizes": [4], "backends": ["numpy"], **TINY, **kwargs}
    op = options.pop("op")
    with pytest.raises((TypeError, ValueError), match=match):
        parallel.sweep(op, **options)  # type: ignore[arg-type]


def test_cuda_backend_needs_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("labkit.machine.gpu.has_gpu", lambda: False)
    assert "torch-cuda" not in parallel.available_backends()
    with pytest.raises(ValueError, match="'torch-cuda' but this machine has no CUDA GPU"):
        parallel.sweep_add([4], ["torch-cuda"], **TINY)


def test_backend_lookup_names_what_exists() -> None:
    sweep = _synthetic_sweep()
    with pytest.raises(ValueError, match="backend must be one of .*, got 'numpy'"):
        sweep.backend("numpy")


# --------------------------------------------------------------------------- crossover


def test_crossover_interpolates_on_log_size() -> None:
    # 10x slower at n=1, 10x faster at n=100: the log-ratio crosses 0 at the log-midpoint
    assert crossover.crossover_size([1, 100], [1.0, 100.0], [10.0, 10.0]) == pytest.approx(10.0)
    # ratios 1/4 at n=10 and 2 at n=1000: log crosses at 1/3 of the way -> 10 * 100**(2/3)
    size = crossover.crossover_size([10, 1000], [1.0, 2.0], [4.0, 1.0])
    assert size == pytest.approx(10 * 100 ** (2 / 3))


def test_crossover_none_and_at_start() -> None:
    sizes = [1, 10, 100]
    assert crossover.crossover_size(sizes, [1.0, 2.0, 3.0], [5.0, 6.0, 7.0]) is None
    assert crossover.crossover_size(sizes, [5.0, 6.0, 7.0], [1.0, 2.0, 3.0]) == 1.0
    # equal times are not "faster"
    assert crossover.crossover_size(sizes, [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]) is None


def test_crossover_ignores_an_early_lucky_win() -> None:
    # fast wins at n=1, loses at n=10, wins from n=100: the crossover is between 10 and 100
    size = crossover.crossover_size([1, 10, 100], [2.0, 1.0, 10.0], [1.0, 4.0, 1.0])
    assert size is not None and 10 < size < 100


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (([1, 2], [1.0], [1.0, 2.0]), "same length"),
        (([], [], []), "sizes must be a non-empty sequence"),
        (([2, 1], [1.0, 1.0], [1.0, 1.0]), "strictly increasing"),
        (([1, 2], [1.0, 0.0], [1.0, 1.0]), r"slow_ms\[1\] must be a finite number > 0"),
        (([1, 2], [1.0, 1.0], [1.0, math.nan]), r"fast_ms\[1\]"),
        (([1, "2"], [1.0, 1.0], [1.0, 1.0]), r"sizes\[1\] must be a number"),
    ],
)
def test_crossover_validates(args: tuple[object, object, object], match: str) -> None:
    with pytest.raises((TypeError, ValueError), match=match):
        crossover.crossover_size(*args)  # type: ignore[arg-type]


def test_launch_overhead_needs_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("labkit.machine.gpu.has_gpu", lambda: False)
    with pytest.raises(RuntimeError, match="require_gpu"):
        crossover.launch_overhead()
    with pytest.raises(ValueError, match="device must be 'cuda'"):
        crossover.launch_overhead("cpu")
    with pytest.raises(ValueError, match="rep_ms"):
        crossover.launch_overhead(rep_ms=-1)


def test_round_trip_clock_syncs_cuda_around_a_host_clock() -> None:
    """The launch + synchronize timing: bench must take the host-clock path and sync each call."""
    import types

    from labkit.timing.bench import bench

    synced: list[object] = []
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(synchronize=synced.append))
    clock = crossover._CudaHostClock(fake_torch, "cuda:0")
    timing = bench(lambda: None, device=clock, warmup_ms=0, rep_ms=0.1, warn=False)
    assert timing.method == "host clock" and timing.device == "cuda:0"
    assert len(synced) >= 2 * timing.n and set(synced) == {"cuda:0"}


def test_the_round_trip_is_one_launch_and_one_synchronize_per_sample(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On the H200 the round trip read 5.92 µs against 8.29 µs per kernel: bench had put many
    launches in each host-clock sample and shared one synchronize; one call per sample now."""
    import types

    seen: list[dict[str, object]] = []

    def fake_bench(fn: object, **options: object) -> object:
        seen.append(options)
        return types.SimpleNamespace(median_ms=0.01)

    real_ones, real_empty = torch.ones, torch.empty
    monkeypatch.setattr("labkit.machine.gpu.has_gpu", lambda: True)
    monkeypatch.setattr(torch, "ones", lambda n, device=None: real_ones(n))
    monkeypatch.setattr(torch, "empty", lambda n, device=None: real_empty(n))
    monkeypatch.setattr(crossover, "bench", fake_bench)
    crossover.launch_overhead("cuda")
    events, round_trip = seen
    assert "calls_per_sample" not in events  # device events time one kernel each anyway
    assert round_trip["calls_per_sample"] == 1
    assert isinstance(round_trip["device"], crossover._CudaHostClock)


# --------------------------------------------------------------------------- synthetic sweeps


def _backend(key: str, device: str, times_ms: dict[int, float]) -> parallel.BackendSweep:
    points = tuple(
        parallel.SweepPoint(
            size=n,
            median_ms=ms,
            elements_per_s=n / (ms / 1e3),
            gflop_per_s=n / (ms / 1e3) / 1e9,
            timing=Timing(samples_ms=(ms,) * 5, device=device),
        )
        for n, ms in times_ms.items()
    )
    return parallel.BackendSweep(key, key, device, points)


def _synthetic_sweep() -> parallel.SizeSweep:
    cpu = _backend("torch-all-threads", "cpu", {1: 0.001, 100: 0.1, 10_000: 10.0})
    gpu = _backend("torch-cuda", "cuda", {1: 0.01, 100: 0.01, 10_000: 0.1})
    return parallel.SizeSweep("add", "float32", (1, 100, 10_000), (cpu, gpu))


def test_sweep_crossover_and_table_on_synthetic_data() -> None:
    sweep = _synthetic_sweep()
    assert sweep.crossover() == pytest.approx(10.0)
    assert "The GPU is faster than the CPU (all threads) from n ≈ 10 on." in str(sweep)


def test_plot_size_sweep_labels_scales_and_crossover() -> None:
    ax = plots.plot_size_sweep(_synthetic_sweep())
    try:
        assert ax.get_xlabel() == "n (elements per vector)"
        assert ax.get_ylabel() == "throughput (elements/s)"
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
        assert "throughput by size\non " in ax.get_title() and " and cuda" in ax.get_title()
        labels = [line.get_label() for line in ax.get_lines()]
        assert "torch-cuda" in labels and "crossover: n ≈ 10" in labels
    finally:
        plt.close(ax.figure)


def test_plot_size_sweep_real_cpu_sweep_has_no_crossover() -> None:
    sweep = parallel.sweep_matmul([2, 4], ["numpy"], **TINY)
    ax = plots.plot_size_sweep(sweep)
    try:
        assert ax.get_ylabel() == "throughput (GFLOP/s)"
        assert ax.get_xlabel() == "n (n×n matrices)"
        assert not [line for line in ax.get_lines() if line.get_label().startswith("crossover")]
    finally:
        plt.close(ax.figure)


# --------------------------------------------------------------------------- formatting


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.234e9, "1.23 G elements/s"),
        (999.6e6, "1.00 G elements/s"),
        (12.0, "12.0 elements/s"),
        (5.5e3, "5.50 k elements/s"),
    ],
)
def test_format_rate(value: float, text: str) -> None:
    assert rates.format_rate(value, "elements/s") == text


def test_format_gflop_per_s_and_counts() -> None:
    assert rates.format_gflop_per_s(184.2) == "184 GFLOP/s"
    assert rates.format_gflop_per_s(0.0021345) == "0.00213 GFLOP/s"
    assert rates.format_gflop_per_s(1870.0) == "1.87 TFLOP/s"
    assert rates.format_gflop_per_s(999.7) == "1.00 TFLOP/s"
    assert rates.format_count(2 * 1024**3, "FLOP") == "2.15 GFLOP"
    assert rates.format_count(640, "B") == "640 B"
    assert rates.round3(123456.7) == 123000
