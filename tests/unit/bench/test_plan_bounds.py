"""Everything a round schedules or draws is bounded at plan time, each refusal one line naming
the key (or the trace's line and field): a trace's timestamps, span and gaps, a think time
longer than the point, distribution parameters that overflow when drawn; and the token ids a
sessions server sends back are checked before they are resent or counted."""

from __future__ import annotations

import json
import random

import pytest

from bench.client import MAX_IDS_PER_EVENT, EventSink
from bench.lengths import check_dist, length_sampler
from bench.plan.parse import plan_from_dict
from bench.prompts import PlanError
from bench.sessions import ReplyIds
from bench.traces import MAX_GAP_S, MAX_SPAN_S, load_trace


def mooncake(tmp_path, *stamps) -> str:
    p = tmp_path / "t.jsonl"
    p.write_text("".join(f'{{"timestamp": {t}, "input_length": 10, "output_length": 5}}\n'
                         for t in stamps))
    return str(p)


def azure(tmp_path, *stamps) -> str:
    p = tmp_path / "t.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(f"{t},10,5\n" for t in stamps))
    return str(p)


@pytest.mark.parametrize("stamps, words", [
    ((0, "1e308"), "line 2: field timestamp: sent 1e+305 s after the first request"),
    ((0, 10 ** 12), "line 2: field timestamp: sent 1e+09 s after the first request"),
    ((0, 10 ** 400), "line 2: field timestamp: 1000000000"),       # past the float range
    ((0, '"inf"'), "line 2: field timestamp: 'inf' is not a time in ms"),
    ((0, 1000, 1000 + (MAX_GAP_S + 1) * 1000), f"line 3: field timestamp: {MAX_GAP_S + 1:,} s after"),
])
def test_a_mooncake_trace_that_would_not_end_is_refused_naming_line_and_field(tmp_path, stamps, words):
    with pytest.raises(PlanError) as e:
        load_trace(mooncake(tmp_path, *stamps), "mooncake")
    assert words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("stamp", ["nan", "inf", "-inf", "-5", "1e308"])
def test_an_azure_trace_time_that_is_no_time_is_refused(tmp_path, stamp):
    with pytest.raises(PlanError, match=r"line 3: field TIMESTAMP: "):
        load_trace(azure(tmp_path, "0", stamp), "azure")


def test_a_far_line_past_max_duration_is_dropped_not_run(tmp_path):
    t = load_trace(mooncake(tmp_path, 0, 500, 10 ** 12), "mooncake", max_duration_s=60)
    assert [r.send_at_s for r in t.requests] == [0.0, 0.5] and t.dropped == {"past_max_duration": 1}
    # No gap over an hour, and a span over a week.
    hourly = range(0, (MAX_SPAN_S + 3600) * 1000 + 1, 3_600_000)
    with pytest.raises(PlanError, match=f"line {len(hourly)}: .* past the 604,800 s a replay may run"):
        load_trace(mooncake(tmp_path, *hourly), "mooncake")


@pytest.mark.parametrize("dist, key", [
    ({"kind": "normal", "mean": 100, "sd": 1e308, "max": 1000}, ".sd: must be above 0 and at most"),
    ({"kind": "lognormal", "mean": 1e-300, "sd": 5, "max": 1000}, ".mean: must be at least 1"),
    ({"kind": "mixture", "components": [{"weight": 1e308, "kind": "fixed"},
                                        {"weight": 1e308, "kind": "fixed"}]},
     ".components: the weights sum past the float range"),
])
def test_a_distribution_that_would_overflow_when_drawn_is_refused_at_plan_time(dist, key):
    with pytest.raises(PlanError) as e:
        check_dist(dist, "[workload.output_dist]")
    assert str(e.value).startswith(f"[workload.output_dist]{key}")
    with pytest.raises((OverflowError, ValueError, IndexError)):   # what a draw did before
        draw = length_sampler(dist, 64)
        rng = random.Random(1)
        for _ in range(1000):
            draw(rng)


SESSIONS = {"kind": "sessions", "api": "completions", "chunk_token_counts": "token_ids",
            "input_len": 16, "output_len": 8, "turns": 3}


@pytest.mark.parametrize("workload, words", [
    ({"think_ms": 600_000}, "p.toml [workload].think_ms: a think time of up to 600 s is not shorter "
                            "than a point ([sweep].duration_s = 3)"),
    ({"think_ms": 10, "think_dist": {"kind": "normal", "sd": 5, "max": 36_000_000}},
     "p.toml [workload.think_dist].max: a think time of up to 36,000 s is over 3,600 s"),
])
def test_a_think_time_longer_than_the_point_is_refused(workload, words):
    with pytest.raises(PlanError) as e:
        plan_from_dict({"workload": {**SESSIONS, **workload}, "sweep": {"duration_s": 3}}, "p.toml")
    assert words in str(e.value)
    plan_from_dict({"workload": {**SESSIONS, "think_ms": 2000}, "sweep": {"duration_s": 3}}, "p.toml")


def event(ids) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "text": "x", "token_ids": ids,
                                                "finish_reason": None}]}).encode() + b"\n\n"


@pytest.mark.parametrize("ids, words", [
    (["7", "8"], "token id '7' is not an integer from 0 to 999"),
    ([5, -3], "token id -3 is not an integer"),
    ([1000], "token id 1000 is not an integer from 0 to 999 (the served vocabulary)"),
    ([True], "token id True"),
    ([1] * 20_000, f"20,000 token ids in one event, over {MAX_IDS_PER_EVENT:,}"),
    ([1] * 63, "65 token ids in the reply, over the 64 asked for"),
])
def test_reply_token_ids_that_are_no_reply_are_neither_resent_nor_counted(ids, words):
    rec = {"max_tokens": 64, "error": None, "t_first": None}
    reply = ReplyIds(vocab=1000)
    sink = EventSink(rec, "completions", "token_ids", reply)
    sink.feed(event([1, 2]) + event(ids), 0.5)
    sink.close()
    assert rec["error"].startswith("token_ids of a streamed event: ") and words in rec["error"]
    assert list(reply) == [1, 2] and rec["chunks"] == [(0.5, 2)]


def test_reply_token_ids_of_the_vocabulary_are_kept_in_order():
    rec = {"max_tokens": 64, "error": None, "t_first": None}
    reply = ReplyIds(vocab=1000)
    sink = EventSink(rec, "completions", "token_ids", reply)
    sink.feed(event([1, 999]) + event([0]), 0.5)
    sink.close()
    assert rec["error"] is None and list(reply) == [1, 999, 0] and rec["chunks"] == [(0.5, 2), (0.5, 1)]
