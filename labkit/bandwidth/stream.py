"""STREAM-style memory-bandwidth probes: how many GB/s the memory system really delivers.

Most deep-learning kernels (elementwise ops, normalisations, optimiser steps)
do a few flops per byte, so their speed is the memory's speed, not the
processor's. John McCalpin's STREAM benchmark measures that speed with four
kernels over arrays of ``n`` float64 values, and labkit follows its rules:

============  ===============  ======================  ========================
kernel        does             bytes counted per call  labkit runs (torch)
============  ===============  ======================  ========================
copy          a = b            2 arrays × 8 B × n      ``a.copy_(b)``
scale         a = s·b          2 arrays × 8 B × n      ``torch.mul(b, s, out=a)``
add           a = b + c        3 arrays × 8 B × n      ``torch.add(b, c, out=a)``
triad         a = b + s·c      3 arrays × 8 B × n      ``torch.add(b, c, alpha=s, out=a)``
============  ===============  ======================  ========================

Bytes are counted the way STREAM counts them: each array read or written
once. A CPU that writes ``a`` with ordinary stores first reads each line of
``a`` into cache (write-allocate), so the hardware really moves one more
array; STREAM does not count it, and neither does labkit, so numbers compare
with published STREAM results. torch's kernels (like NumPy's ufuncs and
plain C loops) use ordinary stores; a libc ``memcpy`` of a large buffer uses
non-temporal stores that skip that read, which is why it can report up to
1.5× the copy bandwidth (``labkit bench bandwidth`` shows it for information).

Why torch and not NumPy: each torch call above is a *single pass* over
memory and runs on every core (torch's intra-op threads), which is what a
bandwidth probe needs. NumPy is single-threaded, and has no one-pass triad:
``a[:] = b + s * c`` makes a temporary ``s * c`` (an extra array written and
read back), and ``np.multiply(c, s, out=a); a += b`` walks ``a`` twice. Both
move 5 arrays' worth of bytes for STREAM's 3, so they understate the
bandwidth. ``labkit bench bandwidth`` checks these probes against NumPy's
copy and a compiled C loop measured in the same run.

:func:`stream_sweep` runs the kernels from cache-sized to DRAM-sized arrays;
:func:`peak_bandwidth` is the single DRAM-sized number the roofline uses
(triad, median; STREAM's own best-of-N figure is ``best_gb_per_s``) (the sweep lives in
:mod:`labkit.bandwidth.sweep`). Buffers are sized by
:mod:`labkit.machine.memory`, so nothing allocates more than a fraction of the free
memory. Strided access, host-device transfers and the copy-compute pipeline
live in :mod:`labkit.bandwidth.strided`, :mod:`labkit.bandwidth.transfers` and
:mod:`labkit.bandwidth.pipeline`; all of them can be imported from here by name.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from labkit.bandwidth.sizes import MIN_BYTES_PER_ARRAY, main_memory_bytes_per_array
from labkit.core.results import JsonRecord
from labkit.core.units import format_duration, format_gb_per_s
from labkit.core.validate import check_choice, check_choices, check_int, check_ms
from labkit.machine import memory as _memory
from labkit.machine.memory import (
    DEFAULT_FRACTION,
    MemoryBudgetError,
    MemoryBudgetWarning,
    format_bytes,
)
from labkit.machine.report import CPU_OR_CUDA, resolve_device
from labkit.timing.bench import Timing, bench

#: The four STREAM kernels, in STREAM's order.
KERNELS: tuple[str, ...] = ("copy", "scale", "add", "triad")
#: Arrays each kernel reads or writes once (STREAM's byte counting).
ARRAYS: dict[str, int] = {"copy": 2, "scale": 2, "add": 3, "triad": 3}
#: What each kernel computes.
FORMULAS: dict[str, str] = {
    "copy": "a = b",
    "scale": "a = s·b",
    "add": "a = b + c",
    "triad": "a = b + s·c",
}
#: The torch call labkit times for each kernel (all one pass, multithreaded).
IMPLEMENTATIONS: dict[str, str] = {
    "copy": "a.copy_(b)",
    "scale": "torch.mul(b, s, out=a)",
    "add": "torch.add(b, c, out=a)",
    "triad": "torch.add(b, c, alpha=s, out=a)",
}
#: STREAM's element type and scalar.
DTYPE = "float64"
ITEMSIZE_BYTES = 8
SCALAR = 3.0
#: Initial values of b and c, and what a must hold after each kernel (checked before timing).
_B, _C = 2.0, 1.0
_EXPECTED: dict[str, float] = {
    "copy": _B,
    "scale": SCALAR * _B,
    "add": _B + _C,
    "triad": _B + SCALAR * _C,
}

#: Bytes one timed sample should move at least: tiny arrays are run many times per sample.
_SAMPLE_TARGET_BYTES = {"cpu": 8 * 1024**2, "cuda": 64 * 1024**2}
_MAX_CALLS_PER_SAMPLE = 10_000


def stream_bytes(kernel: str, n_elements: int, *, itemsize_bytes: int = ITEMSIZE_BYTES) -> int:
    """Bytes one call of ``kernel`` moves by STREAM's rules: arrays × itemsize × n.

    copy and scale touch 2 arrays, add and triad 3; write-allocate traffic is
    not counted. ``stream_bytes("triad", 1000)`` is 24000 for float64.
    """
    kernel = check_kernel(kernel)
    n_elements = check_int("n_elements", n_elements, minimum=1)
    itemsize_bytes = check_int("itemsize_bytes", itemsize_bytes, minimum=1)
    return ARRAYS[kernel] * itemsize_bytes * n_elements


# --------------------------------------------------------------------------- result


@dataclass(frozen=True)
class BandwidthResult(JsonRecord):
    """One bandwidth measurement: what moved, how long one call took, and the GB/s.

    ``bytes_per_call`` is the traffic one call of the kernel is credited with
    (STREAM counting for the STREAM kernels, the bytes that crossed the bus
    for a transfer). Tiny arrays are run ``calls_per_sample`` times inside
    each timed sample; ``median_ms`` is the median sample divided by that, so
    it is always the time of *one* call. ``gb_per_s`` uses the median, so
    it is typical rather than lucky; ``best_gb_per_s`` uses the fastest
    sample. GB are 10^9 bytes, as in STREAM and GPU datasheets.
    """

    kernel: str
    device: str
    dtype: str
    n_elements: int
    bytes_per_array: int
    bytes_per_call: int
    calls_per_sample: int
    timing: Timing
    implementation: str
    threads: int | None = None
    median_ms: float = field(init=False)
    gb_per_s: float = field(init=False)
    best_gb_per_s: float = field(init=False)

    def __post_init__(self) -> None:
        median_ms = self.timing.median_ms / self.calls_per_sample
        min_ms = self.timing.min_ms / self.calls_per_sample
        object.__setattr__(self, "median_ms", median_ms)
        object.__setattr__(self, "gb_per_s", _gb_per_s(self.bytes_per_call, median_ms))
        object.__setattr__(self, "best_gb_per_s", _gb_per_s(self.bytes_per_call, min_ms))

    @property
    def arrays(self) -> int:
        """How many arrays' worth of bytes one call is credited with."""
        return max(1, round(self.bytes_per_call / self.bytes_per_array))

    def __str__(self) -> str:
        threads = f", {self.threads} threads" if self.threads else ""
        return (
            f"{self.kernel} on {self.device}: {format_gb_per_s(self.gb_per_s)} "
            f"({self.dtype}, {format_bytes(self.bytes_per_array)} per array, "
            f"{format_bytes(self.bytes_per_call)} moved per call; median "
            f"{format_duration(self.median_ms)}, n={self.timing.n}{threads})"
        )


def _gb_per_s(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9 if ms > 0 else math.inf


# --------------------------------------------------------------------------- validation


def check_budget_ms(name: str, value: Any) -> float:
    """A finite budget in ms: warm-ups may be 0, ``rep_ms`` must be > 0 (bench needs samples)."""
    return check_ms(name, value, allow_zero=name != "rep_ms")


def check_kernel(kernel: Any) -> str:
    return check_choice("kernel", kernel, KERNELS)


def check_kernels(kernels: str | Sequence[str]) -> tuple[str, ...]:
    """One kernel name or several, in STREAM's order without duplicates."""
    return check_choices("kernels", kernels, KERNELS)


# --------------------------------------------------------------------------- buffers and kernels


def allocate_arrays(n_elements: int, count: int, device: str) -> list[Any]:
    """``count`` float64 tensors of ``n_elements`` on ``device``: a = 0, b = 2, c = 1.

    Filling them also touches every page now, so page faults (the OS
    mapping fresh memory) never land inside a timed call. Tests replace this
    function to record how much a probe asks for.
    """
    import torch

    values = (0.0, _B, _C)[:count]
    return [torch.full((n_elements,), v, dtype=torch.float64, device=device) for v in values]


def _kernel_call(kernel: str, a: Any, b: Any, c: Any) -> Any:
    import torch

    if kernel == "copy":
        return lambda: a.copy_(b)
    if kernel == "scale":
        return lambda: torch.mul(b, SCALAR, out=a)
    if kernel == "add":
        return lambda: torch.add(b, c, out=a)
    return lambda: torch.add(b, c, alpha=SCALAR, out=a)


def _calls_per_sample(bytes_per_call: int, device: str) -> int:
    target = _SAMPLE_TARGET_BYTES["cpu" if device == "cpu" else "cuda"]
    return max(1, min(_MAX_CALLS_PER_SAMPLE, target // bytes_per_call))


def _threads(device: str) -> int | None:
    if device != "cpu":
        return None
    import torch

    return int(torch.get_num_threads())


@dataclass(frozen=True)
class PreparedKernel:
    """A checked STREAM kernel on a set of buffers, ready to time.

    ``sample()`` runs the kernel ``calls_per_sample`` times (tiny arrays need
    many calls per timed sample); :meth:`result` turns a Timing of ``sample``
    into a :class:`BandwidthResult`. ``labkit bench bandwidth`` uses this to
    take turns with its references a few samples at a time.
    """

    kernel: str
    device: str
    n_elements: int
    call: Any
    calls_per_sample: int

    def sample(self) -> None:
        for _ in range(self.calls_per_sample):
            self.call()

    def result(self, timing: Timing) -> BandwidthResult:
        return BandwidthResult(
            kernel=self.kernel,
            device=self.device,
            dtype=DTYPE,
            n_elements=self.n_elements,
            bytes_per_array=self.n_elements * ITEMSIZE_BYTES,
            bytes_per_call=stream_bytes(self.kernel, self.n_elements),
            calls_per_sample=self.calls_per_sample,
            timing=timing,
            implementation=IMPLEMENTATIONS[self.kernel],
            threads=_threads(self.device),
        )


def prepare_kernel(
    kernel: str, buffers: Sequence[Any], n_elements: int, device: str
) -> PreparedKernel:
    """Run ``kernel`` once on the first ``n_elements`` of ``buffers`` and check what it wrote.

    ``buffers`` are a, b (and c) as made by the probes (b = 2, c = 1), each at
    least ``n_elements`` long. A wrong result means overlapping or modified
    buffers, and a timing of a wrong computation is meaningless, so it
    raises instead of timing.
    """
    a, b = buffers[0][:n_elements], buffers[1][:n_elements]
    c = buffers[2][:n_elements] if len(buffers) > 2 else None
    call = _kernel_call(kernel, a, b, c)
    call()
    expected = _EXPECTED[kernel]
    low, high = (float(v) for v in a.aminmax())  # two scalars: no n-sized temporary
    if not low == high == expected:
        raise RuntimeError(
            f"the {kernel} kernel ({FORMULAS[kernel]}) left values other than {expected} in a; "
            "the probe's buffers overlap or were changed while it ran, so its timing would "
            "be meaningless"
        )
    calls = _calls_per_sample(stream_bytes(kernel, n_elements), device)
    return PreparedKernel(kernel, device, n_elements, call, calls)


def measure_kernel(
    kernel: str,
    buffers: Sequence[Any],
    n_elements: int,
    device: str,
    *,
    warmup_ms: float,
    rep_ms: float,
    min_reps: int,
) -> BandwidthResult:
    """Check one kernel's result, then time it on the first ``n_elements`` of ``buffers``."""
    prepared = prepare_kernel(kernel, buffers, n_elements, device)
    timing = bench(
        prepared.sample,
        warmup_ms=warmup_ms,
        rep_ms=rep_ms,
        min_reps=min_reps,
        device=device,
        label=kernel,
        warn=False,
    )
    return prepared.result(timing)


def stream_kernel(
    kernel: str = "triad",
    bytes_per_array: int | None = None,
    device: str = "cpu",
    *,
    fraction: float = DEFAULT_FRACTION,
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    min_reps: int = 5,
) -> BandwidthResult:
    """Time one STREAM kernel at one array size (DRAM-sized by default).

    An explicit ``bytes_per_array`` that does not fit the memory budget
    raises :class:`~labkit.machine.memory.MemoryBudgetError`; the default size
    shrinks to fit instead (with a :class:`~labkit.machine.memory.MemoryBudgetWarning`).
    """
    kernel = check_kernel(kernel)
    warmup_ms, rep_ms = check_budget_ms("warmup_ms", warmup_ms), check_budget_ms("rep_ms", rep_ms)
    min_reps = check_int("min_reps", min_reps, minimum=1)
    device = resolve_device(device, kinds=CPU_OR_CUDA)
    size = _single_size(bytes_per_array, device, fraction, ARRAYS[kernel], f"the {kernel} probe")
    n = size // ITEMSIZE_BYTES
    buffers = allocate_arrays(n, ARRAYS[kernel], device)
    return measure_kernel(
        kernel, buffers, n, device, warmup_ms=warmup_ms, rep_ms=rep_ms, min_reps=min_reps
    )


def _single_size(
    bytes_per_array: int | None, device: str, fraction: float, arrays: int, what: str
) -> int:
    """An explicit size is checked (error if too big); the default shrinks to fit (warning)."""
    if bytes_per_array is not None:
        size = check_int("bytes_per_array", bytes_per_array, minimum=ITEMSIZE_BYTES)
        _memory.require_fits(
            size, device=device, fraction=fraction, arrays=arrays, what=what, name="bytes_per_array"
        )
        return size - size % ITEMSIZE_BYTES
    wanted = main_memory_bytes_per_array(device, arrays=arrays, fraction=fraction)
    size = _memory.fit_bytes(wanted, device=device, fraction=fraction, arrays=arrays)
    size -= size % MIN_BYTES_PER_ARRAY
    if size < MIN_BYTES_PER_ARRAY:
        _memory.require_fits(wanted, device=device, fraction=fraction, arrays=arrays, what=what)
    if size < wanted:
        warnings.warn(
            f"{what}: measuring {format_bytes(size)} per array instead of {format_bytes(wanted)}, "
            f"because {arrays} arrays of {format_bytes(wanted)} exceed {fraction:.0%} of the free "
            "memory. Part of the data may come from cache, which overstates main-memory "
            "bandwidth; close other programs for a cleaner number.",
            MemoryBudgetWarning,
            stacklevel=3,
        )
    return size


def peak_bandwidth(
    device: str = "cpu",
    *,
    fraction: float = DEFAULT_FRACTION,
    bytes_per_array: int | None = None,
    kernels: Sequence[str] = ("triad",),
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    min_reps: int = 10,
) -> BandwidthResult:
    """STREAM triad on DRAM-sized arrays, median of the samples: the memory roof of a roofline.

    One well-defined figure: one kernel (triad, ``a = b + s·c``, whose three
    arrays match the course's elementwise ops) and one statistic, the median
    (``gb_per_s``). STREAM itself reports the *best* of its NTIMES runs
    (www.cs.virginia.edu/stream/ref.html); that figure is ``best_gb_per_s``
    of the same result, printed beside the median where both matter. Taking
    the larger of several kernels' medians, as labkit once did, picks
    whichever kernel had the luckier run: a selection bias.

    It is what torch's one-pass kernels reach, with ordinary stores and STREAM
    byte counting; that is the roof the course's torch operations live under.
    With several ``kernels``, the one with the highest median is returned.
    The default size (:func:`~labkit.bandwidth.sizes.main_memory_bytes_per_array`:
    at least 4× the last-level cache where that fits) shrinks to fit the
    memory budget with a warning; an explicit ``bytes_per_array`` that does
    not fit raises :class:`~labkit.machine.memory.MemoryBudgetError`.
    """
    kernels = check_kernels(kernels)
    device = resolve_device(device, kinds=CPU_OR_CUDA)
    warmup_ms, rep_ms = check_budget_ms("warmup_ms", warmup_ms), check_budget_ms("rep_ms", rep_ms)
    min_reps = check_int("min_reps", min_reps, minimum=1)
    arrays = max(ARRAYS[k] for k in kernels)
    size = _single_size(bytes_per_array, device, fraction, arrays, "peak_bandwidth")
    n = size // ITEMSIZE_BYTES
    buffers = allocate_arrays(n, arrays, device)
    results = [
        measure_kernel(k, buffers, n, device, warmup_ms=warmup_ms, rep_ms=rep_ms, min_reps=min_reps)
        for k in kernels
    ]
    return max(results, key=lambda r: r.gb_per_s)


__all__ = [
    "ARRAYS",
    "DTYPE",
    "KERNELS",
    "BandwidthResult",
    "MemoryBudgetError",
    "peak_bandwidth",
    "stream_bytes",
    "stream_kernel",
]
