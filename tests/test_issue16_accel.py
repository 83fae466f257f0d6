"""Notebook 04 after the expert review (issue 16): precision settings, the oneDNN analogue, verdict masks."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from labkit import check

torch = pytest.importorskip("torch")

from labkit.accel import compilers, side_by_side, tf32  # noqa: E402
from labkit.timing.bench import Timing  # noqa: E402

SANITIZE = Path(__file__).resolve().parents[1] / "notebooks" / "nbval_sanitize.cfg"


def _sanitize(text: str) -> str:
    body = SANITIZE.read_text(encoding="utf-8")
    for pattern, replacement in re.findall(r"^regex: (.*)\nreplace: (.*)$", body, flags=re.M):
        text = re.sub(pattern, replacement, text)
    return text


def test_fp32_matmul_in_bf16_restores_the_setting_and_reads_its_error() -> None:
    before = torch.backends.mkldnn.matmul.fp32_precision
    result = tf32.fp32_matmul_in_bf16(size=64, rounds=2, rep_ms=2)
    assert torch.backends.mkldnn.matmul.fp32_precision == before
    assert result.relative_error >= 0 and result.ieee_gflop_per_s > 0
    assert str(result).startswith("float32 matmul 64×64 on the CPU")


@pytest.mark.parametrize("error", [0.0, 2.5e-3])
def test_fp32_matmul_verdicts_are_masked(error: float) -> None:
    runs = {
        "ieee": SimpleNamespace(median_ms=10.0),
        "bf16": SimpleNamespace(ratio=1.0, ratio_low=0.9, ratio_high=1.1, median_ms=10.0),
    }
    result = tf32.Fp32MatmulResult(size=64, rounds=_Table(runs), relative_error=error, hardware="x")
    verdict = str(result).splitlines()[-1]
    assert _sanitize(verdict + "\n") == "<bf16 matmul verdict>\n"


class _Table:
    def __init__(self, rows: dict) -> None:
        self.rows = rows

    def __getitem__(self, key: str) -> object:
        return self.rows[key]

    def __str__(self) -> str:
        return "table"


@pytest.mark.parametrize(
    ("graph_ms", "xla_ms"),
    [((2.0, 2.0), (1.0, 1.0)), ((1.0, 1.0), (2.0, 2.0)), ((1.0, 2.0), (2.0, 1.0))],
)
def test_xla_verdicts_are_judged_per_round_and_masked(
    graph_ms: tuple[float, float], xla_ms: tuple[float, float]
) -> None:
    rounds = _Table(
        {
            "tf.function": SimpleNamespace(runs=tuple(Timing((m,)) for m in graph_ms)),
            "tf.function + XLA": SimpleNamespace(runs=tuple(Timing((m,)) for m in xla_ms)),
        }
    )
    t = Timing((1.0,))
    result = compilers.XlaResult(10, t, t, t, 0.1, 0.2, rounds=rounds)
    verdict = result.verdict()
    assert verdict.startswith("XLA against tf.function here: ")
    assert _sanitize(verdict) == "XLA against tf.function here: <xla verdict>"


def test_compile_verdicts_are_masked() -> None:
    for text in (
        "the cold compile pays for itself after n=3095 to n=4100 calls, the warm one after "
        "n=190 to n=260 (from the largest and the smallest per-round saving)",
        "the cold compile pays for itself after n=3095 to n=4100 calls "
        "(from the largest and the smallest per-round saving)",
        "the cold compile pays for itself after n=3095 calls at the median saving, but one "
        "round saved nothing, so it may never pay off",
        "the compiled version is not faster here: compiling never pays off",
    ):
        assert _sanitize(text) == "<compile verdict>"


def test_side_by_side_counts_no_input_gradient() -> None:
    t = Timing((1.0,))
    r = side_by_side.SideBySide(timings=(t,), first_losses={}, batch=256, sizes=(784, 512, 512, 10))
    layers = [784 * 512, 512 * 512, 512 * 10]
    assert r.flops_per_step == 256 * (6 * sum(layers) - 2 * layers[0])


def test_sync_lines_include_copies_masks_and_the_scaler() -> None:
    lines = check.SYNC_LINES
    assert lines["x_cpu.to('cuda')  # x_cpu in ordinary (pageable) memory"] is True
    assert lines["x_pin.to('cuda', non_blocking=True)  # x_pin pinned"] is False
    assert lines["y[y > 0]  # boolean-mask indexing"] is True
    assert lines["scaler.step(opt)  # torch.amp.GradScaler, SGD not fused"] is True
    wrong = {**lines, "scaler.step(opt)  # torch.amp.GradScaler, SGD not fused": False}
    assert "found_inf" in check.sync_points(wrong).message
