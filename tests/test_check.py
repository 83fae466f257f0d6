"""Exercise checkers: the right answer passes, each usual mistake gets its own hint."""

from __future__ import annotations

import numpy as np
import pytest

from labkit import check

REF_GB_PER_S = 2 * 2_619_000e3 * (5120 / 8) / 1e9  # 3352.32, hand-computed


@pytest.mark.parametrize(
    ("answer", "passed", "hint"),
    [
        (2 * 2**30 / 3352.32e9 * 1e3, True, "No kernel can be faster"),
        (2**30 / 3352.32e9 * 1e3, False, "also writes y"),
        (4 * 2**30 / 3352.32e9 * 1e3, False, "read once"),
        (2e9 / 3352.32e9 * 1e3, False, "2**30 bytes"),
        (2 * 2**30 / 3352.32e9 * 1e6, False, "µs"),
        (5.0, False, "is not it"),
    ],
)
def test_elementwise_time(answer: float, passed: bool, hint: str) -> None:
    result = check.elementwise_time(answer)
    assert result.passed is passed and result.solved
    assert hint in result.message
    assert not check.elementwise_time(...).solved


@pytest.mark.parametrize(
    ("answer", "passed", "hint"),
    [
        (34, True, "is at most 1% of a 10.2 µs sample"),
        (34.5, True, "at most 1%"),
        (1, False, "100× too few"),
        (10, False, "Too few"),
        (1 / 33.4, False, "reciprocal"),
        (500, False, "more than needed"),
    ],
)
def test_calls_per_sample(answer: float, passed: bool, hint: str) -> None:
    result = check.calls_per_sample(answer, pair_ns=100.0, call_ns=300.0)
    assert result.passed is passed and result.solved, result.message
    assert hint in result.message
    assert not check.calls_per_sample(None, 100.0, 300.0).solved


def test_peak_bandwidth_right_answer() -> None:
    result = check.peak_bandwidth(REF_GB_PER_S)
    assert result and result.passed and "3352 GB/s" in str(result)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (REF_GB_PER_S / 2, "two transfers per clock"),
        (REF_GB_PER_S * 8, "in bits"),
        (REF_GB_PER_S * 1000, "1000×"),
        (REF_GB_PER_S / 1000, "1000×"),
        (123.0, "is not it"),
    ],
)
def test_peak_bandwidth_mistakes_are_named(answer: float, hint: str) -> None:
    result = check.peak_bandwidth(answer)
    assert not result and result.solved and hint in result.message


@pytest.mark.parametrize("blank", [None, ...])
def test_unsolved_is_not_an_error(blank: object) -> None:
    result = check.peak_bandwidth(blank)
    assert not result.passed and not result.solved
    assert "not solved yet" in str(result) and "Hint:" in str(result)
    assert not check.summary_statistics(blank, blank).solved
    assert not check.on_best_device(blank).solved


@pytest.mark.parametrize("bad", ["3352", [1.0], True])
def test_non_numbers_are_rejected_with_the_argument_name(bad: object) -> None:
    with pytest.raises(TypeError, match="answer_gb_per_s"):
        check.peak_bandwidth(bad)


def test_nan_is_rejected() -> None:
    with pytest.raises(ValueError, match="finite"):
        check.peak_bandwidth(float("nan"))


def test_summary_statistics_right_answer_matches_numpy() -> None:
    steady = np.array(check.TIMING_SAMPLES_MS[1:])
    q1, q3 = np.percentile(steady, [25, 75])
    result = check.summary_statistics(np.median(steady), q3 - q1)
    assert result.passed, result


def test_summary_statistics_names_the_mean() -> None:
    steady = np.array(check.TIMING_SAMPLES_MS[1:])
    result = check.summary_statistics(steady.mean(), 0.05)
    assert not result and "mean" in result.message


def test_summary_statistics_notices_the_warm_up_call() -> None:
    everything = np.array(check.TIMING_SAMPLES_MS)
    result = check.summary_statistics(np.median(everything), 0.05)
    assert not result and "first call" in result.message


def test_on_best_device() -> None:
    torch = pytest.importorskip("torch")
    from labkit import pick_device

    assert check.on_best_device(torch.zeros(2, device=pick_device("torch"))).passed
    assert not check.on_best_device(np.zeros(2)).passed
    assert not check.on_best_device(torch.zeros(2, device="meta")).passed


def test_threads_to_fill() -> None:
    assert check.threads_to_fill(520).passed  # ceil(sqrt(132 * 2048)) = ceil(519.9)
    assert "Round *up*" in check.threads_to_fill(519).message
    assert "number of threads" in check.threads_to_fill(132 * 2048).message
    assert "FP32 lanes" in check.threads_to_fill(130).message  # sqrt(16896) = 130
    assert not check.threads_to_fill(None).solved


def test_amdahl_prediction() -> None:
    # hand-computed: e = (1/1.6 - 1/2) / (1 - 1/2) = 0.25; S(64) = 1 / (0.25 + 0.75/64) = 3.8209
    assert check.amdahl_prediction(0.25, 3.8209).passed
    assert "parallel" in check.amdahl_prediction(0.75, 3.82).message
    assert "infinitely many" in check.amdahl_prediction(0.25, 4.0).message
    assert "S(64)" in check.amdahl_prediction(0.25, 2.0).message
    assert not check.amdahl_prediction(0.3, 3.82).passed


def test_stream_bytes() -> None:
    assert check.stream_bytes(12_000_000).passed  # 3 arrays × 1e6 × 4 B
    assert "write-allocate" in check.stream_bytes(16_000_000).message
    assert "float64" in check.stream_bytes(24_000_000).message
    assert "two arrays" in check.stream_bytes(8_000_000).message
    assert not check.stream_bytes(None).solved


def test_host_link_vs_hbm() -> None:
    ref = 3350 / (32 * 16 * 128 / 130 / 8)
    assert check.host_link_vs_hbm(ref).passed  # 53x, peak to peak
    assert "Upside down" in check.host_link_vs_hbm(1 / ref).message
    assert "128b/130b" in check.host_link_vs_hbm(3350 / 64).message
    assert "Gen5" in check.host_link_vs_hbm(134).message
    assert not check.host_link_vs_hbm(10).passed


def test_roofline_prediction_uses_the_given_roofline() -> None:
    from labkit.roofline.model import Roofline

    cpu = Roofline("cpu", {"float32": 200.0}, 25.0)  # ridge 8 FLOP/byte
    right = {
        "add": "memory-bound",
        "sum": "memory-bound",
        "matmul 4096": "compute-bound",
        "conv 3x3": "compute-bound",
    }
    assert check.roofline_prediction(right, cpu).passed
    # a machine whose ridge (1000 FLOP/byte) is above the conv's 144 and the matmul's 683
    slow_memory = Roofline("x", {"float32": 100_000.0}, 100.0)
    result = check.roofline_prediction(right, slow_memory)
    assert not result.passed and "conv 3x3" in result.message and "matmul 4096" in result.message
    assert (
        "missing: sum"
        in check.roofline_prediction({k: v for k, v in right.items() if k != "sum"}, cpu).message
    )
    assert (
        "is 'memory-bound' or" in check.roofline_prediction({**right, "add": "slow"}, cpu).message
    )
    assert not check.roofline_prediction({k: None for k in right}, cpu).solved


def test_sync_points() -> None:
    assert check.sync_points(dict(check.SYNC_LINES)).passed
    flipped = {**check.SYNC_LINES, "y = x @ w": True}
    result = check.sync_points(flipped)
    assert not result and "only queues it" in result.message
    assert "missing" in check.sync_points({"y = x @ w": False}).message
    assert not check.sync_points({k: None for k in check.SYNC_LINES}).solved


def test_cnn_checks() -> None:
    assert check.cnn_in_features(73_728).passed  # 32 × 48 × 48
    assert "pooling" in check.cnn_in_features(294_912).message
    assert "article's number" in check.cnn_in_features(32_768).message
    assert check.cnn_head_params(4_014_090).passed
    assert "biases" in check.cnn_head_params(4_014_080).message


def test_rnn_param_counts() -> None:
    # hand-computed: 64·32 + 64·64 + 64 = 6,208 (Keras); + 64 = 6,272 (PyTorch)
    assert check.rnn_param_counts(6208, 6272).passed
    assert "Swapped" in check.rnn_param_counts(6272, 6208).message
    assert "differ" in check.rnn_param_counts(6208, 6208).message


@pytest.mark.parametrize("mode", ["autograde", "validate"])
def test_a_failing_check_raises_while_nbgrader_grades(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # nbgrader scores a check cell by whether it raises; it sets this variable
    # while it autogrades or validates a submission.
    monkeypatch.setenv("NBGRADER_EXECUTION", mode)
    with pytest.raises(AssertionError, match="not solved yet"):
        check.peak_bandwidth(...)
    with pytest.raises(AssertionError, match="not yet"):
        check.peak_bandwidth(1.0)
    assert check.peak_bandwidth(2 * 2_619_000e3 * 5120 / 8 / 1e9)


def test_a_failing_check_only_reports_outside_nbgrader(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    assert not check.peak_bandwidth(1.0)
    monkeypatch.setenv("NBGRADER_EXECUTION", "")
    assert not check.peak_bandwidth(...)
