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
  (:func:`require_fits`).

The free-memory source is :func:`available_bytes`: on the host, psutil's
``available`` capped by a container's cgroup limit (a JupyterHub pod limited
to 2 GB on a 256 GB node must size its buffers for 2 GB); on a GPU, what the
driver reports free. Tests replace it (or the ``_host_available_bytes`` and
``_cuda_free_bytes`` it reads) to play a machine that is short of memory.

On a GPU another process can take memory between the budget and the
allocation, so GPU sweeps also catch out-of-memory errors
(:func:`is_out_of_memory`), release the memory (:func:`release_memory`) and
stop with the sizes that fit (:func:`allocate_shrinking`,
:func:`out_of_memory_message`).
"""

from __future__ import annotations

import contextlib
import gc
import sys
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from labkit.core.units import format_bytes
from labkit.core.validate import check_int, check_positive_int, check_real, check_torch_device
from labkit.machine import profile as _profile
from labkit.machine.container import ContainerMemory, container_memory

#: The largest share of the free memory one probe may allocate, all its buffers together.
#: A quarter leaves room for the framework, the notebook and whatever else runs.
DEFAULT_FRACTION = 0.25

__all__ = [
    "DEFAULT_FRACTION",
    "ContainerMemory",
    "MemoryBudgetError",
    "MemoryBudgetWarning",
    "allocate_shrinking",
    "available_bytes",
    "budget_bytes",
    "require_fits",
    "container_memory",
    "fit_bytes",
    "fit_sizes",
    "format_bytes",
    "is_out_of_memory",
    "memory_device",
    "out_of_memory_message",
    "release_memory",
    "total_bytes",
]


class MemoryBudgetError(ValueError):
    """A requested buffer is larger than the share of free memory a probe may use."""


class MemoryBudgetWarning(UserWarning):
    """A sweep dropped sizes that did not fit in the memory budget."""


# --------------------------------------------------------------------------- devices


def _pool(device: Any) -> tuple[str, int | None]:
    """``memory_device(device)`` split: ("cpu", None), ("cuda", None) or ("cuda", N)."""
    kind, _, index = memory_device(device).partition(":")
    return kind, int(index) if index else None


def memory_device(device: Any) -> str:
    """The memory a framework device allocates from: "cuda:N" for a CUDA GPU, else "cpu".

    Accepts the spellings of :func:`labkit.core.validate.check_torch_device`
    and ``torch.device``. Apple's "mps" and Intel's "xpu" have no CUDA memory
    query and share the host's memory (or cannot say how much is free), so
    they are budgeted as host memory.
    """
    text = device.strip().lower() if isinstance(device, str) else device
    check_torch_device(text, allow_none=False)
    kind, _, index = str(text).partition(":")
    if kind == "cuda":
        return f"cuda:{index}" if index else "cuda"
    return "cpu"


# --------------------------------------------------------------------------- free memory


def _host_available_bytes() -> int:
    """Memory the OS can hand out without swapping, within this process's container limit.

    psutil's ``available`` (not ``free``) counts the page cache the kernel
    would drop on demand, which is what an allocation can really get;
    ``free`` is far smaller on any machine that has been up for a while.
    But psutil reads the *host's* numbers: a JupyterHub pod limited to 2 GB
    on a 256 GB node sees 250 GB available and is killed at 2 GB. So the
    answer is the smaller of psutil's ``available`` and the headroom under
    the cgroup limit (:func:`container_memory`).
    """
    try:
        import psutil
    except ImportError as exc:  # psutil is a dependency; this is a broken install
        raise MemoryBudgetError(
            "labkit cannot read the free memory because psutil is missing; install it with: "
            "pip install psutil"
        ) from exc
    available = int(psutil.virtual_memory().available)
    container = container_memory()
    return available if container is None else min(available, container.headroom_bytes)


def _cuda_free_bytes(index: int | None) -> int:
    """Free memory on a CUDA GPU: what the driver reports, plus what torch holds unused.

    ``cudaMemGetInfo`` counts memory torch's caching allocator has reserved
    as used, even when no tensor occupies it; torch can reuse that memory, so
    it counts as free for a probe that allocates through torch.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        from labkit.core.optional import is_installed

        if is_installed("torch"):
            import torch
    if torch is not None and torch.cuda.is_available():
        where = torch.device("cuda", index if index is not None else torch.cuda.current_device())
        free, _total = torch.cuda.mem_get_info(where)
        unused = torch.cuda.memory_reserved(where) - torch.cuda.memory_allocated(where)
        return int(free) + max(int(unused), 0)
    from labkit.core.optional import import_optional

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

    Host: psutil's ``virtual_memory().available``, or less where a container's
    cgroup limit leaves less (:func:`container_memory`). CUDA: ``torch.cuda.mem_get_info``
    (or CuPy's ``memGetInfo`` without torch) plus memory torch has cached but
    not used. This is the one source of "free memory" in labkit, so a test can
    replace it to simulate a machine that is short of memory.

    Under a profile (:mod:`labkit.machine.profile`, as ``make test`` runs the
    notebooks) the host's answer is the profile's fixed ``host_memory_bytes``
    instead, so that every buffer, and every output sized from one, is the
    same on every machine; :func:`budget_bytes` still refuses a budget the
    machine cannot really hold.
    """
    kind, index = _pool(device)
    if kind != "cpu":
        return _cuda_free_bytes(index)
    profile = _profile.active()
    return _host_available_bytes() if profile is None else profile.host_memory_bytes


def _host_total_bytes() -> int:
    """The host's physical memory, or the container's limit where that is smaller."""
    import psutil

    total = int(psutil.virtual_memory().total)
    container = container_memory()
    return total if container is None else min(total, container.limit_bytes)


def _cuda_total_bytes(index: int | None) -> int:
    """A CUDA GPU's whole memory (torch's device properties, or CuPy's ``memGetInfo``)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        where = index if index is not None else torch.cuda.current_device()
        return int(torch.cuda.get_device_properties(where).total_memory)
    from labkit.core.optional import import_optional

    cupy = import_optional("cupy", "reading a GPU's memory size")
    with cupy.cuda.Device(index or 0):
        return int(cupy.cuda.runtime.memGetInfo()[1])


def total_bytes(device: str = "cpu") -> int:
    """All the memory ``device`` has, used or not: what no request can ever exceed.

    Host: physical memory, or a container's limit where that is smaller.
    CUDA: the GPU's memory. A size over this is a mistake in the request
    (wrong units, an extra zero), not a machine that is a little short.
    """
    kind, index = _pool(device)
    return _host_total_bytes() if kind == "cpu" else _cuda_total_bytes(index)


# --------------------------------------------------------------------------- the budget


def check_fraction(fraction: Any) -> float:
    """The share of free memory a probe may use: a number above 0 and at most 1."""
    return check_real("fraction", fraction, low=0, high=1, low_open=True)


def budget_bytes(*, device: str = "cpu", fraction: float = DEFAULT_FRACTION) -> int:
    """The most one probe may allocate on ``device``: ``fraction`` of the free memory."""
    fraction = check_fraction(fraction)
    budget = int(available_bytes(device) * fraction)
    profile = _profile.active()
    if profile is not None and _pool(device)[0] == "cpu":
        # The profile's budget is fixed; what is really free is not. At most half of it may
        # go to one probe, leaving the rest to the framework, the kernel and the notebook.
        real = _host_available_bytes()
        if budget > real // 2:
            raise MemoryBudgetError(
                f"the {profile.name!r} profile ({_profile.ENV_VAR}={profile.name}) sizes this "
                f"probe for {format_bytes(profile.host_memory_bytes)} of free host memory, a "
                f"budget of {format_bytes(budget)}, which is more than half of the "
                f"{format_bytes(real)} free now. Close other programs, or run without the "
                f"profile (unset {_profile.ENV_VAR}) to size buffers from what is free."
            )
    return budget


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
    fits; callers that must not shrink use :func:`require_fits` instead.
    """
    requested_bytes = check_positive_int("requested_bytes", requested_bytes)
    arrays = check_positive_int("arrays", arrays)
    extra_bytes = check_int("extra_bytes", extra_bytes)
    budget = budget_bytes(device=device, fraction=fraction)
    return max(0, min(requested_bytes, (budget - extra_bytes) // arrays))


def _budget_message(
    what: str,
    requested_bytes: int,
    arrays: int,
    extra_bytes: int,
    device: str,
    fraction: float,
    name: str | None = None,
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
    where = "host" if _pool(device)[0] == "cpu" else device
    smaller = f"a smaller {name}" if name else "a smaller size"
    limit = (
        f"at most {format_bytes(largest)} per array here" if largest > 0 else "nothing fits here"
    )
    return (
        f"{what} needs {parts} = {format_bytes(total)}, but only {format_bytes(free)} of {where} "
        f"memory is free and one probe may use at most {fraction:.0%} of it "
        f"({format_bytes(budget)}). Ask for {smaller} ({limit}), or close other programs "
        "(other notebooks and kernels, browsers) to free memory; raising fraction= risks "
        "swapping or an out-of-memory kill."
    )


def require_fits(
    requested_bytes: int,
    *,
    device: str = "cpu",
    fraction: float = DEFAULT_FRACTION,
    arrays: int = 1,
    extra_bytes: int = 0,
    what: str = "this probe",
    name: str | None = None,
) -> int:
    """Return ``requested_bytes`` if ``arrays`` such buffers fit the budget, else raise.

    Raises :class:`MemoryBudgetError` (a ValueError) saying how much was
    requested, how much is free, the fraction, and what to do about it;
    ``name`` is the argument the size came from ("n_elements"), which the
    message tells the user to make smaller.
    """
    requested_bytes = check_positive_int("requested_bytes", requested_bytes)
    arrays = check_positive_int("arrays", arrays)
    extra_bytes = check_int("extra_bytes", extra_bytes)
    fraction = check_fraction(fraction)
    if requested_bytes * arrays + extra_bytes > budget_bytes(device=device, fraction=fraction):
        raise MemoryBudgetError(
            _budget_message(what, requested_bytes, arrays, extra_bytes, device, fraction, name)
        )
    return requested_bytes


def fit_sizes(
    sizes_bytes: Iterable[int],
    *,
    device: str = "cpu",
    fraction: float = DEFAULT_FRACTION,
    arrays: int = 1,
    extra_bytes: int = 0,
    name: str | None = None,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Split a sweep's sizes (bytes per array) into those that fit and those dropped.

    Both come back sorted and without duplicates. The free memory is read
    once, so every size is judged against the same budget.

    ``name`` marks sizes the user gave (the argument's name, "sizes_bytes"):
    a size larger than the machine's whole memory (:func:`total_bytes`) is
    then a mistake, not a machine that is a little short, and raises
    :class:`MemoryBudgetError` before anything is allocated, as does a list
    of which nothing fits. Other sizes over the budget are dropped, as for
    default sizes, so a notebook still runs on a smaller machine.
    """
    sizes = sorted({check_positive_int(f"sizes_bytes[{i}]", s) for i, s in enumerate(sizes_bytes)})
    arrays = check_positive_int("arrays", arrays)
    extra_bytes = check_int("extra_bytes", extra_bytes)
    budget = budget_bytes(device=device, fraction=fraction)
    kept = tuple(s for s in sizes if s * arrays + extra_bytes <= budget)
    dropped = tuple(s for s in sizes if s * arrays + extra_bytes > budget)
    if name is not None and sizes:
        fraction = check_fraction(fraction)
        total = total_bytes(device)
        impossible = [s for s in sizes if s * arrays + extra_bytes > total]
        if impossible or not kept:
            first = impossible[-1] if impossible else sizes[0]
            what = (
                f"the largest size in {name} ({format_bytes(first)} per array, more than the "
                f"{format_bytes(total)} this machine has in all)"
                if impossible
                else f"the smallest size in {name} ({format_bytes(first)} per array)"
            )
            raise MemoryBudgetError(
                _budget_message(what, first, arrays, extra_bytes, device, fraction, name)
            )
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


# --------------------------------------------------------------------------- out of memory

_T = TypeVar("_T")


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is an allocation failure a sweep can recover from.

    torch's ``torch.cuda.OutOfMemoryError``, CuPy's ``OutOfMemoryError``, a
    RuntimeError saying "out of memory" (pinned host memory, other
    backends), and Python's MemoryError. On a GPU these leave the process
    healthy: free the memory and carry on with smaller sizes.
    """
    for module, path in (
        ("torch", ("cuda", "OutOfMemoryError")),
        ("cupy", ("cuda", "memory", "OutOfMemoryError")),
    ):
        found: Any = sys.modules.get(module)
        for attribute in path:
            found = getattr(found, attribute, None)
        if isinstance(found, type) and isinstance(exc, found):
            return True
    if isinstance(exc, MemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def release_memory(device: Any = "cuda") -> None:
    """Give memory back after an out-of-memory error: collect garbage, empty the allocators' caches.

    Call it outside the ``except`` block: until the block ends the exception's
    traceback keeps the failed attempt's tensors alive.
    """
    gc.collect()
    if memory_device(device) == "cpu":
        return
    torch = sys.modules.get("torch")
    if torch is not None:
        with contextlib.suppress(Exception):
            torch.cuda.empty_cache()
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        with contextlib.suppress(Exception):
            cupy.get_default_memory_pool().free_all_blocks()


def out_of_memory_message(what: str, failed: str, largest: str | None, device: Any) -> str:
    """The line a sweep prints when an allocation failed: where it stopped, what fit."""
    where = memory_device(device)
    where = "host" if where == "cpu" else where
    kept = (
        f"the largest size that fit is {largest}, and the results up to it are kept"
        if largest
        else "no size fit"
    )
    return (
        f"{what}: {failed} ran out of {where} memory, so the sweep stopped there; {kept}. "
        "Other programs on the device hold memory: close them to measure larger sizes."
    )


def allocate_shrinking(
    sizes: Iterable[int],
    allocate: Callable[[int], _T],
    *,
    device: str,
    what: str,
) -> tuple[_T, tuple[int, ...], tuple[int, ...]]:
    """Allocate a sweep's buffers for its largest size; on out-of-memory, try the next smaller.

    The budget is computed from the free memory a moment earlier, and on a
    GPU other processes can take memory in between, so the allocation may
    still fail. Then the memory is released (:func:`release_memory`) and the
    next size down is tried. Returns (what ``allocate`` returned, the sizes
    kept, the sizes dropped for running out of memory); raises
    :class:`MemoryBudgetError` if even the smallest size fails.
    """
    remaining = sorted(sizes)
    failed: list[int] = []
    error = ""
    while remaining:
        try:
            return allocate(remaining[-1]), tuple(remaining), tuple(sorted(failed))
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            failed.append(remaining.pop())
            error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        release_memory(device)
    raise MemoryBudgetError(
        out_of_memory_message(
            what, f"allocating even {format_bytes(min(failed))} per array", None, device
        )
        + f" ({error})"
    )


def require_memory_fits(
    nbytes: int, device: Any = "cpu", *, arrays: int = 1, what: str, name: str | None = None
) -> int:
    """:func:`labkit.machine.memory.require_fits` on the memory ``device`` allocates from (host or CUDA).

    ``what`` names the call and the argument that sets the size
    ("sync_points_benchmark(size=100000)") and ``name`` that argument, so the
    error says which number to lower.
    """
    kind = getattr(device, "type", None) or str(device).partition(":")[0]
    where = str(device) if kind == "cuda" else "cpu"
    named: dict[str, Any] = {} if name is None else {"name": name}
    return require_fits(max(int(nbytes), 1), device=where, arrays=arrays, what=what, **named)
