"""Sentences that state a mechanism are said where its ledger predicate holds and nowhere
else: the power peak above the limit (round 4's C=128: 703 W against 700 W; round 6's C=256
also passes, round 2 has no GPU), the KV intercept between staggered and lockstep streams
(round 5 says it; round 3's intercept lies above both bounds and round 4 is no length
sweep), and the appendix grouped by the section that first shows each number."""

from __future__ import annotations

import re

import pytest

from report.derive.gpu.gpm import power_peak_over_limit
from report.ledger import Absent
from report.publish.compose import compose_round
from report.publish.render.page import Page
from report.words import closed
from tests.conftest import ROOT

POWER = {"en": "The peak sample passes the limit by", "zh": "峰值样本超出上限"}
KV = {"en": "the streams ran staggered", "zh": "各请求的进度彼此错开"}


@pytest.fixture(scope="module")
def pages():
    out = {}
    for n in (2, 3, 4, 5):
        report = compose_round(ROOT / "runs" / f"round-{n}" / "bundle", f"round-{n}")
        for lang in ("en", "zh"):
            out[(n, lang)] = (report, re.sub(r"<[^>]+>", "", Page(report, lang).assemble("html")))
    return out


def test_peak_over_limit_is_the_share_past_the_limit():
    assert power_peak_over_limit(703.44, 700.0) == pytest.approx(0.004914, rel=1e-3)
    assert power_peak_over_limit(500.0, 700.0) < 0
    with pytest.raises(Absent):
        power_peak_over_limit(500.0, 0.0)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_power_overshoot_is_said_only_where_the_peak_passed_the_limit(pages, lang):
    report, text = pages[(4, lang)]
    assert report.ledger.value_of("p.L1024-c128.power_peak_over_limit") > 0
    said = text[text.index(POWER[lang]):][:200]
    assert "0.49%" in said           # 703.44 W over 700 W
    _, cpu = pages[(2, lang)]
    assert POWER[lang] not in cpu    # no GPU sampled: nothing to pass


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_kv_intercept_is_explained_only_between_its_two_bounds(pages, lang):
    report, text = pages[(5, lang)]
    led = report.ledger
    assert (led.value_of("r.kv_intercept_staggered") <= led.value_of("r.kv_lin_intercept")
            <= led.value_of("r.kv_intercept_together"))
    assert KV[lang] in text and "2,048" in text and "4,096" in text
    report3, text3 = pages[(3, lang)]
    assert report3.ledger.value_of("r.kv_lin_intercept") > report3.ledger.value_of("r.kv_intercept_together")
    assert KV[lang] not in text3
    report4, text4 = pages[(4, lang)]
    assert not report4.ledger["r.kv_intercept_staggered"].present   # C varies: no single bound
    assert KV[lang] not in text4


def test_the_appendix_groups_numbers_by_the_section_that_first_shows_them(pages):
    report, _ = pages[(2, "en")]
    html = Page(report, "en").assemble("html")
    appendix = html[html.index('id="provenance"'):]
    groups = re.findall(r'<h3 class="prov-group">([^<]*)</h3>', appendix)
    headings = [re.sub(r"<[^>]+>", "", h).strip()
                for h in re.findall(r"<h2[^>]*>(.*?)</h2>", html[:html.index('id="provenance"')], re.S)]
    # in the sections' order, then the inputs no section shows
    assert groups[:-1] == [h for h in headings if h in groups[:-1]]
    assert groups[-1].startswith("Inputs of the numbers above")
    ids = [int(i) for i in re.findall(r'id="prov-N(\d+)"', appendix)]
    assert ids == list(range(1, len(ids) + 1))


def test_a_round_without_a_single_stream_borrows_the_previous_rounds_prefill_rate():
    """Round 5 (no C=1 point) predicts its ITL tail at L=8192 from round 4's prefill rate
    measured alone: one 8,192-token step, 201 ms against 203 ms measured; round 4 uses its own."""
    from report.publish.compose import compose_rounds
    r4, r5 = compose_rounds([(ROOT / "runs" / "round-4" / "bundle", "round-4"),
                             (ROOT / "runs" / "round-5" / "bundle", "round-5")])
    led = r5.ledger
    assert not led["r.prefill_flop_rate"].present
    assert led.value_of("x.prefill_flop_rate") == r4.ledger.value_of("r.prefill_flop_rate")
    assert led.value_of("p.L8192-c16.prefill_step_tokens") == 8192
    assert led.value_of("p.L8192-c16.itl_p99_over_tail") == pytest.approx(1.0, abs=0.05)
    said = {f["id"]: f for f in r5.facts.findings}["step_mix"]["texts"]
    # the round named in words, as its page's title names it (report.words.round_name)
    assert "Round 4's single-stream point" in said["en"] and "第 4 轮的单流测量点" in closed(said["zh"])
    assert "x.prefill_tflops_s" in said["en"]
    own = {f["id"]: f for f in r4.facts.findings}["step_mix"]["texts"]["en"]
    assert "r.prefill_tflops_s" in own and "x.prefill_tflops_s" not in own
