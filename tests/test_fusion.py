"""labkit.roofline.fusion: the unfused chain computes the fused GELU, and the bytes are counted."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from labkit.roofline import fusion  # noqa: E402


def test_unfused_chain_equals_the_fused_kernel():
    x = torch.randn(10_000)
    tmp, a, b = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
    fusion.unfused_gelu(x, tmp, a)
    fusion.fused_gelu(x, b)
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(b, torch.nn.functional.gelu(x, approximate="tanh"))


def test_fusion_example_reports_bytes_times_and_a_verdict():
    r = fusion.fusion_example(4096, rounds=2, rep_ms=1)
    assert r.unfused_bytes == 21 * 4 * 4096 and r.fused_bytes == 2 * 4 * 4096
    assert r.bytes_ratio == pytest.approx(10.5)
    assert r.speedup_low <= r.speedup <= r.speedup_high
    assert r.runs.rounds == 2
    text = str(r)
    assert "10.5× fewer when fused" in text and "every round" in text
    assert r.to_dict()["n_elements"] == 4096


def test_fusion_example_refuses_a_bad_size():
    with pytest.raises(ValueError, match="n_elements"):
        fusion.fusion_example(0)
    with pytest.raises(ValueError, match="n_elements"):
        fusion.fusion_example(2**50)
