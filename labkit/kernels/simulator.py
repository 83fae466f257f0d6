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
import math
import numbers
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from labkit.core.optional import MissingPackageError, is_installed
from labkit.timing.bench import format_duration

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

#: Kernels that are wrong on purpose: a data race on shared memory.
RACY: frozenset[str] = frozenset({"transpose_tiled_nosync"})

#: The largest n accepted: the simulator runs one Python thread per CUDA thread.
MAX_N = 128

#: Tile sides accepted for ``block`` (a block has block×block threads).
BLOCK_SIDES: tuple[int, ...] = (2, 4, 8, 16, 32)

#: strided_copy.cu's ITEMS_PER_THREAD (its default).
ITEMS_PER_THREAD = 4

#: sgemm_tiled's tiles in the simulator (the .cu defaults, 128/128/8/8/8, would
#: need 256 Python threads per block and n a multiple of 128): 16 threads per
#: block, each computing a 4×4 piece of C. n must be a multiple of 16.
SGEMM_TILED: dict[str, int] = {"BM": 16, "BN": 16, "BK": 4, "TM": 4, "TN": 4}

INSTALL_HINT = "pip install numba-cuda"

_ONE_D = frozenset({"strided_copy", "reduce_atomic", "reduce_shared", "reduce_warp_shuffle"})
_NO_SHUFFLE = (
    "not simulated: numba-cuda {version}'s simulator has no cuda.shfl_down_sync "
    "(it implements no warp shuffle), so this kernel needs a real GPU"
)

# Set only inside the worker process (see _bind): the kernels below name the
# module-global ``cuda``, which is what numba's simulator swaps for its fake
# CUDA module while a kernel runs. The calling process never imports numba.
cuda: Any = None
float32: Any = None


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


def _kernels(tile: int) -> dict[str, Any]:  # noqa: C901 (a table of nested kernel ports, each simple)
    """The kernels as plain Python functions for one tile side (a compile-time constant).

    Each mirrors its CUDA C namesake in labkit/kernels/*.cu line for line
    (same arguments, same indexing, same barriers), written for numba: the
    names ``cuda`` and ``float32`` are module globals bound in the worker.
    The macros take simulator-sized values: TILE_DIM = TILE_SIZE = ``tile``,
    BLOCK_ROWS = tile / 4, BLOCK_SIZE = tile², and for sgemm_tiled the
    :data:`SGEMM_TILED` tiles; float4 loads become four float loads.
    """
    tile_dim, block_rows = tile, max(1, tile // 4)  # transpose.cu: TILE_DIM, BLOCK_ROWS
    block_size = tile * tile  # reduce.cu: BLOCK_SIZE
    items = ITEMS_PER_THREAD
    bm, bn, bk, tm, tn = (SGEMM_TILED[k] for k in ("BM", "BN", "BK", "TM", "TN"))
    sgemm_threads = (bm // tm) * (bn // tn)

    def strided_copy(inp: Any, out: Any, n: int, stride: int) -> None:
        m = n // stride  # rows of the m x stride view
        q = cuda.blockIdx.y  # which column of the view
        first = cuda.blockIdx.x * cuda.blockDim.x * items + cuda.threadIdx.x
        v = cuda.local.array(items, float32)
        for k in range(items):
            r = first + k * cuda.blockDim.x
            if r < m:
                v[k] = inp[r * stride + q]  # stride floats apart across the warp
        for k in range(items):
            r = first + k * cuda.blockDim.x
            if r < m:
                out[q * m + r] = v[k]  # contiguous across the warp

    def transpose_naive(inp: Any, out: Any, rows: int, cols: int) -> None:
        x = cuda.blockIdx.x * tile_dim + cuda.threadIdx.x
        y = cuda.blockIdx.y * tile_dim + cuda.threadIdx.y
        if x >= cols:
            return
        for j in range(0, tile_dim, block_rows):
            if y + j < rows:
                out[x * rows + (y + j)] = inp[(y + j) * cols + x]  # strided write

    def transpose_tiled(inp: Any, out: Any, rows: int, cols: int) -> None:
        tile_ = cuda.shared.array((tile_dim, tile_dim), float32)
        x = cuda.blockIdx.x * tile_dim + cuda.threadIdx.x
        y = cuda.blockIdx.y * tile_dim + cuda.threadIdx.y
        for j in range(0, tile_dim, block_rows):
            if x < cols and y + j < rows:
                tile_[cuda.threadIdx.y + j, cuda.threadIdx.x] = inp[(y + j) * cols + x]
        cuda.syncthreads()  # the whole tile is written before any thread reads it
        x = cuda.blockIdx.y * tile_dim + cuda.threadIdx.x
        y = cuda.blockIdx.x * tile_dim + cuda.threadIdx.y
        for j in range(0, tile_dim, block_rows):
            if x < rows and y + j < cols:
                out[(y + j) * rows + x] = tile_[cuda.threadIdx.x, cuda.threadIdx.y + j]

    def transpose_padded(inp: Any, out: Any, rows: int, cols: int) -> None:
        padded = cuda.shared.array((tile_dim, tile_dim + 1), float32)  # no bank conflicts on a GPU
        x = cuda.blockIdx.x * tile_dim + cuda.threadIdx.x
        y = cuda.blockIdx.y * tile_dim + cuda.threadIdx.y
        for j in range(0, tile_dim, block_rows):
            if x < cols and y + j < rows:
                padded[cuda.threadIdx.y + j, cuda.threadIdx.x] = inp[(y + j) * cols + x]
        cuda.syncthreads()
        x = cuda.blockIdx.y * tile_dim + cuda.threadIdx.x
        y = cuda.blockIdx.x * tile_dim + cuda.threadIdx.y
        for j in range(0, tile_dim, block_rows):
            if x < rows and y + j < cols:
                out[(y + j) * rows + x] = padded[cuda.threadIdx.x, cuda.threadIdx.y + j]

    def transpose_tiled_nosync(inp: Any, out: Any, rows: int, cols: int) -> None:
        racy = cuda.shared.array((tile_dim, tile_dim), float32)
        x = cuda.blockIdx.x * tile_dim + cuda.threadIdx.x
        y = cuda.blockIdx.y * tile_dim + cuda.threadIdx.y
        for j in range(0, tile_dim, block_rows):
            if x < cols and y + j < rows:
                racy[cuda.threadIdx.y + j, cuda.threadIdx.x] = inp[(y + j) * cols + x]
        # BUG (deliberate): the cuda.syncthreads() that belongs here is missing.
        x = cuda.blockIdx.y * tile_dim + cuda.threadIdx.x
        y = cuda.blockIdx.x * tile_dim + cuda.threadIdx.y
        for j in range(0, tile_dim, block_rows):
            if x < rows and y + j < cols:
                out[(y + j) * rows + x] = racy[cuda.threadIdx.x, cuda.threadIdx.y + j]

    def transpose_tiled_nosync_together(inp: Any, out: Any, rows: int, cols: int) -> None:
        # The same bug. The barrier at the start changes nothing for a correct
        # kernel; in the simulator it makes the block's threads start together
        # (as on a GPU) instead of one after another.
        together = cuda.shared.array((tile_dim, tile_dim), float32)
        cuda.syncthreads()
        x = cuda.blockIdx.x * tile_dim + cuda.threadIdx.x
        y = cuda.blockIdx.y * tile_dim + cuda.threadIdx.y
        for j in range(0, tile_dim, block_rows):
            if x < cols and y + j < rows:
                together[cuda.threadIdx.y + j, cuda.threadIdx.x] = inp[(y + j) * cols + x]
        # BUG (deliberate): no cuda.syncthreads() here
        x = cuda.blockIdx.y * tile_dim + cuda.threadIdx.x
        y = cuda.blockIdx.x * tile_dim + cuda.threadIdx.y
        for j in range(0, tile_dim, block_rows):
            if x < rows and y + j < cols:
                out[(y + j) * rows + x] = together[cuda.threadIdx.x, cuda.threadIdx.y + j]

    def sgemm_naive(a: Any, b: Any, c: Any, m: int, n: int, k: int) -> None:
        col = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        row = cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y
        if row < m and col < n:
            acc = float32(0.0)
            for i in range(k):
                acc += a[row * k + i] * b[i * n + col]
            c[row * n + col] = acc

    def sgemm_shared(a: Any, b: Any, c: Any, m: int, n: int, k: int) -> None:
        a_s = cuda.shared.array((tile, tile), float32)
        b_s = cuda.shared.array((tile, tile), float32)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        row = cuda.blockIdx.y * tile + ty
        col = cuda.blockIdx.x * tile + tx
        acc = float32(0.0)
        for t in range(0, k, tile):
            a_s[ty, tx] = a[row * k + t + tx] if row < m and t + tx < k else float32(0.0)
            b_s[ty, tx] = b[(t + ty) * n + col] if t + ty < k and col < n else float32(0.0)
            cuda.syncthreads()  # the tiles are complete
            for i in range(tile):
                acc += a_s[ty, i] * b_s[i, tx]
            cuda.syncthreads()  # nobody still reads the tiles we overwrite next
        if row < m and col < n:
            c[row * n + col] = acc

    def sgemm_tiled(a: Any, b: Any, c: Any, m: int, n: int, k: int) -> None:
        a_s = cuda.shared.array(bk * bm, float32)  # A's tile transposed: a_s[k * BM + m]
        b_s = cuda.shared.array(bk * bn, float32)
        thread_col = cuda.threadIdx.x % (bn // tn)
        thread_row = cuda.threadIdx.x // (bn // tn)
        a0 = cuda.blockIdx.y * bm * k  # offsets of this block's strips (the .cu moves pointers)
        b0 = cuda.blockIdx.x * bn
        c0 = cuda.blockIdx.y * bm * n + cuda.blockIdx.x * bn
        inner_row_a = cuda.threadIdx.x // (bk // 4)
        inner_col_a = cuda.threadIdx.x % (bk // 4)
        row_stride_a = (4 * sgemm_threads) // bk
        inner_row_b = cuda.threadIdx.x // (bn // 4)
        inner_col_b = cuda.threadIdx.x % (bn // 4)
        row_stride_b = sgemm_threads // (bn // 4)
        acc = cuda.local.array(tm * tn, float32)
        for i in range(tm * tn):
            acc[i] = float32(0.0)
        reg_m = cuda.local.array(tm, float32)
        reg_n = cuda.local.array(tn, float32)
        for _bk in range(0, k, bk):
            for off in range(0, bm, row_stride_a):  # a float4 of A, stored transposed
                src = a0 + (inner_row_a + off) * k + inner_col_a * 4
                for e in range(4):
                    a_s[(inner_col_a * 4 + e) * bm + inner_row_a + off] = a[src + e]
            for off in range(0, bk, row_stride_b):  # a float4 of B, stored as is
                src = b0 + (inner_row_b + off) * n + inner_col_b * 4
                for e in range(4):
                    b_s[(inner_row_b + off) * bn + inner_col_b * 4 + e] = b[src + e]
            cuda.syncthreads()  # both tiles complete
            a0 += bk
            b0 += bk * n
            for d in range(bk):  # outer product of a column of a_s and a row of b_s
                for i in range(tm):
                    reg_m[i] = a_s[d * bm + thread_row * tm + i]
                for j in range(tn):
                    reg_n[j] = b_s[d * bn + thread_col * tn + j]
                for i in range(tm):
                    for j in range(tn):
                        acc[i * tn + j] += reg_m[i] * reg_n[j]
            cuda.syncthreads()  # nobody still reads the tiles we overwrite next
        for i in range(tm):
            for j in range(tn):
                c[c0 + (thread_row * tm + i) * n + thread_col * tn + j] = acc[i * tn + j]

    def reduce_atomic(inp: Any, out: Any, n: int) -> None:
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if i < n:
            cuda.atomic.add(out, 0, inp[i])  # n threads queue at one address

    def reduce_shared(inp: Any, out: Any, n: int) -> None:
        partial = cuda.shared.array(block_size, float32)
        tid = cuda.threadIdx.x
        i = cuda.blockIdx.x * (2 * block_size) + tid
        v = float32(0.0)
        if i < n:
            v = inp[i]
        if i + block_size < n:
            v += inp[i + block_size]  # two elements per thread, added while loading
        partial[tid] = v
        cuda.syncthreads()
        s = block_size // 2
        while s > 0:  # sequential addressing: the first s threads stay active
            if tid < s:
                partial[tid] += partial[tid + s]
            cuda.syncthreads()
            s >>= 1
        if tid == 0:
            cuda.atomic.add(out, 0, partial[0])  # one atomic per block

    def reduce_warp_shuffle(inp: Any, out: Any, n: int) -> None:
        warp_sums = cuda.shared.array(32, float32)
        tid = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        nthreads = cuda.gridDim.x * cuda.blockDim.x
        total = float32(0.0)
        for r in range(tid, n, nthreads):  # grid-stride loop (the .cu reads float4s)
            total += inp[r]
        offset = 16
        while offset > 0:  # within the warp, through registers
            total += cuda.shfl_down_sync(0xFFFFFFFF, total, offset)
            offset >>= 1
        lane = cuda.threadIdx.x % 32
        warp = cuda.threadIdx.x // 32
        if lane == 0:
            warp_sums[warp] = total
        cuda.syncthreads()
        if warp == 0:
            warps = (cuda.blockDim.x + 31) // 32
            total = warp_sums[lane] if lane < warps else float32(0.0)
            offset = 16
            while offset > 0:
                total += cuda.shfl_down_sync(0xFFFFFFFF, total, offset)
                offset >>= 1
            if lane == 0:
                cuda.atomic.add(out, 0, total)  # one atomic per block

    return {
        "strided_copy": strided_copy,
        "transpose_naive": transpose_naive,
        "transpose_tiled": transpose_tiled,
        "transpose_padded": transpose_padded,
        "transpose_tiled_nosync": transpose_tiled_nosync,
        "transpose_tiled_nosync_together": transpose_tiled_nosync_together,
        "sgemm_naive": sgemm_naive,
        "sgemm_shared": sgemm_shared,
        "sgemm_tiled": sgemm_tiled,
        "reduce_atomic": reduce_atomic,
        "reduce_shared": reduce_shared,
        "reduce_warp_shuffle": reduce_warp_shuffle,
    }


# --------------------------------------------------------------------------- results


def _size_text(kernel: str, n: int) -> str:
    return f"{n * n:,} elements" if kernel in _ONE_D else f"{n}×{n}"


@dataclass(frozen=True)
class SimulatedRun:
    """One kernel run in the CUDA simulator and compared with NumPy.

    ``wrong_elements`` counts outputs that differ from NumPy's answer (the
    inputs make every correct answer exact). ``seconds`` is the wall time of
    the simulated launch: the cost of simulating, which says nothing about a
    GPU's speed. ``simulated`` is False when the simulator lacks a feature the
    kernel needs (``note`` says which); then nothing was run.
    """

    kernel: str
    n: int
    block: int
    simulated: bool
    passed: bool
    max_abs_error: float | None
    wrong_elements: int | None
    elements: int
    seconds: float | None
    note: str = ""
    stride: int = 1  # strided_copy's stride (1 for the other kernels)
    output: np.ndarray | None = field(default=None, repr=False, compare=False)
    expected: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def size(self) -> str:
        """The problem size in words: "32×32" or "1,024 elements"."""
        return _size_text(self.kernel, self.n)

    @property
    def verdict(self) -> str:
        if not self.simulated:
            return "not simulated"
        if self.passed:
            return "correct"
        return "WRONG: data race" if self.kernel in RACY else "WRONG"

    def __str__(self) -> str:
        name = (
            f"{self.kernel} (stride {self.stride})"
            if self.kernel == "strided_copy"
            else self.kernel
        )
        head = f"{name}, {self.size}, {_threads_text(self.kernel, self.block)}"
        if not self.simulated:
            return f"{head}: {self.note}"
        if (
            self.kernel.startswith("reduce")
            and self.output is not None
            and self.expected is not None
        ):
            got, want = float(self.output.ravel()[0]), float(self.expected.ravel()[0])
            wrong = f"sum {got:,.0f}, NumPy's {want:,.0f}"
        else:
            wrong = f"{self.wrong_elements:,} of {self.elements:,} elements wrong"
        error = "" if self.kernel in RACY else f", max |error| {_error_text(self.max_abs_error)}"
        took = format_duration((self.seconds or 0.0) * 1e3)
        return f"{head}: {self.verdict} ({wrong}{error}), simulated in {took}"


def _threads_text(kernel: str, block: int) -> str:
    """How the simulated launch maps ``block`` to threads, as the .cu launches it."""
    if kernel in _ONE_D:
        return f"blocks of {block * block} threads"
    if kernel.startswith("transpose"):
        return f"{block}×{block} tiles, blocks of {block}×{max(1, block // 4)} threads"
    if kernel == "sgemm_tiled":
        t = SGEMM_TILED
        threads = (t["BM"] // t["TM"]) * (t["BN"] // t["TN"])
        return f"{t['BM']}×{t['BN']} tiles of C, blocks of {threads} threads"
    return f"blocks of {block}×{block} threads"


def _error_text(value: float | None) -> str:
    if value is None:
        return "—"
    return "0" if value == 0 else f"{value:.3g}"


@dataclass(frozen=True)
class Verification:
    """Every algorithm simulated at one size: a table of verdicts (``str()`` prints it)."""

    n: int
    block: int
    seed: int
    runs: tuple[SimulatedRun, ...]
    numba_cuda_version: str

    @property
    def passed(self) -> bool:
        """True when every simulated kernel that is meant to be right is right."""
        return all(r.passed for r in self.runs if r.simulated and r.kernel not in RACY)

    def __getitem__(self, kernel: str) -> SimulatedRun:
        for run in self.runs:
            if run.kernel == kernel:
                return run
        raise KeyError(
            f"no kernel named {kernel!r}; kernels: {', '.join(r.kernel for r in self.runs)}"
        )

    def __str__(self) -> str:
        lines = [
            f"CUDA simulator (numba-cuda {self.numba_cuda_version}) against NumPy: "
            f"{self.n}×{self.n} inputs, tiles of {self.block}×{self.block}, seed {self.seed}",
            f"{'kernel':<24}{'size':>16}{'max |error|':>13}{'wrong':>8}  {'verdict':<19}time",
        ]
        notes = []
        for r in self.runs:
            if not r.simulated:
                lines.append(f"{r.kernel:<24}{r.size:>16}{'—':>13}{'—':>8}  {r.verdict}")
                notes.append(f"{r.kernel}: {r.note}")
                continue
            error = "garbage" if r.kernel in RACY and not r.passed else _error_text(r.max_abs_error)
            took = format_duration((r.seconds or 0.0) * 1e3)
            lines.append(
                f"{r.kernel:<24}{r.size:>16}{error:>13}{r.wrong_elements:>8,}  {r.verdict:<19}{took}"
            )
        if any(r.kernel in RACY and r.simulated and not r.passed for r in self.runs):
            notes.append(
                "transpose_tiled_nosync reads tile elements before the threads that own them "
                "have written them: its wrong values are whatever shared memory held "
                "(see race_demo)."
            )
        return "\n".join(lines + notes)


@dataclass(frozen=True)
class RaceDemo:
    """The tiled transpose without ``__syncthreads()``, run several times in the simulator.

    ``wrong_per_run[i]`` counts the elements of run i that differ from the
    true transpose; ``differ_from_first[i]`` counts the elements that are
    wrong in run i but right in run 1, or the other way round (so run 1's
    entry is 0): it compares *where* the runs went wrong, which is what thread
    scheduling decides, not the stale values they read. ``wrong_indices[i]`` lists the flat
    indices of run i's wrong elements (for :func:`plot_race`).
    """

    n: int
    block: int
    seed: int
    start_together: bool
    wrong_per_run: tuple[int, ...]
    differ_from_first: tuple[int, ...]
    wrong_indices: tuple[tuple[int, ...], ...] = field(repr=False)
    seconds: float = 0.0

    @property
    def runs(self) -> int:
        return len(self.wrong_per_run)

    @property
    def elements(self) -> int:
        return self.n * self.n

    @property
    def always_wrong(self) -> bool:
        return all(w > 0 for w in self.wrong_per_run)

    @property
    def runs_disagree(self) -> bool:
        """Whether some run went wrong at other elements than run 1."""
        return any(d > 0 for d in self.differ_from_first)

    @property
    def verdict(self) -> str:
        """One sentence that depends only on the two facts the lesson needs, not on the counts."""
        wrong = (
            f"wrong in all {self.runs} runs"
            if self.always_wrong
            else f"wrong in {sum(w > 0 for w in self.wrong_per_run)} of {self.runs} runs"
        )
        agree = (
            "which elements are wrong changes from run to run"
            if self.runs_disagree
            else "the same elements are wrong in every run"
        )
        return f"transpose_tiled_nosync: {wrong}, and {agree}"

    def __str__(self) -> str:
        how = (
            "threads of a block started together, as on a GPU"
            if self.start_together
            else "threads started one after another (the simulator's default)"
        )
        lines = [
            f"transpose_tiled_nosync (no __syncthreads() between writing and reading the tile), "
            f"{self.n}×{self.n}, tiles of {self.block}×{self.block}, {self.runs} runs ({how}):"
        ]
        for i, (wrong, differ) in enumerate(
            zip(self.wrong_per_run, self.differ_from_first, strict=True), 1
        ):
            line = f"  run {i}: {wrong:,} of {self.elements:,} elements wrong"
            if i > 1:
                line += f"; {differ:,} wrong here but not in run 1, or the reverse"
            lines.append(line)
        lines.append(self.verdict + ".")
        return "\n".join(lines)


# --------------------------------------------------------------------------- arguments


def _check_kernel(kernel: Any) -> str:
    if not isinstance(kernel, str):
        raise TypeError(f"kernel must be a kernel name (str), got {type(kernel).__name__} instead")
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {', '.join(KERNELS)}; got {kernel!r}")
    return kernel


def _check_int(name: str, value: Any, *, low: int, high: int | None = None, why: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} instead")
    value = int(value)
    if value < low or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be {bound}{why}, got {value}")
    return value


def _check_n(n: Any) -> int:
    return _check_int(
        "n",
        n,
        low=1,
        high=MAX_N,
        why=" (the simulator runs one Python thread per CUDA thread: a 64×64 shared-memory "
        "matmul already takes over 10 s on a 2-core machine)",
    )


def _check_block(block: Any) -> int:
    block = _check_int("block", block, low=2, high=32)
    if block not in BLOCK_SIDES:
        raise ValueError(
            f"block must be a power of two from 2 to 32 (the tile side: a block has "
            f"block×block threads, at most 1024), got {block}"
        )
    return block


# --------------------------------------------------------------------------- running


def numba_cuda_version() -> str:
    """The installed numba-cuda's version, read without importing it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("numba-cuda")
    except PackageNotFoundError:
        return "not installed"


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
            [sys.executable, "-m", "labkit.kernels.simulator", json.dumps({"jobs": jobs})],
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
            be a multiple of 16.
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
    timeout_s = _check_timeout(timeout_s)
    (answer,) = _run_worker([job], timeout_s)
    run = _run_from_answer(job, answer)
    if not run.simulated:
        raise SimulatorUnsupported(f"{kernel}: {run.note}")
    return run


def _check_timeout(timeout_s: Any) -> float:
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, numbers.Real):
        raise TypeError(f"timeout_s must be a number of seconds, got {type(timeout_s).__name__}")
    if not (math.isfinite(timeout_s) and float(timeout_s) > 0):
        raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    return float(timeout_s)


def _job(kernel: Any, n: Any, *, seed: Any, block: Any, stride: Any = 2, **extra: Any) -> dict:
    kernel = _check_kernel(kernel)
    n = _check_n(n)
    seed = _check_int("seed", seed, low=0)
    block = _check_block(block)
    stride = _check_int("stride", stride, low=1, high=n * n)
    return {"kernel": kernel, "n": n, "seed": seed, "block": block, "stride": stride, **extra}


def _unmet(job: dict[str, Any]) -> str:
    """Why the .cu's launch rules forbid this job ("" when they allow it)."""
    kernel, n, stride = job["kernel"], job["n"], job["stride"]
    if kernel == "strided_copy" and (n * n) % stride:
        return f"stride must divide the n·n = {n * n:,} elements (strided_copy.cu requires it), got {stride}"
    tile = SGEMM_TILED["BM"]
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
    listed as not simulated unless n is a multiple of 16.
    ``transpose_tiled_nosync`` is expected to come out WRONG: that is its
    lesson. ``reduce_warp_shuffle`` is listed as not simulated where the
    simulator has no warp shuffle. ``print()`` the result for the table.
    """
    names = KERNELS if kernels is None else kernels
    if isinstance(names, str) or not isinstance(names, (tuple, list)) or not names:
        raise TypeError(
            f"kernels must be a non-empty list of kernel names or None, got {kernels!r}"
        )
    unknown = [k for k in names if not isinstance(k, str) or k not in KERNELS]
    if unknown:
        raise ValueError(f"kernels must hold names from {', '.join(KERNELS)}; got {unknown!r}")
    n = _check_n(n)
    jobs = [_job(k, n, seed=seed, block=block, stride=2 if n % 2 == 0 else 1) for k in names]
    timeout_s = _check_timeout(timeout_s)
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
    same in every run; only the first block, which reads uninitialised
    memory, can differ. On a GPU all threads of a block are resident at once
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
    runs = _check_int("runs", runs, low=2, high=50, why=" (the runs are compared with run 1)")
    if not isinstance(start_together, bool):
        raise TypeError(f"start_together must be True or False, got {start_together!r}")
    kernel = "transpose_tiled_nosync"
    job = _job(
        kernel,
        n,
        seed=seed,
        block=block,
        repeat=runs,
        variant="transpose_tiled_nosync_together" if start_together else kernel,
    )
    (answer,) = _run_worker([job], _check_timeout(timeout_s))
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


# --------------------------------------------------------------------------- worker (child process)


def _bind() -> Any:
    """Import numba.cuda in simulator mode and bind the names the kernels use."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        raise RuntimeError("the worker must run with NUMBA_ENABLE_CUDASIM=1")
    import numba
    from numba import cuda as numba_cuda

    if "numba.cuda.simulator" not in sys.modules:  # numba was imported before the variable was set
        raise RuntimeError("numba.cuda is not in simulator mode in the worker")
    globals()["cuda"] = numba_cuda
    globals()["float32"] = numba.float32
    return numba_cuda


def _shuffle_supported() -> bool:
    from numba.cuda.simulator import kernelapi

    return hasattr(kernelapi.FakeCUDAModule, "shfl_down_sync")


def _inputs(kernel: str, n: int, seed: int) -> tuple[np.ndarray, ...]:
    """Synthetic float32 inputs whose correct results are exact (flat, row-major)."""
    rng = np.random.default_rng(seed)
    if kernel.startswith("transpose") or kernel == "strided_copy":
        return (rng.permutation(n * n).astype(np.float32),)  # unique: a misplaced element shows
    if kernel.startswith("sgemm"):
        a = rng.integers(-3, 4, size=n * n).astype(np.float32)
        b = rng.integers(-3, 4, size=n * n).astype(np.float32)
        return a, b
    return (rng.integers(0, 10, size=n * n).astype(np.float32),)


def _launch(
    kernel: str, n: int, block: int, stride: int, inputs: tuple[np.ndarray, ...]
) -> tuple[tuple[Any, Any], tuple[Any, ...], np.ndarray, np.ndarray]:
    """(grid, block), the arguments, the output array and NumPy's answer, as each .cu launches."""
    cdiv = lambda a, b: -(-a // b)  # noqa: E731
    if kernel == "strided_copy":
        (src,) = inputs
        m = src.size // stride
        out = np.zeros_like(src)
        threads = block * block
        cfg = ((cdiv(m, threads * ITEMS_PER_THREAD), stride), (threads, 1))
        return cfg, (src, out, src.size, stride), out, src.reshape(m, stride).T.ravel()
    if kernel.startswith("transpose"):
        (src,) = inputs
        out = np.zeros_like(src)
        cfg = ((cdiv(n, block), cdiv(n, block)), (block, max(1, block // 4)))
        return cfg, (src, out, n, n), out, src.reshape(n, n).T.ravel()
    if kernel.startswith("sgemm"):
        a, b = inputs
        out = np.zeros_like(a)
        want = a.reshape(n, n).astype(np.float64) @ b.reshape(n, n).astype(np.float64)
        if kernel == "sgemm_tiled":
            t = SGEMM_TILED
            cfg = ((n // t["BN"], n // t["BM"]), ((t["BM"] // t["TM"]) * (t["BN"] // t["TN"]), 1))
        else:
            cfg = ((cdiv(n, block), cdiv(n, block)), (block, block))
        return cfg, (a, b, out, n, n, n), out, want.astype(np.float32).ravel()
    (x,) = inputs
    out = np.zeros(1, dtype=np.float32)
    want = np.array([x.astype(np.float64).sum()], dtype=np.float32)
    threads = block * block
    if kernel == "reduce_shared":
        grid = cdiv(x.size, 2 * threads)
    elif kernel == "reduce_warp_shuffle":
        grid = max(1, min(4, cdiv(x.size, threads)))  # a small fixed grid: the loop covers n
    else:
        grid = cdiv(x.size, threads)
    return (grid, threads), (x, out, x.size), out, want


def _execute(job: dict[str, Any], kernels_by_tile: dict[int, dict[str, Any]]) -> dict[str, Any]:
    kernel, n, block, stride = job["kernel"], job["n"], job["block"], job["stride"]
    if kernel == "reduce_warp_shuffle" and not _shuffle_supported():
        return {"simulated": False, "note": _NO_SHUFFLE.format(version=numba_cuda_version())}
    if block not in kernels_by_tile:
        kernels_by_tile[block] = {k: cuda.jit(f) for k, f in _kernels(block).items()}
    fn = kernels_by_tile[block][job.get("variant", kernel)]
    inputs = _inputs(kernel, n, job["seed"])
    outputs, seconds, expected = [], 0.0, None
    for _ in range(job.get("repeat", 1)):
        cfg, args, out, expected = _launch(kernel, n, block, stride, inputs)
        start = time.perf_counter()  # the cost of one simulation, not a benchmark
        fn[cfg](*args)
        seconds += time.perf_counter() - start
        outputs.append(out.tolist())
    if expected is None:  # repeat < 1: nothing ran
        raise ValueError(f"job {job!r} ran no launch (repeat must be at least 1)")
    return {
        "simulated": True,
        "outputs": outputs,
        "expected": expected.tolist(),
        "seconds": seconds,
    }


def _worker_main(argv: list[str]) -> int:
    try:
        request = json.loads(argv[0])
        _bind()
        kernels_by_tile: dict[int, dict[str, Any]] = {}
        results = [_execute(job, kernels_by_tile) for job in request["jobs"]]
    except Exception as exc:  # reported to the parent as one line of JSON
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        return 0
    print(json.dumps({"results": results}, allow_nan=True))
    return 0


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
