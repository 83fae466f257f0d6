"""How many threads a sweep may use, and a context manager that sets torch's for a block."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from labkit.core.optional import import_optional
from labkit.core.validate import check_positive_int
from labkit.machine import profile as _profile


def cpu_threads() -> int:
    """How many threads "all threads" means: the physical cores this process may use.

    torch starts with one thread per physical core; hyper-threads share a
    core's arithmetic units, so they add little to a matmul. In a container,
    the CPUs the process is allowed on (its affinity) can be fewer still, and
    two of them can be hyper-thread siblings of one core: where Linux sysfs
    shows the topology, the affinity counts as its distinct (package, core)
    pairs, as :func:`labkit.machine.peak.usable_cores` counts them. Elsewhere
    it is the smaller of the affinity's CPU count and the machine's physical
    cores. Under a profile (:mod:`labkit.machine.profile`) it is the profile's
    thread count, so the thread counts a notebook compares are the same on
    every machine.
    """
    profile = _profile.active()
    if profile is not None:
        return profile.threads
    from labkit.machine.cpu import allowed_cpus
    from labkit.machine.peak import distinct_physical_cores

    affinity = allowed_cpus()
    allowed = len(affinity) if affinity is not None else os.cpu_count() or 1
    try:
        import psutil

        physical = psutil.cpu_count(logical=False)
    except ImportError:
        physical = None
    distinct = distinct_physical_cores(affinity) if affinity is not None else None
    if distinct is not None:
        allowed = min(allowed, distinct)
    return max(1, min(allowed, physical or allowed))


def torch_threads(n: int) -> contextlib.AbstractContextManager[None]:
    """Run the block with torch using ``n`` intra-op threads, then restore the previous count.

    The count is restored even when the block raises: a notebook that
    crashed half-way through a sweep must not leave torch on one thread for
    every cell after it. ``n`` is checked on the call, before the ``with``.
    """
    return _torch_threads(check_positive_int("n", n))


@contextlib.contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    torch = import_optional("torch", "setting torch's thread count")
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


#: The variables OpenBLAS and MKL read for their thread count, in the order they take effect.
_BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "MKL_NUM_THREADS")


def numpy_blas_threads() -> int | None:
    """How many threads NumPy's BLAS (its matmul) uses, or None when nothing sets it.

    NumPy's ufuncs (``a + b``) run on one thread, but its matmul calls a
    BLAS library (OpenBLAS in the PyPI wheels) that starts its own pool
    when NumPy is imported: the count comes from ``OPENBLAS_NUM_THREADS``
    (or ``GOTO_NUM_THREADS``, ``MKL_NUM_THREADS``), then ``OMP_NUM_THREADS``,
    else every core. Where none is set, threadpoolctl (if installed) reads the live count.
    Under a profile (:mod:`labkit.machine.profile`) these variables are set
    to the profile's thread count.
    """
    # The variables first: they are what was asked for (and what a profile sets), while
    # the live count OpenBLAS reports is capped by the CPUs it found when it started.
    for name in (*_BLAS_THREAD_VARIABLES, "OMP_NUM_THREADS"):
        value = os.environ.get(name, "").strip().split(",")[0]
        if value.isdigit() and int(value) > 0:
            return int(value)
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    counts = [
        int(pool["num_threads"])
        for pool in threadpool_info()
        if pool.get("user_api") == "blas" and "numpy" in str(pool.get("filepath", ""))
    ]
    return max(counts) if counts else None
