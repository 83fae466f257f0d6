"""Amdahl's law, the Karp–Flatt metric and thread-scaling measurements (labkit.parallelism.amdahl)."""

from __future__ import annotations

import math

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from labkit.parallelism import (
    amdahl,
    plots,  # noqa: E402
)
from labkit.timing.bench import Timing  # noqa: E402

TINY = {"rounds": 1, "warmup_ms": 0, "rep_ms": 1, "show_progress": False}

# --------------------------------------------------------------------------- formulas


def test_amdahl_speedup_hand_computed() -> None:
    assert amdahl.amdahl_speedup(0.1, 2) == pytest.approx(1 / 0.55)  # 1.818...
    assert amdahl.amdahl_speedup(0.1, 10) == pytest.approx(1 / 0.19)  # 5.263...
    assert amdahl.amdahl_speedup(0.25, 4) == pytest.approx(1 / (0.25 + 0.75 / 4))  # 2.2857
    assert amdahl.amdahl_speedup(0.0, 64) == pytest.approx(64.0)
    assert amdahl.amdahl_speedup(1.0, 64) == pytest.approx(1.0)
    assert amdahl.amdahl_speedup(0.1, 1) == pytest.approx(1.0)
    assert amdahl.amdahl_speedup(0.1, 1e12) == pytest.approx(10.0, rel=1e-6)  # the 1/f limit


def test_karp_flatt_hand_computed() -> None:
    assert amdahl.karp_flatt(1.6, 2) == pytest.approx(0.25)  # (0.625 - 0.5) / 0.5
    assert amdahl.karp_flatt(2.0, 2) == pytest.approx(0.0)  # perfect scaling
    assert amdahl.karp_flatt(1.0, 4) == pytest.approx(1.0)  # no scaling at all
    assert amdahl.karp_flatt(3.0, 4) == pytest.approx((1 / 3 - 1 / 4) / (3 / 4))  # 0.1111
    assert amdahl.karp_flatt(2.5, 2) < 0  # super-linear


@pytest.mark.parametrize("f", [0.0, 0.05, 0.3, 0.9])
@pytest.mark.parametrize("n", [2, 3, 8, 64])
def test_karp_flatt_inverts_amdahl(f: float, n: int) -> None:
    assert amdahl.karp_flatt(amdahl.amdahl_speedup(f, n), n) == pytest.approx(f, abs=1e-12)


def test_fit_serial_fraction() -> None:
    threads = [1, 2, 4, 8]
    speedups = [amdahl.amdahl_speedup(0.3, n) for n in threads]
    assert amdahl.fit_serial_fraction(threads, speedups) == pytest.approx(0.3)
    # one point: exactly Karp–Flatt
    assert amdahl.fit_serial_fraction([1, 2], [1.0, 1.6]) == pytest.approx(0.25)
    # super-linear speedup has no negative serial part: clamped to 0
    assert amdahl.fit_serial_fraction([2], [2.5]) == 0.0


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: amdahl.amdahl_speedup(1.5, 2), "serial_fraction must be a finite number >= 0"),
        (lambda: amdahl.amdahl_speedup(-0.1, 2), "serial_fraction must be a finite number >= 0"),
        (lambda: amdahl.amdahl_speedup(0.1, 0), "n must be a finite number >= 1"),
        (lambda: amdahl.amdahl_speedup("0.1", 2), "serial_fraction must be a number"),
        (lambda: amdahl.karp_flatt(0, 2), "speedup must be a finite number > 0"),
        (lambda: amdahl.karp_flatt(1.5, 1), "n must be a finite number > 1"),
        (lambda: amdahl.karp_flatt(math.nan, 2), "speedup must be a finite number"),
        (lambda: amdahl.fit_serial_fraction([1, 2], [1.0]), "same length"),
        (lambda: amdahl.fit_serial_fraction([1], [1.0]), "more than 1 thread"),
        (
            lambda: amdahl.fit_serial_fraction([0, 2], [1.0, 1.5]),
            r"threads\[0\] must be a finite number >= 1",
        ),
    ],
)
def test_formulas_validate(call: object, match: str) -> None:
    with pytest.raises((TypeError, ValueError), match=match):
        call()  # type: ignore[operator]


def test_default_thread_counts() -> None:
    assert amdahl.default_thread_counts(1) == (1,)
    assert amdahl.default_thread_counts(4) == (1, 2, 3, 4)
    assert amdahl.default_thread_counts(16) == (1, 2, 4, 8, 16)
    assert amdahl.default_thread_counts(12) == (1, 2, 4, 8, 12)
    assert amdahl.default_thread_counts()[0] == 1


# --------------------------------------------------------------------------- measurement


@pytest.mark.parametrize("workload", ["matmul+python", "matmul"])
def test_measure_thread_scaling_structure(workload: str) -> None:
    before = torch.get_num_threads()
    result = amdahl.measure_thread_scaling(
        workload, threads=[2, 1], matmul_size=16, python_steps=50, **TINY
    )
    assert torch.get_num_threads() == before
    assert result.workload == workload
    assert [p.threads for p in result.points] == [1, 2]
    one, two = result.points
    assert one.speedup == 1.0 and one.serial_fraction is None
    assert two.speedup == pytest.approx(one.median_ms / two.median_ms)
    assert two.serial_fraction == pytest.approx(amdahl.karp_flatt(two.speedup, 2))
    assert one.timing.n >= 5 and one.timing.label == f"{workload}, 1 thread"
    if result.regime == amdahl.AMDAHL:  # 1 <= S(2) <= 2; a loaded machine can give S(2) < 1
        assert result.serial_fraction is not None and 0.0 <= result.serial_fraction <= 1.0
        assert "serial fraction inferred from the speedup on 2 threads: f = " in str(result)
    else:
        assert result.serial_fraction is None
        assert "does not describe this run" in str(result)


def test_measure_thread_scaling_pools_rounds() -> None:
    result = amdahl.measure_thread_scaling(
        lambda: sum(range(50)),
        threads=[1],
        rounds=3,
        warmup_ms=0,
        rep_ms=0.1,
        show_progress=False,
    )
    assert result.points[0].timing.n >= 15  # >= 5 samples from each of 3 rounds
    assert result.serial_fraction is None
    assert "cannot be inferred" in str(result)


def test_thread_count_restored_when_the_workload_raises() -> None:
    before = torch.get_num_threads()

    def broken() -> None:
        raise ValueError("workload failed")

    with pytest.raises(ValueError, match="workload failed"):
        amdahl.measure_thread_scaling(broken, threads=[1, 2], **TINY)
    assert torch.get_num_threads() == before


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"threads": [2, 4]}, "threads must include 1"),
        ({"threads": []}, "threads must be a non-empty list"),
        ({"threads": [1, 0]}, r"threads\[1\] must be a positive integer"),
        ({"workload": "fft"}, "workload must be one of 'matmul\\+python', 'matmul'"),
        ({"matmul_size": 0}, "matmul_size must be a positive integer"),
        ({"rounds": 0}, "rounds must be a positive integer"),
    ],
)
def test_measure_thread_scaling_validates(kwargs: dict[str, object], match: str) -> None:
    options = {"threads": [1], **TINY, **kwargs}
    with pytest.raises((TypeError, ValueError), match=match):
        amdahl.measure_thread_scaling(**options)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- results and plot


def _scaling(f: float | None) -> amdahl.ThreadScaling:
    points = []
    for n in (1, 2):
        speedup = 1.0 if n == 1 or f is None else amdahl.amdahl_speedup(f, n)
        ms = 10.0 / speedup
        e = None if n == 1 or f is None else amdahl.karp_flatt(speedup, n)
        points.append(amdahl.ScalingPoint(n, ms, speedup, e, Timing(samples_ms=(ms,) * 5)))
    return amdahl.ThreadScaling("synthetic", tuple(points), f)


def test_thread_scaling_predictions() -> None:
    result = _scaling(0.2)
    assert result.predicted_speedup(64) == pytest.approx(1 / (0.2 + 0.8 / 64))
    assert result.max_speedup == pytest.approx(5.0)
    assert _scaling(0.0).max_speedup == math.inf
    assert _scaling(None).max_speedup is None
    with pytest.raises(ValueError, match="no serial fraction"):
        _scaling(None).predicted_speedup(4)


def test_plot_amdahl_labels_scales_and_curves() -> None:
    ax = plots.plot_amdahl(_scaling(0.2), max_threads=32)
    try:
        assert ax.get_xlabel() == "threads n"
        assert ax.get_ylabel() == "speedup S(n) = T(1) / T(n) (×)"
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
        assert ax.get_title().startswith("Amdahl's law: synthetic\non ")
        labels = [line.get_label() for line in ax.get_lines()]
        assert "ideal: S(n) = n" in labels and "measured" in labels
        assert "Amdahl, inferred f = 0.200 (threads measured)" in labels
        assert "limit 1/f = 5×" in labels
        curve = next(line for line in ax.get_lines() if line.get_label().startswith("Amdahl"))
        assert max(curve.get_xdata()) == pytest.approx(2)  # solid only where threads were measured
        beyond = next(line for line in ax.get_lines() if "not measured" in line.get_label())
        assert min(beyond.get_xdata()) == pytest.approx(2)
        assert max(beyond.get_xdata()) == pytest.approx(32)
        assert beyond.get_linestyle() == "--"
    finally:
        plt.close(ax.figure)


def test_plot_amdahl_without_a_serial_fraction_and_bad_input() -> None:
    ax = plots.plot_amdahl(_scaling(None))
    try:
        labels = [line.get_label() for line in ax.get_lines()]
        assert labels == ["ideal: S(n) = n", "measured"]
    finally:
        plt.close(ax.figure)
    with pytest.raises(ValueError, match="max_threads must be an integer >= 2"):
        plots.plot_amdahl(_scaling(0.1), max_threads=1)
