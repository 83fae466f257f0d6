"""The course's CUDA kernels run on the CPU in numba-cuda's CUDA simulator, checked against NumPy.

Notebook 07 tunes CUDA kernels (strided copy, transposes, matmul,
reductions). Without a GPU a learner can still run the *same algorithms*:
numba-cuda's simulator (``NUMBA_ENABLE_CUDASIM=1``) executes ``@cuda.jit``
kernels with one Python thread per CUDA thread, ``cuda.shared.array`` as a
NumPy array per block and ``cuda.syncthreads()`` as a real barrier. That is
enough to check that an indexing scheme is right, and to watch a missing
``__syncthreads()`` produce wrong answers (:func:`race_demo`). It says
nothing about speed: Python threads are slow (a naive 128×128 matmul takes
seconds on the course's 2-core machine), so sizes stay at or below
:data:`MAX_N`, and the ``seconds`` reported are the cost of the simulation,
not a measure of any GPU.

Why a subprocess: numba decides once, when ``numba.cuda`` is first
imported, whether it is the real CUDA target or the simulator (it reads
``NUMBA_ENABLE_CUDASIM`` then). A notebook kernel may already have imported
numba.cuda for real, and switching it to the simulator would break every
later GPU cell. So every simulation runs in a fresh ``python -m
labkit.kernels.simulator`` with the variable set, and answers in JSON; the
calling process never imports numba at all.

What the simulator cannot run: warp shuffles. numba-cuda 0.30.4's simulator
(``numba/cuda/simulator/kernelapi.py``) implements no ``cuda.shfl_*_sync``
(nor the warp vote functions), so ``reduce_warp_shuffle`` is reported as not
simulated; the check is made at run time, so a later numba-cuda that adds
shuffles will run it.

The inputs are small integers (or a permutation of 0..n²-1) stored as
float32, so every correct answer is exact: any nonzero error is a bug, never
rounding.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from labkit.core.optional import MissingPackageError, is_installed
from labkit.core.validate import check_choice, check_int, check_real, check_seed
from labkit.kernels.sim_results import (
    SGEMM_TILED,
    RaceDemo,
    SimulatedRun,
    Verification,
    numba_cuda_version,
)

#: Every algorithm, in the order the notebook shows them.
KERNELS: tuple[str, ...] = (
    "strided_copy",
    "transpose_naive",
    "transpose_tiled",
    "transpose_padded",
    "transpose_tiled_nosync",
    "sgemm_naive",
    "sgemm_shared",
    "sgemm_tiled",
    "reduce_atomic",
    "reduce_shared",
    "reduce_warp_shuffle",
)

#: The largest n accepted: the simulator runs one Python thread per CUDA thread.
MAX_N = 128

#: Tile sides accepted for ``block`` (a block has block×block threads).
BLOCK_SIDES: tuple[int, ...] = (2, 4, 8, 16, 32)

#: strided_copy.cu's ITEMS_PER_THREAD (its default).
ITEMS_PER_THREAD = 4


INSTALL_HINT = "pip install numba-cuda"


class SimulatorUnavailable(MissingPackageError):
    """numba-cuda is not installed, so nothing can be simulated; the message says what to install."""

    def __init__(self, package: str = "numba-cuda") -> None:
        self.package = package
        ImportError.__init__(
            self,
            f"{package} is not installed, so the CUDA simulator cannot run. "
            f"Install it with: {INSTALL_HINT}",
        )


class SimulatorUnsupported(NotImplementedError):
    """The simulator lacks a feature this kernel needs (warp shuffles)."""


# --------------------------------------------------------------------------- kernels


# --------------------------------------------------------------------------- results


# --------------------------------------------------------------------------- arguments


def _check_block(block: Any) -> int:
    if check_int("block", block, minimum=2, maximum=32) not in BLOCK_SIDES:
        raise ValueError(
            f"block must be a power of two from 2 to 32 (the tile side: a block has "
            f"block×block threads, at most 1024), got {block}"
        )
    return int(block)


# --------------------------------------------------------------------------- running


def _require_simulator() -> None:
    for module, package in (("numba", "numba-cuda"), ("numba_cuda", "numba-cuda")):
        if not is_installed(module):
            raise SimulatorUnavailable(package)


def available() -> bool:
    """Whether the simulator can run here; if not, print one line naming the install command.

    For a notebook cell: ``if simulator.available(): ...``, like
    ``labkit.try_import`` for a framework, so that a learner without
    numba-cuda sees why the cell skipped, not a traceback. numba is only
    looked up, never imported (see the module docstring).
    """
    try:
        _require_simulator()
    except SimulatorUnavailable as exc:
        print(f"Skipped: {exc}")
        return False
    return True


def _run_worker(jobs: list[dict[str, Any]], timeout_s: float) -> list[dict[str, Any]]:
    """Run ``jobs`` in a fresh interpreter with the simulator switched on; return its answers."""
    _require_simulator()
    env = dict(os.environ)
    env["NUMBA_ENABLE_CUDASIM"] = "1"
    root = str(Path(__file__).resolve().parents[2])  # so the child imports this labkit
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    try:
        done = subprocess.run(
            [sys.executable, "-m", "labkit.kernels.sim_ports", json.dumps({"jobs": jobs})],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise TimeoutError(
            f"the CUDA simulator did not finish within timeout_s={timeout_s:g} s; use a smaller n"
        ) from exc
    last = done.stdout.strip().splitlines()[-1:] if done.stdout.strip() else []
    if done.returncode != 0 or not last:
        tail = "\n".join(done.stderr.strip().splitlines()[-8:])
        if "No module named 'numba" in tail or "CUDA Python bindings not found" in tail:
            raise SimulatorUnavailable() from None
        raise RuntimeError(f"the CUDA simulator failed (exit {done.returncode}):\n{tail}")
    answer = json.loads(last[0])
    if "error" in answer:
        raise RuntimeError(f"the CUDA simulator failed: {answer['error']}")
    return answer["results"]


def _run_from_answer(job: dict[str, Any], answer: dict[str, Any]) -> SimulatedRun:
    kernel, n, block = job["kernel"], job["n"], job["block"]
    stride = job["stride"] if kernel == "strided_copy" else 1
    if not answer["simulated"]:
        return SimulatedRun(
            kernel,
            n,
            block,
            False,
            False,
            None,
            None,
            n * n,
            None,
            note=answer["note"],
            stride=stride,
        )
    output = np.asarray(answer["outputs"][0], dtype=np.float32)
    expected = np.asarray(answer["expected"], dtype=np.float32)
    return _compare(kernel, n, block, output, expected, answer["seconds"], stride)


def _compare(
    kernel: str,
    n: int,
    block: int,
    output: np.ndarray,
    expected: np.ndarray,
    seconds: float,
    stride: int = 1,
) -> SimulatedRun:
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(output.astype(np.float64) - expected.astype(np.float64))
    wrong = int(np.count_nonzero(~(output == expected)))
    finite = diff[np.isfinite(diff)]
    max_err = float("inf") if finite.size < diff.size else float(finite.max(initial=0.0))
    return SimulatedRun(
        kernel,
        n,
        block,
        True,
        wrong == 0,
        max_err,
        wrong,
        int(expected.size),
        float(seconds),
        stride=stride,
        output=output,
        expected=expected,
    )


def simulate(
    kernel: str,
    n: int = 32,
    *,
    seed: int = 0,
    block: int = 8,
    stride: int = 2,
    timeout_s: float = 600.0,
) -> SimulatedRun:
    """Run one kernel in numba-cuda's CUDA simulator and compare its answer with NumPy's.

    Args:
        kernel: one of :data:`KERNELS`.
        n: the side of the n×n input matrix (at most :data:`MAX_N`); the 1-D
            kernels (``strided_copy`` and the reductions) work on its n·n
            elements.
        seed: seeds the synthetic input.
        block: the tile side (TILE_DIM, TILE_SIZE): transposes run blocks of
            block × block/4 threads (as TILE_DIM × BLOCK_ROWS), sgemm_naive and
            sgemm_shared block × block threads, the 1-D kernels block² threads
            (BLOCK_SIZE); sgemm_tiled uses :data:`SGEMM_TILED` and needs n to
            be a multiple of its BM and BN (32).
        stride: ``strided_copy`` reads neighbouring threads' values stride
            floats apart (it still copies all n·n, in a transposed order);
            stride must divide n·n.
        timeout_s: the simulation is stopped after this many seconds.

    Raises :class:`SimulatorUnsupported` for ``reduce_warp_shuffle`` when the
    simulator has no warp shuffle, and :class:`SimulatorUnavailable` (one line
    naming ``pip install numba-cuda``) when numba-cuda is missing.
    """
    job = _job(kernel, n, seed=seed, block=block, stride=stride)
    if why := _unmet(job):
        raise ValueError(why)
    timeout_s = check_real("timeout_s", timeout_s, low=0, low_open=True)
    (answer,) = _run_worker([job], timeout_s)
    run = _run_from_answer(job, answer)
    if not run.simulated:
        raise SimulatorUnsupported(f"{kernel}: {run.note}")
    return run


def _job(kernel: Any, n: Any, *, seed: Any, block: Any, stride: Any = 2, **extra: Any) -> dict:
    kernel = check_choice("kernel", kernel, KERNELS)
    n = check_int("n", n, minimum=1, maximum=MAX_N)
    seed = check_seed("seed", seed)
    block = _check_block(block)
    stride = check_int("stride", stride, minimum=1, maximum=n * n)
    return {"kernel": kernel, "n": n, "seed": seed, "block": block, "stride": stride, **extra}


def _unmet(job: dict[str, Any]) -> str:
    """Why the .cu's launch rules forbid this job ("" when they allow it)."""
    kernel, n, stride = job["kernel"], job["n"], job["stride"]
    if kernel == "strided_copy" and (n * n) % stride:
        return f"stride must divide the n·n = {n * n:,} elements (strided_copy.cu requires it), got {stride}"
    tile = max(SGEMM_TILED["BM"], SGEMM_TILED["BN"])
    if kernel == "sgemm_tiled" and n % tile:
        return f"n must be a multiple of {tile} for sgemm_tiled (BM = BN = {tile} in the simulator), got {n}"
    return ""


def verify_all(
    n: int = 32,
    *,
    seed: int = 0,
    block: int = 8,
    kernels: tuple[str, ...] | list[str] | None = None,
    timeout_s: float = 600.0,
) -> Verification:
    """Simulate every algorithm at one small size and check each against NumPy.

    All kernels run in one simulator process (one start-up instead of
    eleven). strided_copy runs with stride 2 (1 for odd n); sgemm_tiled is
    listed as not simulated unless n is a multiple of 32.
    ``transpose_tiled_nosync`` is expected to come out WRONG: that is its
    lesson. ``reduce_warp_shuffle`` is listed as not simulated where the
    simulator has no warp shuffle. ``print()`` the result for the table.
    """
    names = KERNELS if kernels is None else [check_choice("kernels", k, KERNELS) for k in kernels]
    if not names:
        raise ValueError("kernels must name at least one kernel, or be None for all of them")
    n = check_int("n", n, minimum=1, maximum=MAX_N)
    jobs = [_job(k, n, seed=seed, block=block, stride=2 if n % 2 == 0 else 1) for k in names]
    timeout_s = check_real("timeout_s", timeout_s, low=0, low_open=True)
    runnable = [job for job in jobs if not _unmet(job)]
    answers = iter(_run_worker(runnable, timeout_s) if runnable else [])
    runs = tuple(
        _run_from_answer(job, next(answers))
        if not _unmet(job)
        else _run_from_answer(job, {"simulated": False, "note": f"not simulated: {_unmet(job)}"})
        for job in jobs
    )
    return Verification(n, jobs[0]["block"], jobs[0]["seed"], runs, numba_cuda_version())


def race_demo(
    n: int = 16,
    runs: int = 5,
    *,
    seed: int = 0,
    block: int = 8,
    start_together: bool = True,
    timeout_s: float = 600.0,
) -> RaceDemo:
    """Run the tiled transpose without ``__syncthreads()`` ``runs`` times: wrong, and not repeatable.

    Each thread writes one element of a shared tile and then reads the element
    *another* thread writes. Without a barrier between the two, a thread that
    reads first gets whatever the tile held before.

    How the simulator shows it (measured with numba-cuda 0.30.4): it starts a
    block's threads one after another, and each usually finishes before the
    next one starts. So with ``start_together=False`` the bug is reliably
    visible (every element whose writer starts after its reader is stale:
    28 of the 64 elements of an 8×8 tile) but the *pattern* is nearly the
    same in every run: Python's threads are still pre-empted now and then, so
    a few pairs (0 to 12 of the 112 wrong elements at n = 16, in a review's
    runs) change order, in any block. On a GPU all threads of a block are resident at once
    and the hardware schedules them, so which reads lose the race changes
    from run to run. ``start_together=True`` (the default) runs the same
    buggy kernel with one extra ``cuda.syncthreads()`` at its very start,
    which changes nothing for a correct kernel but makes the simulator
    release all of a block's threads at once, in an order that changes from
    launch to launch; then the wrong elements differ between runs, as on a
    GPU (in 15 of 15 trials of 3 runs each here, every later run differed
    from run 1). The stale values read are leftovers of the previous block's
    tile, or uninitialised memory for the first block.
    """
    runs = check_int("runs", runs, minimum=2, maximum=50)  # each run is compared with run 1
    kernel = "transpose_tiled_nosync"
    job = _job(
        kernel,
        n,
        seed=seed,
        block=block,
        repeat=runs,
        variant="transpose_tiled_nosync_together" if start_together else kernel,
    )
    timeout_s = check_real("timeout_s", timeout_s, low=0, low_open=True)
    (answer,) = _run_worker([job], timeout_s)
    expected = np.asarray(answer["expected"], dtype=np.float32)
    outputs = [np.asarray(o, dtype=np.float32) for o in answer["outputs"]]
    wrong_masks = [~(o == expected) for o in outputs]
    return RaceDemo(
        n=job["n"],
        block=job["block"],
        seed=job["seed"],
        start_together=start_together,
        wrong_per_run=tuple(int(m.sum()) for m in wrong_masks),
        differ_from_first=tuple(int(np.count_nonzero(m != wrong_masks[0])) for m in wrong_masks),
        wrong_indices=tuple(tuple(int(i) for i in np.flatnonzero(m)) for m in wrong_masks),
        seconds=float(answer["seconds"]),
    )


# --------------------------------------------------------------------------- plot
