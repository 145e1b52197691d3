"""Page 1 answers: what limits the server and from which load on, what it delivers there, the
knee, what to change, and the settings that shaped it; each clause holds by construction
(checked here on round 4 and on HAND-BUILT ledgers where a rule must stay silent)."""

from __future__ import annotations

import re
from html import unescape

import pytest

from report.derive.arith import ratio, running_max
from report.judge.diagnosis import Attribution
from report.judge.findings.round import knee, thesis_findings
from report.ledger import Ledger
from report.publish.compose import compose_round
from report.publish.numbers import format_value, plain_text
from report.publish.render.page import Page
from report.words import word
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def round4():
    return compose_round(ROOT / "runs" / "round-4" / "bundle", "round-4")


def _growth_ledger(steps: dict[str, tuple[float, float]]) -> Ledger:
    """HAND-BUILT: each point's throughput and TTFT p99 growth from the point before it."""
    led = Ledger()
    for pid, (tput, tail) in steps.items():
        led.record(f"p.{pid}.tput_growth_from_prev", tput, unit="×", doc="hand-built")
        led.record(f"p.{pid}.ttft_p99_envelope_growth_from_prev", tail, unit="×", doc="hand-built")
    return led


def test_the_knee_is_where_every_later_step_costs_more_than_it_buys():
    pids = ["c1", "c2", "c4", "c8", "c16"]
    # noise at c2 (tail up more than throughput) does not make c1 the knee: c4 bought more again
    led = _growth_ledger({"c2": (1.9, 2.1), "c4": (1.9, 0.9), "c8": (1.4, 3.0), "c16": (1.2, 3.5)})
    assert knee(led, pids) == ("c4", "c8")
    # the last step still bought more than it cost: no knee
    led = _growth_ledger({"c2": (1.9, 2.1), "c4": (1.9, 0.9), "c8": (1.4, 3.0), "c16": (1.3, 1.1)})
    assert knee(led, pids) is None
    # a growth not measured stops the search: no knee claimed across it
    led = _growth_ledger({"c2": (1.9, 0.9), "c4": (1.4, 3.0), "c8": (1.2, 3.5)})
    assert knee(led, pids) is None


def _series_ledger(series: dict[str, tuple[float, float]]) -> Ledger:
    """HAND-BUILT: each point's throughput and TTFT p99, with the growths the round ledger
    derives from them (throughput point to point, TTFT p99 through its running maximum)."""
    led, env, prev = Ledger(), None, None
    for pid, (tput, ttft) in series.items():
        led.record(f"p.{pid}.output_tok_s", tput, doc="hand-built")
        env = led.derive(f"p.{pid}.ttft_p99_envelope_ms", running_max, value=ttft, envelope=env,
                         optional=frozenset({"envelope"}) if env is None else frozenset())
        if prev is not None:
            led.derive(f"p.{pid}.tput_growth_from_prev", ratio, numerator=tput, denominator=series[prev][0])
            led.derive(f"p.{pid}.ttft_p99_envelope_growth_from_prev", ratio, numerator=env,
                       denominator=led[f"p.{prev}.ttft_p99_envelope_ms"])
        prev = pid
    return led


def test_the_knee_reads_a_non_monotone_ttft_p99_through_its_envelope():
    pids = ["c1", "c2", "c4", "c8", "c16"]
    # TTFT p99 dips at c4 and returns at c8 (3x from the dip, 1.2x from c2's): the return is no
    # step that cost more than the 1.5x it bought, so the knee is c8, not c4.
    led = _series_ledger({"c1": (100, 40), "c2": (190, 100), "c4": (300, 35), "c8": (450, 120),
                          "c16": (500, 900)})
    assert [led.value_of(f"p.{p}.ttft_p99_envelope_ms") for p in pids] == [40, 100, 100, 120, 900]
    assert knee(led, pids) == ("c8", "c16")
    # read point to point, the dip would have moved the knee down to c4: the envelope is what differs
    raw = [(100, 40), (190, 100), (300, 35), (450, 120), (500, 900)]
    steps = [(b[0] / a[0], b[1] / a[1]) for a, b in zip(raw, raw[1:])]
    assert steps[2][1] > steps[2][0] and steps[3][1] > steps[3][0]
    # a monotone series: the envelope is the series itself and the knee unchanged
    led = _series_ledger({"c1": (100, 40), "c2": (190, 50), "c4": (300, 70), "c8": (330, 300)})
    assert knee(led, pids[:4]) == ("c4", "c8")
    # a dip at the top does not make a knee: the step cost nothing in the envelope
    led = _series_ledger({"c1": (100, 40), "c2": (190, 100), "c4": (200, 60)})
    assert knee(led, pids[:3]) is None


def test_from_which_load_on_holds_for_every_point_above_it():
    led = Ledger()
    for pid in ("c1", "c2", "c4"):
        for q in ("output_tok_s", "ttft_ms_p99", "itl_ms_p99"):
            led.record(f"p.{pid}.{q}", 1.0, doc="hand-built")
    att = {"c1": Attribution("c1", "gpu_bandwidth", "bandwidth_bound", {}),
           "c2": Attribution("c2", "gpu_compute", "step_compute", {}),
           "c4": Attribution("c4", "gpu_compute", "step_compute", {})}
    labels = {"c1": "C=1", "c2": "C=2", "c4": "C=4"}
    head = thesis_findings(led, att, ["c1", "c2", "c4"], labels)[0]
    assert head.texts["en"].startswith("The GPU's compute limits this server from C=2 on.")
    # C=1 shares the limit too: every valid point, said so
    att["c1"] = Attribution("c1", "gpu_compute", "step_compute", {})
    head = thesis_findings(led, att, ["c1", "c2", "c4"], labels)[0]
    assert "at every valid point, C=1 to C=4" in head.texts["en"]
    # no single limit at the top: said so, not guessed
    att["c4"] = Attribution("c4", "unknown", "no_signal_agrees", {})
    head = thesis_findings(led, att, ["c1", "c2", "c4"], labels)[0]
    assert head.texts["en"].startswith("No single limit is named at C=4")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_round_4_page_1_states_the_answer_before_the_cards(round4, lang):
    theses = [f for f in round4.facts.findings if f["kind"] == "thesis"]
    # runs/round-4/slo.toml states the SLO: page 1 answers the capacity question too.
    assert [f["id"] for f in theses] == ["thesis", "thesis_limits", "thesis_knee", "thesis_advice", "thesis_slo",
                                         "thesis_slo_best"]
    assert "C=128" in theses[0]["texts"]["en"] and "C=32" in theses[2]["texts"]["en"]
    # the limit moves along the sweep, and page 1 says where: bandwidth up to C=16, both roofs at
    # C=32 and C=64 (a prompt's chunk in a tenth to a fifth of the steps), compute at C=128
    assert theses[1]["texts"]["en"] == ("Along the sweep the limit moves: GPU memory bandwidth from C=1 to C=16; "
                                        "GPU (both roofs) from C=32 to C=64; GPU compute at C=128.")
    assert "C=64 meets it and C=128 does not" in theses[4]["texts"]["en"]
    assert theses[5]["texts"]["en"].startswith("The best point within the SLO is C=64")
    html = Page(round4, lang).assemble("html")
    text = unescape(re.sub(r"<[^>]+>", "", html))
    start = text.index("Conclusion" if lang == "en" else "结论")
    page1 = text[start:text.index("Diagnosis" if lang == "en" else "诊断", start)]
    # C=128 ran at the power cap: the limit is named as the capped clock's, not the datasheet's
    said = ("The GPU's compute at its power cap limits this server at C=128" if lang == "en"
            else "限制本服务的是功耗上限下的 GPU 算力")
    assert said in page1
    assert ("827 TFLOP/s" in page1) and ("1,530 MHz" in page1)
    assert page1.index(said) < page1.index(
        "Output throughput at C=128" if lang == "en" else "C=128 点输出吞吐")
    # The engine's settings are said once, in "How to read this" at the back, not on page 1.
    back = unescape(re.sub(r"<[^>]+>", "", re.search(r'id="sec-reading".*?</section>', html, re.S).group(0)))
    assert "--max-model-len" in back and "--max-model-len" not in page1
    assert ("prefix caching off" if lang == "en" else "前缀缓存关闭") in back
    assert ("random weights" if lang == "en" else "随机权重") in back


def test_round_4s_ttft_p99_is_not_monotone_and_the_knee_reads_its_envelope(round4):
    led = round4.ledger
    pids = round4.facts.valid_points
    raw = [led.value_of(f"p.{p}.ttft_ms_p99") for p in pids]
    env = [led.value_of(f"p.{p}.ttft_p99_envelope_ms") for p in pids]
    assert any(b < a for a, b in zip(raw, raw[1:]))          # a dip in the measured series
    assert env == sorted(env) and all(e >= r for e, r in zip(env, raw))
    assert env == [max(raw[:i + 1]) for i in range(len(raw))]
    assert knee(led, pids) == (pids[pids.index("L1024-c32")], pids[pids.index("L1024-c32") + 1])


def _open_loop_ledger(open_loop: bool) -> Ledger:
    """HAND-BUILT: one point's load, what it delivered and whether it kept up."""
    led = Ledger()
    for key, value in (("open_loop", open_loop), ("finish_over_send", 0.98), ("inflight_growth", 0.0),
                       ("output_tok_s", 400.0), ("ttft_ms_p99", 700.0), ("itl_ms_p99", 150.0)):
        led.record(f"p.r2.{key}", value, doc="hand-built")
    return led


@pytest.mark.parametrize("open_loop, bottleneck, kept_up", [
    (True, "gpu_bandwidth", True),      # an open loop that kept up: the load's throughput
    (False, "gpu_bandwidth", False),    # a closed loop pushes the server to what limits it
    (True, "unknown", False),           # no limit named: nothing is said of one
])
def test_an_open_loop_that_kept_up_names_no_limit_of_the_server(open_loop, bottleneck, kept_up):
    led = _open_loop_ledger(open_loop)
    att = {"r2": Attribution("r2", bottleneck, "bandwidth_bound", {})}
    texts = [f.texts["en"] for f in thesis_findings(led, att, ["r2"], {"r2": "rate 2"}) if f is not None]
    said = any("kept up with the load it was sent" in t for t in texts)
    assert said is kept_up
    assert any("limits this server" in t for t in texts) is (bottleneck != "unknown" and not kept_up)


@pytest.mark.parametrize("lang, words", [("en", "kept up with the load it was sent"),
                                         ("zh", "服务仍跟得上发给它的负载")])
def test_round_10s_trace_replay_is_said_to_have_kept_up(lang, words):
    report = compose_round(ROOT / "runs" / "round-10" / "bundle", "round-10")
    text = unescape(re.sub(r"<[^>]+>", "", Page(report, lang).assemble("html")))
    assert words in text and "limits this server" not in text and "限制本服务的是" not in text


def _compute_ledger(ratio: float | None) -> Ledger:
    """HAND-BUILT: one compute-bound point's figures and, unless RATIO is None, the step its
    compute ceiling predicts against the step measured (RATIO = measured over predicted)."""
    led = Ledger()
    led.record("r.rule_prediction_tol", 0.25, doc="hand-built")
    for key, value in (("output_tok_s", 7000.0), ("ttft_ms_p99", 900.0), ("itl_ms_p99", 180.0)):
        led.record(f"p.c4.{key}", value, doc="hand-built")
    if ratio is not None:
        for key, value, unit in (("peak_tflops_at_clock", 827.0, "TFLOP/s"), ("step_gflop", 7234.0, "GFLOP"),
                                 ("step_ms_at_compute_ceiling", 9.46, "ms"), ("step_ms_mean", 9.46 * ratio, "ms"),
                                 ("step_over_compute_ceiling", ratio, "×")):
            led.record(f"p.c4.{key}", value, unit=unit, doc="hand-built")
    return led


@pytest.mark.parametrize("mechanism, ratio, verdict", [
    ("step_compute", 1.1, "thesis_compute_step_explained"),          # within the tolerance
    ("step_compute_power_capped", 1.74, "thesis_compute_step_longer"),
    ("step_compute", 0.5, "thesis_compute_step_shorter"),
    ("step_compute", None, None),       # no step measured: the thesis stands without the prediction
    ("step_bandwidth", 1.1, None),      # a thesis that does not name compute predicts no compute step
])
def test_a_compute_thesis_says_the_step_it_predicts_beside_the_step_measured(mechanism, ratio, verdict):
    led = _compute_ledger(ratio)
    limit = "gpu_bandwidth" if mechanism == "step_bandwidth" else "gpu_compute"
    att = {"c4": Attribution("c4", limit, mechanism, {})}
    head = thesis_findings(led, att, ["c4"], {"c4": "C=4"})[0]
    for lang in ("en", "zh"):
        text = head.texts[lang]
        assert ("[[p.c4.step_ms_at_compute_ceiling]]" in text) is (verdict is not None)
        if verdict is None:
            continue
        # predicted and measured side by side, after what the point delivers, then the verdict
        assert text.index("[[p.c4.output_tok_s]]") < text.index("[[p.c4.step_ms_at_compute_ceiling]]") \
            < text.index("[[p.c4.step_ms_mean]]") < text.index("[[p.c4.step_over_compute_ceiling]]")
        assert word(f"finding.{verdict}", lang) in text
        others = {"thesis_compute_step_explained", "thesis_compute_step_longer", "thesis_compute_step_shorter"}
        assert not any(word(f"finding.{o}", lang) in text for o in others - {verdict})


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_round_4s_thesis_carries_the_compute_step_the_diagnosis_predicts(round4, lang):
    led = round4.ledger
    top = "L1024-c128"
    head = next(f for f in round4.facts.findings if f["id"] == "thesis")
    text = plain_text(head["texts"][lang], led, lang)
    ratio, tol = led.value_of(f"p.{top}.step_over_compute_ceiling"), led.value_of("r.rule_prediction_tol")
    assert ratio > 1 + tol       # the capped clock's ceiling explains only part of C=128's step
    assert word("finding.thesis_compute_step_longer", lang) in text
    for key in ("peak_tflops_at_clock", "step_ms_at_compute_ceiling", "step_ms_mean",
                "step_ms_at_prefill_rate_clock", "step_over_prefill_rate"):
        assert format_value(led[f"p.{top}.{key}"], lang) in text
    # the prefill rate of a prompt alone, clock-scaled, explains it
    assert abs(led.value_of(f"p.{top}.step_over_prefill_rate") - 1) <= tol
    assert word("finding.thesis_compute_rate_explained", lang) in text
    # on page 1 it is the first paragraph: the bold headline, then its prediction, before the SLO
    html = Page(round4, lang).assemble("html")
    first = unescape(re.sub(r"<[^>]+>", "", re.search(r'id="sec-summary".*?<p>(.*?)</p>', html, re.S).group(1)))
    assert format_value(led[f"p.{top}.step_ms_at_compute_ceiling"], lang) in first
    assert format_value(led[f"p.{top}.step_ms_mean"], lang) in first


def test_round_4s_advice_does_not_ask_for_a_power_limit_the_board_cannot_take(round4):
    led = round4.ledger
    # the H200 ran at its 700 W limit, which is the board's rated maximum in the spec table
    assert led.value_of("p.L1024-c128.power_limit_w") == led.value_of("r.rated_power_w") == 700
    advice = next(f for f in round4.facts.findings if f["id"] == "thesis_advice")["texts"]["en"]
    assert "already the board's rated maximum" in advice and "A higher power limit" not in advice
    assert "tensor parallel" in advice


def test_a_power_limit_below_the_boards_rating_keeps_the_higher_limit_advice(round4):
    import dataclasses

    from report.judge.diagnosis import point_bottleneck
    from report.judge.findings.round import thesis_findings
    led = round4.ledger
    # Forced: the same round with its limit set at 500 W, below the 700 W rating
    key = "p.L1024-c128.power_limit_w"
    low = dataclasses.replace(led, values=dict(led.values))
    low.values[key] = dataclasses.replace(led[key], value=500.0)
    valid = list(round4.facts.valid_points)
    att = {p: point_bottleneck(low, p) for p in valid}
    advice = next(f for f in thesis_findings(low, att, valid, round4.facts.point_labels)
                  if f is not None and f.id == "thesis_advice").texts["en"]
    assert "A higher power limit" in advice and "rated maximum" not in advice
