"""Run notebook 07's CUDA kernels with CuPy: compile and launch (the experiments verify and time).

Each launcher (:func:`strided_copy`, :func:`transpose`, :func:`sgemm`,
:func:`reduce_sum`) takes CuPy arrays, checks them (float32, C-contiguous,
the sizes the kernel supports), compiles the kernel from its ``.cu`` file
with ``cupy.RawModule`` once per set of macros, and launches it. It neither
verifies nor times.

The experiments that use these launchers live in
:mod:`labkit.kernels.experiments` (``stride_sweep``, ``transpose_versions``,
``sgemm_vs_cublas``, ``reduction_versions``, ``block_size_sweep``, with the
verifiers of :mod:`labkit.kernels.comparison`) and follow one rule: **every kernel is checked against
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

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from labkit.core.validate import check_choice, check_int, check_ms
from labkit.kernels.sources import compile_options, kernel_source, kernel_spec

TRANSPOSE_VERSIONS: tuple[str, ...] = ("naive", "tiled", "padded")
SGEMM_VERSIONS: tuple[str, ...] = ("naive", "shared", "tiled")
REDUCE_VERSIONS: tuple[str, ...] = ("atomic", "shared", "warp_shuffle")
BLOCK_SWEEP_KERNELS: tuple[str, ...] = (
    "strided_copy",
    "transpose_padded",
    "reduce_shared",
    "reduce_warp_shuffle",
)
#: SGEMM results must be within this fraction of the largest |reference| value.
#: Strict FP32 at K = 4096 errs by ~1e-6 of it; TF32 (10-bit mantissa) by ~3e-4.
SGEMM_RTOL = 5e-5
#: reduce_atomic runs on at most this many elements: n atomics to one address are slow.
ATOMIC_ELEMENTS = 1 << 24

INT32_MAX = 2**31 - 1
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


def timing_budget(warmup_ms: Any, rep_ms: Any) -> dict[str, Any]:
    return {
        "warmup_ms": check_ms("warmup_ms", warmup_ms, allow_zero=True),
        "rep_ms": check_ms("rep_ms", rep_ms),
    }


def check_early(**sizes: tuple[Any, int]) -> None:
    """The explicit sizes ({name: (value, largest)}), before CuPy is imported.

    Whether a size fits the GPU is checked once CuPy can read its free memory.
    """
    for name, (value, high) in sizes.items():
        if value is not None:
            check_int(name, value, minimum=1, maximum=high)


def check_versions(versions: Iterable[str], choices: Sequence[str]) -> list[str]:
    return [check_choice("versions[...]", v, choices) for v in versions]


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
    if not 1 <= x.size <= INT32_MAX:
        raise ValueError(f"{name} must have 1 to {INT32_MAX:,} elements, got {x.size:,}")
    return x


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


def check_block_size(value: Any, *, power_of_two: bool = False, name: str = "block_size") -> int:
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


def plan_strided_copy(cupy: Any, x: Any, stride: int, out: Any, block: int, items: int) -> Launch:
    _check_array("x", x, cupy)
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
    stride = check_int("stride", stride, minimum=1, maximum=65535)
    block = check_int("block_size", block_size, minimum=1, maximum=1024)
    items = check_int("items_per_thread", items_per_thread, minimum=1, maximum=64)
    cupy = require_cupy("strided_copy")
    launch = plan_strided_copy(cupy, x, stride, out, block, items)
    launch()
    return launch.args[1]


def expected_strided_copy(x: Any, stride: int) -> Any:
    """What :func:`strided_copy` must produce, flat (a copy of ``x`` reordered; ``x`` itself for stride 1)."""
    n = int(x.size)
    return x.reshape(n // stride, stride).T.reshape(-1) if stride > 1 else x.reshape(-1)


def check_tile(tile_dim: Any, block_rows: Any) -> tuple[int, int]:
    tile = check_int("tile_dim", tile_dim, minimum=1, maximum=1024)
    rows = check_int("block_rows", block_rows, minimum=1, maximum=1024)
    if tile % rows:
        raise ValueError(f"tile_dim ({tile}) must be a multiple of block_rows ({rows})")
    if tile * rows > 1024:
        raise ValueError(f"tile_dim * block_rows ({tile * rows}) is the block size; at most 1024")
    if tile * (tile + 1) * 4 > _STATIC_SMEM_BYTES:
        largest = max(t for t in range(1, tile) if t * (t + 1) * 4 <= _STATIC_SMEM_BYTES)
        raise ValueError(
            f"tile_dim={tile} needs {tile * (tile + 1) * 4:,} bytes of shared memory; "
            f"at most {_STATIC_SMEM_BYTES:,} (tile_dim <= {largest})"
        )
    return tile, rows


def plan_transpose(
    cupy: Any, x: Any, version: str, out: Any, tile: int, rows_per_pass: int
) -> Launch:
    _check_array("x", x, cupy, ndim=2)
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
    check_choice("version", version, (*TRANSPOSE_VERSIONS, "tiled_nosync"))
    tile, rows = check_tile(tile_dim, block_rows)
    cupy = require_cupy(f"transpose (version={version!r})")
    launch = plan_transpose(cupy, x, version, out, tile, rows)
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


def plan_sgemm(cupy: Any, a: Any, b: Any, version: str, out: Any, macros: dict[str, Any]) -> Launch:
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
    check_choice("version", version, SGEMM_VERSIONS)
    cupy = require_cupy(f"sgemm (version={version!r})")
    launch = plan_sgemm(cupy, a, b, version, out, macros)
    launch()
    return launch.args[2]


def check_reduce_block(version: str, block_size: Any) -> int:
    """The block size ``reduce_<version>`` can run: "shared" a power of two, "warp_shuffle" whole warps."""
    if version == "atomic":
        return check_int("block_size", block_size, minimum=1, maximum=1024)
    return check_block_size(block_size, power_of_two=version == "shared")


def plan_reduce(cupy: Any, x: Any, version: str, out: Any, block: int) -> Launch:
    _check_array("x", x, cupy)
    out = _check_out(out, cupy, (1,), x)
    n = int(x.size)
    name = f"reduce_{version}"
    if version == "atomic":
        grid, settings = (math.ceil(n / block), 1, 1), {}
    elif version == "shared":
        grid, settings = (math.ceil(n / (2 * block)), 1, 1), {"BLOCK_SIZE": block}
    else:
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
    check_choice("version", version, REDUCE_VERSIONS)
    block = check_reduce_block(version, block_size)
    cupy = require_cupy(f"reduce_sum (version={version!r})")
    launch = plan_reduce(cupy, x, version, out, block)
    launch()
    return launch.args[1]


# --------------------------------------------------------------------------- verification


# --------------------------------------------------------------------------- results


# --------------------------------------------------------------------------- experiments


# --------------------------------------------------------------------------- plot
