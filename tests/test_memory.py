"""labkit.memory: buffers sized from the free memory, shrink for sweeps, clear errors otherwise."""

from __future__ import annotations

import pytest

from labkit import memory
from labkit.memory import MemoryBudgetError

MiB = 1024**2


@pytest.fixture
def free_4mib(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine with 4 MiB free: the default budget (a quarter) is 1 MiB."""
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": 4 * MiB)


def test_host_free_memory_comes_from_psutil() -> None:
    import psutil

    free = memory.available_bytes("cpu")
    assert isinstance(free, int) and free > 0
    assert abs(free - psutil.virtual_memory().available) < 512 * MiB  # read moments apart


@pytest.mark.parametrize(
    ("text", "parsed"), [("cpu", ("cpu", None)), ("CUDA", ("cuda", None)), ("cuda:1", ("cuda", 1))]
)
def test_parse_device(text: str, parsed: tuple[str, int | None]) -> None:
    assert memory.parse_device(text) == parsed


@pytest.mark.parametrize(("device", "error"), [("gpu", ValueError), ("cuda:x", ValueError),
                                               ("cpu:0", ValueError), (0, TypeError)])  # fmt: skip
def test_parse_device_rejects_names_it_does_not_know(device: object, error: type) -> None:
    with pytest.raises(error, match="device"):
        memory.parse_device(device)


def test_fit_bytes_shrinks_to_the_budget(free_4mib: None) -> None:
    assert memory.budget_bytes() == 1 * MiB
    assert memory.fit_bytes(100) == 100
    assert memory.fit_bytes(10 * MiB) == 1 * MiB
    assert memory.fit_bytes(10 * MiB, arrays=4) == MiB // 4
    assert memory.fit_bytes(10 * MiB, arrays=2, extra_bytes=MiB // 2) == MiB // 4
    assert memory.fit_bytes(10 * MiB, extra_bytes=2 * MiB) == 0  # not even the extra fits
    assert memory.fit_bytes(10 * MiB, fraction=1.0) == 4 * MiB


def test_check_fits_explains_what_was_asked_what_is_free_and_what_to_do(free_4mib: None) -> None:
    assert memory.check_fits(MiB // 4, arrays=4) == MiB // 4
    with pytest.raises(MemoryBudgetError) as info:
        memory.check_fits(2 * MiB, arrays=3, what="the triad probe")
    text = str(info.value)
    for part in ("the triad probe", "3 × 2 MiB = 6 MiB", "4 MiB", "host", "25%", "1 MiB",
                 "smaller size", "close other programs"):  # fmt: skip
        assert part in text, part
    assert isinstance(info.value, ValueError)  # callers catching ValueError see it


def test_fit_sizes_keeps_what_fits_sorted_and_reports_the_rest(free_4mib: None) -> None:
    kept, dropped = memory.fit_sizes([MiB, 4096, 300 * 1024, 4096, 8 * MiB], arrays=3)
    assert kept == (4096, 300 * 1024)
    assert dropped == (MiB, 8 * MiB)
    note = memory.dropped_message(dropped, kept, device="cpu", fraction=0.25, arrays=3)
    assert "2 size(s) from 1 MiB" in note and "300 KiB" in note and "Close other programs" in note


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"requested_bytes": 0}, ValueError, "requested_bytes"),
        ({"requested_bytes": 1.5}, TypeError, "requested_bytes"),
        ({"requested_bytes": True}, TypeError, "requested_bytes"),
        ({"requested_bytes": 10, "arrays": 0}, ValueError, "arrays"),
        ({"requested_bytes": 10, "fraction": 0}, ValueError, "fraction"),
        ({"requested_bytes": 10, "fraction": 1.5}, ValueError, "fraction"),
        ({"requested_bytes": 10, "fraction": "half"}, TypeError, "fraction"),
        ({"requested_bytes": 10, "extra_bytes": -1}, ValueError, "extra_bytes"),
    ],
)
def test_arguments_are_validated_by_name(free_4mib: None, kwargs: dict, error: type,
                                         name: str) -> None:  # fmt: skip
    with pytest.raises(error, match=name):
        memory.fit_bytes(**kwargs)
    with pytest.raises(error, match=name):
        memory.check_fits(**kwargs)


def test_fit_sizes_validates() -> None:
    with pytest.raises(TypeError, match="sizes_bytes"):
        memory.fit_sizes("1024")
    with pytest.raises(ValueError, match="sizes_bytes"):
        memory.fit_sizes([0])
