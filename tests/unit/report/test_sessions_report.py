"""A sessions workload in the report: the per-turn quantities (report/derive/stats/sessions.py) over
hand-built request records (labelled so: not measured data), the users-held share, and the
client section's sentences on round 11 (recorded), said where their predicate holds and silent
where it does not."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from bundle.request_table.table import RequestTable
from report.derive.stats import sessions as ST
from report.ledger import Absent
from report.publish.compose import compose_round
from report.publish.render.page import Page
from tests.conftest import ROOT


def rec(session, turn, t_send, ttft_s, prompt, cached, think=None, e2e_s=0.5):
    """A hand-built request record (fixture, not measured data)."""
    return {"point": "p", "i": 0, "warmup": False, "status": "ok", "t_send": t_send,
            "t_first": t_send + ttft_s, "t_end": t_send + e2e_s, "input_len": prompt,
            "max_tokens": 8, "chunks": [[t_send + ttft_s, 8]], "session": session, "turn": turn,
            "think_s": think, "usage": {"prompt_tokens": prompt, "completion_tokens": 8,
                                        "prompt_tokens_details": {"cached_tokens": cached}}}


HAND_BUILT = RequestTable.from_records([
    rec(0, 0, 0.0, 0.010, 100, 0, think=0.5), rec(0, 1, 1.0, 0.020, 208, 96, think=0.5),
    rec(1, 0, 0.0, 0.030, 100, 0, think=0.5), rec(1, 1, 1.0, 0.040, 208, 0),
    rec(0, 2, 2.0, 0.050, 316, 208),
])


def test_per_turn_quantities_are_over_each_turns_requests():
    assert ST.session_turn_requests(HAND_BUILT) == (2, 2, 1)
    assert ST.session_turn_ttft_ms_p50(HAND_BUILT) == pytest.approx((20.0, 30.0, 50.0))
    assert ST.session_turn_prompt_tokens_mean(HAND_BUILT) == (100.0, 208.0, 316.0)
    assert ST.session_turn_prefix_hit_rate(HAND_BUILT) == pytest.approx((0.0, 96 / 416, 208 / 316))
    assert ST.session_last_turn((2, 2, 1)) == 3
    assert ST.session_last_turn_hit_rate((0.0, 0.2, 0.6), 3) == 0.6


def test_the_cache_serves_history_only_when_the_deepest_turn_hits_more():
    assert ST.session_cache_serves_history(0.0, 0.6) is True
    assert ST.session_cache_serves_history(0.6, 0.6) is False


def test_a_workload_without_turns_or_cached_tokens_is_absent_not_zero():
    plain = RequestTable.from_records([{**rec(0, 0, 0.0, 0.01, 10, 0), "session": None, "turn": None}])
    with pytest.raises(Absent) as e:
        ST.session_turn_requests(plain)
    assert e.value.reason.code == "reason.no_session_turns"
    uncached = RequestTable.from_records([{**rec(0, 0, 0.0, 0.01, 10, 0), "usage": {"prompt_tokens": 10}}])
    with pytest.raises(Absent) as e:
        ST.session_turn_prefix_hit_rate(uncached)
    assert e.value.reason.code == "reason.no_cached_tokens"


def test_users_held_counts_think_time_as_busy():
    # Window [0, 2.5] s, two users: user 0 busy 0-1, 1-2, 2-2.5 (clipped); user 1 busy 0-1, 1-1.5.
    assert ST.session_users_held_fraction(HAND_BUILT, RequestTable.empty(), 2, 0.0, 2.5) == \
        pytest.approx((1.0 + 1.0 + 0.5 + 1.0 + 0.5) / 5.0)


@pytest.fixture(scope="module")
def round11():
    return compose_round(ROOT / "runs" / "round-11" / "bundle", "round-11")


def text_of(report, lang):
    return re.sub(r"<[^>]+>", "", Page(report, lang).assemble("html"))


@pytest.mark.parametrize("lang, said, silent", [
    ("en", "The prefix cache served the resent history", "did not serve more"),
    ("zh", "前缀缓存复用了重发的历史", "重发的历史没有被复用"),
])
def test_round_11_says_the_cache_served_the_history_and_users_are_the_concurrency(round11, lang, said, silent):
    text = text_of(round11, lang)
    assert said in text and silent not in text
    assert ("a user, not a request, is the unit of concurrency" in text if lang == "en"
            else "并发的单位是用户而不是请求" in text)
    assert {"session_ttft", "session_hits", "lengths"} <= set(round11.figures)


@pytest.mark.parametrize("lang, said, silent", [
    ("en", "did not serve more", "The prefix cache served the resent history"),
    ("zh", "重发的历史没有被复用", "前缀缓存复用了重发的历史"),
])
def test_the_sentence_stays_silent_when_the_deepest_turn_hits_no_more(round11, lang, said, silent):
    led = round11.ledger
    key = f"p.{round11.facts.headline_point}.session_cache_serves_history"
    old = led.values[key]
    led.values[key] = replace(old, value=False)
    try:
        text = text_of(round11, lang)
    finally:
        led.values[key] = old
    assert said in text and silent not in text


def test_a_round_of_single_requests_says_nothing_of_sessions():
    report = compose_round(ROOT / "runs" / "round-2" / "bundle", "round-2")
    text = text_of(report, "en")
    assert "Multi-turn sessions" not in text and "session_ttft" not in report.figures
    assert "lengths" not in report.figures          # round 2 sent fixed lengths


def test_the_length_histograms_count_every_sent_request_in_a_few_bars_per_point():
    # Round 9 sent thousands of ShareGPT requests a point: counted in Python, a point is at most
    # forty bars a series, and each series' bars add up to every measured request of the round.
    from bundle.store.reader import read_bundle
    from report.derive.round.read import read_round
    from report.publish.figures.lengths import fig_lengths

    rd = read_round(read_bundle(ROOT / "runs" / "round-9" / "bundle"))
    measured = {p.pid: p.measured for p in rd.points}
    fig = fig_lengths(measured, {pid: pid for pid in measured})
    rows = [r for v in fig.specs["en"]["datasets"].values() for r in v]
    assert 0 < len(rows) <= 2 * 40 * len(measured)
    totals: dict[str, int] = {}
    for row in rows:
        totals[row["series"]] = totals.get(row["series"], 0) + row["n"]
    assert list(totals.values()) == [sum(len(t) for t in measured.values())] * 2
