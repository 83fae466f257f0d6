"""The CPU's theoretical peak FLOP/s: cores × SIMD lanes × FMA units × 2 × clock.

A measured matmul rate says what a BLAS library reaches; only a peak computed
from the hardware says how far that is from what the chip could do. The
formula is the one of Williams, Waterman and Patterson's roofline article
(peaks "from hardware specifications"): every core retires, each cycle,
``fma_units`` fused multiply-adds (2 FLOPs each) on ``simd_lanes`` numbers.

Two of its inputs cannot be read from the operating system, and this module
says so in :attr:`CpuPeak.assumptions` rather than hiding it:

- **FMA units per core.** Assumed 2 for AVX2 and AVX-512 cores (Intel
  Haswell and later server cores, AMD Zen 2 and later), 1 for older SSE
  cores. AMD Zen 4 (family 25 with AVX-512) executes a 512-bit FMA as two
  halves on its two 256-bit pipes: one 512-bit FMA per cycle, the same 32
  FP32 FLOP/cycle as AVX2. Zen 5 (family 26) has full 512-bit pipes. Some
  Intel Xeon Silver/Bronze parts have one 512-bit FMA unit, not two: the
  model name decides where it says so.
- **The clock.** The highest of ``/sys/.../cpufreq/cpuinfo_max_freq`` (the
  maximum the kernel knows) where it exists, else the "cpu MHz" line of
  ``/proc/cpuinfo`` (the current clock; in a VM often the nominal one).
  Turbo clocks are higher with few cores busy, and AVX-512 clocks can be
  lower on Intel: a measured rate above this "peak" means the clock used
  was too low, not that the library beat the hardware.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from labkit.core.results import JsonRecord
from labkit.core.validate import check_positive_int, check_real
from labkit.machine.cpu import CpuInfo, allowed_cpus, cpu_info

#: Where Linux keeps /proc/cpuinfo and the cpufreq tree; tests point these at fakes.
_PROC_CPUINFO = Path("/proc/cpuinfo")
_SYS_CPUFREQ = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")


@dataclass(frozen=True)
class CpuPeak(JsonRecord):
    """A CPU's theoretical peak, with every input and the assumptions behind them.

    ``gflop_per_s_bf16`` is None where the CPU has no bfloat16 arithmetic
    (AVX512_BF16 dot products: twice the FP32 rate; AMX tiles: 1024
    FLOP/cycle per core, Intel's figure for AMX-BF16).
    """

    model: str
    cores: int
    cores_source: str
    clock_ghz: float
    clock_source: str
    simd: str
    simd_lanes_fp32: int
    fma_units: int
    gflop_per_s_fp32: float
    gflop_per_s_fp64: float
    gflop_per_s_bf16: float | None
    assumptions: tuple[str, ...]

    @property
    def flop_per_cycle_fp32(self) -> int:
        """FP32 FLOPs one core retires per cycle: lanes × FMA units × 2."""
        return self.simd_lanes_fp32 * self.fma_units * 2

    def gflop_per_s(self, dtype: str) -> float | None:
        """The peak for "float32", "float64" or "bfloat16" (None: no such arithmetic here)."""
        return {
            "float32": self.gflop_per_s_fp32,
            "float64": self.gflop_per_s_fp64,
            "bfloat16": self.gflop_per_s_bf16,
        }.get(dtype)

    def __str__(self) -> str:
        from labkit.core.units import format_gflop_per_s

        lines = [
            f"Theoretical peak of {self.model} ({self.simd}):",
            f"  float32: {self.cores} cores × {self.simd_lanes_fp32} lanes × {self.fma_units} FMA "
            f"× 2 FLOP × {self.clock_ghz:.2f} GHz = {format_gflop_per_s(self.gflop_per_s_fp32)}",
            f"  float64: half the lanes = {format_gflop_per_s(self.gflop_per_s_fp64)}",
        ]
        if self.gflop_per_s_bf16 is not None:
            lines.append(f"  bfloat16: {format_gflop_per_s(self.gflop_per_s_bf16)}")
        lines.append(f"  cores: {self.cores_source}; clock: {self.clock_source}")
        lines += [f"  assumed: {text}" for text in self.assumptions]
        return "\n".join(lines)


def simd_lanes_fp32(features: tuple[str, ...]) -> tuple[str, int]:
    """The widest FP32 vector the CPU has, and its lanes: AVX-512F 16, AVX/AVX2 8, SSE/NEON 4."""
    present = set(features)
    if "AVX512F" in present:
        return "AVX-512", 16
    if "AVX2" in present or "AVX" in present:
        return "AVX2" if "AVX2" in present else "AVX", 8
    if "NEON" in present:
        return "NEON", 4
    return "SSE", 4


def amd_family(text: str | None = None) -> int | None:
    """The "cpu family" of /proc/cpuinfo for an AMD CPU (25: Zen 3/4, 26: Zen 5), else None."""
    if text is None:
        try:
            text = _PROC_CPUINFO.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
    if "AuthenticAMD" not in text:
        return None
    match = re.search(r"^cpu family\s*:\s*(\d+)", text, flags=re.MULTILINE)
    return int(match.group(1)) if match else None


def fma_units(
    info: CpuInfo, simd: str, family: int | None = None
) -> tuple[int, int, tuple[str, ...]]:
    """(FMA units per core, FP32 lanes each, the assumption) for ``info``; see the module text."""
    model = info.model.lower()
    lanes = simd_lanes_fp32(info.simd_features)[1]
    is_amd = "amd" in model or "epyc" in model or "ryzen" in model or family is not None
    if simd == "AVX-512" and is_amd:
        if family is not None and family >= 26:
            return 2, lanes, ("Zen 5: two full 512-bit FMA pipes per core",)
        return (
            1,
            lanes,
            (
                "AMD with AVX-512 taken as Zen 4: a 512-bit FMA runs as two halves on two "
                "256-bit pipes, one 512-bit FMA per cycle (Zen 5 has two)",
            ),
        )
    if simd == "AVX-512" and ("silver" in model or "bronze" in model):
        return 1, lanes, ("Xeon Silver/Bronze: one 512-bit FMA unit per core",)
    if simd in ("AVX-512", "AVX2"):
        return (
            2,
            lanes,
            (f"2 FMA units per core, usual for {simd} cores (not readable from the OS)",),
        )
    if simd == "NEON":
        return 2, lanes, ("2 NEON FMA pipes per core (Neoverse N1; Apple M-class and V1 have 4)",)
    return 1, lanes, (f"1 {simd} multiply-add per cycle per core (no FMA3)",)


def read_clock_ghz(
    cpuinfo_text: str | None = None, max_freq_khz: str | None = None
) -> tuple[float | None, str]:
    """The clock to use and where it came from: cpufreq's maximum, else /proc/cpuinfo "cpu MHz"."""
    if max_freq_khz is None:
        try:
            max_freq_khz = _SYS_CPUFREQ.read_text(encoding="utf-8")
        except OSError:
            max_freq_khz = ""
    if max_freq_khz.strip().isdigit() and int(max_freq_khz) > 0:
        return int(max_freq_khz) / 1e6, "cpufreq cpuinfo_max_freq (maximum the kernel knows)"
    if cpuinfo_text is None:
        try:
            cpuinfo_text = _PROC_CPUINFO.read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo_text = ""
    mhz = [float(v) for v in re.findall(r"^cpu MHz\s*:\s*([\d.]+)", cpuinfo_text, re.MULTILINE)]
    if mhz and max(mhz) > 0:
        return max(mhz) / 1e3, '/proc/cpuinfo "cpu MHz" (current clock; no cpufreq maximum here)'
    return None, "unknown"


def usable_cores(info: CpuInfo) -> tuple[int, str]:
    """Cores a run here may use: physical cores within the affinity, capped by the profile's threads.

    The peak must count the cores the measured matmul ran on: under the
    reference profile torch runs 2 threads, so a 64-core server's peak for
    that run is 2 cores' worth, while 2 threads on 1 core get 1 core's.
    Hyper-threads share a core's FMA units and add nothing to the peak.
    """
    from labkit.machine import profile as _profile

    affinity = allowed_cpus()
    allowed = len(affinity) if affinity is not None else info.logical_cores or 1
    physical = info.physical_cores or allowed
    cores = max(1, min(allowed, physical))
    source = "physical cores this process may use"
    active = _profile.active()
    if active is not None and active.threads < cores:
        return active.threads, f"the {active.name} profile's {active.threads} threads"
    return cores, source


def cpu_peak(
    info: CpuInfo | None = None,
    *,
    cores: int | None = None,
    clock_ghz: float | None = None,
    family: int | None = None,
) -> CpuPeak:
    """This CPU's theoretical peak FP32/FP64 (and bfloat16) GFLOP/s, inputs and assumptions stated.

    Args:
        info: the CPU (default :func:`labkit.machine.cpu.cpu_info`); tests pass fakes.
        cores: override the core count (default :func:`usable_cores`).
        clock_ghz: override the clock (default :func:`read_clock_ghz`; 2.0 GHz, said so,
            where neither source exists).
        family: AMD "cpu family" (default read from /proc/cpuinfo when ``info`` is None).
    """
    given_info = info is not None
    info = cpu_info() if info is None else info
    if cores is None:
        n_cores, cores_source = usable_cores(info)
    else:
        n_cores, cores_source = check_positive_int("cores", cores), "given"
    assumptions: list[str] = []
    if clock_ghz is None:
        clock, clock_source = read_clock_ghz()
        if clock is None:
            clock, clock_source = 2.0, "unknown: 2.0 GHz assumed"
    else:
        clock = check_real("clock_ghz", clock_ghz, low=0, low_open=True)
        clock_source = "given"
    assumptions.append(
        "turbo clocks with few cores busy are higher, AVX-512 clocks on Intel can be lower"
    )
    if family is None and not given_info:
        family = amd_family()
    simd, lanes = simd_lanes_fp32(info.simd_features)
    units, lanes, fma_note = fma_units(info, simd, family)
    assumptions.extend(fma_note)
    fp32 = n_cores * lanes * units * 2 * clock
    features = set(info.simd_features)
    bf16: float | None = None
    if "AMX" in features:
        bf16 = n_cores * 1024 * clock
        assumptions.append("AMX-BF16: 1024 FLOP/cycle per core (one TMUL tile multiply)")
    elif "AVX512_BF16" in features:
        bf16 = 2 * fp32
        assumptions.append("AVX512_BF16 dot products: twice the FP32 rate")
    return CpuPeak(
        model=info.model,
        cores=n_cores,
        cores_source=cores_source,
        clock_ghz=clock,
        clock_source=clock_source,
        simd=simd,
        simd_lanes_fp32=lanes,
        fma_units=units,
        gflop_per_s_fp32=fp32,
        gflop_per_s_fp64=fp32 / 2,
        gflop_per_s_bf16=bf16,
        assumptions=tuple(assumptions),
    )


__all__ = ["CpuPeak", "amd_family", "cpu_peak", "read_clock_ghz", "simd_lanes_fp32", "usable_cores"]
