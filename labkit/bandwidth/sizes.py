"""The sizes a bandwidth probe runs at: the caches it is measured against, arrays that live in DRAM, the size grid."""

from __future__ import annotations

import math

from labkit.core.validate import check_int
from labkit.machine import memory as _memory
from labkit.machine import profile as _profile
from labkit.machine.memory import (
    format_bytes,
)
from labkit.machine.report import CPU_OR_CUDA, resolve_device

#: Smallest array labkit measures: below this a call is all overhead.
MIN_BYTES_PER_ARRAY = 4096


def cache_sizes(device: str = "cpu") -> tuple[tuple[str, int], ...]:
    """The caches a sweep crosses, smallest first: (("L1d", bytes), ("L2", ...), ("L3", ...)).

    CPU sizes come from :func:`labkit.machine.cpu.cpu_info` (per core for L1d and L2,
    shared for L3); a GPU has one L2 shared by all its SMs. Unknown levels are
    left out.
    """
    device = resolve_device(device, kinds=CPU_OR_CUDA)
    if device == "cpu":
        from labkit.machine.cpu import cpu_info

        info = cpu_info()
        levels = (
            ("L1d", info.l1d_cache_bytes),
            ("L2", info.l2_cache_bytes),
            ("L3", info.l3_cache_bytes),
        )
        return tuple((name, int(size)) for name, size in levels if size)
    import torch

    l2 = int(getattr(torch.cuda.get_device_properties(torch.device(device)), "L2_cache_size", 0))
    return (("L2", l2),) if l2 > 0 else ()


#: Bytes per array that live in main memory (DRAM or HBM), not in a cache: fixed, not read
#: from the machine, so a sweep has the same rows everywhere (issue 13). STREAM asks for
#: arrays of at least 4× the last-level cache: 512 MiB meets that for CPU caches up to
#: 128 MiB in all, and 2 GiB for GPU L2s up to 512 MiB. A CPU with more last-level cache
#: (all its slices and sockets count) serves part of the traffic from cache:
#: :func:`dram_cache_note` says how the array compares.
DRAM_BYTES_PER_ARRAY: dict[str, int] = {"cpu": 512 * 1024**2, "cuda": 2 * 1024**3}


#: The smallest size of the default sweeps: within L1 on a CPU (every core since 2008
#: has at least 32 KiB of L1d); where launch overhead rules on a GPU.
SWEEP_LOW_BYTES: dict[str, int] = {"cpu": 8 * 1024, "cuda": 64 * 1024}


def dram_bytes_per_array(device: str = "cpu") -> int:
    """The array size labkit uses for main memory: 512 MiB on a CPU, 2 GiB on a GPU.

    A fixed size, not one derived from this machine's caches, so that
    every machine runs (and prints) the same sweep; see
    :data:`DRAM_BYTES_PER_ARRAY` and :func:`dram_cache_ratio`.
    """
    device = resolve_device(device, kinds=CPU_OR_CUDA)
    return DRAM_BYTES_PER_ARRAY["cpu" if device == "cpu" else "cuda"]


#: STREAM's rule: each array at least this many times all the last-level cache a run uses.
STREAM_CACHE_MULTIPLE = 4


def main_memory_bytes_per_array(
    device: str = "cpu", *, arrays: int = 3, fraction: float = _memory.DEFAULT_FRACTION
) -> int:
    """Bytes per array for a single-size main-memory probe: at least 4× the last-level cache.

    :func:`dram_bytes_per_array` (512 MiB on a CPU) meets STREAM's 4× rule
    for last-level caches up to 128 MiB. Where this machine's is larger (an
    8-CCD EPYC run on all its cores has 256 MiB of L3; a 3D V-Cache part
    more), the size grows to the power of two that is at least 4× that cache,
    as far as ``arrays`` such arrays fit ``fraction`` of the free memory: the
    largest power of two that fits, never less than the fixed size (the
    caller then shrinks that to the budget and warns, as before).

    Under a reference profile (``LABKIT_PROFILE``, set by ``make notebooks``
    and ``make test``) the fixed size is used, so a committed output says
    the same on every machine that re-runs it; :func:`dram_cache_note` then
    says how that size compares with the cache. The size *grid* of a sweep
    stays fixed everywhere (:func:`default_sizes`).
    """
    device = resolve_device(device, kinds=CPU_OR_CUDA)
    arrays = check_int("arrays", arrays, minimum=1)
    fixed = dram_bytes_per_array(device)
    if _profile.active() is not None:
        return fixed
    cache = last_level_cache_bytes(device)
    if not cache or STREAM_CACHE_MULTIPLE * cache <= fixed:
        return fixed
    wanted = 1 << (STREAM_CACHE_MULTIPLE * cache - 1).bit_length()
    budget = _memory.budget_bytes(device=device, fraction=fraction)
    while wanted > fixed and wanted * arrays > budget:
        wanted //= 2
    return wanted


def last_level_cache_bytes(device: str = "cpu") -> int | None:
    """The last-level cache a STREAM run on ``device`` can use (None: unknown).

    CPU: every instance the process's CPUs share, summed
    (:func:`labkit.machine.cpu.shared_last_level_cache_bytes`: a 4-CCD EPYC has four
    L3s), or the one :func:`cache_sizes` reports where sysfs says nothing.
    GPU: its L2.
    """
    device = resolve_device(device, kinds=CPU_OR_CUDA)
    if device == "cpu":
        from labkit.machine.cpu import shared_last_level_cache_bytes

        total = shared_last_level_cache_bytes()
        if total:
            return total
    caches = dict(cache_sizes(device))
    return max(caches.values()) if caches else None


def dram_cache_ratio(device: str = "cpu", bytes_per_array: int | None = None) -> float | None:
    """How many times an array (default :func:`main_memory_bytes_per_array`) exceeds the last-level cache.

    STREAM's rule is at least 4× all the last-level cache the run uses:
    below that, part of what is timed as main-memory bandwidth is cache
    bandwidth. None where the cache size is unknown.
    """
    size = main_memory_bytes_per_array(device) if bytes_per_array is None else bytes_per_array
    cache = last_level_cache_bytes(device)
    return size / cache if cache else None


def dram_cache_note(device: str = "cpu", bytes_per_array: int | None = None) -> str:
    """The array against STREAM's 4× rule, in one sentence that has the same form on every machine.

    "16.0× the 32 MiB of last-level cache ...": the ratio and the size are
    this machine's; the rule and what breaking it means are always said, so
    the reader judges the number, and the text's shape does not depend on it.
    """
    size = main_memory_bytes_per_array(device) if bytes_per_array is None else bytes_per_array
    cache = last_level_cache_bytes(device)
    rule = (
        f"STREAM asks for at least {STREAM_CACHE_MULTIPLE}×; below that, part of the traffic "
        "comes from cache"
    )
    if not cache:
        return f"of unknown size against the last-level cache ({rule})"
    return f"{size / cache:.1f}× the {format_bytes(cache)} of last-level cache ({rule})"


def default_sizes(device: str = "cpu", *, points_per_decade: int = 4) -> tuple[int, ...]:
    """A fixed grid of bytes per array, log-spaced, in multiples of 4 KiB.

    CPU: from 8 KiB (inside every L1d) to 512 MiB; GPU: from 64 KiB to
    2 GiB (:func:`dram_bytes_per_array`). The grid is the same on every
    machine: sizes that do not fit the memory budget stay in a sweep's table
    as rows that say so, rather than changing the table's shape.
    """
    device = resolve_device(device, kinds=CPU_OR_CUDA)
    points_per_decade = check_int("points_per_decade", points_per_decade, minimum=1)
    low = SWEEP_LOW_BYTES["cpu" if device == "cpu" else "cuda"]
    return log_sizes(low, dram_bytes_per_array(device), points_per_decade=points_per_decade)


def log_sizes(low_bytes: int, high_bytes: int, *, points_per_decade: int = 4) -> tuple[int, ...]:
    """Sizes from ``low_bytes`` to ``high_bytes``, evenly spaced on a log axis, 4 KiB multiples."""
    low_bytes = check_int("low_bytes", low_bytes, minimum=1)
    high_bytes = check_int("high_bytes", high_bytes, minimum=low_bytes)
    points_per_decade = check_int("points_per_decade", points_per_decade, minimum=1)
    steps = max(1, math.ceil(points_per_decade * math.log10(high_bytes / low_bytes)))
    sizes = {
        _round_up(round(low_bytes * (high_bytes / low_bytes) ** (k / steps)), MIN_BYTES_PER_ARRAY)
        for k in range(steps + 1)
    }
    return tuple(sorted(sizes))


def _round_up(value: int, multiple: int) -> int:
    return max(multiple, -(-int(value) // multiple) * multiple)
