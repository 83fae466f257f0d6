"""Theoretical occupancy: how many warps of a kernel an SM can hold, and which resource stops it.

A GPU hides memory latency by switching between resident warps, so the
number of warps an SM can keep (its *occupancy*, as a fraction of the
maximum) is the first thing to check when a kernel is slow. It follows from
four per-SM limits and three numbers per kernel: threads per block (chosen
at launch), registers per thread and shared memory per block (reported by
the compiler, :mod:`labkit.kernels.resources`). This module is the CUDA
Occupancy Calculator's logic, without a GPU:

- the limits per architecture come from NVIDIA's *CUDA C++ Programming
  Guide*, section "Compute Capabilities", table "Technical Specifications
  per Compute Capability" (threads, warps and blocks per SM, registers per
  SM/block/thread, shared memory per SM and per block);
- the rules for rounding come from ``cuda_occupancy.h``, which ships with
  the CUDA toolkit and implements ``cudaOccupancyMaxActiveBlocksPerMultiprocessor``:
  registers are allocated per warp in units of 256, out of four SM
  sub-partitions of 16,384 registers each (and a block's warps are rounded
  up to a multiple of 4 for the per-block check); shared memory is
  allocated in units of 128 bytes (256 before sm_80), and from sm_80 on the
  driver reserves 1 KB of shared memory per block.

Assumptions, as the calculator's defaults: the shared-memory carveout is
the largest the SM allows, a kernel may opt in to the largest per-block
shared memory, and the limit on named barriers (only reached with several
barriers per block) is ignored. Thread block clusters (sm_90 on) are not
modelled: a cluster must fit on the SMs of one GPC at once, which can
lower the occupancy this module reports. The test suite compares the
results with ``cuda_occupancy.h`` itself wherever the CUDA toolkit is
installed (tests/test_kernels_occupancy.py), Blackwell's sm_100/sm_120 included.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from labkit.core.validate import check_int, check_sizes

#: The resources that can limit occupancy, in the order they are reported.
LIMITERS: tuple[str, ...] = ("threads", "blocks", "registers", "shared memory")

#: Every multiple of a warp up to the largest block: the calculator's sweep.
DEFAULT_BLOCK_SIZES: tuple[int, ...] = tuple(range(32, 1025, 32))

_KB = 1024


@dataclass(frozen=True)
class ArchLimits:
    """Per-SM limits of one compute capability (CUDA C++ Programming Guide,
    "Compute Capabilities": "Technical Specifications per Compute Capability")."""

    arch: str
    max_threads_per_sm: int
    max_blocks_per_sm: int
    shared_bytes_per_sm: int  # the largest carveout
    max_shared_bytes_per_block: int  # with the opt-in (cudaFuncAttributeMaxDynamicSharedMemorySize)
    shared_allocation_bytes: int  # allocation unit (cuda_occupancy.h)
    reserved_shared_bytes_per_block: int  # taken by the driver from sm_80 on
    registers_per_sm: int = 65_536
    max_registers_per_block: int = 65_536
    max_registers_per_thread: int = 255
    register_allocation_unit: int = 256  # registers, allocated per warp
    register_sub_partitions: int = 4
    max_threads_per_block: int = 1024
    warp_size: int = 32

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size


#: The compute capabilities of the GPUs below.
ARCHES: dict[str, ArchLimits] = {
    "sm_75": ArchLimits("sm_75", 1024, 16, 64 * _KB, 64 * _KB, 256, 0),
    "sm_80": ArchLimits("sm_80", 2048, 32, 164 * _KB, 163 * _KB, 128, _KB),
    "sm_86": ArchLimits("sm_86", 1536, 16, 100 * _KB, 99 * _KB, 128, _KB),
    "sm_89": ArchLimits("sm_89", 1536, 24, 100 * _KB, 99 * _KB, 128, _KB),
    "sm_90": ArchLimits("sm_90", 2048, 32, 228 * _KB, 227 * _KB, 128, _KB),
    # Blackwell: the data-centre parts (10.0, 10.3) keep Hopper's limits; the GeForce parts
    # (12.x) have 48 warps, 24 blocks and 100 KB per SM. (CUDA Programming Guide, "Compute
    # Capabilities", tables 30-31; allocation units as on sm_80/sm_90, not published apart.)
    "sm_100": ArchLimits("sm_100", 2048, 32, 228 * _KB, 227 * _KB, 128, _KB),
    "sm_103": ArchLimits("sm_103", 2048, 32, 228 * _KB, 227 * _KB, 128, _KB),
    "sm_120": ArchLimits("sm_120", 1536, 24, 100 * _KB, 99 * _KB, 128, _KB),
}

#: Named GPUs and their compute capability.
GPUS: dict[str, str] = {
    "T4": "sm_75",
    "A100": "sm_80",
    "RTX 3090": "sm_86",
    "L4": "sm_89",
    "RTX 4090": "sm_89",
    "H100": "sm_90",
    "H200": "sm_90",
    "B200": "sm_100",
    "RTX 5090": "sm_120",
}


#: Kernels whose block size the build fixes: sgemm_tiled's indexing assumes exactly
#: SGEMM_THREADS = (BM / TM) * (BN / TN) = 256 threads for sgemm.cu's default tiles (its load
#: loops step by it); __launch_bounds__(256) forbids more, and fewer would launch but leave
#: parts of the tiles unloaded.
FIXED_BLOCK_THREADS: dict[str, int] = {"sgemm_tiled": 256}


def register_threshold(gpu: str) -> int:
    """The most registers per thread at which some block size still reaches 100% occupancy.

    Above it, registers cap occupancy below 100% whatever the block size: on
    sm_80/sm_90, 65,536 registers ÷ 2,048 threads = 32. Computed with
    :func:`occupancy` (its allocation granularity included), not assumed.
    """
    name, lim = gpu_limits(gpu)
    best = 0
    for regs in range(1, lim.max_registers_per_thread + 1):
        if any(
            occupancy(
                name if name in GPUS else lim.arch, threads_per_block=b, registers_per_thread=regs
            ).occupancy_fraction
            >= 1.0
            for b in DEFAULT_BLOCK_SIZES
        ):
            best = regs
        else:
            break
    return best


def _key(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def gpu_limits(gpu: str) -> tuple[str, ArchLimits]:
    """(display name, limits) for a GPU name ("H100", "rtx 4090") or an arch ("sm_90")."""
    if gpu in ARCHES:
        return gpu, ARCHES[gpu]
    for name, arch in GPUS.items():
        if _key(name) == _key(gpu):
            return name, ARCHES[arch]
    raise ValueError(
        f"gpu must be one of {', '.join(GPUS)} or an arch ({', '.join(ARCHES)}), got {gpu!r}"
    )


def _and(words: tuple[str, ...]) -> str:
    """("a", "b", "c") -> "a, b and c"."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


@dataclass(frozen=True)
class Occupancy:
    """The theoretical occupancy of one launch configuration on one GPU.

    ``block_limits`` holds, per resource, how many blocks it alone would let
    an SM hold (None: no limit, as for a kernel without shared memory before
    sm_80); the smallest wins and ``limited_by`` names every resource at
    that smallest value. ``blocks_per_sm == 0`` means the block cannot run at
    all (``fits`` is False and ``reason`` says why).
    """

    gpu: str
    arch: str
    threads_per_block: int
    registers_per_thread: int
    shared_bytes_per_block: int
    warps_per_block: int
    blocks_per_sm: int
    active_warps_per_sm: int
    max_warps_per_sm: int
    occupancy_fraction: float
    limited_by: tuple[str, ...]
    block_limits: dict[str, int | None] = field(compare=False)
    registers_per_block: int = 0  # as allocated (rounded per warp)
    shared_allocated_bytes_per_block: int = 0  # with the reserved 1 KB and rounding
    reason: str = ""

    @property
    def fits(self) -> bool:
        return self.blocks_per_sm > 0

    @property
    def percent(self) -> float:
        return 100.0 * self.occupancy_fraction

    def __str__(self) -> str:
        head = (
            f"{self.gpu} ({self.arch}), {self.threads_per_block} threads/block, "
            f"{self.registers_per_thread} registers/thread, "
            f"{self.shared_bytes_per_block:,} B shared memory/block"
        )
        if not self.fits:
            return f"{head}: cannot launch ({self.reason})"
        return (
            f"{head}: {self.blocks_per_sm} block{'s' if self.blocks_per_sm > 1 else ''}/SM, "
            f"{self.active_warps_per_sm} of "
            f"{self.max_warps_per_sm} warps, occupancy {self.percent:.1f}% "
            f"(limited by {_and(self.limited_by)})"
        )


def occupancy(
    gpu: str,
    *,
    threads_per_block: int,
    registers_per_thread: int,
    shared_bytes_per_block: int = 0,
) -> Occupancy:
    """Theoretical occupancy of a kernel launch, as the CUDA Occupancy Calculator computes it.

    Args:
        gpu: a name from :data:`GPUS` ("H100", "A100", "L4", ...) or an arch ("sm_90").
        threads_per_block: the launch's block size, 1 to 1024.
        registers_per_thread: from the compiler (``KernelResources.registers_per_thread``).
        shared_bytes_per_block: static plus dynamic shared memory per block, in bytes.
    """
    name, lim = gpu_limits(gpu)
    threads = check_int(
        "threads_per_block", threads_per_block, minimum=1, maximum=lim.max_threads_per_block
    )
    regs = check_int(
        "registers_per_thread",
        registers_per_thread,
        minimum=1,
        maximum=lim.max_registers_per_thread,  # ptxas never uses more than 255
    )
    smem = check_int("shared_bytes_per_block", shared_bytes_per_block, minimum=0)

    warps = -(-threads // lim.warp_size)
    limits: dict[str, int | None] = {}
    reason = ""

    limits["threads"] = lim.max_warps_per_sm // warps
    limits["blocks"] = lim.max_blocks_per_sm

    # Registers: allocated per warp in units of 256, from 4 sub-partitions.
    per_warp = _round_up(regs * lim.warp_size, lim.register_allocation_unit)
    per_block = per_warp * warps
    assumed = per_warp * _round_up(warps, lim.register_sub_partitions)  # the hardware's check
    if max(per_block, assumed) > lim.max_registers_per_block:
        limits["registers"] = 0
        reason = (
            f"{max(per_block, assumed):,} registers per block as allocated, more than the "
            f"{lim.max_registers_per_block:,} a block may use: the launch fails with "
            "'too many resources requested for launch'"
        )
    else:
        per_sub = (lim.registers_per_sm // lim.register_sub_partitions) // per_warp
        limits["registers"] = per_sub * lim.register_sub_partitions // warps

    # Shared memory: the reserved 1 KB, rounded up to the allocation unit.
    allocated = _round_up(smem + lim.reserved_shared_bytes_per_block, lim.shared_allocation_bytes)
    block_max = lim.max_shared_bytes_per_block + lim.reserved_shared_bytes_per_block
    if allocated > block_max:
        limits["shared memory"] = 0
        reason = reason or (
            f"{smem:,} B of shared memory per block, more than the "
            f"{lim.max_shared_bytes_per_block:,} B a block may use on {lim.arch}"
        )
    elif allocated == 0:
        limits["shared memory"] = None  # none used (before sm_80, nothing is reserved): no limit
    else:
        limits["shared memory"] = lim.shared_bytes_per_sm // allocated

    blocks = min(v for v in limits.values() if v is not None)
    limited_by = tuple(r for r in LIMITERS if limits[r] == blocks)
    active = blocks * warps
    return Occupancy(
        gpu=name,
        arch=lim.arch,
        threads_per_block=threads,
        registers_per_thread=regs,
        shared_bytes_per_block=smem,
        warps_per_block=warps,
        blocks_per_sm=blocks,
        active_warps_per_sm=active,
        max_warps_per_sm=lim.max_warps_per_sm,
        occupancy_fraction=active / lim.max_warps_per_sm,
        limited_by=limited_by,
        block_limits=limits,
        registers_per_block=per_block,
        shared_allocated_bytes_per_block=allocated,
        reason=reason,
    )


# --------------------------------------------------------------------------- sweep


@dataclass(frozen=True)
class OccupancySweep:
    """Occupancy of one kernel over block sizes on one GPU (``str()`` prints a table)."""

    gpu: str
    arch: str
    kernel: str
    registers_per_thread: int
    shared_bytes_per_block: int
    rows: tuple[Occupancy, ...]

    @property
    def block_sizes(self) -> tuple[int, ...]:
        return tuple(r.threads_per_block for r in self.rows)

    @property
    def best(self) -> Occupancy:
        """The smallest block size that reaches the highest occupancy."""
        top = max(r.occupancy_fraction for r in self.rows)
        return next(r for r in self.rows if r.occupancy_fraction == top)

    def __str__(self) -> str:
        shown = self.rows
        if len(shown) > 12:  # long sweeps: the powers of two, and the best
            shown = tuple(
                r
                for r in shown
                if r.threads_per_block & (r.threads_per_block - 1) == 0 or r is self.best
            )
        lines = [
            f"Theoretical occupancy of {self.kernel} on {self.gpu} ({self.arch}): "
            f"{self.registers_per_thread} registers/thread, "
            f"{self.shared_bytes_per_block:,} B shared memory/block",
            f"{'threads/block':>14}{'blocks/SM':>11}{'warps/SM':>10}{'occupancy':>11}  limited by",
        ]
        for r in shown:
            if not r.fits:
                lines.append(
                    f"{r.threads_per_block:>14}{0:>11}{0:>10}{'—':>11}  cannot launch: "
                    f"{r.limited_by[0]}"
                )
                continue
            lines.append(
                f"{r.threads_per_block:>14}{r.blocks_per_sm:>11}"
                f"{f'{r.active_warps_per_sm}/{r.max_warps_per_sm}':>10}"
                f"{f'{r.percent:.1f}%':>11}  {_and(r.limited_by)}"
            )
        best = self.best
        lines.append(
            f"Highest: {best.percent:.1f}%, first reached at {best.threads_per_block} "
            f"threads/block ({len(self.rows)} block sizes computed)."
        )
        return "\n".join(lines)


def _arch_number(arch: str) -> str:
    return "".join(ch for ch in arch if ch.isdigit())


def occupancy_sweep(
    gpu: str,
    kernel_resources: Any,
    block_sizes: tuple[int, ...] | list[int] = DEFAULT_BLOCK_SIZES,
    *,
    dynamic_shared_bytes: int = 0,
) -> OccupancySweep:
    """Occupancy of one compiled kernel at each block size: the data of the notebook's sweep plot.

    ``kernel_resources`` is a :class:`labkit.kernels.resources.KernelResources`
    (or any object with ``registers_per_thread`` and ``shared_bytes``); it
    must have been compiled for the GPU's architecture, because register
    counts differ between architectures. ``dynamic_shared_bytes`` is added to
    its static shared memory.
    """
    name, lim = gpu_limits(gpu)
    regs = kernel_resources.registers_per_thread
    static = kernel_resources.shared_bytes
    arch = getattr(kernel_resources, "arch", None)
    if isinstance(arch, str) and _arch_number(arch) != _arch_number(lim.arch):
        raise ValueError(
            f"kernel_resources was compiled for {arch} but {name} is {lim.arch}: register counts "
            f"differ between architectures; compile with arch={lim.arch!r}"
        )
    extra = check_int("dynamic_shared_bytes", dynamic_shared_bytes, minimum=0)
    sizes = check_sizes(block_sizes, "block_sizes")
    check_int("block_sizes", sizes[-1], minimum=1, maximum=lim.max_threads_per_block)
    rows = tuple(
        occupancy(
            name if name in GPUS else lim.arch,
            threads_per_block=b,
            registers_per_thread=regs,
            shared_bytes_per_block=static + extra,
        )
        for b in sizes
    )
    kernel = getattr(kernel_resources, "name", "kernel")
    fixed = FIXED_BLOCK_THREADS.get(str(kernel))
    if fixed is not None and set(sizes) != {fixed}:
        raise ValueError(
            f"block_sizes: {kernel} is compiled for {fixed} threads per block only (its "
            f"indexing assumes exactly that many; __launch_bounds__ forbids more), so other "
            f"block sizes are not valid; pass "
            f"block_sizes=({fixed},), or compare tile configurations (labkit.kernels.tuning)"
        )
    return OccupancySweep(name, lim.arch, str(kernel), int(regs), int(static) + extra, rows)
