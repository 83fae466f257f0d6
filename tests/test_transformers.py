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


def test_labkit_counts_the_same_matmul_flops_as_torch_counter_at_every_shape() -> None:
    checks = model_module.check_flop_counts(SMALL, ((1, 8), (3, 16)))
    assert [c.queries for c in checks] == [8, 16, 1]  # the last is a decode step
    assert checks[-1].keys == 9
    assert all(c.agree for c in checks)
    assert set(checks[0].by_op) == {"aten.addmm", "aten.bmm"}
    assert str(checks[-1]).startswith("batch 1, 1 query over 9 keys") and "equal" in str(checks[0])


def test_model_checks_measure_causality_and_the_cache() -> None:
    result = model_module.model_checks(SMALL, tokens=12)
    assert result.parameters == result.config_parameters == SMALL.params()
    assert result.future_change == 0 and result.cache_difference < 1e-4
    assert "had no effect on the logits of tokens 0 to 10" in str(result)
    with pytest.raises(ValueError, match="tokens must be from 2 to the context"):
        model_module.model_checks(SMALL, tokens=1)


def test_int8_weights_quarter_the_bytes_and_stay_close() -> None:
    from labkit.transformers.quantize import Int8WeightLinear, quantize_int8_weights, stored_bytes

    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 32)
    q = Int8WeightLinear(linear)
    assert q.weight_int8.dtype == torch.int8 and q.weight_int8.abs().max() == 127
    x = torch.randn(5, 3, 64)
    with torch.no_grad():
        rel = (q(x) - linear(x)).abs().max() / linear(x).abs().max()
    assert q(x).shape == (5, 3, 32) and rel < 0.02
    model = model_module.TinyGPT(SMALL)
    quantized = quantize_int8_weights(model)
    assert not any(isinstance(m, torch.nn.Linear) for m in quantized.modules())
    assert any(isinstance(m, torch.nn.Linear) for m in model.modules())  # a copy, not in place
    assert stored_bytes(quantized) < stored_bytes(model) / 2


def test_int8_without_a_fused_kernel_dequantizes(monkeypatch: pytest.MonkeyPatch) -> None:
    from labkit.transformers import quantize

    monkeypatch.setattr(quantize, "int8_kernel_problem", lambda device, dtype: "no kernel")
    torch.manual_seed(0)
    linear = torch.nn.Linear(16, 8)
    with torch.no_grad():
        out = quantize.Int8WeightLinear(linear)(torch.ones(2, 16))
        assert (out - linear(torch.ones(2, 16))).abs().max() < 0.05


def test_the_precision_sweep_reads_fewer_bytes_and_reports_the_error() -> None:
    from labkit.transformers.quantize import precision_sweep

    sweep = precision_sweep(config=SMALL, prompt=8, batch=2, rounds=2, warmup_ms=1.0, rep_ms=5.0)
    f32, bf16, int8 = (sweep.run(v) for v in ("float32", "bfloat16", "int8"))
    assert bf16.weight_bytes < 0.6 * f32.weight_bytes and int8.weight_bytes < bf16.weight_bytes
    assert f32.rms_rel_error == 0 and f32.top1_agreement == 1
    assert 0 < bf16.rms_rel_error < 0.1 and 0 < int8.rms_rel_error < 0.1
    assert int8.tokens_per_s == pytest.approx(2e3 / int8.median_ms)
    text = str(sweep)
    assert "same top token" in text and text.count("\n") >= 4
    with pytest.raises(ValueError, match="variants"):
        precision_sweep(("float64",), config=SMALL)
    with pytest.raises(KeyError, match="no variant 'fp8'"):
        sweep.run("fp8")


def test_compiling_a_block_reports_cold_warm_and_steady(monkeypatch: pytest.MonkeyPatch) -> None:
    from labkit.transformers import compiled

    seen = {}

    def fake(fn, x, **options):  # the timing itself is labkit.accel's, tested there
        seen.update(options, shape=tuple(x.shape), out=tuple(fn(x).shape))
        return "result"

    monkeypatch.setattr("labkit.accel.compilers.torch_compile_benchmark", fake)
    assert compiled.compile_block_benchmark(SMALL, batch=2, seq_len=8, rep_ms=5.0) == "result"
    assert seen["shape"] == seen["out"] == (2, 8, SMALL.d_model) and seen["rep_ms"] == 5.0
    with pytest.raises(ValueError, match=r"seq_len \(64\) exceeds the config's context \(32\)"):
        compiled.compile_block_benchmark(SMALL, seq_len=64)


def test_the_gpu_prediction_is_bandwidth_over_bytes_and_says_what_the_sheet_lacks() -> None:
    from labkit.machine.published import gpu_spec
    from labkit.transformers import gpu_prediction as gp

    h100 = gp.predict_attention(gpu_spec("H100 SXM5 80GB"))
    text = str(h100)
    weights = 2 * gp.DECODE_PARAMS
    assert (
        f"at most {3350e9 / (weights + gp.kv_cache_bytes(32, 8, 128, 4096)):,.0f} tokens/s" in text
    )
    assert "floor is the FLOPs at the BF16 peak" in text and "Published figures" in text
    assert all("attention" in f.lessons for f in h100.figures)
    t4 = str(gp.predict_attention(gpu_spec("T4")))
    assert "no verified peak memory bandwidth for the T4" in t4 and "at most" not in t4


def test_the_plots_draw_every_group_backend_and_batch(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    from labkit.transformers import plots
    from labkit.transformers.decode import decode_sweep
    from labkit.transformers.sdpa import sdpa_sweep

    shares = plots.group_shares(SMALL, (8, 32))
    for kind in ("flops", "bytes"):
        totals = [sum(v[i] for v in shares[kind].values()) for i in range(2)]
        assert totals == pytest.approx([1.0, 1.0])
    attention = next(iter(plots.GROUPS))
    assert shares["flops"][attention][1] > shares["flops"][attention][0]  # N² against N
    axes = plots.plot_block_shares(SMALL, (8, 32))
    assert len(axes) == 2
    ax = plots.plot_step_intensity(SMALL, (8, 32), {"ridge": 10.0})
    assert len(ax.get_xticklabels()) == 12
    sweep = sdpa_sweep((32, 64), rounds=2, warmup_ms=0.5, rep_ms=2.0)
    left, right = plots.plot_sdpa(sweep)
    assert len(right.get_lines()) == len({r.backend for r in sweep.runs}) + 1
    decode = decode_sweep(
        (1, 2), config=SMALL, prompt=4, bandwidth_gb_per_s=5.0, warmup_ms=0.5, rep_ms=2.0
    )
    assert len(plots.plot_decode(decode).get_lines()) == 2
    ax.figure.savefig(tmp_path / "x.png")


def test_the_exercise_checks_name_the_usual_slips() -> None:
    from labkit import check

    assert check.kv_cache(2 * 32 * 8 * 128 * 2 * 8192)
    assert "two tensors per layer" in str(check.kv_cache(32 * 8 * 128 * 2 * 8192))
    assert "8 key/value heads" in str(check.kv_cache(2 * 32 * 32 * 128 * 2 * 8192))
    assert not check.kv_cache(None).solved
    assert check.decode_ceiling(3350 / 16)
    assert "2 bytes per parameter, not 4" in str(check.decode_ceiling(3350 / 32))
    assert check.attention_fits(["flash"]) and check.attention_fits({"flash"})
    assert "over the 2 GiB budget" in str(check.attention_fits(["math", "flash"]))
    with pytest.raises(ValueError, match="backends must name backends"):
        check.attention_fits(["flash2"])
    with pytest.raises(TypeError, match="backends must be a backend's name"):
        check.attention_fits(3)
