"""Size buffers from the memory that is actually free, so a probe never takes the machine down.

A bandwidth probe wants big arrays: to measure main memory rather than a
cache, each array must be several times the last-level cache (on a server
with a 300 MiB L3 that is over a gigabyte per array, times three arrays).
On a laptop with 8 GB and a browser open, allocating that swaps the machine to
a crawl or gets the kernel process killed, and a learner loses their notebook.

So every probe in labkit asks this module first. At most :data:`DEFAULT_FRACTION`
of the memory that is free *now* (not the total) may go to one probe:

- a sweep *shrinks to fit*: it drops the sizes that do not fit and says so
  once (:func:`fit_sizes`);
- an explicit request that does not fit raises :class:`MemoryBudgetError`,
  which says how much was asked for, how much is free, and what to do
  (:func:`check_fits`).

The free-memory source is :func:`available_bytes`; tests replace it with
``monkeypatch.setattr(labkit.memory, "available_bytes", ...)`` to play a
machine that is short of memory.
"""

from __future__ import annotations

import numbers
import sys
from collections.abc import Iterable
from typing import Any

from labkit.doctor import format_bytes

#: The largest share of the free memory one probe may allocate, all its buffers together.
#: A quarter leaves room for the framework, the notebook and whatever else runs.
DEFAULT_FRACTION = 0.25

__all__ = [
    "DEFAULT_FRACTION",
    "MemoryBudgetError",
    "MemoryBudgetWarning",
    "available_bytes",
    "budget_bytes",
    "check_fits",
    "fit_bytes",
    "fit_sizes",
    "format_bytes",
    "parse_device",
]


class MemoryBudgetError(ValueError):
    """A requested buffer is larger than the share of free memory a probe may use."""


class MemoryBudgetWarning(UserWarning):
    """A sweep dropped sizes that did not fit in the memory budget."""


# --------------------------------------------------------------------------- devices


def parse_device(device: Any) -> tuple[str, int | None]:
    """``"cpu"`` -> ("cpu", None), ``"cuda"`` -> ("cuda", None), ``"cuda:1"`` -> ("cuda", 1).

    Memory budgets exist for the host and for CUDA GPUs; anything else is an
    error that names the accepted spellings.
    """
    if not isinstance(device, str):
        raise TypeError(
            f"device must be a string such as 'cpu', 'cuda' or 'cuda:0', "
            f"got {type(device).__name__} instead"
        )
    text = device.strip().lower()
    kind, _, index = text.partition(":")
    if kind == "cpu" and not index:
        return "cpu", None
    if kind == "cuda" and (not index or index.isdigit()):
        return "cuda", int(index) if index else None
    raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")


# --------------------------------------------------------------------------- free memory


def _host_available_bytes() -> int:
    """Memory the OS can hand out without swapping (psutil's ``available``, not ``free``).

    ``available`` counts the page cache the kernel would drop on demand,
    which is what an allocation can really get; ``free`` is far smaller on
    any machine that has been up for a while.
    """
    try:
        import psutil
    except ImportError as exc:  # psutil is a dependency; this is a broken install
        raise MemoryBudgetError(
            "labkit cannot read the free memory because psutil is missing; install it with: "
            "pip install psutil"
        ) from exc
    return int(psutil.virtual_memory().available)


def _cuda_free_bytes(index: int | None) -> int:
    """Free memory on a CUDA GPU: what the driver reports, plus what torch holds unused.

    ``cudaMemGetInfo`` counts memory torch's caching allocator has reserved
    as used, even when no tensor occupies it; torch can reuse that memory, so
    it counts as free for a probe that allocates through torch.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        from labkit._optional import is_installed

        if is_installed("torch"):
            import torch
    if torch is not None and torch.cuda.is_available():
        where = torch.device("cuda", index if index is not None else torch.cuda.current_device())
        free, _total = torch.cuda.mem_get_info(where)
        unused = torch.cuda.memory_reserved(where) - torch.cuda.memory_allocated(where)
        return int(free) + max(int(unused), 0)
    from labkit._optional import import_optional

    cupy = import_optional("cupy", "reading a GPU's free memory")
    if not cupy.is_available():
        raise MemoryBudgetError(
            "device='cuda' but no CUDA GPU is usable here (torch and CuPy see none); "
            "use device='cpu'. `labkit doctor` explains why no GPU is visible."
        )
    with cupy.cuda.Device(index or 0):
        free, _total = cupy.cuda.runtime.memGetInfo()
    pool = cupy.get_default_memory_pool()
    return int(free) + max(int(pool.total_bytes() - pool.used_bytes()), 0)


def available_bytes(device: str = "cpu") -> int:
    """Bytes that can be allocated on ``device`` right now ("cpu", "cuda", "cuda:N").

    Host: psutil's ``virtual_memory().available``. CUDA: ``torch.cuda.mem_get_info``
    (or CuPy's ``memGetInfo`` without torch) plus memory torch has cached but
    not used. This is the one source of "free memory" in labkit, so a test can
    replace it to simulate a machine that is short of memory.
    """
    kind, index = parse_device(device)
    return _host_available_bytes() if kind == "cpu" else _cuda_free_bytes(index)


# --------------------------------------------------------------------------- the budget


def _check_fraction(fraction: Any) -> float:
    if isinstance(fraction, bool) or not isinstance(fraction, numbers.Real):
        raise TypeError(f"fraction must be a number, got {type(fraction).__name__} instead")
    value = float(fraction)
    if not 0.0 < value <= 1.0:
        raise ValueError(
            f"fraction must be the share of free memory a probe may use, above 0 and at most 1 "
            f"(default {DEFAULT_FRACTION}), got {fraction!r}"
        )
    return value


def _check_count(name: str, value: Any, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} instead")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value!r}")
    return int(value)


def budget_bytes(*, device: str = "cpu", fraction: float = DEFAULT_FRACTION) -> int:
    """The most one probe may allocate on ``device``: ``fraction`` of the free memory."""
    fraction = _check_fraction(fraction)
    return int(available_bytes(device) * fraction)


def fit_bytes(
    requested_bytes: int,
    *,
    device: str = "cpu",
    fraction: float = DEFAULT_FRACTION,
    arrays: int = 1,
    extra_bytes: int = 0,
) -> int:
    """The largest size per array, at most ``requested_bytes``, such that everything fits.

    ``arrays`` buffers of the returned size plus ``extra_bytes`` (say, a
    cache-flush buffer) stay within ``fraction`` of the free memory. The
    answer may be smaller than asked, or 0 when not even ``extra_bytes``
    fits; callers that must not shrink use :func:`check_fits` instead.
    """
    requested_bytes = _check_count("requested_bytes", requested_bytes, minimum=1)
    arrays = _check_count("arrays", arrays, minimum=1)
    extra_bytes = _check_count("extra_bytes", extra_bytes, minimum=0)
    budget = budget_bytes(device=device, fraction=fraction)
    return max(0, min(requested_bytes, (budget - extra_bytes) // arrays))


def _budget_message(
    what: str, requested_bytes: int, arrays: int, extra_bytes: int, device: str, fraction: float
) -> str:
    free = available_bytes(device)
    budget = int(free * fraction)
    total = requested_bytes * arrays + extra_bytes
    parts = (
        f"{arrays} × {format_bytes(requested_bytes)}"
        if arrays > 1
        else format_bytes(requested_bytes)
    )
    if extra_bytes:
        parts += f" + {format_bytes(extra_bytes)}"
    largest = max(0, (budget - extra_bytes) // arrays)
    where = "host" if parse_device(device)[0] == "cpu" else device
    return (
        f"{what} needs {parts} = {format_bytes(total)}, but only {format_bytes(free)} of {where} "
        f"memory is free and one probe may use at most {fraction:.0%} of it "
        f"({format_bytes(budget)}). Ask for a smaller size (at most {format_bytes(largest)} "
        "per array here), or close other programs (other notebooks and kernels, browsers) to "
        "free memory; raising fraction= risks swapping or an out-of-memory kill."
    )


def check_fits(
    requested_bytes: int,
    *,
    device: str = "cpu",
    fraction: float = DEFAULT_FRACTION,
    arrays: int = 1,
    extra_bytes: int = 0,
    what: str = "this probe",
) -> int:
    """Return ``requested_bytes`` if ``arrays`` such buffers fit the budget, else raise.

    Raises :class:`MemoryBudgetError` (a ValueError) saying how much was
    requested, how much is free, the fraction, and what to do about it.
    """
    requested_bytes = _check_count("requested_bytes", requested_bytes, minimum=1)
    arrays = _check_count("arrays", arrays, minimum=1)
    extra_bytes = _check_count("extra_bytes", extra_bytes, minimum=0)
    fraction = _check_fraction(fraction)
    if not isinstance(what, str) or not what:
        raise TypeError(f"what must be a non-empty description, got {what!r}")
    if requested_bytes * arrays + extra_bytes > budget_bytes(device=device, fraction=fraction):
        raise MemoryBudgetError(
            _budget_message(what, requested_bytes, arrays, extra_bytes, device, fraction)
        )
    return requested_bytes


def fit_sizes(
    sizes_bytes: Iterable[int],
    *,
    device: str = "cpu",
    fraction: float = DEFAULT_FRACTION,
    arrays: int = 1,
    extra_bytes: int = 0,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Split a sweep's sizes (bytes per array) into those that fit and those dropped.

    Both come back sorted and without duplicates. The free memory is read
    once, so every size is judged against the same budget.
    """
    if isinstance(sizes_bytes, (str, bytes)) or not isinstance(sizes_bytes, Iterable):
        raise TypeError(
            f"sizes_bytes must be a sequence of sizes in bytes, got {type(sizes_bytes).__name__}"
        )
    sizes = sorted({_check_count("sizes_bytes[...]", s, minimum=1) for s in sizes_bytes})
    arrays = _check_count("arrays", arrays, minimum=1)
    extra_bytes = _check_count("extra_bytes", extra_bytes, minimum=0)
    budget = budget_bytes(device=device, fraction=fraction)
    kept = tuple(s for s in sizes if s * arrays + extra_bytes <= budget)
    dropped = tuple(s for s in sizes if s * arrays + extra_bytes > budget)
    return kept, dropped


def dropped_message(
    dropped: Iterable[int],
    kept: Iterable[int],
    *,
    device: str,
    fraction: float,
    arrays: int,
) -> str:
    """The one-line note a sweep gives when it skipped sizes for lack of memory."""
    dropped = sorted(dropped)
    kept = sorted(kept)
    free = available_bytes(device)
    head = (
        f"skipped {len(dropped)} size(s) from {format_bytes(dropped[0])} per array up: "
        f"{arrays} arrays of that size exceed {fraction:.0%} of the "
        f"{format_bytes(free)} free"
    )
    tail = (
        f"; the largest size measured is {format_bytes(kept[-1])} per array"
        if kept
        else "; nothing fits"
    )
    return head + tail + ". Close other programs to measure larger sizes."
