"""Gradient accumulation in one process: the same gradient as the big batch (without batch norm)."""

from __future__ import annotations

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

pytest.importorskip("torch")

from labkit.scaling.accumulation import Accumulation, accumulate_equivalence  # noqa: E402
from labkit.scaling.plots import plot_accumulation

FAST = {"warmup_ms": 0, "rep_ms": 1, "min_reps": 1, "width": 16, "device": "cpu"}


def test_accumulated_micro_batches_give_the_big_batch_gradient() -> None:
    result = accumulate_equivalence(micro_batch=8, accum_steps=4, **FAST)
    assert isinstance(result, Accumulation)
    assert result.effective_batch == 32 and result.dtype == "float32"
    assert result.equivalent and result.max_rel_grad_diff <= 1e-5
    assert result.max_param_diff < 1e-5
    assert result.accumulated.median_ms > 0 and result.direct.median_ms > 0
    text = str(result)
    assert "4 micro-batches of 8" in text and "one batch of 32" in text
    assert ": the same gradient" in text


def test_float64_agrees_to_rounding() -> None:
    result = accumulate_equivalence(micro_batch=4, accum_steps=3, dtype="float64", **FAST)
    assert result.equivalent and result.max_rel_grad_diff < 1e-12


def test_batch_norm_breaks_the_equivalence() -> None:
    result = accumulate_equivalence(micro_batch=8, accum_steps=4, batch_norm=True, **FAST)
    assert not result.equivalent and result.max_rel_grad_diff > 1e-3
    assert "NOT the same gradient" in str(result)


def test_plot_accumulation() -> None:
    result = accumulate_equivalence(micro_batch=4, accum_steps=2, **FAST)
    ax = plot_accumulation(result)
    try:
        assert "effective batch of 8" in ax.get_title()
    finally:
        plt.close(ax.figure)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"micro_batch": 0}, ValueError, "micro_batch"),
        ({"accum_steps": 2.0}, TypeError, "accum_steps"),
        ({"dtype": "float16"}, ValueError, "dtype"),
        ({"batch_norm": True, "micro_batch": 1}, ValueError, "micro_batch"),
        ({"lr": 0}, ValueError, "lr"),
        ({"rep_ms": 0}, ValueError, "rep_ms"),
        ({"device": 3}, TypeError, "device"),
    ],
)
def test_arguments_are_validated(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        accumulate_equivalence(**{**FAST, **kwargs})
