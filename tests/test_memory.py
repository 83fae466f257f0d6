"""labkit.machine.memory: buffers sized from the free memory, shrink for sweeps, clear errors otherwise."""

from __future__ import annotations

import pytest

from labkit.machine import container, memory
from labkit.machine.memory import MemoryBudgetError

MiB = 1024**2


@pytest.fixture
def free_4mib(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine with 4 MiB free: the default budget (a quarter) is 1 MiB."""
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": 4 * MiB)


def test_host_free_memory_comes_from_psutil_within_the_container_limit() -> None:
    import psutil

    free = memory.available_bytes("cpu")
    assert isinstance(free, int) and free > 0
    expected = psutil.virtual_memory().available
    container = memory.container_memory()
    if container is not None:
        expected = min(expected, container.headroom_bytes)
    assert abs(free - expected) < 512 * MiB  # read moments apart


@pytest.mark.parametrize(
    ("device", "error"),
    [("gpu", ValueError), ("cuda:x", ValueError), ("cpu:0", ValueError), (0, TypeError)],
)
def test_memory_device_rejects_names_it_does_not_know(device: object, error: type) -> None:
    with pytest.raises(error, match="device"):
        memory.memory_device(device)


def test_fit_bytes_shrinks_to_the_budget(free_4mib: None) -> None:
    assert memory.budget_bytes() == 1 * MiB
    assert memory.fit_bytes(100) == 100
    assert memory.fit_bytes(10 * MiB) == 1 * MiB
    assert memory.fit_bytes(10 * MiB, arrays=4) == MiB // 4
    assert memory.fit_bytes(10 * MiB, arrays=2, extra_bytes=MiB // 2) == MiB // 4
    assert memory.fit_bytes(10 * MiB, extra_bytes=2 * MiB) == 0  # not even the extra fits
    assert memory.fit_bytes(10 * MiB, fraction=1.0) == 4 * MiB


def test_check_fits_explains_what_was_asked_what_is_free_and_what_to_do(free_4mib: None) -> None:
    assert memory.require_fits(MiB // 4, arrays=4) == MiB // 4
    with pytest.raises(MemoryBudgetError) as info:
        memory.require_fits(2 * MiB, arrays=3, what="the triad probe")
    text = str(info.value)
    for part in (
        "the triad probe",
        "3 × 2 MiB = 6 MiB",
        "4 MiB",
        "host",
        "25%",
        "1 MiB",
        "smaller size",
        "close other programs",
    ):
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
def test_arguments_are_validated_by_name(
    free_4mib: None, kwargs: dict, error: type, name: str
) -> None:
    with pytest.raises(error, match=name):
        memory.fit_bytes(**kwargs)
    with pytest.raises(error, match=name):
        memory.require_fits(**kwargs)


def test_fit_sizes_validates() -> None:
    with pytest.raises(ValueError, match="sizes_bytes"):
        memory.fit_sizes([0])


# --------------------------------------------------------------------------- containers


def _cgroup_tree(tmp_path, monkeypatch: pytest.MonkeyPatch, own: str, files: dict[str, str]):
    """A fake /sys/fs/cgroup under tmp_path, and /proc/self/cgroup listing ``own``."""
    root = tmp_path / "cgroup"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text(own)
    monkeypatch.setattr(container, "_CGROUP_ROOT", root)
    monkeypatch.setattr(container, "_PROC_SELF_CGROUP", proc)
    return root


def _host_psutil(monkeypatch: pytest.MonkeyPatch, available: int, total: int = 256 * 1024**3):
    from types import SimpleNamespace

    import psutil

    fake = SimpleNamespace(available=available, total=total)
    monkeypatch.setattr(psutil, "virtual_memory", lambda: fake)


def test_cgroup_v2_limit_caps_the_free_memory(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a JupyterHub pod: 2 GiB limit, 1.5 GiB charged of which 512 MiB is reclaimable cache,
    # on a node with 250 GiB available
    _cgroup_tree(
        tmp_path,
        monkeypatch,
        "0::/kubepods/pod1/abc\n",
        {
            "cgroup.controllers": "cpu memory\n",
            "kubepods/pod1/abc/memory.max": f"{2 * 1024**3}\n",
            "kubepods/pod1/abc/memory.current": f"{1536 * MiB}\n",
            "kubepods/pod1/abc/memory.stat": f"anon 1\ninactive_file {512 * MiB}\nactive_file 9\n",
            "kubepods/pod1/memory.max": "max\n",
        },
    )
    _host_psutil(monkeypatch, 250 * 1024**3)
    container = memory.container_memory()
    assert container is not None
    assert container.limit_bytes == 2 * 1024**3 and container.used_bytes == 1024 * MiB
    assert container.headroom_bytes == 1024 * MiB
    assert memory.available_bytes("cpu") == 1024 * MiB
    assert memory.budget_bytes() == 256 * MiB
    assert memory.total_bytes("cpu") == 2 * 1024**3


def test_cgroup_parent_limit_binds_when_tighter(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    _cgroup_tree(
        tmp_path,
        monkeypatch,
        "0::/user/job\n",
        {
            "user/job/memory.max": f"{8 * 1024**3}\n",
            "user/job/memory.current": f"{1 * 1024**3}\n",
            "user/memory.max": f"{4 * 1024**3}\n",
            "user/memory.current": f"{3 * 1024**3}\n",
        },
    )
    _host_psutil(monkeypatch, 100 * 1024**3)
    assert memory.available_bytes("cpu") == 1 * 1024**3


def test_cgroup_v1_and_a_container_without_its_own_namespace(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Docker on cgroup v1 without a cgroup namespace: /proc/self/cgroup names /docker/<id>,
    # but the container's own cgroup is mounted at the root of the memory hierarchy
    _cgroup_tree(
        tmp_path,
        monkeypatch,
        "12:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n",
        {
            "memory/memory.limit_in_bytes": f"{3 * 1024**3}\n",
            "memory/memory.usage_in_bytes": f"{1 * 1024**3}\n",
            "memory/memory.stat": f"cache 5\ntotal_inactive_file {256 * MiB}\n",
        },
    )
    _host_psutil(monkeypatch, 60 * 1024**3)
    assert memory.available_bytes("cpu") == 2 * 1024**3 + 256 * MiB


@pytest.mark.parametrize(
    "files",
    [
        {},  # not Linux, or no cgroup file system
        {"memory.max": "max\n", "memory.current": "123\n"},  # v2 without a limit
        {"memory/memory.limit_in_bytes": "9223372036854771712\n"},  # v1's "unlimited"
        {"memory.max": "garbage\n"},  # unreadable values mean no limit
    ],
)
def test_no_cgroup_limit_leaves_psutil_alone(
    tmp_path, monkeypatch: pytest.MonkeyPatch, files: dict
) -> None:
    _cgroup_tree(tmp_path, monkeypatch, "0::/\n4:memory:/\n", files)
    _host_psutil(monkeypatch, 5 * 1024**3)
    assert memory.container_memory() is None
    assert memory.available_bytes("cpu") == 5 * 1024**3


def test_unreadable_cgroup_files_mean_no_limit(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _cgroup_tree(tmp_path, monkeypatch, "0::/\n", {})
    (root / "memory.max").mkdir(parents=True)  # reading a directory raises OSError
    monkeypatch.setattr(container, "_PROC_SELF_CGROUP", tmp_path / "missing")
    assert memory.container_memory() is None


def test_doctor_shows_the_container_limit_only_when_there_is_one(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from labkit.machine import cpu
    from labkit.machine import report as doctor

    def memory_line(info: cpu.CpuInfo) -> str:
        table = doctor._Table(color=False)
        doctor._cpu_rows(table, type("Report", (), {"cpu": info})())
        return next(x for x in table.lines if x.strip().startswith("memory"))

    _host_psutil(monkeypatch, 200 * 1024**3, total=256 * 1024**3)
    _cgroup_tree(tmp_path, monkeypatch, "0::/\n", {})
    info = cpu.cpu_info()
    assert info.memory_limit_bytes is None and info.memory_available_bytes == 200 * 1024**3
    assert memory_line(info) == "  memory         256 GiB total, 200 GiB available"  # unchanged
    _cgroup_tree(
        tmp_path / "limited",
        monkeypatch,
        "0::/\n",
        {
            "memory.max": f"{2 * 1024**3}\n",
            "memory.current": f"{512 * MiB}\n",
        },
    )
    info = cpu.cpu_info()
    assert info.memory_limit_bytes == 2 * 1024**3
    assert info.memory_available_bytes == 1536 * MiB
    assert memory_line(info).endswith("256 GiB total, 1.50 GiB available (container limit 2 GiB)")


# --------------------------------------------------------------------------- explicit sizes, OOM


def test_check_fits_names_the_argument(free_4mib: None) -> None:
    with pytest.raises(MemoryBudgetError, match="Ask for a smaller n_elements"):
        memory.require_fits(2 * MiB, what="strided_read", name="n_elements")
    with pytest.raises(MemoryBudgetError, match="nothing fits here"):
        memory.require_fits(MiB, extra_bytes=2 * MiB, what="with a flush buffer")


def test_fit_sizes_refuses_user_sizes_beyond_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": 4 * MiB)
    monkeypatch.setattr(memory, "total_bytes", lambda device="cpu": 16 * MiB)
    kept, dropped = memory.fit_sizes([4096, 8 * MiB], name="sizes_bytes")  # within the machine
    assert kept == (4096,) and dropped == (8 * MiB,)
    with pytest.raises(MemoryBudgetError) as info:
        memory.fit_sizes([4096, 10**15], name="sizes_bytes")
    text = str(info.value)
    assert "largest size in sizes_bytes" in text and "16 MiB this machine has" in text
    assert "4 MiB of host memory is free" in text and "smaller sizes_bytes" in text
    with pytest.raises(MemoryBudgetError, match="smallest size in sizes_bytes"):
        memory.fit_sizes([2 * MiB, 8 * MiB], name="sizes_bytes")
    assert memory.fit_sizes([2 * MiB]) == ((), (2 * MiB,))  # default sizes: the caller decides


def test_out_of_memory_errors_are_recognised() -> None:
    import torch

    assert memory.is_out_of_memory(torch.cuda.OutOfMemoryError("CUDA out of memory."))
    assert memory.is_out_of_memory(RuntimeError("CUDA error: out of memory"))
    assert memory.is_out_of_memory(MemoryError())
    assert not memory.is_out_of_memory(RuntimeError("shape mismatch"))
    assert not memory.is_out_of_memory(ValueError("out of memory"))


def test_allocate_shrinking_steps_down_past_sizes_that_fail(monkeypatch) -> None:
    released: list[str] = []
    monkeypatch.setattr(memory, "release_memory", lambda device="cuda": released.append(device))

    def allocate(size: int) -> str:
        if size > 1000:
            raise MemoryError
        return f"buffers of {size}"

    got, kept, failed = memory.allocate_shrinking(
        [10, 100, 1000, 5000, 9000], allocate, device="cuda:0", what="a sweep"
    )
    assert got == "buffers of 1000" and kept == (10, 100, 1000) and failed == (5000, 9000)
    assert released == ["cuda:0", "cuda:0"]
    with pytest.raises(MemoryBudgetError, match="a sweep: allocating even 10 B"):
        memory.allocate_shrinking(
            [10, 20], lambda size: allocate(10**9), device="cuda", what="a sweep"
        )
    with pytest.raises(ValueError, match="boom"):
        memory.allocate_shrinking(
            [10], lambda size: (_ for _ in ()).throw(ValueError("boom")), device="cpu", what="x"
        )


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        ("cpu", "cpu"),
        ("CUDA", "cuda"),
        ("cuda", "cuda"),
        ("cuda:1", "cuda:1"),
        ("mps", "cpu"),
        ("xpu:0", "cpu"),
    ],
)
def test_memory_device(device: str, expected: str) -> None:
    assert memory.memory_device(device) == expected


# --------------------------------------------------------------------------- CPU quotas


@pytest.mark.parametrize(
    ("own", "files", "expected"),
    [
        ("0::/kubepods/pod1\n", {"kubepods/pod1/cpu.max": "200000 100000\n"}, 2.0),
        ("0::/kubepods/pod1\n", {"kubepods/pod1/cpu.max": "max 100000\n"}, None),
        ("0::/a/b\n", {"a/cpu.max": "150000 100000\n", "a/b/cpu.max": "400000 100000\n"}, 1.5),
        (
            "4:cpu,cpuacct:/docker/x\n",
            {
                "cpu,cpuacct/docker/x/cpu.cfs_quota_us": "50000\n",
                "cpu,cpuacct/docker/x/cpu.cfs_period_us": "100000\n",
            },
            0.5,
        ),
        ("4:cpu:/\n", {"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
    ],
)
def test_a_cgroup_cpu_quota_is_read(
    tmp_path, monkeypatch: pytest.MonkeyPatch, own: str, files: dict, expected: float | None
) -> None:
    _cgroup_tree(tmp_path, monkeypatch, own, files)
    assert container.container_cpus() == expected


def test_usable_cpus_is_the_affinity_within_the_quota(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from labkit.batching import loaders as input_pipeline

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)), raising=False)
    _cgroup_tree(tmp_path, monkeypatch, "0::/pod\n", {"pod/cpu.max": "150000 100000\n"})
    assert input_pipeline.usable_cpus() == 2  # a 1.5-CPU quota on a 64-CPU node
    _cgroup_tree(tmp_path, monkeypatch, "0::/pod\n", {"pod/cpu.max": "max 100000\n"})
    assert input_pipeline.usable_cpus() == 64


def test_the_shared_last_level_cache_counts_every_instance(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two L3 slices (AMD CCDs, or two sockets) of 32 MiB: a run on all CPUs has 64 MiB of L3."""
    from fakes import fake_cache_sysfs

    from labkit.machine import cpu

    fake_cache_sysfs(tmp_path, {n: "0-1" if n < 2 else "2-3" for n in range(4)})
    monkeypatch.setattr(cpu, "_SYS_CPU", tmp_path)
    assert cpu.shared_last_level_cache_bytes([0, 1, 2, 3]) == 64 * 1024**2
    assert cpu.shared_last_level_cache_bytes([0, 1]) == 32 * 1024**2
    assert cpu.shared_last_level_cache_bytes([7]) is None  # no such CPU: unknown
