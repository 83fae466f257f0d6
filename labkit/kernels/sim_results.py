"""What a simulated kernel run returns: its output checked against NumPy, a verification table, the race demo."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from labkit.core.units import format_duration

#: Kernels that are wrong on purpose: a data race on shared memory.
RACY: frozenset[str] = frozenset({"transpose_tiled_nosync"})


#: sgemm_tiled's tiles in the simulator: the smallest that sgemm.cu's static_asserts accept
#: with a group stride that matters (tests/test_kernels_simulator.py evaluates them). The .cu
#: defaults, 128/128/8/8/8, would need 256 Python threads per block and n a multiple of 128.
#: Here one warp (32 threads) computes a 32×32 tile of C, each thread an 8×4 micro-tile whose
#: two groups of 4 rows lie BM / (TM / 4) = 16 rows apart. n must be a multiple of 32.
SGEMM_TILED: dict[str, int] = {"BM": 32, "BN": 32, "BK": 8, "TM": 8, "TN": 4}


_ONE_D = frozenset({"strided_copy", "reduce_atomic", "reduce_shared", "reduce_warp_shuffle"})


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
            f"{self.n}×{self.n} inputs, tiles of {self.block}×{self.block} (sgemm_tiled: "
            f"{SGEMM_TILED['BM']}×{SGEMM_TILED['BN']} tiles of C), seed {self.seed}",
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


def numba_cuda_version() -> str:
    """The installed numba-cuda's version, read without importing it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("numba-cuda")
    except PackageNotFoundError:
        return "not installed"
