"""Issue 15, notebook 01: grain-size sweep, Amdahl uncertainty and extrapolation, tiles and waves."""

from __future__ import annotations

import dataclasses
import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest

from labkit import check
from labkit.check import parallelism as check_parallelism
from labkit.parallelism import amdahl, grain, plots, python_loops, sweep
from labkit.parallelism import threads as threads_module
from labkit.timing.bench import Timing

# --------------------------------------------------------------------------- grain size


def test_grain_size_is_atens_and_the_default_grid_straddles_it() -> None:
    assert grain.GRAIN_SIZE == 32_768  # at::internal::GRAIN_SIZE, aten/src/ATen/Parallel.h
    sizes = grain.GRAIN_SIZES
    assert list(sizes) == sorted(sizes)
    assert grain.GRAIN_SIZE in sizes and grain.GRAIN_SIZE + 1 in sizes
    assert sizes[0] <= grain.GRAIN_SIZE // 2 and sizes[-1] >= 8 * grain.GRAIN_SIZE


def _point(size: int, low: float, high: float) -> grain.GrainPoint:
    return grain.GrainPoint(size, 1.0, 1.0, (low + high) / 2, low, high)


def test_grain_verdict_compares_far_apart_ranges() -> None:
    clear = grain.GrainSweep(2, 5, (_point(8_192, 0.95, 1.05), _point(262_144, 1.3, 1.7)))
    assert clear.verdict() == grain.FASTER_FAR_ABOVE
    overlapping = grain.GrainSweep(2, 5, (_point(8_192, 0.95, 1.05), _point(262_144, 1.0, 1.7)))
    assert overlapping.verdict() == grain.NOT_FASTER_FAR_ABOVE
    text = str(clear)
    assert "one thread either way" in text and "split in 2+ chunks" in text
    assert grain.FASTER_FAR_ABOVE in text
    assert _point(32_768, 1, 1).split is False and _point(32_769, 1, 1).split is True


def test_grain_sweep_runs_small_and_interleaves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(grain, "cpu_threads", lambda: 2)
    result = grain.grain_sweep([1024, 40_000], rounds=2, warmup_ms=0, rep_ms=1)
    assert [p.size for p in result.points] == [1024, 40_000]
    assert result.threads == 2 and result.rounds == 2
    for p in result.points:
        assert p.ratio_low <= p.ratio <= p.ratio_high
    assert "The sizes" not in str(result)  # 1024 ≤ grain < 40,000: a verdict is printed


def test_grain_sweep_needs_two_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(grain, "cpu_threads", lambda: 1)
    with pytest.raises(ValueError, match="at least 2 cores"):
        grain.grain_sweep([1024])
    with pytest.raises(ValueError, match="rounds must be a positive integer"):
        grain.grain_sweep([1024], rounds=0)


def test_python_loop_says_it_computes_in_float64() -> None:
    assert sweep.backend_label("python") == "Python loop (float64)"


# --------------------------------------------------------------------------- Amdahl


def _scaling(f: float, low: float, high: float) -> amdahl.ThreadScaling:
    t = Timing(samples_ms=(1.0,) * 5)
    s2 = amdahl.amdahl_speedup(f, 2)
    points = (
        amdahl.ScalingPoint(1, 10.0, 1.0, None, t, 1.0, 1.0),
        amdahl.ScalingPoint(
            2,
            10 / s2,
            s2,
            f,
            t,
            amdahl.amdahl_speedup(high, 2),
            amdahl.amdahl_speedup(low, 2),
        ),
    )
    return amdahl.ThreadScaling(
        "w", points, f, serial_fraction_low=low, serial_fraction_high=high, rounds=5
    )


def test_thread_scaling_reports_its_range_and_calls_extrapolation_so() -> None:
    result = _scaling(0.3, 0.2, 0.4)
    low, high = result.predicted_range(64)  # type: ignore[misc]
    assert low == pytest.approx(amdahl.amdahl_speedup(0.4, 64))
    assert high == pytest.approx(amdahl.amdahl_speedup(0.2, 64))
    assert low < result.predicted_speedup(64) < high
    text = str(result)
    assert "extrapolated beyond the 2 threads measured" in text
    assert "f = 0.200 and f = 0.400" in text and "inferred" in text
    assert result.max_measured_threads == 2


def test_measure_thread_scaling_gives_a_spread_over_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    result = amdahl.measure_thread_scaling(
        lambda: sum(range(200)), [1, 2], rounds=3, warmup_ms=0, rep_ms=1, show_progress=False
    )
    two = result.points[1]
    assert two.speedup_low is not None and two.speedup_high is not None
    assert two.speedup_low <= two.speedup_high
    # a pure-Python workload does not scale: S(2) is about 1, either side by noise
    if result.regime == amdahl.AMDAHL:
        assert result.serial_fraction_low is not None and result.serial_fraction_high is not None
        assert result.serial_fraction_low <= result.serial_fraction_high
    else:
        assert result.serial_fraction is None and result.serial_fraction_low is None
    one_round = amdahl.measure_thread_scaling(
        lambda: None, [1, 2], rounds=1, warmup_ms=0, rep_ms=1, show_progress=False
    )
    assert one_round.points[1].speedup_low is None and one_round.serial_fraction_low is None


def test_plot_marks_the_extrapolation_and_its_band() -> None:
    ax = plots.plot_amdahl(_scaling(0.3, 0.2, 0.4), max_threads=64)
    try:
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert any("not measured" in label for label in labels)
        assert any("spread over 5 rounds" in label for label in labels)
        assert ax.patches or ax.collections  # the shaded region and the band
    finally:
        plt.close(ax.figure)


# --------------------------------------------------------------------------- tiles and waves


def test_wave_reference_by_hand() -> None:
    assert check_parallelism.wave_reference() == (576, 5, pytest.approx(48 / 132))
    assert check_parallelism.wave_reference(512) == (16, 1, pytest.approx(16 / 132))
    assert check_parallelism.wave_reference(4096)[1] == math.ceil(1024 / 132)


@pytest.mark.parametrize(
    ("waves", "busy", "passed", "hint"),
    [
        (5, 48 / 132, True, "wave quantization"),
        (4, 0.36, False, "Round *up*"),
        (576 / 132, 0.36, False, "Waves are whole"),
        (576, 0.36, False, "number of tiles"),
        (24, 0.36, False, "each* side"),
        (5, 1 - 48 / 132, False, "idle"),
        (5, 4800 / 132, False, "fraction"),
        (5, 48, False, "divide by 132"),
        (5, 576 / 660, False, "average"),
        (5, 0.5, False, "132 tiles"),
    ],
)
def test_tile_waves_messages(waves: float, busy: float, passed: bool, hint: str) -> None:
    result = check_parallelism.tile_waves(waves, busy)
    assert result.passed is passed and result.solved
    assert hint in result.message


def test_tile_waves_unsolved_and_the_old_check_no_longer_teaches_one_thread_per_output() -> None:
    assert not check_parallelism.tile_waves(..., None).solved
    message = check.threads_to_fill(520).message
    assert "tiles" in message and "does not even fill" not in message


# --------------------------------------------------------------------------- review findings


def _measured(s2: float, rounds: int = 1) -> amdahl.ThreadScaling:
    """A ThreadScaling from one measured S(2), as measure_thread_scaling builds it."""
    t = Timing(samples_ms=(1.0,) * 5)
    points = (
        amdahl.ScalingPoint(1, 10.0, 1.0, None, t),
        amdahl.ScalingPoint(2, 10 / s2, s2, amdahl.karp_flatt(s2, 2), t),
    )
    raw = amdahl.fit_serial_fraction([2], [s2], clamp=False)
    f = raw if 0 <= raw <= 1 else None
    return amdahl.ThreadScaling("w", points, f, rounds=rounds)


def test_fit_can_return_the_raw_slope() -> None:
    assert amdahl.fit_serial_fraction([2], [0.5]) == 1.0
    assert amdahl.fit_serial_fraction([2], [0.5], clamp=False) == pytest.approx(3.0)
    assert amdahl.fit_serial_fraction([2], [2.5], clamp=False) < 0


def test_a_slowdown_is_called_overhead_and_not_extrapolated() -> None:
    result = _measured(0.5)
    assert result.regime == amdahl.OVERHEAD and result.serial_fraction is None
    assert result.max_speedup is None and result.predicted_range(64) is None
    with pytest.raises(ValueError, match="below 1"):
        result.predicted_speedup(64)
    text = str(result)
    assert "below 1" in text and "does not describe this run" in text
    assert "extrapolated beyond" not in text and "never more than" not in text
    assert "e = 3.000" in text


def test_a_superlinear_speedup_is_said_not_clamped() -> None:
    result = _measured(2.5)
    assert result.regime == amdahl.SUPERLINEAR and result.serial_fraction is None
    text = str(result)
    assert "super-linear" in text and "extrapolated beyond" not in text
    with pytest.raises(ValueError, match="above n"):
        result.predicted_speedup(4)


def test_an_ordinary_speedup_keeps_the_fit_and_the_extrapolation() -> None:
    result = _measured(1.6)
    assert result.regime == amdahl.AMDAHL
    assert result.serial_fraction == pytest.approx(0.25)
    assert "extrapolated beyond the 2 threads" in str(result)
    assert result.regime_text() == ""


def test_plot_draws_no_curve_for_a_run_amdahl_does_not_describe() -> None:
    for s2, words in ((0.5, "overhead"), (2.5, "super-linear")):
        ax = plots.plot_amdahl(_measured(s2))
        try:
            labels = [line.get_label() for line in ax.get_lines()]
            assert labels == ["ideal: S(n) = n", "measured"]
            notes = [t.get_text() for t in ax.texts]
            assert any(words in n and "does not describe" in n for n in notes)
        finally:
            plt.close(ax.figure)
    ax = plots.plot_amdahl(_measured(1.6))
    try:
        assert not ax.texts
        assert any(line.get_label().startswith("limit 1/f") for line in ax.get_lines())
    finally:
        plt.close(ax.figure)


def test_measure_thread_scaling_reports_no_f_for_a_slowdown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import labkit.parallelism.amdahl as module

    def fake_bench(fn: object, **_: object) -> Timing:
        torch = pytest.importorskip("torch")
        ms = 1.0 if torch.get_num_threads() == 1 else 3.0  # 2 threads three times slower
        return Timing(samples_ms=(ms,) * 5)

    monkeypatch.setattr(module, "bench", fake_bench)
    result = module.measure_thread_scaling(lambda: None, [1, 2], rounds=2, show_progress=False)
    assert result.regime == amdahl.OVERHEAD
    assert result.serial_fraction is None and result.serial_fraction_low is None
    assert "nothing is extrapolated" in str(result)


def test_tiny_ratios_stay_readable() -> None:
    assert grain.format_ratio(1.37) == "1.37×"
    assert grain.format_ratio(0.85) == "0.85×"
    assert grain.format_ratio(1 / 3400) == "1/3,400×"
    assert grain.format_ratio(0.02) == "1/50×"


def test_grain_table_prints_the_cost_of_splitting() -> None:
    points = (
        grain.GrainPoint(8_192, 0.002, 0.002, 1.0, 0.9, 1.1),
        grain.GrainPoint(32_769, 0.0046, 16.0, 0.0046 / 16, 0.0002, 0.0003),
        grain.GrainPoint(262_144, 0.04, 16.0, 0.04 / 16, 0.002, 0.003),
    )
    sweep_ = grain.GrainSweep(2, 5, points)
    assert points[1].split_cost_ms == pytest.approx(15.9954)
    text = str(sweep_)
    assert "1/3,500×" in text and "0.00×" not in text
    assert "The net effect of splitting at n = 32,769" in text and "+16.0 ms" in text
    saved = grain.GrainSweep(2, 5, (points[0], grain.GrainPoint(40_000, 0.01, 0.006, 1.6, 1, 2)))
    assert "-4.00 µs" in str(saved)


def test_numpy_matmul_is_labelled_with_its_blas_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "threadpoolctl", None)  # the environment decides
    for name in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    assert threads_module.numpy_blas_threads() is None
    assert sweep.backend_label("numpy", "matmul") == "NumPy (BLAS, default threads)"
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    assert threads_module.numpy_blas_threads() == 4
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    assert sweep.backend_label("numpy", "matmul") == "NumPy (BLAS, 3 threads)"
    assert sweep.backend_label("numpy", "add") == "NumPy" == sweep.backend_label("numpy")


def test_size_sweep_marks_noisy_rows_and_says_one_median_per_point() -> None:
    quiet = Timing(samples_ms=(1.0,) * 5)
    noisy = Timing(samples_ms=(1.0, 1.0, 2.0, 3.0, 3.0))
    assert noisy.noisy and not quiet.noisy
    result = sweep.SizeSweep(
        "add",
        "float32",
        (4, 16),
        (
            sweep.BackendSweep(
                "numpy",
                "NumPy",
                "cpu",
                (sweep._point("add", 4, quiet), sweep._point("add", 16, noisy)),
            ),
        ),
    )
    lines = str(result).splitlines()
    assert not lines[2].endswith("*") and lines[3].endswith(" *")
    assert any(line.startswith("Each cell is one median") for line in lines)
    assert lines[-1].startswith("* noisy:")


def test_python_add_builds_a_new_list_each_call() -> None:
    a, b = [1.0, 2.0], [3.0, 4.0]
    first, second = python_loops.add(a, b), python_loops.add(a, b)
    assert first == second == [4.0, 6.0] and first is not second


def _sweep(op: str, rates: dict[str, list[tuple[int, float]]]) -> sweep.SizeSweep:
    """A SizeSweep with the given (size, median ms) per backend."""
    backends = tuple(
        sweep.BackendSweep(
            key,
            sweep.backend_label(key),
            "cpu",
            tuple(sweep._point(op, n, Timing(samples_ms=(ms,) * 5)) for n, ms in points),
        )
        for key, points in rates.items()
    )
    sizes = tuple(sorted({n for points in rates.values() for n, _ in points}))
    return sweep.SizeSweep(op, "float32", sizes, backends)


def test_peak_report_says_whether_the_largest_size_is_far_below_the_peak() -> None:
    adds = _sweep(
        "add",
        {
            "numpy": [(1_000, 1e-3), (1_000_000, 1e-1), (10_000_000, 10.0)],  # 1e9, 1e10, 1e9 /s
            "torch-1-thread": [(1_000, 1e-3), (1_000_000, 0.2)],  # largest is fastest
            "torch-all-threads": [(1_000, 1e-3), (1_000_000, 1e-1), (10_000_000, 1.5)],
        },
    )
    from labkit.parallelism import shares

    report = shares.peak_report(adds).splitlines()
    assert report[0].startswith("NumPy: peaks at n = 1,000,000") and report[0].endswith("far below")
    assert report[1].endswith("its largest size is its fastest")
    assert "67% of that: not far below" in report[2]


def test_peak_shares_flags_a_clock_that_is_too_low() -> None:
    from labkit.machine.peak import CpuPeak
    from labkit.parallelism import shares

    peak = CpuPeak(
        "test CPU", 2, "test", 2.6, "test", "AVX-512", 16, 1, 166.4, 83.2, None, ()
    )  # 32 FLOP/cycle/core: 83.2 GFLOP/s per core
    adds = _sweep(
        "add",
        {
            "torch-1-thread": [(16_384, 0.004)],
            "torch-all-threads": [(16_384, 0.004), (16_777_216, 20.0)],
        },
    )
    fast = _sweep(  # n = 128: 2 × 128³ FLOP = 4.19 MFLOP; in 0.0441 ms: 95.1 GFLOP/s
        "matmul",
        {"torch-1-thread": [(128, 0.0441)], "torch-all-threads": [(128, 0.05)]},
    )
    result = shares.peak_shares(adds, fast, peak)
    assert result.one_thread_share == pytest.approx(95.1 / 83.2, rel=1e-2)
    assert result.implied_clock_ghz == pytest.approx(95.1 / 32, rel=1e-2)
    assert result.clock_too_low
    assert result.add_best_bytes == 3 * 4 * 16_384
    text = str(result)
    assert shares.CLOCK_TOO_LOW.format(clock="2.60 GHz") in text
    assert "at most half of that peak" in text and "of one core" in text
    slow = _sweep(
        "matmul",
        {"torch-1-thread": [(128, 0.1)], "torch-all-threads": [(128, 0.05)]},
    )
    plausible = shares.peak_shares(adds, slow, peak)
    assert not plausible.clock_too_low
    assert shares.CLOCK_PLAUSIBLE.format(clock="2.60 GHz") in str(plausible)
    with pytest.raises(ValueError, match="an add sweep and a matmul sweep"):
        shares.peak_shares(fast, adds, peak)


def test_the_cap_comes_with_the_band_it_belongs_to() -> None:
    """Sixth review (R6-01-W1): 3.78× on 64 threads beside "never more than 3.76×" contradicted.

    The cap 1/f is printed for the band's f too, so the band's top never exceeds it.
    """
    result = dataclasses.replace(
        _measured(1.6), serial_fraction_low=0.253, serial_fraction_high=0.28
    )
    low_cap, high_cap = result.max_speedup_range() or (0.0, 0.0)
    assert low_cap == pytest.approx(1 / 0.28) and high_cap == pytest.approx(1 / 0.253)
    band = result.predicted_range(64)
    assert band is not None and band[1] <= high_cap
    text = str(result)
    assert "never more than 1/f = 4.00× (3.57× to 3.95× over that range)" in text
