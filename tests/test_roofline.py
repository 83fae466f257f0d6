"""FLOP and byte counts, the roofline model, and measurements under it (labkit.roofline.model)."""

from __future__ import annotations

import sys
import types

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from labkit.roofline import measure as roofline_measure  # noqa: E402
from labkit.roofline import model as roofline  # noqa: E402
from labkit.roofline import plots  # noqa: E402
from labkit.roofline.model import OpCost, Roofline  # noqa: E402

TINY = {"warmup_ms": 0, "rep_ms": 0.5}

# --------------------------------------------------------------------------- counts


def test_add_cost() -> None:
    op = roofline.add_cost(1_000_000)
    assert (op.flops, op.bytes) == (1_000_000, 12_000_000)  # read a, b; write c; 4 bytes each
    assert op.arithmetic_intensity == pytest.approx(1 / 12)
    assert roofline.add_cost(10, "float16").bytes == 60
    assert roofline.add_cost(10, "bfloat16").bytes == 60
    assert roofline.add_cost(10, "float64").bytes == 240
    assert (op.kind, op.dtype, op.dim("n")) == ("add", "float32", 1_000_000)


def test_matmul_cost() -> None:
    op = roofline.matmul_cost(1024, 1024, 1024)
    assert op.flops == 2 * 1024**3 == 2_147_483_648
    assert op.bytes == 3 * 1024**2 * 4 == 12_582_912
    assert op.arithmetic_intensity == pytest.approx(2048 / 12)  # 170.67
    small = roofline.matmul_cost(2, 3, 4)  # A 2×4, B 4×3, C 2×3
    assert small.flops == 2 * 2 * 3 * 4 == 48
    assert small.bytes == (8 + 12 + 6) * 4 == 104
    assert str(op) == (
        "matmul 1024×1024 @ 1024×1024 (float32): 2.15 GFLOP, 12.6 MB moved at least, 171 FLOP/byte"
    )


def test_conv2d_output_size() -> None:
    assert roofline.conv2d_output_size(224, 224, 7, 7, stride=2, padding=3) == (112, 112)
    assert roofline.conv2d_output_size(5, 5, 3, 3) == (3, 3)
    assert roofline.conv2d_output_size(5, 5, 3, 3, padding=1) == (5, 5)
    assert roofline.conv2d_output_size(7, 7, 3, 3, stride=2) == (3, 3)
    assert roofline.conv2d_output_size(8, 6, 3, 1) == (6, 6)
    with pytest.raises(ValueError, match="larger than the padded 2×2 input"):
        roofline.conv2d_output_size(2, 2, 3, 3)


def test_conv2d_cost() -> None:
    op = roofline.conv2d_cost(1, 64, 56, 56, 64, 3, 3, stride=1, padding=1)
    assert op.flops == 2 * 64 * 56 * 56 * 64 * 9 == 231_211_008
    assert op.bytes == (64 * 56 * 56 + 64 * 64 * 9 + 64 * 56 * 56) * 4 == 1_753_088
    odd = roofline.conv2d_cost(2, 3, 8, 6, 4, 3, 1)  # Ho = 6, Wo = 6
    assert odd.flops == 2 * 2 * 4 * 6 * 6 * 3 * 3 * 1 == 5184
    assert odd.bytes == (2 * 3 * 8 * 6 + 4 * 3 * 3 * 1 + 2 * 4 * 6 * 6) * 4 == 2448
    assert "stride" not in odd.name and "(stride 1, padding 1)" in op.name


def test_sum_cost() -> None:
    op = roofline.sum_cost(1_000_000)
    assert (op.flops, op.bytes) == (1_000_000, 4_000_004)
    assert op.arithmetic_intensity == pytest.approx(0.25, rel=1e-5)


def test_dtype_names() -> None:
    assert roofline.dtype_bytes("float32") == 4
    assert roofline.dtype_bytes(torch.bfloat16) == 2
    assert roofline.add_cost(4, torch.float64).dtype == "float64"  # type: ignore[arg-type]
    for bad in ("float8", "int32", "tf32", "fp32"):
        with pytest.raises(ValueError, match="dtype must be one of"):
            roofline.add_cost(4, bad)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: roofline.add_cost(0), "n must be an integer >= 1"),
        (lambda: roofline.sum_cost(-5), "n must be an integer >= 1"),
        (lambda: roofline.add_cost(True), "n must be an integer"),
        (lambda: roofline.add_cost(2.5), "n must be an integer"),
        (lambda: roofline.matmul_cost(4, 4, -1), "k must be an integer >= 1"),
        (lambda: roofline.matmul_cost(0, 4, 4), "m must be an integer >= 1"),
        (lambda: roofline.conv2d_cost(1, 3, 8, 8, 4, 3, 3, stride=0), "stride must be"),
        (lambda: roofline.conv2d_cost(1, 3, 8, 8, 4, 3, 3, padding=-1), "padding must be"),
        (lambda: roofline.conv2d_cost(1, 0, 8, 8, 4, 3, 3), "C must be an integer >= 1"),
        (lambda: roofline.conv2d_cost(1, 3, 8, 8, 4, 0, 3), "R must be an integer >= 1"),
        (lambda: roofline.add_cost(4).dim("k"), "has no dimension 'k'"),
    ],
)
def test_count_arguments_are_validated(call: object, match: str) -> None:
    with pytest.raises((TypeError, ValueError), match=match):
        call()  # type: ignore[operator]


# --------------------------------------------------------------------------- the model


def _roof() -> Roofline:
    return Roofline("cpu", {"float32": 180.0, "bfloat16": 720.0}, 30.0)


def test_ridge_and_attainable() -> None:
    roof = _roof()
    assert roof.default_dtype == "float32"
    assert roof.ridge_point() == pytest.approx(6.0)  # 180 GFLOP/s / 30 GB/s
    assert roof.ridge_point("bfloat16") == pytest.approx(24.0)
    assert roof.attainable_gflop_per_s(1.0) == pytest.approx(30.0)
    assert roof.attainable_gflop_per_s(6.0) == pytest.approx(180.0)
    assert roof.attainable_gflop_per_s(100.0) == pytest.approx(180.0)
    assert roof.attainable_gflop_per_s(3.0, "bfloat16") == pytest.approx(90.0)
    assert roof.attainable_gflop_per_s(100.0, "bfloat16") == pytest.approx(720.0)
    assert Roofline("cuda", {"tf32": 400.0}, 2000.0).default_dtype == "tf32"


def test_bound_and_predict_bound() -> None:
    roof = _roof()
    add, big = roofline.add_cost(10**6), roofline.matmul_cost(1024, 1024, 1024)
    assert roof.bound(add) == roofline.predict_bound(add, roof) == "memory-bound"
    assert roof.bound(big) == roofline.predict_bound(big, roof) == "compute-bound"
    at_ridge = OpCost("at ridge", flops=600, bytes=100, dtype="float32", kind="matmul")
    assert roof.bound(at_ridge) == "compute-bound"
    # AI 10: above the float32 ridge (6), below the bfloat16 ridge (24)
    between = OpCost("between", flops=1000, bytes=100, dtype="bfloat16", kind="matmul")
    assert roof.bound(between) == "memory-bound"
    assert roof.bound(between, dtype="float32") == "compute-bound"
    with pytest.raises(
        ValueError, match="dtype must be one of 'float32', 'bfloat16', got 'float64'"
    ):
        roof.bound(roofline.add_cost(4, "float64"))


def test_roofline_is_read_only_and_checks_the_intensity() -> None:
    peaks = {"float32": 180.0}
    roof = Roofline("cpu", peaks, 30.0)
    with pytest.raises(TypeError):
        roof.peak_gflop_per_s["float32"] = 1.0  # type: ignore[index]
    peaks["float32"] = 1.0  # a copy: changing the dict afterwards changes nothing
    assert roof.peak() == 180.0
    roof = _roof()
    with pytest.raises(ValueError, match="ai must be a finite number > 0"):
        roof.attainable_gflop_per_s(0.0)
    assert "ridge point 6.00 FLOP/byte" in str(roof) and "30.0 GB/s" in str(roof)


# --------------------------------------------------------------------------- measurements


def test_measure_peak_compute_tiny() -> None:
    peaks = roofline_measure.measure_peak_compute(
        "cpu", ["float32", "bfloat16"], [16, 8], show_progress=False, **TINY
    )
    assert list(peaks) == ["float32", "bfloat16"]
    for dtype, peak in peaks.items():
        assert peak.dtype == dtype and peak.device == "cpu"
        assert peak.sizes == (8, 16) and peak.size in peak.sizes
        # the ceiling is the fastest sample of the best size: load only slows samples down
        rates = [
            2 * n**3 / (t.min_ms / 1e3) / 1e9 for n, t in zip(peak.sizes, peak.timings, strict=True)
        ]
        assert peak.gflop_per_s == pytest.approx(max(rates))


def test_measure_peak_compute_skips_sizes_predicted_too_slow() -> None:
    peaks = roofline_measure.measure_peak_compute(
        "cpu", ["float32"], [8, 4096], max_call_ms=1e-6, show_progress=False, **TINY
    )
    assert peaks["float32"].sizes == (8,)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dtypes": ["tf32"]}, "'tf32', a mode of NVIDIA tensor cores"),
        ({"dtypes": ["int8"]}, "dtypes must be one of 'float16'"),
        ({"dtypes": "float32"}, "dtypes must be a non-empty list"),
        ({"sizes": [0]}, r"sizes\[0\] must be a positive integer"),
        ({"device": "tpu"}, "device must be one of 'cpu', 'cuda', 'cuda:N'"),
        ({"rep_ms": 0}, "rep_ms must be"),
    ],
)
def test_measure_peak_compute_validates(kwargs: dict[str, object], match: str) -> None:
    options = {"device": "cpu", "show_progress": False, **kwargs}
    with pytest.raises((TypeError, ValueError), match=match):
        roofline_measure.measure_peak_compute(**options)  # type: ignore[arg-type]


def test_the_one_device_resolver(monkeypatch: pytest.MonkeyPatch) -> None:
    """roofline's measurements take a device through labkit.machine.report.resolve_device."""
    from labkit.machine.report import CPU_OR_CUDA, resolve_device

    monkeypatch.setattr("labkit.machine.gpu.has_gpu", lambda: False)
    assert resolve_device(None, kinds=CPU_OR_CUDA) == "cpu"
    assert resolve_device(torch.device("cpu"), kinds=CPU_OR_CUDA) == "cpu"
    with pytest.raises(ValueError, match="no CUDA GPU"):
        resolve_device("cuda", kinds=CPU_OR_CUDA)
    with pytest.raises(
        ValueError, match=r"device must be one of 'cpu', 'cuda', 'cuda:N' \(or None"
    ):
        resolve_device("mps", kinds=CPU_OR_CUDA)
    with pytest.raises(ValueError, match="device must be one of"):
        resolve_device("cuda:x", kinds=CPU_OR_CUDA)
    monkeypatch.setattr("labkit.machine.gpu.has_gpu", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert resolve_device(None, kinds=CPU_OR_CUDA) == "cuda:0"
    assert resolve_device("cuda:1", kinds=CPU_OR_CUDA) == "cuda:1"
    with pytest.raises(ValueError, match="torch sees 2 CUDA GPUs"):
        resolve_device("cuda:2", kinds=CPU_OR_CUDA)


def test_measure_roofline_uses_the_bandwidth_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def peak_bandwidth(device: str) -> object:
        calls.append(device)
        return types.SimpleNamespace(gb_per_s=25.0)

    fake = types.ModuleType("labkit.bandwidth.stream")
    fake.peak_bandwidth = peak_bandwidth  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "labkit.bandwidth.stream", fake)
    roof = roofline_measure.measure_roofline(
        "cpu", ["float32"], sizes=[8], show_progress=False, **TINY
    )
    assert calls == ["cpu"]
    assert roof.device == "cpu" and roof.peak_gb_per_s == 25.0
    assert roof.dtypes == ("float32",) and roof.peak() > 0


@pytest.mark.parametrize(
    "op",
    [
        roofline.add_cost(1000),
        roofline.sum_cost(1000, "bfloat16"),
        roofline.matmul_cost(8, 4, 6),
        roofline.conv2d_cost(1, 2, 5, 5, 3, 3, 3, stride=2, padding=1),
    ],
    ids=lambda op: op.kind,
)
def test_measure_op_rates_follow_the_counts(op: OpCost) -> None:
    m = roofline_measure.measure_op(op, "cpu", **TINY)
    seconds = m.median_ms / 1e3
    assert m.op is op and m.device == "cpu" and m.timing.n >= 5
    assert m.gflop_per_s == pytest.approx(op.flops / seconds / 1e9)
    assert m.gb_per_s == pytest.approx(op.bytes / seconds / 1e9)
    assert m.arithmetic_intensity == op.arithmetic_intensity and m.label == op.name
    assert " GB/s at " in str(m)


def test_measure_op_validates() -> None:
    with pytest.raises(ValueError, match="tf32=True needs a GPU"):
        roofline_measure.measure_op(roofline.add_cost(4), "cpu", tf32=True)
    with pytest.raises(ValueError, match="rep_ms"):
        roofline_measure.measure_op(roofline.add_cost(4), "cpu", rep_ms=-1)


def test_tf32_mode_restores_settings_even_on_error() -> None:
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision if roofline_measure._has_new_precision_api(torch) else None
    with pytest.raises(RuntimeError, match="inside"):
        with roofline_measure.tf32_mode(True):
            if before is not None:
                assert matmul.fp32_precision == "tf32"
                assert torch.backends.cudnn.conv.fp32_precision == "tf32"
            raise RuntimeError("inside")
    if before is not None:
        assert matmul.fp32_precision == before


# --------------------------------------------------------------------------- plot


def test_plot_roofline_labels_scales_and_points() -> None:
    roof = _roof()
    ax = plots.plot_roofline(roof, [("add", 1 / 12, 2.3), ("big matmul", 171.0, 150.0)])
    try:
        assert ax.get_xlabel() == "arithmetic intensity (FLOP/byte)"
        assert ax.get_ylabel() == "performance (GFLOP/s)"
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
        assert ax.get_title().startswith("Roofline: measured roofs and operations\non ")
        labels = [line.get_label() for line in ax.get_lines()]
        assert "memory roof (STREAM): 30.0 GB/s" in labels
        assert "float32 compute roof: 180 GFLOP/s" in labels
        assert "bfloat16 compute roof: 720 GFLOP/s" in labels
        texts = [t.get_text() for t in ax.texts]
        # each point says how much of its own dtype's roof it reached: 2.3 of 30/12 = 2.5
        assert {"add (92% of roof)", "big matmul (83% of roof)"} <= set(texts)
        assert {"ridge 6.00 FLOP/B", "ridge 24.0 FLOP/B"} <= set(texts)
        low, high = ax.get_xlim()
        assert low < 1 / 12 and high > 171.0
    finally:
        plt.close(ax.figure)


def test_plot_roofline_accepts_measurements_and_rejects_points_off_a_log_axis() -> None:
    m = roofline_measure.measure_op(roofline.matmul_cost(8, 8, 8), "cpu", **TINY)
    ax = plots.plot_roofline(_roof(), [m])
    try:
        assert any(t.get_text().startswith(f"{m.label} (") for t in ax.texts)
    finally:
        plt.close(ax.figure)
    with pytest.raises(ValueError, match=r"points\[0\] \(GFLOP/s\) must be a finite number > 0"):
        plots.plot_roofline(_roof(), [("zero", 1.0, 0.0)])
    with pytest.raises(TypeError, match=r"points\[1\] \(FLOP/byte\) must be a number"):
        plots.plot_roofline(_roof(), [("ok", 1.0, 1.0), ("text", "1", 2.0)])
