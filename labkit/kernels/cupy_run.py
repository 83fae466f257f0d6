"""Run notebook 07's CUDA kernels with CuPy: launch, verify, then time against a measured ceiling.

Each launcher (:func:`strided_copy`, :func:`transpose`, :func:`sgemm`,
:func:`reduce_sum`) takes CuPy arrays, checks them (float32, C-contiguous,
the sizes the kernel supports), compiles the kernel from its ``.cu`` file
with ``cupy.RawModule`` once per set of macros, and launches it.

The experiments (:func:`stride_sweep`, :func:`transpose_versions`,
:func:`sgemm_vs_cublas`, :func:`reduction_versions`,
:func:`block_size_sweep`) follow one rule: **every kernel is checked against
a reference before it is timed** (a wrong kernel raises
:class:`WrongResultError` naming the kernel and its error), and every rate
is given as a fraction of a *ceiling measured in the same run*: the device's
copy bandwidth (``cupy.copyto``, a device-to-device copy) for memory-bound
kernels, cuBLAS (``cupy.matmul`` in strict FP32, TF32 off) for SGEMM. A
fraction of a measured ceiling means the same thing on every GPU; a raw GB/s
does not. Timing is :func:`labkit.bench` with CUDA events (``device="cupy"``).

Without a usable GPU every entry point raises :class:`NoCudaGpuError` (CuPy
imports without a GPU, but cannot allocate or compile); notebooks gate their
cells with :func:`labkit.require_gpu`, and :func:`cupy_gpu_available` asks
without raising.
"""

from __future__ import annotations

import contextlib
import functools
import math
import numbers
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from labkit.bandwidth.stream import format_gb_per_s
from labkit.core.units import format_gflop_per_s
from labkit.core.validate import check_int
from labkit.kernels.sources import compile_options, kernel_source, kernel_spec
from labkit.machine import memory as _memory
from labkit.timing.bench import Timing, bench, format_duration

TRANSPOSE_VERSIONS: tuple[str, ...] = ("naive", "tiled", "padded")
SGEMM_VERSIONS: tuple[str, ...] = ("naive", "shared", "tiled")
REDUCE_VERSIONS: tuple[str, ...] = ("atomic", "shared", "warp_shuffle")
BLOCK_SWEEP_KERNELS: tuple[str, ...] = (
    "strided_copy",
    "transpose_padded",
    "reduce_shared",
    "reduce_warp_shuffle",
)
DEFAULT_STRIDES: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
DEFAULT_BLOCK_SIZES: tuple[int, ...] = (32, 64, 128, 256, 512, 1024)
#: Bytes per array the experiments aim for: far past any L2 (H200: 60 MB), shrunk to fit.
DEFAULT_ARRAY_BYTES = 1024**3
#: SGEMM results must be within this fraction of the largest |reference| value.
#: Strict FP32 at K = 4096 errs by ~1e-6 of it; TF32 (10-bit mantissa) by ~3e-4.
SGEMM_RTOL = 5e-5
#: reduce_atomic runs on at most this many elements: n atomics to one address are slow.
ATOMIC_ELEMENTS = 1 << 24

_INT32_MAX = 2**31 - 1
_STATIC_SMEM_BYTES = 48 * 1024  # the most static __shared__ memory a block may declare


class NoCudaGpuError(RuntimeError):
    """No CUDA GPU is usable here, so CuPy cannot run a kernel (the message says why)."""


class WrongResultError(RuntimeError):
    """A kernel's output differs from the reference by more than the tolerance."""


class KernelCompileError(RuntimeError):
    """NVRTC rejected a kernel with the macros given (the message holds its log)."""


# --------------------------------------------------------------------------- CuPy and the GPU


def cupy_gpu_available() -> bool:
    """Whether CuPy is installed and sees a CUDA GPU. Never raises."""
    from labkit.core.optional import is_installed

    try:
        if not is_installed("cupy"):
            return False
        import cupy

        return bool(cupy.is_available())
    except Exception:
        return False


def require_cupy(what: str) -> Any:
    """CuPy, when it can run kernels here; else MissingPackageError or NoCudaGpuError."""
    from labkit.core.optional import import_optional

    cupy = import_optional("cupy", what)
    try:
        usable = bool(cupy.is_available())
        reason = "cupy.is_available() is False: no NVIDIA GPU or driver that CuPy can use"
    except Exception as exc:  # a broken driver install raises instead of answering
        usable, reason = False, f"CuPy could not query the GPU ({_first_line(exc)})"
    if not usable:
        raise NoCudaGpuError(
            f"No CUDA GPU here, so {what} cannot run: {reason}. In a notebook, gate the cell "
            "with labkit.require_gpu(...); `labkit doctor` explains what is missing."
        )
    return cupy


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def gpu_name() -> str:
    """The name of the current CUDA device, as the driver reports it ("NVIDIA H200")."""
    cupy = require_cupy("reading the GPU's name")
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def _attribute(cupy: Any, key: str, default: int) -> int:
    try:
        return int(cupy.cuda.Device().attributes[key])
    except Exception:  # pragma: no cover - every CUDA device reports these
        return default


# --------------------------------------------------------------------------- compiling

_MODULES: dict[tuple[str, tuple[str, ...], int], Any] = {}


def get_kernel(name: str, **macros: int) -> Any:
    """The compiled kernel ``name`` (a ``cupy.RawKernel``) with its macros set.

    Modules are cached per (file, macros, device): the first call compiles
    with NVRTC (CuPy also caches the binary on disk), later calls are free.
    """
    spec = kernel_spec(name)
    options = compile_options(name, **macros)
    cupy = require_cupy(f"compiling {name}")
    key = (spec.file, options, int(cupy.cuda.Device().id))
    module = _MODULES.get(key)
    if module is None:
        module = cupy.RawModule(code=kernel_source(name), options=options)
    try:
        kernel = module.get_function(name)  # compiles on first use
    except Exception as exc:
        if type(exc).__name__ != "CompileException":
            raise
        log = "\n".join(str(exc).strip().splitlines()[:12])
        raise KernelCompileError(
            f"NVRTC could not compile {name} from {spec.file} with {' '.join(options) or 'no macros'}:\n{log}"
        ) from exc
    _MODULES[key] = module
    return kernel


@dataclass(frozen=True)
class Launch:
    """One kernel launch, ready to repeat: what :func:`labkit.bench` times.

    ``zero`` is an array set to 0 before each launch (a reduction's output,
    which the kernels add to); it is part of the timed call.
    """

    name: str
    kernel: Any
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[Any, ...]
    settings: Mapping[str, int] = field(default_factory=dict)
    zero: Any = None

    def __call__(self) -> None:
        if self.zero is not None:
            self.zero.fill(0)
        self.kernel(self.grid, self.block, self.args)


# --------------------------------------------------------------------------- argument checks


def _check_ms(name: str, value: Any, *, allow_zero: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of milliseconds, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be a finite number of milliseconds, got {value!r}")
    return value


def _budget(warmup_ms: Any, rep_ms: Any) -> dict[str, Any]:
    return {
        "warmup_ms": _check_ms("warmup_ms", warmup_ms, allow_zero=True),
        "rep_ms": _check_ms("rep_ms", rep_ms, allow_zero=False),
    }


def _check_early(quick: Any, **sizes: tuple[Any, int]) -> None:
    """The quick flag and the explicit sizes ({name: (value, largest)}), before CuPy is imported.

    Whether a size fits the GPU is checked once CuPy can read its free memory.
    """
    from labkit.core.validate import check_bool

    check_bool("quick", quick)
    for name, (value, high) in sizes.items():
        if value is not None:
            check_int(name, value, minimum=1, maximum=high)


def _check_versions(versions: Any, choices: Sequence[str]) -> list[str]:
    if isinstance(versions, (str, bytes)) or not isinstance(versions, Iterable):
        raise TypeError(f"versions must be a list of names from {choices}, got {versions!r}")
    return [_check_version("versions[...]", v, choices) for v in versions]


def _check_version(name: str, value: Any, versions: Sequence[str]) -> str:
    if value not in versions:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, versions))}, got {value!r}")
    return str(value)


def _check_array(name: str, x: Any, cupy: Any, *, ndim: int | None = None) -> Any:
    """A C-contiguous float32 CuPy array with 1 to 2**31 - 1 elements (the kernels use int)."""
    if not isinstance(x, cupy.ndarray):
        raise TypeError(
            f"{name} must be a CuPy array (cupy.ndarray) on the GPU, got {type(x).__name__}; "
            "move a NumPy array there with cupy.asarray(x)"
        )
    if x.dtype != cupy.float32:
        raise TypeError(
            f"{name} must be float32, got {x.dtype}; convert with {name}.astype(cupy.float32)"
        )
    if ndim is not None and x.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(x.shape)}")
    if not x.flags.c_contiguous:
        raise ValueError(
            f"{name} must be C-contiguous (row-major, no gaps); pass cupy.ascontiguousarray({name})"
        )
    if not 1 <= x.size <= _INT32_MAX:
        raise ValueError(f"{name} must have 1 to {_INT32_MAX:,} elements, got {x.size:,}")
    return x


def _check_on_gpu(name: str, x: Any) -> None:
    """Before CuPy is imported: without CuPy loaded nothing is a CuPy array, so refuse ``x`` now.

    Once CuPy is loaded, :func:`_check_array` checks ``x`` against it.
    """
    if sys.modules.get("cupy") is None:
        raise TypeError(
            f"{name} must be a CuPy array (cupy.ndarray) on the GPU, got {type(x).__name__}; "
            "move a NumPy array there with cupy.asarray(x)"
        )


def _check_out(out: Any, cupy: Any, shape: tuple[int, ...], source: Any) -> Any:
    """``out`` (checked) or a fresh array; never the input itself."""
    if out is None:
        return cupy.empty(shape, dtype=cupy.float32)
    _check_array("out", out, cupy)
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"out must have shape {tuple(shape)}, got {tuple(out.shape)}")
    if out.data.ptr == source.data.ptr:
        raise ValueError("out must not be the input array: these kernels cannot work in place")
    return out


def _check_aligned(name: str, x: Any) -> None:
    if x.data.ptr % 16:
        raise ValueError(
            f"{name} must start on a 16-byte boundary (the kernel reads float4s); a slice such "
            f"as {name}[1:] does not: pass {name}.copy()"
        )


def _check_block_size(value: Any, *, power_of_two: bool = False, name: str = "block_size") -> int:
    block = check_int(name, value, minimum=32, maximum=1024)
    if block % 32:
        raise ValueError(f"{name} must be a multiple of 32 (a whole number of warps), got {block}")
    if power_of_two and block & (block - 1):
        raise ValueError(f"{name} must be a power of two for this kernel, got {block}")
    return block


def _i32(value: int) -> Any:
    import numpy as np

    return np.int32(value)


# --------------------------------------------------------------------------- launchers


def _plan_strided_copy(
    cupy: Any, x: Any, stride: Any, out: Any, block_size: Any, items_per_thread: Any
) -> Launch:
    _check_array("x", x, cupy)
    stride = check_int("stride", stride, minimum=1, maximum=65535)
    block = check_int("block_size", block_size, minimum=1, maximum=1024)
    items = check_int("items_per_thread", items_per_thread, minimum=1, maximum=64)
    n = int(x.size)
    if n % stride:
        raise ValueError(
            f"x.size ({n:,}) must be a multiple of stride ({stride}): the kernel copies an "
            f"m x stride view of x, so every stride moves the same n floats"
        )
    out = _check_out(out, cupy, tuple(x.shape), x)
    m = n // stride
    grid = (math.ceil(m / (block * items)), stride, 1)
    kernel = get_kernel("strided_copy", ITEMS_PER_THREAD=items)
    return Launch(
        "strided_copy",
        kernel,
        grid,
        (block, 1, 1),
        (x, out, _i32(n), _i32(stride)),
        {"stride": stride, "block_size": block, "ITEMS_PER_THREAD": items},
    )


def strided_copy(
    x: Any, stride: int, *, out: Any = None, block_size: int = 256, items_per_thread: int = 4
) -> Any:
    """Copy ``x`` into ``out`` reading neighbouring threads' floats ``stride`` apart.

    ``out.ravel()[q * m + r] = x.ravel()[r * stride + q]`` with ``m = x.size
    // stride``: every float is copied once whatever the stride, so only the
    access pattern changes (see ``strided_copy.cu``). ``x.size`` must be a
    multiple of ``stride``. Returns ``out`` (launched, not yet finished).
    """
    check_int("stride", stride, minimum=1, maximum=65535)
    check_int("block_size", block_size, minimum=1, maximum=1024)
    check_int("items_per_thread", items_per_thread, minimum=1, maximum=64)
    _check_on_gpu("x", x)
    cupy = require_cupy("strided_copy")
    launch = _plan_strided_copy(cupy, x, stride, out, block_size, items_per_thread)
    launch()
    return launch.args[1]


def expected_strided_copy(x: Any, stride: int) -> Any:
    """What :func:`strided_copy` must produce, flat (a copy of ``x`` reordered; ``x`` itself for stride 1)."""
    n = int(x.size)
    return x.reshape(n // stride, stride).T.reshape(-1) if stride > 1 else x.reshape(-1)


def _check_tile(tile_dim: Any, block_rows: Any) -> tuple[int, int]:
    tile = check_int("tile_dim", tile_dim, minimum=1, maximum=1024)
    rows = check_int("block_rows", block_rows, minimum=1, maximum=1024)
    if tile % rows:
        raise ValueError(f"tile_dim ({tile}) must be a multiple of block_rows ({rows})")
    if tile * rows > 1024:
        raise ValueError(f"tile_dim * block_rows ({tile * rows}) is the block size; at most 1024")
    if tile * (tile + 1) * 4 > _STATIC_SMEM_BYTES:
        raise ValueError(
            f"tile_dim={tile} needs {tile * (tile + 1) * 4:,} bytes of shared memory; "
            f"at most {_STATIC_SMEM_BYTES:,} (tile_dim <= 109)"
        )
    return tile, rows


def _plan_transpose(
    cupy: Any, x: Any, version: Any, out: Any, tile_dim: Any, block_rows: Any
) -> Launch:
    version = _check_version("version", version, (*TRANSPOSE_VERSIONS, "tiled_nosync"))
    _check_array("x", x, cupy, ndim=2)
    tile, rows_per_pass = _check_tile(tile_dim, block_rows)
    rows, cols = (int(d) for d in x.shape)
    grid = (math.ceil(cols / tile), math.ceil(rows / tile), 1)
    if grid[1] > 65535:
        raise ValueError(f"x has {rows:,} rows: at most {65535 * tile:,} with tile_dim={tile}")
    out = _check_out(out, cupy, (cols, rows), x)
    name = f"transpose_{version}"
    kernel = get_kernel(name, TILE_DIM=tile, BLOCK_ROWS=rows_per_pass)
    return Launch(
        name,
        kernel,
        grid,
        (tile, rows_per_pass, 1),
        (x, out, _i32(rows), _i32(cols)),
        {"TILE_DIM": tile, "BLOCK_ROWS": rows_per_pass},
    )


def transpose(
    x: Any, version: str = "padded", *, out: Any = None, tile_dim: int = 32, block_rows: int = 8
) -> Any:
    """``out = x.T`` for a 2-D float32 array, with the kernel ``transpose_<version>``.

    ``version`` is "naive", "tiled" or "padded" (see ``transpose.cu``), or
    "tiled_nosync": the exercise's kernel, **wrong on purpose** (no
    ``__syncthreads()``). Thread blocks are ``tile_dim x block_rows``.
    """
    _check_version("version", version, (*TRANSPOSE_VERSIONS, "tiled_nosync"))
    _check_tile(tile_dim, block_rows)
    _check_on_gpu("x", x)
    cupy = require_cupy(f"transpose (version={version!r})")
    launch = _plan_transpose(cupy, x, version, out, tile_dim, block_rows)
    launch()
    return launch.args[1]


def sgemm_tiled_problems(**macros: int) -> list[str]:
    """Why a set of ``sgemm_tiled`` macros cannot compile (empty list: it can).

    The same rules as the ``static_assert``s in ``sgemm.cu``; Kernel Tuner's
    restrictions (:mod:`labkit.kernels.tuning`) are written from them too.
    """
    from labkit.kernels.sources import macros_for

    m = macros_for("sgemm_tiled", **macros)
    bm, bn, bk, tm, tn = (m[k] for k in ("BM", "BN", "BK", "TM", "TN"))
    if bm % tm or bn % tn:
        return ["TM must divide BM and TN must divide BN"]
    threads = (bm // tm) * (bn // tn)
    problems = []
    if not 32 <= threads <= 1024:
        problems.append(f"(BM/TM)*(BN/TN) = {threads} threads; must be 32 to 1024")
    if bk % 4 or bn % 4 or tn % 4 or tm % 4:
        problems.append("BK, BN, TM and TN must be multiples of 4 (float4 accesses)")
    if bn % (8 * tn) or bm % (4 * tm):
        problems.append(
            "a warp covers 4 x 8 threads' tiles: BN/TN must be a multiple of 8, BM/TM of 4"
        )
    if (4 * threads) % bk or (bm * bk) % (4 * threads):
        problems.append(
            "the A tile (BM x BK) must load in whole float4 rows: "
            "BK | 4*threads and 4*threads | BM*BK"
        )
    if (4 * threads) % bn or (bk * bn) % (4 * threads):
        problems.append(
            "the B tile (BK x BN) must load in whole float4 rows: "
            "BN | 4*threads and 4*threads | BK*BN"
        )
    if (bk * bm + bk * bn) * 4 > _STATIC_SMEM_BYTES:
        problems.append(
            f"the tiles need {(bk * bm + bk * bn) * 4:,} bytes of shared memory; "
            f"at most {_STATIC_SMEM_BYTES:,}"
        )
    return problems


def _plan_sgemm(
    cupy: Any, a: Any, b: Any, version: Any, out: Any, macros: dict[str, Any]
) -> Launch:
    version = _check_version("version", version, SGEMM_VERSIONS)
    _check_array("a", a, cupy, ndim=2)
    _check_array("b", b, cupy, ndim=2)
    (m, k), (k2, n) = (tuple(int(d) for d in a.shape), tuple(int(d) for d in b.shape))
    if k != k2:
        raise ValueError(f"a is {m} x {k} and b is {k2} x {n}: a's columns must equal b's rows")
    out = _check_out(out, cupy, (m, n), a)
    if out.data.ptr == b.data.ptr:
        raise ValueError("out must not be b: these kernels cannot work in place")
    name = f"sgemm_{version}"
    if version == "naive":
        if macros:
            raise ValueError(f"sgemm_naive takes no macros, got {sorted(macros)}")
        block, grid, settings = (32, 8, 1), (math.ceil(n / 32), math.ceil(m / 8), 1), {}
    elif version == "shared":
        from labkit.kernels.sources import macros_for

        settings = macros_for(name, **macros)
        tile = check_int("TILE_SIZE", settings["TILE_SIZE"], minimum=1, maximum=32)
        block, grid = (tile, tile, 1), (math.ceil(n / tile), math.ceil(m / tile), 1)
    else:
        from labkit.kernels.sources import macros_for

        settings = macros_for(name, **macros)
        problems = sgemm_tiled_problems(**settings)
        if problems:
            raise ValueError(f"sgemm_tiled cannot use {settings}: " + "; ".join(problems))
        bm, bn, bk = settings["BM"], settings["BN"], settings["BK"]
        if m % bm or n % bn or k % bk:
            raise ValueError(
                f"sgemm_tiled needs M % BM == 0, N % BN == 0 and K % BK == 0 (it has no edge "
                f"handling); got M={m}, N={n}, K={k} with BM={bm}, BN={bn}, BK={bk}. Use "
                "version='shared' or 'naive' for other sizes, or pad the matrices"
            )
        for label, array in (("a", a), ("b", b), ("out", out)):
            _check_aligned(label, array)
        threads = (bm // settings["TM"]) * (bn // settings["TN"])
        block, grid = (threads, 1, 1), (n // bn, m // bm, 1)
    if grid[1] > 65535:
        raise ValueError(f"a has {m:,} rows: too many thread-block rows ({grid[1]:,} > 65,535)")
    kernel = get_kernel(name, **settings)
    return Launch(name, kernel, grid, block, (a, b, out, _i32(m), _i32(n), _i32(k)), settings)


def sgemm(a: Any, b: Any, version: str = "tiled", *, out: Any = None, **macros: int) -> Any:
    """``out = a @ b`` in float32 with the kernel ``sgemm_<version>`` ("naive", "shared", "tiled").

    Macros set the tile sizes (``TILE_SIZE`` for "shared"; ``BM``, ``BN``,
    ``BK``, ``TM``, ``TN`` for "tiled", which needs M, N, K multiples of BM,
    BN, BK). See ``sgemm.cu``.
    """
    _check_version("version", version, SGEMM_VERSIONS)
    _check_on_gpu("a", a)
    _check_on_gpu("b", b)
    cupy = require_cupy(f"sgemm (version={version!r})")
    launch = _plan_sgemm(cupy, a, b, version, out, macros)
    launch()
    return launch.args[2]


def _plan_reduce(cupy: Any, x: Any, version: Any, out: Any, block_size: Any) -> Launch:
    version = _check_version("version", version, REDUCE_VERSIONS)
    _check_array("x", x, cupy)
    out = _check_out(out, cupy, (1,), x)
    n = int(x.size)
    name = f"reduce_{version}"
    if version == "atomic":
        block = check_int("block_size", block_size, minimum=1, maximum=1024)
        grid, settings = (math.ceil(n / block), 1, 1), {}
    elif version == "shared":
        block = _check_block_size(block_size, power_of_two=True)
        grid, settings = (math.ceil(n / (2 * block)), 1, 1), {"BLOCK_SIZE": block}
    else:
        block = _check_block_size(block_size)
        _check_aligned("x", x)
        resident = _attribute(cupy, "MultiProcessorCount", 1) * max(
            _attribute(cupy, "MaxThreadsPerMultiProcessor", 2048) // block, 1
        )
        grid, settings = (max(1, min(resident, math.ceil(n / (4 * block)))), 1, 1), {}
    kernel = get_kernel(name, **settings)
    return Launch(
        name,
        kernel,
        grid,
        (block, 1, 1),
        (x, out, _i32(n)),
        {"block_size": block, **settings},
        zero=out,
    )


def reduce_sum(
    x: Any, version: str = "warp_shuffle", *, out: Any = None, block_size: int = 256
) -> Any:
    """The sum of a float32 array with ``reduce_<version>`` ("atomic", "shared", "warp_shuffle").

    Returns a 1-element float32 CuPy array (``float(result[0])`` reads it).
    "shared" needs a power-of-two ``block_size``; "warp_shuffle" a multiple of 32.
    """
    _check_version("version", version, REDUCE_VERSIONS)
    _check_on_gpu("x", x)
    cupy = require_cupy(f"reduce_sum (version={version!r})")
    launch = _plan_reduce(cupy, x, version, out, block_size)
    launch()
    return launch.args[1]


# --------------------------------------------------------------------------- verification


def _xp(*arrays: Any) -> Any:
    """CuPy when any array is a CuPy array, else NumPy: the checks work on both."""
    if any(type(a).__module__.split(".")[0] == "cupy" for a in arrays):
        import cupy

        return cupy
    import numpy

    return numpy


def check_equal(kernel: str, got: Any, expected: Any) -> float:
    """0.0 when ``got`` equals ``expected`` exactly, else raise :class:`WrongResultError`.

    Copies and transposes move floats without arithmetic, so anything but
    an exact match is a bug (or a race, as in ``transpose_tiled_nosync``).
    """
    cupy = _xp(got, expected)
    if got.shape == expected.shape and bool(cupy.array_equal(got, expected)):
        return 0.0
    if got.shape != expected.shape:
        raise WrongResultError(
            f"{kernel}: wrong shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
        )
    diff = cupy.abs(got - expected)
    wrong = int(cupy.count_nonzero(diff)) if bool(cupy.isfinite(diff).all()) else int(diff.size)
    raise WrongResultError(
        f"{kernel} gave a wrong result: {wrong:,} of {int(got.size):,} elements differ from the "
        f"reference (max error {float(cupy.nanmax(diff)):.3g}, expected 0: this kernel only "
        "moves floats)"
    )


def check_close(kernel: str, got: Any, expected: Any, *, rtol: float = SGEMM_RTOL) -> float:
    """max|got - expected| / max|expected|; raise :class:`WrongResultError` above ``rtol``."""
    cupy = _xp(got, expected)
    scale = float(cupy.abs(expected).max())
    error = float(cupy.abs(got - expected).max())  # in expected's precision (float64)
    relative = error / scale if scale > 0 else error
    if not math.isfinite(relative) or relative > rtol:
        raise WrongResultError(
            f"{kernel} gave a wrong result: max error {error:.3g} is {relative:.2g} of the largest "
            f"|reference| value {scale:.3g}, above the tolerance {rtol:.1g}. (Strict float32 "
            "matmul errs by ~1e-6 of it; TF32 by ~1e-4 or more.)"
        )
    return relative


def check_sum(kernel: str, got: Any, x: Any, *, exact: bool = False) -> float:
    """|got - sum(x)| with the sum taken in float64; raise above the tolerance.

    ``exact``: the data are small integers, whose float32 partial sums are
    exact in any order, so any difference is a bug. Otherwise the tolerance
    is ``sqrt(n) * 2**-23 * sum(|x|)``, the rounding a float32 sum in an
    arbitrary order typically stays within.
    """
    cupy = _xp(got, x)
    reference = float(cupy.sum(x, dtype=cupy.float64))
    value = float(got.reshape(-1)[0])
    error = abs(value - reference)
    tolerance = (
        0.0 if exact else math.sqrt(x.size) * 2.0**-23 * float(cupy.abs(x).sum(dtype=cupy.float64))
    )
    if not math.isfinite(error) or error > tolerance:
        raise WrongResultError(
            f"{kernel} gave {value!r}, the float64 sum is {reference!r}: error {error:.3g}, "
            f"tolerance {tolerance:.3g}"
        )
    return error


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Ceiling:
    """The measured best the device does on this work: device copy or cuBLAS."""

    name: str
    rate: float
    unit: str
    timing: Timing

    @property
    def median_ms(self) -> float:
        return self.timing.median_ms


@dataclass(frozen=True)
class KernelRun:
    """One verified, timed kernel: its rate in the comparison's unit and as a fraction of the ceiling.

    ``param`` is the swept value (a stride, a block size) in a sweep.
    ``max_error`` is the verified error (0 for copies and transposes).
    """

    name: str
    label: str
    rate: float
    fraction: float
    timing: Timing
    param: int | None = None
    max_error: float = 0.0
    settings: Mapping[str, int] = field(default_factory=dict)

    @property
    def median_ms(self) -> float:
        return self.timing.median_ms


def _format_rate(value: float, unit: str) -> str:
    return format_gb_per_s(value) if unit == "GB/s" else format_gflop_per_s(value)


@dataclass(frozen=True)
class KernelComparison:
    """Kernels timed side by side against one ceiling, on one GPU.

    ``counting`` says which bytes or FLOP the rates count; ``fraction`` of a
    run is its rate over the ceiling's (0.9 = 90% of the copy bandwidth).
    """

    experiment: str
    device: str
    problem: str
    unit: str
    counting: str
    ceiling: Ceiling
    runs: tuple[KernelRun, ...]
    param_name: str | None = None
    notes: tuple[str, ...] = ()

    def run(self, label: str) -> KernelRun:
        """The run with this label (or kernel name)."""
        for run in self.runs:
            if label in (run.label, run.name):
                return run
        raise KeyError(f"no run {label!r}; runs: {', '.join(r.label for r in self.runs)}")

    def fraction(self, label: str) -> float:
        return self.run(label).fraction

    @property
    def best(self) -> KernelRun:
        return max(self.runs, key=lambda r: r.rate)

    def summary(self) -> list[str]:
        lines = [
            f"{self.experiment}: {self.problem}; rates count {self.counting}",
            f"  ceiling, {self.ceiling.name}: {_format_rate(self.ceiling.rate, self.unit)} "
            f"({format_duration(self.ceiling.median_ms)})",
        ]
        for r in self.runs:
            lines.append(
                f"  {r.label}: {_format_rate(r.rate, self.unit)} = {r.fraction:.0%} of "
                f"the ceiling ({format_duration(r.median_ms)})"
            )
        lines += [f"  note: {note}" for note in self.notes]
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {
            "experiment": self.experiment,
            "device": self.device,
            "problem": self.problem,
            "unit": self.unit,
            "counting": self.counting,
            "param_name": self.param_name,
            "ceiling": {
                "name": self.ceiling.name,
                "rate": self.ceiling.rate,
                "median_ms": self.ceiling.median_ms,
            },
            "runs": [
                {
                    "name": r.name,
                    "label": r.label,
                    "param": r.param,
                    "rate": r.rate,
                    "fraction": r.fraction,
                    "median_ms": r.median_ms,
                    "iqr_ms": r.timing.iqr_ms,
                    "n": r.timing.n,
                    "max_error": r.max_error,
                    "settings": dict(r.settings),
                }
                for r in self.runs
            ],
            "notes": list(self.notes),
        }

    def __str__(self) -> str:
        width = max([len("ceiling"), *(len(r.label) for r in self.runs)])
        lines = [
            f"{self.experiment} on {self.device}: {self.problem}",
            f"  rates count {self.counting}",
            f"  {'ceiling':<{width}}  {format_duration(self.ceiling.median_ms):>9}  "
            f"{_format_rate(self.ceiling.rate, self.unit):>13}  {self.ceiling.name}",
        ]
        for r in self.runs:
            lines.append(
                f"  {r.label:<{width}}  {format_duration(r.median_ms):>9}  "
                f"{_format_rate(r.rate, self.unit):>13}  {r.fraction:4.0%} of ceiling"
            )
        largest = max((r.max_error for r in self.runs), default=0.0)
        lines.append(
            f"  every kernel's output was verified before timing (largest error {largest:.2g})"
        )
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


# --------------------------------------------------------------------------- experiments


def _gb_per_s(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e6) if ms > 0 else math.inf


def _free(cupy: Any) -> None:
    with contextlib.suppress(Exception):
        cupy.get_default_memory_pool().free_all_blocks()


def _elements(requested: int | None, *, arrays: int, multiple: int, what: str, quick: bool) -> int:
    """float32 elements per array: the requested count (checked to fit), or the default shrunk to fit."""
    if requested is not None:
        n = check_int("n_elements", requested, minimum=1, maximum=_INT32_MAX)
        _memory.check_fits(4 * n, device="cuda", arrays=arrays, what=what)
        if n % multiple:
            raise ValueError(f"n_elements must be a multiple of {multiple:,} here, got {n:,}")
        return n
    target = (16 * 1024**2 if quick else DEFAULT_ARRAY_BYTES) // 4
    fits = _memory.fit_bytes(4 * target, device="cuda", arrays=arrays) // 4
    n = min(target, fits, _INT32_MAX) // multiple * multiple
    if n < multiple:
        raise _memory.MemoryBudgetError(
            f"{what}: not even {multiple:,} floats per array fit the "
            "GPU memory budget; close other GPU programs"
        )
    return n


def _random(cupy: Any, shape: Any, *, integers: bool = False, seed: int = 0) -> Any:
    """Uniform floats in [-1, 1), or (integers=True) whole numbers -4..4 stored as float32."""
    rs = cupy.random.RandomState(seed)
    if not integers:
        return rs.uniform(-1.0, 1.0, size=shape, dtype=cupy.float32)
    x = rs.uniform(-4.0, 5.0, size=shape, dtype=cupy.float32)
    cupy.floor(x, out=x)
    return x


def run_and_verify(
    launch: Callable[[], Any],
    check: Callable[[], float],
    *,
    label: str,
    reset: Any = None,
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
) -> tuple[Timing, float]:
    """Launch once, verify, and only then time: returns (the Timing, the verified error).

    ``check`` compares the output with a reference and raises
    :class:`WrongResultError` if it is wrong (see :func:`check_equal`,
    :func:`check_close`, :func:`check_sum`), so a wrong kernel is never
    timed. ``reset`` (the output array) is filled with NaN first, so an
    element the kernel fails to write cannot pass with an earlier value.
    """
    budget = _budget(warmup_ms, rep_ms)
    if reset is not None:
        reset.fill(math.nan)
    launch()
    error = check()
    return bench(launch, device="cupy", label=label, warn=False, **budget), error


def _verified(
    launch: Callable[[], Any],
    check: Callable[[], float],
    label: str,
    budget: dict[str, Any],
    reset: Any = None,
) -> tuple[Timing, float]:
    return run_and_verify(launch, check, label=label, reset=reset, **budget)


def _copy_ceiling(cupy: Any, src: Any, dst: Any, budget: dict[str, Any]) -> Ceiling:
    cupy.copyto(dst, src)
    check_equal("cupy.copyto", dst, src)
    timing = bench(cupy.copyto, dst, src, device="cupy", label="cupy.copyto", warn=False, **budget)
    return Ceiling(
        "device-to-device copy (cupy.copyto), bytes read + written",
        _gb_per_s(2 * src.nbytes, timing.median_ms),
        "GB/s",
        timing,
    )


def _size_text(n: int) -> str:
    return f"{n:,} float32 ({_memory.format_bytes(4 * n)} per array)"


def stride_sweep(
    strides: Iterable[int] = DEFAULT_STRIDES,
    *,
    n_elements: int | None = None,
    block_size: int = 256,
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    quick: bool = False,
) -> KernelComparison:
    """Effective bandwidth of :func:`strided_copy` at each stride, against the copy ceiling.

    All strides copy the same n floats; only the distance between the floats
    neighbouring threads read changes. Expect ~100% of the copy at stride 1
    and a fall until stride 8, where every float costs a 32-byte sector.
    """
    if isinstance(strides, (str, bytes)) or not isinstance(strides, Iterable):
        raise TypeError(f"strides must be a sequence of integers, got {type(strides).__name__}")
    values = sorted({check_int("strides[...]", s, minimum=1, maximum=65535) for s in strides})
    if not values:
        raise ValueError("strides is empty: give at least one stride, e.g. (1, 2, 4, 8)")
    block = check_int("block_size", block_size, minimum=1, maximum=1024)
    budget = _budget(warmup_ms, rep_ms)
    _check_early(quick, n_elements=(n_elements, _INT32_MAX))
    cupy = require_cupy("the stride sweep")
    _free(cupy)  # blocks an earlier experiment left in CuPy's pool count as used
    n = _elements(
        n_elements, arrays=3, multiple=math.lcm(*values), what="the stride sweep", quick=quick
    )
    x = _random(cupy, (n,))
    out = cupy.empty_like(x)
    try:
        ceiling = _copy_ceiling(cupy, x, out, budget)
        runs = []
        for stride in values:
            launch = _plan_strided_copy(cupy, x, stride, out, block, 4)
            check = functools.partial(_check_strided, out, x, stride)
            timing, error = _verified(launch, check, f"stride {stride}", budget, reset=out)
            rate = _gb_per_s(2 * x.nbytes, timing.median_ms)
            runs.append(
                KernelRun(
                    "strided_copy",
                    f"stride {stride}",
                    rate,
                    rate / ceiling.rate,
                    timing,
                    stride,
                    error,
                    dict(launch.settings),
                )
            )
        return KernelComparison(
            "Strided copy",
            gpu_name(),
            _size_text(n),
            "GB/s",
            "useful bytes read + written (2 x n x 4 B)",
            ceiling,
            tuple(runs),
            "stride",
        )
    finally:
        del x, out
        _free(cupy)


def _check_strided(out: Any, x: Any, stride: int) -> float:
    m = int(x.size) // stride  # compare 2-D views: no copy of the expected result
    view = x.reshape(m, stride).T
    return check_equal(f"strided_copy (stride {stride})", out.reshape(stride, m), view)


def _square_side(requested: int | None, *, arrays: int, quick: bool, what: str) -> int:
    """The side of the square matrices: as requested (checked to fit), or 1 GiB each shrunk to fit."""
    if requested is not None:
        n = check_int("n", requested, minimum=1, maximum=46340)
        _memory.check_fits(4 * n * n, device="cuda", arrays=arrays, what=what)
        return n
    target = (4 << 20) if quick else DEFAULT_ARRAY_BYTES
    side = math.isqrt(_memory.fit_bytes(target, device="cuda", arrays=arrays) // 4)
    side = side // 1024 * 1024 if side >= 1024 else side // 64 * 64
    if side < 64:
        raise _memory.MemoryBudgetError(
            f"{what}: not even a 64 x 64 matrix fits the GPU memory budget"
        )
    return side


def transpose_versions(
    n: int | None = None,
    *,
    versions: Sequence[str] = TRANSPOSE_VERSIONS,
    tile_dim: int = 32,
    block_rows: int = 8,
    padded_configs: Sequence[tuple[int, int]] = (),
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    quick: bool = False,
) -> KernelComparison:
    """The naive, tiled and padded transposes of an n x n matrix, against the copy ceiling.

    Bytes counted: the matrix read once and written once, as for the copy.
    The default n fills 1 GiB per matrix (16,384), shrunk to fit the memory
    budget. ``padded_configs`` adds runs of the padded kernel with other
    ``(tile_dim, block_rows)`` thread blocks, labelled "padded 64x16".
    """
    chosen = _check_versions(versions, (*TRANSPOSE_VERSIONS, "tiled_nosync"))
    extra = [_check_tile(*_pair(c)) for c in padded_configs]
    if not chosen and not extra:
        raise ValueError("nothing to run: versions and padded_configs are both empty")
    _check_tile(tile_dim, block_rows)
    budget = _budget(warmup_ms, rep_ms)
    _check_early(quick, n=(n, 46340))
    cupy = require_cupy("the transpose comparison")
    _free(cupy)  # blocks an earlier experiment left in CuPy's pool count as used
    side = _square_side(n, arrays=3, quick=quick, what="the transpose comparison")
    x = _random(cupy, (side, side))
    out = cupy.empty_like(x)
    plans = [(v, tile_dim, block_rows, v) for v in chosen]
    plans += [("padded", t, r, f"padded {t}x{r}") for t, r in extra]
    try:
        ceiling = _copy_ceiling(cupy, x, out, budget)
        runs = []
        for version, tile, rows, label in plans:
            launch = _plan_transpose(cupy, x, version, out, tile, rows)
            check = functools.partial(check_equal, launch.name, out, x.T)
            timing, error = _verified(launch, check, label, budget, reset=out)
            rate = _gb_per_s(2 * x.nbytes, timing.median_ms)
            runs.append(
                KernelRun(
                    launch.name,
                    label,
                    rate,
                    rate / ceiling.rate,
                    timing,
                    None,
                    error,
                    dict(launch.settings),
                )
            )
        return KernelComparison(
            "Matrix transpose",
            gpu_name(),
            f"{side:,} x {side:,} float32 ({_memory.format_bytes(4 * side * side)}), "
            f"{tile_dim} x {block_rows} thread blocks unless labelled",
            "GB/s",
            "bytes read + written (2 x n² x 4 B)",
            ceiling,
            tuple(runs),
        )
    finally:
        del x, out
        _free(cupy)


def _pair(config: Any) -> tuple[Any, Any]:
    if not isinstance(config, (tuple, list)) or len(config) != 2:
        raise TypeError(
            f"padded_configs entries must be (tile_dim, block_rows) pairs, got {config!r}"
        )
    return config[0], config[1]


@contextlib.contextmanager
def cublas_fp32(cupy: Any) -> Iterator[str]:
    """cuBLAS in strict FP32 for float32 (TF32 off) inside the block; yields how it was set.

    CuPy uses TF32 tensor cores for float32 matmuls only when CUPY_TF32=1,
    and caches that choice; this sets CuPy's float32 compute type to FP32
    explicitly (a private CuPy API, so a failure falls back to the default
    and says so) and restores it afterwards. The SGEMM check confirms it:
    TF32's error is ~100 times FP32's.
    """
    try:
        from cupy._core import _routines_linalg as linalg

        previous = linalg.get_compute_type(cupy.float32)
        linalg.set_compute_type(cupy.float32, linalg.COMPUTE_TYPE_FP32)
    except Exception:
        import os

        yield f"CuPy's default, CUPY_TF32={os.environ.get('CUPY_TF32', 'unset')}"
        return
    try:
        yield "FP32, TF32 off"
    finally:
        with contextlib.suppress(Exception):
            linalg.set_compute_type(cupy.float32, previous)


def _sgemm_label(version: str, settings: Mapping[str, int]) -> str:
    if version != "tiled" or not settings:
        return version
    return "tiled " + " ".join(f"{k}={settings[k]}" for k in ("BM", "BN", "BK", "TM", "TN"))


def sgemm_vs_cublas(
    n: int = 4096,
    *,
    versions: Sequence[str] = SGEMM_VERSIONS,
    tiled_configs: Sequence[Mapping[str, int]] = (),
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
) -> KernelComparison:
    """The SGEMM kernels on n x n matrices, as fractions of cuBLAS FP32 on the same matrices.

    Every result (cuBLAS's too) is checked against a float64 cuBLAS product
    first. ``tiled_configs`` adds ``sgemm_tiled`` runs with other tile sizes
    (dicts of BM, BN, BK, TM, TN). n must be a multiple of the tiled
    kernel's BM, BN and BK (4096 is).
    """
    side = check_int("n", n, minimum=1, maximum=32768)
    chosen = _check_versions(versions, SGEMM_VERSIONS)
    configs = [dict(c) for c in tiled_configs]
    for config in configs:
        problems = sgemm_tiled_problems(**config)
        if problems:
            raise ValueError(f"tiled_configs entry {config}: " + "; ".join(problems))
    if not chosen and not configs:
        raise ValueError("nothing to run: versions and tiled_configs are both empty")
    budget = _budget(warmup_ms, rep_ms)
    cupy = require_cupy("the SGEMM comparison")
    _free(cupy)  # blocks an earlier experiment left in CuPy's pool count as used
    # a, b, c in float32 and their float64 copies and product: 3 x 4 + 3 x 8 bytes per element
    _memory.check_fits(
        36 * side * side, device="cuda", what=f"the {side} x {side} SGEMM comparison"
    )
    a = _random(cupy, (side, side), seed=1)
    b = _random(cupy, (side, side), seed=2)
    c = cupy.empty_like(a)
    flop = 2 * side**3
    try:
        reference = cupy.matmul(a.astype(cupy.float64), b.astype(cupy.float64))
        with cublas_fp32(cupy) as mode:
            cupy.matmul(a, b, out=c)
            cublas_error = check_close("cuBLAS (cupy.matmul)", c, reference)
            timing = bench(
                cupy.matmul, a, b, out=c, device="cupy", label="cuBLAS", warn=False, **budget
            )
        ceiling = Ceiling(
            f"cuBLAS SGEMM (cupy.matmul, {mode})",
            flop / (timing.median_ms * 1e6),
            "GFLOP/s",
            timing,
        )
        plans: list[tuple[str, dict[str, int]]] = [(v, {}) for v in chosen]
        plans += [("tiled", cfg) for cfg in configs]
        runs = []
        for version, macros in plans:
            launch = _plan_sgemm(cupy, a, b, version, c, macros)
            label = _sgemm_label(version, launch.settings if macros else {})
            check = functools.partial(check_close, launch.name, c, reference)
            timing, error = _verified(launch, check, label, budget, reset=c)
            rate = flop / (timing.median_ms * 1e6)
            runs.append(
                KernelRun(
                    launch.name,
                    label,
                    rate,
                    rate / ceiling.rate,
                    timing,
                    None,
                    error,
                    dict(launch.settings),
                )
            )
        return KernelComparison(
            "SGEMM",
            gpu_name(),
            f"C = A @ B, {side:,} x {side:,} float32",
            "GFLOP/s",
            "2 n³ FLOP per call",
            ceiling,
            tuple(runs),
            notes=(
                f"every result checked against a float64 product first; cuBLAS's max error "
                f"is {cublas_error:.1g} of the largest value (strict FP32 ~1e-6, TF32 ~1e-4)",
            ),
        )
    finally:
        del a, b, c
        _free(cupy)


def reduction_versions(
    n_elements: int | None = None,
    *,
    versions: Sequence[str] = REDUCE_VERSIONS,
    atomic_elements: int = ATOMIC_ELEMENTS,
    block_size: int = 256,
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    quick: bool = False,
) -> KernelComparison:
    """The three sums of n float32 values, as fractions of the copy bandwidth.

    A reduction's rate counts the bytes it *reads* (n x 4 B); the copy
    ceiling counts read + written, its full traffic, so 100% means the sum
    streams its input as fast as a copy moves bytes. ``reduce_atomic`` runs
    on the first ``atomic_elements`` values only (n serialized atomics take
    long). The data are whole numbers -4..4, so every version's float32 sum
    is exact in any order and is checked for equality with the float64 sum.
    """
    chosen = _check_versions(versions, REDUCE_VERSIONS)
    if not chosen:
        raise ValueError("versions is empty")
    atomic_n = check_int("atomic_elements", atomic_elements, minimum=1, maximum=_INT32_MAX)
    block = _check_block_size(block_size, power_of_two=True)
    budget = _budget(warmup_ms, rep_ms)
    _check_early(quick, n_elements=(n_elements, _INT32_MAX))
    cupy = require_cupy("the reduction comparison")
    _free(cupy)  # blocks an earlier experiment left in CuPy's pool count as used
    n = _elements(n_elements, arrays=2, multiple=1024, what="the reduction comparison", quick=quick)
    x = _random(cupy, (n,), integers=True)
    scratch = cupy.empty_like(x)
    out = cupy.zeros((1,), dtype=cupy.float32)
    try:
        ceiling = _copy_ceiling(cupy, x, scratch, budget)
        del scratch
        runs, notes = [], []
        for version in chosen:
            data = x[: min(atomic_n, n)] if version == "atomic" else x
            if version == "atomic" and data.size < n:
                notes.append(f"reduce_atomic summed the first {data.size:,} values only")
            launch = _plan_reduce(cupy, data, version, out, block)
            check = functools.partial(check_sum, launch.name, out, data, exact=True)
            timing, error = _verified(launch, check, version, budget)
            rate = _gb_per_s(data.nbytes, timing.median_ms)
            runs.append(
                KernelRun(
                    launch.name,
                    version,
                    rate,
                    rate / ceiling.rate,
                    timing,
                    None,
                    error,
                    dict(launch.settings),
                )
            )
        return KernelComparison(
            "Sum reduction",
            gpu_name(),
            _size_text(n),
            "GB/s",
            "bytes read (n x 4 B); the copy ceiling counts read + written",
            ceiling,
            tuple(runs),
            notes=tuple(notes),
        )
    finally:
        del x, out
        _free(cupy)


def block_size_sweep(
    kernel: str = "strided_copy",
    block_sizes: Iterable[int] = DEFAULT_BLOCK_SIZES,
    *,
    n_elements: int | None = None,
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    quick: bool = False,
) -> KernelComparison:
    """One kernel at several thread-block sizes, each as a fraction of the copy bandwidth.

    Kernels: "strided_copy" (stride 1, a plain copy), "transpose_padded"
    (32 x block_size/32 blocks on a square matrix of about ``n_elements``),
    "reduce_shared" (its BLOCK_SIZE macro: one compile per size) and
    "reduce_warp_shuffle". Small blocks leave an SM short of warps: an SM
    holds at most 32 blocks (Hopper), so 32-thread blocks fill half of it.
    """
    kernel = _check_version("kernel", kernel, BLOCK_SWEEP_KERNELS)
    if isinstance(block_sizes, (str, bytes)) or not isinstance(block_sizes, Iterable):
        raise TypeError(
            f"block_sizes must be a sequence of integers, got {type(block_sizes).__name__}"
        )
    power = kernel in ("transpose_padded", "reduce_shared")
    sizes = sorted(
        {_check_block_size(b, power_of_two=power, name="block_sizes[...]") for b in block_sizes}
    )
    if not sizes:
        raise ValueError("block_sizes is empty")
    budget = _budget(warmup_ms, rep_ms)
    _check_early(quick, n_elements=(n_elements, _INT32_MAX))
    cupy = require_cupy(f"the block-size sweep of {kernel}")
    _free(cupy)  # blocks an earlier experiment left in CuPy's pool count as used
    if kernel == "transpose_padded":
        side = _square_side(
            None if n_elements is None else math.isqrt(n_elements),
            arrays=3,
            quick=quick,
            what="the block-size sweep",
        )
        shape: tuple[int, ...] = (side, side)
        problem = f"{side:,} x {side:,} float32 matrix, 32 x (block size / 32) blocks"
    else:
        n = _elements(n_elements, arrays=3, multiple=1024, what="the block-size sweep", quick=quick)
        shape, problem = (n,), _size_text(n)
    reduction = kernel.startswith("reduce")
    x = _random(cupy, shape, integers=reduction)
    out = cupy.empty_like(x)
    total = cupy.zeros((1,), dtype=cupy.float32)
    try:
        ceiling = _copy_ceiling(cupy, x, out, budget)
        runs = []
        for block in sizes:
            if kernel == "strided_copy":
                launch = _plan_strided_copy(cupy, x, 1, out, block, 4)
                check = functools.partial(check_equal, "strided_copy", out, x)
            elif kernel == "transpose_padded":
                launch = _plan_transpose(cupy, x, "padded", out, 32, block // 32)
                check = functools.partial(check_equal, "transpose_padded", out, x.T)
            else:
                launch = _plan_reduce(cupy, x, kernel.removeprefix("reduce_"), total, block)
                check = functools.partial(check_sum, kernel, total, x, exact=True)
            timing, error = _verified(
                launch, check, f"{block} threads", budget, reset=None if reduction else out
            )
            nbytes = x.nbytes if reduction else 2 * x.nbytes
            rate = _gb_per_s(nbytes, timing.median_ms)
            runs.append(
                KernelRun(
                    kernel,
                    f"{block} threads",
                    rate,
                    rate / ceiling.rate,
                    timing,
                    block,
                    error,
                    dict(launch.settings),
                )
            )
        counting = "bytes read (n x 4 B)" if reduction else "bytes read + written"
        return KernelComparison(
            f"Block-size sweep of {kernel}",
            gpu_name(),
            problem,
            "GB/s",
            f"{counting}; the copy ceiling counts read + written",
            ceiling,
            tuple(runs),
            "block size",
        )
    finally:
        del x, out, total
        _free(cupy)


# --------------------------------------------------------------------------- plot
