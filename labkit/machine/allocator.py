"""Page faults and the C allocator: what can make a CPU timing measure the OS, not the work.

A tensor of a few MB that a framework frees after every call goes back to the
C allocator (glibc's ``malloc`` on Linux; torch's CPU allocator does not cache
memory). glibc serves a large request with a fresh ``mmap`` and gives it back
with ``munmap`` when it is freed, and it returns free memory at the top of its
heap to the OS (``M_TRIM_THRESHOLD``). Either way the next call gets pages
the kernel has to fault in and zero again: one *minor page fault* per 4 KiB
page touched, a few hundred ns to a µs each. A loop that allocates 32 MiB per
call takes 8,192 faults per call, and the time it reports is partly the
kernel's. Nothing in a timing's spread shows it: every call pays the same.
(Where a buffer is backed by transparent huge pages, one fault maps 2 MiB:
NumPy asks for them for large arrays, torch's CPU allocator does not by
default. Fewer faults then stand for the same bytes zeroed.)

glibc sizes its mmap threshold dynamically (from 128 KiB up to 32 MiB on
64-bit Linux, raised each time a mapped chunk is freed), so whether a given
size faults depends on what the process allocated before. Requests of 32 MiB
or more are always mapped fresh under the defaults. (``man 3 mallopt``:
M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, M_MMAP_MAX.)

- :func:`minor_faults`: the process's minor faults so far (``getrusage``);
  :func:`labkit.bench` counts them around its measured calls
  (``Timing.minor_faults_per_call``).
- :func:`keep_freed_memory`: a context in which glibc keeps what is freed
  (``M_MMAP_MAX = 0``: no fresh mappings; ``M_TRIM_THRESHOLD`` at its
  largest: no trimming), so repeated calls reuse pages already mapped. The
  process then keeps its peak heap until the context ends.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from labkit.core.results import JsonRecord

# mallopt parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
#: glibc's defaults (``man 3 mallopt``), set again when the context ends.
DEFAULT_TRIM_THRESHOLD = 128 * 1024
DEFAULT_MMAP_MAX = 65536
_INT_MAX = 2**31 - 1


def minor_faults() -> int | None:
    """Minor page faults of this process so far (all its threads); None where unknown.

    ``resource.getrusage(RUSAGE_SELF).ru_minflt``: a fault served without
    disk I/O (a fresh page zeroed, or a page already in memory mapped in).
    The ``resource`` module does not exist on Windows.
    """
    try:
        import resource
    except ImportError:
        return None
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)


@dataclass(frozen=True)
class AllocatorSetting(JsonRecord):
    """What :func:`keep_freed_memory` did: ``active`` is False where it could not act."""

    active: bool
    allocator: str
    detail: str

    def __str__(self) -> str:
        return f"{self.allocator}: {self.detail}"


@functools.cache
def _glibc() -> tuple[ctypes.CDLL, str] | None:
    """The C library and its version, when it is glibc (mallopt exists); else None.

    Cached: ``ctypes.util.find_library`` may run ``ldconfig`` or a compiler to
    find the library, and an interleaved comparison switches the allocator
    before every round.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        version = libc.gnu_get_libc_version
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl (Alpine) has no gnu_get_libc_version
        return None
    version.restype = ctypes.c_char_p
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    raw = version()
    return libc, f"glibc {raw.decode() if raw else '?'}"


@contextlib.contextmanager
def keep_freed_memory() -> Iterator[AllocatorSetting]:
    """Within the block, glibc keeps freed memory in the process instead of returning it.

    Sets ``M_MMAP_MAX = 0`` (large requests come from the heap, not from a
    fresh mapping each time) and ``M_TRIM_THRESHOLD`` to its largest value
    (free memory at the top of the heap is not given back). A call that frees
    and re-allocates the same buffers then touches pages that are already
    mapped, and takes no page faults after the first. A thread's arena that
    cannot grow its heap still maps the request (glibc's fallback), so nothing
    fails for lack of a mapping.

    On exit mappings are allowed again (65,536, glibc's default) and the trim
    threshold is glibc's default 128 KiB; the mmap threshold stays where
    glibc's dynamic rule had put it but no longer moves (setting
    ``M_TRIM_THRESHOLD``, ``M_TOP_PAD``, ``M_MMAP_THRESHOLD`` or ``M_MMAP_MAX``
    turns the dynamic rule off for the rest of the process, ``man 3 mallopt``). ``malloc_trim(0)`` then returns the free
    memory to the OS. That restores fresh mappings for later large requests in most runs, not
    in all: in 1 of 5 runs on a 2-vCPU AMD VM, 40 MiB requests after the block were still
    served from the heap, without page faults. Elsewhere (macOS, Windows,
    musl) it does nothing, and the setting it yields says so.
    """
    setting = set_keep_freed(True)
    try:
        yield setting
    finally:
        set_keep_freed(False)  # a no-op where the C library is not glibc


def set_keep_freed(keep: bool) -> AllocatorSetting:
    """Keep freed memory in the process (``True``) or return it to the OS as glibc does by default.

    The switch :func:`keep_freed_memory` makes on entry (``True``) and on exit
    (``False``), for code that alternates between the two (a comparison run
    round by round); see there for what each setting does.
    """
    found = _glibc()
    if found is None:
        return AllocatorSetting(
            active=False,
            allocator="not glibc",
            detail="this C library has no mallopt: freed memory is handled as it always is",
        )
    libc, name = found
    if not _set_kept(libc, keep):
        return AllocatorSetting(
            active=False,
            allocator=name,
            detail="mallopt refused the setting: freed memory is handled as it always is",
        )
    detail = (
        "freed memory kept in the process (M_MMAP_MAX=0, M_TRIM_THRESHOLD=2^31-1)"
        if keep
        else "freed memory returned to the OS (M_MMAP_MAX=65536, M_TRIM_THRESHOLD=128 KiB)"
    )
    return AllocatorSetting(active=keep, allocator=name, detail=detail)


def _set_kept(libc: ctypes.CDLL, keep: bool) -> bool:
    if keep:
        return bool(
            libc.mallopt(_M_MMAP_MAX, 0) == 1 and libc.mallopt(_M_TRIM_THRESHOLD, _INT_MAX) == 1
        )
    libc.mallopt(_M_MMAP_MAX, DEFAULT_MMAP_MAX)
    libc.mallopt(_M_TRIM_THRESHOLD, DEFAULT_TRIM_THRESHOLD)
    libc.malloc_trim(ctypes.c_size_t(0))
    return True


def transparent_hugepages() -> str | None:
    """The kernel's transparent-huge-page mode ("always", "madvise" or "never"); None elsewhere.

    Under "always" every large anonymous mapping may get 2 MiB pages without
    asking, and a buffer then takes one fault per 2 MiB, not per 4 KiB.
    """
    try:
        text = open("/sys/kernel/mm/transparent_hugepage/enabled", encoding="ascii").read()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else None
