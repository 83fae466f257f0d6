"""Compilers: ``torch.compile`` and XLA, with the compile time kept apart.

A compiler fuses a chain of elementwise ops into one kernel, so the data is
read and written once instead of once per op: for memory-bound work that is
the whole speedup. The price is paid up front: the first call traces and
compiles (on the CPU, ``torch.compile`` runs a C++ compiler; 10-20 s is
normal). A fair benchmark therefore reports three numbers: eager, the first
compiled call, and the compiled steady state, plus how many calls it takes
for the compile to pay for itself.

XLA (``tf.function(jit_compile=True)``) is the TensorFlow counterpart. It
mainly pays off on GPUs; on the CPU it can be *slower* than TensorFlow's
ordinary graph mode. Measure, don't assume.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from labkit.accel.common import ratio, seconds, times
from labkit.core.optional import import_optional, import_tensorflow
from labkit.core.units import format_duration
from labkit.core.validate import check_ms, check_positive_int, check_torch_device
from labkit.machine.memory import require_memory_fits
from labkit.machine.report import resolve_torch_device
from labkit.timing.bench import Timing, bench


@dataclass(frozen=True)
class CompileResult:
    """Eager vs compiled: steady-state timings and the one-off first-call cost.

    ``first_call_s`` is the first call of the compiled function (tracing +
    compilation + one run); ``compiled`` is timed after it. ``break_even_calls``
    is how many calls the compile needs to pay for itself (None if the
    compiled version is not faster).
    """

    framework: str
    compiler: str
    elements: int | None
    eager: Timing
    compiled: Timing
    first_call_s: float

    @property
    def speedup(self) -> float:
        return ratio(self.eager.median_ms, self.compiled.median_ms)

    @property
    def break_even_calls(self) -> int | None:
        saved_ms = self.eager.median_ms - self.compiled.median_ms
        if saved_ms <= 0:
            return None
        return int(-(-(self.first_call_s * 1e3) // saved_ms))

    def timings(self) -> list[Timing]:
        return [self.eager, self.compiled]

    def __str__(self) -> str:
        lines = [
            f"{self.compiler} ({self.framework}):",
            f"  eager                  {format_duration(self.eager.median_ms)}",
            f"  compiled, first call   {seconds(self.first_call_s)}  (trace + compile + run)",
            f"  compiled, steady state {format_duration(self.compiled.median_ms)}  "
            f"({times(self.speedup)} vs eager)",
        ]
        if self.break_even_calls is None:
            lines.append("  the compiled version is not faster here: compiling never pays off")
        else:
            lines.append(f"  the compile pays for itself after n={self.break_even_calls} calls")
        return "\n".join(lines)


def elementwise_chain(x: Any, y: Any) -> Any:
    """(x * 2 + 1).relu().sin() * y: five memory-bound ops that fusion turns into one."""
    return (x * 2 + 1).relu().sin() * y


def torch_compile_benchmark(
    fn: Callable[..., Any] | None = None,
    *args: Any,
    size: int = 4_000_000,
    compiler: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None,
    device: Any = None,
    run: bool = True,
    warmup_ms: float = 25.0,
    rep_ms: float = 200.0,
) -> CompileResult | None:
    """Time ``fn(*args)`` eager and under ``torch.compile``, compile time apart.

    Args:
        fn, *args: the workload; by default :func:`elementwise_chain` on two
            float32 vectors of ``size`` elements.
        compiler: what compiles ``fn`` (default ``torch.compile``). Tests pass a
            cheap one; a notebook could pass ``functools.partial(torch.compile,
            mode="max-autotune")``.
        run: False prints why it was skipped and returns None (the first
            compile takes 10-20 s on a CPU).

    Dynamo's caches are reset first (``torch._dynamo.reset()``) so the first
    call really compiles, and the compiled result is checked against eager.
    """
    if fn is not None and not args:
        raise ValueError(
            "fn was given without arguments: pass them as torch_compile_benchmark(fn, x, y)"
        )
    size = check_positive_int("size", size)
    warmup_ms, rep_ms = check_ms("warmup_ms", warmup_ms), check_ms("rep_ms", rep_ms)
    check_torch_device(device)
    torch = import_optional("torch", "the torch.compile benchmark")
    if not run:
        print(
            "Skipped: torch.compile's first call takes 10-20 s on a CPU; pass run=True to time it."
        )
        return None
    elements: int | None = None
    if fn is None:
        dev = resolve_torch_device(device)
        require_memory_fits(4 * size, dev, arrays=4, what=f"torch_compile_benchmark(size={size})")
        gen = torch.Generator().manual_seed(0)
        args = tuple(torch.randn(size, generator=gen).to(dev) for _ in range(2))
        fn, elements = elementwise_chain, size
    name = "torch.compile"
    if compiler is None:
        compiler = torch.compile
    else:
        name = getattr(compiler, "__name__", "custom compiler")
    opts: dict[str, Any] = {"warmup_ms": warmup_ms, "rep_ms": rep_ms, "warn": False}
    eager = bench(fn, *args, label="eager", **opts)
    torch._dynamo.reset()
    compiled_fn = compiler(fn)
    _sync_torch(torch, args)
    start = time.perf_counter()
    out = compiled_fn(*args)
    _sync_torch(torch, (out,))
    first_call_s = time.perf_counter() - start
    torch.testing.assert_close(out, fn(*args), msg=lambda m: f"compiled result differs: {m}")
    compiled = bench(compiled_fn, *args, label="compiled", **opts)
    return CompileResult("torch", name, elements, eager, compiled, first_call_s)


def _sync_torch(torch: Any, values: Any) -> None:
    if any(getattr(v, "is_cuda", False) for v in values):
        torch.cuda.synchronize()


@dataclass(frozen=True)
class XlaResult:
    """TensorFlow eager vs ``tf.function`` vs ``tf.function(jit_compile=True)``."""

    elements: int
    eager: Timing
    graph: Timing
    xla: Timing
    graph_first_call_s: float
    xla_first_call_s: float

    @property
    def xla_vs_graph(self) -> float:
        """graph median / XLA median: > 1 means XLA is faster."""
        return ratio(self.graph.median_ms, self.xla.median_ms)

    def timings(self) -> list[Timing]:
        return [self.eager, self.graph, self.xla]

    def __str__(self) -> str:
        verdict = "faster" if self.xla_vs_graph > 1 else "slower"
        return "\n".join(
            [
                "TensorFlow, elementwise chain:",
                f"  eager                    {format_duration(self.eager.median_ms)}",
                f"  tf.function              {format_duration(self.graph.median_ms)}  "
                f"(first call {seconds(self.graph_first_call_s)})",
                f"  tf.function + XLA        {format_duration(self.xla.median_ms)}  "
                f"(first call {seconds(self.xla_first_call_s)})",
                f"  XLA is {times(self.xla_vs_graph)} the speed of tf.function here: {verdict}",
            ]
        )


def tf_xla_benchmark(
    size: int = 4_000_000, *, warmup_ms: float = 25.0, rep_ms: float = 200.0
) -> XlaResult:
    """The same elementwise chain in TensorFlow: eager, graph, and XLA-compiled.

    Each first call (tracing, and for XLA compilation) is timed on its own;
    the results are checked against eager before anything is timed.
    """
    size = check_positive_int("size", size)
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
    opts: dict[str, Any] = {"warmup_ms": warmup_ms, "rep_ms": rep_ms, "warn": False}
    return XlaResult(
        elements=size,
        eager=bench(chain, x, y, label="tf eager", **opts),
        graph=bench(graph, x, y, label="tf.function", **opts),
        xla=bench(xla, x, y, label="tf.function(jit_compile=True)", **opts),
        graph_first_call_s=first["graph"],
        xla_first_call_s=first["xla"],
    )
