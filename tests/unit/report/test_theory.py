"""The theory ledger against the seeds' golden figures (docs/analyses.md items 7, 8, 12-18).

A golden figure checks a formula at the seed's own rounding; where the seed's input was a
fitted or rounded number (N = 6.75e9, weights 14.3 GB) the formula is fed that number and
the count from config.json is checked separately.
"""

from __future__ import annotations

import inspect
import json
import math

import pytest

from report.architecture import params as pa
from report.architecture import theory as th
from report.architecture.gpus import lookup_gpu
from report.ledger import Absent, Ledger
from tests import oracles as oc
from tests.conftest import FIXTURES

QWEN = FIXTURES / "models" / "qwen2.5-7b-instruct.config.json"

GIB = 1024**3


@pytest.fixture(scope="module")
def qwen() -> dict:
    return json.loads(QWEN.read_text())


@pytest.fixture(scope="module")
def shape(qwen) -> th.ModelShape:
    return th.model_shape(qwen)


def pct(x: float) -> float:
    return round(x * 100, 1)


# A small DeepSeek-V2-Lite-shaped MLA config, with a dense FFN so parameters can be counted.
MLA_CONFIG = {
    "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
    "num_hidden_layers": 27, "hidden_size": 2048, "num_attention_heads": 16,
    "num_key_value_heads": 16, "intermediate_size": 10944, "vocab_size": 102400,
    "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
    "q_lora_rank": None, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
}


# ---------------------------------------------------------------------------------------------
# Model shape
# ---------------------------------------------------------------------------------------------


def test_qwen_shape(shape):
    assert (shape.layers, shape.hidden, shape.heads, shape.kv_heads, shape.head_dim) == (28, 3584, 28, 4, 128)
    assert (shape.intermediate, shape.vocab, shape.dtype_bytes) == (18944, 152064, 2)
    assert not shape.tied_embeddings and not shape.is_mla and shape.attention_kind == "GQA"
    assert shape.sliding_window is None      # sliding_window is null in the config


def test_explicit_head_dim_is_honoured():
    cfg = {"num_hidden_layers": 4, "hidden_size": 2048, "num_attention_heads": 8,
           "num_key_value_heads": 1, "head_dim": 256, "intermediate_size": 8192,
           "vocab_size": 1000, "torch_dtype": "bfloat16"}
    s = th.model_shape(cfg)
    assert s.head_dim == 256                 # not 2048 / 8
    assert s.attention_kind == "MQA"
    assert th.model_kv_bytes_per_token(cfg) == 2 * 4 * 1 * 256 * 2


def test_head_dim_not_derivable():
    cfg = {"num_hidden_layers": 4, "hidden_size": 1000, "num_attention_heads": 3,
           "intermediate_size": 8, "vocab_size": 10, "torch_dtype": "bfloat16"}
    with pytest.raises(Absent, match="head_dim"):
        th.model_shape(cfg)


@pytest.mark.parametrize("field", ["num_hidden_layers", "hidden_size", "num_attention_heads",
                                   "intermediate_size", "vocab_size"])
def test_missing_field_is_absent_naming_it(qwen, field):
    cfg = {k: v for k, v in qwen.items() if k != field}
    with pytest.raises(Absent, match=field):
        th.model_shape(cfg)


def test_missing_dtype_is_served_in_bf16(qwen):
    # vLLM reads a config without a dtype as float32 and serves float32 in bfloat16.
    s = th.model_shape({k: v for k, v in qwen.items() if k != "torch_dtype"})
    assert (s.dtype, s.dtype_bytes, s.config_dtype) == ("bfloat16", 2, None)


def test_missing_kv_heads_means_mha(qwen):
    cfg = {k: v for k, v in qwen.items() if k != "num_key_value_heads"}
    assert th.model_shape(cfg).kv_heads == 28


def test_dtype_field_newer_spelling(qwen):
    cfg = {k: v for k, v in qwen.items() if k != "torch_dtype"} | {"dtype": "float16"}
    assert th.model_shape(cfg).dtype_bytes == 2
    # A float32 checkpoint is served in 16-bit under --dtype auto; float32 only when asked for.
    cfg["dtype"] = "float32"
    s = th.model_shape(cfg)
    assert (s.dtype, s.dtype_bytes, s.config_dtype) == ("bfloat16", 2, "float32")
    assert th.model_shape(cfg, dtype="float32").dtype_bytes == 4


def test_unknown_dtype_is_absent(qwen):
    with pytest.raises(Absent, match="dtype"):
        th.model_shape(qwen | {"torch_dtype": "complex64"})


# ---------------------------------------------------------------------------------------------
# Item 13: KV bytes per token, pool from memory, MHA counterfactual
# ---------------------------------------------------------------------------------------------


def test_golden_kv_bytes_per_token(qwen):
    # 2 × 28 × 4 × 128 × 2 = 57,344 B = 56 KiB
    assert th.kv_bytes_per_token(28, 4, 128, 2) == 57_344
    assert th.model_kv_bytes_per_token(qwen) == 57_344
    assert th.model_kv_bytes_per_token(qwen) / 1024 == 56.0


def test_golden_pool_from_logged_gib():
    # 4.64 GiB / 56 KiB = 86,880 tokens (whole blocks of 16) vs 86,864 logged: 0.02 %
    pool = th.kv_pool_tokens_from_gib(4.64, 57_344, 16)
    assert pool == 86_880
    assert pool % 16 == 0
    assert round(abs(pool - 86_864) / 86_864 * 100, 2) == 0.02
    # The log rounds GiB to two decimals: the 86,864-token pool is 5,429 blocks, which is
    # 4.639 GiB and prints as 4.64.
    assert round(86_864 * 57_344 / GIB, 2) == 4.64
    assert th.kv_pool_tokens_from_memory(86_864 * 57_344, 57_344, 16) == 86_864


def test_pool_is_whole_blocks_not_plain_division():
    # 4.64 GiB / 57,344 B = 86,882.3 tokens; vLLM keeps whole blocks only.
    assert 4.64 * GIB / 57_344 > 86_882
    assert th.kv_pool_tokens_from_memory(4.64 * GIB, 57_344, 16) == 86_880


def test_golden_mha_counterfactual(qwen):
    mha = th.model_mha_kv_bytes_per_token(qwen)
    assert mha == 392 * 1024 == 7 * 57_344
    # 86,864 logged tokens × 56 KiB / 392 KiB = 12,409 tokens → at C=16, out 256: L ≤ 519
    pool = th.pool_tokens_at_kv_bytes(86_864, 57_344, mha)
    assert pool == 12_409
    assert th.max_input_len_at_concurrency(pool, 16, 256) == 519
    # From the GiB figure in whole MHA-sized blocks: 12,400 tokens, and still L ≤ 519.
    from_mem = th.kv_pool_tokens_from_gib(4.64, mha, 16)
    assert from_mem == 12_400
    assert th.max_input_len_at_concurrency(from_mem, 16, 256) == 519
    # Each request holding whole blocks lowers it: 775 blocks / 16 = 48 blocks = 768 tokens.
    assert oc.max_input_len_at_concurrency_whole_blocks(pool, 16, 256, 16) == 512


def test_fp8_kv_halves_bytes_and_doubles_pool(qwen):
    assert th.model_kv_bytes_per_token(qwen, "fp8") == 28_672
    assert th.model_kv_bytes_per_token(qwen, "fp8_e5m2") == 28_672
    assert th.model_kv_bytes_per_token(qwen, "auto") == 57_344
    assert th.kv_cache_dtype_bytes("fp8_e4m3", 2) == 1
    assert th.kv_pool_tokens_from_gib(4.64, 28_672, 16) == 2 * 86_880
    with pytest.raises(Absent, match="KV cache dtype"):
        th.model_kv_bytes_per_token(qwen, "int3")


def test_tensor_parallel_is_per_gpu(qwen):
    assert th.model_kv_bytes_per_token(qwen, tp=2) == 28_672       # 4 KV heads → 2 per GPU
    assert th.model_kv_bytes_per_token(qwen, tp=4) == 14_336
    # More ranks than KV heads: vLLM replicates, each rank keeps one head.
    assert th.model_kv_bytes_per_token(qwen, tp=8) == 14_336
    assert th.model_mha_kv_bytes_per_token(qwen, tp=2) == 200_704
    with pytest.raises(Absent):
        th.kv_bytes_per_token(28, 4, 128, 2, tp=0)


def test_mla_kv_bytes():
    s = th.model_shape(MLA_CONFIG)
    assert s.is_mla and s.attention_kind == "MLA"
    # One latent of 512 + 64 per layer, no separate K and V
    assert th.mla_kv_bytes_per_token(27, 512, 64, 2) == 27 * 576 * 2 == 31_104
    assert th.model_kv_bytes_per_token(MLA_CONFIG) == 31_104
    assert th.model_kv_bytes_per_token(MLA_CONFIG, "fp8") == 15_552
    # The latent is shared by all heads: TP does not split it.
    assert th.model_kv_bytes_per_token(MLA_CONFIG, tp=4) == 31_104
    # Counterfactual MHA: K of 128 + 64 and V of 128 for each of 16 heads
    assert th.model_mha_kv_bytes_per_token(MLA_CONFIG) == 27 * 16 * (192 + 128) * 2
    mla_params = pa.model_params_non_embedding(MLA_CONFIG)
    attn = 2048 * 16 * 192 + 2048 * 576 + 512 * 16 * 256 + 16 * 128 * 2048
    assert mla_params == 27 * (attn + 3 * 2048 * 10944)


def test_moe_parameters_need_the_experts_per_token():
    # Without num_experts_per_tok the active parameters are unknown: Absent, not guessed.
    cfg = MLA_CONFIG | {"n_routed_experts": 64, "moe_intermediate_size": 1408}
    with pytest.raises(Absent, match="num_experts_per_tok"):
        pa.model_params_non_embedding(cfg)
    # With it, every expert counts: 27 layers × (MLA attention + 64 × 3 × 2048 × 1408 + router).
    attn = 2048 * 16 * 192 + 2048 * 576 + 512 * 16 * 256 + 16 * 128 * 2048
    total = pa.model_params_non_embedding(cfg | {"num_experts_per_tok": 6})
    assert total == 27 * (attn + 64 * 3 * 2048 * 1408 + 2048 * 64)
    # The KV footprint does not depend on the FFN.
    assert th.model_kv_bytes_per_token(cfg) == 31_104


# ---------------------------------------------------------------------------------------------
# Items 7, 8, 12: block-rounded footprints and expected KV usage
# ---------------------------------------------------------------------------------------------


def test_golden_block_rounded_footprints():
    # 80 and 72 blocks at in/out 1024/256, block 16
    assert th.request_peak_tokens(1024, 256, 16) == 80 * 16
    assert th.request_mean_tokens(1024, 256, 16) == 72 * 16


def test_golden_expected_kv_peak_c64():
    # 64 · 1280 / 86,896 = 94.3 %
    peak = th.request_peak_tokens(1024, 256, 16)
    assert pct(th.expected_kv_peak_fraction(64, peak, 86_896)) == 94.3


def test_golden_expected_kv_mean_effective_concurrency():
    # C=64 runs 62 at a time (median running): expected mean 82.2 %
    mean = th.request_mean_tokens(1024, 256, 16)
    assert pct(th.expected_kv_mean_fraction(62, mean, 86_896)) == 82.2


def test_golden_block_alignment_waste():
    # in=1000, out=256: 1,256 tokens → 79 blocks = 1,264: 8 tokens per request, 512 at C=64
    assert th.block_alignment_waste_tokens(1000, 256, 16) == 8
    assert th.block_alignment_waste_tokens(1000, 256, 16, concurrency=64) == 512
    assert th.block_alignment_waste_tokens(1024, 256, 16) == 0


def test_kv_linearity_theory_slope():
    # Item 12's theory line C·(L+out)/pool has slope C in tokens per prompt token
    ys = [16 * (L + 256) for L in (256, 512, 1024, 2048, 4096)]
    assert (ys[-1] - ys[0]) / (4096 - 256) == 16


def test_max_concurrency():
    # Round 2: 86,896 tokens hold 67 requests of 1,280; a 6.12 GiB pool would hold 89.
    assert oc.max_concurrency(86_896, 1024, 256, 16) == 67
    assert oc.max_concurrency(th.kv_pool_tokens_from_gib(6.12, 57_344, 16), 1024, 256, 16) == 89
    # Round 3 at L=4096: 86,864 / 4,352 = 19.96 → 19 whole requests (the seed rounds to 20)
    assert oc.max_concurrency(86_864, 4096, 256, 16) == 19


def test_too_small_pool_is_absent_not_zero_or_negative():
    with pytest.raises(Absent, match="cannot hold"):
        th.max_input_len_at_concurrency(1000, 16, 256)
    with pytest.raises(Absent):
        th.kv_pool_tokens_from_memory(0, 57_344, 16)
    with pytest.raises(Absent):
        th.expected_kv_peak_fraction(16, 1280, 0)


# ---------------------------------------------------------------------------------------------
# Items 15-18: parameters, weights, FLOPs, roofline
# ---------------------------------------------------------------------------------------------


def test_params_and_weights_from_config(shape):
    n = pa.model_params_non_embedding(shape)
    assert n == oc.params_non_embedding(28, 3584, 28, 4, 128, 18944) == 6_525_288_448
    assert round(n / 1e9, 2) == 6.53              # the model card's "6.53B non-embedding"
    total = n + oc.embedding_params(shape.vocab, shape.hidden, False)
    assert round(total / 1e9, 2) == 7.62          # "7.61B" with biases and norms (0.005 %)
    wb = oc.weight_bytes(n, shape.vocab, shape.hidden, shape.dtype_bytes, shape.tied_embeddings)
    assert round(wb / 1e9, 2) == 15.23            # bf16 weights with both embedding tables
    step = th.weight_bytes_read_per_step(n, shape.vocab, shape.hidden, shape.dtype_bytes)
    assert round(step / 1e9, 2) == 14.14          # one step: matrices + LM head
    # The seeds' "14.3 GB" is neither count; it sits within 1.2 % of both readings below.
    assert abs(step / 1e9 - 14.3) / 14.3 < 0.012
    assert abs(wb / GIB - 14.3) / 14.3 < 0.012
    assert round(wb / GIB, 2) == 14.18


def test_tied_embeddings_counted_once(qwen):
    s = th.model_shape(qwen | {"tie_word_embeddings": True})
    assert s.tied_embeddings
    n = pa.model_params_non_embedding(s)
    untied = oc.weight_bytes(n, s.vocab, s.hidden, 2, False)
    tied = oc.weight_bytes(n, s.vocab, s.hidden, 2, True)
    assert untied - tied == s.vocab * s.hidden * 2
    # A step reads the LM head either way.
    assert th.weight_bytes_read_per_step(n, s.vocab, s.hidden, 2) == tied


def test_golden_flops_per_token(shape):
    # 2N with the seed's N ≈ 6.75e9 = 13.5 GFLOP; attention term 4 × 3584 × 28 = 0.000401 GFLOP
    assert oc.flops_per_token(6.75e9, 3584, 28) == 13.5e9
    attn = th.attention_flops_per_context_token(shape.attention_width, shape.layers)
    assert attn == 4 * 3584 * 28 == 401_408
    assert round(attn / 1e9, 6) == 0.000401
    assert oc.flops_per_token(6.75e9, 3584, 28, context_len=1000) == 13.5e9 + 1000 * 401_408
    # From the config: 2N = 13.05 GFLOP, with the LM head 14.14 GFLOP (the seed's fit is between)
    n = pa.model_params_non_embedding(shape)
    assert round(oc.flops_per_token(n, 3584, 28) / 1e9, 2) == 13.05
    assert 13.05e9 < 13.5e9 < 2 * (n + shape.vocab * shape.hidden)


def test_golden_ridge_point():
    # 165.2e12 / 1008e9 = 163.9 FLOP/byte
    assert round(th.ridge_flops_per_byte(165.2e12, 1008e9), 1) == 163.9
    gpu = lookup_gpu("NVIDIA GeForce RTX 4090")
    assert round(th.ridge_flops_per_byte(gpu.peak_flops("bf16"), gpu.memory_bandwidth), 1) == 163.9


def test_golden_prefill_arithmetic_intensity():
    # L × 13.5 GFLOP / 14.3 GB: 242 at L=256, 3,867 at L=4096
    assert round(th.prefill_arithmetic_intensity(256, 6.75e9, 14.3e9)) == 242
    assert round(th.prefill_arithmetic_intensity(4096, 6.75e9, 14.3e9)) == 3867


def test_golden_decode_arithmetic_intensity():
    # 216 GFLOP (16 × 13.5) over weights + 16 × L × 56 KiB: 14.9 at L=256 falling to 12.0 at 4096
    per_token = oc.flops_per_token(6.75e9, 3584, 28)
    assert 16 * per_token == 216e9
    ai = {L: th.decode_step_arithmetic_intensity(16, per_token, 14.3e9, L * 57_344) for L in (256, 4096)}
    assert round(ai[256], 1) == 14.9 and round(ai[4096], 1) == 12.0
    assert ai[256] < th.ridge_flops_per_byte(165.2e12, 1008e9)
    # Per GPU under TP: FLOPs and weights split, per-GPU KV bytes as given
    ai2 = th.decode_step_arithmetic_intensity(16, per_token, 14.3e9, 256 * 28_672, tp=2)
    assert ai2 == pytest.approx(ai[256])


def test_golden_itl_slope():
    # 16 × 57,344 B / 1,008 GB/s = 0.00091 ms/token; measured 0.00099 → 92 %
    slope = th.itl_kv_slope_ms_per_token(16, 57_344, 1008e9)
    assert round(slope, 5) == 0.00091
    assert round(slope / 0.00099 * 100) == 92


def test_golden_mfu_mbu():
    assert pct(th.mfu(23.5e12, 165.2e12)) == 14.2
    assert pct(th.mbu(822.5e9, 1008e9)) == 81.6
    assert pct(th.mfu(87.9e12, 165.2e12)) == 53.2
    assert pct(th.mbu(436.9e9, 1008e9)) == 43.3
    # Dividing by the 2:4-sparse peak halves MFU: the report must say which peak it used.
    assert pct(th.mfu(23.5e12, 330.3e12)) == 7.1


# ---------------------------------------------------------------------------------------------
# vLLM's own estimator (vllm-observability.md §2)
# ---------------------------------------------------------------------------------------------

# Reference values printed by vllm 0.32.0's v1/metrics/perf.py (AttentionMetrics, FfnMetrics,
# UnembedMetrics, MLAAttentionMetrics) for the same inputs, per GPU.
VLLM_REF_TP1 = {
    "flops": {"attn.qkv_proj": 1895005421568, "attn.out_proj": 1473893105664,
              "attn.attn_qk": 843457757184, "attn.attn_av": 843457757184,
              "ffn.dense_ffn": 23371733532672, "unembed.unembed": 2179989504},
    "read": {"attn.qkv_input": 411242496, "attn.qkv_weight": 924844032, "attn.attn_input": 998445056,
             "attn.out_input": 411242496, "attn.out_weight": 719323136,
             "ffn.dense_up_gate_input": 411242496, "ffn.dense_up_gate_weights": 7604273152,
             "ffn.dense_silu_input": 4347420672, "ffn.dense_down_input": 2173710336,
             "ffn.dense_down_weights": 3802136576, "unembed.input": 14336, "unembed.weight": 1089994752},
    "write": {"attn.qkv_output": 528740352, "attn.kv_cache": 117497856, "attn.out_output": 411242496,
              "ffn.dense_up_gate_output": 4347420672, "ffn.dense_silu_output": 2173710336,
              "ffn.dense_down_output": 411242496, "unembed.output": 608256},
}
VLLM_REF_TP2 = {
    "flops": {"attn.qkv_proj": 947502710784, "attn.out_proj": 736946552832,
              "attn.attn_qk": 421728878592, "attn.attn_av": 421728878592,
              "ffn.dense_ffn": 11685866766336, "unembed.unembed": 1089994752},
    "read": {"attn.qkv_input": 411242496, "attn.qkv_weight": 462422016, "attn.attn_input": 499222528,
             "attn.out_input": 205621248, "attn.out_weight": 359661568,
             "ffn.dense_up_gate_input": 411242496, "ffn.dense_up_gate_weights": 3802136576,
             "ffn.dense_silu_input": 2173710336, "ffn.dense_down_input": 1086855168,
             "ffn.dense_down_weights": 1901068288, "unembed.input": 14336, "unembed.weight": 544997376},
    "write": {"attn.qkv_output": 264370176, "attn.kv_cache": 58748928, "attn.out_output": 411242496,
              "ffn.dense_up_gate_output": 2173710336, "ffn.dense_silu_output": 1086855168,
              "ffn.dense_down_output": 411242496, "unembed.output": 304128},
}


@pytest.mark.parametrize("tp,ref", [(1, VLLM_REF_TP1), (2, VLLM_REF_TP2)])
def test_vllm_estimator_matches_vllm_breakdown(shape, tp, ref):
    # One full 2,048-token prefill chunk and one decode at context 8,192 (vLLM's own example)
    step = [(2048, 2048), (1, 8192)]
    assert th.vllm_estimated_flops_terms(shape, step, tp=tp) == ref["flops"]
    assert oc.vllm_estimated_read_bytes_terms(shape, step, tp=tp) == ref["read"]
    assert oc.vllm_estimated_write_bytes_terms(shape, step, tp=tp) == ref["write"]


def test_vllm_estimator_mla_matches_vllm_breakdown():
    cfg = {"num_hidden_layers": 4, "hidden_size": 1024, "num_attention_heads": 16,
           "intermediate_size": 2816, "vocab_size": 32000, "torch_dtype": "bfloat16",
           "kv_lora_rank": 256, "qk_rope_head_dim": 32, "qk_nope_head_dim": 64, "v_head_dim": 64,
           "q_lora_rank": 384}
    s = th.model_shape(cfg)
    step = [(100, 100), (1, 50)]
    ref_flops = {"q_a_proj": 317718528, "q_b_proj": 238288896, "kv_a_proj": 238288896,
                 "kv_b_proj": 211812352, "attn_qk": 61747200, "attn_av": 41164800, "out_proj": 423624704}
    ref_read = {"q_a_input": 827392, "q_a_weight": 3145728, "q_b_input": 310272, "q_b_weight": 2359296,
                "kv_a_input": 827392, "kv_a_weight": 2359296, "kv_b_input": 206848, "kv_b_weight": 2097152,
                "attn_input": 1759744, "out_input": 413696, "out_weight": 4194304}
    ref_write = {"q_a_output": 310272, "q_b_output": 620544, "kv_a_output": 232704,
                 "kv_b_output": 827392, "kv_cache": 232704, "out_output": 827392}

    def mla(terms):
        return {k.removeprefix("mla_attn."): v for k, v in terms.items() if k.startswith("mla_attn.")}

    assert mla(th.vllm_estimated_flops_terms(s, step, tp=2)) == ref_flops
    assert mla(oc.vllm_estimated_read_bytes_terms(s, step, tp=2)) == ref_read
    assert mla(oc.vllm_estimated_write_bytes_terms(s, step, tp=2)) == ref_write


def test_vllm_estimator_decode_step_reconciles_with_theory(shape):
    # 16 decoding requests at context 384 (L=256, out 256, halfway)
    step = [(1, 384)] * 16
    n = pa.model_params_non_embedding(shape)
    flops = th.vllm_estimated_flops_terms(shape, step)
    # vLLM's FLOPs = 2 per matrix parameter per token, LM head on every decode token,
    # plus the attention term 4 × d_model × layers per context token.
    lm_head = shape.vocab * shape.hidden
    attn = th.attention_flops_per_context_token(shape.attention_width, shape.layers)
    assert sum(flops.values()) == 16 * 2 * (n + lm_head) + attn * 16 * 384
    assert flops["attn.attn_qk"] + flops["attn.attn_av"] == attn * 16 * 384
    kinds = oc.vllm_estimated_read_bytes_by_kind(shape, step)
    # Weights read once per step = the theory's weight_bytes_read_per_step (14.14 GB)
    assert kinds["weights"] == th.weight_bytes_read_per_step(n, shape.vocab, shape.hidden, 2)
    # KV read = Σ context × KV bytes per token
    assert kinds["kv_cache"] == 16 * 384 * th.model_kv_bytes_per_token(shape)
    assert 0 < kinds["activations"] < 0.01 * kinds["weights"]
    write = oc.vllm_estimated_write_bytes_terms(shape, step)
    assert write["attn.kv_cache"] == 16 * th.model_kv_bytes_per_token(shape)
    # fp8 KV halves the KV read and write terms only
    fp8 = oc.vllm_estimated_read_bytes_by_kind(shape, step, kv_cache_dtype_bytes=1)
    assert fp8["kv_cache"] * 2 == kinds["kv_cache"] and fp8["weights"] == kinds["weights"]


def test_vllm_step_requests_prefill_rule():
    ctx = th.vllm_step_requests([(512, 512), (1, 300), (1, 5, True), (0, 100)])
    assert ctx.prefill_requests == 2 and ctx.prefill_tokens == 513
    assert ctx.decode_tokens == 1 and ctx.decode_context == 300
    assert ctx.logits_tokens == 3
    with pytest.raises(Absent):
        th.vllm_step_requests([(1,)])


def test_vllm_estimator_moe_is_absent():
    with pytest.raises(Absent, match="experts"):
        th.vllm_estimated_flops_terms(th.model_shape(MLA_CONFIG | {"n_routed_experts": 64}), [(1, 10)])


# ---------------------------------------------------------------------------------------------
# Contract with the ledger
# ---------------------------------------------------------------------------------------------


def test_ledger_derive_records_doc_and_absent_inputs():
    lg = Ledger()
    v = lg.derive("kv", th.kv_bytes_per_token, unit="B", layers=28, kv_heads=4, head_dim=128, dtype_bytes=2)
    assert v.value == 57_344
    assert v.doc.startswith("KV cache bytes one token takes on one GPU")
    pool = lg.derive("pool", th.kv_pool_tokens_from_memory, kv_memory_bytes=None,
                     kv_bytes_per_token=v, block_size=16)
    assert pool.value is None and "kv_memory_bytes" in str(pool.missing)
    bad = lg.derive("maxl", th.max_input_len_at_concurrency, pool_tokens=100, concurrency=16, output_len=256)
    assert bad.value is None and "cannot hold" in str(bad.missing)


def _own_functions():
    for name, obj in vars(th).items():
        if inspect.isfunction(obj) and obj.__module__ == th.__name__:
            yield name, obj
        elif inspect.isclass(obj) and obj.__module__ == th.__name__:
            yield name, obj
            for mname, member in vars(obj).items():
                f = member.fget if isinstance(member, property) else member
                if inspect.isfunction(f):
                    yield f"{name}.{mname}", f


def test_every_function_has_a_docstring():
    missing = [name for name, f in _own_functions() if not (inspect.getdoc(f) or "").strip()]
    assert not missing, f"functions without a docstring: {missing}"


def test_public_quantity_docstrings_are_one_line():
    long = [name for name, f in _own_functions()
            if inspect.isfunction(f) and not name.startswith("_") and "\n" in inspect.getdoc(f).strip()]
    assert not long, f"docstrings longer than one line: {long}"


def test_no_quantity_returns_nan_or_inf_for_seed_inputs(shape):
    values = [
        th.ridge_flops_per_byte(165.2e12, 1008e9),
        th.expected_kv_peak_fraction(64, 1280, 86_896),
        th.itl_kv_slope_ms_per_token(16, 57_344, 1008e9),
    ]
    assert all(math.isfinite(v) for v in values)


# ---------------------------------------------------------------------------------------------
# GPU spec table (report/data/gpus.toml)
# ---------------------------------------------------------------------------------------------

NVML_NAMES = ["NVIDIA GeForce RTX 4090", "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3",
              "NVIDIA H100 PCIe", "NVIDIA H200", "NVIDIA L40S", "NVIDIA L4", "NVIDIA B200"]


def test_gpu_table_rtx_4090_golden():
    g = lookup_gpu("NVIDIA GeForce RTX 4090")
    assert g.peak_flops("bf16") == pytest.approx(165.2e12)
    assert g.peak_flops("bfloat16", sparse=True) == pytest.approx(330.3e12)
    assert g.memory_bandwidth == pytest.approx(1008e9)
    assert g.power_limit_w == 450
    assert g.peak_label("bfloat16") == "dense bf16 tensor peak"


@pytest.mark.parametrize("name", NVML_NAMES)
def test_gpu_table_rows_are_complete(name):
    g = lookup_gpu(name)
    assert g is not None and g.name == name
    assert g.source
    assert g.memory_bandwidth > 0 and g.power_limit_w > 0 and g.memory_bytes > 0
    dense, sparse = g.peak_flops("bf16"), g.peak_flops("bf16", sparse=True)
    assert sparse == pytest.approx(2 * dense, rel=0.02)      # 2:4 sparsity doubles it (L40S: 362.05 vs 733)
    assert g.peak_flops("fp16") == dense


def test_gpu_lookup_matching():
    assert lookup_gpu("nvidia geforce rtx 4090").name == "NVIDIA GeForce RTX 4090"
    assert lookup_gpu("RTX 4090").name == "NVIDIA GeForce RTX 4090"
    assert lookup_gpu("  NVIDIA  H200 ").name == "NVIDIA H200"
    assert lookup_gpu("h100 sxm").name == "NVIDIA H100 80GB HBM3"
    assert lookup_gpu("A100-SXM4-80GB").name == "NVIDIA A100-SXM4-80GB"
    assert lookup_gpu("L4").name == "NVIDIA L4"        # not L40S
    assert lookup_gpu("NVIDIA GeForce RTX 3090") is None
    assert lookup_gpu("") is None


def test_gpu_without_fp8_is_absent():
    a100 = lookup_gpu("NVIDIA A100-SXM4-80GB")
    with pytest.raises(Absent, match="fp8"):
        a100.peak_flops("fp8")
    assert lookup_gpu("NVIDIA H200").peak_flops("fp8_e4m3") == pytest.approx(1978.9e12)


def test_gpu_overrides(tmp_path):
    # Override one field of a known row, and add a row of one's own.
    g = lookup_gpu("RTX 4090", {"rtx-4090": {"memory_bandwidth_gbs": 900}})
    assert g.memory_bandwidth == pytest.approx(900e9) and g.peak_flops() == pytest.approx(165.2e12)
    own = {"lab-card": {"name": "Lab Card X", "aliases": ["labx"], "memory_bandwidth_gbs": 100,
                        "bf16_tflops": {"dense": 10}}}
    x = lookup_gpu("LABX", own)
    assert x.name == "Lab Card X" and x.power_limit_w is None and x.memory_bytes is None
    with pytest.raises(Absent):
        x.peak_flops("bf16", sparse=True)
    toml = tmp_path / "gpus.toml"
    toml.write_text('[gpu.lab-card]\nname = "Lab Card Y"\nmemory_bandwidth_gbs = 50\n')
    assert lookup_gpu("lab card y", toml).memory_bandwidth == pytest.approx(50e9)
    with pytest.raises(ValueError, match="unknown field"):
        lookup_gpu("x", {"bad": {"name": "x", "memory_bandwidth_gbs": 1, "tflops": 3}})
