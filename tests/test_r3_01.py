"""Third review of notebook 01: the cache verdict counts the run's cores, the Python gap, the split."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fakes import fake_cache_sysfs

from labkit.machine import cpu
from labkit.machine.peak import CpuPeak
from labkit.parallelism import grain, shares, sweep
from labkit.timing.bench import Timing

MiB = 1024**2


def test_thread_cache_counts_one_instance_per_thread_and_leaves_the_sum_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a 2-socket-like machine: 16 CPUs in 4 L3 instances of 32 MiB each
    fake_cache_sysfs(tmp_path, {n: f"{4 * (n // 4)}-{4 * (n // 4) + 3}" for n in range(16)})
    monkeypatch.setattr(cpu, "_SYS_CPU", tmp_path)
    every = range(16)
    assert cpu.shared_last_level_cache_bytes(every) == 128 * MiB  # unchanged for notebooks 02, 03
    assert cpu.last_level_cache_instances(every) == (32 * MiB,) * 4
    assert cpu.threads_last_level_cache_bytes(1, every) == 32 * MiB
    assert cpu.threads_last_level_cache_bytes(2, every) == 64 * MiB  # the reference profile
    assert cpu.threads_last_level_cache_bytes(64, every) == 128 * MiB  # capped by the instances
    assert cpu.threads_last_level_cache_bytes(2, [0, 1]) == 32 * MiB  # both on one instance
    assert cpu.threads_last_level_cache_bytes(2, [99]) is None  # no such CPU: unknown
    with pytest.raises(ValueError, match="threads"):
        cpu.threads_last_level_cache_bytes(0, every)


def _sweep(op: str, rates: dict[str, list[tuple[int, float]]]) -> sweep.SizeSweep:
    backends = tuple(
        sweep.BackendSweep(
            key,
            sweep.backend_label(key, op),
            "cpu",
            tuple(sweep._point(op, n, Timing(samples_ms=(ms,) * 5)) for n, ms in points),
        )
        for key, points in rates.items()
    )
    sizes = tuple(sorted({n for points in rates.values() for n, _ in points}))
    return sweep.SizeSweep(op, "float32", sizes, backends)


_PEAK = CpuPeak("test CPU", 2, "test", 2.6, "test", "AVX-512", 16, 1, 166.4, 83.2, None, ())
_MATMULS = _sweep("matmul", {"torch-1-thread": [(128, 0.1)], "torch-all-threads": [(128, 0.05)]})


def _sanitized(text: str) -> str:
    """``text`` through the sanitize file's masks, in file order (as nbval applies them)."""
    cfg = (Path(__file__).parents[1] / "notebooks" / "nbval_sanitize.cfg").read_text()
    pairs = re.findall(r"^regex: (.*)\nreplace: (.*)$", cfg, flags=re.MULTILINE)
    for pattern, replace in pairs[:-1]:  # all but [table-padding]
        text = re.sub(pattern, replace, text)
    return text


@pytest.mark.parametrize(
    ("cache", "fastest_n", "verdict"),
    [
        (64 * MiB, 1_048_576, shares.IN_CACHE),  # 12 MiB in 64 MiB
        (8 * MiB, 1_048_576, shares.BEYOND_CACHE),  # 12 MiB in 8 MiB
        (None, 1_048_576, shares.CACHE_UNKNOWN),
    ],
)
def test_cache_verdict_uses_the_runs_threads_and_says_could(
    monkeypatch: pytest.MonkeyPatch, cache: int | None, fastest_n: int, verdict: str
) -> None:
    asked: list[int] = []

    def fake(threads: int, cpus: object = None) -> int | None:
        asked.append(threads)
        return cache

    monkeypatch.setattr(cpu, "threads_last_level_cache_bytes", fake)
    monkeypatch.setattr("labkit.parallelism.threads.cpu_threads", lambda: 2)
    adds = _sweep(
        "add",
        {
            "torch-1-thread": [(fastest_n, 1.0)],
            "torch-all-threads": [(1_000, 1.0), (fastest_n, 0.1)],
        },
    )
    result = shares.peak_shares(adds, _MATMULS, _PEAK)
    assert asked == [2] and result.add_threads == 2
    assert result.last_level_cache_bytes == cache
    text = str(result)
    assert "ran from cache" not in text and "ran from main memory" not in text
    if verdict is shares.CACHE_UNKNOWN:
        assert verdict in text
    else:
        assert "its 2 threads could use" in text
        assert verdict.split("(")[0].format(threads="2 threads") in text
    if verdict is shares.IN_CACHE:
        assert "could run from cache rather than main memory" in text
    # the sanitize file masks exactly this verdict, whichever it is
    assert "<cache verdict>" in _sanitized(text)
    assert "last-level cache" not in _sanitized(text).splitlines()[2]


def test_cache_verdict_says_one_thread_in_the_singular() -> None:
    result = shares.PeakShares(100.0, 50.0, 5.0, 12 * MiB, 32 * MiB, 20.0, 50.0, 32, 2.6, 1)
    assert "its 1 thread could use (32 MiB" in str(result)


def test_python_gap_bands() -> None:
    def adds(vector_ms_at_large: float) -> sweep.SizeSweep:
        return _sweep(
            "add",
            {
                "python": [(1, 1e-3), (1_000_000, 50.0)],
                "numpy": [(1, 5e-4), (1_000_000, vector_ms_at_large)],
                "torch-1-thread": [(1, 2e-3), (1_000_000, vector_ms_at_large)],
            },
        )

    text = shares.python_gap(adds(0.1))
    assert "at n = 1 and at n = 1,000,000" in text
    assert "NumPy: 2.00× and 500×" in text  # faster at n = 1 and at the largest
    assert "torch, 1 thread: 0.50× and 500×" in text  # slower than the loop at n = 1
    assert text.endswith("every vectorised backend is at least 100× faster than the Python loop")
    assert shares.python_gap(adds(1.0)).endswith("at least 10× faster than the Python loop")
    assert shares.python_gap(adds(10.0)).endswith("less than 10× faster than the Python loop")
    assert shares.python_gap(_MATMULS) == ""  # no Python loop


def test_split_line_says_net_effect_with_both_signs() -> None:
    points = (
        grain.GrainPoint(8_192, 0.002, 0.002, 1.0, 0.9, 1.1),
        grain.GrainPoint(40_000, 0.01, 0.006, 1.6, 1.0, 2.0),
    )
    text = str(grain.GrainSweep(2, 5, points))
    assert "The net effect of splitting at n = 40,000" in text
    assert "fork and join of the pool minus the time the other threads save" in text
    assert "negative: it paid off" in text and "-4.00 µs" in text
    assert "The cost of splitting" not in text


# --- fourth review (R4-01) ---


def _fake_topology(root: Path, cores: dict[int, str]) -> None:
    """CPUs with a (package 0, core_id) each: two CPUs with one core_id are hyper-thread siblings."""
    for n, core in cores.items():
        folder = root / f"cpu{n}" / "topology"
        folder.mkdir(parents=True)
        (folder / "physical_package_id").write_text("0\n")
        (folder / "core_id").write_text(core + "\n")


def test_cpu_threads_counts_hyper_thread_siblings_of_the_affinity_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from labkit.machine import peak
    from labkit.parallelism import threads

    _fake_topology(tmp_path, {0: "0", 1: "0", 2: "1", 3: "1"})
    monkeypatch.setattr(threads._profile, "active", lambda: None)
    monkeypatch.setattr(peak, "_SYS_CPU", tmp_path)
    monkeypatch.setattr(cpu, "allowed_cpus", lambda: {0, 1, 2, 3})
    assert threads.cpu_threads() == 2  # 4 logical CPUs on 2 cores


def test_cpu_threads_without_sysfs_topology_falls_back_to_the_affinity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from labkit.machine import peak
    from labkit.parallelism import threads

    monkeypatch.setattr(threads._profile, "active", lambda: None)
    monkeypatch.setattr(peak, "_SYS_CPU", tmp_path)  # empty: no topology files
    monkeypatch.setattr(cpu, "allowed_cpus", lambda: {0})
    assert threads.cpu_threads() == 1


def test_proc_clock_caveat_names_its_kernel_source_not_a_guess_about_vms() -> None:
    from labkit.machine.peak import clock_caveat

    text = clock_caveat('/proc/cpuinfo "cpu MHz" (...)')
    assert "APERF/MPERF" in text and "proc.c" in text and "exceed" in text
    assert "most VMs" not in text


def test_sweep_add_and_matmul_docstrings_say_gpu_times_are_compute_only() -> None:
    for function in (sweep.sweep_add, sweep.sweep_matmul):
        assert "compute only" in (function.__doc__ or "")
