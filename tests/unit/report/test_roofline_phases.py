"""The roofline by phase and the mechanisms with their predictions, on round 4 (H200, vLLM
0.24.0, Qwen2.5-7B, L=1024): a decode step sits below the ridge at every concurrency and a
prompt's prefill past it, so compute is named only where prefill's compute dominates; the ITL
tail at C=128 is one full-budget prefill step, predicted from the prefill rate at C=1."""

from __future__ import annotations

import dataclasses

import pytest

from bundle.store.reader import read_bundle
from report.architecture import roofline as RF
from report.derive.round.read import read_round
from report.judge.diagnosis import point_bottleneck
from report.judge.findings.points import bottleneck_finding, step_mix_finding
from report.judge.verdicts import build_ledger
from report.ledger import Absent
from tests.conftest import ROOT

POINTS = ("L1024-c1", "L1024-c16", "L1024-c64", "L1024-c128", "L1024-c256")


@pytest.fixture(scope="module")
def round4():
    rd = read_round(read_bundle(ROOT / "runs" / "round-4" / "bundle"))
    return rd, build_ledger(rd)


def _with(led, key, value):
    """A copy of LED with KEY's value replaced (a forced cause)."""
    out = dataclasses.replace(led, values=dict(led.values))
    out.values[key] = dataclasses.replace(led[key], value=value)
    return out


def test_decode_steps_sit_below_the_ridge_and_prefill_past_it(round4):
    _, led = round4
    ridge = led.value_of("r.ridge")
    assert ridge == pytest.approx(206.1, abs=0.1)
    dec = [led.value_of(f"p.{p}.decode_intensity") for p in POINTS]
    assert all(d < ridge for d in dec) and dec == sorted(dec)     # more running, more reuse
    assert dec[0] == pytest.approx(1.03, abs=0.01)                # one request: ~1 FLOP/B
    assert led.value_of("p.L1024-c64.prefill_intensity") == pytest.approx(945, rel=0.01)
    # the time-averaged counter ratio at C=64 lands at the ridge, describing neither phase
    assert led.value_of("p.L1024-c64.intensity") == pytest.approx(ridge, rel=0.01)


def test_the_roof_named_is_where_the_modelled_step_time_sits(round4):
    from report.derive import validity as V
    _, led = round4
    # C=128: 41 % of the steps carry a prompt's chunk of 1,024 tokens (18.4 ms at the compute
    # ceiling of the capped clock), the rest decode (4.5 ms at peak bandwidth): 74 % of the
    # modelled time is at the compute roof.
    assert led.value_of("p.L1024-c128.step_compute_share") == pytest.approx(0.736, abs=0.01)
    assert point_bottleneck(led, "L1024-c128").bottleneck == "gpu_compute"
    # Forced: the same step with half its modelled time at each roof names the GPU, not a roof;
    # with most of it at the bandwidth roof, bandwidth.
    assert point_bottleneck(_with(led, "p.L1024-c128.step_compute_share", 0.5), "L1024-c128").bottleneck == "gpu"
    assert point_bottleneck(_with(led, "p.L1024-c128.step_compute_share", 0.2), "L1024-c128").bottleneck == "gpu_bandwidth"
    # Forced: roofs that explain too little of the measured step leave it to the host side.
    host = _with(led, "p.L1024-c1.step_roof_share", V.ROOF_EXPLAINS_MIN / 2)
    assert point_bottleneck(host, "L1024-c1").bottleneck == "engine_host"


def test_the_bottleneck_sentences_give_the_prediction_beside_the_measurement(round4):
    rd, led = round4
    att = rd.verdicts.attribution
    c128 = bottleneck_finding(led, att["L1024-c128"]).texts
    for key in ("prefill_step_compute_ms_model", "compute_ceiling_tflops", "step_ms_model", "step_ms_measured"):
        assert f"[[p.L1024-c128.{key}]]" in c128["en"] and f"[[p.L1024-c128.{key}]]" in c128["zh"]
    c64 = bottleneck_finding(led, att["L1024-c64"]).texts["en"]
    assert "at both roofs" in c64 and "decode_step_memory_ms_model" in c64
    assert "What moves this limit" in c64


def test_the_itl_tail_is_one_full_budget_prefill_step(round4):
    rd, led = round4
    # the prefill rate measured alone at C=1: one prompt's FLOPs over its prefill time
    rate = led.value_of("r.prefill_flop_rate")
    flops = RF.prefill_flops(rd.config, 1024, 1024)
    assert rate == pytest.approx(flops / (led.value_of("p.L1024-c1.prefill_ms_mean") / 1e3))
    assert 550e12 < rate < 650e12
    # C=128: 16 prompts waited, so the fullest step carries the whole 8,192-token budget
    assert led.value_of("p.L1024-c128.prefill_step_tokens") == 8192 == led.value_of("r.max_num_batched_tokens")
    assert led.value_of("p.L1024-c128.itl_tail_ms_predicted") == pytest.approx(181, abs=1)
    assert led.value_of("p.L1024-c128.itl_p99_over_tail") == pytest.approx(1.0, abs=0.05)
    f = step_mix_finding(led, "L1024-c128")
    assert "itl_tail_ms_predicted" in f.texts["en"] and "at L1024-c1 (" in f.texts["en"]
    # C=64: the gauge saw no queue, the prediction (one prompt) misses its tail 3×: not said
    assert led.value_of("p.L1024-c64.itl_p99_over_tail") > 1 + led.value_of("r.rule_prediction_tol")
    f64 = step_mix_finding(led, "L1024-c64")
    assert f64 is None or "itl_tail_ms_predicted" not in f64.texts["en"]


def test_the_fullest_prefill_step_is_capped_by_the_budget():
    assert RF.largest_prefill_step_tokens(1024, 0, 8192) == 1024       # one prompt at least
    assert RF.largest_prefill_step_tokens(1024, 3, 8192) == 3072
    assert RF.largest_prefill_step_tokens(1024, 213, 8192) == 8192
    assert RF.largest_prefill_step_tokens(16384, 0, 8192) == 8192      # a prompt over the budget is chunked
    with pytest.raises(Absent):
        RF.largest_prefill_step_tokens(1024, 1, 0)


def test_no_roof_is_named_without_the_models_architecture(round4):
    _, led = round4
    bare = dataclasses.replace(led, values={k: v for k, v in led.values.items()
                                            if not k.split(".")[-1].startswith(("step_ms_model", "step_roof_share",
                                                                                "step_compute_share"))})
    assert point_bottleneck(bare, "L1024-c128").bottleneck not in ("gpu_compute", "gpu_bandwidth", "gpu")


def test_the_compute_bound_verdict_states_the_step_it_predicts(round4):
    rd, led = round4
    k = "p.L1024-c128."
    # the mean step: vLLM's FLOP over its steps, at the ceiling of the sampled clock
    assert led.value_of(k + "step_ms_mean") == pytest.approx(1e3 / led.value_of(k + "engine_steps_per_s"))
    ceiling = led.value_of("r.peak_tflops") * 1530 / 1830     # the datasheet's peak is stated at 1,830 MHz
    assert led.value_of(k + "peak_tflops_at_clock") == pytest.approx(ceiling)
    assert led.value_of(k + "step_ms_at_compute_ceiling") == pytest.approx(
        led.value_of(k + "tflops_s") / led.value_of(k + "engine_steps_per_s") / ceiling * 1e3)
    # 53 % of the capped ceiling: the step is 1.87x what compute alone at that ceiling predicts
    assert led.value_of(k + "step_over_compute_ceiling") == pytest.approx(1 / led.value_of(k + "mfu_at_clock"))
    assert led.value_of(k + "step_over_compute_ceiling") == pytest.approx(1.88, abs=0.01)
    # at C=1's measured prefill rate slowed by the clock the step is within the tolerance
    assert led.value_of(k + "step_over_prefill_rate") == pytest.approx(1.05, abs=0.02)
    att = rd.verdicts.attribution
    text = bottleneck_finding(led, att["L1024-c128"]).texts
    assert "step_ms_at_compute_ceiling" in text["en"] and "only part of each step" in text["en"]
    assert "step_ms_at_prefill_rate_clock" in text["en"] and "explains the step" in text["en"]
    assert "只解释了每步的一部分" in text["zh"] and "解释了这一步" in text["zh"]
    # Forced: a step at the ceiling is said to be explained by it
    held = _with(led, k + "step_over_compute_ceiling", 1.1)
    assert "so the ceiling explains the step" in bottleneck_finding(held, att["L1024-c128"]).texts["en"]
    # silent where the verdict is not compute: C=1 is bandwidth-bound
    assert att["L1024-c1"].bottleneck == "gpu_bandwidth"
    assert "step_ms_at_compute_ceiling" not in bottleneck_finding(led, att["L1024-c1"]).texts["en"]
