"""Plot helpers: units on every axis, the device in the title, bad input named."""

from __future__ import annotations

import warnings

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from labkit import notebook, plotting  # noqa: E402
from labkit.bandwidth import plots as bandwidth_plots  # noqa: E402
from labkit.models import plots as models_plots  # noqa: E402
from labkit.timing import plots as timing_plots  # noqa: E402
from labkit.timing.bench import NoisyTimingWarning, Timing  # noqa: E402


def _timing() -> Timing:
    return Timing(samples_ms=(2.0, 2.1, 1.9, 2.0, 3.0), label="op", device="cpu", first_call_ms=9.0)


def test_plot_samples_labels_units_and_device() -> None:
    ax = timing_plots.plot_samples(_timing())
    try:
        assert ax.get_ylabel() == "time per call (ms)"
        assert "sample number" in ax.get_xlabel()
        assert ax.get_title().startswith("op: every sample\non ")
        assert ax.get_yscale() == "log"
        low, high = ax.get_ylim()
        assert low < 1.9 and high > 9.0  # every sample and the first call are visible
    finally:
        plt.close(ax.figure)


def test_plot_samples_scales_the_unit() -> None:
    t = Timing(samples_ms=(0.002, 0.0021, 0.0019), label="tiny", device="cpu")
    ax = timing_plots.plot_samples(t)
    try:
        assert ax.get_ylabel() == "time per call (µs)"
    finally:
        plt.close(ax.figure)


def test_device_name() -> None:
    assert plotting.device_name("cpu")  # the CPU model, never empty
    assert plotting.device_name("xpu:3") == "xpu:3"
    assert plotting.device_name("tf:CPU:0") == plotting.device_name("cpu")
    assert plotting.device_name("/GPU:0") == "TensorFlow GPU:0"


def test_notebook_setup_is_silent_and_validates(capsys: pytest.CaptureFixture[str]) -> None:
    with warnings.catch_warnings():
        notebook.setup()
        assert capsys.readouterr() == ("", "")
        assert any(f[0] == "ignore" and f[2] is NoisyTimingWarning for f in warnings.filters)
    for bad in (-1, 2**32, 1.5, True, "0"):
        with pytest.raises((TypeError, ValueError), match="seed"):
            notebook.setup(bad)


def test_plot_strided_and_pipeline() -> None:
    from labkit.bandwidth.pipeline import PipelineBreakdown
    from labkit.bandwidth.strided import StridedResult, StridedRow

    rows = tuple(
        StridedRow(s, 1024, 4096, 4096 * s, Timing(samples_ms=(0.01 * s,) * 5), float(s))
        for s in (1, 2, 4)
    )
    strided = StridedResult(rows, "cpu", "float32", 4, 64, True)
    ax = bandwidth_plots.plot_strided(strided)
    try:
        assert ax.get_xscale() == "log" and "GB/s" in ax.get_ylabel()
    finally:
        plt.close(ax.figure)
    t = Timing(samples_ms=(1.0,) * 5)
    pipe = PipelineBreakdown("cpu", "scale", 1 << 20, "pageable", t, t, t, t, "note")
    ax = bandwidth_plots.plot_pipeline([pipe, pipe])
    try:
        assert "%" in ax.get_xlabel() and len(ax.patches) == 6  # 100% stacked bars
    finally:
        plt.close(ax.figure)


def test_plot_timings_and_throughput() -> None:
    from types import SimpleNamespace

    ts = [Timing(samples_ms=(1.0, 1.2, 0.9), label="a"), Timing(samples_ms=(2.0, 2.1), label="b")]
    ax = timing_plots.plot_timings(ts)
    try:
        assert "IQR" in ax.get_xlabel() and len(ax.patches) == 2
    finally:
        plt.close(ax.figure)
    rows = [
        SimpleNamespace(
            batch_size=b,
            images_per_s=100.0 * b,
            images_per_s_low=90.0 * b,
            images_per_s_high=110.0 * b,
            minor_faults_per_call=faults,
            image_size=64,
            inference=True,
            device="cpu",
        )
        for b, faults in ((1, 0.0), (4, 8193.0))
    ]
    ax = models_plots.plot_throughput({"float32": rows})
    try:
        assert ax.get_xscale() == "log" and "IQR" in ax.get_ylabel()
        assert "inference (forward only), 64×64 images" in ax.get_title()
        labels = ax.get_legend_handles_labels()[1]
        assert sorted(labels) == ["float32", "≥ 1,000 page faults per call"]  # the ring
    finally:
        plt.close(ax.figure)
    with pytest.raises(ValueError, match="timings is empty"):
        timing_plots.plot_timings([])
