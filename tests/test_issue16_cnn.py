"""Notebook 05 after the expert review (issue 16): the seed's shapes, page faults, one variable at a time."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from labkit import check
from labkit.machine import allocator
from labkit.timing import allocation
from labkit.timing.bench import Timing, bench
from labkit.timing.interleave import Interleaved, VariantRuns

torch = pytest.importorskip("torch")

from labkit.models import cnn_variants  # noqa: E402
from labkit.models.cnn import SeedCNN  # noqa: E402
from labkit.models.throughput import BatchThroughput  # noqa: E402

SANITIZE = Path(__file__).resolve().parents[1] / "notebooks" / "nbval_sanitize.cfg"
LINUX_GLIBC = allocator._glibc() is not None


def _sanitize(text: str) -> str:
    """Apply the sanitize file's sections in order, as nbval does."""
    body = SANITIZE.read_text(encoding="utf-8")
    pairs = re.findall(r"^regex: (.*)\nreplace: (.*)$", body, flags=re.MULTILINE)
    for pattern, replacement in pairs:
        text = re.sub(pattern, replacement, text)
    return text


# --------------------------------------------------------------------------- the seed's shapes


def test_seed_at_224_raises_unless_the_batch_is_a_multiple_of_4() -> None:
    seed = SeedCNN()
    with torch.inference_mode():
        for batch in (1, 2, 3, 5):
            with pytest.raises(RuntimeError, match=r"shape '\[-1, 32768\]' is invalid"):
                seed(torch.randn(batch, 3, 224, 224))
        assert tuple(seed(torch.randn(4, 3, 224, 224)).shape) == (49, 10)
        assert tuple(seed(torch.randn(8, 3, 224, 224)).shape) == (98, 10)
        for hw in ((64, 64), (65, 65), (32, 128)):  # any pooled map of 1,024 positions fits
            assert tuple(seed(torch.randn(1, 3, *hw)).shape) == (1, 10)


def test_a_folded_batch_fails_at_the_loss_not_silently() -> None:
    logits = SeedCNN()(torch.randn(2, 3, 128, 128))
    assert tuple(logits.shape) == (8, 10)
    with pytest.raises(ValueError, match=r"Expected input batch_size \(8\) to match target"):
        torch.nn.functional.cross_entropy(logits, torch.zeros(2, dtype=torch.long))
    assert "wrong labels" not in (SeedCNN.__doc__ or "")


def test_cnn_silent_batch_check() -> None:
    assert check.cnn_silent_batch(4, 49).passed
    assert not check.cnn_silent_batch(4, 48).passed
    assert "Batch 1 raises" in check.cnn_silent_batch(1, 12).message
    assert not check.cnn_silent_batch(8, 98).passed  # a multiple of 4, not the smallest
    assert not check.cnn_silent_batch(..., ...).passed


def test_the_flatten_hint_names_other_sizes_than_64() -> None:
    assert "65×65" in check.cnn_in_features(32 * 32 * 32).message


# --------------------------------------------------------------------------- page faults


def test_minor_faults_counts_on_this_os() -> None:
    count = allocator.minor_faults()
    if sys.platform == "win32":
        assert count is None
    else:
        assert isinstance(count, int) and count > 0


def _churn(mib: int = 40) -> Any:
    """Allocate, touch and free a buffer bigger than glibc's largest mmap threshold.

    A torch tensor, since torch's CPU allocator asks for no huge pages (NumPy
    advises them for large arrays, and then one fault maps 2 MiB).
    """

    def run() -> None:
        buffer = torch.ones(mib * 2**18)  # float32: 4 bytes each
        del buffer

    return run


#: The fault test, run in a fresh interpreter: what earlier tests allocated and freed in this
#: process (and where glibc's heap top ended up) changes whether a kept 40 MiB buffer is reused.
_FAULTS_SCRIPT = """
import torch
from labkit.machine import allocator
from labkit.timing.bench import bench

def churn():
    buffer = torch.ones(40 * 2**18)  # 40 MiB of float32, past glibc's largest mmap threshold
    del buffer

def faults(warmup_ms):
    return bench(churn, warmup_ms=warmup_ms, rep_ms=5, min_reps=3, warn=False).minor_faults_per_call

def fewest_faults(calls=6):
    # the fewest faults of single calls after two warm-up calls: a loaded machine may reclaim
    # idle kept pages now and then (CI's parallel unit stage faulted 2 calls of 3 back in),
    # but with the memory kept some call reuses it without faulting
    churn()
    churn()
    counts = []
    for _ in range(calls):
        before = allocator.minor_faults()
        churn()
        counts.append(allocator.minor_faults() - before)
    return min(counts)

fresh = faults(0)
with allocator.keep_freed_memory() as setting:
    assert setting.active and "glibc" in str(setting), setting
    kept = fewest_faults()
again = faults(0)
print(fresh, kept, again)
"""


@pytest.mark.skipif(not LINUX_GLIBC, reason="needs glibc's mallopt")
def test_keep_freed_memory_stops_the_faults() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _FAULTS_SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert out.returncode == 0, out.stderr
    fresh, kept, again = (float(v) for v in out.stdout.split())
    assert fresh > 5000  # a fresh mapping per call: one fault per 4 KiB page
    assert kept < 100, (fresh, kept, again)
    # After the restore glibc maps large requests again in most runs (again ≈ fresh), but not
    # always: in 1 of 5 runs on a 2-vCPU AMD VM every later 40 MiB request still came from the
    # heap, without faults (allocator.keep_freed_memory's docstring says so). Not asserted.
    assert again >= 0


@pytest.mark.skipif(not LINUX_GLIBC, reason="needs glibc's mallopt")
def test_a_thread_can_still_allocate_more_than_a_heap_while_memory_is_kept() -> None:
    results: list[int] = []

    def worker() -> None:
        results.append(int(torch.ones(25 * 2**20, dtype=torch.float32).sum()))

    with allocator.keep_freed_memory():
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
    assert results == [25 * 2**20]


def test_keep_freed_memory_elsewhere_says_it_did_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "_glibc", lambda: None)
    with allocator.keep_freed_memory() as setting:
        assert not setting.active and setting.allocator == "not glibc"
    assert not allocator.set_keep_freed(True).active


@pytest.mark.skipif(not LINUX_GLIBC, reason="needs glibc's mallopt")
def test_compare_allocation_counts_both_sides() -> None:
    result = allocation.compare_allocation(_churn(), rounds=2, rep_ms=5, warmup_ms=5)
    faults = result.faults_per_call
    # Returned: every call maps 40 MiB afresh. Kept: fewer (a round can still grow the heap once).
    assert faults[allocation.AS_ALLOCATED] > 5000
    assert faults[allocation.KEPT] < faults[allocation.AS_ALLOCATED]
    assert result.allocator.startswith("glibc ")
    assert "page faults per call:" in result.verdict() and str(result).startswith("glibc")


def _runs(low: float, high: float) -> Interleaved:
    """Two variants, two rounds: the kept side's per-round ratios are ``low`` and ``high``."""

    def side(label: str, medians: tuple[float, float], ratios: tuple[float, float]) -> VariantRuns:
        return VariantRuns(
            label=label,
            runs=tuple(Timing((m,)) for m in medians),
            median_ms=sum(medians) / 2,
            within_run_spread=0.01,
            between_run_spread=0.01,
            noise_between_run_spread=0.01,
            ratio=sum(ratios) / 2,
            ratio_low=min(ratios),
            ratio_high=max(ratios),
        )

    return Interleaved(
        variants=(
            side(allocation.AS_ALLOCATED, (10.0, 10.0), (1.0, 1.0)),
            side(allocation.KEPT, (10.0 / low, 10.0 / high), (low, high)),
        ),
        baseline_index=0,
        rounds=2,
    )


@pytest.mark.parametrize(
    ("faults", "low", "high", "ending"),
    [
        (8193.0, 1.3, 1.6, "faster in every round, so the faults cost time here"),
        (8193.0, 0.8, 0.9, "slower in every round, so the faults are not what costs time here"),
        (8193.0, 0.9, 1.2, "faster in some rounds only, so their cost is within the noise here"),
        (0.0, 0.9, 1.2, "this work took no page faults, so the allocator costs it nothing"),
    ],
)
def test_allocation_verdicts_are_masked(
    faults: float, low: float, high: float, ending: str
) -> None:
    result = allocation.AllocationComparison(
        allocator="glibc 2.36",
        rounds=_runs(low, high),
        faults_per_call={allocation.AS_ALLOCATED: faults, allocation.KEPT: 0.0},
    )
    assert result.verdict().endswith(ending)
    assert _sanitize(result.verdict() + "\n") == (
        "page faults per call: <faults> returned, <faults> kept; kept: <allocation verdict>\n"
    )
    assert _sanitize("glibc 2.36\n") == _sanitize("glibc 2.41\n") == "<C library>\n"


def test_transparent_hugepages_mode_is_read_and_masked() -> None:
    mode = allocator.transparent_hugepages()
    assert mode in (None, "always", "madvise", "never")
    for shown in ("always", "madvise", "never", "not reported here"):
        line = f"transparent huge pages: {shown}\n"
        assert _sanitize(line) == "transparent huge pages: <mode>\n"


def test_bench_reports_faults_per_call() -> None:
    timing = bench(lambda: None, warmup_ms=0, rep_ms=1, min_reps=3, warn=False)
    if sys.platform != "win32":
        assert timing.minor_faults_per_call is not None and timing.minor_faults_per_call >= 0
    assert "minor_faults_per_call" in timing.to_dict()


# --------------------------------------------------------------------------- one variable at a time


def _point(batch: int, rate: float, faults: float | None = 0.0, spread: float = 0.02) -> Any:
    ms = batch / rate * 1e3
    timing = Timing((ms * (1 - spread), ms, ms * (1 + spread)))
    timing = SimpleNamespace(
        q1_ms=timing.q1_ms, q3_ms=timing.q3_ms, minor_faults_per_call=faults, median_ms=ms
    )
    return BatchThroughput(
        batch_size=batch,
        image_size=64,
        images_per_s=rate,
        median_ms=ms,
        device="cpu",
        dtype="float32",
        channels_last=False,
        inference=True,
        timing=timing,
    )


def test_batch_throughput_prints_its_iqr_and_faults() -> None:
    text = str(_point(64, 1000.0, faults=8193.0))
    assert "IQR " in text and "8,193 page faults per call" in text
    assert _sanitize(text).count("<faults>") == 1


@pytest.mark.parametrize(
    ("rates", "faults", "expected"),
    [
        ((100.0, 300.0, 200.0), 8193.0, "falls below it from batch 64 (0.67 of the best, 8,193"),
        ((100.0, 300.0, 299.0), 0.0, "(within the noise of it: batch 64); no larger batch falls"),
        ((100.0, 200.0, 300.0), 0.0, "best at batch 64, 3.00× batch 1's images/s; the largest"),
    ],
)
def test_curve_verdicts_read_the_data_and_are_masked(
    rates: tuple[float, ...], faults: float, expected: str
) -> None:
    points = tuple(
        _point(b, r, faults if b == 64 else 0.0) for b, r in zip((1, 16, 64), rates, strict=True)
    )
    verdict = cnn_variants.VariantCurve("float32, channels_last", points).verdict()
    assert expected in verdict
    assert _sanitize(verdict + "\n") == "float32, channels_last: <curve verdict>\n"


class _Runs:
    def __init__(self, layout_ms: tuple[float, ...], precision_ms: tuple[float, ...]) -> None:
        self._sides = {
            "float32, channels_last": SimpleNamespace(runs=tuple(Timing((m,)) for m in layout_ms)),
            "bfloat16 autocast, NCHW": SimpleNamespace(
                runs=tuple(Timing((m,)) for m in precision_ms)
            ),
        }

    def __getitem__(self, label: str) -> Any:
        return self._sides[label]


@pytest.mark.parametrize(
    ("layout_ms", "precision_ms", "start"),
    [
        ((4.0, 5.0), (40.0, 50.0), "float32, channels_last alone was faster than"),
        ((40.0, 50.0), (4.0, 5.0), "bfloat16 autocast, NCHW alone was faster than"),
        ((4.0, 6.0), (5.0, 5.0), "neither float32, channels_last nor"),
    ],
)
def test_layout_or_precision_is_judged_round_by_round(
    layout_ms: tuple[float, ...], precision_ms: tuple[float, ...], start: str
) -> None:
    verdict = cnn_variants.layout_or_precision(_Runs(layout_ms, precision_ms))  # type: ignore[arg-type]
    assert verdict.startswith(start)
    assert _sanitize(verdict + "\n") == "<layout or precision verdict>\n"


def test_bfloat16_hardware_line_is_masked() -> None:
    line = cnn_variants.bfloat16_hardware()
    assert line.startswith("this CPU reports")
    assert _sanitize(line + "\n") == "<bfloat16 instructions>\n"
    for other in (
        "this CPU reports bfloat16 instructions: AVX512_BF16, AMX (AVX-512)",
        "this CPU reports bfloat16 instructions: BF16 (no AVX-512)",
        "this CPU reports bfloat16 instructions: AVX_NE_CONVERT (no AVX-512)",
        "this CPU reports no bfloat16 instructions (no AVX512_BF16, AMX or Arm BF16) and AVX-512",
        "this CPU reports no bfloat16 instructions (no AVX512_BF16, AMX, AVX-NE-CONVERT or Arm BF16) and AVX-512",
        "this CPU reports no bfloat16 instructions (no AVX512_BF16, AMX, AVX-NE-CONVERT or Arm BF16) and no AVX-512",
    ):
        assert _sanitize(other + "\n") == "<bfloat16 instructions>\n"


def test_measure_quick_runs_every_cpu_variant_one_batch_at_a_time() -> None:
    results = cnn_variants.measure("cpu", quick=True)
    assert [c.name for c in results.curves] == [v.name for v in cnn_variants.VARIANTS[:4]]
    assert all([p.batch_size for p in c.points] == [1, 4] for c in results.curves)
    assert results.failed == () and results.image_size == 32
    name, batch = results.most_faults()
    assert name in {c.name for c in results.curves} and batch in (1, 4)
    assert _sanitize(f"{name}, batch {batch}:\n") == "<the point that faulted most>:\n"
    gains = results.gains()
    assert set(gains) == {v.name for v in cnn_variants.VARIANTS[1:4]}
    kept = cnn_variants.measure("cpu", quick=True, names=["float32, NCHW"], keep_freed=True)
    assert [c.name for c in kept.curves] == ["float32, NCHW"]
    assert kept.allocator != "as the process found it" or not LINUX_GLIBC


def test_the_sweeps_match_what_the_gpu_cell_and_the_bench_run() -> None:
    from labkit.cli.bench import cnn as bench_cnn

    assert cnn_variants.SWEEPS["gpu"] == ((1, 8, 32, 128), 224)
    assert cnn_variants.SWEEPS["cpu"] == ((1, 4, 16, 64), 64)
    assert bench_cnn.CnnResults is cnn_variants.CnnResults
    names = [v.name for v in cnn_variants.variants_for("cuda")]
    assert len(names) == 6 and "float16 autocast, NCHW" in names


@pytest.mark.parametrize(
    ("names", "match"),
    [
        (["float16 autocast, NCHW"], r"not variants on cpu"),
        ("float32, NCHW", r"non-empty list"),
        ([], r"non-empty list"),
    ],
)
def test_bad_variant_names_are_named(names: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        cnn_variants.measure("cpu", quick=True, names=names)
    with pytest.raises(ValueError, match=match):
        cnn_variants.variant_steps(1, 8, "cpu", names=names)


def test_variant_steps_run_the_same_weights_in_each_layout() -> None:
    steps = cnn_variants.variant_steps(
        2, 16, "cpu", names=["float32, NCHW", "float32, channels_last"]
    )
    a, b = (steps[name]() for name in ("float32, NCHW", "float32, channels_last"))
    assert tuple(a.shape) == (2, 10) and torch.allclose(a, b, rtol=1e-4, atol=1e-5)
