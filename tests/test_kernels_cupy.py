"""labkit.kernels.cupy_run: argument checks, the no-GPU paths, and every experiment on a fake GPU.

There is no GPU here, so a *fake CuPy* (:class:`FakeCupy`) stands in for the
real one: arrays are NumPy arrays, and each kernel is emulated with NumPy
*and checks the contract of its .cu file* (argument count and types, int32
scalars rather than Python ints, block and grid shapes, the macros it was
compiled with). It writes only the elements its launch grid covers, so a
launcher that launches too few blocks leaves NaNs and fails verification,
as it would on a GPU. The no-GPU tests use the real CuPy installed here,
which imports but sees no GPU.
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
import types
from typing import Any

import numpy as np
import pytest

import labkit.machine.memory
from labkit.kernels import comparison, cupy_run, experiments
from labkit.kernels import plots as kernels_plots
from labkit.kernels.sources import kernel_source

# --------------------------------------------------------------------------- the fake CuPy


class FakeArray(np.ndarray):
    """A "device" array: a NumPy array with CuPy's ``.data.ptr``."""

    @property
    def data(self) -> Any:  # type: ignore[override]
        return types.SimpleNamespace(ptr=self.__array_interface__["data"][0])


def _dev(array: Any) -> FakeArray:
    return np.asarray(array).view(FakeArray)


_SIGNATURES = {
    "strided_copy": ("array", "array", "int", "int"),
    "transpose": ("array", "array", "int", "int"),
    "sgemm": ("array", "array", "array", "int", "int", "int"),
    "reduce": ("array", "array", "int"),
}


class FakeKernel:
    """One kernel of a FakeModule: checks a launch against the .cu contract, then emulates it."""

    def __init__(self, name: str, macros: dict[str, int], owner: FakeCupy) -> None:
        self.name, self.macros, self.owner = name, macros, owner

    def _check_launch(self, grid: Any, block: Any, args: Any) -> None:
        for what, dims, limits in (
            ("grid", grid, (2**31 - 1, 65535, 65535)),
            ("block", block, (1024, 1024, 64)),
        ):
            assert isinstance(dims, tuple) and 1 <= len(dims) <= 3, (
                f"{what} must be a tuple: {dims!r}"
            )
            assert all(
                type(d) is int and 1 <= d <= lim for d, lim in zip(dims, limits, strict=False)
            ), f"{what} dims must be Python ints within limits: {dims!r}"
        assert math.prod(block) <= 1024, f"block {block} has more than 1024 threads"
        assert isinstance(args, tuple), "args must be a tuple"
        family = self.name.split("_")[0] if not self.name.startswith("strided") else "strided_copy"
        kinds = _SIGNATURES[family]
        assert len(args) == len(kinds), f"{self.name} takes {len(kinds)} arguments, got {len(args)}"
        for i, (arg, kind) in enumerate(zip(args, kinds, strict=True)):
            if kind == "array":
                assert isinstance(arg, FakeArray) and arg.dtype == np.float32, f"arg {i}: {arg!r}"
            else:
                assert type(arg) is np.int32, (
                    f"arg {i} must be numpy.int32, got {type(arg).__name__}"
                )

    def __call__(
        self, grid: Any, block: Any, args: Any, *, shared_mem: int = 0, stream: Any = None
    ) -> None:
        self._check_launch(grid, block, args)
        self.owner.launches.append((self.name, grid, block, dict(self.macros)))
        getattr(self, "_" + self.name)(
            tuple(grid) + (1,) * (3 - len(grid)), tuple(block) + (1,) * (3 - len(block)), *args
        )

    # ----- emulations: write only what the launch covers

    def _strided_copy(self, grid, block, x, out, n, stride):  # type: ignore[no-untyped-def]
        items = self.macros.get("ITEMS_PER_THREAD", 4)
        n, stride = int(n), int(stride)
        m = n // stride
        covered_r = min(m, grid[0] * block[0] * items)
        covered_q = min(stride, grid[1])
        src, dst = x.reshape(-1), out.reshape(-1)
        view = src.reshape(m, stride)
        for q in range(covered_q):
            dst[q * m : q * m + covered_r] = view[:covered_r, q]

    def _transpose(self, grid, block, x, out, rows, cols, *, race: bool = False):  # type: ignore[no-untyped-def]
        tile, per_pass = self.macros["TILE_DIM"], self.macros["BLOCK_ROWS"]
        assert block[:2] == (tile, per_pass), (
            f"transpose block must be (TILE_DIM, BLOCK_ROWS): {block}"
        )
        rows, cols = int(rows), int(cols)
        cover_c, cover_r = min(cols, grid[0] * tile), min(rows, grid[1] * tile)
        src = x.reshape(rows, cols)
        dst = out.reshape(cols, rows)
        dst[:cover_c, :cover_r] = src[:cover_r, :cover_c].T
        if race:  # a missing __syncthreads(): some elements read before they were written
            dst.reshape(-1)[1::97] = -12345.0

    def _transpose_naive(self, *a):  # type: ignore[no-untyped-def]
        self._transpose(*a)

    _transpose_tiled = _transpose_naive
    _transpose_padded = _transpose_naive

    def _transpose_tiled_nosync(self, *a):  # type: ignore[no-untyped-def]
        self._transpose(*a, race=True)

    def _sgemm(self, a, b, c, m, n, k, cover):  # type: ignore[no-untyped-def]
        m, n, k = int(m), int(n), int(k)
        rows, cols = min(m, cover[0]), min(n, cover[1])
        c2 = c.reshape(m, n)
        c2[:rows, :cols] = (a.reshape(m, k)[:rows] @ b.reshape(k, n)[:, :cols]).astype(np.float32)
        self.owner.last_sgemm_tf32 = False

    def _sgemm_naive(self, grid, block, a, b, c, m, n, k):  # type: ignore[no-untyped-def]
        self._sgemm(a, b, c, m, n, k, (grid[1] * block[1], grid[0] * block[0]))

    def _sgemm_shared(self, grid, block, a, b, c, m, n, k):  # type: ignore[no-untyped-def]
        tile = self.macros["TILE_SIZE"]
        assert block[:2] == (tile, tile), (
            f"sgemm_shared block must be (TILE_SIZE, TILE_SIZE): {block}"
        )
        self._sgemm(a, b, c, m, n, k, (grid[1] * tile, grid[0] * tile))

    def _sgemm_tiled(self, grid, block, a, b, c, m, n, k):  # type: ignore[no-untyped-def]
        bm, bn, bk, tm, tn = (self.macros[key] for key in ("BM", "BN", "BK", "TM", "TN"))
        threads = (bm // tm) * (bn // tn)
        assert block == (threads, 1, 1), f"sgemm_tiled block must be ({threads}, 1, 1): {block}"
        assert int(m) % bm == 0 and int(n) % bn == 0 and int(k) % bk == 0, "no edge handling"
        for arr in (a, b, c):
            assert arr.data.ptr % 16 == 0, "float4 accesses need 16-byte alignment"
        if self.owner.break_kernel == "sgemm_tiled":
            c.fill(1.0)
            return
        self._sgemm(a, b, c, m, n, k, (grid[1] * bm, grid[0] * bn))

    def _reduce(self, x, out, n, covered):  # type: ignore[no-untyped-def]
        out[0] += np.float32(x.reshape(-1)[: min(int(n), covered)].sum(dtype=np.float64))

    def _reduce_atomic(self, grid, block, x, out, n):  # type: ignore[no-untyped-def]
        self._reduce(x, out, n, grid[0] * block[0])

    def _reduce_shared(self, grid, block, x, out, n):  # type: ignore[no-untyped-def]
        size = self.macros["BLOCK_SIZE"]
        assert block == (size, 1, 1), f"reduce_shared block must be (BLOCK_SIZE, 1, 1): {block}"
        self._reduce(x, out, n, grid[0] * 2 * size)

    def _reduce_warp_shuffle(self, grid, block, x, out, n):  # type: ignore[no-untyped-def]
        assert block[0] % 32 == 0 and block[1:] == (1, 1), f"whole warps only: {block}"
        assert x.data.ptr % 16 == 0, "float4 loads need 16-byte alignment"
        self._reduce(x, out, n, int(n))  # the grid-stride loop covers any n


class FakeModule:
    """cupy.RawModule: options must be a tuple of -DNAME=value for macros the source declares."""

    def __init__(
        self, code: str | None = None, *, options: tuple[str, ...] = (), owner: FakeCupy
    ) -> None:
        assert isinstance(code, str), "code must be a str"
        assert isinstance(options, tuple), "RawModule(options=...) must be a tuple (CuPy types it)"
        self.code, self.macros, self.owner = code, {}, owner
        for option in options:
            match = re.fullmatch(r"-D([A-Za-z_]\w*)=(\d+)", option)
            assert match, f"unexpected compiler option {option!r}"
            assert f"#ifndef {match[1]}" in code, f"{match[1]} is not a macro of this source"
            self.macros[match[1]] = int(match[2])
        owner.modules += 1

    def get_function(self, name: str) -> FakeKernel:
        if not re.search(
            rf'extern "C" __global__ void(?: __launch_bounds__\([^)]*\))?\s+{name}\(', self.code
        ):
            raise RuntimeError(f"CUDA_ERROR_NOT_FOUND: named symbol not found ({name})")
        if self.owner.compile_error:
            raise self.owner.compiler.CompileException('error: identifier "oops" is undefined')
        return FakeKernel(name, self.macros, self.owner)


class FakeEvent:
    def __init__(self) -> None:
        self.t = 0.0

    def record(self, stream: Any = None) -> None:
        self.t = time.perf_counter()


class FakeCupy(types.ModuleType):
    """Enough of CuPy's API for labkit.kernels; kernels run as NumPy emulations."""

    def __init__(self, *, available: bool = True, available_raises: bool = False) -> None:
        super().__init__("cupy")
        self._available, self._raises = available, available_raises
        self.launches: list[Any] = []
        self.modules = 0
        self.break_kernel: str | None = None
        self.compile_error = False
        self.compute_types: dict[str, int] = {}
        self.ndarray = FakeArray
        self.float32, self.float64, self.int8 = np.float32, np.float64, np.int8
        owner = self

        class CompileException(Exception):
            pass

        class CUDARuntimeError(RuntimeError):
            pass

        class Device:
            def __init__(self, index: int = 0) -> None:
                self.id = index
                self.attributes = {
                    "MultiProcessorCount": 4,
                    "MaxThreadsPerMultiProcessor": 2048,
                    "L2CacheSize": 1 << 20,
                    "MaxThreadsPerBlock": 1024,
                }

            def synchronize(self) -> None:
                return None

            def __enter__(self) -> Device:
                return self

            def __exit__(self, *exc: Any) -> None:
                return None

        runtime = types.SimpleNamespace(
            CUDARuntimeError=CUDARuntimeError,
            getDeviceProperties=lambda i: {"name": b"Fake GPU 9000"},
            memGetInfo=lambda: (8 << 30, 16 << 30),
        )
        self.compiler = types.SimpleNamespace(CompileException=CompileException)
        self.cuda = types.SimpleNamespace(
            Device=Device,
            runtime=runtime,
            compiler=self.compiler,
            Event=FakeEvent,
            get_current_stream=lambda: None,
            get_elapsed_time=lambda a, b: (b.t - a.t) * 1e3,
        )

        class RandomState:
            def __init__(self, seed: int = 0) -> None:
                self.rng = np.random.default_rng(seed)

            def uniform(
                self, low: float = 0.0, high: float = 1.0, size: Any = None, dtype: Any = float
            ) -> FakeArray:
                return _dev(self.rng.uniform(low, high, size).astype(dtype))

        self.random = types.SimpleNamespace(RandomState=RandomState)
        self.RawModule = lambda code=None, options=(), **kw: FakeModule(
            code, options=options, owner=owner
        )
        pool = types.SimpleNamespace(
            free_all_blocks=lambda: None, total_bytes=lambda: 0, used_bytes=lambda: 0
        )
        self.get_default_memory_pool = lambda: pool
        self.last_sgemm_tf32 = False

    def is_available(self) -> bool:
        if self._raises:
            raise RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient")
        return self._available

    # array API (NumPy underneath)
    def empty(self, shape: Any, dtype: Any = np.float32) -> FakeArray:
        return _dev(np.full(shape, np.nan, dtype=dtype))

    def zeros(self, shape: Any, dtype: Any = np.float32) -> FakeArray:
        return _dev(np.zeros(shape, dtype=dtype))

    def empty_like(self, x: Any) -> FakeArray:
        return _dev(np.full_like(x, np.nan))

    def copyto(self, dst: Any, src: Any) -> None:
        np.copyto(dst, src)

    def matmul(self, a: Any, b: Any, out: Any = None) -> Any:
        result = np.matmul(np.asarray(a), np.asarray(b))
        if out is None:
            return _dev(result)
        out[...] = result
        return out

    def arange(self, *args: Any, dtype: Any = None) -> FakeArray:
        return _dev(np.arange(*args, dtype=dtype))

    def asnumpy(self, x: Any) -> np.ndarray:
        return np.array(x, copy=True).view(np.ndarray)

    def __getattr__(self, name: str) -> Any:  # abs, floor, sum, array_equal, ...
        if name in ("abs", "floor", "sum", "array_equal", "count_nonzero", "isfinite", "nanmax"):
            return getattr(np, name)
        raise AttributeError(name)


def _install_linalg(monkeypatch: pytest.MonkeyPatch, fake: FakeCupy) -> None:
    """cupy._core._routines_linalg's get/set_compute_type, recording what labkit sets."""
    linalg = types.ModuleType("cupy._core._routines_linalg")
    linalg.COMPUTE_TYPE_DEFAULT, linalg.COMPUTE_TYPE_FP32 = 1, 4  # the real values
    linalg.get_compute_type = lambda dtype: fake.compute_types.get(np.dtype(dtype).name, 1)
    linalg.set_compute_type = lambda dtype, value: fake.compute_types.__setitem__(
        np.dtype(dtype).name, value
    )
    core = types.ModuleType("cupy._core")
    core._routines_linalg = linalg
    monkeypatch.setitem(sys.modules, "cupy._core", core)
    monkeypatch.setitem(sys.modules, "cupy._core._routines_linalg", linalg)


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> FakeCupy:
    """A machine with a (fake) CUDA GPU and 16 MiB of free GPU memory, so sizes stay tiny."""
    fake = FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    _install_linalg(monkeypatch, fake)
    monkeypatch.setattr(labkit.machine.memory, "available_bytes", lambda device="cpu": 16 << 20)
    monkeypatch.setattr(cupy_run, "_MODULES", {})
    return fake


TINY = {"warmup_ms": 0.0, "rep_ms": 0.5}

# --------------------------------------------------------------------------- no GPU


def test_real_cupy_without_a_gpu_is_a_clear_error() -> None:
    cupy = pytest.importorskip("cupy")
    if cupy.is_available():  # pragma: no cover - a GPU machine
        pytest.skip("this machine has a GPU")
    assert cupy_run.cupy_gpu_available() is False
    x = np.zeros(8, dtype=np.float32)
    for call in (
        lambda: cupy_run.strided_copy(x, 1),
        lambda: cupy_run.transpose(x),
        lambda: experiments.stride_sweep(),
        lambda: cupy_run.get_kernel("sgemm_naive"),
        lambda: cupy_run.gpu_name(),
    ):
        with pytest.raises(cupy_run.NoCudaGpuError, match=r"No CUDA GPU here.*require_gpu") as info:
            call()
        assert "cupy.is_available() is False" in str(info.value)
        assert "\n" not in str(info.value)


def test_missing_cupy_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from labkit.core.optional import MissingPackageError

    monkeypatch.setitem(sys.modules, "cupy", None)
    assert cupy_run.cupy_gpu_available() is False
    with pytest.raises(MissingPackageError, match="pip install cupy-cuda12x"):
        experiments.transpose_versions()


def test_a_driver_that_raises_counts_as_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", FakeCupy(available_raises=True))
    assert cupy_run.cupy_gpu_available() is False
    with pytest.raises(cupy_run.NoCudaGpuError, match="cudaErrorInsufficientDriver"):
        experiments.reduction_versions()


def test_importing_the_package_imports_no_framework() -> None:
    import json
    import subprocess

    code = (
        "import labkit.kernels, labkit.kernels.cupy_run, labkit.kernels.tuning, sys, json; "
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout.splitlines()[-1]))
    assert not loaded & {"cupy", "torch", "kernel_tuner", "matplotlib", "numpy", "tensorflow"}


# --------------------------------------------------------------------------- argument checks


def test_launchers_check_their_arguments(fake_gpu: FakeCupy) -> None:
    x = fake_gpu.zeros((64,))
    with pytest.raises(TypeError, match=r"x must be a CuPy array .*cupy.asarray"):
        cupy_run.strided_copy(np.zeros(64, np.float32), 1)
    with pytest.raises(TypeError, match=r"x must be float32, got float64"):
        cupy_run.strided_copy(_dev(np.zeros(64)), 1)
    with pytest.raises(ValueError, match=r"multiple of stride \(5\)"):
        cupy_run.strided_copy(x, 5)
    with pytest.raises(ValueError, match=r"stride must be an integer from 1 to 65,535"):
        cupy_run.strided_copy(x, 0)
    with pytest.raises(TypeError, match="stride must be an integer"):
        cupy_run.strided_copy(x, 2.0)
    with pytest.raises(ValueError, match="C-contiguous"):
        cupy_run.transpose(fake_gpu.zeros((8, 8))[:, ::2])
    with pytest.raises(ValueError, match="must be 2-D"):
        cupy_run.transpose(x)
    with pytest.raises(ValueError, match="version must be one of 'naive', 'tiled', 'padded'"):
        cupy_run.transpose(fake_gpu.zeros((8, 8)), "fast")
    with pytest.raises(ValueError, match="multiple of block_rows"):
        cupy_run.transpose(fake_gpu.zeros((8, 8)), tile_dim=32, block_rows=6)
    with pytest.raises(ValueError, match="out must have shape"):
        cupy_run.transpose(fake_gpu.zeros((8, 4)), out=fake_gpu.zeros((8, 4)))
    with pytest.raises(ValueError, match="cannot work in place"):
        cupy_run.strided_copy(x, 1, out=x)


def test_sgemm_checks_shapes_tiles_and_alignment(fake_gpu: FakeCupy) -> None:
    a, b = fake_gpu.zeros((128, 64)), fake_gpu.zeros((32, 128))
    with pytest.raises(ValueError, match="a's columns must equal b's rows"):
        cupy_run.sgemm(a, b)
    with pytest.raises(ValueError, match=r"M % BM == 0.*version='shared'"):
        cupy_run.sgemm(fake_gpu.zeros((100, 64)), fake_gpu.zeros((64, 128)))
    with pytest.raises(ValueError, match="sgemm_tiled cannot use"):
        cupy_run.sgemm(fake_gpu.zeros((128, 64)), fake_gpu.zeros((64, 128)), BM=64, TM=3)
    with pytest.raises(ValueError, match="takes BM, BN, BK, TM, TN; got TILE=4"):
        cupy_run.sgemm(fake_gpu.zeros((128, 64)), fake_gpu.zeros((64, 128)), TILE=4)
    with pytest.raises(ValueError, match="takes no macros"):
        cupy_run.sgemm(fake_gpu.zeros((8, 8)), fake_gpu.zeros((8, 8)), "naive", BM=4)
    big = fake_gpu.zeros((128 * 64 + 1,))
    with pytest.raises(ValueError, match="16-byte boundary"):
        cupy_run.sgemm(big[1:].reshape(128, 64), fake_gpu.zeros((64, 128)))


def test_reduce_checks_block_sizes(fake_gpu: FakeCupy) -> None:
    x = fake_gpu.zeros((1000,))
    with pytest.raises(ValueError, match="power of two"):
        cupy_run.reduce_sum(x, "shared", block_size=96)
    with pytest.raises(ValueError, match="multiple of 32"):
        cupy_run.reduce_sum(x, "warp_shuffle", block_size=100)
    with pytest.raises(ValueError, match="16-byte boundary"):
        cupy_run.reduce_sum(fake_gpu.zeros((1001,))[1:], "warp_shuffle")


def test_sgemm_tiled_problems_match_the_static_asserts() -> None:
    assert cupy_run.sgemm_tiled_problems() == []
    assert cupy_run.sgemm_tiled_problems(
        BM=64, BN=64, BK=8, TM=4, TN=4
    )  # 256 threads: 4*256/8 > 64
    assert cupy_run.sgemm_tiled_problems(TM=6)
    assert cupy_run.sgemm_tiled_problems(BK=64, BM=128, BN=128)  # 64 KiB of tiles


# --------------------------------------------------------------------------- launching


def test_each_launcher_computes_the_right_result(fake_gpu: FakeCupy) -> None:
    x = _dev(np.arange(96, dtype=np.float32))
    for stride in (1, 2, 3, 32):
        out = cupy_run.strided_copy(x, stride, block_size=7)
        np.testing.assert_array_equal(out, cupy_run.expected_strided_copy(x, stride))
    m = _dev(np.arange(70 * 45, dtype=np.float32).reshape(70, 45))
    for version in ("naive", "tiled", "padded"):
        np.testing.assert_array_equal(
            cupy_run.transpose(m, version, tile_dim=16, block_rows=4), m.T
        )
    a = _dev(np.random.default_rng(0).uniform(-1, 1, (128, 16)).astype(np.float32))
    b = _dev(np.random.default_rng(1).uniform(-1, 1, (16, 128)).astype(np.float32))
    for version in ("naive", "shared", "tiled"):
        np.testing.assert_allclose(cupy_run.sgemm(a, b, version), a @ b, rtol=1e-5, atol=1e-5)
    ints = _dev(np.arange(-500, 500, dtype=np.float32))
    for version in ("atomic", "shared", "warp_shuffle"):
        assert float(cupy_run.reduce_sum(ints, version)[0]) == -500.0
    launched = {name for name, *_ in fake_gpu.launches}
    assert launched >= {"strided_copy", "transpose_padded", "sgemm_tiled", "reduce_warp_shuffle"}


def test_modules_are_compiled_once_per_macro_set(fake_gpu: FakeCupy) -> None:
    m = fake_gpu.zeros((64, 64))
    for _ in range(3):
        cupy_run.transpose(m, "padded")
        cupy_run.transpose(m, "tiled")  # same file, same macros: same module
    assert fake_gpu.modules == 1
    cupy_run.transpose(m, "padded", tile_dim=16, block_rows=16)
    assert fake_gpu.modules == 2


def test_compile_errors_name_the_kernel_and_macros(fake_gpu: FakeCupy) -> None:
    fake_gpu.compile_error = True
    with pytest.raises(
        cupy_run.KernelCompileError, match=r"sgemm_shared from sgemm.cu with -DTILE_SIZE=16"
    ):
        cupy_run.get_kernel("sgemm_shared", TILE_SIZE=16)


def test_the_broken_kernel_is_caught_by_verification(fake_gpu: FakeCupy) -> None:
    m = _dev(np.arange(64 * 64, dtype=np.float32).reshape(64, 64))
    out = cupy_run.transpose(m, "tiled_nosync")
    with pytest.raises(
        cupy_run.WrongResultError,
        match=r"transpose_tiled_nosync gave a wrong result: [\d,]+ of 4,096",
    ):
        comparison.verify_equal("transpose_tiled_nosync", out, m.T)


def test_check_close_catches_tf32_sized_errors() -> None:
    ref = np.linspace(-100, 100, 1000)
    assert comparison.verify_close("k", (ref * (1 + 1e-7)).astype(np.float32), ref) < 1e-6
    with pytest.raises(
        cupy_run.WrongResultError, match=r"k gave a wrong result: max error .* TF32"
    ):
        comparison.verify_close("k", (ref + 0.03).astype(np.float32), ref)


def test_check_sum_tolerance() -> None:
    x = np.ones(10_000, dtype=np.float32)
    assert comparison.verify_sum("k", np.array([10_000.0], np.float32), x, exact=True) == 0.0
    with pytest.raises(cupy_run.WrongResultError, match="tolerance 0"):
        comparison.verify_sum("k", np.array([9_999.0], np.float32), x, exact=True)
    assert comparison.verify_sum("k", np.array([9_999.9], np.float32), x) < 0.2


# --------------------------------------------------------------------------- experiments on the fake GPU


def test_stride_sweep(fake_gpu: FakeCupy) -> None:
    result = experiments.stride_sweep((1, 2, 8), n_elements=8 * 1024, block_size=64, **TINY)
    assert [r.param for r in result.runs] == [1, 2, 8]
    assert (
        result.device == "Fake GPU 9000" and result.unit == "GB/s" and result.param_name == "stride"
    )
    assert all(r.rate > 0 and r.fraction > 0 and r.max_error == 0.0 for r in result.runs)
    assert result.fraction("stride 1") == result.runs[0].fraction
    text = str(result)
    assert "Strided copy on Fake GPU 9000: 8,192 float32" in text and "of ceiling" in text
    # make test-gpu (tools/gpu_notebooks.py) reads this line as proof of verification
    assert "  every kernel's output was verified before timing (largest error 0)" in text
    assert result.summary()[0].startswith(
        "Strided copy: 8,192 float32 (32 KiB per array); rates count useful"
    )
    assert result.to_dict()["runs"][2]["param"] == 8


def test_stride_sweep_sizes_itself_from_the_memory_budget(fake_gpu: FakeCupy) -> None:
    result = experiments.stride_sweep((1, 4), **TINY)  # 25% of 16 MiB over 3 arrays
    n = int(result.problem.split()[0].replace(",", ""))
    assert n % 4 == 0 and 3 * 4 * n <= 4 << 20
    with pytest.raises(labkit.machine.memory.MemoryBudgetError, match="free"):
        experiments.stride_sweep((1,), n_elements=1 << 22, **TINY)


def test_transpose_versions_and_extra_tiles(fake_gpu: FakeCupy) -> None:
    result = experiments.transpose_versions(128, padded_configs=[(16, 4), (64, 8)], **TINY)
    assert [r.label for r in result.runs] == [
        "naive",
        "tiled",
        "padded",
        "padded 16x4",
        "padded 64x8",
    ]
    assert result.run("padded 64x8").settings == {"TILE_DIM": 64, "BLOCK_ROWS": 8}
    assert result.counting.startswith("bytes read + written")
    with pytest.raises(cupy_run.WrongResultError, match="transpose_tiled_nosync"):
        experiments.transpose_versions(128, versions=("tiled_nosync",), **TINY)


def test_sgemm_vs_cublas(fake_gpu: FakeCupy) -> None:
    result = experiments.sgemm_vs_cublas(
        128, tiled_configs=[{"BM": 64, "BN": 128, "BK": 8}], **TINY
    )
    assert [r.label for r in result.runs] == [
        "naive",
        "shared",
        "tiled",
        "tiled BM=64 BN=128 BK=8 TM=8 TN=8",
    ]
    assert (
        result.unit == "GFLOP/s"
        and "cuBLAS SGEMM (cupy.matmul, FP32, TF32 off)" == result.ceiling.name
    )
    assert all(r.max_error < 1e-5 for r in result.runs)
    assert fake_gpu.compute_types == {"float32": 1}  # FP32 forced during the run, then restored
    fake_gpu.break_kernel = "sgemm_tiled"
    with pytest.raises(cupy_run.WrongResultError, match="sgemm_tiled gave a wrong result"):
        experiments.sgemm_vs_cublas(128, versions=("tiled",), **TINY)


def test_cublas_fp32_falls_back_without_the_private_api(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy._core", None)
    monkeypatch.setenv("CUPY_TF32", "0")
    with experiments.cublas_fp32(FakeCupy()) as mode:
        assert mode == "CuPy's default, CUPY_TF32=0"


def test_reduction_versions(fake_gpu: FakeCupy) -> None:
    result = experiments.reduction_versions(4096, atomic_elements=1024, **TINY)
    assert [r.label for r in result.runs] == ["atomic", "shared", "warp_shuffle"]
    assert result.notes == ("reduce_atomic summed the first 1,024 values only",)
    assert "bytes read (n x 4 B)" in result.counting


def test_block_size_sweep_every_kernel(fake_gpu: FakeCupy) -> None:
    for kernel in cupy_run.BLOCK_SWEEP_KERNELS:
        result = experiments.block_size_sweep(kernel, (32, 256, 1024), n_elements=4096, **TINY)
        assert [r.param for r in result.runs] == [32, 256, 1024], kernel
    assert fake_gpu.launches[-1][2] == (1024, 1, 1)
    with pytest.raises(ValueError, match="power of two"):
        experiments.block_size_sweep("reduce_shared", (96,), **TINY)
    with pytest.raises(ValueError, match="kernel must be one of"):
        experiments.block_size_sweep("sgemm_tiled")


def test_experiments_check_budgets_before_touching_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)  # argument errors come first, even without CuPy
    with pytest.raises(ValueError, match="rep_ms must be a finite number"):
        experiments.stride_sweep(rep_ms=0)
    with pytest.raises(ValueError, match="strides must be a non-empty list"):
        experiments.stride_sweep(())
    with pytest.raises(ValueError, match="strides must be an integer from 1 to 65,535"):
        experiments.stride_sweep((1, 65536))
    with pytest.raises(ValueError, match="tiled_configs entry"):
        experiments.sgemm_vs_cublas(256, tiled_configs=[{"TM": 5}])


def test_plot_kernels(fake_gpu: FakeCupy) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    sweep = experiments.stride_sweep((1, 2), n_elements=1024, **TINY)
    versions = experiments.reduction_versions(1024, **TINY)
    ax = kernels_plots.plot_kernels(sweep)
    assert ax.get_xlabel() == "stride" and "Fake GPU 9000" in ax.get_title()
    ax = kernels_plots.plot_kernels(versions)
    assert ax.get_ylabel() == "kernel" and len(ax.patches) == 3
    recorded = json.loads(json.dumps(sweep.to_dict()))  # as a recording stores it
    ax = kernels_plots.plot_kernels(recorded)
    assert ax.get_xlabel() == "stride" and len(ax.lines) == 2


def test_kernel_source_is_what_gets_compiled(fake_gpu: FakeCupy) -> None:
    cupy_run.get_kernel("reduce_shared", BLOCK_SIZE=64)
    assert "#ifndef BLOCK_SIZE" in kernel_source("reduce_shared")


# --------------------------------------------------------------------------- on a real GPU (skipped here)

on_gpu = pytest.mark.skipif(
    not cupy_run.cupy_gpu_available(), reason="needs a CUDA GPU that CuPy can use"
)


@on_gpu
def test_gpu_launchers_match_their_references() -> None:  # pragma: no cover - GPU machines
    import cupy

    x = cupy.arange(96 * 32, dtype=cupy.float32)
    for stride in (1, 3, 32):
        out = cupy_run.strided_copy(x, stride, block_size=64)
        comparison.verify_equal("strided_copy", out, cupy_run.expected_strided_copy(x, stride))
    m = cupy.random.RandomState(0).uniform(-1, 1, (1000, 777), dtype=cupy.float32)
    for version, tile, rows in (
        ("naive", 32, 8),
        ("tiled", 32, 8),
        ("padded", 32, 8),
        ("padded", 64, 16),
        ("padded", 16, 2),
    ):
        comparison.verify_equal(
            version, cupy_run.transpose(m, version, tile_dim=tile, block_rows=rows), m.T
        )
    cupy_run.transpose(m, "tiled_nosync")  # runs; its result may be wrong (that is the exercise)
    a = cupy.random.RandomState(1).uniform(-1, 1, (300, 150), dtype=cupy.float32)
    b = cupy.random.RandomState(2).uniform(-1, 1, (150, 200), dtype=cupy.float32)
    ref = cupy.matmul(a.astype(cupy.float64), b.astype(cupy.float64))
    for version in ("naive", "shared"):
        comparison.verify_close(version, cupy_run.sgemm(a, b, version), ref)
    a = cupy.random.RandomState(3).uniform(-1, 1, (256, 64), dtype=cupy.float32)
    b = cupy.random.RandomState(4).uniform(-1, 1, (64, 256), dtype=cupy.float32)
    ref = cupy.matmul(a.astype(cupy.float64), b.astype(cupy.float64))
    for macros in ({}, {"BK": 16}, {"BM": 64}, {"BN": 64, "TN": 4, "BK": 16}, {"TM": 4, "BK": 16}):
        comparison.verify_close(f"tiled {macros}", cupy_run.sgemm(a, b, "tiled", **macros), ref)
    ints = cupy.floor(cupy.random.RandomState(5).uniform(-4, 5, 1_000_003, dtype=cupy.float32))
    for version in ("atomic", "shared", "warp_shuffle"):
        comparison.verify_sum(version, cupy_run.reduce_sum(ints, version), ints, exact=True)


@on_gpu
def test_gpu_experiments_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # pragma: no cover - GPU machines
    monkeypatch.setattr(experiments, "DEFAULT_ARRAY_BYTES", 16 << 20)
    results = [
        experiments.stride_sweep(**TINY),
        experiments.transpose_versions(1024, padded_configs=[(64, 16)], **TINY),
        experiments.sgemm_vs_cublas(512, tiled_configs=[{"BK": 16}], **TINY),
        experiments.reduction_versions(1 << 20, **TINY),
        experiments.block_size_sweep("reduce_warp_shuffle", n_elements=1 << 20, **TINY),
    ]
    for result in results:
        assert result.runs and all(r.rate > 0 and r.fraction > 0 for r in result.runs), (
            result.experiment
        )
        assert str(result) and result.summary() and json.dumps(result.to_dict())
