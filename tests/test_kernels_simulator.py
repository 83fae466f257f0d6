"""The CUDA simulator route of notebook 07: every algorithm matches NumPy, the race is wrong.

Each test that simulates starts one subprocess (about 1 s) and runs toy
sizes; the whole file stays well under a minute on 2 cores.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from labkit.core.optional import MissingPackageError, is_installed  # noqa: E402
from labkit.kernels import plots as kernels_plots
from labkit.kernels import sim_results
from labkit.kernels import simulator as sim  # noqa: E402

needs_numba = pytest.mark.skipif(
    not (is_installed("numba") and is_installed("numba_cuda")), reason="needs numba-cuda"
)


@pytest.fixture(scope="module")
def verified() -> sim_results.Verification:
    # n = 32 is the smallest size where sgemm_tiled (32×32 tiles of C) runs; 4×4 tiles elsewhere.
    return sim.verify_all(32, block=4)


@needs_numba
def test_every_correct_kernel_matches_numpy_exactly(verified: sim_results.Verification) -> None:
    assert [r.kernel for r in verified.runs] == list(sim.KERNELS)
    for run in verified.runs:
        if run.kernel in sim_results.RACY or not run.simulated:
            continue
        assert run.passed, str(run)
        assert run.max_abs_error == 0.0 and run.wrong_elements == 0, str(run)
        assert run.output is not None and np.array_equal(run.output, run.expected)
        assert run.seconds is not None and run.seconds > 0
    assert verified.passed
    # everything but the warp shuffle (where the simulator lacks it) really ran
    ran = {r.kernel for r in verified.runs if r.simulated}
    assert ran >= set(sim.KERNELS) - {"reduce_warp_shuffle"}


@needs_numba
def test_the_nosync_transpose_is_wrong(verified: sim_results.Verification) -> None:
    run = verified["transpose_tiled_nosync"]
    assert run.simulated and not run.passed
    assert run.wrong_elements is not None and run.wrong_elements > 0
    assert run.verdict == "WRONG: data race"


@needs_numba
def test_warp_shuffle_is_reported_not_faked(verified: sim_results.Verification) -> None:
    run = verified["reduce_warp_shuffle"]
    if run.simulated:  # a later numba-cuda whose simulator has warp shuffles
        assert run.passed
    else:  # numba-cuda 0.30.4: no cuda.shfl_down_sync in the simulator
        assert not run.passed and run.max_abs_error is None and run.wrong_elements is None
        assert "shfl_down_sync" in run.note and "needs a real GPU" in run.note


@needs_numba
def test_verification_table_is_readable(verified: sim_results.Verification) -> None:
    text = str(verified)
    assert text.splitlines()[0].startswith("CUDA simulator (numba-cuda ")
    for kernel in sim.KERNELS:
        assert kernel in text
    assert "WRONG: data race" in text and "garbage" in text  # racy values are not printed
    with pytest.raises(KeyError, match="no kernel named"):
        verified["nope"]


@needs_numba
def test_simulate_one_kernel_at_a_size_that_is_not_a_multiple_of_the_tile() -> None:
    run = sim.simulate("transpose_padded", 6, block=4)
    assert run.passed and run.output is not None and run.output.shape == (36,)
    assert "transpose_padded, 6×6" in str(run) and "correct" in str(run)


@needs_numba
def test_strided_copy_with_another_stride_and_verify_all_subset() -> None:
    result = sim.verify_all(12, block=2, kernels=["strided_copy", "sgemm_shared", "sgemm_tiled"])
    assert result["strided_copy"].passed and result["strided_copy"].stride == 2
    assert result["sgemm_shared"].passed
    tiled = result["sgemm_tiled"]  # 12 is not a multiple of 32: listed, not run
    assert not tiled.simulated and "multiple of 32" in tiled.note


@needs_numba
def test_race_demo_is_wrong_every_run_and_the_runs_disagree() -> None:
    demo = sim.race_demo(8, 3, block=4)
    assert demo.runs == 3 and demo.always_wrong
    assert demo.differ_from_first[0] == 0
    assert demo.runs_disagree  # threads started together: the losers of the race change
    assert "wrong in all 3 runs" in demo.verdict
    assert str(demo).count("run ") >= 3
    axes = kernels_plots.plot_race(demo, runs=2)
    try:
        assert len(axes) == 2 and axes[0].get_xlabel() == "column"
        assert axes[1].get_title() == f"run 2: {demo.wrong_per_run[1]} wrong"
    finally:
        plt.close(axes[0].figure)


def test_race_demo_text_without_running() -> None:
    demo = sim_results.RaceDemo(
        n=4,
        block=2,
        seed=0,
        start_together=False,
        wrong_per_run=(3, 3),
        differ_from_first=(0, 0),
        wrong_indices=((1, 2, 3), (1, 2, 3)),
    )
    assert not demo.runs_disagree
    assert demo.verdict.endswith("the same elements are wrong in every run")
    assert "one after another" in str(demo)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"kernel": "transpose", "n": 8}, ValueError, "kernel must be one of"),
        ({"kernel": 3, "n": 8}, ValueError, "kernel must be one of"),
        ({"kernel": "sgemm_naive", "n": 129}, ValueError, r"n must be an integer from 1 to 128"),
        ({"kernel": "sgemm_naive", "n": 0}, ValueError, "n must be"),
        ({"kernel": "sgemm_naive", "n": 8.0}, TypeError, "n must be an int"),
        ({"kernel": "sgemm_naive", "n": 8, "block": 3}, ValueError, "block must be a power of two"),
        ({"kernel": "sgemm_naive", "n": 8, "block": 64}, ValueError, "block must be"),
        ({"kernel": "sgemm_naive", "n": 8, "block": True}, TypeError, "block must be an int"),
        ({"kernel": "sgemm_naive", "n": 8, "seed": -1}, ValueError, "seed must be"),
        ({"kernel": "strided_copy", "n": 3, "stride": 2}, ValueError, "stride must divide"),
        ({"kernel": "sgemm_tiled", "n": 16}, ValueError, "multiple of 32"),
        ({"kernel": "sgemm_naive", "n": 8, "timeout_s": 0}, ValueError, "timeout_s must be"),
    ],
)
def test_simulate_rejects_bad_arguments_before_starting_anything(kwargs, error, match) -> None:
    with pytest.raises(error, match=match):
        sim.simulate(**kwargs)


def test_other_entry_points_reject_bad_arguments() -> None:
    with pytest.raises(ValueError, match="runs must be"):
        sim.race_demo(8, runs=1)
    with pytest.raises(ValueError, match="n must be"):
        sim.verify_all(200)
    with pytest.raises(ValueError, match="kernels must be one of"):
        sim.verify_all(8, kernels=["sgemm_naive", "sgemm"])
    with pytest.raises(ValueError, match="kernels must name at least one kernel"):
        sim.verify_all(8, kernels=[])


@needs_numba
def test_warp_shuffle_alone_raises_a_clear_error() -> None:
    try:
        run = sim.simulate("reduce_warp_shuffle", 8)
    except sim.SimulatorUnsupported as exc:  # numba-cuda 0.30.4
        assert "shfl_down_sync" in str(exc) and isinstance(exc, NotImplementedError)
    else:  # a later numba-cuda whose simulator has warp shuffles
        assert run.passed


@pytest.mark.parametrize("missing", ["numba", "numba_cuda"])
def test_missing_numba_names_the_install_command(monkeypatch, missing: str) -> None:
    monkeypatch.setitem(sys.modules, missing, None)  # how Python marks a module unimportable
    with pytest.raises(sim.SimulatorUnavailable, match="pip install numba-cuda") as info:
        sim.simulate("transpose_naive", 4)
    assert isinstance(info.value, MissingPackageError)
    assert "\n" not in str(info.value)


def test_importing_the_simulator_imports_no_numba() -> None:
    code = (
        "import sys, labkit.kernels.simulator, labkit.kernels.resources, labkit.kernels.occupancy;"
        "bad = [m for m in ('numba', 'numba.cuda', 'matplotlib') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_simulated_run_text_for_a_reduction_and_an_unsupported_kernel() -> None:
    run = sim._compare(
        "reduce_shared", 4, 2, np.array([7.0], np.float32), np.array([9.0], np.float32), 0.5
    )
    assert not run.passed and run.max_abs_error == 2.0
    assert "WRONG (sum 7, NumPy's 9, max |error| 2)" in str(run)
    skipped = sim_results.SimulatedRun(
        "reduce_warp_shuffle",
        4,
        2,
        False,
        False,
        None,
        None,
        16,
        None,
        note="not simulated: no shuffles",
    )
    assert str(skipped).endswith("not simulated: no shuffles")


# ------------------------------------------------------------ the ports are the .cu kernels


KERNELS_DIR = Path(sim.__file__).resolve().parent


def _kernel_body(source: str, name: str) -> str:
    match = re.search(rf"\b{name}\(", source)
    assert match, f"no kernel {name} in the source"
    start = match.start()
    end = source.find('extern "C"', start)
    return source[start : end if end >= 0 else len(source)]


def _as_python(expr: str) -> str:
    """A CUDA C integer expression as the ports write it: snake_case names, // for /."""
    expr = re.sub(r"\b(threadIdx|blockIdx|blockDim|gridDim)\b", r"cuda.\1", expr)
    expr = re.sub(r"(?<![\w.])([a-z]+)([A-Z][A-Za-z]*)", lambda m: _snake(m.group(0)), expr)
    expr = re.sub(
        r"\b(BM|BN|BK|TM|TN|TILE_DIM|BLOCK_ROWS|SGEMM_THREADS)\b",
        lambda m: m.group(0).lower(),
        expr,
    )
    return expr.replace(" / ", " // ")


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", lambda m: "_" + m.group(1).lower(), name).lower()


@pytest.mark.parametrize(
    ("cu", "kernel"),
    [
        ("sgemm.cu", "sgemm_tiled"),
        ("transpose.cu", "transpose_naive"),
        ("transpose.cu", "transpose_tiled"),
        ("transpose.cu", "transpose_padded"),
    ],
)
def test_each_ports_indexing_is_its_kernels(cu: str, kernel: str) -> None:
    """Every index the .cu kernel computes (``int name = expr;``) is computed alike in the port."""
    import inspect

    from labkit.kernels import sim_ports

    body = _kernel_body((KERNELS_DIR / cu).read_text(), kernel)
    port = inspect.getsource(sim_ports._kernels)
    port_body = port[port.index(f"    def {kernel}(") :]
    port_body = port_body[: port_body.index("\n    def ", 10)]
    lines = re.findall(r"^\s*(?:const )?int (\w+) = (.+?);", body, re.M)
    assert len(lines) >= 2, f"no index computations found in {cu}:{kernel}"
    for name, expr in lines:
        expected = f"{_snake(name)} = {_as_python(expr)}"
        assert expected in port_body, f"{kernel}: the port lacks `{expected}` (from {cu})"


def test_the_simulated_sgemm_tiles_pass_the_kernels_static_asserts() -> None:
    """sgemm.cu's static_asserts, evaluated on SGEMM_TILED: the simulator's build would compile."""
    source = (KERNELS_DIR / "sgemm.cu").read_text()
    asserts = re.findall(r"static_assert\((.+?),\s*\"", source, re.S)
    assert len(asserts) == 6
    macros = dict(sim_results.SGEMM_TILED)
    macros["SGEMM_THREADS"] = (macros["BM"] // macros["TM"]) * (macros["BN"] // macros["TN"])
    assert macros["SGEMM_THREADS"] == 32
    for condition in asserts:
        python = " ".join(condition.split()).replace("&&", "and").replace(" / ", " // ")
        assert eval(python, {}, macros), f"SGEMM_TILED fails sgemm.cu's static_assert({condition})"  # noqa: S307
    # and a group stride that is not the whole tile, so the port's group indexing is exercised
    assert macros["TM"] // 4 > 1 or macros["TN"] // 4 > 1


@needs_numba
def test_sgemm_tiled_with_several_blocks() -> None:
    """At n = 64 the 32×32 tiles make 4 blocks: the blockIdx offsets of the port are exercised."""
    result = sim.verify_all(64, kernels=["sgemm_tiled"])
    run = result["sgemm_tiled"]
    assert run.simulated and run.passed and run.max_abs_error == 0.0
