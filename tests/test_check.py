"""Exercise checkers: the right answer passes, each usual mistake gets its own hint."""

from __future__ import annotations

import numpy as np
import pytest

from labkit import check

REF_GB_PER_S = 2 * 2_619_000e3 * (5120 / 8) / 1e9  # 3352.32, hand-computed


def test_peak_bandwidth_right_answer() -> None:
    result = check.peak_bandwidth(REF_GB_PER_S)
    assert result and result.passed and "3352 GB/s" in str(result)


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (REF_GB_PER_S / 2, "both clock edges"),
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
