"""The capacity planner on the public configs of the models people serve (tests/fixtures/models).

Every expected figure is a hand computation written out next to its assertion. The stated
budget is 40 GiB of KV memory per GPU on an H200 with blocks of 16 tokens (the budget behind
the figures in issue 17: 40 GiB / 49,152 B per token holds 28 gpt-oss requests of 30,256
tokens, the 2× error the issue reports).
"""

from __future__ import annotations

import json
import re

import pytest

from report.architecture import fit
from report.architecture import kvlayout as K
from report.architecture import params as P
from report.architecture import theory as th
from report.architecture.modelconfig import FULL, SLIDING, parse_config_json
from report.ledger import Absent
from serving_ledger.cli import main as serving_ledger_main
from tests import oracles as oc
from tests.conftest import FIXTURES


def explain(argv: list[str]) -> int:
    """`serving-ledger explain ARGV`'s exit status."""
    return serving_ledger_main(["explain", *argv])

MODELS = FIXTURES / "models"
GIB = 1024**3
BUDGET = 40 * GIB


def config(name: str) -> dict:
    return json.loads((MODELS / f"{name}.config.json").read_text())


def shape(name: str, **kw) -> th.ModelShape:
    return th.model_shape(config(name), **kw)


def plan(capsys, name: str, *argv: str, lang: str = "en") -> dict:
    rc = explain(["--model", str(MODELS / f"{name}.config.json"), "--gpu", "H200", "--json", "--lang", lang, *argv])
    out = capsys.readouterr().out
    assert rc == 0, out
    j = json.loads(out)
    assert not any(isinstance(v, (dict, list)) for v in j.values()), "JSON must stay flat"
    return j


def fail(capsys, name_or_path: str, *argv: str) -> str:
    path = name_or_path if "/" in name_or_path else str(MODELS / f"{name_or_path}.config.json")
    rc = explain(["--model", path, "--gpu", "H200", *argv])
    cap = capsys.readouterr()
    assert rc == 2 and cap.out == ""
    err = cap.err.strip()
    assert err and "\n" not in err and "Traceback" not in err
    return err


WORKLOAD = ("--concurrency", "64", "--input-len", "30000", "--output-len", "256",
            "--kv-memory-gib", "40")


# ---------------------------------------------------------------------------------------------
# gpt-oss-20b: 12 sliding (window 128) + 12 full layers, no torch_dtype, mxfp4 experts
# ---------------------------------------------------------------------------------------------


def test_gpt_oss_published_config_plans_in_bf16(capsys):
    j = plan(capsys, "gpt-oss-20b", *WORKLOAD)
    assert (j["dtype"], j["config_dtype"]) == ("bfloat16", None)
    assert "no torch_dtype" in j["modelled"] and "bfloat16" in j["modelled"]
    # One layer: 2 (K,V) × 8 KV heads × 64 × 2 B = 2,048 B
    assert j["kv_layer_bytes_per_token"] == 2 * 8 * 64 * 2 == 2_048
    assert j["kv_bytes_per_token"] == 24 * 2_048 == 49_152               # while inside the window
    assert j["kv_bytes_per_token_beyond_window"] == 12 * 2_048 == 24_576  # full layers only
    assert (j["full_attention_layers"], j["sliding_window_layers"], j["sliding_window"]) == (12, 12, 128)
    # vLLM: two groups of 12 layers; a block is 16 tokens × 12 layers × 2,048 B
    assert (j["kv_groups"], j["kv_group_layers"]) == (2, 12)
    assert j["kv_block_bytes"] == 16 * 12 * 2_048 == 393_216
    assert j["kv_pool_blocks"] == BUDGET // 393_216 == 109_226
    # A request at 30,256 tokens: 1,891 blocks in the full group, at most ceil(128/16) + 1 = 9
    # (144 tokens) in the sliding group.
    assert j["request_peak_blocks"] == 30_256 // 16 + 9 == 1_900
    assert j["max_concurrency"] == 109_226 // 1_900 == 57
    # The old single-figure answer: 40 GiB / 49,152 B = 873,808 tokens / 30,256 = 28
    assert (BUDGET // (49_152 * 16) * 16) // 30_256 == 28
    # Longest prompt for 64 requests: each gets 109,226 // 64 = 1,706 blocks; 1,706 − 9 = 1,697
    # full blocks = 27,152 tokens of context, minus 256 output tokens.
    assert j["max_input_len_at_concurrency_whole_blocks"] == (109_226 // 64 - 9) * 16 - 256 == 26_896


def test_gpt_oss_moe_parameters_and_mxfp4_weights():
    s = shape("gpt-oss-20b")
    c = P.param_counts(s)
    attn = 2880 * 64 * 64 + 2 * 2880 * 8 * 64 + 64 * 64 * 2880            # q, k+v, o
    expert = 2880 * 2 * 2880 + 2880 * 2880                                # gate_up, down
    router = 2880 * 32
    table = 201_088 * 2880
    assert c.total == 24 * (attn + 32 * expert + router) + 2 * table == 20_907_786_240
    assert c.active_non_embedding == 24 * (attn + 4 * expert + router) == 3_028_008_960
    # mxfp4: 4 bits + one 8-bit scale per 32 values, experts only; the rest stays bf16.
    experts = 24 * 32 * expert
    rest = 24 * (attn + router) + 2 * table
    assert P.weight_bytes_in_memory(c, s) == int(experts * (0.5 + 1 / 32) + rest * 2) == 13_747_322_880


# ---------------------------------------------------------------------------------------------
# Mistral-7B-v0.1: every layer sliding (window 4,096), as vLLM applies the model-level window
# ---------------------------------------------------------------------------------------------


def test_mistral_window_is_honoured(capsys):
    j = plan(capsys, "mistral-7b-v0.1", *WORKLOAD)
    assert (j["sliding_window_layers"], j["full_attention_layers"]) == (32, 0)
    assert j["kv_bytes_per_token"] == 32 * 2 * 8 * 128 * 2 == 131_072
    assert j["kv_bytes_per_token_beyond_window"] == 0
    assert j["kv_pool_blocks"] == BUDGET // (16 * 32 * 4_096) == 20_480
    # At most ceil(4096/16) + 1 = 257 blocks (4,112 tokens) per request, however long it is
    assert j["request_peak_blocks"] == 257
    assert j["max_concurrency"] == 20_480 // 257 == 79
    assert (BUDGET // 131_072) // 30_256 == 10          # the old answer, window ignored
    assert j["max_input_len_at_concurrency"] is None    # any prompt fits: the KV stops growing
    assert j["itl_kv_slope_ms_per_token"] == 0          # past the window, longer context costs no KV reads
    assert "4,112 tokens" in j["modelled"]


# ---------------------------------------------------------------------------------------------
# Gemma-2-9B (float32 config, tying by class default) and Gemma-3-12B (text_config, head_dim default)
# ---------------------------------------------------------------------------------------------


def test_gemma2_served_in_bf16_with_tied_weights(capsys):
    j = plan(capsys, "gemma-2-9b", "--concurrency", "16", "--input-len", "8000", "--output-len", "192",
             "--kv-memory-gib", "40")
    assert (j["dtype"], j["config_dtype"], j["dtype_bytes"]) == ("bfloat16", "float32", 2)
    assert j["kv_bytes_per_token"] == 42 * 2 * 8 * 256 * 2 == 344_064     # not 688,128 in float32
    # Gemma2Config: tie_word_embeddings defaults to true; layer i is sliding when i is even.
    attn = 3584 * 16 * 256 + 2 * 3584 * 8 * 256 + 16 * 256 * 3584
    ffn = 3 * 3584 * 14336
    assert j["weight_bytes"] == (42 * (attn + ffn) + 256_000 * 3584) * 2 == 18_482_200_576
    assert (j["full_attention_layers"], j["sliding_window_layers"], j["kv_groups"]) == (21, 21, 2)
    # Block: 16 tokens × 21 layers × 8,192 B; a request of 8,192 tokens: 512 + min(512, 257)
    block = 16 * 21 * 8_192
    assert j["kv_pool_blocks"] == BUDGET // block == 15_603
    assert j["request_peak_blocks"] == 512 + 257
    assert j["max_concurrency"] == 15_603 // 769 == 20
    assert "tie_word_embeddings = True" in j["modelled"]


def test_gemma3_text_config_and_class_defaults(capsys):
    s = shape("gemma-3-12b-it")
    assert (s.head_dim, s.vocab, s.tied_embeddings, s.model_type) == (256, 262_208, True, "gemma3_text")
    assert ("head_dim", 256) in s.defaults_used
    # sliding_window_pattern 6: layers 5, 11, … 47 are full attention
    assert [i for i, k in enumerate(s.kinds) if k == FULL] == list(range(5, 48, 6))
    j = plan(capsys, "gemma-3-12b-it", *WORKLOAD)
    assert j["kv_bytes_per_token"] == 48 * 2 * 8 * 256 * 2 == 393_216    # not head_dim 3840/16 = 240
    # vLLM: 8 full + 40 sliding → 6 groups of 8; block = 16 × 8 × 8,192 B = 1 MiB
    assert (j["kv_groups"], j["kv_group_layers"], j["kv_block_bytes"]) == (6, 8, 1_048_576)
    assert j["request_peak_blocks"] == 1_891 + 5 * (1024 // 16 + 1) == 2_216
    assert j["max_concurrency"] == (BUDGET // 1_048_576) // 2_216 == 18
    assert "vision encoder" in j["not_modelled"]


# ---------------------------------------------------------------------------------------------
# Llama-3.2-11B-Vision: 8 cross-attention layers hold no KV per text token
# ---------------------------------------------------------------------------------------------


def test_llama_vision_cross_attention_layers(capsys):
    j = plan(capsys, "llama-3.2-11b-vision", *WORKLOAD)
    assert j["cross_attention_layers"] == 8
    assert j["kv_bytes_per_token"] == 32 * 2 * 8 * 128 * 2 == 131_072   # not 40 layers' 163,840
    assert j["kv_pool_blocks"] == BUDGET // (16 * 32 * 4_096) == 20_480
    assert j["max_concurrency"] == 20_480 // 1_891 == 10
    assert "image" in j["not_modelled"]


# ---------------------------------------------------------------------------------------------
# Quantized checkpoints: Qwen3-8B in bf16, fp8 (128×128 blocks) and AWQ 4-bit (groups of 128)
# ---------------------------------------------------------------------------------------------

QWEN3_MATRICES = 36 * (4096 * 48 * 128 + 32 * 128 * 4096 + 3 * 4096 * 12288)   # attention + FFN
QWEN3_TABLES = 2 * 151_936 * 4096                                                # embedding + LM head


def test_qwen3_8b_weights_by_quantization(capsys):
    assert QWEN3_MATRICES == 6_945_767_424
    bf16 = plan(capsys, "qwen3-8b")["weight_bytes"]
    assert bf16 == (QWEN3_MATRICES + QWEN3_TABLES) * 2 == 16_380_854_272
    fp8 = plan(capsys, "qwen3-8b-fp8")["weight_bytes"]
    # 1 B per weight + one float32 scale per 128 × 128 block; embeddings and LM head in bf16
    assert fp8 == QWEN3_MATRICES + QWEN3_MATRICES * 4 // (128 * 128) + QWEN3_TABLES * 2 == 9_436_782_592
    awq = plan(capsys, "qwen3-8b-awq")
    # 0.5 B per weight + per group of 128 one fp16 scale and one packed 4-bit zero (2.5 B)
    assert awq["weight_bytes"] == QWEN3_MATRICES // 2 + QWEN3_MATRICES // 128 * 5 // 2 + QWEN3_TABLES * 2
    assert awq["weight_bytes"] == 6_097_862_656
    assert awq["dtype"] == "float16" and awq["quantization"] == "awq"


# ---------------------------------------------------------------------------------------------
# Mixture of experts: total and active parameters, FLOPs from the active ones
# ---------------------------------------------------------------------------------------------


def test_moe_total_and_active_parameters():
    # Mixtral-8x7B: 32 layers of attention + 8 experts (top 2) of 3 × 4096 × 14336, router 4096 × 8
    attn, expert, router = 4096 * 48 * 128 + 32 * 128 * 4096, 3 * 4096 * 14336, 4096 * 8
    c = P.param_counts(shape("mixtral-8x7b-v0.1"))
    assert c.total == 32 * (attn + 8 * expert + router) + 2 * 32_000 * 4096 == 46_702_526_464
    assert c.active == 32 * (attn + 2 * expert + router) + 2 * 32_000 * 4096 == 12_879_659_008
    # Qwen3-30B-A3B: 48 layers, 128 experts of 3 × 2048 × 768, 8 per token
    attn, expert, router = 2048 * 40 * 128 + 32 * 128 * 2048, 3 * 2048 * 768, 2048 * 128
    c = P.param_counts(shape("qwen3-30b-a3b"))
    assert c.total == 48 * (attn + 128 * expert + router) + 2 * 151_936 * 2048 == 30_531_911_680
    assert c.active == 48 * (attn + 8 * expert + router) + 2 * 151_936 * 2048 == 3_352_821_760
    # DeepSeek-V3: MLA attention in 61 layers; 3 dense layers; 58 MoE layers of 256 routed + 1
    # shared expert of 3 × 7168 × 2048, 8 routed per token
    mla = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168
    dense, expert, router = 3 * 7168 * 18432, 3 * 7168 * 2048, 7168 * 256
    tables = 2 * 129_280 * 7168
    c = P.param_counts(shape("deepseek-v3"))
    assert c.total == 61 * mla + 3 * dense + 58 * (257 * expert + router) + tables == 671_025_397_760
    assert c.active == 61 * mla + 3 * dense + 58 * (9 * expert + router) + tables == 37_551_276_032


def test_moe_flops_come_from_active_parameters(capsys):
    j = plan(capsys, "qwen3-30b-a3b", "--concurrency", "1", "--input-len", "1000", "--output-len", "100")
    c = P.param_counts(shape("qwen3-30b-a3b"))
    assert j["flops_per_token"] == 2 * (c.active_non_embedding + 151_936 * 2048)
    # One decode token touches 8 of 128 experts per layer: E·(1 − (1 − 8/128)^1) = 8
    assert P.experts_touched(128, 8, 1) == pytest.approx(8)
    assert P.experts_touched(128, 8, 64) == pytest.approx(128 * (1 - (120 / 128) ** 64))
    expert_bytes = 48 * 8 * 3 * 2048 * 768 * 2
    non_expert = (48 * (2048 * 40 * 128 + 32 * 128 * 2048 + 2048 * 128) + 151_936 * 2048) * 2
    assert j["weight_bytes_read_per_step"] == pytest.approx(non_expert + expert_bytes, rel=1e-9)


def test_mixtral_and_deepseek_mla_kv(capsys):
    assert plan(capsys, "mixtral-8x7b-v0.1")["kv_bytes_per_token"] == 32 * 2 * 8 * 128 * 2 == 131_072
    j = plan(capsys, "deepseek-v3", "--tp", "8")
    assert j["kv_bytes_per_token"] == 61 * (512 + 64) * 2 == 70_272      # the latent, on every rank
    assert "MLA" in j["modelled"]
    assert "multi-token-prediction" in j["not_modelled"]
    # 671 B parameters in fp8 do not fit one H200 but do at TP 8: 673 GB / 8 = 84 GB per GPU
    assert j["weight_bytes_per_gpu"] == pytest.approx(j["weight_bytes"] / 8)
    assert "weights need" not in j["warnings"]
    assert "weights need" in plan(capsys, "deepseek-v3")["warnings"]


# ---------------------------------------------------------------------------------------------
# LM head FLOPs in decode arithmetic intensity
# ---------------------------------------------------------------------------------------------


def test_decode_intensity_counts_the_lm_head_flops(capsys):
    j = plan(capsys, "qwen3-8b", "--concurrency", "16", "--input-len", "1024", "--output-len", "256")
    n, head = QWEN3_MATRICES, 151_936 * 4096
    assert j["flops_per_token"] == 2 * (n + head) == 15_136_194_560
    ctx = 1024 + 128
    flops = 2 * (n + head) + 4 * 4096 * 36 * ctx
    assert j["flops_per_token_at_decode_context"] == flops
    weights_read = (n + head) * 2
    kv_read = ctx * 36 * 2 * 8 * 128 * 2
    assert j["decode_arithmetic_intensity"] == pytest.approx(16 * flops / (weights_read + 16 * kv_read))
    # Without the LM head's FLOPs the intensity would be 2·V·D ÷ FLOPs = 7.9 % lower here.
    without = 16 * (flops - 2 * head) / (weights_read + 16 * kv_read)
    assert round(1 - without / j["decode_arithmetic_intensity"], 3) == round(2 * head / flops, 3) == 0.079


# ---------------------------------------------------------------------------------------------
# Tensor parallelism and fit
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tp", ["3", "6", "1000"])
def test_tp_vllm_refuses(capsys, tp):
    err = fail(capsys, "llama-3.1-70b", "--tp", tp)
    assert f"vLLM refuses TP {tp}" in err and "64 attention heads are not divisible" in err
    assert "1, 2, 4, 8, 16, 32, 64" in err


def test_tp_kv_heads_split_or_replicated(capsys):
    assert fit.valid_tp_sizes(64, 8) == [1, 2, 4, 8, 16, 32, 64]
    # 28 query heads divide by 7, but 4 KV heads can be neither split nor replicated over 7.
    assert fit.tp_refusal(28, 4, 7).code == "reason.tp_kv_heads_replicate"
    assert "cannot be replicated" in str(fit.tp_refusal(28, 4, 7))
    assert fit.tp_refusal(128, 128, 32, mla=True) is None
    j = plan(capsys, "llama-3.1-70b", "--tp", "16")
    assert j["kv_bytes_per_token"] == 80 * 2 * 1 * 128 * 2               # one KV head per GPU
    assert "replicated on 2 GPUs" in j["modelled"]
    j = plan(capsys, "llama-3.1-70b", "--tp", "4")
    assert j["kv_bytes_per_token"] == 80 * 2 * 2 * 128 * 2 and "2 KV heads per GPU" in j["modelled"]


def test_fit_warnings(capsys):
    # Llama-3.1-70B in bf16: 141.1 GB of weights against 0.9 × 141 GB = 126.9 GB
    j = plan(capsys, "llama-3.1-70b", "--kv-memory-gib", "200")
    assert j["weight_bytes"] == pytest.approx(141.1e9, rel=1e-3)
    assert "The weights need 141.10 GB per GPU at TP 1" in j["warnings"]
    assert "more than the NVIDIA H200 has" in j["warnings"]
    # At TP 2 the weights fit; 60 GiB of KV on top of 70.6 GB does not.
    j = plan(capsys, "llama-3.1-70b", "--tp", "2", "--kv-memory-gib", "60")
    assert "weights need" not in j["warnings"] and "exceed vLLM's budget" in j["warnings"]
    assert j["kv_memory_ceiling_bytes"] == pytest.approx(0.9 * 141e9 - j["weight_bytes"] / 2)
    assert plan(capsys, "llama-3.1-70b", "--tp", "2", "--kv-memory-gib", "40")["warnings"] == ""
    # Gemma-2 cannot take 30,256-token requests: max_position_embeddings is 8,192.
    assert "more than max_model_len 8,192" in plan(capsys, "gemma-2-9b", *WORKLOAD)["warnings"]


def test_quantized_shards_must_hold_whole_groups():
    # Qwen3-8B-AWQ at TP 8: 12,288 / 8 = 1,536 = 12 groups of 128 (fine); TP 64 gives 192.
    s = shape("qwen3-8b-awq")
    assert fit.quant_tp_problem(s, 8) is None
    assert "not a multiple" in fit.quant_tp_problem(s, 64)


# ---------------------------------------------------------------------------------------------
# The KV layout against vLLM's grouping, and the dense closed forms
# ---------------------------------------------------------------------------------------------


def test_vllm_grouping_pads_uneven_kinds():
    # Gemma-3-27B-like: 10 full + 52 sliding → groups of 10; 52 sliding split into 6 groups
    # dealt round-robin (9, 9, 9, 9, 8, 8), 8 empty slots in all.
    kinds = [SLIDING if (i + 1) % 6 else FULL for i in range(62)]
    lay = K.kv_layout(kinds, 1024, 8_192, 16)
    assert lay.group_size == 10 and len(lay.groups) == 7
    assert sorted(g.layers for g in lay.groups if g.kind == SLIDING) == [8, 8, 9, 9, 9, 9]
    assert lay.padding_layers == 70 - 62 == 8
    # gpt-oss + a draft layer: 12 sliding, 13 full are close (13 < 1.5 × 12): groups of 13
    lay = K.kv_layout([SLIDING] * 12 + [FULL] * 13, 128, 2_048, 16)
    assert lay.group_size == 13 and len(lay.groups) == 2 and lay.padding_layers == 1


def test_window_alignment_and_sinks():
    lay = K.kv_layout([SLIDING], 128, 100, 16)
    # 128 tokens need 8 blocks when aligned; the window may straddle one more.
    assert [K.request_kv_blocks(lay, n) for n in (100, 128, 129, 10_000)] == [7, 8, 9, 9]
    sinks = K.kv_layout([SLIDING], 128, 100, 16, sink_tokens=4)
    assert K.request_kv_blocks(sinks, 10_000) == 9 + 1            # the sink tokens keep one block
    assert K.kv_bytes_read_per_request(sinks, 10_000) == (128 + 4) * 100


def test_layout_matches_the_dense_closed_forms():
    lay = K.kv_layout([FULL] * 28, None, 2_048, 16)               # Qwen2.5-7B: 57,344 B / 28 layers
    assert K.kv_block_bytes(lay) == 16 * 57_344
    pool = K.kv_pool_blocks(4.64 * GIB, K.kv_block_bytes(lay))
    assert pool * 16 == th.kv_pool_tokens_from_gib(4.64, 57_344, 16) == 86_880
    assert K.max_concurrency_in_pool(86_896 // 16, lay, 1024, 256) == oc.max_concurrency(86_896, 1024, 256, 16)
    assert (K.max_input_len_in_tokens(12_409, lay, 16, 256)
            == th.max_input_len_at_concurrency(12_409, 16, 256) == 519)
    assert (K.max_input_len_in_blocks(86_864 // 16, lay, 16, 256)
            == oc.max_input_len_at_concurrency_whole_blocks(86_864, 16, 256, 16))


def test_vllm_logged_kv_cache_size():
    # One full-attention group: N = blocks × block when the block divides max_model_len.
    lay = K.kv_layout([FULL] * 28, None, 2_048, 16)
    assert K.vllm_kv_cache_tokens_logged(5_429, lay, 32_768, 4_096) == 86_864
    # gpt-oss at max_model_len 131,072 with 16,384 tokens in flight: a request reserves 8,192
    # full blocks + ceil((127 + 16,384) / 16) + 1 = 1,033 sliding blocks.
    lay = K.kv_layout(shape("gpt-oss-20b").kinds, 128, 2_048, 16)
    assert K.vllm_max_concurrency_logged(109_226, lay, 131_072, 16_384) == pytest.approx(109_226 / 9_225)


# ---------------------------------------------------------------------------------------------
# Configs that must be refused in one line
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text,words", [
    ('{"num_hidden_layers": NaN}', "NaN"),
    ('{"num_hidden_layers": Infinity}', "Infinity"),
    ('{"hidden_size": 1e400}', "overflows"),
    ('{"a":' * 100 + "1" + "}" * 100, "nested"),
    ('{"a":' * 5000 + "1" + "}" * 5000, "nested"),
])
def test_hostile_json_is_one_line(capsys, tmp_path, text, words):
    p = tmp_path / "config.json"
    p.write_text(text)
    assert words in fail(capsys, str(p))
    with pytest.raises(Absent):
        parse_config_json(text)


def test_string_booleans_are_refused(capsys, tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(config("qwen3-8b") | {"tie_word_embeddings": "false"}))
    err = fail(capsys, str(p))
    assert "tie_word_embeddings must be true or false" in err and "'false'" in err
    p.write_text(json.dumps(config("gemma-3-12b-it") | {"text_config": "none"}))
    assert "text_config is not an object" in fail(capsys, str(p))
    p.write_text(json.dumps(config("gpt-oss-20b") | {"layer_types": ["linear_attention"] * 24}))
    assert "'linear_attention' is not modelled" in fail(capsys, str(p))


# ---------------------------------------------------------------------------------------------
# Both languages
# ---------------------------------------------------------------------------------------------

ASCII_NEXT_TO_CJK = re.compile(r"[\u4e00-\u9fff][,:;()]|[,:;()][\u4e00-\u9fff]")


@pytest.mark.parametrize("name", ["gpt-oss-20b", "gemma-3-12b-it", "llama-3.2-11b-vision", "deepseek-v3",
                                  "qwen3-8b-awq", "mixtral-8x7b-v0.1"])
def test_notes_in_both_languages(capsys, name):
    argv = (*WORKLOAD, "--tp", "8") if name == "deepseek-v3" else WORKLOAD
    en, zh = plan(capsys, name, *argv), plan(capsys, name, *argv, lang="zh")
    for key in ("modelled", "not_modelled", "warnings"):
        assert en[key].count("\n") == zh[key].count("\n"), key      # the same notes, one per line
        assert not ASCII_NEXT_TO_CJK.search(zh[key]), zh[key]        # full-width punctuation
    assert en["modelled"] and en["not_modelled"] and re.search(r"[\u4e00-\u9fff]", zh["modelled"])
    explain(["--model", str(MODELS / f"{name}.config.json"), "--gpu", "H200", *argv, "--lang", "zh"])
    text = capsys.readouterr().out
    assert "【已建模】" in text and "【未建模】" in text
