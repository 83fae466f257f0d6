"""The one validation module, results as JSON, and the one device resolver (issue 14)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import pytest

from labkit.core.results import JsonRecord, json_safe, to_json
from labkit.core.validate import check_choices, check_function, check_shape
from labkit.machine.report import CPU_OR_CUDA, resolve_device


def test_bench_of_a_result_teaches_to_pass_the_function() -> None:
    from labkit import bench

    with pytest.raises(TypeError, match=r"bench\(f, x\), not bench\(f\(x\)\)"):
        bench(3)  # type: ignore[arg-type]
    assert check_function("fn", len, "x") is len


@pytest.mark.parametrize("bad", [32, "3x32", (), (3, 0)])
def test_check_shape_names_the_argument(bad: object) -> None:
    with pytest.raises((TypeError, ValueError), match="input_shape"):
        check_shape("input_shape", bad)


def test_check_shape_keeps_the_order() -> None:
    assert check_shape("input_shape", [3, 32, 16]) == (3, 32, 16)


def test_check_choices_takes_one_name_or_several() -> None:
    choices = ("copy", "scale", "add")
    assert check_choices("kernels", "add", choices) == ("add",)
    assert check_choices("kernels", ["add", "copy", "add"], choices) == ("copy", "add")
    with pytest.raises(ValueError, match="kernels must be one of"):
        check_choices("kernels", ["cpy"], choices)


@dataclass(frozen=True)
class _Inner(JsonRecord):
    ms: float
    json_extra = ("us",)

    @property
    def us(self) -> float:
        return self.ms * 1e3


@dataclass(frozen=True)
class _Outer(JsonRecord):
    inner: _Inner
    runs: tuple[_Inner, ...]
    peaks: MappingProxyType[str, float]
    count: np.int64
    ratio: float
    json_skip = ("ratio",)


def test_a_record_is_its_fields_and_extras_recursively_and_strict_json() -> None:
    outer = _Outer(
        _Inner(1.0),
        (_Inner(2.0),),
        MappingProxyType({"float32": float("inf")}),
        np.int64(3),
        0.5,
    )
    data = outer.to_dict()
    assert data == {
        "inner": {"ms": 1.0, "us": 1000.0},
        "runs": [{"ms": 2.0, "us": 2000.0}],
        "peaks": {"float32": float("inf")},
        "count": 3,
    }
    assert json.loads(json.dumps(json_safe(data), allow_nan=False))["peaks"] == {"float32": None}
    assert to_json({3, 1}) == [1, 3]


def test_the_device_resolver_forgives_case_and_space_and_refuses_what_it_cannot_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("labkit.machine.gpu.has_gpu", lambda: False)
    assert resolve_device(" CPU ", kinds=CPU_OR_CUDA) == "cpu"
    with pytest.raises(ValueError, match="device=None, but none of 'cuda' is usable"):
        resolve_device(None, kinds=("cuda",))
    with pytest.raises(ValueError, match=r"must be one of 'cpu', 'cuda', 'cuda:N' \(or None"):
        resolve_device("tpu", kinds=CPU_OR_CUDA)


def test_mixed_precision_refuses_a_tensor_for_its_x_y_pair() -> None:
    torch = pytest.importorskip("torch")
    from labkit.accel.precision import mixed_precision_torch

    with pytest.raises(TypeError, match=r"data must be a pair \(x, y\)"):
        mixed_precision_torch(lambda: torch.nn.Linear(2, 2), torch.ones(2, 2))  # type: ignore[arg-type]
