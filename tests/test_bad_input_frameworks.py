"""Bad input to the framework modules (issue 8, narrowed by issue 14): refused up front, named.

A table covers the public functions of labkit.accel, models, batching,
kernels, profiling, scaling, check and the CLI's benchmarks: a valid call
and, per parameter, hypothesis strategies of the values a person types
(sizes, counts, durations, names, devices) that the function must refuse
with a TypeError or ValueError naming that
parameter (``assert_rejects``). Every rejection runs

- with TensorFlow, Keras, CuPy, Kernel Tuner and numba hidden (and torch
  too, wherever the arguments can be checked without it), so a typo is an
  argument error, never "install tensorflow": the checks run before the
  import;
- with the heavy entry points patched to raise :class:`Forbidden` (not a
  TypeError/ValueError), so a value that slips through fails the test
  instead of starting a training run, torchrun, nvcc or the simulator;
- with 8 GiB of free memory (``labkit.machine.memory.available_bytes``), so "larger
  than memory" is the same on every machine.

Then property tests of the pure parts: occupancy limits and monotonicity,
checkers that answer any finite number, batch predictions that never exceed
their budget, tuning results independent of the cache's order, and the
all-reduce bandwidth arithmetic. Nothing here trains, launches or times.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from invalid_args import (
    assert_rejects,
    impossible_bytes,
    non_finite,
    non_positive_ints,
    not_callables,
    not_numbers,
    unknown_devices,
    unsupported_dtypes,
)

from labkit import check
from labkit.check.result import CheckResult
from labkit.profiling.common import union_ms

FREE_BYTES = 8 * 2**30  # what labkit.machine.memory sees as free: the budget is 2 GiB
ALWAYS_HIDDEN = ("tensorflow", "keras", "cupy", "kernel_tuner", "numba")
_MISSING = object()


class Forbidden(Exception):
    """Raised by a patched entry point: a bad argument got past the checks (not a Type/ValueError)."""


def _forbidden(*args: Any, **kwargs: Any) -> Any:
    raise Forbidden("a bad argument reached the work the checks should have stopped it from")


@contextlib.contextmanager
def _hidden(names: tuple[str, ...]) -> Iterator[None]:
    """Make ``import name`` fail (``sys.modules[name] = None``); restore only those keys after."""
    saved = {name: sys.modules.get(name, _MISSING) for name in names}
    for name in names:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is _MISSING:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def _resolve(target: str) -> Any:
    module, _, name = target.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as exc:  # a module that needs torch at import, where torch is missing
        pytest.skip(f"{target} needs a package that is not installed: {exc}")


# --------------------------------------------------------------------------- strategies

NOT_INT = st.one_of(not_numbers, st.floats())  # 2.0 is not a count either
BAD_POS = st.one_of(NOT_INT, non_positive_ints)
BAD_MS = st.one_of(not_numbers, non_finite, st.floats(max_value=-1e-6, allow_infinity=False))
BAD_MS_POS = st.one_of(BAD_MS, st.sampled_from([0, 0.0]))
BAD_FLAG = st.one_of(
    st.none(), st.integers(), st.floats(), st.text(max_size=3), st.lists(st.booleans(), max_size=2)
)
BAD_SEED = st.one_of(
    NOT_INT, st.integers(max_value=-1), st.integers(min_value=2**32, max_value=2**80)
)
BAD_TORCH_DEVICE = st.one_of(
    unknown_devices, st.integers(), st.floats(), st.lists(st.integers(), max_size=2)
)
BAD_TF_DEVICE = st.one_of(
    st.sampled_from(
        [
            "",
            " ",
            "gpu",
            "GPU",
            "/GPU",
            "cuda",
            "cuda:0",
            "/device:XPU:0",
            "GPU:-1",
            "GPU:x",
            "/CPU:0:1",
            "CPU 0",
            "tpu",
        ]
    ),
    st.integers(),
    st.lists(st.integers(), max_size=1),
)
#: Not an answer: a checker treats None and ... as "not solved yet", so they are left out here.
NOT_AN_ANSWER = st.one_of(
    st.booleans(),
    st.text(max_size=8),
    st.binary(max_size=4),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.just(object()),
    non_finite,
    st.integers(min_value=10**400, max_value=10**401),  # beyond float: no answer is that large
)


def bad_int(minimum: int = 1, maximum: int | None = None) -> st.SearchStrategy[Any]:
    """Not an integer, or an integer outside [minimum, maximum]."""
    parts = [NOT_INT, st.integers(max_value=minimum - 1)]
    if maximum is not None:
        parts.append(st.integers(min_value=maximum + 1, max_value=maximum + 10**6))
    return st.one_of(*parts)


def bad_real(
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> st.SearchStrategy[Any]:
    """Not a number, not finite, or outside the interval (an open end's bound included)."""
    parts = [not_numbers, non_finite]
    finite = {"allow_nan": False, "allow_infinity": False}
    if low is not None:
        parts.append(st.floats(max_value=low, exclude_max=not low_open, **finite))
    if high is not None:
        parts.append(st.floats(min_value=high, exclude_min=not high_open, **finite))
    return st.one_of(*parts)


def bad_choice(
    choices: tuple[str, ...] | list[str], none_ok: bool = False
) -> st.SearchStrategy[Any]:
    """Anything but one of ``choices`` (strings, numbers, lists, dicts)."""
    parts = [
        st.text(max_size=10).filter(lambda s: s not in choices),
        st.integers(),
        st.lists(st.integers(), max_size=2),
        st.dictionaries(st.text(max_size=2), st.integers(), max_size=1),
    ]
    if not none_ok:
        parts.append(st.none())
    return st.one_of(*parts)


def bad_sizes(minimum: int = 1) -> st.SearchStrategy[Any]:
    """Not a non-empty list of integers >= minimum (for batch sizes, strides, widths...)."""
    return st.one_of(
        st.integers(),
        st.floats(),
        st.text(max_size=4),
        st.just([]),
        st.lists(st.integers(max_value=minimum - 1), min_size=1, max_size=3),
        st.lists(st.floats(allow_nan=False), min_size=1, max_size=2).filter(
            lambda xs: not all(float(x).is_integer() and x >= minimum for x in xs)
        ),
    )


# --------------------------------------------------------------------------- valid values


def _linear() -> Any:
    import torch

    return torch.nn.Linear(2, 2)


def _xy() -> tuple[Any, Any]:
    import torch

    return torch.zeros(4, 2), torch.zeros(4, dtype=torch.long)


def _sequences() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((4, 3, 2), np.float32), np.array([0, 1, 0, 1])


def _batch_sweep() -> Any:
    from labkit.batching.sweep import BatchCurve, BatchPoint, BatchSweep
    from labkit.timing.bench import Timing

    timing = Timing(samples_ms=(1.0, 1.0, 1.0), label="batch 8")
    point = BatchPoint("inference", 8, 1.0, 0.0, 8000.0, timing)
    return BatchSweep(
        model="mlp",
        device="cpu",
        input_shape=(4,),
        optimizer="sgd",
        curves=(BatchCurve("inference", (point,)),),
        dropped=(),
        memory_note="",
        threads=2,
    )


def _replay(times: tuple[float | None, ...] = (2.0, 1.0)) -> Any:
    from labkit.kernels.tuning import TunedConfig, TuningReplay

    configs = tuple(
        TunedConfig({"TILE_DIM": 16 * (i + 1)}, t, error=None if t is not None else "failed")
        for i, t in enumerate(times)
    )
    return TuningReplay(
        kernel="transpose_padded",
        device="test GPU",
        problem_size=(64, 64),
        tune_params={"TILE_DIM": (16, 32)},
        configs=configs,
        method="test",
    )


def _resources() -> Any:
    return types.SimpleNamespace(registers_per_thread=32, shared_bytes=0, name="k", arch="sm_90")


# --------------------------------------------------------------------------- the table


@dataclass(repr=False)
class Case:
    """One public function: a valid call and, per parameter, what it must refuse."""

    target: str  # "module:name"
    valid: dict[str, Any] | Callable[[], dict[str, Any]]
    bad: dict[str, st.SearchStrategy[Any]]
    torch: bool = False  # its checks need torch (an nn.Module argument): torch stays importable
    guards: tuple[str, ...] = ()  # "module.attr" that must never run for a rejected call
    run_valid: bool = False  # the valid call is cheap: run it too
    names: dict[str, str] = field(default_factory=dict)  # parameter -> the name its error uses
    label: str = ""

    @property
    def id(self) -> str:
        return self.label or self.target.replace("labkit.", "").replace(":", ".")

    def __repr__(self) -> str:
        return f"Case({self.id})"

    def kwargs(self) -> dict[str, Any]:
        return dict(self.valid() if callable(self.valid) else self.valid)


ACCEL = "labkit.accel"
CASES: list[Case] = [
    # ---------------------------------------------------------------- labkit.accel
    Case(
        f"{ACCEL}.compilers:torch_compile_benchmark",
        {"size": 1000, "run": False},
        {
            "size": BAD_POS,
            "warmup_ms": BAD_MS_POS,
            "rep_ms": BAD_MS_POS,
            "device": BAD_TORCH_DEVICE,
            "fn": not_callables.filter(lambda v: v is not None),
        },
    ),
    Case(
        f"{ACCEL}.compilers:torch_compile_benchmark",
        {"size": 1000, "device": "cpu"},
        {"size": st.integers(2**40, 2**48)},
        torch=True,
        guards=("labkit.timing.allocation.compare_allocation",),
        label="accel.torch_compile_benchmark.memory",
    ),
    Case(
        f"{ACCEL}.compilers:tf_xla_benchmark",
        {"size": 1000},
        {
            "size": st.one_of(BAD_POS, st.integers(2**40, 2**48)),
            "warmup_ms": BAD_MS_POS,
            "rep_ms": BAD_MS_POS,
        },
    ),
    Case(
        f"{ACCEL}.placement:tf_soft_placement_demo",
        {"requested_device": "/GPU:0", "size": 8},
        {"requested_device": BAD_TF_DEVICE, "size": st.one_of(BAD_POS, st.integers(2**20, 2**30))},
    ),
    Case(
        f"{ACCEL}.tf32:tf32_defaults",
        {"frameworks": ["torch"]},
        {
            "frameworks": st.one_of(
                st.sampled_from(["jax", "TF", "", "Torch"]),
                st.lists(st.sampled_from(["jax", "numpy", ""]), min_size=1, max_size=2),
            )
        },
        run_valid=True,
    ),
    Case(
        f"{ACCEL}.precision:mixed_precision_torch",
        {"model_fn": _linear, "data": (1, 2)},
        {
            "dtype": st.one_of(
                unsupported_dtypes, st.sampled_from(["float32", "float64"]), not_numbers
            ),
            "steps": BAD_POS,
            "lr": bad_real(0, low_open=True),
            "warmup_ms": BAD_MS_POS,
            "rep_ms": BAD_MS_POS,
            "device": BAD_TORCH_DEVICE,
        },
    ),
    Case(
        f"{ACCEL}.precision:mixed_precision_keras",
        {},
        {
            "policy": bad_choice(("mixed_bfloat16", "mixed_float16")),
            "batch": st.one_of(BAD_POS, st.integers(2**31, 2**40)),
            "features": BAD_POS,
            "hidden": st.one_of(BAD_POS, st.integers(2**31, 2**40)),
            "classes": BAD_POS,
            "steps": BAD_POS,
            "seed": BAD_SEED,
            "warmup_ms": BAD_MS_POS,
            "rep_ms": BAD_MS_POS,
        },
    ),
    Case(
        f"{ACCEL}.side_by_side:mlp_side_by_side",
        {},
        {
            "batch": st.one_of(BAD_POS, st.integers(2**31, 2**40)),
            "sizes": st.one_of(st.just(()), st.just((5,))),
            "variants": st.just(()),
            "lr": bad_real(0, low_open=True),
            "seed": BAD_SEED,
            "warmup_ms": BAD_MS_POS,
            "rep_ms": BAD_MS_POS,
        },
    ),
    Case(
        f"{ACCEL}.sync_points:sync_points_benchmark",
        {},
        {
            "steps": BAD_POS,
            "size": BAD_POS,
            "device": BAD_TORCH_DEVICE,
            "warmup_ms": BAD_MS_POS,
            "rep_ms": BAD_MS_POS,
        },
    ),
    Case(
        f"{ACCEL}.sync_points:sync_points_benchmark",
        {"device": "cpu"},
        {"size": st.integers(2**16, 2**24)},
        torch=True,
        guards=("labkit.timing.interleave.interleave",),
        label="accel.sync_points_benchmark.memory",
    ),
    Case(f"{ACCEL}.sync_points:async_launch_demo", {}, {"size": BAD_POS, "repeats": BAD_POS}),
    # ---------------------------------------------------------------- labkit.models
    Case(
        "labkit.models.data:synthetic_images",
        {"n": 4, "size": 8},
        {
            "n": st.one_of(BAD_POS, st.integers(2**30, 2**40)),
            "size": st.one_of(bad_int(2), st.integers(2**16, 2**20)),
            "num_classes": bad_int(2),
            "seed": BAD_SEED,
            "noise": bad_real(0),
        },
        run_valid=True,
    ),
    Case(
        "labkit.models.data:digits_images",
        {"size": 8},
        {
            "size": bad_int(2),
            "seed": BAD_SEED,
            "test_fraction": bad_real(0, 1, low_open=True, high_open=True),
        },
    ),
    Case(
        "labkit.models.data:sequence_task",
        {"n": 4, "steps": 3, "features": 2},
        {
            "n": st.one_of(BAD_POS, st.integers(2**40, 2**50)),
            "steps": BAD_POS,
            "features": BAD_POS,
            "seed": BAD_SEED,
        },
        run_valid=True,
    ),
    Case(
        "labkit.models.data:train_test_split",
        lambda: {"x": np.arange(4.0), "y": np.array([0, 1, 0, 1])},
        {
            "x": st.integers(5, 8).map(np.zeros),
            "y": st.one_of(
                st.integers(),
                st.none(),
                st.lists(st.integers(), max_size=3),
                st.integers(0, 3).map(np.zeros),
            ),
            "test_fraction": bad_real(0, 1, low_open=True, high_open=True),
            "seed": BAD_SEED,
        },
        run_valid=True,
    ),
    *(
        Case(f"labkit.models.cnn:{name}", {}, {"num_classes": BAD_POS}, torch=True)
        for name in ("CNN64", "CNN224", "CNN", "LazyCNN")
    ),
    Case(
        "labkit.models.rnn_torch:TorchRNN",
        {"input_size": 2, "hidden_size": 3},
        {
            "input_size": BAD_POS,
            "hidden_size": BAD_POS,
            "num_classes": st.one_of(
                st.booleans(), st.floats(), st.text(max_size=2), non_positive_ints
            ),
            "batch_first": BAD_FLAG,
        },
        torch=True,
        run_valid=True,
    ),
    Case(
        "labkit.models.train:train_classifier",
        lambda: {"model": _linear(), "train": _xy(), "test": _xy(), "epochs": 1},
        {
            "epochs": BAD_POS,
            "batch_size": BAD_POS,
            "lr": bad_real(0, low_open=True),
            "device": BAD_TORCH_DEVICE,
            "seed": BAD_SEED,
        },
        torch=True,
    ),
    Case(
        "labkit.models.train:train_torch_rnn",
        lambda: {"train": _sequences(), "test": _sequences()},
        {
            "hidden_size": BAD_POS,
            "epochs": BAD_POS,
            "batch_size": BAD_POS,
            "lr": bad_real(0, low_open=True),
            "device": BAD_TORCH_DEVICE,
            "seed": BAD_SEED,
        },
    ),
    Case(
        "labkit.models.train:accuracy",
        lambda: {"model": _linear(), "x": _xy()[0], "y": _xy()[1]},
        {"batch_size": BAD_POS},
        torch=True,
        run_valid=True,
    ),
    Case(
        "labkit.models.throughput:throughput_by_batch",
        lambda: {"model": _linear(), "batch_sizes": [1], "image_size": 8},
        {
            "batch_sizes": bad_sizes(),
            "image_size": bad_int(2),
            "warmup_ms": BAD_MS,
            "rep_ms": BAD_MS_POS,
            "memory_fraction": bad_real(0, 1, low_open=True),
            "device": BAD_TORCH_DEVICE,
            "amp_dtype": st.one_of(st.text(max_size=5), st.integers(), st.floats()),
        },
        torch=True,
        guards=("labkit.timing.bench.bench",),
    ),
    Case(
        "labkit.models.rnn_keras:keras_rnn",
        {},
        {
            "kind": bad_choice(("SimpleRNN", "LSTM", "LSTM-no-cudnn", "GRU")),
            "units": BAD_POS,
        },
    ),
    Case(
        "labkit.models.rnn_keras:time_keras_rnns",
        {},
        {
            "batch": st.one_of(BAD_POS, st.integers(2**40, 2**50)),
            "steps": BAD_POS,
            "features": BAD_POS,
            "units": BAD_POS,
            "kinds": st.one_of(
                st.just(()),
                st.lists(st.sampled_from(["RNN", "lstm", "", "CuDNNLSTM"]), min_size=1, max_size=2),
            ),
            "device": BAD_TF_DEVICE,
            "warmup_ms": BAD_MS,
            "rep_ms": BAD_MS_POS,
        },
    ),
    Case(
        "labkit.models.rnn_keras:train_keras_rnn",
        lambda: {"train": _sequences(), "test": _sequences()},
        {
            "kind": bad_choice(("SimpleRNN", "LSTM", "LSTM-no-cudnn", "GRU")),
            "units": BAD_POS,
            "epochs": BAD_POS,
            "batch_size": BAD_POS,
            "lr": bad_real(0, low_open=True),
            "seed": BAD_SEED,
        },
    ),
    # ---------------------------------------------------------------- labkit.batching.sweep
    Case(
        "labkit.batching.sweep:batch_sweep",
        {},
        {
            "batch_sizes": bad_sizes(),
            "modes": st.one_of(st.just(()), st.just(["train", "train"])),
            "device": BAD_TORCH_DEVICE,
            "optimizer": bad_choice(("adam", "sgd")),
            "warmup_ms": BAD_MS,
            "rep_ms": BAD_MS_POS,
            "min_reps": BAD_POS,
            "memory_fraction": bad_real(0, 1, low_open=True),
            "seed": BAD_SEED,
        },
    ),
    Case(
        "labkit.batching.step:mlp",
        {"in_features": 2, "hidden": (3,), "num_classes": 2},
        {
            "in_features": BAD_POS,
            "num_classes": BAD_POS,
        },
        run_valid=True,
    ),
    Case(
        "labkit.batching.sweep:latency_budget_batch",
        lambda: {"result": _batch_sweep(), "max_latency_ms": 5.0},
        {"max_latency_ms": BAD_MS_POS, "mode": bad_choice(("inference",))},
        run_valid=True,
    ),
    # ---------------------------------------------------------------- labkit.batching.largest
    Case(
        "labkit.batching.memory_fit:step_memory",
        {"model_fn": _linear, "input_shape": (2,), "batch_size": 1},
        {
            "batch_size": BAD_POS,
            "device": st.one_of(BAD_TORCH_DEVICE, st.none()),
            "optimizer": bad_choice(("adam", "sgd")),
            "seed": BAD_SEED,
        },
    ),
    Case(
        "labkit.batching.memory_fit:fit_memory",
        {"model_fn": _linear, "input_shape": (2,)},
        {
            "probe_batches": st.one_of(bad_sizes(), st.lists(st.just(2), min_size=1, max_size=3)),
            "device": st.one_of(BAD_TORCH_DEVICE, st.none()),
            "optimizer": bad_choice(("adam", "sgd")),
            "budget_bytes": st.one_of(st.floats(), st.text(max_size=3), non_positive_ints),
            "target_batch": st.one_of(st.floats(), st.text(max_size=3), non_positive_ints),
        },
    ),
    Case(
        "labkit.batching.largest:largest_batch_cpu",
        {"model_fn": _linear, "input_shape": (2,)},
        {
            "budget_bytes": st.one_of(
                st.floats(), st.text(max_size=3), non_positive_ints, impossible_bytes
            ),
            "probe_batches": bad_sizes(),
            "optimizer": bad_choice(("adam", "sgd")),
            "max_batch": st.one_of(st.floats(), st.text(max_size=3), non_positive_ints),
        },
    ),
    Case(
        "labkit.batching.largest:largest_batch_cuda",
        {"model_fn": _linear, "input_shape": (2,)},
        {
            "device": st.one_of(BAD_TORCH_DEVICE, st.none()),
            "optimizer": bad_choice(("adam", "sgd")),
            "start_batch": BAD_POS,
            "max_batch": BAD_POS,
            "fraction": bad_real(0, 1, low_open=True),
            "tolerance": bad_real(0, 1, high_open=True),
        },
    ),
    Case(
        "labkit.batching.largest:search_batch",
        {"fits": lambda b: b <= 5, "start": 1, "max_batch": 8, "tolerance": 0.0},
        {
            "start": BAD_POS,
            "max_batch": BAD_POS,
            "tolerance": bad_real(0, 1, high_open=True),
        },
        run_valid=True,
    ),
    # ---------------------------------------------------------------- labkit.batching.loaders
    Case(
        "labkit.batching.synthetic:SyntheticImages",
        {"n": 4},
        {
            "n": BAD_POS,
            "image_size": bad_int(2),
            "decode_px": st.one_of(bad_int(8), st.integers(9, 15), st.just(16)),
            "io_ms": BAD_MS,
            "python_ms": BAD_MS,
            "num_classes": bad_int(2),
            "seed": st.one_of(NOT_INT, st.integers(max_value=-1)),
        },
        run_valid=True,
    ),
    Case(
        "labkit.batching.synthetic:decode_sample",
        {"index": 0, "decode_px": 8},
        {
            "index": bad_int(0),
            "decode_px": st.one_of(bad_int(8), st.integers(9, 15)),
            "io_ms": BAD_MS,
            "python_ms": BAD_MS,
            "num_classes": BAD_POS,
            "seed": bad_int(0),
        },
        run_valid=True,
    ),
    Case(
        "labkit.batching.synthetic:augment_sample",
        lambda: {"image": np.zeros((3, 16, 16), np.float32), "index": 0, "image_size": 8},
        {
            "index": bad_int(0),
            "image_size": st.one_of(bad_int(1), st.integers(17, 100)),
            "seed": bad_int(0),
        },
        run_valid=True,
    ),
    Case(
        "labkit.batching.synthetic:sample_cost",
        {},
        {
            "warmup_ms": BAD_MS,
            "rep_ms": BAD_MS_POS,
        },
    ),
    Case(
        "labkit.batching.synthetic:thread_scaling",
        {},
        {
            "threads": bad_int(2),
            "samples": BAD_POS,
            "warmup_ms": BAD_MS,
            "rep_ms": BAD_MS_POS,
        },
    ),
    Case(
        "labkit.batching.loaders:measure_loader",
        {},
        {
            "num_workers": bad_int(0),
            "prefetch_factor": st.one_of(st.floats(), st.text(max_size=2), st.integers()),
            "batch_size": BAD_POS,
            "steps": BAD_POS,
            "warmup_steps": bad_int(0),
            "step_ms": BAD_MS.filter(lambda v: v is not None),
            "device": BAD_TORCH_DEVICE,
        },
    ),
    Case(
        "labkit.batching.loaders:compare_loaders",
        {"configs": [{"num_workers": 0}]},
        {
            "configs": st.one_of(st.just([]), st.just({})),
            "batch_size": BAD_POS,
            "steps": BAD_POS,
            "step_ms": BAD_MS.filter(lambda v: v is not None),
            "device": BAD_TORCH_DEVICE,
        },
    ),
    Case(
        "labkit.batching.tf_data:build_tf_pipeline",
        lambda: {
            "variant": "map",
            "dataset": _resolve("labkit.batching.synthetic:SyntheticImages")(8),
            "batch_size": 2,
            "epoch_batches": 1,
        },
        {
            "variant": bad_choice(
                (
                    "map",
                    "parallel",
                    "map+prefetch",
                    "parallel+prefetch",
                    "parallel+cache+prefetch",
                    "map+defaults",
                )
            ),
            "batch_size": BAD_POS,
            "epoch_batches": BAD_POS,
        },
    ),
    Case(
        "labkit.batching.tf_data:measure_tf_pipeline",
        {},
        {
            "variant": bad_choice(
                (
                    "map",
                    "parallel",
                    "map+prefetch",
                    "parallel+prefetch",
                    "parallel+cache+prefetch",
                    "map+defaults",
                )
            ),
            "batch_size": BAD_POS,
            "steps": BAD_POS,
            "warmup_steps": bad_int(0),
            "step_ms": BAD_MS,
            "epoch_batches": BAD_POS,
        },
    ),
    Case(
        "labkit.batching.tf_data:compare_tf_pipelines",
        {"variants": ["map"]},
        {
            "variants": st.one_of(
                st.just([]),
                st.lists(
                    st.sampled_from(["mapp", "cache", "", "prefetch"]), min_size=1, max_size=2
                ),
            ),
            "batch_size": BAD_POS,
            "step_ms": BAD_MS,
            "epoch_batches": BAD_POS,
        },
    ),
    # ---------------------------------------------------------------- labkit.kernels
    Case(
        "labkit.kernels.occupancy:occupancy",
        {"gpu": "H100", "threads_per_block": 256, "registers_per_thread": 32},
        {
            "gpu": st.sampled_from(["H1000", "V100", "sm_70", "", "gpu", "A10"]),
            "threads_per_block": bad_int(1, 1024),
            "registers_per_thread": bad_int(1, 255),
            "shared_bytes_per_block": bad_int(0),
        },
        run_valid=True,
    ),
    Case(
        "labkit.kernels.occupancy:gpu_limits",
        {"gpu": "sm_90"},
        {"gpu": st.sampled_from(["sm_91", "H", "B300"])},
        run_valid=True,
    ),
    Case(
        "labkit.kernels.occupancy:occupancy_sweep",
        lambda: {"gpu": "H100", "kernel_resources": _resources()},
        {
            "gpu": st.sampled_from(["H1000", "sm_70"]),
            "block_sizes": st.one_of(
                bad_sizes(), st.lists(st.integers(1025, 4096), min_size=1, max_size=2)
            ),
            "dynamic_shared_bytes": bad_int(0),
        },
        run_valid=True,
    ),
    Case(
        "labkit.kernels.sources:kernel_spec",
        {"name": "transpose_padded"},
        {
            "name": st.one_of(
                st.integers(), st.none(), st.sampled_from(["transpose", "sgemm_tile", "", "reduce"])
            )
        },
        run_valid=True,
    ),
    Case(
        "labkit.kernels.sources:kernel_source",
        {"name": "transpose"},
        {"name": st.sampled_from(["transposes", "", "x.cu", "../timing"])},
        run_valid=True,
    ),
    Case(
        "labkit.kernels.sources:kernel_path",
        {"name": "sgemm_tiled"},
        {"name": st.sampled_from(["sgemm.c", "", "x"])},
        run_valid=True,
    ),
    Case(
        "labkit.kernels.sources:macros_for",
        {"name": "transpose_padded"},
        {
            "TILE_DIM": st.one_of(NOT_INT, non_positive_ints, st.integers(4097, 10**6)),
            "TILE": st.integers(1, 64),
        },
        run_valid=True,
        names={"TILE": "TILE"},
    ),
    Case(
        "labkit.kernels.experiments:stride_sweep",
        {},
        {
            "strides": st.one_of(
                st.integers(),
                st.none(),
                st.just([]),
                st.lists(st.integers(max_value=0), min_size=1, max_size=2),
            ),
            "n_elements": st.one_of(st.floats(), st.text(max_size=2), non_positive_ints),
            "block_size": bad_int(1, 1024),
            "warmup_ms": BAD_MS,
            "rep_ms": BAD_MS_POS,
        },
    ),
    Case(
        "labkit.kernels.experiments:transpose_versions",
        {},
        {
            "n": st.one_of(st.floats(), st.text(max_size=2), non_positive_ints),
            "versions": st.lists(st.sampled_from(["fast", ""]), min_size=1, max_size=2),
            "tile_dim": bad_int(1, 1024),
            "block_rows": bad_int(1, 1024),
            "warmup_ms": BAD_MS,
            "rep_ms": BAD_MS_POS,
        },
    ),
    Case(
        "labkit.kernels.experiments:sgemm_vs_cublas",
        {"n": 64},
        {
            "n": bad_int(1, 32768),
            "versions": st.lists(st.sampled_from(["cublas", ""]), min_size=1, max_size=2),
            "warmup_ms": BAD_MS,
            "rep_ms": BAD_MS_POS,
        },
    ),
    Case(
        "labkit.kernels.experiments:reduction_versions",
        {},
        {
            "n_elements": st.one_of(st.floats(), st.text(max_size=2), non_positive_ints),
            "versions": st.one_of(
                st.just([]), st.lists(st.sampled_from(["tree", ""]), min_size=1, max_size=2)
            ),
            "atomic_elements": BAD_POS,
            "block_size": bad_int(32, 1024),
            "warmup_ms": BAD_MS,
            "rep_ms": BAD_MS_POS,
        },
    ),
    Case(
        "labkit.kernels.experiments:block_size_sweep",
        {},
        {
            "kernel": st.one_of(st.integers(), st.sampled_from(["sgemm", "", "copy"])),
            "block_sizes": st.one_of(
                st.integers(),
                st.just([]),
                st.lists(st.integers(max_value=0), min_size=1, max_size=2),
            ),
            "n_elements": st.one_of(st.floats(), st.text(max_size=2), non_positive_ints),
            "warmup_ms": BAD_MS,
            "rep_ms": BAD_MS_POS,
        },
    ),
    Case(
        "labkit.kernels.cupy_run:get_kernel",
        {"name": "transpose_padded"},
        {
            "name": st.one_of(st.integers(), st.sampled_from(["transpose", ""])),
            "TILE_DIM": bad_int(1, 4096),
        },
    ),
    Case(
        "labkit.kernels.cupy_run:strided_copy",
        lambda: {"x": np.zeros(8, np.float32), "stride": 1},
        {
            "stride": bad_int(1, 65535),
            "block_size": bad_int(1, 1024),
            "items_per_thread": bad_int(1, 64),
        },
    ),
    Case(
        "labkit.kernels.cupy_run:transpose",
        lambda: {"x": np.zeros((8, 8), np.float32)},
        {
            "version": bad_choice(("naive", "tiled", "padded", "tiled_nosync")),
            "tile_dim": bad_int(1, 1024),
            "block_rows": bad_int(1, 1024),
        },
    ),
    Case(
        "labkit.kernels.cupy_run:sgemm",
        lambda: {"a": np.zeros((8, 8), np.float32), "b": np.zeros((8, 8), np.float32)},
        {"version": bad_choice(("naive", "shared", "tiled"))},
    ),
    Case(
        "labkit.kernels.cupy_run:reduce_sum",
        lambda: {"x": np.zeros(8, np.float32)},
        {"version": bad_choice(("atomic", "shared", "warp_shuffle"))},
    ),
    Case(
        "labkit.kernels.tuning:recorded_cache_path",
        {"kernel": "transpose"},
        {
            "kernel": st.one_of(
                st.integers(), st.none(), st.sampled_from(["", "../x", "a b", "x.y"])
            ),
        },
        run_valid=True,
    ),
    Case(
        "labkit.kernels.tuning:replay",
        {"cache_path": "/nonexistent/cache.json"},
        {
            "kernel": st.one_of(st.integers(), st.sampled_from(["", "a/b"])),
        },
    ),
    Case(
        "labkit.kernels.autotune:tune_transpose",
        {"n": 64},
        {
            "n": bad_int(16, 32768),
            "iterations": bad_int(1, 1000),
            "tune_params": st.one_of(
                st.just({"TILE_DIM": [16]}),
                st.just({"TILE_DIM": [0], "BLOCK_ROWS": [1]}),
                st.just({"TILE_DIM": "16", "BLOCK_ROWS": [1]}),
                st.just({"TILE_DIM": [], "BLOCK_ROWS": [1]}),
            ),
        },
    ),
    Case(
        "labkit.kernels.autotune:tune_sgemm",
        {"n": 2048},
        {
            "n": bad_int(64, 16384),
            "iterations": bad_int(1, 1000),
            "tune_params": st.one_of(
                st.just({"BM": [64]}),
                st.just(
                    {"BM": [0], "BN": [64], "BK": [8], "TM": [4], "TN": [4], "block_size_x": [256]}
                ),
            ),
        },
    ),
    Case(
        "labkit.kernels.plots:plot_tuning",
        lambda: {"result": _replay()},
        {
            "top": BAD_POS,
        },
    ),
    Case(
        "labkit.kernels.simulator:simulate",
        {"kernel": "transpose_naive", "n": 8},
        {
            "kernel": st.one_of(
                st.integers(), st.none(), st.sampled_from(["transpose", "", "sgemm"])
            ),
            "n": BAD_POS,
            "seed": bad_int(0),
            "block": BAD_POS,
            "stride": BAD_POS,
            "timeout_s": bad_real(0, low_open=True),
        },
        guards=("labkit.kernels.simulator._run_worker",),
    ),
    Case(
        "labkit.kernels.simulator:verify_all",
        {"n": 8},
        {
            "n": BAD_POS,
            "seed": bad_int(0),
            "block": BAD_POS,
            "kernels": st.one_of(
                st.just([]), st.lists(st.sampled_from(["nope", ""]), min_size=1, max_size=2)
            ),
            "timeout_s": bad_real(0, low_open=True),
        },
        guards=("labkit.kernels.simulator._run_worker",),
    ),
    Case(
        "labkit.kernels.simulator:race_demo",
        {"n": 8, "runs": 2},
        {
            "n": BAD_POS,
            "runs": bad_int(2, 50),
            "seed": bad_int(0),
            "block": BAD_POS,
            "timeout_s": bad_real(0, low_open=True),
        },
        guards=("labkit.kernels.simulator._run_worker",),
    ),
    Case(
        "labkit.kernels.resources:check_arch",
        {"arch": "sm_90"},
        {"arch": st.sampled_from(["90", "sm90", "compute_90", "sm_", ""])},
        run_valid=True,
    ),
    Case(
        "labkit.kernels.resources:compile_resources",
        {"source_or_path": "__global__ void k(){}"},
        {
            "arch": st.sampled_from(["sm90", "", "compute_80"]),
            "max_registers": st.one_of(
                st.floats(), st.integers(max_value=15), st.integers(min_value=256)
            ),
            "timeout_s": bad_real(0, low_open=True),
        },
        guards=("labkit.kernels.resources._require_compiler",),
        names={},
    ),
    Case(
        "labkit.kernels.resources:resources_table",
        {},
        {
            "arches": st.one_of(
                st.just([]), st.lists(st.sampled_from(["sm90", "x"]), min_size=1, max_size=2)
            ),
            "defines": st.just({"1X": 1}),
        },
        guards=("labkit.kernels.resources._require_compiler",),
    ),
    # ---------------------------------------------------------------- labkit.profiling
    Case(
        "labkit.profiling.torch_profile:profile_training",
        {},
        {
            "steps": BAD_POS,
            "batch": BAD_POS,
            "image_size": bad_int(2),
            "device": BAD_TORCH_DEVICE,
            "seed": BAD_SEED,
        },
    ),
    Case(
        "labkit.profiling.torch_profile:profile_training",
        {"device": "cpu"},
        {"batch": st.integers(2**30, 2**40), "image_size": st.integers(2**16, 2**20)},
        torch=True,
        guards=("labkit.profiling.torch_profile.Trainer",),
        label="profiling.profile_training.memory",
    ),
    Case(
        "labkit.profiling.stalls:time_sync_stall",
        {},
        {
            "steps": BAD_POS,
            "batch": BAD_POS,
            "image_size": bad_int(2),
            "device": BAD_TORCH_DEVICE,
            "warmup_ms": BAD_MS,
            "rep_ms": BAD_MS_POS,
            "min_reps": BAD_POS,
            "seed": BAD_SEED,
        },
    ),
    Case(
        "labkit.profiling.stalls:time_sync_stall",
        {"device": "cpu"},
        {"batch": st.integers(2**30, 2**40)},
        torch=True,
        guards=("labkit.profiling.stalls.Trainer",),
        label="profiling.time_sync_stall.memory",
    ),
    Case(
        "labkit.profiling.trace:summarize_trace",
        {"path": "/nonexistent.json"},
        {"top": bad_int(0)},
    ),
    Case(
        "labkit.profiling.tf_profile:keras_cnn",
        {},
        {"num_classes": BAD_POS, "image_size": st.one_of(bad_int(8), st.integers(9, 15))},
    ),
    Case(
        "labkit.profiling.tf_profile:profile_keras_training",
        {},
        {
            "steps": BAD_POS,
            "batch": st.one_of(BAD_POS, st.integers(2**30, 2**40)),
            "image_size": st.one_of(bad_int(8), st.integers(9, 15)),
            "warmup_steps": BAD_POS,
            "top": bad_int(0),
            "seed": BAD_SEED,
        },
    ),
    Case(
        "labkit.profiling.nsight:nsight_commands",
        {},
        {"args": st.just("--epochs 1")},
        run_valid=True,
    ),
    Case(
        "labkit.profiling.nsight:run_nsys",
        {},
        {
            "steps": BAD_POS,
            "batch": BAD_POS,
            "image_size": bad_int(2),
            "timeout_s": bad_real(0, low_open=True),
        },
        guards=("labkit.profiling.nsight.find_nsight", "subprocess.run"),
    ),
    # ---------------------------------------------------------------- labkit.scaling
    Case(
        "labkit.scaling.launch:launch_command",
        {"nnodes": 2, "nproc_per_node": 4, "rdzv_endpoint": "node001:29500"},
        {
            "nnodes": BAD_POS,
            "nproc_per_node": st.one_of(
                non_positive_ints,
                st.floats(),
                st.none(),
                st.text(max_size=4).filter(lambda s: s not in ("gpu", "cpu", "auto", "xpu")),
            ),
            "rdzv_endpoint": st.sampled_from(["", "host:99999", "a b:1", "host:port", ":29500"]),
            "rdzv_id": st.sampled_from(["", "a b"]),
            "rdzv_backend": st.one_of(st.none(), st.just("")),
            "module": st.just("x y"),
        },
        run_valid=True,
    ),
    Case(
        "labkit.scaling.launch:run_ddp",
        {},
        {
            "nproc": BAD_POS,
            "width": st.one_of(BAD_POS, st.integers(2**20, 2**24)),
            "depth": BAD_POS,
            "steps": BAD_POS,
            "batch_per_rank": st.one_of(BAD_POS, st.integers(2**32, 2**40)),
            "accum_steps": BAD_POS,
            "allreduce_reps": BAD_POS,
            "threads_per_proc": BAD_POS,
            "warmup_steps": bad_int(0),
            "backend": bad_choice(("auto", "gloo", "nccl")),
            "timeout_s": bad_real(0, low_open=True),
        },
        guards=("labkit.scaling.process.run_process",),
    ),
    Case(
        "labkit.scaling.launch:scaling_efficiency",
        {"nprocs": (1,)},
        {
            "nprocs": bad_sizes(),
            "width": BAD_POS,
            "steps": BAD_POS,
            "batch_per_rank": BAD_POS,
            "threads_per_proc": BAD_POS,
            "backend": bad_choice(("auto", "gloo", "nccl")),
            "timeout_s": bad_real(0, low_open=True),
        },
        guards=("labkit.scaling.process.run_process",),
    ),
    Case(
        "labkit.scaling.launch:allreduce_cost",
        {"sizes_bytes": (1024,)},
        {
            "sizes_bytes": st.one_of(
                bad_sizes(),
                st.lists(st.integers(1, 1000).filter(lambda s: s % 4), min_size=1, max_size=2),
                st.lists(st.integers(2**50, 2**52).map(lambda s: s * 4), min_size=1, max_size=2),
            ),
            "nproc": BAD_POS,
            "reps": BAD_POS,
            "warmup": bad_int(0),
            "threads_per_proc": BAD_POS,
            "backend": bad_choice(("auto", "gloo", "nccl")),
            "timeout_s": bad_real(0, low_open=True),
        },
        guards=("labkit.scaling.process.run_process",),
    ),
    Case(
        "labkit.scaling.launch:allreduce_vs_model_size",
        {"widths": (8,)},
        {
            "widths": bad_sizes(),
            "nproc": BAD_POS,
            "steps": BAD_POS,
            "batch_per_rank": BAD_POS,
            "backend": bad_choice(("auto", "gloo", "nccl")),
        },
        guards=("labkit.scaling.process.run_process",),
    ),
    Case(
        "labkit.scaling.train_ddp:mlp_parameter_count",
        {"width": 8},
        {"width": BAD_POS, "in_features": BAD_POS, "depth": BAD_POS, "out_features": BAD_POS},
        run_valid=True,
    ),
    Case(
        "labkit.scaling.train_ddp:build_mlp",
        {"width": 8},
        {
            "width": BAD_POS,
            "depth": BAD_POS,
        },
    ),
    Case(
        "labkit.scaling.results:bus_bandwidth_factor",
        {"nproc": 8},
        {"nproc": BAD_POS},
        run_valid=True,
    ),
    Case(
        "labkit.scaling.accumulation:accumulate_equivalence",
        {},
        {
            "micro_batch": BAD_POS,
            "accum_steps": BAD_POS,
            "width": BAD_POS,
            "min_reps": BAD_POS,
            "dtype": st.one_of(
                unsupported_dtypes, st.integers(), st.lists(st.integers(), max_size=1)
            ),
            "seed": BAD_SEED,
            "lr": bad_real(0, low_open=True),
            "warmup_ms": BAD_MS,
            "rep_ms": BAD_MS_POS,
            "device": BAD_TORCH_DEVICE,
        },
    ),
    Case(
        "labkit.scaling.accumulation:accumulate_equivalence",
        {"device": "cpu"},
        {"width": st.integers(2**20, 2**24), "micro_batch": st.integers(2**32, 2**40)},
        torch=True,
        guards=("labkit.timing.bench.bench", "labkit.scaling.train_ddp.build_mlp"),
        label="dist.accumulate_equivalence.memory",
    ),
    Case(
        "labkit.scaling.mirrored:run_mirrored",
        {},
        {
            "n_logical": BAD_POS,
            "steps": BAD_POS,
            "epochs": BAD_POS,
            "batch_per_replica": BAD_POS,
            "width": BAD_POS,
            "timeout_s": bad_real(0, low_open=True),
        },
        guards=("labkit.scaling.process.run_process",),
    ),
    # ---------------------------------------------------------------- labkit.check
    *(
        Case(
            f"labkit.check:{fn}",
            {p: 1.0 for p in params},
            {p: NOT_AN_ANSWER for p in params},
            names=names,
        )
        for fn, params, names in (
            ("peak_bandwidth", ("answer_gb_per_s",), {}),
            ("elementwise_time", ("answer_ms",), {}),
            ("summary_statistics", ("median_ms", "iqr_ms"), {}),
            ("threads_to_fill", ("n",), {"n": "n_to_fill"}),
            ("amdahl_prediction", ("serial_fraction", "speedup_64"), {}),
            ("stream_bytes", ("bytes_per_call",), {}),
            ("host_link_vs_hbm", ("ratio",), {}),
            ("cnn_in_features", ("in_features",), {}),
            ("cnn_head_params", ("params",), {}),
            ("rnn_param_counts", ("keras_params", "torch_params"), {}),
            ("sector_efficiency", ("stride_2", "stride_32"), {}),
            ("strided_copy_rate", ("answer",), {"answer": "copy_fraction_32"}),
            ("bank_conflicts", ("unpadded_ways", "padded_ways"), {}),
            ("occupancy", ("answer",), {"answer": "occupancy_fraction"}),
            ("loader_workers", ("answer",), {"answer": "workers"}),
            ("largest_batch", ("answer",), {"answer": "largest"}),
            ("idle_fraction", ("answer",), {"answer": "idle_fraction"}),
            ("accumulation_steps", ("answer",), {"answer": "accumulation_steps"}),
            ("bus_bandwidth", ("algbw_gb_per_s", "busbw_gb_per_s"), {}),
        )
    ),
    Case(
        "labkit.check:knee_batch",
        {"answer": 4, "batch_sizes": [1, 4, 16], "samples_per_s": [10.0, 95.0, 100.0]},
        {
            "answer": NOT_AN_ANSWER,
            "batch_sizes": st.one_of(
                st.just([]),
                st.just([1, 4]),
                st.just([0, 4, 16]),
                st.just([1.5, 4, 16]),
                st.just([4, 4, 16]),
            ),
            "samples_per_s": st.one_of(
                st.just([1.0]),
                st.just([1.0, math.nan, 2.0]),
                st.just([1.0, -2.0, 3.0]),
                st.just(["1", 2.0, 3.0]),
            ),
        },
        names={"answer": "knee_batch"},
        run_valid=True,
    ),
    Case(
        "labkit.check:scaling_efficiency",
        {"answer": 0.8, "throughput_1": 100.0, "throughput_n": 160.0, "n": 2},
        {
            "answer": NOT_AN_ANSWER,
            "throughput_1": bad_real(0, low_open=True),
            "throughput_n": bad_real(0, low_open=True),
            "n": BAD_POS,
        },
        names={"answer": "efficiency"},
        run_valid=True,
    ),
    Case(
        "labkit.check:top_operator",
        {"answer": "aten::mm", "operators_by_self_time": ["aten::mm"]},
        {
            "answer": st.one_of(st.integers(), st.floats(), st.lists(st.text(), max_size=1)),
            "operators_by_self_time": st.just([]),
        },
        run_valid=True,
    ),
    Case(
        "labkit.check:sync_points",
        {"answers": {}},
        {
            "answers": st.one_of(
                st.integers(), st.text(max_size=3), st.lists(st.booleans(), min_size=1)
            )
        },
        run_valid=True,
    ),
    Case(
        "labkit.check:roofline_prediction",
        lambda: {
            "predictions": {},
            "roofline": _resolve("labkit.roofline.model:Roofline")("cpu", {"float32": 100.0}, 10.0),
        },
        {
            "predictions": st.one_of(
                st.integers(), st.text(max_size=3), st.lists(st.text(), min_size=1)
            ),
        },
        run_valid=True,
    ),
    # ---------------------------------------------------------------- the bench_* modules
    Case(
        "labkit.cli.bench.bandwidth:run_bandwidth_benchmark",
        {},
        {
            "rounds": BAD_POS,
            "max_bytes": st.one_of(st.floats(), st.text(max_size=3), st.integers(max_value=4095)),
        },
        guards=("labkit.cli.bench.bandwidth.run_cpu", "labkit.cli.bench.bandwidth.run_gpu"),
    ),
    Case(
        "labkit.bandwidth.references:cpu_bytes_per_array",
        {"max_bytes": 2**20},
        {
            "arrays": BAD_POS,
            "max_bytes": st.one_of(st.floats(), st.text(max_size=3), st.integers(max_value=4095)),
        },
    ),
    Case("labkit.cli.bench.accel:mlp_data", {"batch": 4}, {"batch": BAD_POS}, run_valid=True),
]

PAIRS = [pytest.param(case, param, id=f"{case.id}-{param}") for case in CASES for param in case.bad]


@contextlib.contextmanager
def _rejection_setting(case: Case) -> Iterator[None]:
    hidden = ALWAYS_HIDDEN if case.torch else (*ALWAYS_HIDDEN, "torch")
    with contextlib.ExitStack() as stack:
        stack.enter_context(
            mock.patch("labkit.machine.memory.available_bytes", return_value=FREE_BYTES)
        )
        for target in case.guards:
            stack.enter_context(mock.patch(target, _forbidden))
        stack.enter_context(_hidden(hidden))
        yield


@pytest.mark.parametrize(("case", "param"), PAIRS)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_rejects_bad_argument(case: Case, param: str, data: st.DataObject) -> None:
    if case.torch:
        pytest.importorskip("torch")
    fn = _resolve(case.target)
    kwargs = case.kwargs()
    bad = data.draw(case.bad[param], label=param)
    with _rejection_setting(case):
        assert_rejects(lambda: fn(**{**kwargs, param: bad}), case.names.get(param, param))


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES if c.run_valid])
def test_valid_call_runs(case: Case) -> None:
    """The table's valid calls really are valid (so a rejection is due to the bad value alone)."""
    from labkit.core.optional import MissingPackageError

    if case.torch:
        pytest.importorskip("torch")
    try:
        _resolve(case.target)(**case.kwargs())
    except MissingPackageError as exc:  # the valid call needs a framework this machine lacks
        pytest.skip(str(exc))


def test_the_table_covers_every_module_in_scope() -> None:
    modules = {".".join(case.target.partition(":")[0].split(".")[1:3]) for case in CASES}
    assert {
        "accel.precision",
        "models.train",
        "batching.sweep",
        "batching.loaders",
        "batching.largest",
        "kernels.cupy_run",
        "profiling.torch_profile",
        "scaling.launch",
        "check",
    } <= modules, sorted(modules)
    # The CLI's flags come from argparse (bools, checked there); its rows are the sizes a person types.
    assert sum(1 for c in CASES if c.target.startswith("labkit.cli.bench.")) >= 2
    assert len({c.target for c in CASES}) >= 110


# --------------------------------------------------------------------------- explicit rejections


def test_compare_loaders_checks_every_config_before_the_first_run() -> None:
    from labkit.batching.loaders import compare_loaders

    with _rejection_setting(Case("x:y", {}, {})):
        assert_rejects(
            lambda: compare_loaders([{"num_workers": 0}, {"num_workers": -1}]), "num_workers"
        )
        assert_rejects(lambda: compare_loaders([{"num_workers": 0}, {"bogus": 1}]), "bogus")


def test_a_bad_macro_name_is_named() -> None:
    from labkit.kernels.sources import macros_for

    assert_rejects(lambda: macros_for("transpose_padded", TILE=64), "TILE")


# --------------------------------------------------------------------------- properties: occupancy

ARCHES = ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90")


@settings(max_examples=80, deadline=None)
@given(
    arch=st.sampled_from(ARCHES),
    threads=st.integers(1, 1024),
    regs=st.integers(1, 255),
    smem=st.integers(0, 240 * 1024),
)
def test_occupancy_never_exceeds_the_hardware(
    arch: str, threads: int, regs: int, smem: int
) -> None:
    from labkit.kernels.occupancy import ARCHES as LIMITS
    from labkit.kernels.occupancy import occupancy

    o = occupancy(
        arch, threads_per_block=threads, registers_per_thread=regs, shared_bytes_per_block=smem
    )
    lim = LIMITS[arch]
    assert 0 <= o.blocks_per_sm <= lim.max_blocks_per_sm
    assert o.active_warps_per_sm <= lim.max_warps_per_sm
    assert o.blocks_per_sm * threads <= lim.max_threads_per_sm
    assert 0.0 <= o.occupancy_fraction <= 1.0
    if o.fits:
        assert o.blocks_per_sm * o.shared_allocated_bytes_per_block <= lim.shared_bytes_per_sm
        assert o.blocks_per_sm * o.registers_per_block <= lim.registers_per_sm
        assert o.limited_by and all(o.block_limits[r] == o.blocks_per_sm for r in o.limited_by)
    else:
        assert o.reason


@settings(max_examples=80, deadline=None)
@given(
    arch=st.sampled_from(ARCHES),
    threads=st.integers(1, 1024),
    regs=st.tuples(st.integers(1, 255), st.integers(1, 255)).map(sorted),
    smem=st.tuples(st.integers(0, 240 * 1024), st.integers(0, 240 * 1024)).map(sorted),
)
def test_more_registers_or_shared_memory_never_raise_occupancy(
    arch: str, threads: int, regs: list[int], smem: list[int]
) -> None:
    from labkit.kernels.occupancy import occupancy

    def blocks(r: int, s: int) -> int:
        return occupancy(
            arch, threads_per_block=threads, registers_per_thread=r, shared_bytes_per_block=s
        ).blocks_per_sm

    low_r, high_r = regs
    low_s, high_s = smem
    assert blocks(high_r, low_s) <= blocks(low_r, low_s)
    assert blocks(low_r, high_s) <= blocks(low_r, low_s)
    assert blocks(high_r, high_s) <= blocks(low_r, low_s)


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(1, 1024), min_size=1, max_size=8))
def test_an_occupancy_sweep_does_not_depend_on_the_order_of_its_block_sizes(
    sizes: list[int],
) -> None:
    from labkit.kernels.occupancy import occupancy_sweep

    forward = occupancy_sweep("H100", _resources(), sizes)
    backward = occupancy_sweep("H100", _resources(), list(reversed(sizes)))
    assert forward.rows == backward.rows
    assert forward.block_sizes == tuple(sorted(set(sizes)))


# --------------------------------------------------------------------------- properties: checks

FINITE = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(min_value=-(2**1000), max_value=2**1000),
    st.floats(allow_nan=False, allow_infinity=False).map(np.float64),
    st.integers(-(2**62), 2**62).map(np.int64),
)

ONE_ANSWER = (
    "peak_bandwidth",
    "elementwise_time",
    "threads_to_fill",
    "stream_bytes",
    "host_link_vs_hbm",
    "cnn_in_features",
    "cnn_head_params",
    "occupancy",
    "loader_workers",
    "largest_batch",
    "idle_fraction",
    "accumulation_steps",
    "strided_copy_rate",
)
TWO_ANSWERS = (
    "summary_statistics",
    "amdahl_prediction",
    "rnn_param_counts",
    "sector_efficiency",
    "bank_conflicts",
    "bus_bandwidth",
)


@pytest.mark.parametrize("name", ONE_ANSWER)
@settings(max_examples=40, deadline=None)
@given(answer=FINITE)
def test_a_check_answers_any_finite_number(name: str, answer: Any) -> None:
    result = getattr(check, name)(answer)
    assert isinstance(result, CheckResult) and result.solved
    assert isinstance(str(result), str)


@pytest.mark.parametrize("name", TWO_ANSWERS)
@settings(max_examples=40, deadline=None)
@given(first=FINITE, second=FINITE)
def test_a_two_part_check_answers_any_finite_numbers(name: str, first: Any, second: Any) -> None:
    result = getattr(check, name)(first, second)
    assert isinstance(result, CheckResult) and result.solved


@settings(max_examples=40, deadline=None)
@given(
    answer=FINITE,
    curve=st.lists(
        st.tuples(st.integers(1, 4096), st.floats(0, 1e9, allow_nan=False)),
        min_size=1,
        max_size=6,
        unique_by=lambda point: point[0],
    ),
)
def test_knee_batch_answers_any_finite_number_on_any_curve(
    answer: Any, curve: list[tuple[int, float]]
) -> None:
    sizes, rates = [b for b, _ in curve], [r for _, r in curve]
    result = check.knee_batch(answer, sizes, rates)
    assert isinstance(result, CheckResult) and result.solved
    knee = check.pipelines.knee(sizes, rates)
    assert knee in sizes
    assert rates[sizes.index(knee)] >= 0.9 * max(rates)


@settings(max_examples=40, deadline=None)
@given(
    answer=FINITE,
    t1=st.floats(1e-3, 1e9),
    tn=st.floats(1e-3, 1e9),
    n=st.integers(1, 1024),
)
def test_scaling_efficiency_answers_any_finite_number(
    answer: Any, t1: float, tn: float, n: int
) -> None:
    result = check.scaling_efficiency(answer, throughput_1=t1, throughput_n=tn, n=n)
    assert isinstance(result, CheckResult) and result.solved


@pytest.mark.parametrize("name", ONE_ANSWER)
def test_unsolved_is_not_an_error(name: str) -> None:
    for blank in (None, ...):
        result = getattr(check, name)(blank)
        assert not result.solved and not result.passed


@pytest.mark.parametrize("name", ONE_ANSWER)
def test_each_check_passes_its_own_reference(name: str) -> None:
    """The property tests above would pass for a check that never passes: not so."""
    references = {
        "peak_bandwidth": 2 * 2_619_000e3 * 5120 / 8 / 1e9,
        "elementwise_time": 2 * 2**30 / (2 * 2_619_000e3 * 5120 / 8) * 1e3,
        "threads_to_fill": 520,
        "stream_bytes": 12_000_000,
        "host_link_vs_hbm": 3350 / (32 * 16 * 128 / 130 / 8),
        "cnn_in_features": 32 * 48 * 48,
        "cnn_head_params": 32 * 112 * 112 * 10 + 10,
        "occupancy": 0.5,
        "loader_workers": 7,
        "largest_batch": check.pipelines.largest_batch_that_fits(),
        "idle_fraction": 1 - union_ms(check.TIMELINE_KERNELS_MS) / 10.0,
        "accumulation_steps": 8,
        "strided_copy_rate": 2 / 9,
    }
    assert getattr(check, name)(references[name]).passed


# --------------------------------------------------------------------------- properties: batches


@settings(max_examples=60, deadline=None)
@given(
    fixed=st.floats(0, 1e12),
    per_sample=st.floats(1, 1e9),
    budgets=st.tuples(st.integers(1, 2**50), st.integers(1, 2**50)).map(sorted),
)
def test_a_predicted_batch_fits_its_budget_and_grows_with_it(
    fixed: float, per_sample: float, budgets: list[int]
) -> None:
    from labkit.batching.memory_fit import MemoryFit

    fit = MemoryFit(points=(), fixed_bytes=fixed, per_sample_bytes=per_sample)
    small, large = (fit.largest_batch_under(b) for b in budgets)
    assert 0 <= small <= large  # more memory never predicts a smaller batch
    for budget, batch in zip(budgets, (small, large), strict=True):
        if batch:
            assert fit.predict_bytes(batch) <= budget  # never over the budget
        assert fit.predict_bytes(batch + 2) > budget  # and the largest, give or take rounding


@settings(max_examples=60, deadline=None)
@given(
    limit=st.integers(0, 5000),
    start=st.integers(1, 64),
    top=st.integers(1, 8192),
    tolerance=st.floats(0, 0.5),
)
def test_search_batch_brackets_the_limit(
    limit: int, start: int, top: int, tolerance: float
) -> None:
    from labkit.batching.largest import search_batch

    top = max(top, start)
    tried: dict[int, bool] = {}

    def fits(batch: int) -> bool:
        assert 1 <= batch <= top  # never probes a batch outside [1, max_batch]
        tried[batch] = batch <= limit
        return tried[batch]

    reached = search_batch(fits, start, top, tolerance)
    best = max((b for b, ok in tried.items() if ok), default=0)
    assert reached == (limit >= top)
    if not reached:
        failed = min(b for b, ok in tried.items() if not ok)
        assert failed - best <= max(1, tolerance * best)  # the gap is within the tolerance
        assert best <= limit < failed


@settings(max_examples=40, deadline=None)
@given(
    latencies=st.lists(st.floats(0.01, 1000), min_size=1, max_size=6),
    budgets=st.tuples(st.floats(0.01, 2000), st.floats(0.01, 2000)).map(sorted),
)
def test_a_larger_latency_budget_never_gives_a_smaller_batch(
    latencies: list[float], budgets: list[float]
) -> None:
    import dataclasses

    from labkit.batching.sweep import BatchCurve, BatchPoint, latency_budget_batch

    sweep = _batch_sweep()
    template = sweep.curves[0].points[0]
    points = tuple(
        dataclasses.replace(template, batch_size=2**i, median_ms=ms)
        for i, ms in enumerate(latencies)
    )
    sweep = dataclasses.replace(sweep, curves=(BatchCurve("inference", points),))
    small, large = (latency_budget_batch(sweep, b) for b in budgets)

    def rate(batch: int | None) -> float:
        return 0.0 if batch is None else batch / latencies[batch.bit_length() - 1]

    assert rate(small) <= rate(large)  # a larger budget never picks a slower batch
    for budget, batch in zip(budgets, (small, large), strict=True):
        if batch is None:
            assert all(ms > budget for ms in latencies)
        else:
            assert latencies[batch.bit_length() - 1] <= budget
    assert isinstance(template, BatchPoint)


# --------------------------------------------------------------------------- properties: tuning


@settings(max_examples=40, deadline=None)
@given(
    times=st.lists(st.one_of(st.none(), st.sampled_from([1.0, 2.0, 3.0])), min_size=1, max_size=6),
    order=st.randoms(use_true_random=False),
)
def test_tuning_results_do_not_depend_on_the_order_of_the_cache(
    times: list[Any], order: Any
) -> None:
    import dataclasses

    replay = _replay(tuple(times))
    shuffled = list(replay.configs)
    order.shuffle(shuffled)
    other = dataclasses.replace(replay, configs=tuple(shuffled))
    assert replay.valid == other.valid
    assert [c.time_ms for c in replay.valid] == sorted(t for t in times if t is not None)
    assert sorted(c.describe() for c in replay.failed) == sorted(c.describe() for c in other.failed)
    if replay.valid:
        assert replay.best == other.best


@settings(max_examples=30, deadline=None)
@given(order=st.randoms(use_true_random=False))
def test_tune_params_checks_agree_under_permutation(order: Any) -> None:
    from labkit.kernels.autotune import _check_tune_args
    from labkit.kernels.tuning import SGEMM_TUNE_PARAMS

    def shuffled(params: dict[str, Any]) -> dict[str, Any]:
        keys = list(params)
        order.shuffle(keys)
        out = {}
        for key in keys:
            values = list(params[key])
            order.shuffle(values)
            out[key] = values
        return out

    good = {k: list(v) for k, v in SGEMM_TUNE_PARAMS.items()}
    checked = _check_tune_args(shuffled(good), SGEMM_TUNE_PARAMS)
    assert {k: sorted(v) for k, v in checked.items()} == {k: sorted(v) for k, v in good.items()}
    bad = {**good, "BK": [8, 0]}
    with pytest.raises(ValueError, match="BK"):
        _check_tune_args(shuffled(bad), SGEMM_TUNE_PARAMS)


# --------------------------------------------------------------------------- properties: dist


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 4096),
    size_bytes=st.integers(4, 2**34),
    samples_ms=st.lists(st.floats(1e-3, 1e4), min_size=1, max_size=5),
)
def test_busbw_is_algbw_times_2_n_minus_1_over_n(
    n: int, size_bytes: int, samples_ms: list[float]
) -> None:
    from labkit.scaling.results import AllreduceCost, bus_bandwidth_factor

    factor = bus_bandwidth_factor(n)
    assert factor == pytest.approx(2 * (n - 1) / n)
    assert 0 <= factor < 2 and (factor == 0) == (n == 1)
    cost = AllreduceCost.from_dict(
        {
            "world_size": n,
            "devices": ["cpu"] * n,
            "backend": "gloo",
            "reps": len(samples_ms),
            "rows": [{"size_bytes": size_bytes, "samples_ms": samples_ms}],
        }
    )
    (row,) = cost.rows
    assert row.algbw_gb_per_s == pytest.approx(size_bytes / (row.median_ms / 1e3) / 1e9)
    assert row.busbw_gb_per_s == pytest.approx(row.algbw_gb_per_s * 2 * (n - 1) / n)


@settings(max_examples=40, deadline=None)
@given(t1=st.floats(1e-3, 1e9), tn=st.floats(1e-3, 1e9), n=st.integers(1, 1024))
def test_scaling_efficiency_is_speedup_over_n(t1: float, tn: float, n: int) -> None:
    from labkit.check.scaling import efficiency

    assert efficiency(t1, tn, n) == pytest.approx(tn / t1 / n)
    assert efficiency(t1, t1 * n, n) == pytest.approx(1.0)
