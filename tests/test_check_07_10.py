"""Exercise checks of notebooks 07-10: pass on the reference, name the usual slips, 'not solved yet' on blanks."""

from __future__ import annotations

import pytest

from labkit import check
from labkit.check.kernels import copy_rate_fraction, theoretical_occupancy, useful_fraction
from labkit.check.pipelines import knee, largest_batch_that_fits, workers_needed
from labkit.profiling.common import union_ms


@pytest.mark.parametrize(
    "result",
    [
        lambda: check.sector_efficiency(None, None),
        lambda: check.strided_copy_rate(...),
        lambda: check.bank_conflicts(..., 1),
        lambda: check.occupancy(None),
        lambda: check.knee_batch(None, [1, 2], [1.0, 2.0]),
        lambda: check.loader_workers(...),
        lambda: check.largest_batch(None),
        lambda: check.idle_fraction(None),
        lambda: check.top_operator(None, ["aten::mm"]),
        lambda: check.scaling_efficiency(None, throughput_1=1.0, throughput_n=1.8, n=2),
        lambda: check.bus_bandwidth(None, ...),
        lambda: check.accumulation_steps(None),
    ],
)
def test_blank_answers_are_not_solved_yet_with_a_hint(result) -> None:
    outcome = result()
    assert not outcome and not outcome.solved and "Hint:" in str(outcome)


def test_reference_answers_pass() -> None:
    assert check.sector_efficiency(0.5, 0.125)
    assert check.strided_copy_rate(2 / 9) and check.strided_copy_rate(0.22)
    assert check.bank_conflicts(32, 1)
    assert check.occupancy(0.5) and check.occupancy(50)
    assert check.knee_batch(64, [1, 8, 64, 512], [1.0, 50.0, 95.0, 100.0])
    assert check.loader_workers(7)
    assert check.largest_batch(136)
    assert check.idle_fraction(0.35)
    assert check.top_operator("aten::mm", ["aten::mm", "aten::add"])
    assert check.scaling_efficiency(0.9, throughput_1=100.0, throughput_n=180.0, n=2)
    assert check.bus_bandwidth(200, 350)
    assert check.accumulation_steps(8)


@pytest.mark.parametrize(
    ("result", "says"),
    [
        (lambda: check.sector_efficiency(0.5, 1 / 32), "32-byte sector"),
        (lambda: check.strided_copy_rate(0.125), "reads' useful fraction"),
        (lambda: check.bank_conflicts(32, 0), "1-way"),
        (lambda: check.occupancy(1.0), "registers"),
        (lambda: check.knee_batch(512, [1, 8, 64, 512], [1.0, 50.0, 95.0, 100.0]), "smallest"),
        (lambda: check.loader_workers(6), "still longer"),
        (lambda: check.largest_batch(144), "16 bytes"),
        (lambda: check.largest_batch(137), "Round down"),
        (lambda: check.idle_fraction(0.25), "union"),
        (lambda: check.idle_fraction(0.65), "busy share"),
        (lambda: check.top_operator("aten::add", ["aten::mm", "aten::add"]), "self time"),
        (
            lambda: check.scaling_efficiency(1.8, throughput_1=100.0, throughput_n=180.0, n=2),
            "speedup",
        ),
        (lambda: check.bus_bandwidth(200, 400), "2(n - 1)/n"),
        (lambda: check.accumulation_steps(32), "4 GPUs"),
    ],
)
def test_usual_slips_get_their_own_message(result, says: str) -> None:
    outcome = result()
    assert not outcome and outcome.solved and says in str(outcome)


def test_reference_values_follow_from_the_rules() -> None:
    assert [useful_fraction(s) for s in (1, 2, 4, 8, 16, 32)] == [1, 0.5, 0.25, 0.125, 0.125, 0.125]
    fractions = [copy_rate_fraction(s) for s in (1, 2, 4, 8, 32)]
    assert fractions == pytest.approx([1, 2 / 3, 2 / 5, 2 / 9, 2 / 9])
    assert theoretical_occupancy() == 0.5
    assert workers_needed() == 7
    assert largest_batch_that_fits() == (24e9 - 2e9 - 1.6e9) // 150e6
    assert union_ms([(0, 1.5), (1, 3), (3, 4), (5.5, 7.5), (7, 8)]) == 6.5
    assert knee([1, 2, 4], [10.0, 95.0, 100.0]) == 2


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: check.occupancy("half"), TypeError),
        (lambda: check.idle_fraction(float("nan")), ValueError),
        (lambda: check.top_operator(3, ["aten::mm"]), TypeError),
        (lambda: check.top_operator("aten::mm", []), ValueError),
        (lambda: knee([1, 2], [1.0]), ValueError),
    ],
)
def test_bad_answers_raise_errors_that_name_them(call, error) -> None:
    with pytest.raises(error):
        call()
