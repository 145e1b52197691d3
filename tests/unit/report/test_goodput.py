"""Goodput, attainment and the capacity answer (report/derive/goodput.py) on hand-built
requests and margins, and the SLO's parsing (bundle/slo.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bundle.request_table.table import RequestTable
from bundle.slo import Slo, SloError, slo_from_dict, slo_from_text
from report.judge import goodput as G
from report.ledger import Absent
from tests.unit.report.test_ledger_contract import _request


def _one(i: int, ttft_s: float, n_out: int, gap_s: float = 0.010) -> dict:
    """A hand-built request sent at 10·i s: first token after TTFT_S, then N_OUT−1 tokens GAP_S apart."""
    r = _request("p", i, False, 10.0 * i, 64, n_out)
    first = r["t_send"] + ttft_s
    r["chunks"] = [[first + gap_s * k, 1] for k in range(n_out)]
    r["t_first"], r["t_end"] = first, r["chunks"][-1][0] + 0.001
    return r


def test_a_request_is_good_only_when_it_meets_every_objective_and_a_failed_one_never_is():
    measured = RequestTable.from_records([
        _one(0, 0.100, 10),              # TTFT 100 ms, TPOT 10 ms: good
        _one(1, 0.900, 10),              # TTFT 900 ms: fails TTFT
        _one(2, 0.100, 10, gap_s=0.030),  # TPOT 30 ms: fails TPOT
        _one(3, 0.100, 1),               # one token: no TPOT, counted apart
    ])
    failed = RequestTable.from_records([dict(_one(4, 0.1, 2), status="error", error="reset")])
    slo = Slo(ttft_ms=500, tpot_ms=20)
    assert G.slo_good_requests(measured, slo) == 1
    assert G.slo_unmeasurable_requests(measured, slo) == 1
    assert G.slo_judged_requests(measured, failed, slo) == 3 + 1
    assert G.slo_attainment(1, 4) == pytest.approx(0.25)
    # Without a TPOT objective the one-token reply is judged (and good).
    assert G.slo_good_requests(measured, Slo(ttft_ms=500)) == 3
    assert G.slo_unmeasurable_requests(measured, Slo(ttft_ms=500)) == 0


def test_goodput_counts_the_good_requests_and_their_tokens_completed_in_the_window():
    measured = RequestTable.from_records([_one(0, 0.1, 10), _one(1, 0.9, 10), _one(2, 0.1, 20)])
    slo = Slo(ttft_ms=500)
    # Window [0, 25] s holds all three ends; the good ones are requests 0 and 2 (10 + 20 tokens).
    assert G.goodput_req_s(measured, slo, 0.0, 25.0) == pytest.approx(2 / 25)
    assert G.goodput_tok_s(measured, slo, 0.0, 25.0) == pytest.approx(30 / 25)
    # Request 2 ends at ~20.3 s: outside a window that closes at 20 s.
    assert G.goodput_req_s(measured, slo, 0.0, 20.0) == pytest.approx(1 / 20)


def test_objectives_the_slo_does_not_set_are_absent_with_their_name():
    measured = RequestTable.from_records([_one(0, 0.1, 10)])
    with pytest.raises(Absent) as e:
        G.slo_e2e_ms(measured, Slo(ttft_ms=500))
    assert e.value.reason.code == "reason.slo_objective_unset"
    assert e.value.reason.param("objective") == "E2E"
    with pytest.raises(Absent):
        G.slo_good_requests(measured, Slo(itl_ms=50))     # ITL has no per-request reading


def test_point_margin_is_one_minus_the_percentile_over_the_threshold():
    measured = RequestTable.from_records([_one(i, 0.1 * (i + 1), 5) for i in range(5)])
    slo = Slo(ttft_ms=400, percentile=50)
    assert G.slo_ttft_ms(measured, slo) == pytest.approx(300.0)
    assert G.slo_margin_ttft(300.0, slo) == pytest.approx(0.25)
    assert G.slo_met(slo, slo_margin_ttft=0.25, slo_margin_itl=-0.1) is False
    assert G.slo_met(slo, slo_margin_ttft=0.25) is True


@given(st.lists(st.floats(-10, 10), min_size=1, max_size=30))
def test_the_isotonic_fit_never_increases_and_keeps_the_mean(ys):
    fit = G.isotonic_non_increasing(ys)
    assert len(fit) == len(ys)
    assert all(a >= b - 1e-9 for a, b in zip(fit, fit[1:]))
    assert sum(fit) == pytest.approx(sum(ys), abs=1e-6)


def test_an_already_non_increasing_curve_is_its_own_fit():
    assert G.isotonic_non_increasing([3.0, 2.0, 2.0, -1.0]) == [3.0, 2.0, 2.0, -1.0]
    assert G.isotonic_non_increasing([1.0, 3.0]) == [2.0, 2.0]


def test_the_capacity_is_interpolated_in_log_load_between_the_bracketing_points():
    c = G.objective_crossing("itl", [0.9, 0.5, 0.25, -0.25], [8, 16, 32, 64])
    assert (c.low, c.high) == (32, 64)
    assert c.capacity == 45                          # 2^(5 + 0.5) = 45.25, floored: a concurrency
    assert c.residual_max == 0
    rate = G.objective_crossing("ttft", [0.5, -0.5], [1.0, 4.0])
    assert rate.capacity == pytest.approx(2.0)       # a rate keeps its fraction


def test_a_margin_that_wobbles_is_fitted_before_the_crossing_is_read():
    # 16's margin dips below 0 and recovers at 32: the fit pools them, the residual says so.
    c = G.objective_crossing("ttft", [0.5, -0.1, 0.1, -0.5], [8, 16, 32, 64])
    assert (c.low, c.high) == (32, 64)
    assert c.residual_max == pytest.approx(0.1)


@pytest.mark.parametrize("margins,code", [([0.2, 0.1, 0.05], "reason.slo_met_at_every_point"),
                                          ([-0.1, -0.2, -0.5], "reason.slo_met_at_no_point"),
                                          ([0.2, None, None], "reason.slo_too_few_points")])
def test_no_crossing_says_where_the_capacity_lies(margins, code):
    with pytest.raises(Absent) as e:
        G.objective_crossing("ttft", margins, [1, 2, 4])
    assert e.value.reason.code == code


def test_the_binding_objective_is_the_one_that_crosses_first():
    kw = dict(each_slo_margin_ttft=[0.9, 0.5, -0.5], each_slo_margin_itl=[0.5, -0.5, -0.9])
    slo = Slo(ttft_ms=1, itl_ms=1)
    assert G.slo_binding_objective(slo, [1, 2, 4], **kw) == "itl"
    assert G.slo_capacity(slo, [1, 2, 4], **kw) == 1
    assert (G.slo_capacity_low(slo, [1, 2, 4], **kw), G.slo_capacity_high(slo, [1, 2, 4], **kw)) == (1, 2)
    # An objective met everywhere does not bind; one met nowhere leaves no capacity.
    assert G.slo_capacity(slo, [1, 2, 4], each_slo_margin_ttft=[0.9, 0.5, 0.1],
                          each_slo_margin_itl=[0.5, -0.5, -0.9]) == 1
    with pytest.raises(Absent):
        G.slo_capacity(slo, [1, 2, 4], each_slo_margin_ttft=[-0.1, -0.5, -0.9],
                       each_slo_margin_itl=[0.5, -0.5, -0.9])


def test_the_best_point_is_the_highest_throughput_that_meets_the_slo():
    slo = Slo(ttft_ms=1)
    assert G.slo_best_load(slo, [1, 2, 4], [True, True, False], [10.0, 18.0, 30.0]) == 2
    with pytest.raises(Absent):
        G.slo_best_load(slo, [1, 2], [False, None], [10.0, 18.0])


def test_an_slo_is_read_from_a_table_or_vllm_style_text_and_refused_with_its_field():
    assert slo_from_text("ttft:500,tpot:50 e2el:9000,p:95") == Slo(500, 50, 9000, None, 95)
    assert slo_from_dict({"itl_ms": 80}, "x").objectives() == {"itl_ms": 80}
    for bad, where in (({"ttft_ms": -1}, "[slo].ttft_ms"), ({"percentile": 99}, "no objective"),
                       ({"ttft": 5}, "unknown key"), ({"ttft_ms": 5, "percentile": 120}, "percentile"),
                       ({"ttft_ms": True}, "[slo].ttft_ms")):
        with pytest.raises(SloError, match=where.replace("[", r"\[").replace("]", r"\]")):
            slo_from_dict(bad, "plan.toml")
    with pytest.raises(SloError, match="NAME:MS"):
        slo_from_text("ttft=500")
