"""Main-memory probes are sized from the last-level cache (STREAM's 4× rule), review finding A33.

A fixed 512 MiB array is below 4× the L3 of an 8-CCD EPYC run on all its cores
(256 MiB): there a "DRAM" figure is partly cache bandwidth. The size now grows
to the power of two at least 4× the cache, as far as the memory budget allows,
and stays fixed under a reference profile so committed outputs do not depend on
the machine that re-runs them.
"""

from __future__ import annotations

import pytest

from labkit.bandwidth import sizes
from labkit.machine import profile

MIB = 1024**2
GIB = 1024**3


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch):
    """Set the last-level cache and the memory budget the sizing sees."""

    def set_machine(cache_bytes: int | None, budget_bytes: int) -> None:
        monkeypatch.setattr(sizes, "last_level_cache_bytes", lambda device="cpu": cache_bytes)
        monkeypatch.setattr(
            sizes._memory, "budget_bytes", lambda *, device="cpu", fraction=0.25: budget_bytes
        )

    return set_machine


def test_small_cache_keeps_the_fixed_size(machine) -> None:
    machine(32 * MIB, 64 * GIB)
    assert (
        sizes.main_memory_bytes_per_array("cpu") == sizes.dram_bytes_per_array("cpu") == 512 * MIB
    )


def test_unknown_cache_keeps_the_fixed_size(machine) -> None:
    machine(None, 64 * GIB)
    assert sizes.main_memory_bytes_per_array("cpu") == 512 * MIB


def test_exactly_128_mib_keeps_the_fixed_size(machine) -> None:
    machine(128 * MIB, 64 * GIB)  # 4 × 128 MiB = 512 MiB: the rule is met already
    assert sizes.main_memory_bytes_per_array("cpu") == 512 * MIB


def test_large_cache_grows_to_the_power_of_two_at_least_four_times_it(machine) -> None:
    machine(256 * MIB, 64 * GIB)  # an 8-CCD EPYC, all cores: 8 × 32 MiB
    assert sizes.main_memory_bytes_per_array("cpu") == 1 * GIB
    machine(384 * MIB, 64 * GIB)  # 4 × 384 MiB = 1.5 GiB -> 2 GiB
    size = sizes.main_memory_bytes_per_array("cpu")
    assert size == 2 * GIB
    assert sizes.dram_cache_ratio("cpu") == pytest.approx(size / (384 * MIB))
    assert sizes.dram_cache_ratio("cpu") >= 4


def test_budget_caps_the_growth_but_never_below_the_fixed_size(machine) -> None:
    machine(384 * MIB, 3 * GIB)  # three arrays of 2 GiB do not fit; three of 1 GiB do
    assert sizes.main_memory_bytes_per_array("cpu", arrays=3) == 1 * GIB
    machine(384 * MIB, 1 * GIB)  # not even three of 512 MiB: the caller shrinks and warns
    assert sizes.main_memory_bytes_per_array("cpu", arrays=3) == 512 * MIB


def test_reference_profile_keeps_the_fixed_size(machine, monkeypatch: pytest.MonkeyPatch) -> None:
    machine(384 * MIB, 64 * GIB)
    monkeypatch.setenv(profile.ENV_VAR, profile.REFERENCE.name)
    assert sizes.main_memory_bytes_per_array("cpu") == 512 * MIB


def test_the_probes_and_the_roofline_use_it(machine, monkeypatch: pytest.MonkeyPatch) -> None:
    from labkit.bandwidth import references, stream
    from labkit.roofline import measure

    machine(256 * MIB, 64 * GIB)
    monkeypatch.setattr(
        references._memory, "fit_bytes", lambda wanted, **kwargs: wanted, raising=True
    )
    monkeypatch.setattr(stream._memory, "fit_bytes", lambda wanted, **kwargs: wanted, raising=True)
    assert measure.dram_elements("float32") == GIB // 4
    assert references.cpu_bytes_per_array()[0] == GIB
    assert stream._single_size(None, "cpu", 0.25, 3, "test") == GIB


def test_bad_arrays_is_named(machine) -> None:
    machine(256 * MIB, 64 * GIB)
    with pytest.raises(ValueError, match="arrays"):
        sizes.main_memory_bytes_per_array("cpu", arrays=0)
