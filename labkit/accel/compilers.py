"""Compilers: ``torch.compile`` and XLA, with the compile time kept apart.

A compiler fuses a chain of elementwise ops into one kernel, so the data is
read and written once instead of once per op: for memory-bound work that is
the whole speedup. The price is paid up front: the first call traces and
compiles (on the CPU, ``torch.compile`` runs a C++ compiler), unless its
on-disk caches already hold the result. A fair benchmark therefore reports
eager (without page faults, which fusion would otherwise be credited with
removing), the first compiled call with cold and with warm caches, the
compiled steady state, and how many calls it takes for the compile to pay
for itself.

XLA (``tf.function(jit_compile=True)``) is the TensorFlow counterpart. On a
CPU it can be *slower* than TensorFlow's ordinary graph mode. Measure, don't
assume.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from labkit.accel.common import ratio, round_median_ms, seconds, times
from labkit.core.optional import import_optional, import_tensorflow
from labkit.core.units import format_duration
from labkit.core.validate import check_ms, check_positive_int, check_torch_device
from labkit.machine.memory import require_memory_fits
from labkit.machine.report import resolve_torch_device
from labkit.timing.bench import Timing


@dataclass(frozen=True)
class CompileResult:
    """Eager vs compiled: steady-state timings and the one-off first-call costs.

    ``first_call_s`` is the first call of the compiled function with empty
    compile caches (tracing + compilation + one run); ``warm_first_call_s``
    the first call of a second compilation in the same process, after
    ``torch._dynamo.reset()``, served from the caches the first one filled;
    ``new_shape_first_call_s`` the first call on an input of another size
    (a recompile). ``eager`` and ``compiled`` are steady-state timings, taken
    round-robin with freed memory kept in the process, so neither pays page
    faults; ``eager_as_allocated`` is eager with glibc returning freed memory
    to the OS, and ``faults_per_call`` the page faults per call of both eager
    runs. ``break_even_calls`` is how many calls the cold compile needs to pay
    for itself (None if the compiled version is not faster).
    """

    framework: str
    compiler: str
    elements: int | None
    eager: Timing
    compiled: Timing
    first_call_s: float
    warm_first_call_s: float | None = None
    new_shape_first_call_s: float | None = None
    eager_as_allocated: Timing | None = None
    faults_per_call: dict[str, float | None] | None = None
    rounds: Any = None  # labkit.timing.interleave.Interleaved (eager vs compiled)
    startup_s: float | None = None
    arrays_moved: tuple[int, int] | None = None  # (eager, fused), for the default chain

    @property
    def eager_median_ms(self) -> float:
        return round_median_ms(self.eager, self.rounds)

    @property
    def compiled_median_ms(self) -> float:
        return round_median_ms(self.compiled, self.rounds)

    @property
    def speedup(self) -> float:
        if self.rounds is not None:
            return float(self.rounds["compiled"].ratio)
        return ratio(self.eager.median_ms, self.compiled.median_ms)

    def _savings_ms(self) -> list[float]:
        """Eager minus compiled, per round (one value for a result built by hand)."""
        if self.rounds is None:
            return [self.eager.median_ms - self.compiled.median_ms]
        eager, compiled = self.rounds["eager"].runs, self.rounds["compiled"].runs
        return [e.median_ms - c.median_ms for e, c in zip(eager, compiled, strict=True)]

    def _break_even(self, first_call_s: float) -> int | None:
        saved_ms = statistics.median(self._savings_ms())
        if saved_ms <= 0:
            return None
        return int(-(-(first_call_s * 1e3) // saved_ms))

    def break_even_range(self, first_call_s: float) -> tuple[int, int] | None:
        """Calls to repay ``first_call_s`` at the largest and at the smallest per-round saving.

        None when some round saved nothing: the compile may then never pay off.
        """
        saved = self._savings_ms()
        if min(saved) <= 0:
            return None
        ms = first_call_s * 1e3
        return int(-(-ms // max(saved))), int(-(-ms // min(saved)))

    @property
    def break_even_calls(self) -> int | None:
        return self._break_even(self.first_call_s)

    @property
    def warm_break_even_calls(self) -> int | None:
        return None if self.warm_first_call_s is None else self._break_even(self.warm_first_call_s)

    def timings(self) -> list[Timing]:
        return [self.eager, self.compiled]

    def _per_fault(self) -> str:
        """The extra time of returning freed memory, per extra page fault (", X per fault")."""
        if self.eager_as_allocated is None or self.faults_per_call is None:
            return ""
        returned, kept = self.faults_per_call.get("returned"), self.faults_per_call.get("kept")
        if returned is None or kept is None or returned - kept < 1:
            return ""
        extra_ms = self.eager_as_allocated.median_ms - self.eager_median_ms
        if extra_ms <= 0:  # returning the memory cost nothing measurable: noise, not a cost
            return "; no cost measurable here"
        return f"; {format_duration(extra_ms / (returned - kept))} more per extra fault"

    def _rates(self) -> str:
        """The GB/s each version reaches on the arrays it must move (the default chain only)."""
        if self.arrays_moved is None or self.elements is None:
            return ""
        eager_arrays, fused_arrays = self.arrays_moved
        eager_ms, compiled_ms = self.eager_median_ms, self.compiled_median_ms
        elements = self.elements

        def rate(arrays: int, ms: float) -> float:
            return arrays * 4 * elements / (ms * 1e-3) / 1e9 if ms > 0 else 0.0

        return (
            f"  memory traffic: eager {eager_arrays} arrays of {self.elements:,} float32 at "
            f"{rate(eager_arrays, eager_ms):.1f} GB/s, compiled {fused_arrays} at "
            f"{rate(fused_arrays, compiled_ms):.1f} GB/s (compare with notebook 02's bandwidth)"
        )

    def __str__(self) -> str:
        speed = times(self.speedup)
        if self.rounds is not None:
            runs = self.rounds["compiled"]
            speed += f" ({times(runs.ratio_low)} to {times(runs.ratio_high)} per round)"
        lines = [f"{self.compiler} ({self.framework}):"]
        if self.eager_as_allocated is not None and self.faults_per_call is not None:
            faults = self.faults_per_call
            lines.append(
                f"  eager, freed memory returned to the OS  "
                f"{format_duration(self.eager_as_allocated.median_ms)}  "
                f"({_faults(faults.get('returned'))} page faults per call"
                f"{self._per_fault()})"
            )
            lines.append(
                f"  eager, freed memory kept                {format_duration(self.eager_median_ms)}"
                f"  ({_faults(faults.get('kept'))} page faults per call)"
            )
        else:
            lines.append(f"  eager                   {format_duration(self.eager_median_ms)}")
        lines.append(
            f"  compiled, steady state  {format_duration(self.compiled_median_ms)}  "
            f"({speed} the speed of eager with freed memory kept)"
        )
        rates = self._rates()
        if rates:
            lines.append(rates)
        if self.startup_s is not None:
            lines.append(
                f"  first torch.compile in this process  {seconds(self.startup_s)}  "
                "(a one-op function: Inductor's one-off start-up in a process)"
            )
        lines.append(
            f"  compiled, first call, cold caches  {seconds(self.first_call_s)}  "
            "(trace + compile + run; what a new or changed function pays)"
        )
        if self.warm_first_call_s is not None:
            lines.append(
                f"  compiled, first call, warm caches  {seconds(self.warm_first_call_s)}  "
                "(compiled again in this process after torch._dynamo.reset())"
            )
        if self.new_shape_first_call_s is not None:
            lines.append(
                f"  first call on a new input size     {seconds(self.new_shape_first_call_s)}"
                "  (a recompile)"
            )
        lines.append(self._break_even_line())
        return "\n".join(lines)

    def _break_even_line(self) -> str:
        if self.break_even_calls is None:
            return "  the compiled version is not faster here: compiling never pays off"
        cold = self.break_even_range(self.first_call_s)
        if cold is None:
            return (
                f"  the cold compile pays for itself after n={self.break_even_calls} calls at the "
                "median saving, but one round saved nothing, so it may never pay off"
            )
        text = f"  the cold compile pays for itself after n={cold[0]} to n={cold[1]} calls"
        warm = (
            None
            if self.warm_first_call_s is None
            else self.break_even_range(self.warm_first_call_s)
        )
        if warm is not None:
            text += f", the warm one after n={warm[0]} to n={warm[1]}"
        return text + " (from the largest and the smallest per-round saving)"


def _faults(value: float | None) -> str:
    return "?" if value is None else f"{value:,.0f}"


#: Arrays of the chain's size that :func:`elementwise_chain` reads and writes: eagerly each op
#: reads its inputs and writes its output (2 + 2 + 2 + 2 + 3); fused, x and y in and one out.
CHAIN_ARRAYS = (11, 3)


def _one_op(t: Any) -> Any:
    return t + 1


def elementwise_chain(x: Any, y: Any) -> Any:
    """(x * 2 + 1).relu().sin() * y: five elementwise ops that fusion turns into one pass."""
    return (x * 2 + 1).relu().sin() * y


def torch_compile_benchmark(
    fn: Callable[..., Any] | None = None,
    *args: Any,
    size: int = 4_000_000,
    compiler: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None,
    device: Any = None,
    run: bool = True,
    rounds: int = 2,
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
) -> CompileResult | None:
    """Time ``fn(*args)`` eager and under ``torch.compile``, compile time apart.

    Args:
        fn, *args: the workload; by default :func:`elementwise_chain` on two
            float32 vectors of ``size`` elements (and, for the recompile, on
            two of ``size + 1``).
        compiler: what compiles ``fn`` (default ``torch.compile``). Tests pass a
            cheap one; a notebook could pass ``functools.partial(torch.compile,
            mode="max-autotune")``.
        run: False prints why it was skipped and returns None.

    Inductor keeps its compiled code in an on-disk cache (``fx_graph_cache``
    and the AOTAutograd cache are on by default) that ``torch._dynamo.reset()``
    does not clear, so the cold first call is made with
    ``TORCHINDUCTOR_CACHE_DIR`` pointed at a new, empty directory, and the
    warm one after ``torch._dynamo.reset()`` with the same directory. The
    compiled result is checked against eager. Eager is timed with freed
    memory returned to the OS and kept (:func:`labkit.timing.allocation.compare_allocation`);
    the speedup is taken against the kept one, round-robin with the compiled
    function, so that page faults do not count as a gain of fusion.
    """
    if fn is not None and not args:
        raise ValueError(
            "fn was given without arguments: pass them as torch_compile_benchmark(fn, x, y)"
        )
    size = check_positive_int("size", size)
    rounds = check_positive_int("rounds", rounds)
    warmup_ms, rep_ms = check_ms("warmup_ms", warmup_ms), check_ms("rep_ms", rep_ms)
    check_torch_device(device)
    torch = import_optional("torch", "the torch.compile benchmark")
    if not run:
        print(
            "Skipped: torch.compile's first call takes seconds on a CPU; pass run=True to time it."
        )
        return None
    from labkit.machine.allocator import keep_freed_memory
    from labkit.timing.allocation import AS_ALLOCATED, KEPT, compare_allocation
    from labkit.timing.interleave import interleave

    elements: int | None = None
    other: tuple[Any, ...] | None = None
    timing_device = str(resolve_torch_device(device)) if device is not None or fn is None else None
    if fn is None:
        dev = resolve_torch_device(device)
        require_memory_fits(4 * size, dev, arrays=8, what=f"torch_compile_benchmark(size={size})")
        gen = torch.Generator().manual_seed(0)
        args = tuple(torch.randn(size, generator=gen).to(dev) for _ in range(2))
        other = tuple(torch.randn(size + 1, generator=gen).to(dev) for _ in range(2))
        fn, elements = elementwise_chain, size
    name = "torch.compile"
    if compiler is None:
        compiler = torch.compile
    else:
        name = getattr(compiler, "__name__", "custom compiler")
    workload = fn

    def eager_call() -> Any:
        return workload(*args)

    allocation = compare_allocation(eager_call, rounds=rounds, rep_ms=rep_ms, warmup_ms=warmup_ms)
    with fresh_inductor_cache():
        # Inductor's one-off start-up (imports, compiler and ISA checks) is paid by the first
        # compile in a process, whatever it compiles: time it on a one-op function first.
        tiny = torch.ones(8)
        start = time.perf_counter()
        compiler(_one_op)(tiny)
        startup_s = time.perf_counter() - start
        first = []
        for _ in range(2):  # cold, then warm
            torch._dynamo.reset()
            compiled_fn = compiler(workload)
            _sync_torch(torch, args)
            start = time.perf_counter()
            out = compiled_fn(*args)
            _sync_torch(torch, (out,))
            first.append(time.perf_counter() - start)
        new_shape_s = None
        if other is not None:
            start = time.perf_counter()
            _sync_torch(torch, (compiled_fn(*other),))
            new_shape_s = time.perf_counter() - start
    torch.testing.assert_close(out, workload(*args), msg=lambda m: f"compiled result differs: {m}")
    with keep_freed_memory():
        steady = interleave(
            {"eager": eager_call, "compiled": lambda: compiled_fn(*args)},
            rounds=max(rounds, 2),
            rep_ms=rep_ms,
            warmup_ms=warmup_ms,
            device=timing_device,
        )
    pooled = {v.label: v.pooled() for v in steady.variants}
    faults = allocation.faults_per_call
    return CompileResult(
        "torch",
        name,
        elements,
        pooled["eager"],
        pooled["compiled"],
        first[0],
        warm_first_call_s=first[1],
        new_shape_first_call_s=new_shape_s,
        eager_as_allocated=Timing(
            tuple(x for t in allocation.rounds[AS_ALLOCATED].runs for x in t.samples_ms),
            label="eager, freed memory returned",
        ),
        faults_per_call={"returned": faults.get(AS_ALLOCATED), "kept": faults.get(KEPT)},
        rounds=steady,
        startup_s=startup_s,
        arrays_moved=CHAIN_ARRAYS if elements is not None else None,
    )


@contextlib.contextmanager
def fresh_inductor_cache() -> Iterator[str]:
    """``TORCHINDUCTOR_CACHE_DIR`` set to a new empty directory, removed afterwards."""
    previous = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="labkit-inductor-") as directory:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = directory
        try:
            yield directory
        finally:
            if previous is None:
                os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
            else:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = previous


def _sync_torch(torch: Any, values: Any) -> None:
    if any(getattr(v, "is_cuda", False) for v in values):
        torch.cuda.synchronize()


@dataclass(frozen=True)
class XlaResult:
    """TensorFlow eager vs ``tf.function`` vs ``tf.function(jit_compile=True)``, round-robin.

    The timings pool the samples of every round; ``rounds`` is
    :func:`labkit.interleave`'s result (None for a result built by hand).
    """

    elements: int
    eager: Timing
    graph: Timing
    xla: Timing
    graph_first_call_s: float
    xla_first_call_s: float
    rounds: Any = None

    @property
    def xla_vs_graph(self) -> float:
        """graph median / XLA median: > 1 means XLA is faster (per round, where there are rounds)."""
        if self.rounds is not None:
            return self.rounds.versus("tf.function + XLA", "tf.function")[0]
        return ratio(self.graph.median_ms, self.xla.median_ms)

    def _per_round(self) -> list[float]:
        if self.rounds is None:
            return [self.xla_vs_graph]
        graph, xla = self.rounds["tf.function"], self.rounds["tf.function + XLA"]
        return [ratio(g.median_ms, x.median_ms) for g, x in zip(graph.runs, xla.runs, strict=True)]

    def verdict(self) -> str:
        """XLA against plain tf.function, judged round by round."""
        per_round = self._per_round()
        low, high = min(per_round), max(per_round)
        span = f"{times(low)} to {times(high)} per round"
        if low > 1:
            how = "faster in every round"
        elif high < 1:
            how = "slower in every round"
        else:
            how = "faster in some rounds and slower in others"
        return f"XLA against tf.function here: {how} ({span})"

    def timings(self) -> list[Timing]:
        return [self.eager, self.graph, self.xla]

    def __str__(self) -> str:
        return "\n".join(
            [
                "TensorFlow, elementwise chain, timed round-robin with freed memory kept:",
                f"  eager                    {format_duration(round_median_ms(self.eager, self.rounds))}",
                f"  tf.function              "
                f"{format_duration(round_median_ms(self.graph, self.rounds))}  "
                f"(first call {seconds(self.graph_first_call_s)})",
                f"  tf.function + XLA        "
                f"{format_duration(round_median_ms(self.xla, self.rounds))}  "
                f"(first call {seconds(self.xla_first_call_s)})",
                f"  {self.verdict()}",
            ]
        )


def tf_xla_benchmark(
    size: int = 4_000_000, *, rounds: int = 3, warmup_ms: float = 25.0, rep_ms: float = 100.0
) -> XlaResult:
    """The same elementwise chain in TensorFlow: eager, graph, and XLA-compiled.

    Each first call (tracing, and for XLA compilation) is timed on its own;
    the results are checked against eager before anything is timed. The
    three are then timed round-robin (:func:`labkit.interleave`) inside
    :func:`labkit.machine.allocator.keep_freed_memory`, so that page faults
    do not decide the comparison.
    """
    from labkit.machine.allocator import keep_freed_memory
    from labkit.timing.interleave import interleave

    size = check_positive_int("size", size)
    rounds = check_positive_int("rounds", rounds)
    warmup_ms, rep_ms = check_ms("warmup_ms", warmup_ms), check_ms("rep_ms", rep_ms)
    require_memory_fits(4 * size, arrays=6, what=f"tf_xla_benchmark(size={size})")
    tf = import_tensorflow("the XLA benchmark")

    def chain(x: Any, y: Any) -> Any:
        return tf.sin(tf.nn.relu(x * 2.0 + 1.0)) * y

    x = tf.random.stateless_normal((size,), seed=(0, 1))
    y = tf.random.stateless_normal((size,), seed=(2, 3))
    graph = tf.function(chain)
    xla = tf.function(chain, jit_compile=True)
    expected = chain(x, y).numpy()
    first: dict[str, float] = {}
    for name, f in (("graph", graph), ("xla", xla)):
        tf.test.experimental.sync_devices()
        start = time.perf_counter()
        out = f(x, y)
        tf.test.experimental.sync_devices()
        first[name] = time.perf_counter() - start
        diff = float(abs(out.numpy() - expected).max())
        if diff > 1e-5:
            raise AssertionError(f"{name} result differs from eager by {diff}")
    with keep_freed_memory():
        result = interleave(
            {
                "tf eager": lambda: chain(x, y),
                "tf.function": lambda: graph(x, y),
                "tf.function + XLA": lambda: xla(x, y),
            },
            rounds=max(rounds, 2),
            rep_ms=rep_ms,
            warmup_ms=warmup_ms,
            device="tf",
        )
    pooled = {v.label: v.pooled() for v in result.variants}
    return XlaResult(
        elements=size,
        eager=pooled["tf eager"],
        graph=pooled["tf.function"],
        xla=pooled["tf.function + XLA"],
        graph_first_call_s=first["graph"],
        xla_first_call_s=first["xla"],
        rounds=result,
    )
