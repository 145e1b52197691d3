"""Tensor parallel in the ledger: the TP size from the launch command or the log, the all-reduce
bytes it predicts per token (a closed form), and the measured NVLink traffic against them."""

from __future__ import annotations

import json

import pytest

from report.derive.gpu import parallel
from report.ledger import Absent
from tests.conftest import FIXTURES

QWEN = json.loads((FIXTURES / "models" / "qwen2.5-7b-instruct.config.json").read_text())
LLAMA70 = json.loads((FIXTURES / "models" / "llama-3.1-70b.config.json").read_text())


@pytest.mark.parametrize("command, tp", [
    (["python", "-m", "vllm.entrypoints.openai.api_server", "--tensor-parallel-size", "4"], 4),
    ("vllm serve m --tensor-parallel-size=2 --port 8000", 2),
    ("vllm serve m -tp 8", 8),
    ("vllm serve m --port 8000", 1),          # known command, no TP flag: vLLM's default
])
def test_tp_size_from_the_launch_command(command, tp):
    assert parallel.tensor_parallel_size(engine_command=command) == tp


def test_tp_size_from_the_log_and_unknown_without_either():
    assert parallel.tensor_parallel_size(log_args={"tensor_parallel_size": 2, "model": "m"}) == 2
    assert parallel.tensor_parallel_size(log_args={"model": "m"}) == 1
    with pytest.raises(Absent) as e:
        parallel.tensor_parallel_size()
    assert e.value.reason.code == "reason.tp_unknown"
    with pytest.raises(Absent) as e:
        parallel.tensor_parallel_size(engine_command="vllm serve m -tp two")
    assert e.value.reason.code == "reason.tp_not_a_size"


def test_allreduce_bytes_per_token_closed_form():
    # Qwen2.5-7B: hidden 3584, 28 layers, bf16. TP=2: 2·(1/2)·3584·2·2·28 = 401,408 B/token.
    assert parallel.allreduce_bytes_per_token(2, QWEN) == 401_408
    # TP=4: 2·(3/4)·3584·2·2·28 = 602,112 B/token; the per-GPU share tends to 2× the message.
    assert parallel.allreduce_bytes_per_token(4, QWEN) == 602_112
    # Llama-3.1-70B: hidden 8192, 80 layers, bf16, TP=8: 2·(7/8)·8192·2·2·80 = 4,587,520 B/token.
    assert parallel.allreduce_bytes_per_token(8, LLAMA70) == 4_587_520


def test_one_gpu_has_no_allreduce():
    with pytest.raises(Absent) as e:
        parallel.allreduce_bytes_per_token(1, QWEN)
    assert e.value.reason.code == "reason.tp_one"


def test_nvlink_against_the_predicted_allreduce():
    per_s = parallel.allreduce_bytes_per_s(401_408, 10_000.0)          # 10k tok/s at TP=2
    assert per_s == pytest.approx(4.01408e9)
    assert parallel.nvlink_over_allreduce(per_s, 4.01408e9 * 1.1) == pytest.approx(1.1)
    with pytest.raises(Absent):
        parallel.nvlink_over_allreduce(0.0, 1e9)
    assert parallel.weight_bytes_per_gpu(15.23e9, 2) == pytest.approx(7.615e9)


def test_a_one_gpu_round_says_why_there_is_no_allreduce():
    from bundle.store.reader import read_bundle
    from report.derive.round.read import read_round
    from report.judge.verdicts import build_ledger
    led = build_ledger(read_round(read_bundle(FIXTURES / "h200-round-4")))
    assert led.value_of("p.L1024-c64.tensor_parallel_size") == 1
    # TP=1 is the reason said, before the missing link counters (round 4 sampled no GPM).
    for key in ("allreduce_bytes_per_token", "allreduce_bytes_per_s", "nvlink_over_allreduce"):
        v = led[f"p.L1024-c64.{key}"]
        assert not v.present and v.missing.chain()[1].code == "reason.tp_one"
    assert led.value_of("p.L1024-c64.weight_bytes_per_gpu") == led.value_of("r.weight_bytes")


@pytest.mark.parametrize("tp, heads_per_gpu, replicas, share", [
    (1, 4, 1.0, 1.0), (2, 2, 1.0, 0.5), (4, 1, 1.0, 0.25),
    # Fewer KV heads (4) than GPUs: vLLM replicates each head, so a GPU holds one head's bytes.
    (8, 1, 2.0, 0.25),
])
def test_kv_is_sharded_per_gpu_and_replicated_past_the_kv_heads(tp, heads_per_gpu, replicas, share):
    assert QWEN["num_key_value_heads"] == 4
    per_gpu = parallel.kv_heads_per_gpu(tp, QWEN)
    assert per_gpu == heads_per_gpu
    assert parallel.kv_head_replicas(tp, QWEN, per_gpu) == replicas
    assert parallel.kv_bytes_per_token_per_gpu(57344.0, per_gpu, QWEN) == 57344.0 * share


def test_kv_heads_that_do_not_divide_the_tp_size_are_absent_with_the_reason():
    with pytest.raises(Absent, match="4 KV heads and the tensor-parallel size 3"):
        parallel.kv_heads_per_gpu(3, QWEN)
    with pytest.raises(Absent, match="do not divide"):
        parallel.kv_heads_per_gpu(6, QWEN)


def test_the_sharded_weights_reread_each_step_are_a_floor_under_mbu():
    # 15.2 GB of weights over TP=2 is 7.6 GB a GPU; 200 steps/s reread it at 1.52 TB/s of 4.8.
    per_gpu = parallel.weight_bytes_per_gpu(15.2e9, 2)
    assert parallel.weight_read_bandwidth_share(per_gpu, 200.0, 4.8e12) == pytest.approx(7.6e9 * 200 / 4.8e12)
