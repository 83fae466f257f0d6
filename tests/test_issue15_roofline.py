"""Issue 15: the CPU's theoretical peak (labkit.machine.peak) and the roofline's new pieces."""

from __future__ import annotations

import dataclasses

import pytest

from labkit.machine import peak as peak_module
from labkit.machine.cpu import CpuInfo
from labkit.machine.peak import CpuPeak, amd_family, cpu_peak, read_clock_ghz, simd_lanes_fp32


def fake_cpu(model: str, simd: tuple[str, ...], cores: int = 4) -> CpuInfo:
    return CpuInfo(
        model=model,
        architecture="x86_64",
        physical_cores=cores,
        logical_cores=cores * 2,
        simd_features=simd,
        simd_source="test",
        memory_total_bytes=None,
        memory_available_bytes=None,
        l1d_cache_bytes=None,
        l2_cache_bytes=None,
        l3_cache_bytes=None,
    )


AVX2 = ("SSE4.2", "AVX", "AVX2", "FMA3")
AVX512 = (*AVX2, "AVX512F")


def test_simd_lanes() -> None:
    assert simd_lanes_fp32(AVX512) == ("AVX-512", 16)
    assert simd_lanes_fp32(AVX2) == ("AVX2", 8)
    assert simd_lanes_fp32(("NEON",)) == ("NEON", 4)
    assert simd_lanes_fp32(("SSE4.2",)) == ("SSE", 4)


def test_intel_avx512_server_core() -> None:
    info = fake_cpu("Intel(R) Xeon(R) Platinum 8480+", (*AVX512, "AVX512_BF16", "AMX"), cores=2)
    p = cpu_peak(info, cores=2, clock_ghz=2.0)
    assert (p.simd_lanes_fp32, p.fma_units) == (16, 2)
    assert p.gflop_per_s_fp32 == pytest.approx(2 * 16 * 2 * 2 * 2.0)  # 256
    assert p.gflop_per_s_fp64 == pytest.approx(128)
    assert p.gflop_per_s_bf16 == pytest.approx(2 * 1024 * 2.0)  # AMX tiles
    assert p.flop_per_cycle_fp32 == 64
    text = str(p)
    assert "2 cores × 16 lanes × 2 FMA × 2 FLOP × 2.00 GHz = 256 GFLOP/s" in text
    assert any("clock was given" in a for a in p.assumptions)


def test_xeon_silver_has_one_fma_unit() -> None:
    p = cpu_peak(fake_cpu("Intel(R) Xeon(R) Silver 4214", AVX512), cores=1, clock_ghz=1.0)
    assert p.fma_units == 1
    assert p.gflop_per_s_fp32 == pytest.approx(32)


def test_amd_zen4_avx512_is_double_pumped() -> None:
    info = fake_cpu("AMD EPYC 9654 96-Core Processor", (*AVX512, "AVX512_BF16"))
    zen4 = cpu_peak(info, cores=1, clock_ghz=1.0, family=25)
    assert zen4.flop_per_cycle_fp32 == 32  # the same as AVX2 with two 256-bit FMA pipes
    assert zen4.gflop_per_s_bf16 == pytest.approx(64)
    assert any("Zen 4" in a for a in zen4.assumptions)
    zen5 = cpu_peak(info, cores=1, clock_ghz=1.0, family=26)
    assert zen5.flop_per_cycle_fp32 == 64


def test_avx2_laptop_and_no_bf16() -> None:
    p = cpu_peak(fake_cpu("Intel(R) Core(TM) i7-8550U", AVX2), cores=4, clock_ghz=1.8)
    assert p.flop_per_cycle_fp32 == 32
    assert p.gflop_per_s_fp32 == pytest.approx(4 * 32 * 1.8)
    assert p.gflop_per_s_bf16 is None
    assert p.gflop_per_s("bfloat16") is None
    assert p.gflop_per_s("float64") == pytest.approx(p.gflop_per_s_fp32 / 2)
    assert "bfloat16" not in str(p)


def test_result_is_a_frozen_json_record() -> None:
    p = cpu_peak(fake_cpu("x", AVX2), cores=1, clock_ghz=1.0)
    assert isinstance(p, CpuPeak)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.cores = 3  # type: ignore[misc]
    data = p.to_dict()
    assert data["gflop_per_s_fp32"] == pytest.approx(32)
    assert isinstance(data["assumptions"], list)


def test_clock_sources() -> None:
    assert read_clock_ghz("", "3700000") == (3.7, read_clock_ghz("", "3700000")[1])
    assert "cpufreq" in read_clock_ghz("", "3700000")[1]
    ghz, source = read_clock_ghz("cpu MHz\t\t: 2596.150\ncpu MHz\t: 2400.0\n", "")
    assert ghz == pytest.approx(2.59615)
    assert "cpu MHz" in source
    assert read_clock_ghz("no clock here", "") == (None, "unknown")


def test_amd_family() -> None:
    text = "vendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t: 17\n"
    assert amd_family(text) == 25
    assert amd_family("vendor_id\t: GenuineIntel\ncpu family\t: 6\n") is None


def test_cores_follow_the_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    info = fake_cpu("x", AVX2, cores=64)
    monkeypatch.setattr(peak_module, "allowed_cpus", lambda: set(range(128)))
    monkeypatch.setattr(peak_module, "distinct_physical_cores", lambda cpus: None)
    monkeypatch.setattr(peak_module, "_torch_threads", lambda: None)
    monkeypatch.delenv("LABKIT_PROFILE", raising=False)
    assert peak_module.usable_cores(info)[0] == 64  # physical, not hyper-threads
    monkeypatch.setenv("LABKIT_PROFILE", "reference")
    cores, source = peak_module.usable_cores(info)
    assert cores == 2 and "profile" in source
    monkeypatch.setattr(peak_module, "allowed_cpus", lambda: {0})
    assert peak_module.usable_cores(info)[0] == 1  # 2 threads on one CPU: one core's peak


def test_bad_overrides() -> None:
    info = fake_cpu("x", AVX2)
    with pytest.raises((TypeError, ValueError)):
        cpu_peak(info, cores=0)
    with pytest.raises((TypeError, ValueError)):
        cpu_peak(info, clock_ghz=-1.0)


# --------------------------------------------------------------------------- the roofline's new pieces

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from labkit.check.roofline import intensity_exercise_op, roofline_intensity  # noqa: E402
from labkit.roofline import measure as roofline_measure  # noqa: E402
from labkit.roofline import plots  # noqa: E402
from labkit.roofline.model import (  # noqa: E402
    COMPUTE_BOUND,
    MEMORY_BOUND,
    NEAR_RIDGE,
    Roofline,
    add_cost,
    conv2d_cost,
    matmul_cost,
)
from labkit.roofline.published import published_ridges  # noqa: E402


def _roof(theory: bool = True) -> Roofline:
    return Roofline(
        device="cpu",
        peak_gflop_per_s={"float32": 100.0, "bfloat16": 300.0},
        peak_gb_per_s=20.0,
        theoretical_gflop_per_s={"float32": 200.0} if theory else {},
        theoretical_source="test",
        ceiling_kind="achieved BLAS ceiling",
    )


def test_roofline_prints_the_ceiling_beside_the_theoretical_peak() -> None:
    text = str(_roof())
    assert "float32: achieved BLAS ceiling 100 GFLOP/s, ridge point 5.00 FLOP/byte" in text
    assert "theoretical peak 200 GFLOP/s, ridge 10.0 FLOP/byte (the ceiling is 50% of it)" in text
    assert "bfloat16: achieved BLAS ceiling 300 GFLOP/s, ridge point 15.0 FLOP/byte\n" in text
    assert _roof().theoretical("bfloat16") is None
    # a Roofline built the old way (labkit bench roofline) still works
    plain = Roofline("cpu", {"float32": 100.0}, 20.0)
    assert "compute roof 100 GFLOP/s" in str(plain) and "theoretical" not in str(plain)


def test_verdict_has_a_margin_and_uses_the_theoretical_ridge() -> None:
    roof = _roof()
    assert roof.verdict_ridge("float32") == 10.0  # 200 / 20, not the ceiling's 5
    assert roof.verdict_ridge("bfloat16") == 15.0  # no theoretical peak: the ceiling's
    assert roof.verdict(add_cost(10**6)) == MEMORY_BOUND  # 0.083 × 4 < 10
    assert roof.verdict(matmul_cost(1024, 1024, 1024)) == COMPUTE_BOUND  # 171 > 40
    assert roof.verdict(matmul_cost(8, 8192, 16384)) == NEAR_RIDGE  # 4.0 FLOP/byte
    assert roof.verdict(matmul_cost(8, 8192, 16384), margin=1) == MEMORY_BOUND
    with pytest.raises(ValueError):
        roof.verdict(add_cost(10), margin=0.5)


def test_fraction_of_roof_and_placement_table() -> None:
    roof = _roof()
    assert roof.fraction_of_roof(1 / 12, 1.0) == pytest.approx(1.0 / (20 / 12))
    assert roof.fraction_of_roof(171.0, 50.0) == pytest.approx(0.5)
    m = roofline_measure.measure_op(matmul_cost(8, 8, 8), "cpu", warmup_ms=0, rep_ms=0.5)
    p = roofline_measure.place(roof, m, "tiny matmul")
    assert (p.name, p.dtype) == ("tiny matmul", "float32")
    assert p.roof_gflop_per_s == roof.attainable_gflop_per_s(m.arithmetic_intensity)
    assert p.fraction_of_roof == pytest.approx(m.gflop_per_s / p.roof_gflop_per_s)
    table = roofline_measure.placement_table([p])
    assert "of its roof" in table and p.verdict in table
    assert p.verdict not in roofline_measure.placement_table([p], verdicts=False)
    assert "roof  " in table  # two spaces: the sanitize file's padding rule sees one column gap


def test_conv2d_is_timed_as_the_plain_call() -> None:
    """Round-5 review: aten's convolution.out is autogen (a new tensor, then a copy into out).

    So the convolution is timed as functional.conv2d, which allocates its output,
    and the notebook says so; the result is the convolution's own.
    """
    from torch.nn import functional

    op = conv2d_cost(1, 3, 8, 8, 4, 3, 3, padding=1)
    fn = roofline_measure._build(torch_module(), op, "cpu")
    first = fn()
    assert tuple(first.shape) == (1, 4, 8, 8)
    source = roofline_measure._build.__doc__ or ""
    assert "autogen" in source and "convolution.out" in source
    assert (
        first.dtype
        == functional.conv2d(
            torch_module().zeros(1, 3, 8, 8), torch_module().zeros(4, 3, 3, 3), padding=1
        ).dtype
    )


def torch_module():  # type: ignore[no-untyped-def]
    import torch

    return torch


def test_dram_elements_follow_labkits_main_memory_size() -> None:
    from labkit.bandwidth.sizes import main_memory_bytes_per_array

    assert roofline_measure.dram_elements("float32") * 4 == main_memory_bytes_per_array()
    assert roofline_measure.dram_elements("float64") * 8 == main_memory_bytes_per_array()


def test_published_gpu_ridges_are_computed_from_cited_dense_figures() -> None:
    rows = {p.compute: p for p in published_ridges("H100 SXM")}
    assert rows["FP32 (CUDA cores)"].ridge_flop_per_byte == pytest.approx(67 / 3.35)  # ≈ 20
    assert 140 < rows["TF32 tensor cores"].ridge_flop_per_byte < 150
    assert 290 < rows["BF16/FP16 tensor cores"].ridge_flop_per_byte < 300
    assert all("https://" in p.source and p.read_on for p in rows.values())
    # from the spec table's vendor and maintainer sources, no longer a third-party page
    assert all("vendor" in p.source or "maintainer" in p.source for p in rows.values())
    assert "dense" in str(rows["TF32 tensor cores"])
    with pytest.raises(ValueError, match="gpu must be one of"):
        published_ridges("H999")


def test_intensity_exercise_messages() -> None:
    truth = intensity_exercise_op().arithmetic_intensity
    assert truth == pytest.approx(2 * 16 * 4096 * 4096 / ((16 * 4096 * 2 + 4096 * 4096) * 2))
    assert roofline_intensity(truth).passed
    assert not roofline_intensity(None).solved
    assert "bfloat16 has 2 bytes" in roofline_intensity(truth / 2).message
    assert "twice the answer" in roofline_intensity(truth * 2).message
    assert "only the weight" in roofline_intensity(16.0).message
    assert "leaves out the weight" in roofline_intensity(2048.0).message
    assert "FLOPs = 2·16·4096·4096" in roofline_intensity(3.0).message
    with pytest.raises(TypeError):
        roofline_intensity("15.9")


def test_plot_ties_points_to_their_dtype_and_draws_the_theoretical_peak() -> None:
    roof = _roof()
    ax = plots.plot_roofline(roof, [("add", 1 / 12, 1.0), ("bf16 mm", 100.0, 150.0, "bfloat16")])
    try:
        labels = [line.get_label() for line in ax.get_lines()]
        assert "float32 theoretical peak: 200 GFLOP/s" in labels
        assert "float32 achieved BLAS ceiling: 100 GFLOP/s" in labels
        texts = [t.get_text() for t in ax.texts]
        assert "add (60% of roof)" in texts  # 1.0 of 20/12
        assert "bf16 mm (50% of roof)" in texts  # against bfloat16's 300, not float32's 100
        stars = [line for line in ax.get_lines() if line.get_marker() == "*"]
        assert [s.get_color() for s in stars] == ["C0", "C1"]
    finally:
        plt.close(ax.figure)


# --------------------------------------------------------------------------- review fixes (issue 15)


def _intel(model: str) -> CpuPeak:
    return cpu_peak(fake_cpu(model, AVX512), cores=1, clock_ghz=1.0)


def test_fma_table_documented_cases() -> None:
    assert _intel("Intel(R) Xeon(R) Gold 5118 CPU @ 2.30GHz").fma_units == 1
    assert _intel("Intel(R) Xeon(R) Gold 5218 CPU @ 2.30GHz").fma_units == 1
    assert _intel("Intel(R) Xeon(R) Gold 5122 CPU @ 3.60GHz").fma_units == 2
    assert _intel("Intel(R) Xeon(R) Gold 5222 CPU @ 3.80GHz").fma_units == 2
    assert _intel("Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz").fma_units == 2
    assert _intel("Intel(R) Xeon(R) Bronze 3106 CPU @ 1.70GHz").fma_units == 1
    assert _intel("11th Gen Intel(R) Core(TM) i7-1185G7 @ 3.00GHz").fma_units == 1
    assert _intel("Intel(R) Core(TM) i9-10980XE CPU @ 3.00GHz").fma_units == 2
    unknown = _intel("Intel(R) Xeon(R) Silver 4310 CPU @ 2.10GHz")
    assert unknown.fma_units == 2 and any("off by 2×" in a for a in unknown.assumptions)


def test_amd_fma_by_family_and_model() -> None:
    def amd(model: str, simd: tuple[str, ...], family: int, number: int) -> CpuPeak:
        return cpu_peak(
            fake_cpu(model, simd), cores=1, clock_ghz=1.0, family=family, model_number=number
        )

    assert amd("AMD Ryzen 7 1700", AVX2, 23, 1).fma_units == 1  # Zen 1
    assert amd("AMD Ryzen 7 2700X", AVX2, 23, 8).fma_units == 1  # Zen+
    assert amd("AMD EPYC 7742", AVX2, 23, 49).fma_units == 2  # Zen 2
    assert amd("AMD EPYC 9654", AVX512, 25, 17).fma_units == 1  # Zen 4
    assert amd("AMD EPYC 9755", AVX512, 26, 2).fma_units == 2  # Zen 5 server
    assert amd("AMD Ryzen 9 9950X", AVX512, 26, 68).fma_units == 2  # Zen 5 desktop
    mobile = amd("AMD Ryzen AI 9 HX 370", AVX512, 26, 36)  # Strix Point
    assert mobile.fma_units == 1 and any("off by 2×" in a for a in mobile.assumptions)


def test_clock_caveat_follows_its_source() -> None:
    assert "upper bound" in peak_module.clock_caveat("cpufreq cpuinfo_max_freq (...)")
    assert "exceed" in peak_module.clock_caveat('/proc/cpuinfo "cpu MHz" (...)')


def test_hyper_thread_siblings_count_once(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    for cpu, core in ((0, 0), (1, 0), (2, 1), (3, 1)):
        topology = tmp_path / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "physical_package_id").write_text("0\n")
        (topology / "core_id").write_text(f"{core}\n")
    assert peak_module.distinct_physical_cores({0, 1}, tmp_path) == 1
    assert peak_module.distinct_physical_cores({0, 1, 2, 3}, tmp_path) == 2
    monkeypatch.setattr(peak_module, "_SYS_CPU", tmp_path)
    monkeypatch.setattr(peak_module, "allowed_cpus", lambda: {0, 1})
    monkeypatch.setattr(peak_module, "_torch_threads", lambda: None)
    monkeypatch.delenv("LABKIT_PROFILE", raising=False)
    cores, source = peak_module.usable_cores(fake_cpu("x", AVX2, cores=2))
    assert cores == 1 and "hyper-threads" in source


def test_torch_threads_cap_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peak_module, "allowed_cpus", lambda: set(range(8)))
    monkeypatch.setattr(peak_module, "distinct_physical_cores", lambda cpus: 8)
    monkeypatch.setattr(peak_module, "_torch_threads", lambda: 3)
    monkeypatch.delenv("LABKIT_PROFILE", raising=False)
    assert peak_module.usable_cores(fake_cpu("x", AVX2, cores=8)) == (
        3,
        "torch's 3 threads (fewer than the 8 cores)",
    )


def test_weight_reuse_is_judged_by_rate_not_share() -> None:
    from labkit.roofline import measure
    from labkit.roofline import model as m
    from labkit.roofline.model import Roofline, matmul_cost

    roof = Roofline("cpu", {"float32": 100.0}, 20.0)  # separate GEMVs: at most 10 GFLOP/s
    op = matmul_cost(8, 8192, 16384, "float32")
    assert m.separate_gemv_gflop_per_s(roof, op) == pytest.approx(10.0, rel=1e-3)

    def at(rate: float) -> object:
        return measure.OpMeasurement(op, "cpu", 1.0, rate, 1.0, None)  # type: ignore[arg-type]

    assert m.weight_reuse(roof, at(20.0)) == m.REUSED  # 2×: reuse, whatever the share
    assert m.weight_reuse(roof, at(9.0)) == m.NOT_REUSED
    assert m.weight_reuse(roof, at(12.0)) == m.REUSE_UNCLEAR
    with pytest.raises(ValueError):
        m.separate_gemv_gflop_per_s(roof, roofline_add_cost())


def roofline_add_cost() -> object:
    from labkit.roofline.model import add_cost

    return add_cost(1000, "float32")


def test_cpu_and_gpu_ridges_compared_with_a_margin() -> None:
    from labkit.roofline import published as pub

    h100 = pub.published_ridges("H100 SXM")[0]  # 20 FLOP/byte
    assert pub.compare_ridge(1.0, h100) == pub.CPU_RIDGE_LOWER  # 20× apart
    assert pub.compare_ridge(5.35, h100) == pub.RIDGES_CLOSE  # 3.7× (round-5 review, M2)
    assert pub.compare_ridge(400.0, h100) == pub.CPU_RIDGE_HIGHER
    assert pub.compare_ridge(25.0, h100) == pub.RIDGES_CLOSE


def test_sum_writes_into_a_preallocated_scalar() -> None:
    torch = pytest.importorskip("torch")
    from labkit.roofline.measure import _build
    from labkit.roofline.model import sum_cost

    fn = _build(torch, sum_cost(1000, "float32"), "cpu")
    assert fn() is fn()


def test_exercise_accepts_either_answer_near_the_ridge() -> None:
    from labkit import check
    from labkit.roofline.model import Roofline

    # theoretical ridge 100 FLOP/byte: the conv (144) is within 4×, the matmul (683) is not
    roof = Roofline("cpu", {"float32": 100.0}, 10.0, theoretical_gflop_per_s={"float32": 1000.0})
    answer = {
        "add": "memory-bound",
        "sum": "memory-bound",
        "matmul 4096": "compute-bound",
        "conv 3x3": "memory-bound",
    }
    result = check.roofline_prediction(answer, roof)
    assert result.passed and "conv 3x3" in result.message
    assert not check.roofline_prediction({**answer, "matmul 4096": "memory-bound"}, roof).passed


def test_one_black_memory_roof_up_to_the_highest_ceiling() -> None:
    """Sixth review (R6-03-M4): the segment the dtypes share was drawn in one dtype's colour.

    Now the memory roof is one black line, as in Williams et al.'s plots with several
    ceilings; each dtype runs under min(it, its ceiling), which the notebook says.
    """
    from labkit.roofline.model import Roofline
    from labkit.roofline.plots import plot_roofline

    roof = Roofline("cpu", {"float32": 100.0, "bfloat16": 200.0}, 20.0)
    ax = plot_roofline(roof)
    black = [line for line in ax.get_lines() if line.get_color() == "k"]
    assert len(black) == 1
    assert max(black[0].get_ydata()) == pytest.approx(200.0)
    slanted = [
        line
        for line in ax.get_lines()
        if len(set(line.get_ydata())) > 1
        and line.get_color() != "k"
        and line.get_linestyle() == "-"
    ]
    assert not slanted  # no coloured copy of the memory roof


def test_weight_reuse_uses_a_faster_read_only_stream() -> None:
    """Round-5 review, M3: where the sum reads faster than the triad roof, the limit uses it."""
    from labkit.roofline import model as m

    roof = Roofline("cpu", {"float32": 200.0}, 20.0, {"float32": 200.0})
    op = matmul_cost(8, 16384, 8192)
    triad_limit = m.separate_gemv_gflop_per_s(roof, op)
    read_limit = m.separate_gemv_gflop_per_s(roof, op, read_gb_per_s=30.0)
    assert read_limit == pytest.approx(triad_limit * 1.5, rel=1e-3)
    assert m.separate_gemv_gflop_per_s(roof, op, read_gb_per_s=10.0) == triad_limit

    class At:
        def __init__(self, rate: float) -> None:
            self.op, self.gflop_per_s = op, rate

    rate = 1.6 * triad_limit  # reuse against the triad, not against the faster read stream
    assert m.weight_reuse(roof, At(rate)) == m.REUSED
    assert m.weight_reuse(roof, At(rate), read_gb_per_s=30.0) == m.REUSE_UNCLEAR
    with pytest.raises(ValueError, match="read_gb_per_s"):
        m.separate_gemv_gflop_per_s(roof, op, read_gb_per_s=0.0)
