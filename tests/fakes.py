"""Shared fakes for tests that describe a GPU machine on a machine without one."""

from __future__ import annotations

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
