"""labkit.accel.side_by_side: the same MLP step in torch and Keras/TF."""

from __future__ import annotations

import math
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("tensorflow")

from labkit.accel import VARIANTS, SideBySide, mlp_side_by_side  # noqa: E402
from labkit.core.optional import MissingPackageError  # noqa: E402
from labkit.timing.bench import Timing  # noqa: E402
from labkit.timing.compare import Comparison  # noqa: E402

FAST = {"warmup_ms": 1.0, "rep_ms": 5.0}


def test_side_by_side_returns_timings_and_sane_losses() -> None:
    r = mlp_side_by_side(batch=16, sizes=(20, 16, 10), **FAST)
    assert isinstance(r, SideBySide)
    assert [t.label for t in r.timings] == list(VARIANTS)
    assert all(isinstance(t, Timing) for t in r.timings)
    for loss in r.first_losses.values():  # an untrained 10-class model: near ln(10)
        assert abs(loss - math.log(10)) < 1.5
    assert isinstance(r.comparison(), Comparison)
    assert "× vs torch" in str(r)


def test_side_by_side_subset() -> None:
    r = mlp_side_by_side(batch=4, sizes=(8, 10), variants=("torch",), **FAST)
    assert [t.label for t in r.timings] == ["torch"]


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"batch": 0}, "batch"),
        ({"sizes": (5,)}, "sizes"),
        ({"sizes": (5, 0)}, "sizes"),
        ({"variants": ("jax",)}, "variants"),
        ({"lr": 0}, "lr"),
    ],
)
def test_side_by_side_validates(kwargs: dict, name: str) -> None:
    with pytest.raises((ValueError, TypeError), match=name):
        mlp_side_by_side(**kwargs)


def test_side_by_side_missing_tensorflow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    with pytest.raises(MissingPackageError, match="tensorflow"):
        mlp_side_by_side(batch=4, sizes=(8, 10), variants=("tf eager",), **FAST)
