"""labkit.kernels.sources and the .cu files: the registry matches the code, and every file compiles.

The compile tests run ``nvcc -cubin`` for sm_80 (A100) and sm_90 (H100/H200)
where nvcc is on PATH (no GPU needed), with the default macros, with a few
Kernel Tuner configurations (the source made exactly as Kernel Tuner makes it,
by ``kernel_tuner.util.prepare_kernel_string``), and for the deliberately
broken kernel. They are skipped, saying why, where nvcc is missing.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import labkit.kernels
from labkit.kernels import sources
from labkit.kernels.cupy_run import sgemm_tiled_problems

ROOT = Path(__file__).resolve().parent.parent
NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(
    NVCC is None, reason="nvcc is not on PATH: the CUDA compile checks need a CUDA toolkit"
)
ARCHES = ("sm_80", "sm_90")


def _nvcc(source: Path, tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """Compile ``source`` for both arches in one nvcc call (a fatbin holds one cubin per arch)."""
    gencode = [f"-gencode=arch=compute_{a[3:]},code={a}" for a in ARCHES]
    return subprocess.run(
        [
            str(NVCC),
            "-fatbin",
            "-std=c++17",
            *gencode,
            *options,
            str(source),
            "-o",
            str(tmp_path / "out.fatbin"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


# --------------------------------------------------------------------------- the registry


def test_every_kernel_is_in_its_file_as_extern_c() -> None:
    for name, spec in sources.KERNELS.items():
        code = sources.kernel_source(name)
        pattern = rf'extern "C" __global__ void(?: __launch_bounds__\([^)]*\))?\s+{name}\('
        assert re.search(pattern, code), (
            f'{name} is not an extern "C" __global__ kernel in {spec.file}'
        )
        for macro, default in spec.macros.items():
            assert f"#ifndef {macro}\n#define {macro} {default}" in code, (
                f"{macro} default in {spec.file}"
            )


def test_files_hold_no_kernel_the_registry_misses() -> None:
    for file in sources.kernel_files():
        names = re.findall(
            r'extern "C" __global__ void(?: __launch_bounds__\([^)]*\))?\s+(\w+)\(',
            sources.kernel_source(file),
        )
        assert names and all(sources.KERNELS[n].file == file for n in names), file


def test_only_the_exercise_kernel_is_broken() -> None:
    broken = [name for name, spec in sources.KERNELS.items() if spec.broken]
    assert broken == ["transpose_tiled_nosync"]
    code = sources.kernel_source("transpose_tiled_nosync")
    assert "BROKEN ON PURPOSE" in code and "__syncthreads();" not in code
    assert "__syncthreads();" in sources.kernel_source("transpose_tiled")


def test_paths_and_lookups() -> None:
    path = sources.kernel_path("sgemm_tiled")
    assert path.name == "sgemm.cu" and path.parent == Path(labkit.kernels.__file__).resolve().parent
    assert sources.kernel_path("transpose") == sources.kernel_path("transpose_padded")
    assert sources.kernel_source("reduce.cu") == sources.kernel_path("reduce").read_text()
    with pytest.raises(ValueError, match=r"unknown kernel 'gemm'; labkit ships: reduce_atomic"):
        sources.kernel_source("gemm")


def test_macros_and_compile_options() -> None:
    assert sources.compile_options("transpose_padded") == ("-DBLOCK_ROWS=8", "-DTILE_DIM=32")
    assert sources.compile_options("transpose_padded", TILE_DIM=64) == (
        "-DBLOCK_ROWS=8",
        "-DTILE_DIM=64",
    )
    assert sources.compile_options("sgemm_naive") == ()
    with pytest.raises(ValueError, match="takes TILE_DIM, BLOCK_ROWS; got TILE=64"):
        sources.macros_for("transpose_padded", TILE=64)
    with pytest.raises(ValueError, match="takes no macros"):
        sources.macros_for("reduce_atomic", BLOCK_SIZE=64)
    with pytest.raises(TypeError, match="BM must be an integer"):
        sources.macros_for("sgemm_tiled", BM=64.0)
    with pytest.raises(ValueError, match="BM must be an integer from 1 to 4,096"):
        sources.macros_for("sgemm_tiled", BM=0)
    with pytest.raises(TypeError):
        sources.KERNELS["sgemm_tiled"].macros["BM"] = 1  # type: ignore[index]


def test_the_cu_files_are_package_data_and_found_when_installed(tmp_path: Path) -> None:
    """Copy labkit as setuptools would install it (package-data globs), then read a kernel from there."""
    import tomllib

    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["labkit"]
    assert "kernels/*.cu" in globs, "pyproject.toml must ship labkit/kernels/*.cu as package data"
    site = tmp_path / "site"
    for py in (ROOT / "labkit").rglob("*.py"):
        target = site / py.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(py, target)
    for pattern in globs:
        for data in (ROOT / "labkit").glob(pattern):
            (site / data.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(data, site / data.relative_to(ROOT))
    code = (
        "import labkit.kernels.sources as s; "
        "print(s.kernel_path('sgemm_tiled')); print(len(s.kernel_source('reduce_shared')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
    )
    path, length = out.stdout.split()
    assert Path(path) == site / "labkit" / "kernels" / "sgemm.cu" and int(length) > 1000


# --------------------------------------------------------------------------- nvcc


@needs_nvcc
@pytest.mark.parametrize("file", sources.kernel_files())
def test_each_file_compiles_with_its_defaults(file: str, tmp_path: Path) -> None:
    done = _nvcc(sources.kernel_path(file), tmp_path)
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr.lower(), done.stderr


KERNEL_TUNER_CONFIGS = [
    ("transpose_padded", {"TILE_DIM": 64, "BLOCK_ROWS": 16}, ("TILE_DIM", "BLOCK_ROWS")),
    ("transpose_padded", {"TILE_DIM": 16, "BLOCK_ROWS": 2}, ("TILE_DIM", "BLOCK_ROWS")),
    (
        "sgemm_tiled",
        {"BM": 64, "BN": 128, "BK": 16, "TM": 4, "TN": 8, "block_size_x": 256},
        ("block_size_x",),
    ),
    (
        "sgemm_tiled",
        {"BM": 128, "BN": 128, "BK": 16, "TM": 8, "TN": 4, "block_size_x": 512},
        ("block_size_x",),
    ),
    ("reduce_shared", {"BLOCK_SIZE": 1024}, ("BLOCK_SIZE",)),
    ("strided_copy", {"ITEMS_PER_THREAD": 8, "block_size_x": 128}, ("block_size_x",)),
]


@needs_nvcc
@pytest.mark.parametrize(("kernel", "params", "names"), KERNEL_TUNER_CONFIGS)
def test_kernel_tuner_configurations_compile(
    kernel: str, params: dict[str, int], names: tuple[str, ...], tmp_path: Path
) -> None:
    """The source exactly as Kernel Tuner compiles it: its #defines prepended, then #line 1."""
    util = pytest.importorskip("kernel_tuner.util")
    threads = tuple(params.get(n, 1) for n in names) + (1,) * (3 - len(names))
    block_names = [*names, "block_size_y", "block_size_z"][:3]
    _, code = util.prepare_kernel_string(
        kernel, sources.kernel_source(kernel), params, (8, 8, 1), threads, block_names, "CUDA", None
    )
    assert code.startswith("#define grid_size_x 8") and "#line 1\n" in code
    source = tmp_path / "instance.cu"
    source.write_text(code)
    done = _nvcc(source, tmp_path)
    assert done.returncode == 0, done.stderr


@needs_nvcc
def test_bad_sgemm_tiles_fail_at_compile_time_as_labkit_predicts(tmp_path: Path) -> None:
    bad = {"BM": 64, "BN": 64, "BK": 8, "TM": 4, "TN": 4}
    assert sgemm_tiled_problems(**bad)
    done = _nvcc(
        sources.kernel_path("sgemm_tiled"), tmp_path, *sources.compile_options("sgemm_tiled", **bad)
    )
    assert done.returncode != 0 and "whole float4 rows" in done.stderr


@needs_nvcc
def test_the_broken_kernel_compiles_with_other_tiles(tmp_path: Path) -> None:
    options = sources.compile_options("transpose_tiled_nosync", TILE_DIM=16, BLOCK_ROWS=4)
    done = _nvcc(sources.kernel_path("transpose_tiled_nosync"), tmp_path, *options)
    assert done.returncode == 0, done.stderr


# --------------------------------------------------------------------------- sgemm_tiled's index math


def _emulate_sgemm_tiled(bm: int, bn: int, bk: int, tm: int, tn: int, k: int) -> float:
    """sgemm_tiled run thread by thread in NumPy, line for line as in sgemm.cu, on one row of blocks.

    Every global and shared access is bounds- and alignment-checked (an error
    here would be an illegal address on a GPU), every element of the shared
    tiles must be loaded before use and every element of C written exactly
    once. Returns the error relative to a float64 product.
    """
    import numpy as np

    threads = (bm // tm) * (bn // tn)
    m, n = bm, 2 * bn
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = np.full(m * n, np.nan, np.float32)

    def ld4(array: np.ndarray, index: int) -> np.ndarray:
        assert index % 4 == 0 and 0 <= index <= array.size - 4, index
        return array[index : index + 4]

    rows_apart, cols_apart = bm // (tm // 4), bn // (tn // 4)
    for block_x in range(n // bn):
        tile_a = np.full(bk * bm, np.nan, np.float32)
        tile_b = np.full(bk * bn, np.nan, np.float32)
        acc = np.zeros((threads, tm * tn), np.float32)
        a_at, b_at = 0, block_x * bn
        for _ in range(0, k, bk):
            for t in range(threads):
                row_a, col_a, step_a = t // (bk // 4), t % (bk // 4), 4 * threads // bk
                row_b, col_b, step_b = t // (bn // 4), t % (bn // 4), 4 * threads // bn
                for off in range(0, bm, step_a):
                    value = ld4(a.reshape(-1), a_at + (row_a + off) * k + col_a * 4)
                    for i in range(4):
                        tile_a[(col_a * 4 + i) * bm + row_a + off] = value[i]
                for off in range(0, bk, step_b):
                    at = (row_b + off) * bn + col_b * 4
                    ld4(tile_b, at)
                    tile_b[at : at + 4] = ld4(b.reshape(-1), b_at + (row_b + off) * n + col_b * 4)
            assert not np.isnan(tile_a).any() and not np.isnan(tile_b).any(), (
                "a tile was not fully loaded"
            )
            a_at, b_at = a_at + bk, b_at + bk * n
            for t in range(threads):
                lane, warp = t % 32, t // 32
                across = (bn // tn) // 8
                row, col = (warp // across) * 4 + lane // 8, (warp % across) * 8 + lane % 8
                for d in range(bk):
                    reg_m = np.concatenate(
                        [ld4(tile_a, d * bm + g * rows_apart + row * 4) for g in range(tm // 4)]
                    )
                    reg_n = np.concatenate(
                        [ld4(tile_b, d * bn + g * cols_apart + col * 4) for g in range(tn // 4)]
                    )
                    acc[t] += np.outer(reg_m, reg_n).ravel()
            tile_a[:], tile_b[:] = np.nan, np.nan
        for t in range(threads):
            lane, warp = t % 32, t // 32
            across = (bn // tn) // 8
            row0, col = (warp // across) * 4 + lane // 8, (warp % across) * 8 + lane % 8
            for i in range(tm):
                row = (i // 4) * rows_apart + row0 * 4 + i % 4
                for g in range(tn // 4):
                    at = block_x * bn + row * n + g * cols_apart + col * 4
                    assert np.isnan(ld4(c, at)).all(), "an element of C was written twice"
                    c[at : at + 4] = acc[t, i * tn + 4 * g : i * tn + 4 * g + 4]
    assert not np.isnan(c).any(), "an element of C was never written"
    expected = a.astype(np.float64) @ b
    return float(np.abs(c.reshape(m, n) - expected).max() / np.abs(expected).max())


@pytest.mark.parametrize("tiles", [(128, 128, 8, 8, 8), (64, 128, 16, 4, 8), (128, 64, 16, 8, 4)])
def test_sgemm_tiled_index_math(tiles: tuple[int, int, int, int, int]) -> None:
    bm, bn, bk, tm, tn = tiles
    assert sgemm_tiled_problems(BM=bm, BN=bn, BK=bk, TM=tm, TN=tn) == []
    assert _emulate_sgemm_tiled(bm, bn, bk, tm, tn, k=2 * bk) < 1e-5
