"""labkit.transformers (notebook 11's package): shapes, causality, the KV cache, the counts."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from labkit.transformers import (
    GPTConfig,
    block_costs,
    decode_ceiling_tokens_per_s,
    kv_cache_bytes,
)
from labkit.transformers.costs import MATMUL_STEPS

SMALL = GPTConfig(vocab=64, context=32, layers=2, heads=4, d_model=32)


def test_importing_the_package_imports_no_framework() -> None:
    code = (
        "import sys, labkit.transformers; print(sorted({'torch', 'tensorflow'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_config_errors_say_what_to_type() -> None:
    with pytest.raises(ValueError, match=r"d_model \(100\) must be a multiple of heads \(3\)"):
        GPTConfig(d_model=100, heads=3)
    with pytest.raises(ValueError, match=r"heads \(4\) must be a multiple of kv_heads \(3\)"):
        GPTConfig(heads=4, kv_heads=3)
    with pytest.raises(ValueError, match="layers must be a positive integer"):
        GPTConfig(layers=0)


def test_kv_cache_bytes_of_a_known_model() -> None:
    # Llama 2 7B: 32 layers, 32 heads of 128, float16: 0.5 MiB per token.
    assert kv_cache_bytes(32, 32, 128) == 524_288
    assert kv_cache_bytes(32, 32, 128, 4096, batch=8) == 524_288 * 4096 * 8
    assert kv_cache_bytes(32, 8, 128) == 524_288 // 4  # grouped-query attention, 8 KV heads
    with pytest.raises(ValueError, match="head_dim must be a positive integer"):
        kv_cache_bytes(32, 32, 0)


def test_decode_ceiling_is_bandwidth_over_bytes_per_step() -> None:
    # 14 GB of weights at 3,350 GB/s: at most about 239 steps/s, one token each.
    assert decode_ceiling_tokens_per_s(14 * 10**9, 0, 3350) == pytest.approx(239.3, abs=0.1)
    # Batching shares the weight reads: 8 sequences with 1 GB of cache each.
    eight = decode_ceiling_tokens_per_s(14 * 10**9, 10**9, 3350, batch=8)
    assert eight == pytest.approx(8 * 3350e9 / 22e9)
    with pytest.raises(ValueError, match="bandwidth_gb_per_s"):
        decode_ceiling_tokens_per_s(10**9, 0, 0)


def test_block_costs_add_up_and_the_softmax_is_memory_bound() -> None:
    costs = block_costs(SMALL, batch=2, queries=16)
    assert costs.flops == sum(s.flops for s in costs.steps)
    assert costs.step("scores q·kᵀ").flops == 2 * 2 * 4 * 16 * 16 * 8
    assert costs.step("softmax").flop_per_byte < 1 < costs.step("mlp up").flop_per_byte
    assert "block" in costs.table().splitlines()[-1]
    with pytest.raises(KeyError, match="no step 'attention'"):
        costs.step("attention")
    with pytest.raises(ValueError, match=r"keys \(3\) must be at least queries \(4\)"):
        block_costs(SMALL, batch=1, queries=4, keys=3)


def test_attention_grows_as_the_square_of_the_sequence() -> None:
    short, long = (block_costs(SMALL, batch=1, queries=n) for n in (64, 128))
    assert long.step("scores q·kᵀ").flops == 4 * short.step("scores q·kᵀ").flops
    assert long.step("mlp up").flops == 2 * short.step("mlp up").flops


torch = pytest.importorskip("torch")
model_module = importlib.import_module("labkit.transformers.model")


@pytest.fixture(scope="module")
def models() -> dict[str, object]:
    torch.manual_seed(0)
    sdpa = model_module.TinyGPT(SMALL, attention="sdpa").eval()
    math_ = model_module.TinyGPT(SMALL, attention="math").eval()
    math_.load_state_dict(sdpa.state_dict())
    return {"sdpa": sdpa, "math": math_}


def test_logits_have_the_vocabulary_and_both_attention_paths_agree(models: dict) -> None:
    idx = torch.randint(0, SMALL.vocab, (2, 10))
    with torch.no_grad():
        a, cache = models["sdpa"](idx)
        b, _ = models["math"](idx)
    assert a.shape == (2, 10, SMALL.vocab)
    assert len(cache) == SMALL.layers and cache[0][0].shape == (2, SMALL.heads, 10, SMALL.head_dim)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_attention_is_causal(models: dict) -> None:
    idx = torch.randint(0, SMALL.vocab, (1, 12))
    changed = idx.clone()
    changed[0, 8] = (idx[0, 8] + 1) % SMALL.vocab
    with torch.no_grad():
        a, _ = models["math"](idx)
        b, _ = models["math"](changed)
    torch.testing.assert_close(a[:, :8], b[:, :8])
    assert not torch.allclose(a[:, 8:], b[:, 8:])


@pytest.mark.parametrize("attention", ["sdpa", "math"])
def test_decoding_with_the_cache_gives_the_full_forward_pass(models: dict, attention: str) -> None:
    model = models[attention]
    idx = torch.randint(0, SMALL.vocab, (2, 9))
    with torch.no_grad():
        full, _ = model(idx)
        logits, cache = model(idx[:, :6])  # prefill
        steps = [logits[:, -1]]
        for i in range(6, 9):  # one token at a time
            logits, cache = model(idx[:, i : i + 1], cache)
            steps.append(logits[:, -1])
    torch.testing.assert_close(torch.stack(steps[1:], dim=1), full[:, 6:9], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(steps[0], full[:, 5], atol=1e-5, rtol=1e-5)


def test_grouped_query_attention_shrinks_the_cache() -> None:
    config = GPTConfig(vocab=64, context=16, layers=1, heads=4, d_model=32, kv_heads=2)
    model = model_module.TinyGPT(config)
    with torch.no_grad():
        _, cache = model(torch.zeros(1, 5, dtype=torch.long))
    assert cache[0][0].shape == (1, 2, 5, config.head_dim)
    assert sum(p.numel() for p in model.parameters()) == config.params()


def test_the_context_limit_is_a_clear_error(models: dict) -> None:
    with pytest.raises(ValueError, match="exceed the model's context of 32"):
        models["math"](torch.zeros(1, 33, dtype=torch.long))


@pytest.mark.parametrize(("batch", "queries"), [(1, 16), (3, 24)])
def test_matmul_flops_match_torch_flop_counter(models: dict, batch: int, queries: int) -> None:
    from torch.utils.flop_counter import FlopCounterMode

    block = models["math"].blocks[0]
    x = torch.randn(batch, queries, SMALL.d_model)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        block(x)
    counted = block_costs(SMALL, batch=batch, queries=queries)
    assert counter.get_total_flops() == counted.matmul_flops
    assert set(MATMUL_STEPS) <= {s.name for s in counted.steps}


def test_a_decode_step_is_counted_against_the_cache_it_reads(models: dict) -> None:
    from torch.utils.flop_counter import FlopCounterMode

    block = models["math"].blocks[0]
    with torch.no_grad():
        _, cache = block(torch.randn(2, 7, SMALL.d_model))
        with FlopCounterMode(display=False) as counter:
            block(torch.randn(2, 1, SMALL.d_model), cache)
    assert counter.get_total_flops() == block_costs(SMALL, batch=2, queries=1, keys=8).matmul_flops


def test_an_unknown_backend_names_the_choices() -> None:
    from labkit.transformers.sdpa import backend_problem

    with pytest.raises(ValueError, match="backend"):
        backend_problem("flash2")


def test_the_sdpa_sweep_times_every_backend_that_runs_and_says_why_others_do_not() -> None:
    from labkit.transformers.sdpa import sdpa_sweep

    sweep = sdpa_sweep((128, 512), rounds=2, warmup_ms=1.0, rep_ms=5.0)
    ran = {r.backend for r in sweep.runs}
    assert "math" in ran and ran | set(sweep.missing) == {"math", "flash", "efficient", "cudnn"}
    assert all(r.median_ms > 0 for r in sweep.runs)
    text = str(sweep)
    assert "peak memory" in text and all(
        f"{name}: not available here" in text for name in sweep.missing
    )
    # The math backend stores the 4 x 512 x 512 float32 scores (4 MiB) and their softmax;
    # a fused backend, where there is one, stores neither: several times less, not a close call.
    math_peak = sweep.run("math", 512).peak_bytes
    assert math_peak >= sweep.score_bytes(512)
    if "flash" in ran:
        assert sweep.run("flash", 512).peak_bytes * 2 < math_peak
    with pytest.raises(KeyError, match="no run of 'math' at N = 64"):
        sweep.run("math", 64)


def test_the_decode_sweep_counts_the_bytes_each_step_reads() -> None:
    from labkit.transformers.decode import CACHE_PASSES, decode_sweep

    sweep = decode_sweep(
        (1, 4), config=SMALL, prompt=8, bandwidth_gb_per_s=10.0, warmup_ms=1.0, rep_ms=5.0
    )
    one, four = sweep.points
    cache = kv_cache_bytes(SMALL.layers, SMALL.heads, SMALL.head_dim, 9, bytes_per_element=4)
    assert sweep.parameter_bytes == 4 * SMALL.params()
    assert four.bytes_per_step - one.bytes_per_step == CACHE_PASSES * 3 * cache
    assert four.flop_per_byte > 3 * one.flop_per_byte  # the weights' reads are shared
    assert sweep.ceiling_tokens_per_s(one) == pytest.approx(10e9 / one.bytes_per_step)
    assert one.tokens_per_s == pytest.approx(1e3 / one.median_ms)
    assert "measured/ceiling" in str(sweep)
    with pytest.raises(
        ValueError, match=r"prompt \(40\) \+ 1 new token exceeds the model's context"
    ):
        decode_sweep((1,), config=SMALL, prompt=40)
