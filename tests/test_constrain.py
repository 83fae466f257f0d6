"""tools/constrain.py: CI's smaller and busier machines (issue 13).

The cgroup logic is tested on fake cgroup trees for v2 and v1; where this
process may really make a memory-limited cgroup (root, with a memory
hierarchy mounted), one real run checks that labkit then sees the limit.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parent.parent / "tools"
sys.path.insert(0, str(TOOLS))

import constrain  # noqa: E402

GiB = 1024**3


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("8G", 8 * GiB),
        ("512M", 512 * 1024**2),
        ("8GiB", 8 * GiB),
        ("1.5G", 3 * GiB // 2),
        (str(GiB), GiB),
    ],
)
def test_sizes_parse(text: str, size: int) -> None:
    assert constrain.parse_size(text) == size


@pytest.mark.parametrize("text", ["", "8X", "-1G", "eight", "1M"])
def test_bad_sizes_say_what_was_expected(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="--memory-limit"):
        constrain.parse_size(text)


def test_cpu_lists_parse_like_taskset() -> None:
    assert constrain.parse_cpus("0") == {0}
    assert constrain.parse_cpus("0,2") == {0, 2}
    assert constrain.parse_cpus("1-3") == {1, 2, 3}
    for bad in ("", "a", "3-1"):
        with pytest.raises(argparse.ArgumentTypeError, match="--cpus"):
            constrain.parse_cpus(bad)


def _mountinfo(tmp_path: Path, v2: Path | None, v1: Path | None) -> Path:
    lines = ["22 1 0:21 / /proc rw,nosuid - proc proc rw"]
    if v2 is not None:
        lines.append(f"30 25 0:26 / {v2} rw,nosuid - cgroup2 cgroup2 rw")
    if v1 is not None:
        lines.append(f"31 25 0:27 / {v1} rw,nosuid shared:9 - cgroup cgroup rw,memory")
        lines.append(f"32 25 0:28 / {v1.parent / 'cpu'} rw - cgroup cgroup rw,cpu")
    path = tmp_path / "mountinfo"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_memory_hierarchies_are_found_v2_first(tmp_path: Path) -> None:
    v2, v1 = tmp_path / "unified", tmp_path / "v1" / "memory"
    v2.mkdir()
    v1.mkdir(parents=True)
    (v2 / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    mounts = constrain.memory_mounts(_mountinfo(tmp_path, v2, v1))
    assert mounts == [constrain.CgroupMount(2, v2), constrain.CgroupMount(1, v1)]
    (v2 / "cgroup.controllers").write_text("cpu io pids\n")  # v2 without the memory controller
    assert constrain.memory_mounts(_mountinfo(tmp_path, v2, v1)) == [constrain.CgroupMount(1, v1)]
    assert constrain.memory_mounts(tmp_path / "missing") == []


def test_a_v2_child_gets_memory_max_and_no_swap(tmp_path: Path) -> None:
    root = tmp_path / "cg2"
    root.mkdir()
    (root / "cgroup.subtree_control").write_text("cpu\n")
    group = constrain.MemoryCgroup.create(constrain.CgroupMount(2, root), 8 * GiB, "test")
    assert (root / "cgroup.subtree_control").read_text() == "+memory"
    assert (group.path / "memory.max").read_text() == str(8 * GiB)
    group.path.joinpath("memory.peak").write_text("123456\n")
    assert group.peak_bytes() == 123456
    for name in ("memory.max", "memory.peak"):
        (group.path / name).unlink()
    group.remove()
    assert not group.path.exists()


def test_a_v1_child_gets_limit_in_bytes(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    root.mkdir()
    group = constrain.MemoryCgroup.create(constrain.CgroupMount(1, root), 2 * GiB, "test")
    assert (group.path / "memory.limit_in_bytes").read_text() == str(2 * GiB)
    assert group.peak_bytes() is None  # no memory.max_usage_in_bytes in the fake


@pytest.mark.parametrize(
    ("version", "own", "made", "parent"),
    [
        (
            1,
            "4:memory:/process_api/abc\n",
            ["process_api/abc"],
            "process_api/abc",
        ),  # inside our own
        (
            2,
            "0::/user.slice/session-1.scope\n",
            ["user.slice/session-1.scope"],
            "user.slice",
        ),  # beside it
        (
            2,
            "0::/\n",
            [],
            "",
        ),  # at the root, which may hold processes and still hand down controllers
        (1, "4:memory:/docker/xyz\n", [], ""),  # no cgroup namespace: the mount is our own cgroup
    ],
)
def test_the_new_cgroup_stays_inside_every_limit_this_process_has(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int, own: str, made: list, parent: str
) -> None:
    root = tmp_path / "cg"
    for folder in made:
        (root / folder).mkdir(parents=True)
    root.mkdir(exist_ok=True)
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text(own)
    monkeypatch.setattr(constrain, "PROC_SELF_CGROUP", proc)
    assert constrain.parent_for_child(constrain.CgroupMount(version, root)) == root / parent


def test_leftover_processes_are_killed_before_the_cgroup_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    folder = tmp_path / "cg"
    folder.mkdir()
    procs = folder / "cgroup.procs"
    procs.write_text(f"{left.pid}\n")
    real_kill = os.kill

    def kill(pid: int, sig: int) -> None:  # a real cgroup forgets a dead process by itself
        real_kill(pid, sig)
        procs.write_text("")

    monkeypatch.setattr(constrain.os, "kill", kill)
    group = constrain.MemoryCgroup(constrain.CgroupMount(2, tmp_path), folder, GiB)
    try:
        group.kill_leftovers()
        assert left.wait(timeout=10) == -signal.SIGKILL
    finally:
        left.kill()
    (folder / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n")
    assert group.oom_kills() == 2


def test_exit_statuses_read_as_a_shell_reads_them(capfd: pytest.CaptureFixture[str]) -> None:
    assert constrain.main(["--", sys.executable, "-c", "raise SystemExit(3)"]) == 3
    assert (
        constrain.main(
            ["--", sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"]
        )
        == 143
    )
    assert constrain.main(["--", "no-such-command-labkit"]) == 127
    assert "'no-such-command-labkit' is not a command here" in capfd.readouterr().err


def test_a_cgroup_that_cannot_be_made_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(constrain.ConstraintError, match="no cgroup hierarchy"):
        constrain.memory_cgroup(GiB, mounts=[])
    with pytest.raises(constrain.ConstraintError, match="cannot make a memory-limited cgroup"):
        constrain.memory_cgroup(GiB, mounts=[constrain.CgroupMount(1, tmp_path / "absent")])


def test_the_command_never_runs_unconstrained(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "ran"
    monkeypatch.setattr(constrain, "memory_mounts", lambda: [])
    status = constrain.main(["--memory-limit", "8G", "--", "touch", str(marker)])
    assert status == 2 and not marker.exists()
    assert "COMMAND was not run" in capsys.readouterr().err


def test_pinned_to_one_cpu_shared_with_a_busy_process(capfd: pytest.CaptureFixture[str]) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    busy = ["--busy-cores", "1"] if len(allowed) > 1 else []
    probe = "import os; print('affinity', sorted(os.sched_getaffinity(0)))"
    status = constrain.main(["--cpus", str(allowed[0]), *busy, "--", sys.executable, "-c", probe])
    out = capfd.readouterr().out
    assert status == 0
    assert f"affinity [{allowed[0]}]" in out
    if busy:  # the busy process shares the CPU the command may use
        assert f"1 busy process(es) on CPU(s) [{allowed[0]}]" in out


def test_busy_processes_are_pinned_and_stopped() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    procs = constrain.start_busy(1, allowed)
    try:
        assert os.sched_getaffinity(procs[0].pid) == {allowed[-1]}
        assert procs[0].poll() is None
    finally:
        constrain.stop(procs)
    assert procs[0].returncode is not None
    with pytest.raises(constrain.ConstraintError, match="more than the"):
        constrain.start_busy(len(allowed) + 1, allowed)


def _can_make_cgroups() -> bool:
    return os.geteuid() == 0 and any(os.access(m.path, os.W_OK) for m in constrain.memory_mounts())


@pytest.mark.skipif(not _can_make_cgroups(), reason="needs root and a cgroup memory hierarchy")
def test_a_real_memory_limit_is_what_labkit_sees() -> None:
    probe = (
        "from labkit.machine import container, memory; c = container.container_memory(); "
        "print(c.limit_bytes, memory._host_available_bytes() <= c.limit_bytes)"
    )
    done = subprocess.run(
        [
            sys.executable,
            str(TOOLS / "constrain.py"),
            "--memory-limit",
            "1G",
            "--",
            sys.executable,
            "-c",
            probe,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode == 2 and "COMMAND was not run" in done.stderr:
        pytest.skip(f"no memory-limited cgroup can be made here: {done.stderr.strip()}")
    assert lines[0].startswith("constrain: memory limit 1 GiB (cgroup v")
    assert lines[1] == f"{GiB} True"
    assert lines[2].startswith("constrain: exit status 0")
