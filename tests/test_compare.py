"""labkit.timing.compare: the comparison table, its speedups and its argument checks."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from labkit.core.units import format_speedup
from labkit.timing.bench import Timing
from labkit.timing.compare import Comparison, compare

NUMPY = Timing((10.0, 10.0, 10.0), label="numpy")
TORCH = Timing((2.5, 2.5, 2.5, 2.5), label="torch")
NOISY = Timing((2.0, 2.5, 3.0), label="noisy")
GPU = Timing((0.1, 0.1, 0.1), label="cuda", device="cuda:0")


def test_table_is_aligned_plain_text():
    table = str(compare([NUMPY, TORCH]))
    assert table == (
        "                   median   IQR      min    n  × vs numpy\n"
        "numpy (baseline)  10.0 ms  0 ns  10.0 ms  n=3       1.00×\n"
        "torch             2.50 ms  0 ns  2.50 ms  n=4       4.00×"
    )


def test_speedup_is_baseline_median_over_row_median():
    result = compare([NUMPY, TORCH, GPU])
    assert [row.speedup for row in result.rows] == pytest.approx([1.0, 4.0, 100.0])
    assert result.baseline.label == "numpy"
    by_label = compare([NUMPY, TORCH, GPU], baseline="torch")
    assert [row.speedup for row in by_label.rows] == pytest.approx([0.25, 1.0, 25.0])
    assert by_label.baseline_index == 1


def test_baseline_by_index_including_negative():
    assert compare([NUMPY, TORCH], baseline=1).baseline.label == "torch"
    assert compare([NUMPY, TORCH], baseline=-1).baseline_index == 1


def test_device_column_appears_only_when_devices_differ():
    assert "device" not in str(compare([NUMPY, TORCH]))
    table = str(compare([NUMPY, GPU]))
    assert table.splitlines()[0].split()[0] == "device"
    assert "cuda:0" in table and "100.00×" not in table and "100×" in table


def test_noisy_rows_are_marked_with_a_footnote():
    lines = str(compare([NUMPY, NOISY])).splitlines()
    assert lines[2].endswith("  *")
    assert not lines[1].endswith("*")
    assert lines[-1] == "* noisy: IQR is more than 10% of the median"


def test_unlabelled_timings_are_named_by_position():
    table = compare([Timing((1.0,)), Timing((2.0,))])
    assert [row.label for row in table.rows] == ["#0", "#1"]
    assert "× vs #0" in str(table)


def test_comparison_is_frozen_and_serializable():
    result = compare([NUMPY, TORCH])
    assert isinstance(result, Comparison)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.baseline_index = 1  # type: ignore[misc]
    data = json.loads(json.dumps(result.to_dict()))
    assert set(data) == {"rows", "baseline_index"}
    assert data["rows"][data["baseline_index"]]["label"] == "numpy"
    assert data["rows"][1]["speedup"] == 4.0
    assert set(data["rows"][1]) == {
        "label",
        "device",
        "median_ms",
        "iqr_ms",
        "min_ms",
        "n",
        "speedup",
        "noisy",
    }


@pytest.mark.parametrize(
    ("speedup", "text"),
    [
        (3.2147, "3.21×"),
        (0.5, "0.50×"),
        (1.0, "1.00×"),
        (99.994, "99.99×"),
        (152.3, "152×"),
        (math.inf, "inf×"),
    ],
)
def test_format_speedup(speedup, text):
    assert format_speedup(speedup) == text


def test_zero_median_rows_do_not_divide_by_zero():
    fast = Timing((0.0, 0.0), label="free")
    assert compare([NUMPY, fast]).rows[1].speedup == math.inf
    assert compare([fast, fast]).rows[1].speedup == 1.0


# --------------------------------------------------------------------------- validation


def test_empty_is_rejected():
    with pytest.raises(ValueError, match="timings is empty"):
        compare([])


@pytest.mark.parametrize(
    ("baseline", "error", "match"),
    [
        (2, ValueError, r"baseline=2 is out of range for 2 timings"),
        (-3, ValueError, "out of range"),
        ("jax", ValueError, r"baseline='jax' matches no timing's label.*'numpy', 'torch'"),
    ],
)
def test_bad_baselines_are_rejected(baseline, error, match):
    with pytest.raises(error, match=match):
        compare([NUMPY, TORCH], baseline=baseline)


def test_ambiguous_label_baseline_is_rejected():
    with pytest.raises(ValueError, match="matches 2 timings"):
        compare([NUMPY, NUMPY], baseline="numpy")
