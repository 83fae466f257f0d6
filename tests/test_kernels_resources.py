"""What nvcc says each kernel needs: parsing, finding a compiler, clear errors, real compiles.

The parsing tests use ptxas output recorded from nvcc 13.0 and a fake nvcc
(a shell script), so they run on any machine; the tests that compile for
real are skipped where no nvcc is found.
"""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from labkit.kernels import resources as res

# Recorded from `nvcc -cubin -arch=sm_80 --resource-usage` (nvcc 13.0.88), Compile-time lines kept.
PTXAS_SM80 = """\
ptxas info    : 0 bytes gmem, 64 bytes cmem[3]
ptxas info    : Compiling entry function 'usescst' for 'sm_80'
ptxas info    : Function properties for usescst
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers, 360 bytes cmem[0]
ptxas info    : Compile time = 2.809 ms
ptxas info    : Compiling entry function '_Z7mangledPfi' for 'sm_80'
ptxas info    : Function properties for _Z7mangledPfi
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 72 registers, used 0 barriers, 364 bytes cmem[0]
ptxas info    : Compile time = 27.470 ms
ptxas info    : Compiling entry function 'transpose_tiled' for 'sm_80'
ptxas info    : Function properties for transpose_tiled
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 4224 bytes smem, 372 bytes cmem[0]
ptxas info    : Compile time = 187.415 ms
"""

# Recorded from `nvcc -cubin -arch=sm_90 --resource-usage -maxrregcount=16` (nvcc 13.0.88).
PTXAS_SPILLS_SM90 = """\
ptxas warning : For profile sm_90 adjusting per thread register count of 16 to lower bound of 24
ptxas info    : Overriding maximum register limit 256 for 'spilly' with  24 of maxrregcount option
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'spilly' for 'sm_90'
ptxas info    : Function properties for spilly
    3592 bytes stack frame, 3672 bytes spill stores, 7184 bytes spill loads
ptxas info    : Used 24 registers, used 0 barriers, 3592 bytes cumulative stack size
"""

TILED = textwrap.dedent("""\
    #ifndef TILE_DIM
    #define TILE_DIM 32
    #endif
    extern "C" __global__ void first_kernel(float *out, const float *in, int n) {
        __shared__ float tile[TILE_DIM][TILE_DIM + 1];
        int x = blockIdx.x * TILE_DIM + threadIdx.x, y = blockIdx.y * TILE_DIM + threadIdx.y;
        if (x < n && y < n) tile[threadIdx.y][threadIdx.x] = in[y * n + x];
        __syncthreads();
        if (x < n && y < n) out[x * n + y] = tile[threadIdx.x][threadIdx.y];
    }
    __global__ void second_kernel(float *a, int n) { a[threadIdx.x] *= n; }
""")

needs_nvcc = pytest.mark.skipif(res.find_compiler() is None, reason="needs nvcc")


def test_parse_reads_every_field_of_every_kernel() -> None:
    rows = res.parse_resource_usage(PTXAS_SM80, source="k.cu")
    assert [r.name for r in rows] == ["usescst", "mangled", "transpose_tiled"]
    tiled = rows[2]
    assert (tiled.arch, tiled.registers_per_thread, tiled.shared_bytes) == ("sm_80", 10, 4224)
    assert (tiled.constant_bytes, tiled.barriers, tiled.stack_bytes) == (372, 1, 0)
    assert not tiled.spills and tiled.source == "k.cu"
    assert rows[1].symbol == "_Z7mangledPfi" and rows[1].registers_per_thread == 72
    assert str(tiled) == (
        "transpose_tiled (sm_80): 10 registers/thread, 4,224 B shared memory/block, no spills"
    )


def test_parse_reads_spills_and_the_stack() -> None:
    (row,) = res.parse_resource_usage(PTXAS_SPILLS_SM90)
    assert row.registers_per_thread == 24 and row.spills
    assert (row.stack_bytes, row.spill_stores_bytes, row.spill_loads_bytes) == (3592, 3672, 7184)
    assert row.constant_bytes == 0 and row.shared_bytes == 0
    assert "spills 3,672 B stored / 7,184 B loaded" in str(row)


def test_parse_skips_device_functions_and_old_formats() -> None:
    text = (
        "ptxas info    : Function properties for _Z6helperi\n"
        "    8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Compiling entry function 'k' for 'sm_75'\n"
        "ptxas info    : Function properties for k\n"
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Used 12 registers, 16640 bytes smem, 352 bytes cmem[0]\n"  # no barriers
    )
    (row,) = res.parse_resource_usage(text)
    assert (row.name, row.registers_per_thread, row.shared_bytes) == ("k", 12, 16640)
    assert row.barriers is None


@pytest.mark.parametrize(
    ("symbol", "name"),
    [
        ("plain", "plain"),
        ("_Z7mangledPfi", "mangled"),
        ("_ZN3foo3barEv", "foo::bar"),
        ("_Z6kernelILi32EEvPf", "kernel"),
    ],
)
def test_short_names(symbol: str, name: str) -> None:
    assert res._short_name(symbol) == name


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90", "sm_90a", "sm_100a", "sm_120"])
def test_good_arches(arch: str) -> None:
    assert res.check_arch(arch) == arch


@pytest.mark.parametrize("arch", ["90", "sm90", "compute_90", "sm_9", "SM_90", "sm_90x", ""])
def test_bad_arches_are_named(arch: str) -> None:
    with pytest.raises(ValueError, match="arch must look like 'sm_XX'"):
        res.check_arch(arch)


def test_bad_arguments_are_rejected_before_compiling() -> None:
    with pytest.raises(ValueError, match="defines keys must be C macro names"):
        res.compile_resources(TILED, defines={"1TILE": 2})
    with pytest.raises(ValueError, match=r"defines\['TILE_DIM'\] must be a number or a plain word"):
        res.compile_resources(TILED, defines={"TILE_DIM": "3 -o /x"})
    with pytest.raises(ValueError, match="max_registers must be"):
        res.compile_resources(TILED, max_registers=300)
    with pytest.raises(ValueError, match="timeout_s must be"):
        res.compile_resources(TILED, timeout_s=0)
    with pytest.raises(ValueError, match="source_or_path is empty"):
        res.compile_resources("  ")
    with pytest.raises(ValueError, match="is neither"):
        res.compile_resources("no_such_file.cu")
    with pytest.raises(ValueError, match="no such file"):
        res.compile_resources(Path("no_such_file.cu"))
    with pytest.raises(ValueError, match="nvcc must be the path of an nvcc"):
        res.compile_resources(TILED, nvcc="/no/such/nvcc")
    with pytest.raises(ValueError, match="arches must be a non-empty list"):
        res.resources_table([])
    with pytest.raises(ValueError, match="arches: arch must look like"):
        res.resources_table(["sm90"])


def _hide_every_compiler(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(res, "TOOLKIT_DIRS", ())
    monkeypatch.setattr(sys, "path", [])


def test_no_compiler_gives_one_clear_message(monkeypatch, tmp_path: Path) -> None:
    _hide_every_compiler(monkeypatch, tmp_path)
    assert res.find_compiler() is None
    with pytest.raises(res.CompilerNotFound) as info:
        res.compile_resources(TILED)
    message = str(info.value)
    assert 'pip install "cuda-toolkit[nvcc]"' in message and "CUDA toolkit" in message
    assert "nvidia-cuda-nvcc-cu12 alone is not enough" in message
    with pytest.raises(res.CompilerNotFound):
        res.resources_table()


def _fake_nvcc(path: Path, ptxas_output: str, *, sleep_s: float = 0) -> Path:
    """A shell script that answers --version like nvcc and prints ``ptxas_output`` otherwise."""
    path.parent.mkdir(parents=True, exist_ok=True)
    out = path.parent / "ptxas_output.txt"
    out.write_text(ptxas_output)
    path.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "Cuda compilation tools, release 13.0, V13.0.88"; '
        "exit 0; fi\n"
        f"sleep {sleep_s}\n"
        f"cat '{out}' >&2\n"
    )
    path.chmod(0o755)
    return path


@pytest.mark.skipif(os.name != "posix", reason="the fake nvcc is a shell script")
def test_finds_nvcc_in_cuda_home_and_in_the_pip_wheels(monkeypatch, tmp_path: Path) -> None:
    _hide_every_compiler(monkeypatch, tmp_path)
    wheel = _fake_nvcc(tmp_path / "site" / "nvidia" / "cu13" / "bin" / "nvcc", PTXAS_SM80)
    monkeypatch.setattr(sys, "path", ["", str(tmp_path / "site")])
    assert res.find_compiler() == str(wheel)
    home = _fake_nvcc(tmp_path / "cuda" / "bin" / "nvcc", PTXAS_SM80)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    assert res.find_compiler() == str(home)  # CUDA_HOME before the wheels
    assert res.compiler_version() == "13.0.88"


@pytest.mark.skipif(os.name != "posix", reason="the fake nvcc is a shell script")
def test_compile_with_a_fake_nvcc_orders_kernels_as_in_the_source(tmp_path: Path) -> None:
    source = (
        'extern "C" __global__ void transpose_tiled(){}\n__global__ void mangled(){}\n'
        'extern "C" __global__ void usescst(){}\n'
    )
    nvcc = _fake_nvcc(tmp_path / "bin" / "nvcc", PTXAS_SM80)
    rows = res.compile_resources(source, arch="sm_80", nvcc=str(nvcc))
    assert [r.name for r in rows] == ["transpose_tiled", "mangled", "usescst"]
    table = res.resources_table(["sm_80"], sources=[source], nvcc=str(nvcc), defines={"X": 1})
    assert table.nvcc_version == "13.0.88" and table.kernels == (
        "transpose_tiled",
        "mangled",
        "usescst",
    )
    text = str(table)
    assert text.startswith("Resource use per kernel, from nvcc 13.0.88 --resource-usage with X=1")
    assert "transpose_tiled         sm_80          10     4,224" in text
    assert table.get("mangled", "sm_80").registers_per_thread == 72
    with pytest.raises(KeyError, match="no row for kernel 'mangled' at 'sm_90'"):
        table.get("mangled", "sm_90")


@pytest.mark.skipif(os.name != "posix", reason="the fake nvcc is a shell script")
def test_a_hung_compiler_is_stopped(tmp_path: Path) -> None:
    nvcc = _fake_nvcc(tmp_path / "bin" / "nvcc", PTXAS_SM80, sleep_s=5)
    with pytest.raises(res.CompileError, match="did not finish within timeout_s=0.3 s"):
        res.compile_resources(TILED, nvcc=str(nvcc), timeout_s=0.3)


@needs_nvcc
def test_real_compile_reads_shared_memory_from_the_macros(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "tiled.cu").write_text(TILED)
    monkeypatch.chdir(tmp_path)  # a relative path works although nvcc runs in a temporary folder
    rows = res.compile_resources("tiled.cu", arch="sm_80", defines={"TILE_DIM": 16})
    assert [r.name for r in rows] == ["first_kernel", "second_kernel"]
    first, second = rows
    assert first.shared_bytes == 16 * 17 * 4 and first.barriers == 1 and first.source == "tiled.cu"
    assert first.registers_per_thread > 0 and not first.spills
    assert second.symbol.startswith("_Z") and second.shared_bytes == 0
    (default,) = [r for r in res.compile_resources(TILED, arch="sm_90") if r.name == "first_kernel"]
    assert default.shared_bytes == 32 * 33 * 4 and default.arch == "sm_90"


@needs_nvcc
def test_real_compile_shows_spills_under_a_register_cap() -> None:
    source = textwrap.dedent("""\
        extern "C" __global__ void spilly(float *a, int n) {
            float acc[40];
        #pragma unroll
            for (int i = 0; i < 40; i++) acc[i] = a[i * n];
            float s = 0;
        #pragma unroll
            for (int j = 0; j < 40; j++) for (int i = 0; i < 40; i++) s += acc[i] * acc[(i + j) % 40];
            a[n] = s;
        }
    """)
    (free,) = res.compile_resources(source, arch="sm_90")
    (capped,) = res.compile_resources(source, arch="sm_90", max_registers=24)
    assert capped.registers_per_thread <= 24 < free.registers_per_thread
    assert capped.spills and not free.spills


@needs_nvcc
def test_real_compile_errors_name_the_source_and_the_problem() -> None:
    with pytest.raises(res.CompileError, match="undefined_thing") as info:
        res.compile_resources('extern "C" __global__ void f(int *a) { a[0] = undefined_thing; }')
    assert "<source>" in str(info.value) and "labkit-nvcc-" not in str(info.value)
    with pytest.raises(res.CompileError, match="sm_10"):
        res.compile_resources(TILED, arch="sm_10")


@needs_nvcc
def test_course_table_lists_every_course_kernel(monkeypatch) -> None:
    from labkit.kernels import sources

    table = res.resources_table(["sm_90"])
    assert set(table.kernels) == set(sources.KERNELS)
    assert table.missing == ()
    assert table.nvcc_version == res.compiler_version()
    assert f"nvcc {table.nvcc_version}" in str(table)
    tiled = table.get("transpose_tiled", "sm_90")
    assert tiled.shared_bytes == 32 * 32 * 4 and tiled.barriers == 1  # TILE_DIM's default
    assert table.get("transpose_tiled_nosync", "sm_90").barriers == 0  # the missing barrier shows
    # a course file that is absent is listed, not fatal
    monkeypatch.setattr(
        res, "course_sources", lambda: (res.Path(res.__file__).with_name("gone.cu"),)
    )
    assert res.resources_table(["sm_90"]).missing == ("gone.cu",)
