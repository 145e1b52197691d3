"""Cost at the answer (report/judge/cost.py): each point's tokens priced by the GPU-hour, the SLO
capacity's throughput, energy and price interpolated as the capacity is, and the replicas a
target needs with the capacity's bracket carried through; the price from a flag, slo.toml's or
the plan's [cost]; without one no cost is given (absent, never 0) and page 1 says nothing of it.
The numbers of the first tests are HAND-BUILT; the ledger tests read the trimmed H200 round 4
(tests/fixtures/h200-round-4) under an SLO its C=1 meets and its C=64 misses."""

from __future__ import annotations

import math
import shutil

import pytest

from bench.plan.parse import plan_from_dict
from bench.prompts import PlanError
from bundle.cost import Cost, CostError, cost_from_dict
from bundle.slo import slo_from_text
from bundle.store.reader import read_bundle
from report.derive.round.read import read_round
from report.judge import cost as C
from report.judge.verdicts import build_ledger
from report.ledger import Absent
from report.publish.compose import compose_rounds
from report.publish.render.output import render_round
from serving_ledger.cli import main
from tests.conftest import FIXTURES

H200 = FIXTURES / "h200-round-4"
SLO = (slo_from_text("ttft:1000,tpot:50,itl:60,e2e:60000,p:99"), "--slo")


def test_a_million_tokens_cost_the_replicas_gpu_hours_over_the_tokens_it_makes_in_an_hour():
    # $2 a GPU-hour, one GPU, 1,000 tok/s: 3.6 M tokens an hour for $2.
    assert C.usd_per_million(2.0, 1, 1000.0) == pytest.approx(2 / 3.6)
    assert C.usd_per_million(2.0, 8, 1000.0) == pytest.approx(8 * 2 / 3.6)
    with pytest.raises(Absent):
        C.usd_per_million(2.0, 1, 0.0)


def test_a_value_at_the_capacity_is_interpolated_in_log_load_between_its_bracket():
    loads, values = [1.0, 4.0, 16.0], [100.0, 300.0, 600.0]
    assert C.at_capacity(loads, values, 8.0, 4.0, 16.0) == pytest.approx(450.0)   # halfway in log
    assert C.at_capacity(loads, values, 4.0, 4.0, 16.0) == pytest.approx(300.0)
    with pytest.raises(Absent):
        C.at_capacity(loads, [100.0, None, 600.0], 8.0, 4.0, 16.0)


def test_the_replicas_carry_the_capacitys_bracket():
    # 100 req/s over 9 req/s at the capacity: 12; over the bracket's 8 and 10: 13 and 10.
    assert C.replicas_for_target(9.0, 900.0, target_req_s=100.0) == 12
    assert C.replicas_for_target_low(10.0, 1000.0, target_req_s=100.0) == 10
    assert C.replicas_for_target_high(8.0, 800.0, target_req_s=100.0) == 13
    # A target in output tokens reads the token rates.
    assert C.replicas_for_target(9.0, 900.0, target_tok_s=1800.0) == 2
    with pytest.raises(Absent, match="no target load"):
        C.replicas_for_target(9.0, 900.0)


def test_a_cost_table_is_checked_and_a_flag_overrides_the_rounds_own_keys():
    cost = cost_from_dict({"gpu_hour_price": 2.5, "target_req_s": 40}, "slo.toml")
    assert cost == Cost(2.5, 40.0, None)
    assert Cost(gpu_hour_price=4.0).over(cost) == Cost(4.0, 40.0, None)
    for table, words in (({"gpu_hour_price": 0}, "[cost].gpu_hour_price: must be above 0"),
                         ({"gpu_hour_price": "2"}, "expected a finite number"),
                         ({"price": 2}, "unknown key(s) ['price']")):
        with pytest.raises(CostError) as e:
            cost_from_dict(table, "p.toml")
        assert words in str(e.value) and "\n" not in str(e.value)


def test_a_plan_takes_a_cost_table_and_records_none_when_it_gives_none():
    plan = plan_from_dict({"cost": {"gpu_hour_price": 3.0, "target_tok_s": 5000}}, "p.toml")
    assert plan.cost == {"gpu_hour_price": 3.0, "target_tok_s": 5000.0}
    assert plan.to_dict()["cost"] == plan.cost
    assert "cost" not in plan_from_dict({}, "p.toml").to_dict()
    with pytest.raises(PlanError, match=r"p.toml \[cost\].gpu_hour_price: must be above 0"):
        plan_from_dict({"cost": {"gpu_hour_price": -1}}, "p.toml")


def test_a_bad_price_flag_exits_2_naming_it(capsys):
    assert main(["ledger", str(FIXTURES / "cpu-demo"), "--gpu-hour-price", "-2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --gpu-hour-price: must be above 0") and err.count("\n") == 1


@pytest.fixture(scope="module")
def priced():
    rd = read_round(read_bundle(H200), SLO, cost=(Cost(3.5, target_req_s=40.0), "--gpu-hour-price"))
    return rd, build_ledger(rd)


def test_every_point_and_the_capacity_are_priced(priced):
    rd, led = priced
    for p in rd.points:
        k = f"p.{p.pid}."
        out = led.value_of(k + "output_tok_s")
        gpus = led.value_of(k + "gpus_per_replica")
        assert gpus == 1
        assert led.value_of(k + "usd_per_m_output_tokens") == pytest.approx(3.5 * gpus / 3600 / out * 1e6)
        assert led.value_of(k + "usd_per_m_total_tokens") < led.value_of(k + "usd_per_m_output_tokens")
    low, high = led.value_of("r.slo_capacity_low"), led.value_of("r.slo_capacity_high")
    at = {p.settings["concurrency"]: p.pid for p in rd.points}
    cap_out = led.value_of("r.capacity_output_tok_s")
    lo_out, hi_out = (led.value_of(f"p.{at[x]}.output_tok_s") for x in (low, high))
    assert min(lo_out, hi_out) <= cap_out <= max(lo_out, hi_out)
    assert led.value_of("r.capacity_output_tok_s_low") == lo_out
    assert led.value_of("r.capacity_usd_per_m_output_tokens") == pytest.approx(3.5 / 3600 / cap_out * 1e6)
    assert led["r.capacity_joules_per_token"].present
    n, lo_n, hi_n = (led.value_of(f"r.replicas_for_target{s}") for s in ("", "_low", "_high"))
    assert lo_n <= n <= hi_n
    assert hi_n == math.ceil(40.0 / led.value_of("r.capacity_req_s_low"))
    assert led.value_of("r.gpus_for_target") == n


def test_without_a_price_no_cost_is_given_and_the_page_says_none(tmp_path):
    rd = read_round(read_bundle(H200), SLO)
    led = build_ledger(rd)
    price = led["r.gpu_hour_price"]
    assert not price.present and "no price per GPU-hour was given" in price.missing.text("en")
    for p in rd.points:
        v = led[f"p.{p.pid}.usd_per_m_output_tokens"]
        assert v.value is None and "price per GPU-hour" in v.missing.text("en")
    assert not led["r.capacity_usd_per_m_output_tokens"].present
    assert led["r.capacity_output_tok_s"].present      # the capacity's throughput needs no price


def conclusion(html: dict[str, str], lang: str) -> str:
    """Page 1's conclusion section of a rendered round, in LANG."""
    head = {"en": "Conclusion", "zh": "结论"}[lang]
    return html[f"index.{lang}.html"].split(head, 1)[1].split("<h2", 1)[0]


def test_page_one_states_the_cost_only_where_a_price_is_given_and_the_capacitys_energy_always(tmp_path):
    shutil.copytree(H200, tmp_path / "round-4" / "bundle")
    (tmp_path / "round-4" / "slo.toml").write_text(
        "[slo]\nttft_ms = 1000\ntpot_ms = 50\nitl_ms = 60\ne2e_ms = 60000\n\n"
        "[cost]\ngpu_hour_price = 3.5\ntarget_req_s = 40\n")
    priced = compose_rounds([(tmp_path / "round-4" / "bundle", "round-4")])[0]
    assert priced.ledger.value_of("r.gpu_hour_price") == 3.5
    (tmp_path / "priced").mkdir()
    page = render_round(priced, tmp_path / "priced", formats=("html",))
    html = {p.name: p.read_text() for p in page.paths if p.suffix == ".html"}
    assert "of output" in conclusion(html, "en") and "replicas" in conclusion(html, "en")
    assert "美元" in conclusion(html, "zh") and "个副本" in conclusion(html, "zh")
    (tmp_path / "round-4" / "slo.toml").write_text("[slo]\nttft_ms = 1000\ntpot_ms = 50\nitl_ms = 60\ne2e_ms = 60000\n")
    bare = compose_rounds([(tmp_path / "round-4" / "bundle", "round-4")])[0]
    (tmp_path / "bare").mkdir()
    page = render_round(bare, tmp_path / "bare", formats=("html",))
    html = {p.name: p.read_text() for p in page.paths if p.suffix == ".html"}
    assert "of output" not in conclusion(html, "en") and "美元" not in conclusion(html, "zh")
    # The capacity's energy needs no price: the SLO section states it either way.
    capacity = html["index.en.html"].split('id="sec-slo"', 1)[1].split("</section>", 1)[0]
    assert "per token processed, prompt and output" in capacity


def test_a_bad_cost_in_slo_toml_stops_the_ledger_in_one_line_and_not_the_summary(tmp_path, capsys):
    shutil.copytree(FIXTURES / "cpu-demo", tmp_path / "round-1" / "bundle")
    (tmp_path / "round-1" / "slo.toml").write_text("[slo]\nttft_ms = 500\n\n[cost]\ngpu_hour_price = 0\n")
    assert main(["ledger", str(tmp_path / "round-1")]) == 2
    err = capsys.readouterr().err
    assert "slo.toml [cost].gpu_hour_price: must be above 0" in err and err.count("\n") == 1
    assert main(["summary", str(tmp_path / "round-1")]) == 0


def test_a_price_flag_is_part_of_a_rounds_build_key():
    from report.publish.buildkey import round_key
    plain = round_key(H200, None, "code", ("html",))
    priced = round_key(H200, None, "code", ("html",), None, repr(Cost(3.5)))
    assert priced != plain and priced != round_key(H200, None, "code", ("html",), None, repr(Cost(4.0)))
