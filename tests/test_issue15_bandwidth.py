"""Issue 15 (notebook 02): STREAM's statistic, strided reads with a compute baseline, the
pipeline's interleaved timing and its GPU prediction, and the host-link exercise."""

from __future__ import annotations

import inspect
import math
from types import SimpleNamespace

import pytest

from labkit import bandwidth, check
from labkit.bandwidth import layout, pipeline, references, strided
from labkit.bandwidth.stream import BandwidthResult
from labkit.timing.bench import Timing

FAST = {"warmup_ms": 0.0, "rep_ms": 1.0, "min_reps": 2}
MiB = 1024**2


def _timing(*samples: float) -> Timing:
    return Timing(tuple(samples), label="t", device="cpu")


# --------------------------------------------------------------------------- STREAM's figure


def test_peak_bandwidth_is_triad_by_default_and_keeps_streams_best_beside_the_median() -> None:
    default = inspect.signature(bandwidth.peak_bandwidth).parameters["kernels"].default
    assert default == ("triad",)
    result = bandwidth.peak_bandwidth(bytes_per_array=MiB, **FAST)
    assert isinstance(result, BandwidthResult) and result.kernel == "triad"
    assert result.best_gb_per_s >= result.gb_per_s  # STREAM's best-of-N is never below the median


# --------------------------------------------------------------------------- strided reads


def test_the_strided_flush_reads_and_leaves_no_dirty_buffer() -> None:
    sync = strided.ReadFlushHostSync()
    assert sync.name == "cpu"
    flush = sync.cache_flusher()
    assert flush() is None


def _strided_result(
    slowdowns: dict[int, float], in_cache_ns: dict[int, float]
) -> strided.StridedResult:
    n, base = 1000, 1.0
    rows = tuple(
        strided.StridedRow(
            stride=s,
            n_elements=n,
            useful_bytes=4 * n,
            span_bytes=4 * n * s,
            timing=_timing(base * slowdowns[s]),
            slowdown=slowdowns[s],
            in_cache=_timing(in_cache_ns[s] * 100 / 1e6),
            in_cache_elements=100,
        )
        for s in slowdowns
    )
    return strided.StridedResult(rows, "cpu", "float32", 4, 64, True)


def test_strided_rows_carry_the_in_cache_baseline_and_the_verdicts_follow_the_numbers() -> None:
    # in cache, 3× at stride 2 is more than 1.3 × the 2× line ratio (third review: the view
    # streams from the last-level cache, so 2× alone is line traffic, not the kernel)
    pairs = _strided_result({1: 1.0, 2: 2.0, 64: 34.0}, {1: 0.1, 2: 0.3, 64: 0.8})
    assert pairs.in_cache_slowdown(2) == pytest.approx(3.0)
    assert pairs.pair_slowdown(64) == 32 and pairs.expected_slowdown(64) == 16
    text = pairs.verdicts()
    assert "beyond the extra lines" in text and "closer to lines fetched in 128-byte pairs" in text
    assert "in cache" in pairs.table() and "in-cache slowdown" in pairs.table()
    single = _strided_result({1: 1.0, 2: 2.0, 64: 17.0}, {1: 0.1, 2: 0.11, 64: 0.2})
    text = single.verdicts()
    assert "does not single out" in text and "closer to single 64-byte lines" in text


def test_strided_read_measures_an_in_cache_baseline_per_stride() -> None:
    result = strided.strided_read(
        (1, 2), n_elements=4096, flush_cache=False, rep_ms=1.0, max_reps=3
    )
    assert all(r.in_cache is not None and r.in_cache_ns_per_value for r in result.rows)
    for row in result.rows:  # sized per stride, from the summed last-level cache
        assert row.in_cache_elements == min(4096, strided.in_cache_elements("cpu", row.stride, 4))


def test_layout_costs_runs_and_names_what_it_compares() -> None:
    costs = layout.layout_costs(64, rounds=2, rep_ms=1.0)
    text = str(costs)
    assert "x.t().contiguous()" in text and "a @ b.t()" in text


# --------------------------------------------------------------------------- the pipeline


def test_pipeline_rows_are_interleaved_and_compare_the_whole_with_the_parts() -> None:
    result = pipeline.pipeline_breakdown(MiB, op="scale", rep_ms=2.0, warmup_ms=0.0, rounds=2)
    assert result.rounds == 2 and len(result.total_over_sum) == 2
    assert all(r > 0 for r in result.total_over_sum)
    assert "sum of the parts, per round" in result.table()


def _breakdown(op: str) -> pipeline.PipelineBreakdown:
    t = _timing(1.0)
    return pipeline.PipelineBreakdown("cpu", op, 16 * MiB, "pageable", t, t, t, t, "note")


def test_the_gpu_prediction_uses_the_datasheet_arithmetic() -> None:
    link = 32e9 * 16 * 128 / 130 / 8
    scale = pipeline.predict_gpu(_breakdown("scale"))
    assert scale.copy_in_ms == pytest.approx(16 * MiB / link * 1e3)
    assert scale.compute_ms == pytest.approx(2 * 16 * MiB / 3350e9 * 1e3)
    assert scale.transfer_fraction > 0.95
    matmul = pipeline.predict_gpu(_breakdown("matmul"))
    assert matmul.compute_ms == pytest.approx(2 * 2048**3 / 67e12 * 1e3)
    assert matmul.compute_tf32_ms == pytest.approx(2 * 2048**3 / 495e12 * 1e3)
    assert "dense" in str(matmul) and "H100 SXM" in str(matmul)
    with pytest.raises(ValueError, match="predict_gpu"):
        pipeline.predict_gpu(_breakdown("my_op"))


def test_plot_pipeline_draws_shares_and_the_timed_together_tick() -> None:
    import matplotlib.pyplot as plt

    b = _breakdown("scale")
    ax = bandwidth.plot_pipeline([b, pipeline.predict_gpu(b)])
    try:
        assert "share" in ax.get_xlabel()
        assert "all three, timed together" in [t.get_text() for t in ax.get_legend().get_texts()]
    finally:
        plt.close(ax.figure)


# --------------------------------------------------------------------------- references, checks


def test_format_references_gives_a_wide_band_verdict() -> None:
    def row(gb: float) -> SimpleNamespace:
        return SimpleNamespace(
            gb_per_s=gb,
            implementation="C loop (cc -O3)",
            kernel="copy",
            bytes_per_array=2**29,
            dtype="float64",
        )

    cpu = SimpleNamespace(
        labkit={"copy": row(20.0), "triad": row(10.0)},
        references={"copy": (row(21.0),), "triad": (row(21.0),)},
        informational=(),
        c_reference=SimpleNamespace(status="ok", note=""),
        notes=(),
        ratio=lambda k: {"copy": 20 / 21, "triad": 10 / 21}[k],
        best_reference=lambda k: row(21.0),
    )
    text = references.format_references(cpu)
    assert text.startswith("every row on arrays of 512 MiB (float64)")  # round-5 review, P1
    assert "copy: labkit / best reference (C loop) = 0.95×, within 10%" in text
    assert "triad: labkit / best reference (C loop) = 0.48×, well below" in text
    cpu.ratio = lambda k: {"copy": 0.8, "triad": 1.0}[k]
    assert "0.80×, somewhat below the reference" in references.format_references(cpu)


def test_the_host_link_exercise_is_peak_to_peak_gen5() -> None:
    link = 32 * 16 * 128 / 130 / 8
    assert check.bandwidth.PCIE_GEN5_X16_GB_PER_S == pytest.approx(link)
    good = check.bandwidth.host_link_vs_hbm(3350 / link)
    assert good.passed and "53×" in good.message
    assert "both directions" in check.bandwidth.host_link_vs_hbm(3350 / (2 * link)).message
    assert "128b/130b" in check.bandwidth.host_link_vs_hbm(3350 / 64).message
    assert "Gen4" in check.bandwidth.host_link_vs_hbm(134).message
    assert not check.bandwidth.host_link_vs_hbm(...).solved
    assert math.isclose(check.bandwidth.H100_MEASURED_H2D_GB_PER_S, 35.2)


# --------------------------------------------------------------------------- issue 15, nb02 review


def test_strided_verdicts_say_when_the_run_was_disturbed() -> None:
    # stride 1 at 0.004 GB/s against a 0.04 GB/s DRAM figure: not memory-bound
    slow = _strided_result({1: 1.0, 2: 2.0, 64: 17.0}, {1: 0.1, 2: 0.11, 64: 0.2})
    assert slow.row(1).gb_per_s == pytest.approx(0.004)
    text = slow.verdicts(dram_gb_per_s=0.04)
    assert (
        text.startswith("the stride-1 baseline is not memory-bound") and len(text.splitlines()) == 2
    )
    assert "not printed" in text
    assert not slow.disturbances(dram_gb_per_s=0.005)
    # an in-cache strided sum 10x faster than the contiguous one
    odd = _strided_result({1: 1.0, 2: 2.0, 64: 17.0}, {1: 1.0, 2: 0.1, 64: 1.0})
    assert "in cache, a strided sum" in odd.verdicts()
    # stride 64 barely slower than stride 1 although it fetches 16x the lines
    flat = _strided_result({1: 1.0, 2: 1.1, 64: 2.0}, {1: 0.1, 2: 0.11, 64: 0.2})
    assert "a wide stride took less than half" in flat.verdicts()


def test_in_cache_views_fit_a_quarter_of_the_summed_last_level_cache(monkeypatch) -> None:
    monkeypatch.setattr(strided, "_cpu_last_level_cache_bytes", lambda: 8 * 2**20)
    for stride in (1, 2, 16, 64):
        count = strided.in_cache_elements("cpu", stride, 4)
        assert count * stride * 4 <= 2 * 2**20 or count == strided.MIN_IN_CACHE_ELEMENTS
    assert strided.flush_bytes("cpu") == 16 * 2**20
    from labkit.bandwidth import sizes

    total = sizes.last_level_cache_bytes("cpu")
    if total:  # the flush covers every instance of the last-level cache, summed
        monkeypatch.undo()
        assert strided.flush_bytes("cpu") == 2 * total


def test_layout_costs_flag_a_transposed_copy_faster_than_a_plain_one() -> None:
    class Timings:
        def __init__(self, ms: dict[str, float]) -> None:
            self.ms = ms

        def __getitem__(self, label: str) -> SimpleNamespace:
            return SimpleNamespace(median_ms=self.ms[label])

        def __str__(self) -> str:
            return "(table)"

    def costs(copy: float, transposed: float, mm: float, mmt: float) -> str:
        ms = {layout.COPY: copy, layout.TRANSPOSED: transposed, "a @ b": mm, "a @ b.t()": mmt}
        return str(layout.LayoutCosts(side=4, timings=Timings(ms)))

    assert "this run was disturbed: the transposed copy" in costs(8.0, 0.8, 40.0, 40.0)
    text = costs(1.0, 1.5, 40.0, 40.0)
    assert "The transposed copy (what x.t().contiguous() does)" in text and "1.50×" in text
    assert "about the same, because BLAS" in text
    assert "slower here" in costs(1.0, 1.5, 40.0, 56.0)  # 1.4x is no longer "no slower"


def _sweep_rows(ms_by_bytes: dict[int, float]) -> tuple:
    from labkit.bandwidth import stream

    rows = []
    for size, ms in ms_by_bytes.items():
        n = size // 8
        rows.append(
            stream.BandwidthResult(
                kernel="triad",
                device="cpu",
                dtype="float64",
                n_elements=n,
                bytes_per_array=size,
                bytes_per_call=stream.stream_bytes("triad", n),
                calls_per_sample=1,
                timing=_timing(ms),
                implementation="torch",
                threads=2,
            )
        )
    return tuple(rows)


def test_the_sweep_reading_comes_from_the_numbers(monkeypatch) -> None:
    from labkit.bandwidth import sweep as sweep_mod

    monkeypatch.setattr(sweep_mod, "last_level_cache_bytes", lambda device: 32 * 2**20)
    kib, mib = 1024, 2**20
    # loaded: every threaded call about 8 ms whatever its size
    stalled = sweep_mod.StreamSweep(
        _sweep_rows({8 * kib: 0.003, 392 * kib: 8.0, 4 * mib: 8.0, 512 * mib: 65.0}),
        "cpu",
        "float64",
    )
    assert stalled.reading().startswith("this run was disturbed")
    # quiet: 4 MiB arrays (12 MiB working set) in cache at 100 GB/s, DRAM at 25 GB/s
    quiet = sweep_mod.StreamSweep(
        _sweep_rows({8 * kib: 0.003, 392 * kib: 0.012, 4 * mib: 0.126, 512 * mib: 64.4}),
        "cpu",
        "float64",
    )
    assert quiet.reading().startswith("Arrays that fit in a cache streamed faster")
    assert quiet.fixed_cost_ms() == pytest.approx(0.003)
    assert quiet.overhead_bytes_per_array() == 392 * kib  # 3 µs is 25% of 12 µs, 2% of 126 µs
    flat = sweep_mod.StreamSweep(
        _sweep_rows({8 * kib: 0.003, 392 * kib: 0.05, 4 * mib: 0.5, 512 * mib: 64.4}),
        "cpu",
        "float64",
    )
    assert flat.reading().startswith("No cache-sized array streamed")


def test_numpy_copy_is_shown_but_not_the_bar() -> None:
    assert "memmove" in references.WRITE_ALLOCATE_NOTE
    assert references.COMPARABLE == 0.90 and references.WELL_BELOW == 0.75


def test_the_pipeline_prints_its_copy_rate_and_how_much_cheaper_each_part_gets() -> None:
    def breakdown(copy_ms: float, compute_ms: float) -> pipeline.PipelineBreakdown:
        values = {
            "op": "scale",
            "device": "cpu",
            "n_bytes": 16 * 2**20,
            "host_memory": "pageable",
            "note": "",
            "copy_in": _timing(copy_ms),
            "compute": _timing(compute_ms),
            "copy_back": _timing(copy_ms),
            "total": _timing(2 * copy_ms + compute_ms),
        }
        return pipeline.PipelineBreakdown(**values)

    quiet = breakdown(1.0, 1.0)
    assert quiet.copy_gb_per_s == pytest.approx(2 * 16 * 2**20 / 1e-3 / 1e9)
    assert quiet.copy_reading(30.0).startswith("The copies ran at main-memory speed")
    assert breakdown(8.0, 8.0).copy_reading(30.0).startswith("this run was disturbed")
    text = str(pipeline.predict_gpu(quiet))
    assert "the compute gets far cheaper than the copies" in text
    assert "issues/6" in text and "issues/24" in text
    assert "memcpy" not in pipeline.CPU_NOTE


def test_strided_verdict_tells_pages_from_pairs_with_two_wide_strides() -> None:
    """Sixth review (R6-02-W2): stride 32 near 16× and stride 64 at 27× is not pair fetching.

    Past two lines per value both line models stay flat; a per-page cost keeps growing.
    """
    pages = _strided_result({1: 1.0, 2: 2.0, 32: 18.7, 64: 26.9}, {1: 0.1, 2: 0.2, 32: 1, 64: 1})
    text = pages.verdicts()
    assert "From stride 32 to 64 it still grew 1.44×" in text
    assert "a cost per page touched" in text and "does not separate" not in text
    flat = _strided_result({1: 1.0, 2: 2.0, 32: 31.0, 64: 33.0}, {1: 0.1, 2: 0.2, 32: 1, 64: 1})
    assert "grew only 1.06×" in flat.verdicts() and "no cost per page" in flat.verdicts()
    one_wide = _strided_result({1: 1.0, 2: 2.0, 64: 34.0}, {1: 0.1, 2: 0.3, 64: 0.8})
    assert "this run does not separate the two" in one_wide.verdicts()
