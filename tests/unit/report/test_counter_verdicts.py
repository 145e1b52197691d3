"""The GPU verdicts against the GPU's own counters (GPM): where they confirm, where they decide, where absent.

Round 6 (runs/round-6) is an H200 round our collector recorded with GPM counters; round 4's
trimmed fixture (tests/fixtures/h200-round-4) is the same engine and load without them. The
cases where the counters decide set one counter of a real round-6 ledger to a value built by
hand (a counter that contradicts the model), labelled as such in each test.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from bundle.store.reader import read_bundle
from report.derive import validity as V
from report.derive.round.read import read_round
from report.judge.diagnosis import point_bottleneck
from report.judge.findings.points import bottleneck_finding, disagreement_finding
from report.judge.verdicts import build_ledger
from report.publish.numbers import plain_text
from tests.conftest import FIXTURES, ROOT

ROUND6 = ROOT / "runs" / "round-6" / "bundle"


def ledger_of(path):
    return build_ledger(read_round(read_bundle(path)))


@pytest.fixture(scope="module")
def round6():
    if not ROUND6.is_dir():
        pytest.skip("runs/round-6 is not in this checkout")
    return ledger_of(ROUND6)


@pytest.fixture(scope="module")
def round4():
    return ledger_of(FIXTURES / "h200-round-4")


def with_value(led, key, value):
    """A copy of LED whose KEY holds VALUE (a hand-set counter, not a measurement)."""
    out = copy.copy(led)
    out.values = dict(led.values)
    out.values[key] = replace(led[key], value=value, missing=None)
    return out


def test_measured_dram_confirms_the_bandwidth_verdict(round6):
    a = point_bottleneck(round6, "L1024-c1")
    assert a.bottleneck == "gpu_bandwidth" and a.counters == "bandwidth_agrees" and not a.disagreed
    assert a.evidence["p.L1024-c1.dram_bandwidth_share"] >= V.DRAM_BW_HIGH <= a.evidence["p.L1024-c1.mbu"]
    f = bottleneck_finding(round6, a)
    assert "p.L1024-c1.dram_bandwidth_share" in f.keys() and "r.rule_dram_bw_high" in f.keys()
    assert "agrees" in plain_text(f.texts["en"], round6, "en")


def test_dram_short_of_its_bar_weakens_the_bandwidth_verdict_to_the_gpu(round6):
    # Hand-set: DRAM at 10 % where round 6 measured about 61 %; the step model still puts the
    # step at the bandwidth roof: the verdict keeps the GPU and drops the roof, saying why.
    led = with_value(round6, "p.L1024-c1.dram_bandwidth_share", 0.10)
    a = point_bottleneck(led, "L1024-c1")
    assert a.bottleneck == "gpu" and a.mechanism == "step_bandwidth"
    assert a.disagreed == ["dram_short_of_model"]
    f = disagreement_finding(led, {}, {"L1024-c1": "C=1"}, {"L1024-c1": a})
    assert f is not None and "p.L1024-c1.dram_bandwidth_share" in f.keys()
    assert "C=1" in f.texts["en"] and "C=1" in f.texts["zh"]


def test_tensor_activity_short_of_its_bar_weakens_a_compute_verdict(round6):
    # Hand-set: round 6's C=64 step model moved to the compute roof (90 % of its modelled time
    # in steps whose compute term is the larger), its tensor activity (about 50 %) then set under
    # the bar and over it.
    led = with_value(round6, "p.L1024-c64.step_compute_share", 0.9)
    low = with_value(led, "p.L1024-c64.tensor_active_share", V.TENSOR_ACTIVE_HIGH / 2)
    a = point_bottleneck(low, "L1024-c64")
    assert a.bottleneck == "gpu" and a.disagreed == ["tensor_short_of_model"]
    high = with_value(led, "p.L1024-c64.tensor_active_share", min(1.0, V.TENSOR_ACTIVE_HIGH * 1.5))
    b = point_bottleneck(high, "L1024-c64")
    assert b.bottleneck == "gpu_compute" and b.counters == "compute_agrees" and not b.disagreed


def test_a_step_at_both_roofs_names_the_gpu_and_shows_both_counters(round6):
    a = point_bottleneck(round6, "L1024-c64")
    assert a.bottleneck == "gpu" and a.mechanism == "step_both_roofs" and a.counters == "shown"
    share = a.evidence["p.L1024-c64.step_compute_share"]
    assert 1 - V.ROOF_TERM_SHARE < share < V.ROOF_TERM_SHARE
    f = bottleneck_finding(round6, a, labels={"L1024-c64": "C=64"})
    assert {"p.L1024-c64.step_ms_model", "p.L1024-c64.step_ms_measured"} <= set(f.keys())


def test_without_gpu_counters_vllms_flop_counter_confirms_the_model(round4):
    a = point_bottleneck(round4, "L1024-c1")
    assert a.bottleneck == "gpu_bandwidth" and a.mechanism == "step_bandwidth"
    assert a.counters == "flops_agree" and a.confidence == "confirmed" and not a.disagreed
    assert a.evidence["p.L1024-c1.dram_bandwidth_share"] is None
    lo, hi = V.COUNTER_AGREES
    assert lo <= a.evidence["p.L1024-c1.step_flops_counter_ratio"] <= hi
    f = bottleneck_finding(round4, a)
    en = plain_text(f.texts["en"], round4, "en")
    assert "vLLM's FLOP counter confirms" in en and "p.L1024-c1.step_ms_model" in f.keys()


def test_without_any_second_signal_the_verdict_stands_on_the_model(round4):
    # Hand-set: vLLM's FLOP counter absent (a server without --enable-mfu-metrics).
    led = copy.copy(round4)
    led.values = dict(round4.values)
    key = "p.L1024-c1.step_flops_counter_ratio"
    led.values[key] = replace(round4[key], value=None, missing=round4["p.L1024-c1.dram_bandwidth_share"].missing)
    a = point_bottleneck(led, "L1024-c1")
    assert a.bottleneck == "gpu_bandwidth" and a.counters == "model_only" and a.confidence == "model_only"
    en = plain_text(bottleneck_finding(led, a).texts["en"], led, "en")
    assert "--enable-mfu-metrics" in en


def test_counters_at_a_roof_contradict_a_gpu_waiting_on_its_host():
    # h200-causes' eager-mode set (s3): NVML sees kernels 21 % of the time, the roofs explain
    # 13 % of the measured step.
    led = ledger_of(FIXTURES / "corpus" / "h200-causes" / "bundle")
    a = point_bottleneck(led, "s3-L1024-c8")
    assert a.bottleneck == "engine_host" and a.counters == "nvml_waits" and a.mechanism == "step_host_side"
    assert a.evidence["p.s3-L1024-c8.step_roof_share"] < V.ROOF_EXPLAINS_MIN
    # Hand-set counters: both low (the GPU idles between kernels) keep the verdict ...
    quiet = with_value(with_value(led, "p.s3-L1024-c8.dram_bandwidth_share", 0.05),
                       "p.s3-L1024-c8.tensor_active_share", 0.02)
    b = point_bottleneck(quiet, "s3-L1024-c8")
    assert b.bottleneck == "engine_host"
    # ... DRAM at its bar does not.
    busy = with_value(quiet, "p.s3-L1024-c8.dram_bandwidth_share", V.DRAM_BW_HIGH)
    c = point_bottleneck(busy, "s3-L1024-c8")
    assert c.bottleneck == "unknown" and c.disagreed == ["counters_gpu_not_waiting"]
