"""Third review of notebook 02: two-sided bands, the in-cache verdict against the line ratio,
the pipeline on a GPU (with fakes), the flush verdict on a disturbed run, and the detected
cache-line size (with a fake sysfs tree and a fake sysctl)."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from labkit import bandwidth
from labkit.bandwidth import layout, pipeline, references, strided
from labkit.machine import cache_line
from labkit.timing.bench import Timing

MiB = 1024**2


def _timing(*samples: float, device: str = "cpu") -> Timing:
    return Timing(tuple(samples), label="t", device=device)


# --------------------------------------------------------------------------- finding 1, 2


def _cpu(ratio: float) -> SimpleNamespace:
    def row(gb: float, name: str = "C loop c[i] = a[i] (cc -O3 -march=native -fopenmp)"):
        return SimpleNamespace(
            gb_per_s=gb, implementation=name, kernel="copy", bytes_per_array=2**29, dtype="float64"
        )

    return SimpleNamespace(
        labkit={"copy": row(20.0, "labkit"), "triad": row(20.0, "labkit")},
        references={"copy": (row(20.0),), "triad": (row(20.0),)},
        informational=(),
        c_reference=SimpleNamespace(status="ok", note=""),
        notes=(),
        ratio=lambda k: ratio,
        best_reference=lambda k: row(20.0),
    )


@pytest.mark.parametrize(
    ("ratio", "words"),
    [
        (1.18, "faster than the reference by 18%"),
        (1.10, "within 10% of the reference"),
        (0.90, "within 10% of the reference"),
        (0.89, "somewhat below the reference"),
        (0.50, "well below the reference"),
    ],
)
def test_the_reference_band_is_two_sided(ratio: float, words: str) -> None:
    text = references.format_references(_cpu(ratio))
    verdicts = [line for line in text.splitlines() if "labkit / best reference" in line]
    assert len(verdicts) == 2 and all(words in line for line in verdicts)
    if ratio > references.FASTER:
        assert "within 10%" not in text


def test_the_reference_rows_show_the_flags_and_the_verdict_names_the_loop() -> None:
    text = references.format_references(_cpu(1.0))
    assert "C loop c[i] = a[i] (cc -O3 -march=native -fopenmp)" in text  # the row: with flags
    assert "best reference (C loop c[i] = a[i]) = 1.00×" in text  # the verdict: the loop only


# --------------------------------------------------------------------------- finding 3, 7


def _strided(in_cache_2: float, line_bytes: int = 64, source: str = "sysfs"):
    slowdowns = {1: 1.0, 2: 2.0, 64: 17.0}
    in_cache = {1: 0.1, 2: 0.1 * in_cache_2, 64: 1.0}
    rows = tuple(
        strided.StridedRow(
            stride=s,
            n_elements=100,
            useful_bytes=400,
            span_bytes=400 * s,
            timing=_timing(0.01 * slowdowns[s]),
            slowdown=slowdowns[s],
            in_cache=_timing(in_cache[s] * 100 / 1e6),
            in_cache_elements=100,
        )
        for s in slowdowns
    )
    return strided.StridedResult(
        rows, "cpu", "float32", 4, line_bytes, True, 32 * MiB, line_source=source
    )


def test_the_in_cache_verdict_compares_stride_2_with_the_line_ratio() -> None:
    # 2.0× in cache at stride 2 is the line ratio itself: LLC line traffic, not the kernel
    assert "does not single out torch's strided code path" in _strided(2.0).verdicts()
    assert "does not single out" in _strided(2.5).verdicts()  # under 1.3 × 2 = 2.6
    loud = _strided(4.63).verdicts()
    assert "against 2.00× the lines" in loud and "beyond the extra lines" in loud
    assert strided.KERNEL_OVER_LINES == 1.3


def test_the_header_says_whether_the_line_size_was_reported_or_assumed() -> None:
    assert "(64-byte lines (reported by the CPU)" in str(_strided(2.0))
    assumed = str(_strided(2.0, source="assumed"))
    assert "64-byte lines (assumed: the CPU did not report its line size)" in assumed
    apple = _strided(2.0, line_bytes=128, source="sysctl")
    assert "128-byte lines (reported by the CPU)" in str(apple)
    # the model and the pair verdict follow the line size: 128-byte lines hold 32 float32
    assert apple.expected_slowdown(64) == 32 and apple.pair_slowdown(64) == 64
    assert "256-byte pairs" in apple.verdicts()


def _fake_sysfs(root: Path, sizes: dict[str, str]) -> Path:
    for index, value in sizes.items():
        (root / index).mkdir(parents=True)
        (root / index / "coherency_line_size").write_text(value + "\n")
    return root


def test_cache_line_is_read_from_sysfs(tmp_path: Path) -> None:
    root = _fake_sysfs(tmp_path, {"index0": "64", "index1": "64", "index2": "128", "index3": "x"})
    line = cache_line.cpu_cache_line(cache_dir=root, platform="linux")
    assert line == cache_line.CacheLine(128, "sysfs") and line.detected
    assert line.describe() == "128-byte lines (reported by the CPU)"


def test_cache_line_falls_back_to_an_assumed_64(tmp_path: Path) -> None:
    empty = cache_line.cpu_cache_line(cache_dir=tmp_path / "missing", platform="linux")
    assert empty == cache_line.CacheLine(64, "assumed") and not empty.detected
    assert "assumed" in empty.describe()
    odd = _fake_sysfs(tmp_path / "odd", {"index0": "0", "index1": "100"})  # not powers of two
    assert cache_line.cpu_cache_line(cache_dir=odd, platform="linux").source == "assumed"
    assert cache_line.cpu_cache_line(platform="win32").source == "assumed"


def test_cache_line_on_macos_asks_sysctl() -> None:
    line = cache_line.cpu_cache_line(platform="darwin", sysctl=lambda: "128\n")
    assert line == cache_line.CacheLine(128, "sysctl")

    def broken() -> str:
        raise OSError("no sysctl")

    assert cache_line.cpu_cache_line(platform="darwin", sysctl=broken).source == "assumed"
    assert cache_line.cpu_cache_line(platform="darwin", sysctl=lambda: "junk").source == "assumed"


def test_strided_read_uses_the_detected_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache_line, "cpu_cache_line", lambda: cache_line.CacheLine(128, "sysctl"))
    result = strided.strided_read(
        (2,), n_elements=4096, flush_cache=False, rep_ms=1.0, max_reps=3, show_progress=False
    )
    assert result.line_bytes == 128 and result.line_source == "sysctl"


# --------------------------------------------------------------------------- finding 5


def test_the_matmul_band_is_two_sided() -> None:
    class Timings:
        def __init__(self, ms: dict[str, float]) -> None:
            self.ms = ms

        def __getitem__(self, label: str) -> SimpleNamespace:
            return SimpleNamespace(median_ms=self.ms[label])

        def __str__(self) -> str:
            return "(table)"

    def costs(mmt: float) -> str:
        ms = {layout.COPY: 1.0, layout.TRANSPOSED: 1.5, "a @ b": 40.0, "a @ b.t()": mmt}
        return str(layout.LayoutCosts(side=4, timings=Timings(ms))).splitlines()[-1]

    assert "about the same" in costs(40.0) and "about the same" in costs(36.0)  # 0.90×
    assert costs(20.0).endswith("faster here.")  # 0.5× is not "about the same"
    assert costs(56.0).endswith("slower here.")
    assert "about the same" in costs(40.0 / 1.2) and "about the same" in costs(48.0)


# --------------------------------------------------------------------------- finding 4


def _breakdown(device: str, copy_ms: float = 1.0, per_round: tuple[float, ...] = (1.0,)):
    return pipeline.PipelineBreakdown(
        device=device,
        op="scale",
        n_bytes=16 * MiB,
        host_memory="pinned",
        copy_in=_timing(copy_ms, device=device),
        compute=_timing(0.01, device=device),
        copy_back=_timing(copy_ms, device=device),
        total=_timing(2 * copy_ms + 0.01, device=device),
        note="",
        rounds=len(per_round),
        total_over_sum=per_round,
    )


def test_on_a_gpu_the_copy_rate_is_one_direction_and_not_read_against_dram() -> None:
    gpu = _breakdown("cuda:0")
    assert gpu.copy_gb_per_s == pytest.approx(16 * MiB / 1e-3 / 1e9)  # n / t, not 2n / t
    assert "host to device, one direction" in gpu.table()
    assert "STREAM counting" not in gpu.table()
    # a server's DRAM (200 GB/s) against a 16.8 GB/s link copy: not "disturbed"
    assert not gpu.disturbed(200.0)
    assert gpu.copy_reading(200.0).startswith("On a GPU the copy-in crosses the host link")
    cpu = _breakdown("cpu")
    assert cpu.copy_gb_per_s == pytest.approx(2 * 16 * MiB / 1e-3 / 1e9)
    assert "STREAM counting" in cpu.table() and cpu.disturbed(200.0)


def test_the_prediction_labels_the_device_it_measured() -> None:
    on_gpu = str(pipeline.predict_gpu(_breakdown("cuda:0")))
    assert "this GPU (cuda:0) (measured) against an H100 SXM" in on_gpu
    assert "this CPU" not in on_gpu and "of this GPU's copy time" in on_gpu
    assert "on the H100 SXM5 80GB the copies take" in on_gpu
    header = on_gpu.splitlines()[1]
    assert header.split() == ["this", "GPU", "(cuda:0)", "H100", "SXM5", "80GB"]
    on_cpu = str(pipeline.predict_gpu(_breakdown("cpu")))
    assert "this CPU (measured)" in on_cpu and "on the GPU the copies take" in on_cpu
    assert "of this CPU's copy time" in on_cpu


# --------------------------------------------------------------------------- the flush verdict


def test_the_flush_verdict_is_withheld_on_a_disturbed_run() -> None:
    # copies at 33.6 GB/s (STREAM counting): fine against 40 GB/s, disturbed against 100
    unflushed, flushed = _breakdown("cpu", per_round=(1.5,)), _breakdown("cpu", per_round=(1.0,))
    assert bandwidth.flush_reading(unflushed, flushed, 40.0).startswith("Without the flush")
    assert bandwidth.flush_reading(unflushed, flushed, 100.0).startswith(
        "The flush's effect cannot"
    )
    same = _breakdown("cpu", per_round=(1.1,))
    assert bandwidth.flush_reading(same, flushed, 40.0).startswith("The flush changes little")
    slow = _breakdown("cpu", copy_ms=10.0, per_round=(1.5,))  # 3.4 GB/s
    assert bandwidth.flush_reading(slow, flushed, 40.0).startswith("The flush's effect cannot")
    assert math.isfinite(flushed.copy_gb_per_s)


# --------------------------------------------------------------------------- fourth review


def test_pair_verdict_names_the_page_cost_as_a_second_explanation() -> None:
    # R4-02-U1: a slowdown near the pair model does not prove pair fetching
    text = _strided_fourth({1: 1.0, 2: 2.0, 64: 34.0}).verdicts()
    assert "closer to lines fetched in 128-byte pairs (32.00×)" in text
    assert "the pages are another" in text and "does not separate the two" in text
    single = _strided_fourth({1: 1.0, 2: 2.0, 64: 17.0}).verdicts()
    assert "closer to single 64-byte lines" in single and "pages are another" not in single


def _strided_fourth(slowdowns: dict[int, float]) -> strided.StridedResult:
    rows = tuple(
        strided.StridedRow(
            stride=s,
            n_elements=100,
            useful_bytes=400,
            span_bytes=400 * s,
            timing=_timing(0.01 * slowdowns[s]),
            slowdown=slowdowns[s],
            in_cache=_timing(0.1 * s * 100 / 1e6),
            in_cache_elements=100,
        )
        for s in slowdowns
    )
    return strided.StridedResult(rows, "cpu", "float32", 4, 64, True)


def test_compile_stream_tries_the_no_memcpy_flag_first_and_drops_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # R4-02-U4: the copy loop is built so that GCC cannot turn it into memcpy
    from labkit.bandwidth import cstream

    seen: list[list[str]] = []

    def fake_run(cmd: list[str], **_: object) -> SimpleNamespace:
        seen.append(cmd)
        ok = cstream.NO_LOOP_TO_MEMCPY not in cmd
        if ok:
            Path(cmd[-1]).write_text("", encoding="utf-8")
        return SimpleNamespace(returncode=0 if ok else 1, stderr="unknown flag", stdout="")

    monkeypatch.setattr(cstream.subprocess, "run", fake_run)
    _, flags = cstream.compile_stream(tmp_path, "cc")
    assert seen[0][1:4] == list(cstream.FLAG_SETS[0])
    assert cstream.NO_LOOP_TO_MEMCPY in seen[0]
    assert flags == cstream.FLAG_SETS[0]


def test_sweep_plot_marks_per_thread_caches_as_an_upper_bound() -> None:
    # R4-02-U3: threads × one core's L1d/L2 is right only with one physical core per thread
    from labkit.bandwidth import plots

    assert "≤ {copies}" in Path(plots.__file__).read_text(encoding="utf-8")
