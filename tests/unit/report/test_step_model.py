"""The engine step predicted from the architecture and the datasheet, held against real bundles.

Round 4 (runs/round-4: vLLM 0.24.0 on one H200, a Qwen2.5-7B-shaped model, 1,024 in / 256 out)
was recorded with --enable-mfu-metrics: vLLM's own FLOP counter is a second, independent count
of the work the model predicts per step. h200-defaults (tests/fixtures/corpus) ran vLLM with its
defaults and no GPU sampling, one server set with --kv-cache-dtype fp8.
"""

from __future__ import annotations

import pytest

from bundle.server_flags import server_flag
from report.architecture import stepmodel as SM
from report.derive import validity as V
from report.judge.ablation import ablate, relation, without
from report.judge.verdicts import read_bundle_ledger
from report.ledger import Absent
from tests.conftest import FIXTURES, ROOT

QWEN7B = {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
          "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
          "torch_dtype": "bfloat16", "tie_word_embeddings": False}


@pytest.fixture(scope="module")
def round4():
    return read_bundle_ledger(ROOT / "runs" / "round-4" / "bundle")


def test_the_models_flops_per_step_match_vllms_counter_at_every_point(round4):
    rd, led = round4
    for p in rd.points:
        ratio = led.value_of(f"p.{p.pid}.step_flops_counter_ratio")
        assert ratio == pytest.approx(1.0, abs=0.03), p.pid


def test_a_decode_step_reads_the_weights_and_the_kv_at_peak_bandwidth():
    # One request at 1,024 + 128 tokens of context: 14.14 GB of weights and 1,152 x 57,344 B of KV.
    read = SM.step_read_bytes(QWEN7B, "auto", 0, 1, 1152)
    assert read == pytest.approx(14_140_571_648 + 1152 * 57_344)
    assert SM.term_ms(read, 4.8e12) == pytest.approx(2.96, abs=0.01)
    # FP8 KV halves the KV bytes, not the weights'.
    fp8 = SM.step_read_bytes(QWEN7B, "fp8", 0, 1, 1152)
    assert read - fp8 == pytest.approx(1152 * 57_344 / 2)


def test_the_compute_ceiling_scales_from_the_clock_the_datasheet_states():
    assert SM.ceiling_at_clock(989.4, 1530, 1830) == pytest.approx(827.2, abs=0.05)
    with pytest.raises(Absent):
        SM.ceiling_at_clock(989.4, 1530, 0)


def test_the_mean_step_weights_each_kind_of_step_at_its_own_roof():
    # A chunk in a quarter of the steps: 18 ms at the compute roof; decode-only steps 4 ms at the
    # bandwidth roof. The mean mix alone would say max(0.25*18+0.75*1, 0.25*5+0.75*4) = 5.25 ms.
    assert SM.mixed_step_ms(0.25, 18.0, 5.0, 1.0, 4.0) == pytest.approx(7.5)
    assert SM.compute_bound_share(0.25, 18.0, 5.0, 1.0, 4.0) == pytest.approx(4.5 / 7.5)
    with pytest.raises(Absent):
        SM.mixed_step_ms(1.5, 1, 1, 1, 1)


def test_a_flag_is_read_from_the_set_then_the_command_then_the_log():
    cmd = "vllm serve m --max-num-seqs 16 --kv-cache-dtype=fp8"
    assert server_flag("--max-num-seqs", cmd) == "16"
    assert server_flag("--max-num-seqs", cmd, ["--max-num-seqs", "8"]) == "8"
    assert server_flag("--kv-cache-dtype", cmd) == "fp8"
    assert server_flag("--max-num-batched-tokens", cmd, None, {"max_num_batched_tokens": 2048}) == "2048"
    assert server_flag("--max-num-batched-tokens", cmd) is None


def test_the_fp8_set_reads_half_the_kv_and_the_model_still_explains_its_step():
    rd, led = read_bundle_ledger(FIXTURES / "corpus" / "h200-defaults" / "bundle")
    assert led.value_of("p.s1-L1024-c8.kv_cache_dtype") == "fp8"
    assert led.value_of("p.s0-L1024-c8.kv_cache_dtype") == "auto"
    # No --enable-mfu-metrics, no GPU sampling: the verdict stands on the model alone.
    att = rd.verdicts.attribution["s1-L1024-c8"]
    assert att.bottleneck == "gpu_bandwidth" and att.confidence == "model_only"
    assert led.value_of("p.s1-L1024-c8.step_roof_share") >= V.ROOF_EXPLAINS_MIN
    assert led.value_of("p.s1-L1024-c8.decode_step_memory_ms_model") < \
        led.value_of("p.s0-L1024-c8.decode_step_memory_ms_model")


def test_without_metrics_the_client_sees_the_same_step(round4):
    _, led = round4
    # Each step emits one token per request in flight: the client's count over its token rate.
    for pid in ("L1024-c1", "L1024-c8", "L1024-c32"):
        assert led.value_of(f"p.{pid}.step_ms_client") == pytest.approx(
            led.value_of(f"p.{pid}.step_ms_mean"), rel=0.1), pid


def test_a_verdict_without_an_optional_source_is_the_same_limit_or_a_weaker_one():
    cells = ablate(FIXTURES / "corpus" / "h200-causes" / "bundle")
    assert {c.source for c in cells} == {"gpu_samples", "mfu_counters", "gpu_counters", "server_log", "metrics"}
    bad = [c for c in cells if c.valid and c.relation == "other"]
    assert not bad, bad
    # The eager engine is the host's with every source and without /metrics (the client's step).
    eager = [c for c in cells if c.point == "s3-L1024-c8"]
    assert {c.reduced for c in eager} == {"engine_host"}


def test_weaker_and_other_are_told_apart():
    assert relation("gpu_bandwidth", "gpu") == "weaker"
    assert relation("gpu", "gpu_compute") == "sharper"
    assert relation("kv_pool", "gpu") == "other"
    assert relation("engine_host", "engine_host") == "same"
    assert relation("kv_pool", "unknown") == "silent"
    assert relation("shared_host", "engine_host") == "weaker"
    # The limit that binds next by the full evidence's own rules, not one it never named.
    assert relation("frontend", "gpu_compute", ("gpu_compute",)) == "next"
    assert relation("frontend", "gpu", ("gpu_compute",)) == "next"
    assert relation("frontend", "kv_pool", ("gpu_compute",)) == "other"


def test_the_client_streams_at_the_servers_sequence_cap():
    # --max-num-seqs 2 at C=2 (a real CPU engine): the client's streams plateau at the cap.
    _, led = read_bundle_ledger(FIXTURES / "corpus" / "cpu-seqcap-2" / "bundle")
    assert led.value_of("p.L128-c2.client_streaming_plateau") == 2
    assert led.value_of("p.L128-c2.client_streaming_mean") <= 2.0


def test_a_plateau_is_the_count_held_long_enough_not_a_moment_between_two_requests():
    from report.derive.load.inflight import (
        client_awaiting_mean,
        client_streaming_mean,
        client_streaming_plateau,
    )
    # Two streams over the whole 10 s window; a third for 0.5 s (5 %), a fourth for an instant.
    reqs = [{"t_send": 0.0, "t_first": 0.5, "t_end": 10.0}, {"t_send": 0.0, "t_first": 0.5, "t_end": 10.0},
            {"t_send": 2.0, "t_first": 4.0, "t_end": 4.5}, {"t_send": 4.0, "t_first": 4.25, "t_end": 4.26},
            {"t_send": 0.0, "t_first": float("nan"), "t_end": float("nan")}]
    assert client_streaming_plateau(reqs, 1.0, 11.0, 0.1) == 2
    assert client_streaming_plateau(reqs, 1.0, 11.0, 0.04) == 3
    mean = client_streaming_mean(reqs, 1.0, 11.0)
    assert mean == pytest.approx((9 + 9 + 0.5 + 0.01) / 10)
    assert client_awaiting_mean(3.0, mean) == pytest.approx(3.0 - mean)
    with pytest.raises(Absent):
        client_streaming_mean(reqs, 5.0, 5.0)


def test_without_gpu_samples_the_gpu_named_by_the_user_keeps_the_peaks():
    from bundle.store.reader import read_bundle
    bundle = read_bundle(ROOT / "runs" / "round-4" / "bundle")
    reduced, gpu = without(bundle, "gpu_samples")
    assert gpu == "NVIDIA H200" and not reduced.gpu and not reduced.manifest["gpus"]


def test_scrapes_failing_while_delivery_lags_are_the_api_servers_overload(round4):
    # Hand-set: 31 % of C=256's scrapes failed (the API server answering neither in time); its
    # client received tokens 1.38x slower than the engine made them.
    import copy
    from dataclasses import replace

    from report.judge.diagnosis import point_bottleneck, point_validity
    _, led = round4
    hand = copy.copy(led)
    hand.values = dict(led.values)
    key = "p.L1024-c256.failed_scrape_share"
    hand.values[key] = replace(led[key], value=0.31, missing=None)
    v = point_validity(hand, "L1024-c256")
    assert "scrapes_failed" not in v.reasons and "scrapes_failed_frontend" in v.disagreed
    assert point_bottleneck(hand, "L1024-c256").mechanism == "delivery_slower_than_engine_scrapes_failing"
    # Without the delivery lag the failures are a sampling fault: the point is dropped for them.
    slow = dict(hand.values)
    slow["p.L1024-c256.delivery_tpot_ratio"] = replace(led["p.L1024-c256.delivery_tpot_ratio"], value=1.0)
    hand.values = slow
    assert "scrapes_failed" in point_validity(hand, "L1024-c256").reasons


def test_a_budget_sweep_of_three_sets_is_a_curve_with_the_models_tail_beside_it():
    from report.publish.compose import compose_round
    rep = compose_round(FIXTURES / "corpus" / "h200-budget-sweep" / "bundle", "sweep")
    fig = rep.figures["budget_curve"]
    budgets = {rep.ledger.value_of(k) for k in fig.keys if k.endswith(".step_token_budget")}
    assert budgets == {512, 2048, 8192}
    assert sum(k.endswith(".itl_tail_ms_model") for k in fig.keys) == 3
    # Each set is named by its flag value wherever it is named.
    labels = rep.facts.point_labels if hasattr(rep.facts, "point_labels") else rep.facts["point_labels"]
    assert "--max-num-batched-tokens 2048" in str(labels["s1-L1024-c64"])


@pytest.mark.parametrize("bundle", ["h200-causes", "h200-defaults"])
def test_relieving_the_queue_predicts_what_the_uncapped_set_measured(bundle):
    # The capped set (--max-num-seqs 8) and the small-pool set at C=64 each predict the output of
    # the same server with all 64 running; the base set ran exactly that, so it is the check.
    rd, led = read_bundle_ledger(FIXTURES / "corpus" / bundle / "bundle")
    measured = led.value_of("p.s0-L1024-c64.output_tok_s")
    tol = led.value_of("r.rule_prediction_tol")
    capped = [a.point for a in rd.verdicts.attribution.values() if a.bottleneck in ("sequence_cap", "kv_pool")
              and a.point.endswith("c64")]
    assert len(capped) == 2, capped
    for pid in capped:
        predicted = led.value_of(f"p.{pid}.all_running_output_tok_s_model")
        assert predicted == pytest.approx(measured, rel=tol), pid
        # …and it is a real change: the capped point itself measured far less.
        assert led.value_of(f"p.{pid}.all_running_output_gain_model") > 1.5, pid


def test_an_eager_gpu_engine_bound_by_its_host_side_is_offered_cuda_graphs_with_the_roofs_bound():
    # h200-causes set 3 ran --enforce-eager on the H200: its step is mostly host time.
    from report.judge.result import judge_bundle
    res = judge_bundle(FIXTURES / "corpus" / "h200-causes" / "bundle")
    steps = {s["id"]: s for s in res.facts["next_steps"]}
    st = steps["cuda_graphs"]
    assert st["plan"]["sweep"]["server_flags"] == [[], ["--no-enforce-eager"]]
    assert "[[p.s3-L1024-c8.step_ms_model]]" in st["en"] and "--no-enforce-eager" in st["zh"]
    # The CPU engine (also eager) is never offered a device feature it does not have.
    cpu = judge_bundle(FIXTURES / "corpus" / "cpu-seqcap" / "bundle")
    assert "cuda_graphs" not in {s["id"] for s in cpu.facts["next_steps"]}
