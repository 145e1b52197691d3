"""TTFT's three parts at the headline point: the frontend's part said as a ratio to the queue,
a ledger value, and said only where both parts are times (round 4, and round 4 with the ratio
made absent)."""

from __future__ import annotations

import copy
import re
from dataclasses import replace
from html import unescape

import pytest

from report.derive.timing.server import QUEUE_FLOOR_MS, frontend_over_queue
from report.ledger import Absent, Reason
from report.publish.compose import compose_round
from report.publish.numbers import format_value
from report.publish.render.page import Page
from report.words import section
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def round4():
    return compose_round(ROOT / "runs" / "round-4" / "bundle", "round-4")


def test_the_frontend_over_the_queue_is_a_ratio_of_two_times():
    assert frontend_over_queue(111.0, 50.0) == pytest.approx(2.22)
    with pytest.raises(Absent) as e:        # the remainder is no frontend time
        frontend_over_queue(-3.0, 50.0)
    assert e.value.reason.code == "reason.frontend_not_positive"
    for queue in (0.0, 0.019):              # no time in the queue, or its noise: no ratio to it
        with pytest.raises(Absent) as e:
            frontend_over_queue(111.0, queue)
        assert e.value.reason.code == "reason.queue_under_floor"
    assert frontend_over_queue(111.0, QUEUE_FLOOR_MS) == pytest.approx(111.0 / QUEUE_FLOOR_MS)


def _decomposition(report, lang: str) -> str:
    """The decomposition section's reading text (no figures' specs, no number pop-ups)."""
    html = Page(report, lang).assemble("html").split('id="appendix"')[0]
    html = re.sub(r"<(script|style|svg)\b.*?</\1>", " ", html, flags=re.S)
    html = re.sub(r'<span class="pop" role="tooltip">.*?<span class="pop-see">[^<]*</span></span>', "", html,
                  flags=re.S)
    text = unescape(re.sub(r"<[^>]+>", "", html))
    start = text.index("Decomposition: where TTFT goes" if lang == "en" else "分解：TTFT 花在哪里")
    return text[start:start + 4000]


def _ratio_words(lang: str) -> str:
    """The sentence's words before its number (the catalogue's, so the test follows its wording)."""
    return section("prose", lang)["decomposition_09"].split("{{")[0].strip()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_round_4_says_the_frontend_at_c128_as_a_ratio_to_the_queue(round4, lang):
    led, pid = round4.ledger, round4.facts.headline_point
    assert round4.facts.point_labels[pid] == "C=128"
    ratio = led[f"p.{pid}.frontend_over_queue"]
    assert ratio.present and dict(ratio.inputs) == {"frontend_ms_mean": f"p.{pid}.frontend_ms_mean",
                                                    "queue_ms_mean": f"p.{pid}.queue_ms_mean"}
    assert ratio.value == pytest.approx(led.value_of(f"p.{pid}.frontend_ms_mean")
                                        / led.value_of(f"p.{pid}.queue_ms_mean"))
    text = _decomposition(round4, lang)
    said = text.index(_ratio_words(lang))
    # after the sum of the three parts, with the ratio's own number
    assert text.index(format_value(led[f"p.{pid}.frontend_ms_mean"], lang)) < said
    assert format_value(ratio, lang) in text[said:said + 80]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_ratio_sentence_is_left_out_where_a_part_is_missing(round4, lang):
    pid = round4.facts.headline_point
    led = copy.copy(round4.ledger)
    led.values = dict(led.values)
    key = f"p.{pid}.frontend_over_queue"
    led.values[key] = replace(led.values[key], value=None, missing=Reason.of("reason.frontend_not_positive",
                                                                              value="-3"))
    text = _decomposition(replace(round4, ledger=led), lang)
    assert _ratio_words(lang) not in text
    # the rest of the paragraph stands
    assert format_value(led[f"p.{pid}.frontend_ms_mean"], lang) in text


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_per_request_times_the_server_did_not_report_are_said_once_not_printed_as_missing(round4, lang):
    led, pid = round4.ledger, round4.facts.headline_point
    assert not led[f"p.{pid}.server_queue_ms_mean"].present      # round 4 ran without per-request metrics
    text = _decomposition(round4, lang)
    said = section("prose", lang)["decomposition_11"]
    assert said.split("`")[0] in text
    assert section("prose", lang)["decomposition_05"].split("{{")[0] not in text
    assert format_value(led[f"p.{pid}.server_queue_ms_mean"], lang) not in text
