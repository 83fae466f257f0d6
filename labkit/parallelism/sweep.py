"""Throughput versus latency: size sweeps across backends, launch overhead, the CPU/GPU crossover.

A GPU is a throughput machine. It runs tens of thousands of threads at once,
but every kernel launch costs microseconds before any of them start. So a
small problem runs *slower* on a GPU than on the CPU next to it, and only past
some size (the crossover) does the GPU pull ahead. The same trade-off shows on
a CPU between one thread and all of them: threads cost a fork and a join,
which only pays off once there is enough work to share.

:func:`sweep_add` and :func:`sweep_matmul` measure this: the same operation at
increasing sizes, on each backend (a pure-Python loop, NumPy, torch on one
thread, torch on every core, torch on CUDA where a GPU exists), timed with
:func:`labkit.bench`. :meth:`SizeSweep.crossover` finds where the GPU
overtakes the CPU (:mod:`labkit.parallelism.crossover`, which also measures the launch
overhead); thread scaling and Amdahl's law live in :mod:`labkit.parallelism.amdahl`.

torch and numpy are imported inside the functions that use them.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from labkit.core.optional import import_optional
from labkit.core.units import format_gflop_per_s, format_rate, round3
from labkit.core.validate import check_choice, check_ms, check_positive_int, check_sizes
from labkit.machine import memory as _memory
from labkit.parallelism import python_loops
from labkit.parallelism.crossover import crossover_size
from labkit.parallelism.threads import cpu_threads, numpy_blas_threads, torch_threads
from labkit.timing.bench import Timing, bench

#: The operations a size sweep can run.
OPS: tuple[str, ...] = ("add", "matmul")

#: Backend keys, in the order sweeps run and tables print them.
BACKENDS: tuple[str, ...] = (
    "python",
    "numpy",
    "torch-1-thread",
    "torch-all-threads",
    "torch-cuda",
)

#: Default sizes: elements of ``a + b`` (1 to 16,777,216, ×4 each step), and
#: n of an n×n matmul (1 to 2048, ×2 each step). Chosen so each default sweep
#: takes well under 20 s on a 2-core laptop and still shows both regimes.
DEFAULT_SIZES: dict[str, tuple[int, ...]] = {
    "add": tuple(4**k for k in range(13)),
    "matmul": tuple(2**k for k in range(12)),
}

#: The largest size the pure-Python loop runs by default (about 50 ms a call
#: on a laptop). A fixed size rather than a time limit keeps the table the
#: same on every machine; ``python_max_call_ms`` is only a safety net.
PYTHON_MAX_SIZE: dict[str, int] = {"add": 4**10, "matmul": 64}

_DTYPES = ("float32", "float64")
#: How the time of each op grows with its size: used to predict (and skip)
#: a pure-Python call that would take too long.
_GROWTH_EXPONENT = {"add": 1, "matmul": 3}

# --------------------------------------------------------------------------- threads


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class SweepPoint:
    """One backend at one size: the median time and the throughput it implies.

    ``elements_per_s`` counts output elements (n for ``a + b``, n² for an n×n
    matmul); ``gflop_per_s`` counts floating-point operations (n additions,
    or n³ multiply-adds = 2n³ FLOPs for the matmul).
    """

    size: int
    median_ms: float
    elements_per_s: float
    gflop_per_s: float
    timing: Timing


@dataclass(frozen=True)
class BackendSweep:
    """Every size one backend ran, in increasing order, and the sizes it skipped."""

    backend: str
    label: str
    device: str
    points: tuple[SweepPoint, ...]
    skipped: tuple[int, ...] = ()
    #: The line printed when this backend ran out of memory and stopped early ("" if not).
    out_of_memory: str = ""

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(p.size for p in self.points)

    def point(self, size: int) -> SweepPoint | None:
        """The point measured at ``size``, or None if this backend skipped it."""
        return next((p for p in self.points if p.size == size), None)


@dataclass(frozen=True)
class SizeSweep:
    """One operation swept over sizes on several backends (``str()`` gives a table)."""

    op: str
    dtype: str
    sizes: tuple[int, ...]
    backends: tuple[BackendSweep, ...]

    @property
    def metric(self) -> str:
        """The throughput field that suits the op: "elements_per_s" or "gflop_per_s"."""
        return "gflop_per_s" if self.op == "matmul" else "elements_per_s"

    @property
    def metric_unit(self) -> str:
        return "GFLOP/s" if self.op == "matmul" else "elements/s"

    def has_backend(self, key: str) -> bool:
        return any(b.backend == key for b in self.backends)

    def backend(self, key: str) -> BackendSweep:
        """The results of one backend, by key ("numpy", "torch-cuda", ...)."""
        keys = [b.backend for b in self.backends]
        return self.backends[keys.index(check_choice("backend", key, keys))]

    def crossover(self, slow: str = "torch-all-threads", fast: str = "torch-cuda") -> float | None:
        """The size from which ``fast`` stays faster than ``slow`` (see :func:`crossover_size`)."""
        a, b = self.backend(slow), self.backend(fast)
        common = [s for s in a.sizes if b.point(s) is not None]
        if not common:
            return None
        return crossover_size(
            common,
            [a.point(s).median_ms for s in common],  # type: ignore[union-attr]
            [b.point(s).median_ms for s in common],  # type: ignore[union-attr]
        )

    def __str__(self) -> str:
        what = "a + b" if self.op == "add" else "n×n matmul"
        header = ["n", *(b.label for b in self.backends)]
        rows = [header]
        for size in self.sizes:
            row = [str(size)]
            for result in self.backends:
                point = result.point(size)
                if point is None:
                    row.append("—")
                elif not math.isfinite(point.median_ms) or point.median_ms <= 0:
                    row.append("too fast to time")
                elif self.op == "matmul":
                    row.append(format_gflop_per_s(point.gflop_per_s))
                else:
                    row.append(format_rate(point.elements_per_s, "elements/s"))
            rows.append(row)
        widths = [max(len(r[c]) for r in rows) for c in range(len(header))]
        lines = [f"{what} ({self.dtype}), throughput by size"]
        noisy_rows = {
            size
            for size in self.sizes
            for result in self.backends
            if (point := result.point(size)) is not None and point.timing.noisy
        }
        for i, r in enumerate(rows):
            line = "  ".join(cell.rjust(w) for cell, w in zip(r, widths, strict=True))
            lines.append(line + (" *" if i > 0 and self.sizes[i - 1] in noisy_rows else ""))
        lines.append(
            "Each cell is one median (labkit.bench), measured once; section 2b of notebook 01 "
            "repeats interleaved rounds to show the spread between runs."
        )
        if noisy_rows:
            lines.append("* noisy: in this row at least one IQR is more than 10% of its median")
        if self.has_backend("torch-cuda") and self.has_backend("torch-all-threads"):
            crossover = self.crossover()
            lines.append(
                "The GPU is not faster at any size measured here."
                if crossover is None
                else f"The GPU is faster than the CPU (all threads) from n ≈ {round3(crossover):,} on."
            )
        return "\n".join(lines)


# --------------------------------------------------------------------------- sweeps


def available_backends() -> tuple[str, ...]:
    """The backends a default sweep runs here: all of them, "torch-cuda" only with a GPU."""
    from labkit.machine.gpu import has_gpu

    return BACKENDS if has_gpu() else BACKENDS[:-1]


def backend_label(backend: str, op: str | None = None) -> str:
    """How tables and legends name a backend: "torch, 2 threads", "torch, CUDA", ...

    With ``op="matmul"`` NumPy's label gives its BLAS thread count
    (:func:`~labkit.parallelism.threads.numpy_blas_threads`), since that
    matmul runs on BLAS's own pool, not torch's: "NumPy (BLAS, 2 threads)",
    or "NumPy (BLAS, default threads)" when nothing sets it. NumPy's add
    runs on one thread.
    """
    threads = cpu_threads()
    numpy_label = "NumPy"
    if op is not None and check_choice("op", op, OPS) == "matmul":
        blas = numpy_blas_threads()
        numpy_label = (
            "NumPy (BLAS, default threads)"
            if blas is None
            else f"NumPy (BLAS, {blas} thread{'s' if blas > 1 else ''})"
        )
    labels = {
        "python": "Python loop (float64)",  # Python floats, whatever the sweep's dtype
        "numpy": numpy_label,
        "torch-1-thread": "torch, 1 thread",
        "torch-all-threads": f"torch, {threads} thread{'s' if threads > 1 else ''}",
        "torch-cuda": "torch, CUDA",
    }
    return labels[check_choice("backend", backend, BACKENDS)]


def sweep_add(
    sizes: Sequence[int] | None = None,
    backends: Sequence[str] | None = None,
    *,
    dtype: str = "float32",
    warmup_ms: float = 10.0,
    rep_ms: float = 40.0,
    python_max_size: int | None = None,
    python_max_call_ms: float = 1000.0,
    show_progress: bool | None = None,
) -> SizeSweep:
    """Time ``c = a + b`` on n-element vectors at each n on each backend; see :func:`sweep`.

    GPU times are compute only: the data already lives on the GPU, so a
    host-to-device copy is not in them (notebook 02 measures what it costs).
    """
    return sweep(
        "add",
        sizes,
        backends,
        dtype=dtype,
        warmup_ms=warmup_ms,
        rep_ms=rep_ms,
        python_max_size=python_max_size,
        python_max_call_ms=python_max_call_ms,
        show_progress=show_progress,
    )


def sweep_matmul(
    sizes: Sequence[int] | None = None,
    backends: Sequence[str] | None = None,
    *,
    dtype: str = "float32",
    warmup_ms: float = 10.0,
    rep_ms: float = 40.0,
    python_max_size: int | None = None,
    python_max_call_ms: float = 1000.0,
    show_progress: bool | None = None,
) -> SizeSweep:
    """Time ``C = A @ B`` for n×n matrices at each n on each backend; see :func:`sweep`.

    GPU times are compute only: the data already lives on the GPU, so a
    host-to-device copy is not in them (notebook 02 measures what it costs).
    """
    return sweep(
        "matmul",
        sizes,
        backends,
        dtype=dtype,
        warmup_ms=warmup_ms,
        rep_ms=rep_ms,
        python_max_size=python_max_size,
        python_max_call_ms=python_max_call_ms,
        show_progress=show_progress,
    )


def sweep(
    op: str,
    sizes: Sequence[int] | None = None,
    backends: Sequence[str] | None = None,
    *,
    dtype: str = "float32",
    warmup_ms: float = 10.0,
    rep_ms: float = 40.0,
    python_max_size: int | None = None,
    python_max_call_ms: float = 1000.0,
    show_progress: bool | None = None,
) -> SizeSweep:
    """Time ``op`` ("add" or "matmul") at every size on every backend.

    Args:
        op: "add" (``c = a + b`` on vectors of n elements) or "matmul" (n×n).
        sizes: the n to run; default :data:`DEFAULT_SIZES`. Sorted, duplicates dropped.
        backends: keys from :data:`BACKENDS`; default :func:`available_backends`.
        dtype: "float32" or "float64". The Python loop always computes in
            Python floats, which are float64: its column says so.
        warmup_ms, rep_ms: :func:`labkit.bench`'s budgets per point. Small
            defaults keep a sweep short; every point still gets >= 5 samples.
        python_max_size: the largest n the Python loop runs (default
            :data:`PYTHON_MAX_SIZE`): beyond it a loop would take seconds.
        python_max_call_ms: also skip a Python size whose call is predicted
            (from the previous size) to take longer than this.
        show_progress: a progress bar; None follows :mod:`labkit.core.progress`.

    Inputs are seeded by the size, so every backend gets the same numbers;
    each backend's result is checked against float64 NumPy before it is timed
    (a + b at up to 65,536 elements, matmuls up to n = 512). NumPy's and
    torch's outputs are preallocated (``out=``), so their time is the
    arithmetic, not the allocator; the Python loop builds a new list on
    every call, as Python code would. GPU
    times are compute only: the data already lives on the GPU. All backends
    run at one size before the next size starts, so a burst of background
    load distorts neighbouring points of every curve rather than one curve.
    Each point is one median, measured once: the table marks a row whose
    IQR exceeds 10% of a median, and :mod:`labkit.parallelism.grain` shows
    how to get a spread between runs (interleaved rounds). NumPy's matmul
    runs on its BLAS library's threads (its label says how many).
    """
    from labkit.core.progress import progress

    check_choice("op", op, OPS)
    sizes_t = check_sizes(DEFAULT_SIZES[op] if sizes is None else sizes)
    keys = _check_backends(available_backends() if backends is None else backends)
    check_choice("dtype", dtype, _DTYPES)
    warmup = check_ms("warmup_ms", warmup_ms, allow_zero=True)
    rep = check_ms("rep_ms", rep_ms)
    py_max = PYTHON_MAX_SIZE[op] if python_max_size is None else python_max_size
    py_max = check_positive_int("python_max_size", py_max)
    py_cap_ms = check_ms("python_max_call_ms", python_max_call_ms)

    over = _over_budget(op, keys, sizes_t, dtype, py_max, named=sizes is not None)

    points: dict[str, list[SweepPoint]] = {k: [] for k in keys}
    skipped: dict[str, list[int]] = {k: [] for k in keys}
    stopped: dict[str, str] = {}
    pairs = [(key, size) for size in sizes_t for key in keys]
    for key, size in progress(pairs, desc=f"{op} sweep", total=len(pairs), show=show_progress):
        if (
            key in stopped
            or (key, size) in over
            or (key == "python" and _python_too_slow(op, size, points[key], py_max, py_cap_ms))
        ):
            skipped[key].append(size)
            continue
        timing: Timing | None = None
        try:
            with _backend_threads(key):
                case = _make_case(op, key, size, dtype)
                case.check()
                timing = bench(
                    case.fn,
                    warmup_ms=warmup,
                    rep_ms=rep,
                    device=case.device,
                    label=f"{backend_label(key)}: {op} {size}",
                    warn=False,
                )
                del case  # before the next size's inputs are made, not after
        except Exception as exc:  # out of memory ends that backend's curve, nothing else
            if not _memory.is_out_of_memory(exc):
                raise
        if timing is None:
            skipped[key].append(size)
            done = points[key]
            stopped[key] = _memory.out_of_memory_message(
                f"{op} sweep on {backend_label(key)}",
                f"n={size:,}",
                f"n={done[-1].size:,}" if done else None,
                _device_of(key),
            )
            _memory.release_memory(_device_of(key))
            print(stopped[key])
            continue
        points[key].append(_point(op, size, timing))
    results = tuple(
        BackendSweep(
            backend=key,
            label=backend_label(key, op),
            device=_device_of(key),
            points=tuple(points[key]),
            skipped=tuple(skipped[key]),
            out_of_memory=stopped.get(key, ""),
        )
        for key in keys
    )
    return SizeSweep(op=op, dtype=dtype, sizes=sizes_t, backends=results)


def _bytes_needed(op: str, key: str, size: int, dtype: str) -> tuple[int, int]:
    """(host bytes, GPU bytes) one point of a sweep holds at most (see :func:`_make_case`).

    Host: a, b and c, the float64 draw each input is made from, and the
    float64 copy of the result the check compares; the check's picks,
    reference and temporaries (at most 65,536 elements, about 48 B each,
    measured with tracemalloc); a matmul up to n = 512 adds its float64
    reference; the Python loop its inputs and result as lists of Python
    floats (8 B pointer + 24 B float each). GPU: a, b and c.
    """
    elements = size if op == "add" else size * size
    item = 4 if dtype == "float32" else 8
    host = (3 * item + 20) * elements + 48 * min(elements, 65_536)
    if op == "matmul" and size <= 512:
        host += 24 * elements
    if key == "python":
        host += 3 * 32 * elements
    return host, (3 * item * elements if key == "torch-cuda" else 0)


def _over_budget(
    op: str, keys: Sequence[str], sizes: Sequence[int], dtype: str, py_max: int, *, named: bool
) -> set[tuple[str, int]]:
    """The (backend, size) points that do not fit the memory budget, with one warning for them.

    A user's ``sizes`` of which nothing fits, or with a size larger than the
    machine's whole memory, raise :class:`~labkit.machine.memory.MemoryBudgetError` first.
    """
    import warnings

    budgets = {"cpu": _memory.budget_bytes(device="cpu")}
    if "torch-cuda" in keys:
        budgets["cuda"] = _memory.budget_bytes(device="cuda")
    runnable = [(k, n) for n in sizes for k in keys if not (k == "python" and n > py_max)]
    needs = {point: _bytes_needed(op, *point, dtype) for point in runnable}
    over = {
        point
        for point, (host, gpu) in needs.items()
        if host > budgets["cpu"] or gpu > budgets.get("cuda", 0)
    }
    if named:  # a size beyond all the machine's memory is a mistake in the argument
        total = _memory.total_bytes("cpu")
        for (_key, size), (host, _) in needs.items():
            if host > total and all(needs[k, n][0] > total for k, n in needs if n == size):
                _memory.require_fits(
                    host,
                    what=f"the {op} sweep at n={size:,} (more than the "
                    f"{_memory.format_bytes(total)} this machine has in all)",
                    name="sizes",
                )
    if runnable and over == set(needs):
        key, size = min(runnable, key=lambda point: needs[point][0])
        what = f"the {op} sweep at its smallest n={size:,} ({backend_label(key)})"
        host, gpu = needs[key, size]
        _memory.require_fits(host, what=what, name="sizes")
        if gpu:
            _memory.require_fits(gpu, device="cuda", what=what, name="sizes")
    if over:
        firsts = {
            key: min(s for k, s in over if k == key)
            for key in keys
            if any(k == key for k, _ in over)
        }
        warnings.warn(
            f"{op} sweep: skipped the points that do not fit {_memory.DEFAULT_FRACTION:.0%} of "
            "the free memory (listed in each backend's skipped): "
            + ", ".join(f"{backend_label(k)} from n={n:,}" for k, n in firsts.items())
            + ". Close other programs to measure larger sizes.",
            _memory.MemoryBudgetWarning,
            stacklevel=3,
        )
    return over


def _check_backends(backends: Sequence[str]) -> tuple[str, ...]:
    backends = (backends,) if isinstance(backends, str) else backends  # one name: not its letters
    if len(backends) == 0:
        raise ValueError(
            f"backends must be a non-empty list of backend names ({', '.join(BACKENDS)}), "
            f"got {backends!r}"
        )
    for i, key in enumerate(backends):
        check_choice(f"backends[{i}]", key, BACKENDS)
    if "torch-cuda" in backends:
        from labkit.machine.gpu import has_gpu

        if not has_gpu():
            raise ValueError(
                "backends contains 'torch-cuda' but this machine has no CUDA GPU that torch "
                "can use; leave backends=None to sweep what is available (`labkit doctor` "
                "explains why no GPU is visible)"
            )
    return tuple(k for k in BACKENDS if k in backends)  # canonical order, no duplicates


def _python_too_slow(
    op: str, size: int, done: list[SweepPoint], max_size: int, max_call_ms: float
) -> bool:
    if size > max_size:
        return True
    if not done:
        return False
    last = done[-1]
    predicted_ms = last.median_ms * (size / last.size) ** _GROWTH_EXPONENT[op]
    return predicted_ms > max_call_ms


def _backend_threads(key: str) -> contextlib.AbstractContextManager[None]:
    if key == "torch-1-thread":
        return torch_threads(1)
    if key == "torch-all-threads":
        return torch_threads(cpu_threads())
    return contextlib.nullcontext()


def _device_of(key: str) -> str:
    return "cuda" if key == "torch-cuda" else "cpu"


def _point(op: str, size: int, timing: Timing) -> SweepPoint:
    seconds = timing.median_ms / 1e3
    elements = size if op == "add" else size * size
    flops = size if op == "add" else 2 * size**3
    return SweepPoint(
        size=size,
        median_ms=timing.median_ms,
        elements_per_s=elements / seconds if seconds > 0 else math.inf,
        gflop_per_s=flops / seconds / 1e9 if seconds > 0 else math.inf,
        timing=timing,
    )


@dataclass(frozen=True)
class _Case:
    fn: Callable[[], Any]
    check: Callable[[], None]
    device: str


def _make_case(op: str, key: str, size: int, dtype: str) -> _Case:
    """The work for one backend at one size, and a check of its result against float64 NumPy."""
    np = import_optional("numpy", "size sweeps")
    rng = np.random.default_rng(size)
    shape = (size,) if op == "add" else (size, size)
    a_np = rng.standard_normal(shape).astype(dtype)
    b_np = rng.standard_normal(shape).astype(dtype)
    # The check costs little next to the timing: a + b is compared at up to
    # 65,536 evenly spaced elements, and a matmul only up to n = 512 (beyond
    # that, computing the reference would cost as much as the sweep).
    picks = np.linspace(0, a_np.size - 1, min(a_np.size, 65_536)).astype(np.int64)
    reference = None
    if op == "add":
        reference = a_np.ravel()[picks].astype(np.float64) + b_np.ravel()[picks]
    elif size <= 512:
        reference = (a_np.astype(np.float64) @ b_np.astype(np.float64)).ravel()[picks]

    def checker(get_result: Callable[[], Any]) -> Callable[[], None]:
        def check() -> None:
            if reference is None:
                return
            result = np.asarray(get_result(), dtype=np.float64)
            scale = 1.0 if op == "add" else math.sqrt(size)  # a dot product of n N(0,1) terms
            if result.shape != shape or not np.allclose(
                result.ravel()[picks], reference, rtol=1e-3, atol=1e-3 * scale
            ):
                raise RuntimeError(
                    f"{backend_label(key)} computed a wrong {op} at n={size}; labkit's sweep "
                    "refuses to time an incorrect result. Please report this as a bug."
                )

        return check

    if key == "python":
        a_py, b_py = a_np.tolist(), b_np.tolist()
        fn = (
            (lambda: python_loops.add(a_py, b_py))
            if op == "add"
            else (lambda: python_loops.matmul(a_py, b_py))
        )
        return _Case(fn, checker(fn), "cpu")
    if key == "numpy":
        c_np = np.empty_like(a_np)
        ufunc = np.add if op == "add" else np.matmul

        def numpy_fn() -> Any:
            return ufunc(a_np, b_np, out=c_np)

        return _Case(numpy_fn, checker(lambda: (numpy_fn(), c_np)[1]), "cpu")
    torch = import_optional("torch", "size sweeps")
    device = _device_of(key)
    a = torch.from_numpy(a_np).to(device)
    b = torch.from_numpy(b_np).to(device)
    c = torch.empty_like(a)
    torch_op = torch.add if op == "add" else torch.matmul

    def torch_fn() -> Any:
        return torch_op(a, b, out=c)

    return _Case(torch_fn, checker(lambda: (torch_fn(), c.cpu().numpy())[1]), device)
