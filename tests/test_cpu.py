"""CPU facts: the SIMD name mappings for each source, cache parsing, and a live probe."""

from __future__ import annotations

import platform

import pytest

from labkit.machine import cpu
from labkit.machine.cpu import (
    CpuInfo,
    cpu_info,
    parse_cache_size,
    simd_from_flags,
    simd_from_numpy,
    simd_from_sysctl,
)

KNOWN_NAMES = {
    "SSE4.2",
    "AVX",
    "AVX2",
    "FMA3",
    "AVX512F",
    "AVX512_VNNI",
    "AVX512_BF16",
    "AVX512_FP16",
    "AMX",
    "NEON",
    "BF16",
    "SVE",
    "SVE2",
    "SME",
}


def test_x86_flags_from_proc_cpuinfo():
    flags = (
        "fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 avx512f avx512dq avx512_bf16 "
        "avx512_vnni amx_bf16 amx_tile amx_int8 avx512_fp16"
    ).split()
    assert simd_from_flags(flags) == (
        "SSE4.2",
        "AVX",
        "AVX2",
        "FMA3",
        "AVX512F",
        "AVX512_VNNI",
        "AVX512_BF16",
        "AVX512_FP16",
        "AMX",
    )


def test_laptop_without_avx512():
    assert simd_from_flags("sse4_2 avx avx2 fma".split()) == ("SSE4.2", "AVX", "AVX2", "FMA3")


def test_arm_features_from_proc_cpuinfo():
    # Linux on Arm lists "Features", e.g. on a Graviton3 / Grace
    features = (
        "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics asimddp sve sve2 bf16 i8mm".split()
    )
    assert simd_from_flags(features) == ("NEON", "BF16", "SVE", "SVE2")


def test_apple_silicon_sysctl():
    values = {
        "hw.optional.AdvSIMD": "1",
        "hw.optional.arm.FEAT_BF16": "1",
        "hw.optional.arm.FEAT_SME": "0",
        "hw.optional.avx2_0": "0",
    }
    assert simd_from_sysctl(values) == ("NEON", "BF16")


def test_intel_mac_sysctl():
    values = {
        "hw.optional.sse4_2": "1",
        "hw.optional.avx1_0": "1",
        "hw.optional.avx2_0": "1",
        "hw.optional.fma": "1",
    }
    assert simd_from_sysctl(values) == ("SSE4.2", "AVX", "AVX2", "FMA3")


def test_numpy_feature_table():
    features = {
        "SSE42": True,
        "AVX": True,
        "AVX2": True,
        "FMA3": True,
        "AVX512F": False,
        "ASIMD": False,
    }
    assert simd_from_numpy(features) == ("SSE4.2", "AVX", "AVX2", "FMA3")
    assert simd_from_numpy({"ASIMD": True, "SVE": True}) == ("NEON", "SVE")


def test_numpy_fallback_runs_on_this_machine():
    names = cpu._numpy_simd()
    assert names is not None
    assert set(names) <= KNOWN_NAMES


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("48K", 48 * 1024),
        ("2048K\n", 2 * 1024**2),
        ("105M", 105 * 1024**2),
        ("1G", 1024**3),
        ("512", 512),
        ("2GiB", 2 * 1024**3),
        ("", None),
        ("big", None),
        ("0K", None),
    ],
)
def test_parse_cache_size(text, expected):
    assert parse_cache_size(text) == expected


def test_cpuinfo_fields_keep_first_processor():
    text = "processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t\t: sse4_2 avx\n\nprocessor\t: 1\nmodel name\t: other\n"
    fields = cpu._cpuinfo_fields(text)
    assert fields["model name"] == "Test CPU 9000"
    assert fields["flags"] == "sse4_2 avx"


def test_cpu_info_on_this_machine():
    info = cpu_info()
    assert isinstance(info, CpuInfo)
    assert info.model
    assert info.architecture == (platform.machine() or "unknown")
    assert info.logical_cores is None or info.logical_cores >= 1
    if info.physical_cores and info.logical_cores:
        assert info.physical_cores <= info.logical_cores
    assert set(info.simd_features) <= KNOWN_NAMES
    assert info.simd_source in {"/proc/cpuinfo", "sysctl", "numpy", "unavailable"}
    if info.memory_total_bytes is not None:
        assert 0 < info.memory_available_bytes <= info.memory_total_bytes
    for size in (info.l1d_cache_bytes, info.l2_cache_bytes, info.l3_cache_bytes):
        assert size is None or size > 0


def test_cpu_info_is_frozen():
    info = cpu_info()
    with pytest.raises(AttributeError):
        info.model = "x"  # type: ignore[misc]
