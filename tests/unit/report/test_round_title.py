"""The page title names the round in words and what it measured; the plan's title is a subtitle
in the language it is written in, and quoted once in "How to read this" on the other pages."""

from __future__ import annotations

from report.publish.compose import plan_subtitle, plan_title_written, round_title


def _manifest(kind: str, title: str = "") -> dict:
    return {"plan": {"title": title, "workload": {"kind": kind}}}


def test_a_random_concurrency_sweep_is_titled_by_its_axis_and_the_round_in_words():
    t = round_title(_manifest("random"), "concurrency", "round-4")
    assert t == {"en": "Round 4 · Concurrency sweep", "zh": "第 4 轮 · 并发扫描"}
    assert all("round-4" not in text for text in t.values())


def test_a_replayed_trace_with_caching_sets_says_the_trace_and_the_question():
    t = round_title(_manifest("trace"), "server", "round-10", ["prefix_caching", "prefix_caching"])
    assert t["en"] == "Round 10 · Trace replay, with and without prefix caching"
    assert t["zh"] == "第 10 轮 · 轨迹回放，开启与关闭前缀缓存对比"
    assert "Server-flag" not in t["en"] and "服务端参数扫描" not in t["zh"]


def test_a_trace_whose_sets_ask_no_named_question_says_a_server_flag_sweep():
    t = round_title(_manifest("trace"), "server", "round-10", [])
    assert t["en"] == "Round 10 · Trace replay, server-flag sweep"
    assert t["zh"] == "第 10 轮 · 轨迹回放，服务端参数扫描"


def test_sharegpt_and_sessions_name_the_workload_before_the_sweep():
    assert round_title(_manifest("sharegpt"), "concurrency", "round-9") == {
        "en": "Round 9 · ShareGPT-shaped concurrency sweep", "zh": "第 9 轮 · ShareGPT 形态，并发扫描"}
    assert round_title(_manifest("sessions"), "concurrency", "round-11")["en"] == (
        "Round 11 · Multi-turn sessions, concurrency sweep")


def test_a_random_server_sweep_keeps_the_axis_words_and_an_odd_id_stands_as_itself():
    t = round_title(_manifest("random"), "server", "tuning-a", ["prefix_caching"])
    assert t == {"en": "tuning-a · Server-flag sweep", "zh": "tuning-a · 服务端参数扫描"}


def test_the_plan_title_is_a_quoted_subtitle_only_where_the_plan_has_one():
    sub = plan_subtitle(_manifest("trace", "A trace replayed on the H200"))
    assert sub == {"en": "Plan: “A trace replayed on the H200”"}
    assert plan_subtitle(_manifest("trace")) == {} and plan_subtitle({}) == {}


def test_each_page_quotes_the_title_of_its_own_language():
    m = {"plan": {"title": {"en": "A trace replayed on the H200", "zh": "在 H200 上回放轨迹"}}}
    sub = plan_subtitle(m)
    assert sub == {"en": "Plan: “A trace replayed on the H200”", "zh": "计划标题：「在 H200 上回放轨迹」"}
    assert plan_title_written(m, sub) == {}
    only_zh = {"plan": {"title": {"zh": "在 H200 上回放轨迹", "en": "  "}}}
    assert plan_subtitle(only_zh) == {"zh": "计划标题：「在 H200 上回放轨迹」"}


def test_a_page_without_a_title_of_its_language_quotes_the_plans_once_as_written():
    m = _manifest("trace", "A trace replayed on the H200")
    assert plan_title_written(m, plan_subtitle(m)) == {"zh": "A trace replayed on the H200"}
    assert plan_title_written(_manifest("trace"), {}) == {}
