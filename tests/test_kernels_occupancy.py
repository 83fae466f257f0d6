"""Theoretical occupancy: hand-worked cases, the limiter labels, and NVIDIA's own calculator.

The hand-worked cases follow the rules in labkit/kernels/occupancy.py's
docstring. On sm_90 (H100, H200) an SM holds 64 warps (2048 threads), 32
blocks, 65,536 registers in 4 sub-partitions of 16,384, and 228 KB of shared
memory; every block also takes 1 KB of shared memory reserved by the driver.
Registers are allocated per warp, rounded up to 256.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from labkit.kernels import occupancy as occ  # noqa: E402
from labkit.kernels import plots as kernels_plots
from labkit.kernels.resources import KernelResources  # noqa: E402


def _occ(gpu: str, threads: int, regs: int, smem: int = 0) -> occ.Occupancy:
    return occ.occupancy(
        gpu, threads_per_block=threads, registers_per_thread=regs, shared_bytes_per_block=smem
    )


def test_full_occupancy_limited_by_threads_and_registers_at_once() -> None:
    # 256 threads = 8 warps. Threads: 64 warps / 8 = 8 blocks. Registers: 32 x 32 = 1,024 per
    # warp; 16,384 / 1,024 = 16 warps per sub-partition, x 4 = 64 warps = 8 blocks. Shared
    # memory: only the reserved 1 KB, 228 KB / 1 KB = 228 blocks. Blocks: 32. Min: 8 blocks.
    o = _occ("H100", 256, 32)
    assert (o.blocks_per_sm, o.active_warps_per_sm, o.occupancy_fraction) == (8, 64, 1.0)
    assert o.limited_by == ("threads", "registers")
    assert o.block_limits == {"threads": 8, "blocks": 32, "registers": 8, "shared memory": 228}
    assert o.shared_allocated_bytes_per_block == 1024 and o.registers_per_block == 8 * 1024
    assert str(o) == (
        "H100 (sm_90), 256 threads/block, 32 registers/thread, 0 B shared memory/block: "
        "8 blocks/SM, 64 of 64 warps, occupancy 100.0% (limited by threads and registers)"
    )


def test_64_registers_halve_it() -> None:
    # 64 x 32 = 2,048 registers per warp: 16,384 / 2,048 = 8 warps per sub-partition, 32 per SM,
    # 32 / 8 = 4 blocks of 256 threads = 32 of 64 warps.
    o = _occ("H200", 256, 64)
    assert (o.blocks_per_sm, o.percent, o.limited_by) == (4, 50.0, ("registers",))


def test_40_registers_round_to_whole_warps_of_registers() -> None:
    # 40 x 32 = 1,280 registers per warp (already a multiple of 256): 16,384 // 1,280 = 12 warps
    # per sub-partition, 48 per SM, 48 / 8 = 6 blocks = 48 warps: 75%.
    o = _occ("H100", 256, 40)
    assert (o.blocks_per_sm, o.percent, o.limited_by) == (6, 75.0, ("registers",))
    # 33 registers: 1,056 per warp, rounded up to 1,280: the same 75% as 40 registers.
    assert _occ("H100", 256, 33).percent == 75.0


def test_small_blocks_run_out_of_block_slots() -> None:
    # 32 threads = 1 warp per block; an SM holds 32 blocks, so only 32 of 64 warps.
    o = _occ("H100", 32, 16)
    assert (o.blocks_per_sm, o.percent, o.limited_by) == (32, 50.0, ("blocks",))


def test_shared_memory_limits_and_the_reserved_kilobyte() -> None:
    # 48 KB + 1 KB reserved = 50,176 B per block; 233,472 // 50,176 = 4 blocks = 32 warps.
    o = _occ("H100", 256, 32, 48 * 1024)
    assert (o.blocks_per_sm, o.percent, o.limited_by) == (4, 50.0, ("shared memory",))
    assert o.shared_allocated_bytes_per_block == 50_176
    # 100 B rounds up with the reserved 1 KB to 1,152 B (a multiple of 128): 233,472 // 1,152.
    assert _occ("H100", 32, 16, 100).block_limits["shared memory"] == 202
    # The largest a block may opt in to on sm_90 is 227 KB; one byte more cannot launch.
    assert _occ("H100", 256, 32, 227 * 1024).blocks_per_sm == 1
    too_big = _occ("H100", 256, 32, 227 * 1024 + 1)
    assert not too_big.fits and too_big.limited_by == ("shared memory",)
    assert "cannot launch" in str(too_big) and "232,448 B" in str(too_big)


def test_a_block_with_too_many_registers_cannot_launch() -> None:
    # 1,024 threads x 64 registers = exactly the 65,536 a block may use: 1 block, 50%.
    assert _occ("H100", 1024, 64).blocks_per_sm == 1
    # 65 registers: 2,080 per warp, rounded to 2,304; x 32 warps = 73,728 > 65,536.
    o = _occ("H100", 1024, 65)
    assert not o.fits and o.limited_by == ("registers",) and o.percent == 0.0
    assert "too many resources requested for launch" in o.reason
    # The hardware rounds a block's warps up to a multiple of 4 for this check: 288 threads
    # (9 warps) at 224 registers need 9 x 7,168 = 64,512 registers, but 12 x 7,168 = 86,016.
    assert not _occ("H100", 288, 224).fits


def test_other_architectures() -> None:
    # RTX 3090 (sm_86): 48 warps per SM, so 256 threads give 6 blocks, limited by threads.
    o = _occ("RTX 3090", 256, 32)
    assert (o.blocks_per_sm, o.max_warps_per_sm, o.percent, o.limited_by) == (
        6,
        48,
        100.0,
        ("threads",),
    )
    # L4 (sm_89): 24 blocks of 2 warps fill the 48 warp slots: threads and blocks tie.
    assert _occ("L4", 64, 32).limited_by == ("threads", "blocks")
    assert "(limited by threads, blocks and registers)" in str(_occ("H100", 64, 32))
    # T4 (sm_75): 32 warps, 16 blocks, no reserved shared memory: a kernel without shared
    # memory is not limited by it at all.
    t4 = _occ("T4", 256, 32)
    assert t4.block_limits["shared memory"] is None and t4.limited_by == ("threads",)
    assert _occ("T4", 256, 32, 16 * 1024).limited_by == ("threads", "shared memory")
    # A100 (sm_80) at 128 registers: 4,096 per warp, 4 warps per sub-partition = 16 warps = 25%.
    assert _occ("A100", 256, 128).percent == 25.0


@pytest.mark.parametrize(
    ("arch", "threads", "blocks", "smem_kb", "block_kb", "reserved"),
    [  # CUDA C++ Programming Guide, "Technical Specifications per Compute Capability"
        ("sm_75", 1024, 16, 64, 64, 0),
        ("sm_80", 2048, 32, 164, 163, 1024),
        ("sm_86", 1536, 16, 100, 99, 1024),
        ("sm_89", 1536, 24, 100, 99, 1024),
        ("sm_90", 2048, 32, 228, 227, 1024),
    ],
)
def test_the_limits_are_the_programming_guides(arch, threads, blocks, smem_kb, block_kb, reserved):
    lim = occ.ARCHES[arch]
    assert (lim.max_threads_per_sm, lim.max_blocks_per_sm) == (threads, blocks)
    assert lim.shared_bytes_per_sm == smem_kb * 1024
    assert lim.max_shared_bytes_per_block == block_kb * 1024
    assert lim.reserved_shared_bytes_per_block == reserved
    assert (lim.registers_per_sm, lim.max_registers_per_block, lim.max_registers_per_thread) == (
        65536,
        65536,
        255,
    )
    assert lim.max_warps_per_sm == threads // 32


def test_gpu_names_and_arches() -> None:
    assert occ.gpu_limits("rtx-4090")[0] == "RTX 4090"
    assert occ.gpu_limits("h200")[1].arch == "sm_90"
    assert occ.gpu_limits("sm_86")[1].max_threads_per_sm == 1536
    for name, arch in occ.GPUS.items():
        assert occ.gpu_limits(name)[1] is occ.ARCHES[arch]
    with pytest.raises(ValueError, match="gpu must be one of T4, A100"):
        occ.gpu_limits("V100")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"threads_per_block": 0, "registers_per_thread": 32}, ValueError, "threads_per_block"),
        ({"threads_per_block": 1025, "registers_per_thread": 32}, ValueError, "1 to 1,024"),
        ({"threads_per_block": 256.0, "registers_per_thread": 32}, TypeError, "must be an int"),
        ({"threads_per_block": 256, "registers_per_thread": 256}, ValueError, "1 to 255"),
        ({"threads_per_block": 256, "registers_per_thread": 0}, ValueError, "registers_per"),
        (
            {"threads_per_block": 256, "registers_per_thread": 32, "shared_bytes_per_block": -1},
            ValueError,
            "shared_bytes_per_block",
        ),
    ],
)
def test_bad_arguments_are_named(kwargs, error, match) -> None:
    with pytest.raises(error, match=match):
        occ.occupancy("H100", **kwargs)


def _kernel(regs: int, smem: int, arch: str = "sm_90") -> KernelResources:
    # A kernel whose block size is free (sgemm_tiled's is fixed: FIXED_BLOCK_THREADS)
    return KernelResources("heavy_kernel", "heavy_kernel", arch, regs, smem, 0, 0, 0, 0, 1)


def test_sweep_over_block_sizes() -> None:
    sweep = occ.occupancy_sweep("H100", _kernel(127, 8192))
    assert sweep.block_sizes == occ.DEFAULT_BLOCK_SIZES
    # 127 registers -> 4,096 per warp -> 16 warps per SM whatever the block size (up to 512).
    assert sweep.rows[7].threads_per_block == 256 and sweep.rows[7].percent == 25.0
    assert sweep.best.threads_per_block == 32  # 16 blocks of 1 warp reach the same 25%
    text = str(sweep)
    assert text.startswith("Theoretical occupancy of heavy_kernel on H100 (sm_90): 127 registers")
    assert "           256          2     16/64      25.0%  registers" in text
    assert "(32 block sizes computed)" in text
    # 1024 threads x 127 registers cannot launch
    assert not sweep.rows[-1].fits and "cannot launch: registers" in text


def test_sweep_checks_the_architecture_and_its_arguments() -> None:
    with pytest.raises(ValueError, match="compiled for sm_80 but H100 is sm_90"):
        occ.occupancy_sweep("H100", _kernel(32, 0, "sm_80"))
    with pytest.raises(ValueError, match="block_sizes must be a non-empty list"):
        occ.occupancy_sweep("H100", _kernel(32, 0), block_sizes=())
    with pytest.raises(ValueError, match="block_sizes must be an integer from 1 to 1,024"):
        occ.occupancy_sweep("H100", _kernel(32, 0), block_sizes=[64, 2048])
    small = occ.occupancy_sweep(
        "sm_90", _kernel(32, 0, "sm_90a"), [256, 128, 128], dynamic_shared_bytes=48 * 1024
    )
    assert small.block_sizes == (128, 256) and small.shared_bytes_per_block == 48 * 1024


def test_plot_occupancy_one_and_several_sweeps() -> None:
    one = occ.occupancy_sweep("H100", _kernel(127, 8192))
    ax = kernels_plots.plot_occupancy(one)
    try:
        assert ax.get_xlabel() == "threads per block"
        assert ax.get_ylabel().startswith("occupancy (%")
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert "limited by registers" in labels and "cannot launch" in labels
    finally:
        plt.close(ax.figure)
    two = [one, occ.occupancy_sweep("H100", _kernel(32, 0))]
    ax = kernels_plots.plot_occupancy(two)
    try:  # one entry per sweep, and the launch failures (127 regs x 1024 threads) marked once
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert len(labels) == 3 and labels.count("cannot launch") == 1
        assert ax.get_xscale() == "log"
    finally:
        plt.close(ax.figure)


# --------------------------------------------------------------------------- NVIDIA's calculator

ORACLE = r"""
#include <cstdio>
#include <cuda_occupancy.h>
int main() {
  int maj, mnr, tpsm, threads, regs; long smsm, optin, reserved, smem;
  while (scanf("%d %d %d %ld %ld %ld %d %d %ld", &maj, &mnr, &tpsm, &smsm, &optin, &reserved,
               &threads, &regs, &smem) == 9) {
    cudaOccDeviceProp p; p.computeMajor = maj; p.computeMinor = mnr; p.maxThreadsPerBlock = 1024;
    p.maxThreadsPerMultiprocessor = tpsm; p.regsPerBlock = 65536; p.regsPerMultiprocessor = 65536;
    p.warpSize = 32; p.sharedMemPerBlock = 48 * 1024; p.sharedMemPerMultiprocessor = smsm;
    p.numSms = 1; p.sharedMemPerBlockOptin = optin; p.reservedSharedMemPerBlock = reserved;
    cudaOccFuncAttributes a; a.maxThreadsPerBlock = 1024; a.numRegs = regs; a.sharedSizeBytes = 0;
    a.partitionedGCConfig = PARTITIONED_GC_OFF; a.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
    a.maxDynamicSharedSizeBytes = optin; a.numBlockBarriers = 1; a.virtualResourceCount = 0;
    cudaOccDeviceState s; cudaOccResult r;
    cudaOccError e = cudaOccMaxActiveBlocksPerMultiprocessor(&r, &p, &a, &s, threads, smem);
    printf("%d %d %u\n", (int)e, r.activeBlocksPerMultiprocessor, r.limitingFactors);
  }
  return 0;
}
"""


def _occupancy_header() -> Path | None:
    from labkit.kernels.resources import find_compiler

    roots = [Path("/usr/local/cuda")]
    nvcc = find_compiler()
    if nvcc:
        roots.insert(0, Path(nvcc).resolve().parent.parent)
    return next(
        (r / "include" for r in roots if (r / "include" / "cuda_occupancy.h").is_file()), None
    )


@pytest.mark.skipif(
    shutil.which("g++") is None or _occupancy_header() is None,
    reason="needs g++ and the CUDA toolkit's cuda_occupancy.h",
)
def test_matches_cuda_occupancy_h(tmp_path: Path) -> None:
    """cuda_occupancy.h implements cudaOccupancyMaxActiveBlocksPerMultiprocessor on the host."""
    (tmp_path / "oracle.cpp").write_text(ORACLE)
    exe = tmp_path / "oracle"
    subprocess.run(
        ["g++", "-O1", f"-I{_occupancy_header()}", "-o", str(exe), str(tmp_path / "oracle.cpp")],
        check=True,
        timeout=120,
    )
    bits = {1: "threads", 2: "registers", 4: "shared memory", 8: "blocks"}
    cases = [
        (arch, lim, t, r, s)
        for arch, lim in occ.ARCHES.items()
        for t in (1, 32, 96, 128, 256, 288, 640, 1024)
        for r in (16, 32, 33, 64, 65, 128, 224, 255)
        for s in (0, 4224, 16384, 49152, 101376, 166913, 232448, *range(1000, 232448, 9973))
    ]
    # Shared-memory sizes just past an allocation unit, where one block more or less fits:
    # they catch a wrong allocation granularity (128 B from sm_80 on, 256 B before).
    for arch, lim in occ.ARCHES.items():
        for k in range(2, 17):
            x = (lim.shared_bytes_per_sm // k) // 256 * 256 + 128
            x -= 256 if x * k > lim.shared_bytes_per_sm else 0
            if x - lim.reserved_shared_bytes_per_block - 127 >= 0:
                cases.append((arch, lim, 32, 16, x - lim.reserved_shared_bytes_per_block - 127))
    lines = "\n".join(
        f"{arch[3:-1]} {arch[-1]} {lim.max_threads_per_sm} {lim.shared_bytes_per_sm} "
        f"{lim.max_shared_bytes_per_block} {lim.reserved_shared_bytes_per_block} {t} {r} {s}"
        for arch, lim, t, r, s in cases
    )
    out = subprocess.run([str(exe)], input=lines, capture_output=True, text=True, check=True)
    answers = out.stdout.split("\n")
    for (arch, _lim, t, r, s), answer in zip(cases, answers, strict=False):
        err, blocks, factors = map(int, answer.split())
        mine = occ.occupancy(
            arch, threads_per_block=t, registers_per_thread=r, shared_bytes_per_block=s
        )
        assert err == 0
        assert mine.blocks_per_sm == blocks, (arch, t, r, s)
        if blocks:
            assert set(mine.limited_by) == {n for b, n in bits.items() if factors & b}, (
                arch,
                t,
                r,
                s,
            )


def test_blackwell_limits_are_the_programming_guides() -> None:
    """CUDA Programming Guide, Compute Capabilities, tables 30-31: 10.x as 9.0; 12.x 48 warps."""
    b200 = occ.gpu_limits("B200")[1]
    rtx = occ.gpu_limits("RTX 5090")[1]
    assert (b200.arch, b200.max_threads_per_sm, b200.max_blocks_per_sm) == ("sm_100", 2048, 32)
    assert b200.shared_bytes_per_sm == 228 * 1024 and b200.max_shared_bytes_per_block == 227 * 1024
    assert (rtx.arch, rtx.max_warps_per_sm, rtx.max_blocks_per_sm) == ("sm_120", 48, 24)
    assert rtx.shared_bytes_per_sm == 100 * 1024 and rtx.max_shared_bytes_per_block == 99 * 1024
    assert occ.gpu_limits("sm_103")[1].max_threads_per_sm == 2048


def test_register_threshold_is_where_registers_start_to_limit() -> None:
    assert occ.register_threshold("H100") == 32  # 65,536 / 2,048
    assert occ.register_threshold("A100") == 32
    assert occ.register_threshold("B200") == 32
    assert occ.register_threshold("T4") == 64  # 65,536 / 1,024
    assert occ.register_threshold("L4") == 40  # 65,536 / 1,536 = 42.7, rounded per warp
    at_33 = occ.occupancy("H100", threads_per_block=256, registers_per_thread=33)
    assert at_33.occupancy_fraction == 0.75 and "registers" in at_33.limited_by


def test_a_fixed_block_kernel_cannot_be_swept_over_block_sizes() -> None:
    from types import SimpleNamespace

    tiled = SimpleNamespace(
        name="sgemm_tiled", registers_per_thread=117, shared_bytes=8192, arch="sm_90"
    )
    with pytest.raises(ValueError, match=r"block_sizes: sgemm_tiled is compiled for 256"):
        occ.occupancy_sweep("H100", tiled, block_sizes=(64, 128, 256))
    only = occ.occupancy_sweep("H100", tiled, block_sizes=(256,))
    assert [r.occupancy_fraction for r in only.rows] == [0.25]


def test_81_to_128_registers_leave_two_256_thread_blocks_on_an_h100() -> None:
    """Notebook 07's rule for sgemm_tiled, whatever nvcc version reports 117 or 128 registers."""
    for regs in (81, 100, 117, 128):
        at = occ.occupancy("H100", threads_per_block=256, registers_per_thread=regs)
        assert (at.blocks_per_sm, at.active_warps_per_sm, at.occupancy_fraction) == (2, 16, 0.25)
    assert occ.occupancy("H100", threads_per_block=256, registers_per_thread=80).blocks_per_sm == 3
    assert occ.occupancy("H100", threads_per_block=256, registers_per_thread=129).blocks_per_sm == 1
