"""Issue 15, third review of notebook 03: ridge positions printed from the data, the Arm FMA
note, the VM topology note, and the masks the notebook relies on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from labkit.machine import peak as peak_module
from labkit.machine.cpu import CpuInfo
from labkit.roofline.model import (
    RIDGE_POSITIONS,
    Roofline,
    matmul_cost,
    ridge_position,
)

SANITIZE = Path(__file__).resolve().parents[1] / "notebooks" / "nbval_sanitize.cfg"


def _roof(bandwidth: float) -> Roofline:
    # theoretical float32 peak 160 GFLOP/s: the verdict ridge is 160 / bandwidth
    return Roofline("cpu", {"float32": 150.0}, bandwidth, {"float32": 160.0})


def test_ridge_position_has_all_three_bands() -> None:
    roof = _roof(40.0)  # ridge 4 FLOP/byte
    near = ridge_position(roof, matmul_cost(8, 8192, 16384))  # 3.99: near
    past = ridge_position(roof, matmul_cost(64, 8192, 16384))  # 31.6: > 16, compute-bound
    below = ridge_position(roof, matmul_cost(1, 8192, 16384))  # 0.5: < 1, memory-bound
    assert near.endswith("near the ridge (within 4× of it): either roof may bind")
    assert past.endswith("compute-bound (more than 4× above the ridge)")
    assert below.endswith("memory-bound (more than 4× below the ridge)")
    assert "the float32 ridge (4.00 FLOP/byte)" in near
    assert "1.00×" in near and "7.9×" in past and "0.12×" in below


def test_the_same_row_moves_with_the_ridge() -> None:
    """m = 64 is past the band on a 2-thread-like ridge and near it on a many-core one."""
    op = matmul_cost(64, 8192, 16384)
    assert "compute-bound" in ridge_position(_roof(40.0), op)  # ridge 4
    assert "near the ridge" in ridge_position(_roof(8.0), op)  # ridge 20


def test_ridge_position_uses_the_ceiling_without_a_theoretical_peak() -> None:
    roof = Roofline("cpu", {"float32": 100.0}, 10.0)  # ridge 10 from the ceiling
    assert "(10.0 FLOP/byte)" in ridge_position(roof, matmul_cost(8, 8192, 16384))
    with pytest.raises((TypeError, ValueError)):
        ridge_position(roof, matmul_cost(8, 8192, 16384), margin=0.5)


def _sanitize(text: str) -> str:
    """Apply the sanitize file's sections in order, as nbval does."""
    body = SANITIZE.read_text(encoding="utf-8")
    pairs = re.findall(r"^regex: (.*)\nreplace: (.*)$", body, flags=re.MULTILINE)
    for pattern, replacement in pairs:
        text = re.sub(pattern, replacement, text)
    return text


def test_every_position_sentence_is_masked_to_the_same_text() -> None:
    op = matmul_cost(8, 8192, 16384)
    lines = {_sanitize(f"m=8: {ridge_position(_roof(bw), op)}\n") for bw in (160.0, 40.0, 2.0, 0.5)}
    assert len(lines) == 1, lines
    (line,) = lines
    assert line.startswith("m=8: ") and "<ridge position>" in line
    assert len(RIDGE_POSITIONS) == 3


def fake_cpu(model: str, simd: tuple[str, ...]) -> CpuInfo:
    return CpuInfo(
        model=model,
        architecture="aarch64" if "NEON" in simd else "x86_64",
        physical_cores=4,
        logical_cores=4,
        simd_features=simd,
        simd_source="test",
        memory_total_bytes=None,
        memory_available_bytes=None,
        l1d_cache_bytes=None,
        l2_cache_bytes=None,
        l3_cache_bytes=None,
    )


def test_arm_note_says_the_count_can_be_too_high_or_too_low() -> None:
    p = peak_module.cpu_peak(fake_cpu("Neoverse-N1", ("NEON",)), cores=1, clock_ghz=2.0)
    note = next(a for a in p.assumptions if "NEON" in a)
    assert "more" in note and "fewer" in note and "off by 2×" in note
    assert "other Arm cores have more;" not in note


def test_virtual_machine_flag() -> None:
    assert peak_module.in_virtual_machine("flags\t\t: fpu vme avx2 hypervisor lahf_lm\n") is True
    assert peak_module.in_virtual_machine("flags\t\t: fpu vme avx2 lahf_lm\n") is False
    assert peak_module.in_virtual_machine("Features\t: fp asimd\n") is None


def test_vm_note_only_in_a_vm_and_only_for_counted_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    info = fake_cpu("x", ("AVX", "AVX2"))
    monkeypatch.setattr(peak_module, "usable_cores", lambda info: (2, "test cores"))
    counted_vm = peak_module.cpu_peak(info, clock_ghz=2.0, virtual_machine=True)
    assert peak_module.VM_TOPOLOGY_NOTE in counted_vm.assumptions
    bare = peak_module.cpu_peak(info, clock_ghz=2.0, virtual_machine=False)
    assert peak_module.VM_TOPOLOGY_NOTE not in bare.assumptions
    given = peak_module.cpu_peak(info, cores=2, clock_ghz=2.0, virtual_machine=True)
    assert peak_module.VM_TOPOLOGY_NOTE not in given.assumptions


def test_cores_source_does_not_claim_physical_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peak_module, "allowed_cpus", lambda: {0, 1})
    monkeypatch.setattr(peak_module, "distinct_physical_cores", lambda cpus: 2)
    monkeypatch.setattr(peak_module, "_torch_threads", lambda: None)
    monkeypatch.delenv("LABKIT_PROFILE", raising=False)
    cores, source = peak_module.usable_cores(fake_cpu("x", ("AVX2",)))
    assert cores == 2 and source.startswith("distinct cores the OS shows")


# Fourth review (U2): the 1.5× reuse margin is a heuristic, and the printed sentences say so.
def test_reuse_sentences_call_the_margin_a_heuristic() -> None:
    from labkit.roofline import model as m

    assert "heuristic margin" in m.REUSED and "not a proven bound" in m.REUSED
    assert "most likely reused" in m.REUSED
    assert "heuristic margin" in m.REUSE_UNCLEAR
    assert "4/3" not in m.REUSED + m.REUSE_UNCLEAR + m.NOT_REUSED


def test_reuse_bands_with_the_heuristic_margin() -> None:
    from labkit.roofline import model as m

    roof = Roofline("cpu", {"float32": 200.0}, 20.0, {"float32": 200.0})
    op = matmul_cost(8, 16384, 8192)
    limit = m.separate_gemv_gflop_per_s(roof, op)

    class At:
        def __init__(self, rate: float) -> None:
            self.op, self.gflop_per_s = op, rate

    assert m.weight_reuse(roof, At(m.REUSE_MARGIN * limit * 1.01)) == m.REUSED
    assert m.weight_reuse(roof, At(m.REUSE_MARGIN * limit * 0.99)) == m.REUSE_UNCLEAR
    assert m.weight_reuse(roof, At(limit * 1.01)) == m.REUSE_UNCLEAR
    assert m.weight_reuse(roof, At(limit)) == m.NOT_REUSED


def test_r4_reuse_mask_matches_exactly_the_new_sentences() -> None:
    from labkit.roofline import model as m

    text = SANITIZE.read_text()
    section = text.split("[nb03-r4-reuse]", 1)[1]
    regex = re.search(r"^regex: (.*)$", section, re.M)
    assert regex is not None
    pattern = re.compile(regex.group(1))
    assert pattern.fullmatch(m.REUSED) and pattern.fullmatch(m.REUSE_UNCLEAR)
    assert pattern.fullmatch(m.NOT_REUSED)  # fifth review: all three sentences changed
    assert text.rstrip().split("\n[")[-1].startswith("table-padding]")


def test_every_reuse_sentence_is_masked_to_the_same_text() -> None:
    from labkit.roofline import model as m

    masked = {_sanitize(f"m=8: {t}\n") for t in (m.REUSED, m.NOT_REUSED, m.REUSE_UNCLEAR)}
    assert len(masked) == 1, masked
