"""STREAM probes, the size sweep, strided reads, transfers and the pipeline.

No assertion depends on how fast this machine is: byte counts are checked
against hand-computed values, GB/s against synthetic timings, and real runs
only for structure (sizes tiny, budgets of a few ms).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import warnings

import pytest

from labkit.bandwidth import overlap, pipeline, strided, transfers
from labkit.bandwidth import sizes as bw_sizes
from labkit.bandwidth import stream as bandwidth
from labkit.bandwidth import sweep as stream_sweep
from labkit.bandwidth.stream import BandwidthResult
from labkit.core import units
from labkit.machine import memory
from labkit.machine.cache_line import cpu_cache_line
from labkit.machine.memory import MemoryBudgetError, MemoryBudgetWarning
from labkit.timing.bench import Timing

KiB, MiB = 1024, 1024**2
FAST = {"warmup_ms": 0.0, "rep_ms": 1.0, "min_reps": 2}


def _row(
    kernel: str = "copy",
    n: int = 1000,
    samples=(1.0, 1.0, 1.0),
    calls: int = 1,
    device: str = "cpu",
) -> BandwidthResult:
    return BandwidthResult(
        kernel=kernel,
        device=device,
        dtype="float64",
        n_elements=n,
        bytes_per_array=8 * n,
        bytes_per_call=bandwidth.stream_bytes(kernel, n),
        calls_per_sample=calls,
        timing=Timing(tuple(samples)),
        implementation="test",
    )


# --------------------------------------------------------------------------- byte counting


@pytest.mark.parametrize(
    ("kernel", "expected"),
    [
        ("copy", 2 * 8 * 1000),
        ("scale", 2 * 8 * 1000),
        ("add", 3 * 8 * 1000),
        ("triad", 3 * 8 * 1000),
    ],
)
def test_stream_bytes_count_each_array_once(kernel: str, expected: int) -> None:
    assert bandwidth.stream_bytes(kernel, 1000) == expected
    assert bandwidth.stream_bytes(kernel, 1000, itemsize_bytes=4) == expected // 2


def test_stream_bytes_validates() -> None:
    with pytest.raises(ValueError, match="kernel"):
        bandwidth.stream_bytes("memset", 10)
    with pytest.raises(ValueError, match="n_elements"):
        bandwidth.stream_bytes("copy", 0)


def test_gb_per_s_uses_the_median_per_call() -> None:
    # 2 arrays × 8 B × 125M = 2e9 bytes per call, 100 ms per sample
    row = _row("copy", n=125_000_000, samples=(100.0, 100.0, 400.0))
    assert row.bytes_per_call == 2_000_000_000
    assert row.median_ms == 100.0 and row.gb_per_s == pytest.approx(20.0)
    four_calls = _row("copy", n=125_000_000, samples=(100.0, 100.0, 50.0), calls=4)
    assert four_calls.median_ms == 25.0 and four_calls.gb_per_s == pytest.approx(80.0)
    assert four_calls.best_gb_per_s == pytest.approx(160.0)
    assert "80.0 GB/s" in str(four_calls) and "n=3" in str(four_calls)
    json.dumps(four_calls.to_dict(), allow_nan=False)


def test_format_gb_per_s() -> None:
    assert units.format_gb_per_s(4790.3) == "4790 GB/s"
    assert units.format_gb_per_s(25.26) == "25.3 GB/s"
    assert units.format_gb_per_s(0.5) == "0.50 GB/s"


# --------------------------------------------------------------------------- real runs, tiny


@pytest.mark.parametrize("kernel", bandwidth.KERNELS)
def test_stream_kernel_runs_checks_and_counts(kernel: str) -> None:
    row = bandwidth.stream_kernel(kernel, 64 * KiB, **FAST)
    assert row.kernel == kernel and row.device == "cpu" and row.dtype == "float64"
    assert row.n_elements == 8 * KiB and row.bytes_per_array == 64 * KiB
    assert row.bytes_per_call == bandwidth.ARRAYS[kernel] * 64 * KiB
    assert row.calls_per_sample > 1  # tiny arrays run many times per sample
    assert row.timing.n >= 2 and row.gb_per_s > 0 and row.threads >= 1
    assert row.implementation == bandwidth.IMPLEMENTATIONS[kernel]


@pytest.mark.parametrize(
    ("call", "error", "name"),
    [
        (lambda: bandwidth.stream_kernel("nope", 64 * KiB), ValueError, "kernel"),
        (lambda: bandwidth.stream_kernel("copy", 4), ValueError, "bytes_per_array"),
        (lambda: bandwidth.stream_kernel("copy", 64 * KiB, device="gpu"), ValueError, "device"),
        (lambda: bandwidth.stream_kernel("copy", 64 * KiB, rep_ms=-1), ValueError, "rep_ms"),
        (lambda: stream_sweep.stream_sweep(kernels=("copy", "bogus")), ValueError, "kernels"),
        (lambda: stream_sweep.stream_sweep(kernels=()), ValueError, "kernels"),
        (lambda: stream_sweep.stream_sweep(sizes_bytes="big"), ValueError, "sizes_bytes"),
        (lambda: stream_sweep.stream_sweep(sizes_bytes=[]), ValueError, "sizes_bytes"),
        (lambda: stream_sweep.stream_sweep(sizes_bytes=[4]), ValueError, "sizes_bytes"),
        (lambda: stream_sweep.stream_sweep(sizes_bytes=[MiB], min_reps=0), ValueError, "min_reps"),
        (lambda: bandwidth.peak_bandwidth(kernels=("triad", "dot")), ValueError, "kernels"),
        (lambda: bw_sizes.default_sizes(points_per_decade=0), ValueError, "points_per_decade"),
    ],
)
def test_arguments_are_validated_by_name(call, error: type, name: str) -> None:
    with pytest.raises(error, match=name):
        call()


def test_a_cuda_device_without_a_gpu_is_a_clear_error() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ValueError, match="no CUDA GPU"):
        bandwidth.stream_kernel("copy", 64 * KiB, device="cuda")


def test_sweep_rows_are_sorted_complete_and_peak_is_the_fastest() -> None:
    sizes = [256 * KiB, 16 * KiB, 64 * KiB]
    result = stream_sweep.stream_sweep(sizes_bytes=sizes, show_progress=False, **FAST)
    assert result.kernels == bandwidth.KERNELS and result.device == "cpu"
    assert result.sizes_bytes == (16 * KiB, 64 * KiB, 256 * KiB)
    assert [(r.kernel, r.bytes_per_array) for r in result.rows] == [
        (k, s) for k in bandwidth.KERNELS for s in sorted(sizes)
    ]
    assert result.dropped_bytes_per_array == ()
    assert result.peak() == max(result.rows, key=lambda r: r.gb_per_s)
    assert result.peak("add", min_bytes_per_array=64 * KiB).bytes_per_array >= 64 * KiB
    with pytest.raises(ValueError, match="no rows"):
        result.peak("copy", min_bytes_per_array=MiB)
    assert "triad" in result.table() and "GB/s" in str(result)
    json.dumps(result.to_dict(), allow_nan=False)


@pytest.mark.parametrize(
    "caches",
    [
        (("L1d", 48 * KiB), ("L2", 2 * MiB), ("L3", 300 * MiB)),
        (("L1d", 32 * KiB), ("L2", MiB), ("L3", 32 * MiB)),
        (),
    ],
)
def test_default_sizes_are_one_fixed_grid_whatever_the_caches(
    monkeypatch: pytest.MonkeyPatch, caches: tuple
) -> None:
    """Issue 13: the grid must not depend on the machine, so every table has the same rows."""
    monkeypatch.setattr(bw_sizes, "cache_sizes", lambda device="cpu": caches)
    sizes = bw_sizes.default_sizes(points_per_decade=4)
    assert sizes[0] == 8 * KiB
    assert sizes[-1] == 512 * MiB == bw_sizes.dram_bytes_per_array()
    assert len(sizes) == 21
    assert list(sizes) == sorted(set(sizes)) and all(s % 4096 == 0 for s in sizes)
    ratios = [b / a for a, b in zip(sizes, sizes[1:], strict=False)]
    assert all(1.3 < r < 2.4 for r in ratios)  # log-spaced, about 4 per decade


def test_dram_size_is_compared_with_all_the_last_level_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from labkit.machine import cpu

    rule = "STREAM asks for at least 4×; below that, part of the traffic comes from cache"
    monkeypatch.setattr(cpu, "shared_last_level_cache_bytes", lambda cpus=None: 32 * MiB)
    assert bw_sizes.dram_cache_ratio() == 16.0
    assert bw_sizes.dram_cache_note() == f"16.0× the 32 MiB of last-level cache ({rule})"
    # two 105 MiB sockets, and an array the budget shrank: the same sentence, other numbers
    monkeypatch.setattr(cpu, "shared_last_level_cache_bytes", lambda cpus=None: 210 * MiB)
    assert bw_sizes.dram_cache_note(bytes_per_array=128 * MiB) == (
        f"0.6× the 210 MiB of last-level cache ({rule})"
    )
    monkeypatch.setattr(cpu, "shared_last_level_cache_bytes", lambda cpus=None: None)
    monkeypatch.setattr(bw_sizes, "cache_sizes", lambda device="cpu": ())
    assert bw_sizes.dram_cache_ratio() is None
    assert bw_sizes.dram_cache_note() == f"of unknown size against the last-level cache ({rule})"


def test_log_sizes_validates() -> None:
    assert bw_sizes.log_sizes(4096, 4096) == (4096,)
    with pytest.raises(ValueError, match="high_bytes"):
        bw_sizes.log_sizes(8192, 4096)


# --------------------------------------------------------------------------- the memory guard


@pytest.fixture
def low_memory(monkeypatch: pytest.MonkeyPatch) -> dict:
    """4 MiB free (a 1 MiB budget), and a record of every buffer the probes ask for."""
    free = 4 * MiB
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": free)
    asked: list[int] = []
    real_stream, real_strided = bandwidth.allocate_arrays, strided._allocate

    def spy_stream(n_elements: int, count: int, device: str):
        asked.append(8 * n_elements * count)
        return real_stream(n_elements, count, device)

    def spy_strided(n_total: int, device: str, dtype: str):
        asked.append(n_total * strided._DTYPES[dtype])
        return real_strided(n_total, device, dtype)

    monkeypatch.setattr(bandwidth, "allocate_arrays", spy_stream)
    monkeypatch.setattr(strided, "_allocate", spy_strided)
    return {"free": free, "budget": free * memory.DEFAULT_FRACTION, "asked": asked}


def test_sizes_that_do_not_fit_stay_in_the_table_as_rows_that_say_so(low_memory: dict) -> None:
    sizes = [64 * KiB, 128 * KiB, MiB, 8 * MiB]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no stderr block that only some machines show
        result = stream_sweep.stream_sweep(
            kernels=("copy", "triad"), sizes_bytes=sizes, show_progress=False, **FAST
        )
    assert result.sizes_bytes == (64 * KiB, 128 * KiB)
    assert result.dropped_bytes_per_array == (MiB, 8 * MiB)
    assert result.budget_bytes == low_memory["budget"] and result.arrays == 3
    lines = result.table().splitlines()
    assert len(lines) == 1 + 4 + 1  # header, every size, the footnote
    assert lines[3].split() == [
        "1",
        "MiB",
        "-",
        "-",
        "skipped:",
        "does",
        "not",
        "fit",
        "in",
        "memory",
    ]
    assert "exceed this probe's budget of 1 MiB" in lines[-1]
    assert low_memory["asked"] and max(low_memory["asked"]) <= low_memory["budget"]


def test_a_sweep_where_nothing_fits_is_an_error(low_memory: dict) -> None:
    with pytest.raises(MemoryBudgetError, match="smallest size"):
        stream_sweep.stream_sweep(sizes_bytes=[MiB], show_progress=False, **FAST)
    assert low_memory["asked"] == []


def test_an_explicit_request_that_does_not_fit_is_a_clear_error(low_memory: dict) -> None:
    with pytest.raises(MemoryBudgetError) as info:
        bandwidth.stream_kernel("triad", 8 * MiB, **FAST)
    text = str(info.value)
    assert "3 × 8 MiB = 24 MiB" in text and "4 MiB" in text and "25%" in text
    assert low_memory["asked"] == []  # nothing was allocated


def test_peak_bandwidth_shrinks_its_default_size_with_a_warning(low_memory: dict) -> None:
    with pytest.warns(MemoryBudgetWarning, match="peak_bandwidth"):
        row = bandwidth.peak_bandwidth(**FAST)
    assert row.kernel in ("copy", "triad") and row.gb_per_s > 0
    assert 3 * row.bytes_per_array <= low_memory["budget"]
    assert max(low_memory["asked"]) <= low_memory["budget"]


def test_strided_read_shrinks_its_default_and_rejects_explicit_overruns(low_memory: dict) -> None:
    with pytest.warns(MemoryBudgetWarning, match="strided_read"):
        result = strided.strided_read(
            (1, 64), flush_cache=False, rep_ms=1.0, max_reps=3, show_progress=False
        )
    assert max(low_memory["asked"]) <= low_memory["budget"]
    assert result.rows[-1].span_bytes <= low_memory["budget"]
    with pytest.raises(MemoryBudgetError, match="strided_read"):
        strided.strided_read((1, 64), n_elements=MiB, flush_cache=False)


def test_pipeline_checks_its_explicit_size(low_memory: dict) -> None:
    with pytest.raises(MemoryBudgetError, match="pipeline_breakdown"):
        pipeline.pipeline_breakdown(MiB, device="cpu")


# --------------------------------------------------------------------------- strided reads


def test_strided_read_structure() -> None:
    result = strided.strided_read(
        (16, 4), n_elements=4096, flush_cache=False, rep_ms=1.0, max_reps=3, show_progress=False
    )
    assert result.strides == (1, 4, 16)  # stride 1 is always the baseline
    assert result.device == "cpu" and result.dtype == "float32"
    assert result.line_bytes == cpu_cache_line().line_bytes  # read from the OS, else 64
    for row in result.rows:
        assert row.n_elements == 4096 and row.useful_bytes == 4096 * 4
        assert row.span_bytes == 4096 * row.stride * 4
        assert row.gb_per_s > 0 and row.timing.n >= 3
        assert row.slowdown == pytest.approx(row.median_ms / result.row(1).median_ms)
    assert result.slowdown(1) == 1.0
    # bytes fetched per useful byte: a 64-byte line holds 16 float32
    assert [result.expected_slowdown(s) for s in (1, 4, 16, 64)] == [1, 4, 16, 16]
    assert "stride" in str(result) and "×" in result.table()
    with pytest.raises(ValueError, match="stride=3"):
        result.row(3)
    json.dumps(result.to_dict(), allow_nan=False)


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"strides": []}, ValueError, "strides"),
        ({"strides": [0]}, ValueError, "strides"),
        ({"strides": "1,2"}, ValueError, "strides"),
        ({"dtype": "int8"}, ValueError, "dtype"),
        ({"max_reps": 1}, ValueError, "max_reps"),
        ({"n_elements": 0}, ValueError, "n_elements"),
    ],
)
def test_strided_read_validates(kwargs: dict, error: type, name: str) -> None:
    with pytest.raises(error, match=name):
        strided.strided_read(**kwargs)


# --------------------------------------------------------------------------- the pipeline


@pytest.mark.parametrize("op", ["scale", "sin", "matmul"])
def test_pipeline_on_the_cpu_says_what_it_measures(op: str) -> None:
    result = pipeline.pipeline_breakdown(256 * KiB, op, device="cpu", warmup_ms=0, rep_ms=1)
    assert result.device == "cpu" and result.op == op and result.host_memory == "pageable"
    assert "nothing to transfer" in result.note and "copy_" in result.note
    for ms in (result.copy_in_ms, result.compute_ms, result.copy_back_ms, result.total_ms):
        assert ms > 0
    assert result.sum_ms == pytest.approx(
        result.copy_in_ms + result.compute_ms + result.copy_back_ms
    )
    assert 0 <= result.transfer_fraction <= 1
    assert "copy in" in str(result) and "× the compute time" in str(result)
    json.dumps(result.to_dict(), allow_nan=False)


def test_pipeline_accepts_a_function_and_rejects_unknown_ops() -> None:
    def double(x):
        return x + x

    assert pipeline.pipeline_breakdown(64 * KiB, double, "cpu", rep_ms=1).op == "double"
    with pytest.raises(ValueError, match="op"):
        pipeline.pipeline_breakdown(64 * KiB, "fft", "cpu")
    with pytest.raises(ValueError, match="n_bytes"):
        pipeline.pipeline_breakdown(2, "scale", "cpu")


# --------------------------------------------------------------------------- GPU-only logic


@pytest.mark.parametrize(
    "call",
    [
        lambda: transfers.device_copy(device="cpu"),
        lambda: transfers.host_device_sweep(device="cpu"),
        lambda: overlap.copy_compute_overlap(device="cpu"),
        lambda: transfers.theoretical_peak_gb_per_s("cpu"),
    ],
)
def test_gpu_only_probes_say_they_need_a_gpu(call) -> None:
    with pytest.raises(ValueError, match="needs a CUDA GPU"):
        call()


def test_balance_repeats() -> None:
    assert overlap.balance_repeats(1.0, 0.1) == 10
    assert overlap.balance_repeats(0.01, 1.0) == 1
    assert overlap.balance_repeats(1000.0, 0.001) == 1000
    assert overlap.balance_repeats(1.0, 0.0) == 1000  # a pass too short to time


def test_overlap_result_arithmetic() -> None:
    def t(ms: float) -> Timing:
        return Timing((ms, ms, ms), device="cuda:0")

    result = overlap.OverlapResult(
        "cuda:0",
        8,
        64 * MiB,
        10,
        copy=t(8.0),
        compute=t(16.0),
        serialized=t(24.0),
        overlapped=t(18.0),
    )
    assert result.speedup == pytest.approx(24 / 18)
    assert result.ideal_ms == pytest.approx(16.0 + 8.0 / 8)
    assert "1.33×" in str(result)
    json.dumps(result.to_dict(), allow_nan=False)


def test_device_copy_ratios() -> None:
    labkit_row = _row("copy", samples=(2.0,), device="cuda:0")
    refs = (_row("copy", samples=(1.0,), device="cuda:0"), _row("copy", samples=(4.0,)))
    result = transfers.DeviceCopy(labkit_row, refs, peak_gb_per_s=labkit_row.gb_per_s * 4)
    assert result.best_reference is refs[0]
    assert result.ratio_to_best == pytest.approx(0.5)
    assert result.fraction_of_peak == pytest.approx(0.25)
    empty = transfers.DeviceCopy(labkit_row, (), peak_gb_per_s=None)
    assert empty.ratio_to_best is None and empty.fraction_of_peak is None


def test_transfer_sweep_lookup() -> None:
    rows = tuple(
        BandwidthResult(
            kernel=f"{d} {m}",
            device="cuda:0",
            dtype="uint8",
            n_elements=s,
            bytes_per_array=s,
            bytes_per_call=s,
            calls_per_sample=1,
            timing=Timing((ms,)),
            implementation="test",
        )
        for d, m, s, ms in [
            ("h2d", "pinned", MiB, 0.04),
            ("h2d", "pinned", 16 * MiB, 0.5),
            ("h2d", "pageable", MiB, 0.1),
            ("d2h", "pinned", MiB, 0.05),
        ]
    )
    sweep = transfers.TransferSweep(rows, "cuda:0")
    assert len(sweep.rows_for("h2d", "pinned")) == 2
    assert sweep.peak("h2d", "pinned").bytes_per_array == 16 * MiB
    assert "h2d pinned" in sweep.table()
    with pytest.raises(ValueError, match="direction"):
        sweep.rows_for("up", "pinned")
    with pytest.raises(ValueError, match="host_memory"):
        sweep.rows_for("h2d", "locked")


def test_modules_import_no_framework() -> None:
    code = (
        "import labkit.bandwidth.stream, labkit.machine.memory, labkit.bandwidth.sweep, labkit.bandwidth.strided, "
        "labkit.bandwidth.transfers, labkit.bandwidth.pipeline, labkit.cli.bench.bandwidth, labkit.bandwidth.cstream, sys; "
        "print(sorted(m for m in ('torch', 'cupy', 'matplotlib', 'tensorflow', 'numpy') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------- the plot


def test_plot_stream_sweep_marks_caches_and_labels_bytes() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from labkit.bandwidth import plots

    rows = tuple(
        _row(k, n=n, samples=(0.01 * n / 1000,))
        for k in ("copy", "triad")
        for n in (2048, 65536, 4 * 1024**2)
    )
    caches = (("L1d", 48 * KiB), ("L2", 2 * MiB), ("L3", 300 * MiB))
    sweep = stream_sweep.StreamSweep(rows, "cpu", "float64", caches)
    ax = plots.plot_stream_sweep(sweep)
    try:
        assert ax.get_xscale() == "log"
        assert "GB/s" in ax.get_ylabel() and "bytes per array" in ax.get_xlabel()
        assert ax.get_title().startswith("STREAM kernels") and "\non " in ax.get_title()
        lines = [line for line in ax.get_lines() if line.get_linestyle() == ":"]
        assert len(lines) == 2  # L1d and L2 ÷ 3 are in range; L3 ÷ 3 (100 MiB) is beyond 48 MiB
        labels = [t.get_text() for t in ax.get_xticklabels()]
        assert any("KiB" in t for t in labels) and any("MiB" in t for t in labels)
        notes = [t.get_text() for t in ax.texts]
        assert any(t.startswith("L1d: ") and "÷ 3 arrays" in t for t in notes)
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["copy", "triad"]
    finally:
        plt.close(ax.figure)


def test_no_warnings_from_a_plain_sweep() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = stream_sweep.stream_sweep(("scale",), [32 * KiB], show_progress=False, **FAST)
    assert math.isfinite(result.rows[0].gb_per_s)
