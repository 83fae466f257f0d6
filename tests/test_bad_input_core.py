"""Bad input to the core modules: the values a person types are refused up front, naming the argument.

Issue 8 ("Bad input") as narrowed by issue 14: sizes, counts, durations,
fractions, seeds, names and device spellings given to the public functions
of timing, compare, device, gpu, the bandwidth probes and sweeps,
transfers, pipeline, parallel, amdahl, crossover, roofline, cpu, cstream,
pitfalls, plots, reference, doctor, notebook and the memory budget. Types a
type checker catches (a flag given as "yes", a label given as 5) and
labkit's own result objects are not policed, so they have no rows.

:data:`CASES` is the rejection table: one row per public function, with a
cheap valid call and, per parameter, a hypothesis strategy of values the
parameter must refuse. For every (function, parameter) pair, hypothesis
draws bad values and :func:`invalid_args.assert_rejects` checks that the
call raises TypeError or ValueError naming the parameter. ``guards`` replace
the function's first real work (an allocation, the timed function, a
subprocess) with one that fails the test, so a check that comes *after* the
work is caught too. A separate test runs each valid call once, so each
rejection is known to come from the bad value alone.

The second half holds property tests of the pure functions (statistics,
Amdahl's law, the roofline, formatters and their parsers). A hypothesis
failure here is a bug to fix in labkit, never a strategy to loosen.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, assume, given, settings
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

from labkit import notebook as nb
from labkit.bandwidth import cstream, overlap, pipeline, strided, transfers
from labkit.bandwidth import sizes as bw_sizes
from labkit.bandwidth import stream as bandwidth
from labkit.bandwidth import sweep as stream_sweep
from labkit.core import units as rates
from labkit.core.results import json_safe
from labkit.machine import cpu, frameworks, gpu, nvidia, reference
from labkit.machine import report as device
from labkit.machine.report import CPU_OR_CUDA, resolve_device
from labkit.parallelism import amdahl, crossover, threads
from labkit.parallelism import plots as parallelism_plots
from labkit.parallelism import sweep as parallel
from labkit.roofline import measure as roofline_measure
from labkit.roofline import model as roofline
from labkit.roofline import plots as roofline_plots
from labkit.timing import bench as timing
from labkit.timing import pitfalls, sync
from labkit.timing import plots as timing_plots

pytest.importorskip("torch")
from labkit.timing import compare  # noqa: E402

#: Examples per (function, parameter): enough to try each kind of bad value a few times,
#: few enough that the whole table runs in well under a minute on 2 busy cores.
EXAMPLES = 25
TABLE_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
PROPERTY_SETTINGS = settings(max_examples=100, deadline=None)

_TMP = Path(tempfile.mkdtemp(prefix="labkit-bad-input-"))
atexit.register(shutil.rmtree, _TMP, ignore_errors=True)


# --------------------------------------------------------------------------- strategies


def _no(*values: Any) -> Callable[[Any], bool]:
    """A filter that drops ``values`` (compared with ==, and bools by identity)."""

    def keep(x: Any) -> bool:
        for v in values:
            if x is v or (type(x) is type(v) and x == v):
                return False
        return True

    return keep


#: Not a positive integer: wrong types (floats included) and integers <= 0.
bad_positive_int = st.one_of(not_numbers, non_positive_ints, st.floats(allow_nan=False))
bad_optional_positive_int = bad_positive_int.filter(_no(None))
#: Not a budget in ms that may be 0 (warm-ups), or that must be > 0 (the measured budget).
negative_floats = st.floats(max_value=-1e-9, allow_infinity=False, allow_nan=False)
bad_ms_or_zero = st.one_of(not_numbers, non_finite, negative_floats)
bad_ms = st.one_of(bad_ms_or_zero, st.just(0), st.just(0.0))
#: Not a share of free memory in (0, 1].
bad_fraction = st.one_of(
    not_numbers, non_finite, st.floats(max_value=0.0), st.floats(min_value=1.0001, max_value=1e6)
)
#: Not a finite number (of any sign).
bad_real = st.one_of(not_numbers, non_finite)
#: Device strings nobody has; the ones that exist on some machine (tf, cupy) are left out.
no_devices = unknown_devices.filter(
    lambda s: (
        s.strip().lower() not in {"tf", "tensorflow", "cupy"}
        and not s.strip().lower().startswith("cupy")
    )
)
bad_device = st.one_of(no_devices, st.integers(), st.lists(st.integers(), max_size=1))
#: Sequences that are no list of positive sizes: not a sequence, empty, or holding bad sizes.
bad_sizes = st.one_of(
    st.integers(),
    st.text(min_size=1, max_size=4),
    st.just(()),
    st.lists(non_positive_ints, min_size=1, max_size=3),
    st.lists(st.text(max_size=2), min_size=1, max_size=2),
)


def bad_choice(choices: tuple[str, ...]) -> st.SearchStrategy[Any]:
    """Values that are not one of ``choices``: other strings, numbers, unhashable lists."""
    return st.one_of(
        st.text(max_size=8).filter(lambda s: s not in choices),
        st.integers(),
        st.none(),
        st.lists(st.sampled_from(choices), min_size=1, max_size=2),
    )


# --------------------------------------------------------------------------- fixtures for calls


class WorkDone(AssertionError):
    """A guarded step ran: the function did work before it rejected the bad argument."""


def _guard(*_args: Any, **_kwargs: Any) -> Any:
    raise WorkDone("the function did work before rejecting the bad argument")


def noop() -> None:
    return None


def _timing(label: str = "t", *samples: float) -> timing.Timing:
    return timing.Timing(samples or (1.0, 1.1, 1.2), label=label)


T = _timing()


def _scaling() -> amdahl.ThreadScaling:
    points = (amdahl.ScalingPoint(1, 1.0, 1.0, None, T), amdahl.ScalingPoint(2, 0.6, 1.67, 0.2, T))
    return amdahl.ThreadScaling(workload="w", points=points, serial_fraction=0.2)


def _roofline() -> roofline.Roofline:
    return roofline.Roofline("cpu", {"float32": 100.0}, 10.0)


def _ax() -> Any:
    return mock.MagicMock(name="Axes")


def _workdir() -> Path:
    return _TMP


# --------------------------------------------------------------------------- the table


@dataclass
class Case:
    """One public function: a cheap valid call and, per parameter, values it must refuse.

    ``valid`` maps parameter names to values or to zero-argument factories
    (``lazy``) for values that are costly to build at import. ``guards`` are
    ``mock.patch`` targets replaced by :func:`_guard` during the rejection
    tests. ``run_valid`` is False where the valid call needs a GPU, a
    compiler or TensorFlow, or has global side effects.
    """

    name: str
    fn: Callable[..., Any]
    valid: dict[str, Any]
    bad: dict[str, st.SearchStrategy[Any]]
    guards: tuple[str, ...] = ()
    run_valid: bool = True
    lazy: frozenset[str] = field(default_factory=frozenset)

    def kwargs(self) -> dict[str, Any]:
        return {k: (v() if k in self.lazy else v) for k, v in self.valid.items()}


def case(
    name: str,
    fn: Callable[..., Any],
    valid: dict[str, Any],
    bad: dict[str, Any],
    guards: tuple[str, ...] = (),
    run_valid: bool = True,
    lazy: tuple[str, ...] = (),
) -> Case:
    return Case(name, fn, valid, bad, guards, run_valid, frozenset(lazy))


FAST = {"warmup_ms": 0.0, "rep_ms": 0.05}

CASES: list[Case] = [
    # ----------------------------------------------------------------- timing
    case(
        "units.format_duration",
        rates.format_duration,
        {"ms": 1.5, "unit": None},
        {"unit": bad_choice(("ns", "µs", "ms", "s")).filter(_no(None))},
    ),
    case(
        "timing.Timing",
        timing.Timing,
        {
            "samples_ms": (1.0, 2.0),
            "label": None,
            "device": "cpu",
            "warmup_calls": 0,
            "first_call_ms": None,
            "method": "host clock",
        },
        {
            "samples_ms": st.one_of(
                st.just(()),
                st.lists(st.one_of(non_finite, negative_floats), min_size=1, max_size=3),
            ),
        },
    ),
    case(
        "timing.bench",
        timing.bench,
        {
            "fn": noop,
            **FAST,
            "min_reps": 1,
            "max_reps": 3,
            "device": None,
            "flush_l2": False,
            "grad_to_none": None,
            "label": None,
            "warn": False,
        },
        {
            "fn": not_callables,  # bench(f(x)) instead of bench(f, x)
            "warmup_ms": bad_ms_or_zero,
            "rep_ms": bad_ms,
            "min_reps": bad_positive_int,
            "max_reps": st.one_of(not_numbers, non_positive_ints),
            "device": bad_device,
        },
    ),
    # ----------------------------------------------------------------- compare
    case(
        "compare.compare",
        compare.compare,
        {"timings": [T], "baseline": None},
        {
            "timings": st.just([]),
            "baseline": st.integers().filter(lambda i: i not in (0, -1)),
        },
    ),
    # ----------------------------------------------------------------- device, gpu
    case(
        "device.device_report",
        device.device_report,
        {"frameworks": ()},
        {
            "frameworks": st.lists(
                st.sampled_from(["jax", "mxnet", "Torch"]), min_size=1, max_size=2
            )
        },
    ),
    case(
        "device.pick_device",
        device.pick_device,
        {"framework": "torch"},
        {"framework": bad_choice(device.PICKABLE)},
    ),
    case(
        "gpu.require_gpu",
        gpu.require_gpu,
        {"what": "the demo", "reference": None},
        {
            "reference": st.one_of(
                st.integers(), st.text().filter(lambda s: not re.fullmatch(r"[A-Za-z0-9_-]+", s))
            ),
        },
    ),
    case(
        "gpu.no_gpu_lines",
        gpu.no_gpu_lines,
        {"what": "the demo", "reference": None},
        {
            "reference": st.one_of(st.integers(), st.just("../x"), st.just("a b")),
        },
    ),
    # ----------------------------------------------------------------- bandwidth
    case(
        "bandwidth.stream_bytes",
        bandwidth.stream_bytes,
        {"kernel": "triad", "n_elements": 1000, "itemsize_bytes": 8},
        {
            "kernel": bad_choice(bandwidth.KERNELS),
            "n_elements": bad_positive_int,
            "itemsize_bytes": bad_positive_int,
        },
    ),
    case(
        "report.resolve_device",
        lambda device: resolve_device(device, kinds=CPU_OR_CUDA),
        {"device": "cpu"},
        {"device": st.one_of(bad_device, unknown_devices, st.just("mps"))},
    ),
    case("bw_sizes.cache_sizes", bw_sizes.cache_sizes, {"device": "cpu"}, {"device": bad_device}),
    case(
        "bw_sizes.dram_bytes_per_array",
        bw_sizes.dram_bytes_per_array,
        {"device": "cpu"},
        {"device": bad_device},
    ),
    case(
        "bw_sizes.default_sizes",
        bw_sizes.default_sizes,
        {"device": "cpu", "points_per_decade": 4},
        {"device": bad_device, "points_per_decade": bad_positive_int},
    ),
    case(
        "bw_sizes.log_sizes",
        bw_sizes.log_sizes,
        {"low_bytes": 4096, "high_bytes": 2**20, "points_per_decade": 4},
        {
            "low_bytes": bad_positive_int,
            "high_bytes": st.one_of(bad_positive_int, st.integers(1, 4095)),
            "points_per_decade": bad_positive_int,
        },
    ),
    case(
        "bandwidth.stream_kernel",
        bandwidth.stream_kernel,
        {
            "kernel": "copy",
            "bytes_per_array": 4096,
            "device": "cpu",
            "fraction": 0.25,
            **FAST,
            "min_reps": 1,
        },
        {
            "kernel": bad_choice(bandwidth.KERNELS),
            "bytes_per_array": st.one_of(bad_optional_positive_int, impossible_bytes),
            "device": bad_device,
            "fraction": bad_fraction,
            "warmup_ms": bad_ms_or_zero,
            "rep_ms": bad_ms,
            "min_reps": bad_positive_int,
        },
        guards=("labkit.bandwidth.stream.allocate_arrays",),
    ),
    case(
        "bandwidth.peak_bandwidth",
        bandwidth.peak_bandwidth,
        {
            "device": "cpu",
            "fraction": 0.25,
            "bytes_per_array": 4096,
            "kernels": ("copy",),
            **FAST,
            "min_reps": 1,
        },
        {
            "device": bad_device,
            "fraction": bad_fraction,
            "bytes_per_array": st.one_of(bad_optional_positive_int, impossible_bytes),
            "kernels": st.just(()),
            "warmup_ms": bad_ms_or_zero,
            "rep_ms": bad_ms,
            "min_reps": bad_positive_int,
        },
        guards=("labkit.bandwidth.stream.allocate_arrays",),
    ),
    case(
        "stream_sweep.stream_sweep",
        stream_sweep.stream_sweep,
        {
            "kernels": ("copy",),
            "sizes_bytes": (4096,),
            "device": "cpu",
            "fraction": 0.25,
            "points_per_decade": 4,
            **FAST,
            "min_reps": 1,
            "show_progress": False,
        },
        {
            "kernels": st.one_of(st.just(()), st.lists(st.integers(), min_size=1, max_size=2)),
            "sizes_bytes": st.one_of(bad_sizes, st.lists(impossible_bytes, min_size=1, max_size=2)),
            "device": bad_device,
            "fraction": bad_fraction,
            "points_per_decade": bad_positive_int,
            "warmup_ms": bad_ms_or_zero,
            "rep_ms": bad_ms,
            "min_reps": bad_positive_int,
        },
        guards=("labkit.bandwidth.stream.allocate_arrays",),
    ),
    case(
        "strided.strided_read",
        strided.strided_read,
        {
            "strides": (1, 2),
            "n_elements": 1024,
            "device": "cpu",
            "dtype": "float32",
            "fraction": 0.25,
            "flush_cache": False,
            "rep_ms": 0.05,
            "max_reps": 3,
            "show_progress": False,
        },
        {
            "strides": bad_sizes,
            "n_elements": st.one_of(bad_optional_positive_int, impossible_bytes),
            "device": bad_device,
            "dtype": st.one_of(unsupported_dtypes, st.integers(), st.lists(st.text(), max_size=1)),
            "fraction": bad_fraction,
            "rep_ms": bad_ms,
            "max_reps": st.one_of(not_numbers, st.integers(max_value=2)),
        },
        guards=("labkit.bandwidth.strided._allocate",),
    ),
    # ----------------------------------------------------------------- transfers (need a GPU)
    case(
        "transfers.theoretical_peak_gb_per_s",
        transfers.theoretical_peak_gb_per_s,
        {"device": "cuda"},
        {"device": st.one_of(bad_device, st.just("cpu"))},
        run_valid=False,
    ),
    case(
        "transfers.device_copy",
        transfers.device_copy,
        {"bytes_per_array": 4096, "device": "cuda", "fraction": 0.25, **FAST, "min_reps": 1},
        {
            "bytes_per_array": bad_optional_positive_int,
            "device": st.one_of(bad_device, st.just("cpu")),
            "fraction": bad_fraction,
            "warmup_ms": bad_ms_or_zero,
            "rep_ms": bad_ms,
            "min_reps": bad_positive_int,
        },
        run_valid=False,
    ),
    case(
        "transfers.host_device_sweep",
        transfers.host_device_sweep,
        {
            "sizes_bytes": (4096,),
            "device": "cuda",
            "directions": ("h2d",),
            "host_memory": ("pinned",),
            "fraction": 0.25,
            **FAST,
            "show_progress": False,
        },
        {
            "sizes_bytes": bad_sizes,
            "device": st.one_of(bad_device, st.just("cpu")),
            "fraction": bad_fraction,
            "warmup_ms": bad_ms_or_zero,
            "rep_ms": bad_ms,
        },
        run_valid=False,
    ),
    case(
        "overlap.copy_compute_overlap",
        overlap.copy_compute_overlap,
        {
            "n_chunks": 2,
            "chunk_bytes": 4096,
            "device": "cuda",
            "compute_repeats": None,
            "fraction": 0.25,
            "rep_ms": 0.05,
        },
        {
            "n_chunks": st.one_of(not_numbers, st.integers(max_value=1)),
            "chunk_bytes": st.one_of(not_numbers, st.integers(max_value=4095)),
            "device": st.one_of(bad_device, st.just("cpu")),
            "compute_repeats": bad_optional_positive_int,
            "fraction": bad_fraction,
            "rep_ms": bad_ms,
        },
        run_valid=False,
    ),
    # ----------------------------------------------------------------- pipeline
    case(
        "pipeline.pipeline_breakdown",
        pipeline.pipeline_breakdown,
        {
            "n_bytes": 4096,
            "op": "scale",
            "device": "cpu",
            "pinned": False,
            "fraction": 0.25,
            **FAST,
        },
        {
            "n_bytes": st.one_of(not_numbers, st.integers(max_value=3), impossible_bytes),
            "op": bad_choice(pipeline.OPS),
            "device": bad_device,
            "fraction": bad_fraction,
            "warmup_ms": bad_ms_or_zero,
            "rep_ms": bad_ms,
        },
        guards=("torch.ones", "torch.empty"),
    ),
    # ----------------------------------------------------------------- parallel
    case("threads.torch_threads", threads.torch_threads, {"n": 1}, {"n": bad_positive_int}),
    case(
        "parallel.backend_label",
        parallel.backend_label,
        {"backend": "numpy"},
        {"backend": bad_choice(parallel.BACKENDS)},
    ),
    case(
        "parallel.sweep",
        parallel.sweep,
        {
            "op": "add",
            "sizes": (4,),
            "backends": ("numpy",),
            "dtype": "float32",
            **FAST,
            "python_max_size": None,
            "python_max_call_ms": 1000.0,
            "show_progress": False,
        },
        {
            "op": bad_choice(parallel.OPS),
            "sizes": bad_sizes,
            "backends": st.just(()),
            "dtype": st.one_of(unsupported_dtypes, st.lists(st.text(), max_size=1)),
            "warmup_ms": bad_ms_or_zero,
            "rep_ms": bad_ms,
            "python_max_size": bad_optional_positive_int,
            "python_max_call_ms": bad_ms,
        },
        guards=("labkit.parallelism.sweep._make_case",),
    ),
    case(
        "parallel.sweep_add",
        parallel.sweep_add,
        {"sizes": (4,), "backends": ("numpy",), **FAST, "show_progress": False},
        {"sizes": bad_sizes, "dtype": unsupported_dtypes},
        guards=("labkit.parallelism.sweep._make_case",),
    ),
    case(
        "parallel.sweep_matmul",
        parallel.sweep_matmul,
        {"sizes": (2,), "backends": ("numpy",), **FAST, "show_progress": False},
        {"sizes": bad_sizes, "dtype": unsupported_dtypes},
        guards=("labkit.parallelism.sweep._make_case",),
    ),
    # ----------------------------------------------------------------- amdahl, crossover
    case(
        "amdahl.amdahl_speedup",
        amdahl.amdahl_speedup,
        {"serial_fraction": 0.1, "n": 4},
        {
            "serial_fraction": st.one_of(
                bad_real, st.floats(min_value=1.0001, max_value=1e9), negative_floats
            ),
            "n": st.one_of(bad_real, st.floats(max_value=0.999, allow_nan=False)),
        },
    ),
    case(
        "amdahl.karp_flatt",
        amdahl.karp_flatt,
        {"speedup": 1.5, "n": 2},
        {
            "speedup": st.one_of(bad_real, st.floats(max_value=0.0)),
            "n": st.one_of(bad_real, st.floats(max_value=1.0, allow_nan=False)),
        },
    ),
    case(
        "amdahl.fit_serial_fraction",
        amdahl.fit_serial_fraction,
        {"threads": [1, 2], "speedups": [1.0, 1.6]},
        {
            "threads": st.just([1, 1]),
        },
    ),
    case(
        "amdahl.default_thread_counts",
        amdahl.default_thread_counts,
        {"max_threads": 4},
        {"max_threads": bad_optional_positive_int},
    ),
    case(
        "amdahl.measure_thread_scaling",
        amdahl.measure_thread_scaling,
        {
            "workload": "matmul",
            "threads": (1,),
            "matmul_size": 8,
            "python_steps": 10,
            "rounds": 1,
            **FAST,
            "show_progress": False,
        },
        {
            "workload": st.one_of(
                st.text(max_size=8).filter(lambda s: s not in amdahl.WORKLOADS),
                st.integers(),
                st.none(),
                st.lists(st.text(), max_size=1),
            ),
            "threads": st.one_of(
                st.integers(),
                st.text(min_size=1),
                st.just(()),
                st.lists(st.integers(2, 64), min_size=1, max_size=3),
                st.lists(non_positive_ints, min_size=1, max_size=2),
            ),
            "matmul_size": st.one_of(bad_positive_int, st.integers(2**21, 2**30)),
            "python_steps": bad_positive_int,
            "rounds": bad_positive_int,
            "warmup_ms": bad_ms_or_zero,
            "rep_ms": bad_ms,
        },
        guards=("labkit.parallelism.amdahl._workload",),
    ),
    case(
        "crossover.crossover_size",
        crossover.crossover_size,
        {"sizes": [1, 100], "slow_ms": [1.0, 100.0], "fast_ms": [10.0, 10.0]},
        {
            "sizes": st.one_of(st.just([]), st.just([2, 1])),
            "slow_ms": st.one_of(
                st.just([1.0]),
                st.lists(st.one_of(non_finite, st.floats(max_value=0.0)), min_size=2, max_size=2),
            ),
            "fast_ms": st.just([1.0, 2.0, 3.0]),
        },
    ),
    case(
        "crossover.launch_overhead",
        crossover.launch_overhead,
        {"device": "cuda", **FAST},
        {
            "device": st.one_of(bad_device, st.just("cpu")),
            "warmup_ms": bad_ms_or_zero,
            "rep_ms": bad_ms,
        },
        run_valid=False,
    ),
    # ----------------------------------------------------------------- roofline
    case(
        "roofline.dtype_bytes",
        roofline.dtype_bytes,
        {"dtype": "float32"},
        {"dtype": st.one_of(unsupported_dtypes, st.integers(), st.none())},
    ),
    case(
        "roofline.add_cost",
        roofline.add_cost,
        {"n": 10, "dtype": "float32", "name": None},
        {
            "n": bad_positive_int,
            "dtype": unsupported_dtypes,
        },
    ),
    case(
        "roofline.sum_cost",
        roofline.sum_cost,
        {"n": 10, "dtype": "float32", "name": None},
        {
            "n": bad_positive_int,
            "dtype": unsupported_dtypes,
        },
    ),
    case(
        "roofline.matmul_cost",
        roofline.matmul_cost,
        {"m": 2, "n": 3, "k": 4, "dtype": "float32", "name": None},
        {
            "m": bad_positive_int,
            "n": bad_positive_int,
            "k": bad_positive_int,
            "dtype": unsupported_dtypes,
        },
    ),
    case(
        "roofline.conv2d_output_size",
        roofline.conv2d_output_size,
        {"H": 8, "W": 8, "R": 3, "S": 3, "stride": 1, "padding": 0},
        {
            "H": bad_positive_int,
            "W": bad_positive_int,
            "R": st.one_of(bad_positive_int, st.integers(9, 10**6)),
            "S": st.one_of(bad_positive_int, st.integers(9, 10**6)),
            "stride": bad_positive_int,
            "padding": st.one_of(not_numbers, st.integers(max_value=-1), st.floats()),
        },
    ),
    case(
        "roofline.conv2d_cost",
        roofline.conv2d_cost,
        {"N": 1, "C": 2, "H": 8, "W": 8, "K": 2, "R": 3, "S": 3},
        {
            "N": bad_positive_int,
            "C": bad_positive_int,
            "K": bad_positive_int,
            "H": bad_positive_int,
            "R": st.integers(9, 1000),
            "dtype": unsupported_dtypes,
        },
    ),
    case(
        "roofline.Roofline.attainable_gflop_per_s",
        _roofline().attainable_gflop_per_s,
        {"ai": 1.0, "dtype": None},
        {
            "ai": st.one_of(bad_real, st.floats(max_value=0.0)),
            "dtype": st.one_of(unsupported_dtypes, st.just("float64"), st.lists(st.text())),
        },
    ),
    case(
        "roofline.predict_bound",
        roofline.predict_bound,
        {"op_cost": roofline.add_cost(10), "roofline": _roofline(), "dtype": None},
        {
            "dtype": st.one_of(unsupported_dtypes, st.lists(st.text())),
        },
    ),
    case(
        "roofline_measure.measure_peak_compute",
        roofline_measure.measure_peak_compute,
        {
            "device": "cpu",
            "dtypes": ("float32",),
            "sizes": (8,),
            **FAST,
            "max_call_ms": 200.0,
            "show_progress": False,
        },
        {
            "device": bad_device,
            "dtypes": st.one_of(
                st.text(min_size=1),
                st.just(()),
                st.just(["tf32"]),
                st.lists(unsupported_dtypes, min_size=1, max_size=2),
            ),
            "sizes": bad_sizes,
            "warmup_ms": bad_ms_or_zero,
            "rep_ms": bad_ms,
            "max_call_ms": bad_ms,
        },
        guards=("labkit.roofline.measure._random_pair",),
    ),
    case(
        "roofline_measure.measure_op",
        roofline_measure.measure_op,
        {"op": roofline.add_cost(16), "device": "cpu", "tf32": False, **FAST, "flush_cache": False},
        {
            "device": bad_device,
            "warmup_ms": bad_ms_or_zero,
            "rep_ms": bad_ms,
        },
        guards=("labkit.roofline.measure._build",),
    ),
    # ----------------------------------------------------------------- rates
    # ----------------------------------------------------------------- cpu, cstream, nvidia
    case(
        "cstream.CStream",
        cstream.CStream,
        {"exe": "/nonexistent/stream", "n_elements": 4, "timeout_s": 1.0},
        {
            "n_elements": bad_positive_int,
            "timeout_s": st.one_of(bad_real, st.floats(max_value=0.0)),
        },
        guards=("labkit.bandwidth.cstream.subprocess.Popen",),
        run_valid=False,
    ),
    # ----------------------------------------------------------------- sync
    case(
        "sync.synchronizer_for",
        sync.synchronizer_for,
        {"device": "cpu"},
        {"device": st.one_of(bad_device, st.none())},
    ),
    case(
        "sync.group_for",
        sync.group_for,
        {"device": None, "values": ()},
        {
            "device": bad_device,
        },
    ),
    # ----------------------------------------------------------------- pitfalls
    case(
        "pitfalls.naive_timing",
        pitfalls.naive_timing,
        {"fn": noop, "reps": 1, **FAST, "device": None, "label": None, "warn": False},
        {
            "fn": not_callables,
            "reps": bad_positive_int,
            "warmup_ms": bad_ms_or_zero,
            "rep_ms": bad_ms,
            "device": bad_device,
        },
        guards=("labkit.timing.pitfalls._sync.HostSync.synchronize",),
    ),
    case(
        "pitfalls.matmul_workload",
        pitfalls.matmul_workload,
        {"n": 4, "device": "cpu"},
        {
            "n": st.one_of(not_numbers, st.integers(max_value=0), st.integers(min_value=32769)),
            "device": st.one_of(
                bad_device,
                st.sampled_from(["cuda:x", "gpu", "hip", "xla", "ipu", "hpu", "lazy", "vulkan"]),
            ),
        },
    ),
    # ----------------------------------------------------------------- plots
    case(
        "plots.plot_amdahl",
        parallelism_plots.plot_amdahl,
        {"scaling": _scaling, "ax": _ax, "max_threads": 8},
        {
            "max_threads": st.integers(max_value=1),
        },
        lazy=("scaling", "ax"),
    ),
    case(
        "plots.plot_roofline",
        roofline_plots.plot_roofline,
        {"roofline": _roofline, "points": (("op", 1.0, 5.0),), "ax": _ax},
        {
            "points": st.tuples(st.tuples(st.just("a"), st.floats(max_value=0.0), st.just(1.0))),
        },
        lazy=("roofline", "ax"),
    ),
    case(
        "plots.plot_timings",
        timing_plots.plot_timings,
        {"timings": [T], "ax": _ax, "title": "t"},
        {
            "timings": st.just([]),
        },
        lazy=("ax",),
    ),
    # ----------------------------------------------------------------- reference
    case(
        "reference.check_name",
        reference.check_name,
        {"name": "naive_timing"},
        {
            "name": st.one_of(
                st.none(),
                st.integers(),
                st.text().filter(lambda s: not re.fullmatch(r"[A-Za-z0-9_-]+", s)),
            )
        },
    ),
    case(
        "reference.record_command",
        reference.record_command,
        {"name": "x"},
        {"name": st.one_of(st.integers(), st.just("a/b"), st.just(""))},
    ),
    case(
        "reference.record",
        reference.record,
        {
            "name": "bad_input_test",
            "results": {"summary": ["a"]},
            "gpu_name": "G",
            "directory": _workdir,
            "driver": None,
            "cuda": None,
            "torch": None,
            "recorded": None,
        },
        {
            "name": st.one_of(st.integers(), st.just("../x")),
            "results": st.one_of(st.just({"x": math.nan}), st.just({"x": object()})),
        },
        guards=("labkit.machine.reference.tempfile.mkstemp",),
        lazy=("directory",),
    ),
    case(
        "reference.load",
        reference.load,
        {"name": "missing_one", "directory": _workdir},
        {
            "name": st.one_of(st.integers(), st.just("a.b")),
        },
        lazy=("directory",),
    ),
    # ----------------------------------------------------------------- frameworks, doctor, diagnose
    case(
        "frameworks.probe_framework",
        frameworks.probe_framework,
        {"name": "torch", "driver": None},
        {
            "name": bad_choice(frameworks.FRAMEWORKS),
        },
        guards=("labkit.machine.frameworks.distributions_of",),
    ),
    # ----------------------------------------------------------------- notebook, progress, _optional
    case(
        "notebook.setup",
        nb.setup,
        {"seed": 0},
        {
            "seed": st.one_of(
                st.integers(max_value=-1), st.floats(), st.text(), st.booleans(), st.none()
            )
        },
        guards=("labkit.notebook.random.seed",),
        run_valid=False,
    ),
]

PAIRS = [pytest.param(c, p, id=f"{c.name}-{p}") for c in CASES for p in c.bad]


@contextlib.contextmanager
def _guarded(targets: tuple[str, ...]) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for target in targets:
            stack.enter_context(mock.patch(target, _guard))
        yield


#: Functions that return a context manager: it is entered and left too.
CONTEXT_MANAGERS = ("threads.torch_threads", "roofline_measure.tf32_mode")


def _call(c: Case, kwargs: dict[str, Any]) -> Any:
    """Call ``c.fn``; a context manager (torch_threads, tf32_mode) is entered and left too."""
    result = c.fn(**kwargs)
    if c.name in CONTEXT_MANAGERS:
        with result:
            pass
    if c.name == "progress.progress":  # its items
        list(result)
    return result


def test_every_public_function_in_scope_has_a_row() -> None:
    """The table covers each public function the notebooks and the docs use, per module."""
    names = {c.name for c in CASES}
    wanted = {
        "timing.bench",
        "timing.Timing",
        "units.format_duration",
        "compare.compare",
        "device.device_report",
        "device.pick_device",
        "gpu.require_gpu",
        "bandwidth.stream_kernel",
        "bandwidth.peak_bandwidth",
        "stream_sweep.stream_sweep",
        "strided.strided_read",
        "transfers.device_copy",
        "transfers.host_device_sweep",
        "overlap.copy_compute_overlap",
        "pipeline.pipeline_breakdown",
        "parallel.sweep_add",
        "parallel.sweep_matmul",
        "amdahl.measure_thread_scaling",
        "crossover.launch_overhead",
        "roofline.matmul_cost",
        "roofline_measure.measure_op",
        "pitfalls.naive_timing",
        "pitfalls.matmul_workload",
        "plots.plot_timings",
        "plots.plot_roofline",
        "reference.record",
        "notebook.setup",
    }
    assert wanted <= names, sorted(wanted - names)
    assert len(PAIRS) > 150


@pytest.mark.parametrize("c", [pytest.param(c, id=c.name) for c in CASES if c.run_valid])
def test_the_valid_call_of_each_row_works(c: Case, capsys: pytest.CaptureFixture[str]) -> None:
    """Each row's valid call succeeds, so a rejection below is caused by the bad value alone."""
    _call(c, c.kwargs())
    capsys.readouterr()


@pytest.mark.parametrize(("c", "param"), PAIRS)
@TABLE_SETTINGS
@given(data=st.data())
def test_bad_values_are_rejected_naming_the_argument(c: Case, param: str, data: Any) -> None:
    bad = data.draw(c.bad[param], label=param)
    kwargs = {**c.kwargs(), param: bad}
    if c.name in ("timing.bench", "pitfalls.naive_timing") and param != "fn":
        kwargs["fn"] = _guard  # the timed function must not run before the check
    with _guarded(c.guards), contextlib.redirect_stdout(None):
        assert_rejects(lambda: _call(c, kwargs), param)


# --------------------------------------------------------------------------- properties: timing

durations = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)
sample_lists = st.lists(durations, min_size=1, max_size=50)


@PROPERTY_SETTINGS
@given(samples=sample_lists, data=st.data())
def test_timing_statistics_are_ordered_and_order_independent(
    samples: list[float], data: Any
) -> None:
    t = timing.Timing(tuple(samples))
    assert t.min_ms <= t.q1_ms <= t.median_ms <= t.q3_ms <= t.max_ms
    assert t.iqr_ms >= 0 and t.relative_spread >= 0
    assert t.min_ms <= t.mean_ms <= t.max_ms
    shuffled = data.draw(st.permutations(samples))
    u = timing.Timing(tuple(shuffled))
    for name in ("median_ms", "q1_ms", "q3_ms", "iqr_ms", "min_ms", "max_ms"):
        assert getattr(u, name) == getattr(t, name)
    assert math.isclose(u.mean_ms, t.mean_ms, rel_tol=1e-12, abs_tol=1e-300)


@PROPERTY_SETTINGS
@given(samples=sample_lists, q1=st.floats(0, 1), q2=st.floats(0, 1))
def test_quantile_is_monotone_in_q_and_between_the_samples(samples, q1, q2) -> None:
    ordered = sorted(samples)
    lo, hi = sorted((q1, q2))
    a, b = timing.quantile(ordered, lo), timing.quantile(ordered, hi)
    assert ordered[0] <= a <= b <= ordered[-1]


@PROPERTY_SETTINGS
@given(ms=st.floats(min_value=1e-9, max_value=1e9))
def test_format_duration_round_trips_within_three_digits(ms: float) -> None:
    text = rates.format_duration(ms)
    number, unit = text.split(" ")
    scale = dict(rates._UNITS_MS)[unit]
    assert unit == rates.duration_unit(ms)
    assert math.isclose(float(number) * scale, ms, rel_tol=5e-3)
    assert len(number.replace(".", "").replace("-", "").lstrip("0")) >= 3 or float(number) >= 100
    if unit != "s":
        assert float(number) < 1000  # the unit is the largest that keeps the number >= 1


@PROPERTY_SETTINGS
@given(ms=st.floats(min_value=1e-6, max_value=1e6), unit=st.sampled_from(["ns", "µs", "ms", "s"]))
def test_format_duration_in_a_fixed_unit_round_trips(ms: float, unit: str) -> None:
    number, shown = rates.format_duration(ms, unit).split(" ")
    assert shown == unit
    scale = dict(rates._UNITS_MS)[unit]
    assert math.isclose(float(number) * scale, ms, rel_tol=5e-3, abs_tol=scale * 1e-2)


# --------------------------------------------------------------------------- properties: compare


@PROPERTY_SETTINGS
@given(
    medians=st.lists(st.floats(min_value=1e-6, max_value=1e6), min_size=1, max_size=6),
    data=st.data(),
)
def test_compare_speedups_are_baseline_over_row(medians: list[float], data: Any) -> None:
    timings = [timing.Timing((m,), label=f"r{i}") for i, m in enumerate(medians)]
    base = data.draw(st.integers(0, len(medians) - 1))
    table = compare.compare(timings, baseline=base)
    assert table.rows[base].speedup == 1.0
    for row, m in zip(table.rows, medians, strict=True):
        assert math.isclose(row.speedup, medians[base] / m, rel_tol=1e-12)
    assert compare.compare(timings, baseline=f"r{base}").baseline_index == base


@PROPERTY_SETTINGS
@given(speedup=st.floats(min_value=0.0, max_value=1e12))
def test_format_speedup_reads_back(speedup: float) -> None:
    text = rates.format_speedup(speedup)
    assert text.endswith("×")
    assert math.isclose(float(text[:-1]), speedup, rel_tol=1e-2, abs_tol=0.005)


# --------------------------------------------------------------------------- properties: amdahl

fractions = st.floats(min_value=0.0, max_value=1.0)
workers = st.floats(min_value=1.0, max_value=1e6)


@PROPERTY_SETTINGS
@given(f=fractions, n1=workers, n2=workers)
def test_amdahl_speedup_is_monotone_and_bounded(f: float, n1: float, n2: float) -> None:
    lo, hi = sorted((n1, n2))
    s_lo, s_hi = amdahl.amdahl_speedup(f, lo), amdahl.amdahl_speedup(f, hi)
    assert 1.0 - 1e-12 <= s_lo <= s_hi * (1 + 1e-12)
    assert s_hi <= hi * (1 + 1e-12)
    if f > 0:
        assert s_hi <= (1.0 / f) * (1 + 1e-12)
    assert amdahl.amdahl_speedup(f, 1) == pytest.approx(1.0)


@PROPERTY_SETTINGS
@given(f=st.floats(min_value=0.0, max_value=1.0), n=st.floats(min_value=1.5, max_value=1e4))
def test_karp_flatt_inverts_amdahl(f: float, n: float) -> None:
    assert amdahl.karp_flatt(amdahl.amdahl_speedup(f, n), n) == pytest.approx(f, abs=1e-9)


@PROPERTY_SETTINGS
@given(f=fractions, counts=st.lists(st.integers(2, 256), min_size=1, max_size=6, unique=True))
def test_fit_serial_fraction_recovers_an_exact_amdahl_fraction(f: float, counts: list[int]) -> None:
    threads = [1, *counts]
    speedups = [amdahl.amdahl_speedup(f, n) for n in threads]
    assert amdahl.fit_serial_fraction(threads, speedups) == pytest.approx(f, abs=1e-9)


@PROPERTY_SETTINGS
@given(max_threads=st.integers(1, 4096))
def test_default_thread_counts_start_at_one_and_end_at_the_count(max_threads: int) -> None:
    counts = amdahl.default_thread_counts(max_threads)
    assert counts[0] == 1 and counts[-1] == max_threads
    assert list(counts) == sorted(set(counts))


# --------------------------------------------------------------------------- properties: crossover

increasing_sizes = st.lists(
    st.floats(min_value=1e-3, max_value=1e9), min_size=2, max_size=8, unique=True
).map(sorted)
times = st.floats(min_value=1e-6, max_value=1e6)


@PROPERTY_SETTINGS
@given(data=st.data(), sizes=increasing_sizes)
def test_crossover_lies_where_fast_starts_to_win_for_good(data: Any, sizes: list[float]) -> None:
    slow = data.draw(st.lists(times, min_size=len(sizes), max_size=len(sizes)))
    fast = data.draw(st.lists(times, min_size=len(sizes), max_size=len(sizes)))
    found = crossover.crossover_size(sizes, slow, fast)
    wins = [s / f > 1 for s, f in zip(slow, fast, strict=True)]
    if not wins[-1]:
        assert found is None
        return
    first = len(wins) - 1
    while first > 0 and wins[first - 1]:
        first -= 1
    assert found is not None
    if first == 0:
        assert found == sizes[0]
    else:
        assert sizes[first - 1] * (1 - 1e-9) <= found <= sizes[first] * (1 + 1e-9)


@PROPERTY_SETTINGS
@given(scale=st.floats(min_value=1e-3, max_value=1e3))
def test_crossover_scales_with_the_sizes(scale: float) -> None:
    sizes, slow, fast = [1.0, 100.0], [1.0, 100.0], [10.0, 10.0]
    base = crossover.crossover_size(sizes, slow, fast)
    scaled = crossover.crossover_size([s * scale for s in sizes], slow, fast)
    assert base == pytest.approx(10.0) and scaled == pytest.approx(10.0 * scale)


# --------------------------------------------------------------------------- properties: roofline

peaks = st.floats(min_value=1e-3, max_value=1e7)


@PROPERTY_SETTINGS
@given(
    peak=peaks,
    bw=peaks,
    ai=st.floats(min_value=1e-6, max_value=1e6),
    ai2=st.floats(min_value=1e-6, max_value=1e6),
)
def test_attainable_is_the_lower_roof_and_grows_with_intensity(peak, bw, ai, ai2) -> None:
    roof = roofline.Roofline("cpu", {"float32": peak}, bw)
    assert roof.attainable_gflop_per_s(ai) == min(peak, ai * bw)
    lo, hi = sorted((ai, ai2))
    assert roof.attainable_gflop_per_s(lo) <= roof.attainable_gflop_per_s(hi)
    assert roof.ridge_point() == pytest.approx(peak / bw)


@PROPERTY_SETTINGS
@given(
    m=st.integers(1, 4096),
    n=st.integers(1, 4096),
    k=st.integers(1, 4096),
    dtype=st.sampled_from(list(roofline.DTYPE_BYTES)),
    peak=peaks,
    bw=peaks,
)
def test_matmul_cost_and_its_bound(m, n, k, dtype, peak, bw) -> None:
    op = roofline.matmul_cost(m, n, k, dtype)
    size = roofline.DTYPE_BYTES[dtype]
    assert op.flops == 2 * m * n * k and op.bytes == (m * k + k * n + m * n) * size
    roof = roofline.Roofline("cpu", {dtype: peak}, bw)
    expected = "memory-bound" if op.arithmetic_intensity < peak / bw else "compute-bound"
    assert roofline.predict_bound(op, roof) == roof.bound(op)
    if not math.isclose(op.arithmetic_intensity, peak / bw, rel_tol=1e-9):
        assert roof.bound(op) == expected


@PROPERTY_SETTINGS
@given(
    H=st.integers(1, 512),
    W=st.integers(1, 512),
    R=st.integers(1, 9),
    S=st.integers(1, 9),
    stride=st.integers(1, 4),
    padding=st.integers(0, 4),
)
def test_conv2d_output_size_matches_the_formula(H, W, R, S, stride, padding) -> None:
    assume(R <= H + 2 * padding and S <= W + 2 * padding)
    ho, wo = roofline.conv2d_output_size(H, W, R, S, stride, padding)
    assert (ho, wo) == ((H + 2 * padding - R) // stride + 1, (W + 2 * padding - S) // stride + 1)
    cost = roofline.conv2d_cost(1, 2, H, W, 3, R, S, stride, padding)
    assert cost.flops == 2 * 1 * 3 * ho * wo * 2 * R * S


# --------------------------------------------------------------------------- properties: formatters


@PROPERTY_SETTINGS
@given(value=st.floats(allow_nan=False, allow_infinity=False).filter(lambda v: v != 0))
def test_three_digits_keeps_three_significant_digits(value: float) -> None:
    text = rates.three_digits(value)
    assert "e" not in text.lower()
    assert math.isclose(float(text), value, rel_tol=5e-3)
    digits = text.lstrip("-").replace(".", "").lstrip("0")
    assert len(digits) >= 3


@PROPERTY_SETTINGS
@given(per_s=st.floats(min_value=0.0, max_value=1e18))
def test_format_rate_reads_back(per_s: float) -> None:
    text = rates.format_rate(per_s, "elements/s")
    parts = text.split(" ")
    prefix = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}[
        parts[1] if len(parts) == 3 else ""
    ]
    assert parts[-1] == "elements/s"
    assert math.isclose(float(parts[0]) * prefix, per_s, rel_tol=5e-3, abs_tol=1e-300)


@PROPERTY_SETTINGS
@given(value=st.floats(min_value=-1e15, max_value=1e15))
def test_round3_is_within_half_a_percent(value: float) -> None:
    assert math.isclose(rates.round3(value), value, rel_tol=5e-3, abs_tol=0.5)


@PROPERTY_SETTINGS
@given(k=st.integers(1, 1023), unit=st.integers(0, 3))
def test_format_bytes_and_parse_cache_size_round_trip(k: int, unit: int) -> None:
    n = k * 1024**unit
    assert cpu.parse_cache_size(rates.format_bytes(n)) == n


@PROPERTY_SETTINGS
@given(n=st.integers(0, 2**60))
def test_format_bytes_reads_back_within_three_digits(n: int) -> None:
    number, unit = rates.format_bytes(n).split(" ")
    scale = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}[unit]
    assert math.isclose(float(number) * scale, n, rel_tol=5e-3)


@PROPERTY_SETTINGS
@given(gb=st.floats(min_value=0.0, max_value=1e6))
def test_format_gb_per_s_reads_back(gb: float) -> None:
    number, unit = rates.format_gb_per_s(gb).split(" ")
    assert unit == "GB/s" and math.isclose(float(number), gb, rel_tol=5e-3, abs_tol=5e-3)


@PROPERTY_SETTINGS
@given(major=st.integers(1, 99), minor=st.integers(0, 9))
def test_cuda_version_text_round_trips(major: int, minor: int) -> None:
    assert nvidia.cuda_version_text(major * 1000 + minor * 10) == f"{major}.{minor}"


@PROPERTY_SETTINGS
@given(raw=st.binary(min_size=16, max_size=16), prefix=st.sampled_from(["GPU-", "gpu-", ""]))
def test_uuid_format_and_normalise_agree(raw: bytes, prefix: str) -> None:
    text = nvidia.format_uuid(raw)
    assert nvidia.normalize_uuid(prefix + text.upper()) == text
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", text)


@PROPERTY_SETTINGS
@given(
    gpus=st.lists(
        st.tuples(
            st.text(alphabet="ABCDEFGHXYZ0123456789 ", min_size=1, max_size=12)
            .map(str.strip)
            .filter(bool),
            st.from_regex(r"[0-9]{3}\.[0-9]{2}", fullmatch=True),
            st.integers(1, 200_000),
        ),
        max_size=4,
    )
)
def test_parse_smi_output_reads_what_nvidia_smi_writes(gpus) -> None:
    text = "\n".join(f"{name}, {driver}, {mib} MiB" for name, driver, mib in gpus)
    parsed = nvidia.parse_smi_output(text)
    assert [(g.name, g.driver_version, g.memory_bytes) for g in parsed] == [
        (name, driver, mib * 1024**2) for name, driver, mib in gpus
    ]


# --------------------------------------------------------------------------- properties: sizes


@PROPERTY_SETTINGS
@given(low=st.integers(1, 2**40), span=st.integers(0, 2**40), ppd=st.integers(1, 12))
def test_log_sizes_stay_within_the_range_in_4_kib_steps(low: int, span: int, ppd: int) -> None:
    high = low + span
    sizes = bw_sizes.log_sizes(low, high, points_per_decade=ppd)
    step = bw_sizes.MIN_BYTES_PER_ARRAY
    assert list(sizes) == sorted(set(sizes))
    assert all(s % step == 0 for s in sizes)
    assert sizes[0] >= low and sizes[-1] == -(-high // step) * step
    assert sizes[0] == max(step, -(-low // step) * step)


@PROPERTY_SETTINGS
@given(
    kernel=st.sampled_from(bandwidth.KERNELS), n=st.integers(1, 2**40), itemsize=st.integers(1, 16)
)
def test_stream_bytes_counts_each_array_once(kernel: str, n: int, itemsize: int) -> None:
    arrays = 2 if kernel in ("copy", "scale") else 3
    assert bandwidth.stream_bytes(kernel, n, itemsize_bytes=itemsize) == arrays * itemsize * n


@PROPERTY_SETTINGS
@given(
    s1=st.integers(1, 1024),
    s2=st.integers(1, 1024),
    itemsize=st.sampled_from([2, 4, 8]),
    line=st.sampled_from([32, 64, 128]),
)
def test_expected_slowdown_grows_then_flattens_at_one_line_per_value(s1, s2, itemsize, line):
    result = strided.StridedResult(
        rows=(), device="cpu", dtype="x", itemsize_bytes=itemsize, line_bytes=line, flushed=False
    )
    lo, hi = sorted((s1, s2))
    assert 1 <= result.expected_slowdown(lo) <= result.expected_slowdown(hi) <= line / itemsize


@PROPERTY_SETTINGS
@given(
    copy_ms=st.floats(min_value=1e-300, max_value=1e300),
    pass_ms=st.floats(min_value=1e-300, max_value=1e300),
    limit=st.integers(1, 10**6),
)
def test_balance_repeats_stays_between_one_and_the_limit(copy_ms, pass_ms, limit) -> None:
    repeats = overlap.balance_repeats(copy_ms, pass_ms, limit=limit)
    assert 1 <= repeats <= limit


@PROPERTY_SETTINGS
@given(
    value=st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=3)),
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)
        ),
        max_leaves=10,
    )
)
def test_json_safe_output_is_strict_json(value: Any) -> None:
    json.dumps(json_safe(value), allow_nan=False)


@PROPERTY_SETTINGS
@given(
    flags=st.lists(
        st.sampled_from(["avx", "avx2", "fma", "sse4_2", "asimd", "junk", "AVX512F"]), max_size=6
    )
)
def test_simd_from_flags_ignores_order_and_case(flags: list[str]) -> None:
    names = cpu.simd_from_flags(flags)
    assert names == cpu.simd_from_flags(list(reversed(flags)))
    assert names == cpu.simd_from_flags([f.upper() for f in flags])
