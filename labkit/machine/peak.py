"""The CPU's theoretical peak FLOP/s: cores × SIMD lanes × FMA units × 2 × clock.

A measured matmul rate says what a BLAS library reaches; only a peak computed
from the hardware says how far that is from what the chip could do. The
formula is the one of Williams, Waterman and Patterson's roofline article
(peaks "from hardware specifications"): every core retires, each cycle,
``fma_units`` fused multiply-adds (2 FLOPs each) on ``simd_lanes`` numbers.

Two of its inputs cannot be read from the operating system, and this module
says so in :attr:`CpuPeak.assumptions` rather than hiding it:

- **FMA units per core.** Keyed on the vendor, the AMD family/model and the
  model name, documented cases only; anything else is *assumed* and the
  assumption says the peak may be off by 2×:

  - AMD Zen 1/Zen+ (family 23, model < 0x30): AVX2 on two 128-bit FMA pipes,
    one 256-bit FMA per cycle (1 unit of 8 lanes). Zen 2/Zen 3: 2 × 256-bit.
  - AMD Zen 4 (family 25 with AVX-512): 256-bit FMA hardware, a throughput
    of one 512-bit FMA per cycle (numberworld.org's Zen 4/Zen 5 AVX-512
    teardown; write-ups differ on how the 256-bit units split the work, so
    only the throughput is stated).
  - AMD Zen 5 (family 26): two full 512-bit pipes on desktop and server
    parts (Ryzen 9000 "Granite Ridge", EPYC "Turin"); mobile Zen 5 ("Ryzen
    AI", Strix Point, family 26 model 0x20) has reduced vector pipelines
    (chipsandcheese.com/2024/08/10/amds-strix-point-zen-5-hits-mobile), so
    every other family-26 part is taken as Zen 4-like (1 × 512-bit).
  - Intel AVX-512 server cores: two 512-bit FMA units on Xeon Platinum and
    Gold 6xxx; one on Skylake/Cascade Lake Gold 5xxx except the 5122 and
    5222 (John McCalpin, Intel forums, "Calculate the Max Flops on
    Skylake": "The Gold 5000 processors have one AVX512 unit (except for the
    Gold 5122...)"), and on Silver and Bronze 41xx/42xx/31xx/32xx.
  - Intel client AVX-512 cores (Core i3/i5/i7/i9 of Ice Lake, Tiger Lake,
    Rocket Lake; not the Core-X "…X"/"…XE" parts): one 512-bit FMA per cycle.
  - Intel AVX2 cores (Haswell and later): 2 × 256-bit.
- **The clock.** The highest of ``/sys/.../cpufreq/cpuinfo_max_freq`` (the
  maximum the kernel knows: with intel_pstate/amd-pstate, the single-core
  *boost* clock, so the peak is then an upper bound for all-core and
  AVX-512 work) where it exists, else the "cpu MHz" line of
  ``/proc/cpuinfo`` (a measured current clock where the kernel reads the
  APERF/MPERF counters, else the cpufreq or nominal TSC clock, as in a VM
  that hides those counters: then below the boost clock, so a measured rate
  can exceed the "peak"). The printed
  assumption says which of the two applies.
- **bfloat16.** AVX512_BF16 taken as twice the FP32 rate (VDPBF16PS does two
  multiply-adds per FP32 lane) and AMX-BF16 as 1024 FLOP/cycle per core;
  both are per-microarchitecture throughputs not read from the OS and not
  verified for every CPU, and the assumption says so.
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
_SYS_CPU = Path("/sys/devices/system/cpu")


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


def _cpuinfo_text() -> str | None:
    """/proc/cpuinfo's text, or None where there is none (macOS, Windows, a sandbox)."""
    try:
        return _PROC_CPUINFO.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _amd_field(field: str, text: str | None) -> int | None:
    """An integer field of /proc/cpuinfo ("cpu family", "model") for an AMD CPU, else None."""
    if text is None:
        text = _cpuinfo_text()
    if text is None or "AuthenticAMD" not in text:
        return None
    match = re.search(rf"^{field}\s*:\s*(\d+)", text, flags=re.MULTILINE)
    return int(match.group(1)) if match else None


def amd_family(text: str | None = None) -> int | None:
    """The "cpu family" of /proc/cpuinfo for an AMD CPU (25: Zen 3/4, 26: Zen 5), else None."""
    return _amd_field("cpu family", text)


def amd_model(text: str | None = None) -> int | None:
    """The "model" number of /proc/cpuinfo for an AMD CPU (Zen 1/Zen+ are family 23, < 0x30)."""
    return _amd_field("model", text)


#: The Arm assumption. Neoverse N1 has two FP/ASIMD pipes (V0, V1: LLVM's N1 scheduling
#: model, llvm/lib/Target/AArch64/AArch64SchedNeoverseN1.td, from Arm's N1 Software
#: Optimization Guide); Cortex-A53 has one FP multiply/FMA unit (AArch64SchedA53.td,
#: A53UnitFPMDS); NVIDIA's Grace "can perform 16 FP64 FMA operations per cycle"
#: (nvidia.github.io/grace-cpu-benchmarking-guide/foundations/FMA/), more than N1's 2 × 2.
_NEON_NOTE = (
    "2 × 128-bit NEON FMA pipes per core taken (as on Neoverse N1); other Arm cores have "
    "more (NVIDIA's Grace) or fewer (the small in-order Cortex-A53)"
)

#: Said after every FMA count the OS cannot confirm.
_MAY_BE_OFF = "the FMA count is assumed, not read from the OS, and the peak may be off by 2×"


def fma_units(
    info: CpuInfo, simd: str, family: int | None = None, model_number: int | None = None
) -> tuple[int, int, tuple[str, ...]]:
    """(FMA units per core, FP32 lanes each, the assumption) for ``info``; see the module text.

    Only documented cases get a plain statement; every other CPU gets the
    usual count and an assumption saying the peak may be off by 2×, because
    a wrong unit count doubles or halves the peak and nothing here can
    measure it.
    """
    model = info.model.lower()
    lanes = simd_lanes_fp32(info.simd_features)[1]
    is_amd = "amd" in model or "epyc" in model or "ryzen" in model or family is not None
    if is_amd and simd in ("AVX-512", "AVX2"):
        return _amd_fma(model, simd, lanes, family, model_number)
    if simd == "AVX-512":
        return _intel_avx512_fma(model, lanes)
    if simd == "AVX2":
        return (
            2,
            lanes,
            (
                f"Intel AVX2 core taken as two 256-bit FMA units (Haswell and later big cores; Atom-class E-cores have fewer); {_MAY_BE_OFF}",
            ),
        )
    if simd == "NEON":
        return (
            2,
            lanes,
            (f"{_NEON_NOTE}; {_MAY_BE_OFF}",),
        )
    return 1, lanes, (f"1 {simd} multiply-add per cycle per core (no FMA3)",)


def _amd_fma(
    model: str, simd: str, lanes: int, family: int | None, model_number: int | None
) -> tuple[int, int, tuple[str, ...]]:
    """The FMA count of an AMD AVX2/AVX-512 core by family, model and name (module text)."""
    if simd == "AVX2":
        if family == 23 and model_number is not None and model_number < 0x30:
            return (
                1,
                lanes,
                ("Zen 1/Zen+: AVX2 on two 128-bit FMA pipes, one 256-bit FMA per cycle",),
            )
        if family in (23, 25) and model_number is not None:
            return 2, lanes, ("Zen 2/Zen 3: two 256-bit FMA pipes per core",)
        return (
            2,
            lanes,
            (f"AMD AVX2 core taken as Zen 2 or later (two 256-bit FMA pipes); {_MAY_BE_OFF}",),
        )
    if family is not None and family >= 26:
        desktop = re.search(r"ryzen [3579] 9\d{3}", model) is not None and "ryzen ai" not in model
        if "epyc" in model or desktop:
            return 2, lanes, ("Zen 5 desktop/server: two full 512-bit FMA pipes per core",)
        return (
            1,
            lanes,
            (
                "Zen 5 taken as mobile-like (not EPYC or desktop Ryzen 9000): one 512-bit FMA "
                f"per cycle, as on Zen 4; {_MAY_BE_OFF}",
            ),
        )
    if family == 25:
        return (
            1,
            lanes,
            ("Zen 4: 256-bit FMA hardware, a throughput of one 512-bit FMA per cycle",),
        )
    return (
        1,
        lanes,
        (f"AMD with AVX-512 taken as Zen 4 (one 512-bit FMA per cycle); {_MAY_BE_OFF}",),
    )


def _intel_avx512_fma(model: str, lanes: int) -> tuple[int, int, tuple[str, ...]]:
    """The 512-bit FMA count of an Intel AVX-512 core by model name (module text)."""
    gold = re.search(r"gold\s+(5)(\d)(\d\d)", model)
    if gold:
        generation, sku = gold.group(2), gold.group(0).split()[-1]
        if generation in ("1", "2"):
            if sku in ("5122", "5222"):
                return 2, lanes, (f"Xeon Gold {sku}: two 512-bit FMA units (the exception)",)
            return 1, lanes, ("Skylake/Cascade Lake Xeon Gold 5xxx: one 512-bit FMA unit",)
    if re.search(r"(silver\s+4[12]\d\d|bronze\s+3[12]\d\d)", model):
        return 1, lanes, ("Skylake/Cascade Lake Xeon Silver/Bronze: one 512-bit FMA unit",)
    if re.search(r"(platinum|gold\s+6\d{3})", model):
        return 2, lanes, ("Xeon Platinum/Gold 6xxx: two 512-bit FMA units per core",)
    if re.search(r"core\(tm\)|\bcore\b", model) and not re.search(r"\d+x[e]?\b", model):
        return 1, lanes, ("Intel client AVX-512 core: one 512-bit FMA per cycle",)
    return (
        2,
        lanes,
        (f"Intel AVX-512 core taken as having two 512-bit FMA units; {_MAY_BE_OFF}",),
    )


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
        cpuinfo_text = _cpuinfo_text() or ""
    mhz = [float(v) for v in re.findall(r"^cpu MHz\s*:\s*([\d.]+)", cpuinfo_text, re.MULTILINE)]
    if mhz and max(mhz) > 0:
        return max(mhz) / 1e3, '/proc/cpuinfo "cpu MHz" (no cpufreq maximum here)'
    return None, "unknown"


def clock_caveat(clock_source: str) -> str:
    """What the clock used means for the peak, by where it came from (one of three sentences)."""
    if clock_source.startswith("cpufreq"):
        return (
            "the clock is cpufreq's maximum: usually the highest boost clock (then all-core and "
            "AVX-512 clocks are lower and this peak is an upper bound), but with some drivers "
            "(acpi-cpufreq without CPPC) the base clock (then a measured rate can exceed it)"
        )
    if clock_source.startswith("/proc"):
        return (
            'the clock is /proc/cpuinfo\'s "cpu MHz": by kernel version and by what the CPU '
            "or hypervisor exposes, a recent clock measured from the APERF/MPERF counters, "
            "the cpufreq driver's current clock, or the nominal (TSC) clock "
            "(Linux arch/x86/kernel/cpu/proc.c); boost clocks can be higher "
            "(then a measured rate can exceed this peak), AVX-512 clocks on Intel lower"
        )
    return "the clock was given or guessed, not read from the hardware: the peak scales with it"


def usable_cores(info: CpuInfo) -> tuple[int, str]:
    """Cores a run here may use: physical cores within the affinity, capped by the profile's threads.

    The peak must count the cores the measured matmul ran on: under the
    reference profile torch runs 2 threads, so a 64-core server's peak for
    that run is 2 cores' worth, while 2 threads on 1 core get 1 core's.
    Hyper-threads share a core's FMA units and add nothing to the peak, so
    the CPUs of the affinity are counted as distinct (package, core) pairs
    from sysfs. That is the topology the OS shows: in a virtual machine it
    is whatever the hypervisor presents, so two vCPUs that share one host
    core can appear as two cores and count twice (:func:`cpu_peak` then says
    so, from the ``hypervisor`` flag of /proc/cpuinfo). Without a profile (a student's ``make lab``) every such core
    counts. Where torch is already imported, its thread count caps the
    result too: the matmul ran on that many threads.
    """
    from labkit.machine import profile as _profile

    affinity = allowed_cpus()
    allowed = len(affinity) if affinity is not None else info.logical_cores or 1
    physical = info.physical_cores or allowed
    distinct = distinct_physical_cores(affinity) if affinity is not None else None
    cores = max(1, min(allowed, physical) if distinct is None else min(distinct, physical))
    source = "distinct cores the OS shows this process (hyper-thread siblings count once)"
    if distinct is not None and distinct < allowed:
        source += f" ({allowed} CPUs in the affinity are {distinct} cores: hyper-threads)"
    active = _profile.active()
    if active is not None and active.threads < cores:
        cores, source = active.threads, f"the {active.name} profile's {active.threads} threads"
    threads = _torch_threads()
    if threads is not None and threads < cores:
        # the measured matmul runs on torch's threads: a peak for more cores than that
        # would make every share of it too low
        return threads, f"torch's {threads} threads (fewer than the {cores} cores)"
    return cores, source


def distinct_physical_cores(cpus: set[int], root: Path | None = None) -> int | None:
    """How many distinct (package, core) pairs ``cpus`` cover (Linux sysfs; else None).

    Two hyper-thread siblings of one core share its FMA units, so they count once.
    """
    base = _SYS_CPU if root is None else root
    seen: set[tuple[str, str]] = set()
    for cpu in cpus:
        topology = base / f"cpu{cpu}" / "topology"
        try:
            package = (topology / "physical_package_id").read_text(encoding="utf-8").strip()
            core = (topology / "core_id").read_text(encoding="utf-8").strip()
        except OSError:
            return None
        seen.add((package, core))
    return len(seen) or None


def _torch_threads() -> int | None:
    """torch's intra-op threads where torch is already imported (never imports it)."""
    import sys

    torch = sys.modules.get("torch")
    try:
        return int(torch.get_num_threads()) if torch is not None else None
    except Exception:  # a stub or a half-imported torch
        return None


def in_virtual_machine(cpuinfo_text: str | None = None) -> bool | None:
    """Whether /proc/cpuinfo's flags include ``hypervisor`` (x86 guests); None where unknown.

    The x86 CPUID "hypervisor present" bit, which Linux shows as that flag;
    Arm and macOS report nothing comparable here, so they get None.
    """
    if cpuinfo_text is None:
        cpuinfo_text = _cpuinfo_text()
    if cpuinfo_text is None:
        return None
    flags = re.search(r"^flags\s*:(.*)$", cpuinfo_text, flags=re.MULTILINE)
    if flags is None:
        return None
    return "hypervisor" in flags.group(1).split()


#: Added to the assumptions in a virtual machine (cores counted, not given).
VM_TOPOLOGY_NOTE = (
    "this is a virtual machine (the hypervisor flag is set): the cores are the topology the "
    "hypervisor presents, so two vCPUs on one physical core may count as two and double the peak"
)


def cpu_peak(
    info: CpuInfo | None = None,
    *,
    cores: int | None = None,
    clock_ghz: float | None = None,
    family: int | None = None,
    model_number: int | None = None,
    virtual_machine: bool | None = None,
) -> CpuPeak:
    """This CPU's theoretical peak FP32/FP64 (and bfloat16) GFLOP/s, inputs and assumptions stated.

    Args:
        info: the CPU (default :func:`labkit.machine.cpu.cpu_info`); tests pass fakes.
        cores: override the core count (default :func:`usable_cores`).
        clock_ghz: override the clock (default :func:`read_clock_ghz`; 2.0 GHz, said so,
            where neither source exists).
        family: AMD "cpu family" (default read from /proc/cpuinfo when ``info`` is None).
        model_number: AMD "model" (same default): tells Zen 1/Zen+ from Zen 2 in family 23.
        virtual_machine: whether this runs in a VM (default :func:`in_virtual_machine`
            when ``info`` is None); where it does and the cores were counted, the
            assumptions say the hypervisor's topology may count a core twice.
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
    assumptions.append(clock_caveat(clock_source))
    if virtual_machine is None and not given_info:
        virtual_machine = in_virtual_machine()
    if virtual_machine and cores is None:
        assumptions.append(VM_TOPOLOGY_NOTE)
    if family is None and not given_info:
        family = amd_family()
    if model_number is None and not given_info:
        model_number = amd_model()
    simd, lanes = simd_lanes_fp32(info.simd_features)
    units, lanes, fma_note = fma_units(info, simd, family, model_number)
    assumptions.extend(fma_note)
    fp32 = n_cores * lanes * units * 2 * clock
    features = set(info.simd_features)
    bf16: float | None = None
    if "AMX" in features:
        bf16 = n_cores * 1024 * clock
        assumptions.append(
            "AMX-BF16: 1024 FLOP/cycle per core (one TMUL tile multiply; Intel's figure, "
            "not verified on this CPU)"
        )
    elif "AVX512_BF16" in features:
        bf16 = 2 * fp32
        assumptions.append(
            "AVX512_BF16 dot products: twice the FP32 rate (a per-microarchitecture "
            "throughput, not verified on this CPU)"
        )
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


__all__ = [
    "CpuPeak",
    "amd_family",
    "amd_model",
    "clock_caveat",
    "cpu_peak",
    "fma_units",
    "in_virtual_machine",
    "read_clock_ghz",
    "simd_lanes_fp32",
    "usable_cores",
]
