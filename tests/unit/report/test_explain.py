"""`serving-ledger explain`: the capacity planner's JSON, text and exit status."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from report.planner.listing import JSON_KEYS
from serving_ledger.cli import main as serving_ledger_main
from tests.conftest import FIXTURES, ROOT


def explain(argv: list[str]) -> int:
    """`serving-ledger explain ARGV`'s exit status."""
    return serving_ledger_main(["explain", *argv])

QWEN = FIXTURES / "models" / "qwen2.5-7b-instruct.config.json"
REPO = ROOT

REQUIRED_KEYS = {
    "kv_bytes_per_token", "kv_pool_tokens", "peak_flops", "peak_bandwidth", "ridge_flops_per_byte",
    "expected_kv_peak_fraction", "expected_kv_mean_fraction", "max_concurrency",
    "max_input_len_at_concurrency", "itl_kv_slope_ms_per_token", "decode_arithmetic_intensity",
    "prefill_arithmetic_intensity", "weight_bytes", "params_non_embedding",
    "mha_kv_bytes_per_token", "mha_kv_pool_tokens", "mha_max_input_len_at_concurrency",
}


@pytest.fixture(scope="module")
def qwen_path() -> str:
    return str(QWEN)


def run_json(capsys, *argv: str) -> dict:
    assert explain([*argv, "--json"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    return json.loads(out)


def run_fail(capsys, *argv: str) -> str:
    rc = explain(list(argv))
    cap = capsys.readouterr()
    assert rc == 2
    assert cap.out == ""
    err = cap.err.strip()
    assert err and "\n" not in err, f"expected one line on stderr, got {cap.err!r}"
    assert "Traceback" not in err
    return err


def test_json_round3_seed(capsys, qwen_path):
    j = run_json(capsys, "--model", qwen_path, "--gpu", "NVIDIA GeForce RTX 4090",
                 "--concurrency", "16", "--input-len", "256", "--output-len", "256",
                 "--kv-pool-tokens", "86864")
    assert REQUIRED_KEYS <= set(j)
    assert set(JSON_KEYS) <= set(j)
    assert not any(isinstance(v, (dict, list)) for v in j.values()), "JSON must be flat"
    assert j["kv_bytes_per_token"] == 57_344
    assert j["kv_pool_tokens"] == 86_864
    assert j["peak_flops"] == pytest.approx(165.2e12)
    assert j["peak_flops_sparse"] == pytest.approx(330.3e12)
    assert j["peak_bandwidth"] == pytest.approx(1008e9)
    assert round(j["ridge_flops_per_byte"], 1) == 163.9
    assert round(j["itl_kv_slope_ms_per_token"], 5) == 0.00091
    assert j["mha_kv_bytes_per_token"] == 401_408
    assert j["mha_kv_pool_tokens"] == 12_409
    assert j["mha_max_input_len_at_concurrency"] == 519
    assert j["params_non_embedding"] == 6_525_288_448
    assert round(j["weight_bytes"] / 1e9, 2) == 15.23
    assert round(j["weight_bytes_read_per_step"] / 1e9, 2) == 14.14
    assert j["peak_flops_kind"] == "dense bf16 tensor peak"
    assert 12 <= j["decode_arithmetic_intensity"] <= 16
    assert j["prefill_arithmetic_intensity"] > j["ridge_flops_per_byte"]


def test_json_round2_seed_expected_kv(capsys, qwen_path):
    j = run_json(capsys, "--model", qwen_path, "--gpu", "rtx 4090", "--concurrency", "64",
                 "--input-len", "1024", "--output-len", "256", "--kv-pool-tokens", "86896")
    assert round(j["expected_kv_peak_fraction"] * 100, 1) == 94.3
    assert j["request_peak_tokens"] == 1280 and j["request_mean_tokens"] == 1152
    assert j["max_concurrency"] == 67
    assert j["block_alignment_waste_tokens"] == 0
    # The MHA pool cannot take 64 requests of 256 output tokens: null, never 0
    assert j["mha_max_input_len_at_concurrency"] is None


def test_json_from_logged_gib_is_whole_blocks(capsys, qwen_path):
    j = run_json(capsys, "--model", qwen_path, "--gpu", "NVIDIA GeForce RTX 4090", "--kv-memory-gib", "4.64",
                 "--concurrency", "16", "--input-len", "256", "--output-len", "256")
    assert j["kv_pool_tokens"] == 86_880
    assert j["mha_kv_pool_tokens"] == 12_400
    assert j["mha_max_input_len_at_concurrency"] == 519


def test_json_nulls_without_workload_or_pool(capsys, qwen_path):
    j = run_json(capsys, "--model", qwen_path, "--gpu", "H200")
    assert j["gpu"] == "NVIDIA H200"
    for k in ("kv_pool_tokens", "expected_kv_peak_fraction", "max_concurrency",
              "max_input_len_at_concurrency", "itl_kv_slope_ms_per_token",
              "decode_arithmetic_intensity", "prefill_arithmetic_intensity", "mha_kv_pool_tokens"):
        assert j[k] is None, k
    assert j["kv_bytes_per_token"] == 57_344 and j["ridge_flops_per_byte"] > 0


def test_fp8_and_tp(capsys, qwen_path):
    j = run_json(capsys, "--model", qwen_path, "--gpu", "H100 SXM", "--kv-dtype", "fp8", "--tp", "2",
                 "--kv-memory-gib", "10")
    assert j["kv_bytes_per_token"] == 2 * 28 * 2 * 128 * 1
    assert j["kv_pool_tokens"] == (10 * 1024**3 // (14_336 * 16)) * 16
    assert j["peak_flops"] == pytest.approx(989.4e12)


def test_directory_and_mla(capsys, tmp_path):
    cfg = {"num_hidden_layers": 27, "hidden_size": 2048, "num_attention_heads": 16,
           "num_key_value_heads": 16, "intermediate_size": 10944, "vocab_size": 102400,
           "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
           "torch_dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    j = run_json(capsys, "--model", str(tmp_path), "--gpu", "L40S", "--kv-pool-tokens", "100000",
                 "--concurrency", "8", "--input-len", "1000", "--output-len", "200")
    assert j["attention"] == "MLA"
    assert j["kv_bytes_per_token"] == 27 * 576 * 2
    assert j["mha_kv_pool_tokens"] < j["kv_pool_tokens"]


def test_text_en_and_zh(capsys, qwen_path):
    argv = ["--model", qwen_path, "--gpu", "NVIDIA GeForce RTX 4090", "--concurrency", "16",
            "--input-len", "256", "--output-len", "256", "--kv-pool-tokens", "86864"]
    assert explain(argv + ["--lang", "en"]) == 0
    en = capsys.readouterr().out
    assert "12,409" in en and "519" in en and "57,344" in en
    assert "If this were MHA" in en and "dense bf16" in en
    assert explain(argv + ["--lang", "zh"]) == 0
    zh = capsys.readouterr().out
    assert "池子只能放 12,409 个 token" in zh and "L 最多 519" in zh


def test_text_says_why_a_value_is_missing(capsys, qwen_path):
    assert explain(["--model", qwen_path, "--gpu", "L4"]) == 0
    out = capsys.readouterr().out
    assert "give --kv-memory-gib or --kv-pool-tokens" in out
    assert "--concurrency" in out


def test_bad_inputs_exit_2(capsys, qwen_path, tmp_path):
    assert "no model config" in run_fail(capsys, "--model", str(tmp_path / "nope.json"), "--gpu", "L4")
    assert "no model config" in run_fail(capsys, "--model", str(tmp_path), "--gpu", "L4")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert "not valid JSON" in run_fail(capsys, "--model", str(bad), "--gpu", "L4")
    arr = tmp_path / "arr.json"
    arr.write_text("[1, 2]")
    assert "JSON object" in run_fail(capsys, "--model", str(arr), "--gpu", "L4")
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"hidden_size": 8, "num_attention_heads": 2}))
    assert "num_hidden_layers" in run_fail(capsys, "--model", str(partial), "--gpu", "L4")
    err = run_fail(capsys, "--model", qwen_path, "--gpu", "Voodoo 3")
    assert "unknown GPU" in err and "NVIDIA H200" in err
    assert "--bogus" in run_fail(capsys, "--model", qwen_path, "--gpu", "L4", "--bogus")
    assert "--tp" in run_fail(capsys, "--model", qwen_path, "--gpu", "L4", "--tp", "0")
    assert "--tp" in run_fail(capsys, "--model", qwen_path, "--gpu", "L4", "--tp", "two")
    assert "--kv-dtype" in run_fail(capsys, "--model", qwen_path, "--gpu", "L4", "--kv-dtype", "int4")
    assert "not allowed" in run_fail(capsys, "--model", qwen_path, "--gpu", "L4",
                                     "--kv-memory-gib", "4", "--kv-pool-tokens", "100")
    assert "--model" in run_fail(capsys, "--gpu", "L4")
    assert "--kv-memory-gib" in run_fail(capsys, "--model", qwen_path, "--gpu", "L4", "--kv-memory-gib", "-1")


def test_module_entry_point_no_traceback(tmp_path):
    r = subprocess.run([sys.executable, "-m", "serving_ledger", "explain", "--model", str(tmp_path / "x"), "--gpu", "L4"],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1
