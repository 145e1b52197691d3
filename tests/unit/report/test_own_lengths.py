"""The KV, theory and MFU sections over each request's own lengths where a workload varies them
(report/derive/reconcile/kvpool.py, round.read.modelled_lengths), the plan's nominal ones elsewhere,
and the page's notice saying which."""

from __future__ import annotations

import itertools
import math
import re
import statistics

import numpy as np
import pytest

from bundle.request_table.table import RequestTable
from report.architecture import theory as T
from report.derive.reconcile import kvpool as R
from report.derive.stats import point as ST
from report.judge.verdicts import read_bundle_ledger
from report.ledger import Absent
from report.publish.compose import compose_round
from tests.conftest import ROOT

BLOCK, POOL = 16, 16 * 999


def table(lengths: list[tuple[int, int]], ok: bool = True) -> RequestTable:
    """Answered requests of these (prompt, output) usage counts."""
    return RequestTable.from_records([
        {"point": "p", "i": n, "warmup": False, "status": "ok" if ok else "error", "t_send": 0.0,
         "t_end": 1.0, "chunks": [], "usage": {"prompt_tokens": i, "completion_tokens": o}}
        for n, (i, o) in enumerate(lengths)])


@pytest.mark.parametrize("L, out", [(256, 64), (100, 300), (1024, 1), (15, 2)])
def test_requests_of_one_length_give_the_nominal_values(L, out):
    reqs = table([(L, out)] * 5)
    assert R.request_peak_tokens_sent_mean(reqs, BLOCK) == T.request_peak_tokens(L, out, BLOCK)
    assert R.request_mean_tokens_sent_mean(reqs, BLOCK) == T.request_mean_tokens(L, out, BLOCK)
    assert R.block_alignment_waste_tokens_sent(reqs, BLOCK, 3) == T.block_alignment_waste_tokens(L, out, BLOCK, 3)
    for c, running in ((1, 1.0), (4, 4.0), (4, 2.5)):
        assert R.expected_kv_usage_median_fraction_sent(c, running, reqs, BLOCK, POOL) == pytest.approx(
            R.expected_kv_usage_median_fraction_effective(c, running, L, out, BLOCK, POOL), abs=1e-15)


def test_the_expected_median_draws_each_slot_from_every_request_step():
    # Two requests of their own lengths; a slot at a random instant is at one visible step of
    # one of them (progress 0 ... out - 2), every step equally likely: the brute-force median
    # over all pairs of steps is the model's.
    lengths = [(200, 60), (15, 3), (300, 9), (31, 1)]
    steps = [math.ceil((i + j) / BLOCK) for i, o in lengths for j in range(o - 1)]
    pair_median = statistics.median(a + b for a, b in itertools.product(steps, repeat=2))
    reqs = table(lengths)
    assert R.expected_kv_usage_median_fraction_sent(2, 2.0, reqs, BLOCK, POOL) == pytest.approx(
        pair_median * BLOCK / POOL)
    assert R.expected_kv_usage_median_fraction_sent(1, 1.0, reqs, BLOCK, POOL) == pytest.approx(
        statistics.median(steps) * BLOCK / POOL)
    # Not the nominal model at the mean lengths: the spread moves the median.
    mean_in, mean_out = round(np.mean([i for i, _ in lengths])), round(np.mean([o for _, o in lengths]))
    assert R.expected_kv_usage_median_fraction_sent(2, 2.0, reqs, BLOCK, POOL) != pytest.approx(
        R.expected_kv_usage_median_fraction(2, mean_in, mean_out, BLOCK, POOL))
    # The peak is the mean of each request's own; the mean tokens weigh by output tokens.
    assert R.request_peak_tokens_sent_mean(reqs, BLOCK) == pytest.approx(
        np.mean([T.request_peak_tokens(i, o, BLOCK) for i, o in lengths]))
    assert R.request_mean_tokens_sent_mean(reqs, BLOCK) == pytest.approx(
        sum(o * T.request_mean_tokens(i, o, BLOCK) for i, o in lengths) / sum(o for _, o in lengths))
    assert ST.prompt_tokens_sent_mean(reqs, lengths_vary=True) == pytest.approx(136.5)
    assert ST.output_tokens_sent_mean(reqs, lengths_vary=True) == pytest.approx(18.25)


def test_no_answered_request_with_usage_is_absent_with_its_reason():
    with pytest.raises(Absent) as e:
        ST.prompt_tokens_sent_mean(table([(10, 4)], ok=False), lengths_vary=True)
    assert e.value.reason.code == "reason.no_lengths_sent"


def _lengths_of(rd, pid: str) -> list[tuple[int, int]]:
    p = next(p for p in rd.points if p.pid == pid)
    return [(r["usage"]["prompt_tokens"], r["usage"]["completion_tokens"]) for r in p.measured
            if r["status"] == "ok" and r.get("usage")]


def test_a_round_of_drawn_lengths_models_each_requests_own():
    # Round 8: lognormal output lengths, 256-token prompts.
    rd, led = read_bundle_ledger(ROOT / "runs" / "round-8" / "bundle")
    own, blk = _lengths_of(rd, "L256-c16"), led.value_of("r.block_size")
    assert len({o for _, o in own}) > 10
    assert led.value_of("p.L256-c16.output_tokens_sent_mean") == pytest.approx(np.mean([o for _, o in own]))
    assert led.value_of("p.L256-c16.request_peak_tokens") == pytest.approx(
        np.mean([T.request_peak_tokens(i, o, blk) for i, o in own]))
    p = next(p for p in rd.points if p.pid == "L256-c16")
    assert led.value_of("p.L256-c16.kv_expected_median") == R.expected_kv_usage_median_fraction_sent(
        16, led.value_of("p.L256-c16.server_running_median"), p.measured, blk, led.value_of("r.pool_tokens_usable"))
    assert led.value_of("p.L256-c16.request_peak_tokens") != T.request_peak_tokens(256, 64, blk)


def test_a_round_of_fixed_lengths_models_the_plans():
    rd, led = read_bundle_ledger(ROOT / "runs" / "round-2" / "bundle")
    assert not rd.lengths_vary
    pid = rd.points[0].pid
    assert f"p.{pid}.prompt_tokens_sent_mean" not in led
    p, k = rd.points[0], f"p.{pid}."
    assert led.value_of(k + "kv_expected_median") == R.expected_kv_usage_median_fraction_effective(
        p.settings["concurrency"], led.value_of(k + "server_running_median"), p.settings["input_len"],
        p.settings["output_len"], led.value_of("r.block_size"), led.value_of("r.pool_tokens_usable"))


@pytest.mark.parametrize("round_id, said", [("round-8", True), ("round-11", True), ("round-2", False)])
def test_the_notice_of_own_lengths_is_said_only_where_lengths_vary(round_id, said):
    report = compose_round(ROOT / "runs" / round_id / "bundle", round_id)
    en = [n["en"] for n in report.notices]
    assert any("own prompt and output tokens" in t for t in en) == said
    assert not any("nominal lengths" in t for t in en)


@pytest.mark.parametrize("round_id, lead", [
    ("round-8", "drawn from the plan's distributions"),
    ("round-9", "one conversation of the ShareGPT dataset"),
    ("round-10", "one request of the replayed trace"),
    ("round-11", "a session's prompt grows with the history it resends"),
])
def test_the_notice_names_where_the_rounds_lengths_came_from_and_only_that(round_id, lead):
    leads = ("drawn from the plan's distributions", "one conversation of the ShareGPT dataset",
             "one request of the replayed trace", "a session's prompt grows with the history it resends")
    report = compose_round(ROOT / "runs" / round_id / "bundle", round_id)
    notice = next(n for n in report.notices if "own prompt and output tokens" in n["en"])
    assert [x for x in leads if x in notice["en"]] == [lead]
    assert notice["zh"].startswith("每个请求的提示词与输出长度各不相同")
    assert not re.search(r"[\u4e00-\u9fff。：；] +[\u4e00-\u9fff]", notice["zh"])
