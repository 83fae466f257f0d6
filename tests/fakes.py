"""Shared fakes for tests that describe a GPU machine on a machine without one."""

from __future__ import annotations

from pathlib import Path

from labkit.machine.nvidia import DriverGpu

H100_UUID = "a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf"

#: An H100 SXM as the driver API reports it (2619 MHz × 5120-bit HBM3 → 3352 GB/s).
H100 = DriverGpu(
    index=0,
    name="NVIDIA H100 80GB HBM3",
    uuid=H100_UUID,
    compute_capability="9.0",
    sm_count=132,
    memory_bytes=85520809984,
    memory_clock_khz=2_619_000,
    memory_bus_width_bits=5120,
    l2_cache_bytes=50 * 1024**2,
    bandwidth_gb_per_s=3352.32,
)


def fake_cache_sysfs(root: Path, groups: dict[int, str], l3: str = "32768K") -> None:
    """A /sys/devices/system/cpu tree: CPUs with private L1/L2 and an L3 shared by each group.

    ``groups`` maps each CPU number to its L3's ``shared_cpu_list`` ("0-3", "4-7", ...).
    Point :data:`labkit.machine.cpu._SYS_CPU` at ``root`` to use it.
    """
    for n, shared in groups.items():
        for index, (level, kind, size) in enumerate(
            [
                ("1", "Data", "32K"),
                ("1", "Instruction", "32K"),
                ("2", "Unified", "1024K"),
                ("3", "Unified", l3),
            ]
        ):
            folder = root / f"cpu{n}" / "cache" / f"index{index}"
            folder.mkdir(parents=True)
            for name, text in (
                ("level", level),
                ("type", kind),
                ("size", size),
                ("shared_cpu_list", shared if level == "3" else str(n)),
            ):
                (folder / name).write_text(text + "\n")
