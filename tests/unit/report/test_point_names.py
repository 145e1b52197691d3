"""Every section speaks of one point and names it by its settings (C=128, L=8192), never as
"the last point": on round 4 the cards, the KV, MFU and power sections all mean the last valid
point, C=128, and not C=512, which failed its checks."""

from __future__ import annotations

import math
import re

import pytest

from report.judge.result import point_labels
from report.publish.compose import compose_round
from report.publish.render.page import Page
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def round4():
    return compose_round(ROOT / "runs" / "round-4" / "bundle", "round-4")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_round_4_names_its_headline_point_in_every_section(round4, lang):
    facts = round4.facts
    assert facts.headline_point == "L1024-c128" and "L1024-c512" not in facts.valid_points
    assert facts.point_labels["L1024-c128"] == "C=128"
    html = Page(round4, lang).assemble("html")
    text = re.sub(r"<[^>]+>", "", html)
    assert "last point" not in text and "末点" not in text and "首点" not in text
    label = "Output throughput at C=128" if lang == "en" else "C=128 点输出吞吐"
    assert label in text
    # The power paragraph speaks of the same point as the cards.
    start = text.index("Power and thermals" if lang == "en" else "功耗与温度")
    said = re.findall(r"(?:At|at) (C=\d+) the GPU drew|(C=\d+) 点 GPU 功耗", text[start:])
    assert said and "C=128" in said[0]


def test_a_point_is_named_by_the_settings_that_vary():
    class P:
        def __init__(self, pid, **s):
            self.pid, self.settings = pid, s
    same_c = [P("a", input_len=256, concurrency=16), P("b", input_len=8192, concurrency=16)]
    assert point_labels(same_c) == {"a": "L=256", "b": "L=8192"}
    grid = [P("a", input_len=256, concurrency=1), P("b", input_len=8192, concurrency=4)]
    assert point_labels(grid) == {"a": "L=256, C=1", "b": "L=8192, C=4"}
    rates = [P("a", request_rate=4.0), P("b", request_rate=80.0)]
    assert point_labels(rates) == {"a": "4 req/s", "b": "80 req/s"}
    assert point_labels([P("only", concurrency=8)]) == {"only": "only"}


def test_a_server_set_is_named_in_the_words_of_each_language():
    from report.words import in_lang, word

    class P:
        def __init__(self, pid, **s):
            self.pid, self.settings = pid, s
    names = point_labels([P("a", server_set=0, concurrency=16), P("b", server_set=1, concurrency=16)])
    assert names["b"] == "set 1" and in_lang(names["b"], "en") == "set 1"
    assert in_lang(names["b"], "zh") == "配置 1" and "set" not in in_lang(names["a"], "zh")
    # a sentence filled with the name speaks the language it is written in
    assert "配置 1" in word("finding.verdict_confirmed", "zh", at=names["b"], prev="round-6", limit="x")
    grid = point_labels([P("a", server_set=0, concurrency=1), P("b", server_set=1, concurrency=4)])
    assert in_lang(grid["b"], "zh") == "配置 1 · C=4" and grid["b"] == "set 1, C=4"


@pytest.mark.parametrize("tput,ttft,head", [
    ((0.01, 0.03), (-0.05, 0.10), "Reproduced:"),
    ((0.01, 0.03), (-0.355, 0.02), "Throughput reproduced, latency did not:"),
    ((0.01, 0.30), (-0.05, 0.10), "Not reproduced:"),
])
def test_reproduced_is_said_only_when_throughput_and_tail_latency_both_hold(tput, ttft, head):
    from report.judge.findings.round import reproducibility_finding
    from report.ledger import Ledger
    led = Ledger()
    for name, (lo, hi) in (("tput", tput), ("ttft_p99", ttft)):
        led.record(f"x.repro_{name}_min", lo, unit="fraction", doc="hand-built")
        led.record(f"x.repro_{name}_max", hi, unit="fraction", doc="hand-built")
    led.record("r.rule_repro_tput_tol", 0.05, unit="fraction", doc="hand-built")
    led.record("r.rule_repro_ttft_tol", 0.2, unit="fraction", doc="hand-built")
    f = reproducibility_finding(led, {"prev_round": "round-1"})
    assert f.texts["en"].startswith(head)
    assert ("可复现：" in f.texts["zh"]) == (head == "Reproduced:")


def test_round_4_quantifies_the_decode_floor_the_headroom_and_the_step_budget(round4):
    led = round4.ledger
    # 15.2 GB of bf16 weights, of which a decode step reads all but the input embedding
    # (152,064 × 3,584 × 2 B = 1.09 GB, rows gathered, not read whole), once at 4.8 TB/s:
    # the shortest decode step.
    assert led["r.weight_bytes"].value == pytest.approx(15.23e9, rel=0.01)
    embedding = 152064 * 3584 * 2
    assert led["r.decode_read_bytes"].value == pytest.approx(led["r.weight_bytes"].value - embedding, rel=1e-6)
    assert led["r.decode_floor_ms"].value == pytest.approx((15.23e9 - embedding) / 4.8e12 * 1e3, rel=0.01)
    c1, c128 = led["p.L1024-c1.itl_over_decode_floor"].value, led["p.L1024-c128.itl_over_decode_floor"].value
    assert 1 < c1 < c128     # above the floor, and further above it as the batch grows
    # 2.09 M pool tokens hold some 1,600 requests of 1,280 tokens; C=128 used a few per cent.
    assert led["p.L1024-c128.requests_fit"].value == led["r.pool_tokens_usable"].value // 1280
    assert led["r.max_num_batched_tokens"].value == 8192
    for lang in ("en", "zh"):
        text = re.sub(r"<[^>]+>", "", Page(round4, lang).assemble("html"))
        assert ("--max-num-batched-tokens" in text and ("The decode floor" in text or "decode 下限" in text)
                and ("Headroom." in text or "余量。" in text))


def test_no_crossover_is_extrapolated_through_a_queue_of_noise():
    from report.derive.sweep.concurrency import power_law_crossover
    from report.ledger import Absent
    # round 4: a 0.019 ms queue at C=64 gave slope 11.4 and "C ≈ 148"; not said any more
    with pytest.raises(Absent) as e:
        power_law_crossover(128, 60.0, 2.0, 11.4, 0.5, queue_prev=0.019)
    assert "under 1.0 ms" in str(e.value)
    assert power_law_crossover(64, 40.0, 10.0, 2.0, 1.0, queue_prev=2.5) == pytest.approx(256.0)


def test_the_power_laws_are_drawn_through_the_two_highest_valid_points():
    from report.derive.sweep import concurrency as A
    from report.ledger import Absent
    loads, queue, prefill = [1, 32, 64], [None, 2.5, 10.0], [20.0, 30.0, 40.0]
    sq, sp = A.queue_loglog_slope(loads, queue), A.prefill_loglog_slope(loads, prefill)
    assert sq == pytest.approx(2.0) and sp == pytest.approx(math.log(4 / 3) / math.log(2))
    assert A.crossover_concurrency(loads, queue, prefill, 2.0, 1.0) == pytest.approx(256.0)
    assert A.prefill_growth(prefill) == pytest.approx(2.0)
    with pytest.raises(Absent) as e:    # growth reads the lowest point, whose queue is absent
        A.ttft_p99_growth(queue)
    assert e.value.reason.code == "reason.input_none"
    with pytest.raises(Absent):
        A.output_tok_s_growth([5.0])


def test_the_itl_slope_is_fitted_over_the_points_that_ran_all_c_requests():
    from report.judge.verdicts import read_bundle_ledger
    rd, led = read_bundle_ledger(ROOT / "runs" / "round-5" / "bundle")
    held = [p.pid for p in rd.points if (led.value_of(f"p.{p.pid}.effective_concurrency") or 0)
            >= p.settings["concurrency"] and led.value_of(f"p.{p.pid}.valid")]
    assert "L8192-c16" not in held and led.value_of("r.itl_fit_points") == len(held)
    # with L8192 (13 of 16 running) left out the slope is 1.27x the bandwidth theory, not 1.09x
    assert led.value_of("r.itl_slope_vs_theory") == pytest.approx(1.27, abs=0.01)


def test_the_compute_ceiling_under_the_power_cap_is_the_clocks(round4):
    led = round4.ledger
    clock, top = led.value_of("p.L1024-c128.sm_clock_load_mhz"), led.value_of("r.max_sm_clock_mhz")
    assert clock < top     # held by the power cap
    ceiling = led.value_of("p.L1024-c128.peak_tflops_at_clock")
    # Scaled from the clock the datasheet states its peak at (989.4 TFLOP/s = 132 SMs x 4,096 FLOP
    # per clock x 1,830 MHz), not from the GPU's maximum clock: 827 TFLOP/s at 1,530 MHz.
    assert led.value_of("r.peak_clock_mhz") == 1830
    assert ceiling == pytest.approx(led.value_of("r.peak_tflops") * clock / 1830)
    assert ceiling == pytest.approx(827.2, abs=0.1)
    assert led.value_of("p.L1024-c128.mfu_at_clock") == pytest.approx(
        led.value_of("p.L1024-c128.tflops_s") / ceiling)
    found = [f for f in round4.facts.findings if "peak_tflops_at_clock" in f["texts"]["en"]]
    assert found and "L1024-c128" in found[0]["texts"]["en"]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_crossover_names_the_two_points_its_slopes_run_between(lang):
    # Round 12 extrapolates its queue and prefill laws between C=64 and C=256 (its two highest
    # valid points); the sentence names both instead of "the last two points".
    report = compose_round(ROOT / "runs" / "round-12" / "bundle", "round-12")
    assert report.facts.valid_points[-2:] == ["L1024-c64", "L1024-c256"]
    text = re.sub(r"<[^>]+>", "", Page(report, lang).assemble("html"))
    lead = "log–log slopes from C=64 to C=256" if lang == "en" else "按 C=64 到 C=256 的对数斜率"
    assert lead in text
    assert "last two points" not in text and "最后两档" not in text
