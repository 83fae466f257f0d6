"""Issue 15 (notebook 02): STREAM's statistic, strided reads with a compute baseline, the
pipeline's interleaved timing and its GPU prediction, and the host-link exercise."""

from __future__ import annotations

import inspect
import math
from types import SimpleNamespace

import pytest

from labkit import bandwidth, check
from labkit.bandwidth import pipeline, references, strided
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
    pairs = _strided_result({1: 1.0, 2: 2.0, 64: 34.0}, {1: 0.1, 2: 0.2, 64: 0.8})
    assert pairs.in_cache_slowdown(2) == pytest.approx(2.0)
    assert pairs.pair_slowdown(64) == 32 and pairs.expected_slowdown(64) == 16
    text = pairs.verdicts()
    assert "part of every slowdown" in text and "closer to lines fetched in 128-byte pairs" in text
    assert "in cache" in pairs.table() and "in-cache slowdown" in pairs.table()
    single = _strided_result({1: 1.0, 2: 2.0, 64: 17.0}, {1: 0.1, 2: 0.11, 64: 0.2})
    text = single.verdicts()
    assert "about the same" in text and "closer to single 64-byte lines" in text


def test_strided_read_measures_an_in_cache_baseline_per_stride() -> None:
    result = strided.strided_read(
        (1, 2), n_elements=4096, flush_cache=False, rep_ms=1.0, max_reps=3
    )
    assert all(r.in_cache is not None and r.in_cache_ns_per_value for r in result.rows)
    assert result.rows[0].in_cache_elements == min(4096, strided.in_cache_elements("cpu", 2, 4))


def test_layout_costs_runs_and_names_what_it_compares() -> None:
    costs = strided.layout_costs(64, rounds=2, rep_ms=1.0)
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
    assert matmul.compute_tf32_ms == pytest.approx(2 * 2048**3 / 494.7e12 * 1e3)
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
        return SimpleNamespace(gb_per_s=gb, implementation="C loop (cc -O3)", kernel="copy")

    cpu = SimpleNamespace(
        labkit={"copy": row(20.0), "triad": row(10.0)},
        references={"copy": (row(21.0),), "triad": (row(21.0),)},
        informational=(),
        c_reference=SimpleNamespace(status="ok", note=""),
        ratio=lambda k: {"copy": 20 / 21, "triad": 10 / 21}[k],
        best_reference=lambda k: row(21.0),
    )
    text = references.format_references(cpu)
    assert "copy: labkit / best reference (C loop) = 0.95×, comparable" in text
    assert "triad: labkit / best reference (C loop) = 0.48×, well below" in text


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
