"""Claims the committed rounds' pages make, each a prediction checked against a measurement with
every term it needs and a tolerance that can fail: the numbers behind each sentence, read from
the round's own ledger."""

from __future__ import annotations

import json
import re
from functools import cache
from html import unescape

import pytest

from report.judge.result import RoundResult, judge_bundle
from report.publish.compose import compose_from
from report.publish.document import RoundReport
from report.publish.render.page import Page
from tests.conftest import ROOT


@cache
def judged(rid: str) -> RoundResult:
    return judge_bundle(ROOT / "runs" / rid / "bundle")


@cache
def compose(rid: str) -> RoundReport:
    return compose_from(judged(rid))


@cache
def composed(rid: str) -> dict[str, str]:
    """Each language's page as a reader reads it: the text, without the numbers' provenance."""
    out = {}
    for lang in ("en", "zh"):
        html = Page(compose(rid), lang).assemble("html")
        html = re.sub(r'<span class="pop" role="tooltip">.*?<span class="pop-see">[^<]*</span></span>', "", html,
                      flags=re.S)
        html = re.sub(r"<(script|style)[^>]*>.*?</\1>", "", html, flags=re.S)
        out[lang] = unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html)))
    return out


def value(rid: str, key: str):
    return judged(rid).led.value_of(key)


def finding_text(rid: str, fid: str, lang: str = "en") -> str:
    return " ".join(f.texts[lang] for f in judged(rid).findings if f.id == fid)


def test_round_4_c2_itl_tail_counts_how_often_a_prefill_lands_in_a_gap():
    # One prompt of 1,024 tokens in one step of the budget per reply of 256 tokens: 1 gap in 255.
    share = value("round-4", "p.L1024-c2.prefill_gap_share")
    assert share == pytest.approx(1 / 255)
    assert value("round-4", "p.L1024-c2.prefill_gap_percentile") == pytest.approx(100 * (1 - 1 / 255))
    # Under 1 %, p99 reads a decode step: the single stream's ITL p99, not the 27.4 ms prefill step.
    assert value("round-4", "p.L1024-c2.itl_p99_first_step_predicted") == pytest.approx(
        value("round-4", "p.L1024-c1.itl_ms_p99"))
    tol = value("round-4", "r.rule_prediction_tol")
    assert 1 / (1 + tol) <= value("round-4", "p.L1024-c2.itl_p99_over_first_step") <= 1 + tol
    text = finding_text("round-4", "first_step")
    assert "does not explain the ITL tail" not in text
    assert "too few for p99 to reach them" in text and "p[[p.L1024-c2.prefill_gap_percentile]]" in text
    # The percentile the prefill gaps reach is checked too, with a tolerance that fails there.
    assert value("round-4", "p.L1024-c2.itl_prefill_gaps_over_step") < 1 / (1 + tol)
    assert "short of the predicted step: fewer gaps than one a reply carried a whole prefill" in text
    # the sentence says the verdicts; the table under it gives each prediction beside its measurement
    table = compose("round-4").tables["first_step"]
    assert table.rows[0] == ["p.L1024-c2.itl_p99_first_step_predicted", "p.L1024-c2.itl_ms_p99",
                             "p.L1024-c2.itl_p99_over_first_step"]
    assert [r[2] for r in table.rows] == ["p.L1024-c2.itl_p99_over_first_step", "p.L1024-c2.itl_prefill_gaps_over_step",
                                          "p.L1024-c2.ttft_p99_over_behind_step"]


@pytest.mark.parametrize("rid, pid", [("round-4", "L1024-c128"), ("round-5", "L8192-c16")])
def test_the_prefill_tail_is_judged_at_the_clock_the_point_ran_at(rid, pid):
    # The prediction at the measured clock, against the rule's tolerance (not a band of two
    # predictions): round 4's C=128 at 1,530 MHz predicts 235 ms against 180 ms measured.
    tol = value(rid, "r.rule_prediction_tol")
    at_clock = value(rid, f"p.{pid}.itl_p99_over_tail_at_clock")
    assert at_clock < 1 / (1 + tol)
    text = finding_text(rid, "step_mix")
    assert "within [[r.rule_prediction_tol|pct0]] of that range" not in text
    assert f"[[p.{pid}.itl_p99_over_tail_at_clock]] of that prediction, more than" in text
    assert "does not explain ITL p99" in text
    # the prediction at the reference clock is printed beside it, and said to fit only within tolerance
    assert 1 / (1 + tol) <= value(rid, f"p.{pid}.itl_p99_over_tail") <= 1 + tol
    assert f"[[p.{pid}.itl_p99_over_tail]] of that, within" in text


def test_round_7s_kv_account_counts_the_shared_prefix_blocks_once():
    # 60 running requests of 3 blocks of 128 tokens; each shares one whole block of its prefix
    # (192 tokens) with the others of its prefix, stored once for each of the 4 prefixes.
    pid = "s1-L256-c64"
    assert value("round-7", f"p.{pid}.kv_running_requests") == 60
    assert value("round-7", f"p.{pid}.kv_prefix_tokens_saved") == 128 * (60 - 4)
    assert value("round-7", f"p.{pid}.kv_expected_mean_effective") == pytest.approx(0.7799, abs=1e-4)
    assert value("round-7", f"p.{pid}.kv_usage_p50") == pytest.approx(0.780, abs=1e-3)
    assert abs(value("round-7", f"p.{pid}.kv_error_pp")) < 1      # was -34.6 pp
    # without the prefix cache nothing is shared
    assert value("round-7", "p.s0-L256-c64.kv_prefix_tokens_saved") == 0


@pytest.mark.parametrize("pid, running", [("s0-L128-c1", 5), ("s1-L128-c1", 4)])
def test_round_10s_open_loop_kv_account_counts_the_requests_running(pid, running):
    # A replayed trace sets no concurrency: the account counts the running gauge's median, not 1.
    assert value("round-10", f"p.{pid}.concurrency") == 1
    assert value("round-10", f"p.{pid}.kv_running_requests") == running
    assert abs(value("round-10", f"p.{pid}.kv_error_pp")) < 0.25
    waste_one = value("round-10", f"p.{pid}.block_waste_tokens") / running
    assert 0 <= waste_one < 16       # under a block per request


def test_round_5s_itl_slope_reads_as_the_bandwidth_efficiency_it_implies():
    # 127 % of the slope at peak bandwidth is KV reads at 79 % of the peak: under the ceiling,
    # so it explains the slope (seed 000 reads its 92 % so); no band of 80-120 % is applied.
    assert value("round-5", "r.itl_slope_vs_theory") == pytest.approx(1.27, abs=0.01)
    eff = value("round-5", "r.itl_slope_bandwidth_efficiency")
    assert eff == pytest.approx(0.789, abs=0.001)
    assert eff <= 1 + value("round-5", "r.rule_prediction_tol")
    pages = composed("round-5")
    assert "of the peak bandwidth (the slope at peak over the one fitted)" in pages["en"]
    assert "outside the accepted" not in pages["en"] and "超出可接受的" not in pages["zh"]
    assert "峰值带宽的" in pages["zh"]


def test_round_5s_itl_figure_draws_the_fit_and_the_theory_line():
    fig = compose("round-5").figures["itl_vs_len"]
    for lang, names in (("en", ("Least-squares fit", "Theory: KV reads at peak bandwidth")),
                        ("zh", ("最小二乘拟合", "理论值：按峰值带宽读 KV"))):
        spec = json.dumps(fig.specs[lang], ensure_ascii=False)
        assert all(n in spec for n in names)
    assert {"r.itl_slope", "r.itl_intercept", "r.itl_slope_theory"} <= set(fig.keys)


# ---------------------------------------------------------------- no two sections contradict one another

ROUNDS = sorted((ROOT / "runs").glob("round-*/bundle"))
# Phrases of one page that state a fact about one point, and the phrases elsewhere on that page
# that state its contrary: (what one section says, what another must then not say), per language.
CONTRARY = {
    "en": [("This round sampled no /metrics", "The sampler scraped /metrics"),
           ("read stale values and are not used", "requests actually running"),
           ("read stale values and are not used", "are decode tokens (the median of running requests)"),
           # no limit named: the signals contradict one another, or those that would name one are missing
           ("the signals disagree", "the data do not single one out"),
           ("the signals disagree", "not measured: GPU telemetry or FLOP counters"),
           ("which signals disagreed; settle them", "the data do not single one out"),
           ("which signals disagreed; settle them", "not measured: GPU telemetry or FLOP counters"),
           ("no signal measured there singles one out", "the signals do not agree on one"),
           ("no signal measured there singles one out", "a GPU that busy was not waiting on its host")],
    "zh": [("本轮没有采样 /metrics", "采样器共抓取 /metrics"),
           ("读到的是过时的数，不予采用", "实际在跑的请求为"),
           ("各信号说法不一", "数据不足以指认某一项"),
           ("各信号说法不一", "没有测到的是 GPU 遥测"),
           ("哪些信号不一致，先弄清", "数据不足以指认某一项"),
           ("哪些信号不一致，先弄清", "没有测到的是 GPU 遥测"),
           ("测到的信号没有一项指向某个限制", "各项信号不一致"),
           ("测到的信号没有一项指向某个限制", "这么忙的 GPU 并没有在等主机")],
}
# Sentences no page may print: a relation without a test that can fail, or a reason that is none.
NEVER = {"en": ("within 25% of that range", "outside the accepted", "the diagnosis gives the limit"),
         "zh": ("落在这个范围的", "超出可接受的", "限制见“诊断”一节")}


def _text(report, lang: str) -> str:
    html = Page(report, lang).assemble("html")
    html = re.sub(r'<span class="pop" role="tooltip">.*?<span class="pop-see">[^<]*</span></span>', "", html, flags=re.S)
    html = re.sub(r"<(script|style)[^>]*>.*?</\1>", "", html, flags=re.S)
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html)))


@pytest.fixture(scope="module")
def every_round():
    from report.publish.compose import compose_rounds
    reports = compose_rounds([(b, b.parent.name) for b in ROUNDS])
    return [(r, {lang: _text(r, lang) for lang in ("en", "zh")}) for r in reports]


CORPUS = sorted((ROOT / "tests" / "fixtures" / "corpus").glob("*/bundle"))


@pytest.fixture(scope="module")
def every_bundle(every_round):
    """Every committed round (each beside its previous one) and every corpus bundle, with its pages."""
    from report.publish.compose import compose_rounds
    corpus = compose_rounds([(b, b.parent.name) for b in CORPUS])
    assert len(corpus) == len(CORPUS)
    return every_round + [(r, {lang: _text(r, lang) for lang in ("en", "zh")}) for r in corpus]


def test_no_two_sections_state_contrary_facts(every_bundle):
    seen = 0
    for report, pages in every_bundle:
        for lang, pairs in CONTRARY.items():
            for said, contrary in pairs:
                if said in pages[lang]:
                    seen += 1
                    assert contrary not in pages[lang], f"{report.round_id} ({lang}): {said!r} beside {contrary!r}"
        for lang, phrases in NEVER.items():
            for phrase in phrases:
                assert phrase not in pages[lang], f"{report.round_id} ({lang}) prints {phrase!r}"
    assert len(every_bundle) == len(ROUNDS) + len(CORPUS)


# A number printed on a page: its ledger key (templates/macros.j2's number markup).
PRINTED = re.compile(r'data-key="([^"]+)"')


def _judged_ratios(report, texts: dict[str, str], evidence: list[str]) -> list[str]:
    """The measured-over-predicted ratios a sentence judges against the prediction tolerance:
    those it cites or rests on, where it cites the tolerance."""
    cited = [k for t in texts.values() for k in re.findall(r"\[\[([^\]|]+)", t)]
    if "r.rule_prediction_tol" not in cited:
        return []
    led = report.ledger
    return [k for k in dict.fromkeys(cited + list(evidence))
            if "_over_" in k.rsplit(".", 1)[-1] and k in led and led[k].present]


def test_every_judged_prediction_prints_its_prediction_and_its_measurement(every_bundle):
    """Over every committed round and corpus bundle, in both languages: a sentence or a caption
    that judges a ratio within the prediction tolerance prints, on its page, the ratio and both
    the prediction and the measurement it divides (its inputs in the ledger), in the sentence or
    in the table beside it."""
    judged = set()
    for report, _ in every_bundle:
        led = report.ledger
        said = [(f["texts"], f["evidence"]) for f in report.facts.findings]
        said += [(fig.caption, list(fig.keys)) for fig in report.figures.values() if fig.caption]
        for lang in ("en", "zh"):
            shown = set(PRINTED.findall(Page(report, lang).assemble("html")))
            for texts, evidence in said:
                if not any(k in shown for k in re.findall(r"\[\[([^\]|]+)", texts[lang])):
                    continue        # a sentence this page does not print
                for ratio in _judged_ratios(report, texts, evidence):
                    sides = [d for _, d in led[ratio].inputs
                             if d in led and led[d].present and not d.startswith("r.rule_")]
                    missing = [k for k in [ratio, *sides] if k not in shown]
                    assert not missing, f"{report.round_id} ({lang}): {ratio} judged without {missing}"
                    judged.add((report.round_id, ratio))
    # round 4's first step (ITL, the prefill gaps, TTFT) and its lockstep waves among them
    assert {("round-4", "p.L1024-c2.itl_p99_over_first_step"), ("round-4", "p.L1024-c2.ttft_p99_over_behind_step"),
            ("round-4", "p.L1024-c256.queue_over_wave")} <= judged
    assert len({rid for rid, _ in judged}) >= 5


def test_a_stale_running_gauge_carries_no_count_of_running_requests(every_bundle):
    stale = 0
    for report, pages in every_bundle:
        led = report.ledger
        for key, v in led.values.items():
            if not (key.endswith(".running_gauges_stale") and v.present and v.value):
                continue
            stale += 1
            point = key[len("p."):-len(".running_gauges_stale")]
            assert led.value_of(f"p.{point}.kv_running_requests") is None
            assert led.value_of(f"p.{point}.kv_expected_median") is None
            if point == report.facts.headline_point:
                assert "are decode tokens (the median of running requests)" not in pages["en"]
                assert "running gauge that would count them read stale values" in pages["en"]
    assert stale      # round 2's C=2 and round 11's L=64: a running median under one, requests in flight


def test_the_clock_is_called_throttled_only_below_the_tolerance(every_bundle):
    for report, pages in every_bundle:
        led, last = report.ledger, f"p.{report.facts.headline_point}."
        below, tol = led.value_of(last + "sm_clock_below_max"), led.value_of("r.rule_clock_slower")
        if "actually throttling the clocks" in pages["en"]:
            assert below is not None and below > tol, report.round_id
        if "without slowing the clocks measurably" in pages["en"]:
            assert below <= tol and "功耗上限压住了功率，频率却没有明显降下来" in pages["zh"]
    said = {r.round_id for r, p in every_bundle if "without slowing the clocks measurably" in p["en"]}
    assert {"round-9", "round-10"} <= said      # 1,965 of 1,980 MHz


def test_the_first_step_says_the_tail_is_unexplained_only_where_p99_reaches_the_prefill_gaps(every_bundle):
    for report, pages in every_bundle:
        for f in report.facts.findings:
            if f["id"] != "first_step":
                continue
            b = next(k.split(".")[1] for k in re.findall(r"\[\[(p\.[^\]|]+)", f["texts"]["en"]) if "prefill_gap_share" in k)
            share = report.ledger.value_of(f"p.{b}.prefill_gap_share")
            if share < 0.01:
                assert "too few for p99 to reach them" in pages["en"], report.round_id


def test_page_one_gives_the_lengths_the_requests_brought(every_round):
    for report, pages in every_round:
        if report.facts.lengths_vary:
            head = pages["en"].split("Diagnosis")[0]
            assert "an output length of" not in head, report.round_id
    round9 = next(p for r, p in every_round if r.round_id == "round-9")
    assert "each request brought its own lengths, at C=256 a mean of 120 tok" in round9["en"]


def test_a_prefill_dominated_trace_gets_energy_per_token_processed(every_round):
    round10 = next(r for r, _ in every_round if r.round_id == "round-10")
    pid = round10.facts.headline_point
    assert round10.ledger.value_of(f"p.{pid}.joules_per_total_token") is not None
    pages = next(p for r, p in every_round if r.round_id == "round-10")
    assert "per token processed, prompt or output" in pages["en"]


def test_round_10s_prefill_tail_is_predicted_with_its_terms():
    # A replayed trace ran no prompt alone: no "prefill rate measured alone" at its template C=1.
    assert value("round-10", "r.prefill_flop_rate") is None
    # The step model's fullest step computes the uncached prompt tokens (28 % of them were hits).
    pid = "s1-L128-c1"
    hit = value("round-10", f"p.{pid}.prefix_cache_hit_rate")
    assert value("round-10", f"p.{pid}.tail_step_prefill_tokens") == pytest.approx(
        value("round-10", f"p.{pid}.prompt_tokens_sent_mean") * (1 - hit), rel=1e-3)
    tol = value("round-10", "r.rule_prediction_tol")
    assert 1 / (1 + tol) <= value("round-10", f"p.{pid}.itl_p99_over_tail_model") <= 1 + tol
    text = finding_text("round-10", "step_mix")
    assert "measured alone" not in text and "which is what puts spikes" not in text
    assert f"[[p.{pid}.itl_p99_over_tail_model]] of it, within" in text


def test_round_10s_demand_on_the_pool_counts_the_requests_running():
    # Demand ÷ pool of an open loop: the running requests' peak tokens, not the template's one request.
    pid = "s0-L128-c1"
    assert value("round-10", f"p.{pid}.kv_expected_peak") == pytest.approx(
        value("round-10", f"p.{pid}.kv_running_requests") * value("round-10", f"p.{pid}.request_peak_tokens")
        / value("round-10", f"p.{pid}.pool_tokens_usable"))


def test_the_demo_says_why_no_limit_is_named_once():
    # The demo names no limit because nothing that would name one was measured, not because
    # measured signals contradict one another: page 1 and the diagnosis both say so.
    from report.judge.diagnosis import point_bottleneck
    from report.judge.rules import signals_disagree
    from report.publish.compose import compose_rounds
    led = judge_bundle(ROOT / "tests" / "fixtures" / "cpu-demo").led
    (att,) = [point_bottleneck(led, "L128-c8")]
    assert att.bottleneck == "unknown" and not signals_disagree(att)
    (report,) = compose_rounds([(ROOT / "tests" / "fixtures" / "cpu-demo", "cpu-demo")])
    pages = {lang: _text(report, lang) for lang in ("en", "zh")}
    assert "no signal measured there singles one out" in pages["en"] and "the data do not single one out" in pages["en"]
    assert "测到的信号没有一项指向某个限制" in pages["zh"] and "数据不足以指认某一项" in pages["zh"]
    for lang, pairs in CONTRARY.items():
        for said, contrary in pairs:
            assert not (said in pages[lang] and contrary in pages[lang]), f"demo ({lang}): {said!r} beside {contrary!r}"


def test_every_printed_next_step_states_its_predicted_effect_or_why_none(every_bundle):
    # A step predicts its effect from ledger values (label.next_effect_*), or says what it will
    # measure and why the model predicts no number for it (label.next_unpredicted_*), on the page.
    from report.words import word
    seen = 0
    for report, pages in every_bundle:
        for st in report.facts.next_steps:
            seen += 1
            assert ("effect" in st) != ("unpredicted" in st), f"{report.round_id}: {st['id']}"
            if "effect" in st:
                assert "[[p." in word(f"label.next_effect_{st['effect']}", "en", pid="x")
                continue
            for lang in ("en", "zh"):
                reason = word(f"label.next_unpredicted_{st['unpredicted']}", lang)
                assert reason and reason in pages[lang], f"{report.round_id} ({lang}): {st['id']} states no effect"
    assert seen
