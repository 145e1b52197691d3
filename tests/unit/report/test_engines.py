"""Several engines kept apart, summed and compared (report/derive/engines.py), over scrapes whose
samples carry the endpoint label of bundle format 3 and vLLM's own data-parallel `engine` label."""

from __future__ import annotations

import tomllib

import pytest

from bench.plan import plan_from_dict
from bench.runner import run_round
from bench.standin import StandInThread
from bundle.metric_keys import sample_key
from bundle.request_table import RequestTable
from bundle.store import read_bundle
from report.derive import engines as EN
from report.derive import occupancy as OC
from report.derive.round_ledger import read_round
from report.judge.verdicts import build_ledger
from report.ledger import Absent
from tests.standin_round import STANDIN_ROUND_PLAN


def scrape(t: float, per_engine: dict[tuple[str | None, str], dict[str, float]]) -> dict:
    """One scrape: for each (endpoint or None, rank), its samples by metric name."""
    samples = {}
    for (endpoint, rank), values in per_engine.items():
        labels = {"engine": rank, "model_name": "m"}
        if endpoint is not None:
            labels["endpoint"] = endpoint
        for name, v in values.items():
            samples[sample_key(name, labels)] = v
    return {"t": t, "dt": 0.01, "ok": True, "samples": samples}


def engine_values(running, waiting, kv, gen, done) -> dict[str, float]:
    return {EN.RUNNING: running, EN.WAITING: waiting, EN.KV_USAGE: kv, EN.GENERATION: gen,
            EN.FINISHED: done}


# Two endpoints, the second running two data-parallel ranks; endpoint 10 sorts after 2.
SCRAPES = [
    scrape(0.0, {("0", "0"): engine_values(4, 0, 0.2, 0, 0), ("1", "0"): engine_values(2, 1, 0.1, 0, 0),
                 ("1", "1"): engine_values(2, 0, 0.1, 0, 0), ("10", "0"): engine_values(0, 0, 0.0, 0, 0)}),
    scrape(1.0, {("0", "0"): engine_values(6, 2, 0.4, 300, 3), ("1", "0"): engine_values(2, 1, 0.1, 100, 1),
                 ("1", "1"): engine_values(4, 0, 0.3, 100, 1), ("10", "0"): engine_values(0, 0, 0.0, 0, 0)}),
    scrape(2.0, {("0", "0"): engine_values(5, 1, 0.3, 600, 6), ("1", "0"): engine_values(2, 1, 0.1, 200, 2),
                 ("1", "1"): engine_values(3, 0, 0.2, 200, 2), ("10", "0"): engine_values(0, 0, 0.0, 0, 0)}),
]


def test_engines_are_endpoint_and_rank_pairs_in_numeric_order():
    names = EN.engine_names(SCRAPES, 0.0, 2.0)
    assert names == ("0/0", "1/0", "1/1", "10/0")
    assert EN.engine_count(names) == 4
    assert OC.engines_seen(SCRAPES, 0.0, 2.0) == 4


def test_each_engine_is_kept_apart_and_the_sums_add_them():
    running = EN.engine_running_mean(SCRAPES, 0.0, 2.0)
    assert running == (5.0, 2.0, 3.0, 0.0)
    assert EN.engine_waiting_mean(SCRAPES, 0.0, 2.0) == (1.0, 1.0, 0.0, 0.0)
    assert EN.engine_kv_usage_p50(SCRAPES, 0.0, 2.0) == (0.3, 0.1, 0.2, 0.0)
    names = EN.engine_names(SCRAPES, 0.0, 2.0)
    tok = EN.engine_output_tok_s(SCRAPES, 0.0, 2.0, names)
    assert tok == (300.0, 100.0, 100.0, 0.0)
    done = EN.engine_requests_finished(SCRAPES, 0.0, 2.0, names)
    assert done == (6.0, 2.0, 2.0, 0.0)
    assert EN.engines_running_total(running) == 10.0
    assert EN.engines_output_tok_s_total(tok) == 500.0
    assert EN.engines_requests_finished_total(done) == 10.0
    assert EN.engines_kv_usage_mean((0.3, 0.1, 0.2, 0.0)) == pytest.approx(0.15)
    # The busiest engine made 300 of a mean 125 tok/s; requests: 5 against a mean 2.5.
    assert EN.engine_token_balance(tok) == pytest.approx(2.4)
    assert EN.engine_running_balance(running) == pytest.approx(2.0)
    assert OC.engine_load_balance(SCRAPES, 0.0, 2.0) == pytest.approx(3.0 / 1.25)


def test_one_engine_has_its_values_and_no_balance():
    one = [scrape(t, {(None, "0"): engine_values(3, 0, 0.5, 100 * t, t)}) for t in (0.0, 1.0)]
    assert EN.engine_names(one, 0.0, 1.0) == ("0",)
    tok = EN.engine_output_tok_s(one, 0.0, 1.0, ("0",))
    assert tok == (100.0,)
    with pytest.raises(Absent, match="one engine"):
        EN.engine_token_balance(tok)


def test_an_engine_missing_a_gauge_makes_the_tuple_absent_naming_it():
    holed = [dict(s, samples={k: v for k, v in s["samples"].items()
                              if not (k.startswith(EN.WAITING) and 'endpoint="1"' in k)}) for s in SCRAPES]
    with pytest.raises(Absent, match="engine 1/0 has no value"):
        EN.engine_waiting_mean(holed, 0.0, 2.0)
    with pytest.raises(Absent, match="no vllm:num_requests_running"):
        EN.engine_names([s for s in SCRAPES if False], 0.0, 2.0)


def test_requests_sent_per_endpoint_come_from_the_request_records():
    recs = [{"point": "p", "i": i, "warmup": False, "status": "ok", "endpoint": i % 3 and 1}
            for i in range(7)]
    table = RequestTable.from_records(recs)
    assert EN.endpoint_requests_sent(table, ["a", "b"]) == (3, 4)
    with pytest.raises(Absent, match="one endpoint"):
        EN.endpoint_requests_sent(table, ["a"])
    plain = RequestTable.from_records([{"point": "p", "i": 0, "warmup": False, "status": "ok"}])
    with pytest.raises(Absent, match="record no endpoint"):
        EN.endpoint_requests_sent(plain, ["a", "b"])


def test_the_ledger_of_a_round_against_two_standins_keeps_each_apart(tmp_path):
    d = tomllib.loads(STANDIN_ROUND_PLAN)
    d["sweep"].update(concurrency=[4], requests_per_point=24)
    d["sampler"]["gpu"] = False
    out = tmp_path / "bundle"
    with StandInThread(step_ms=20) as a, StandInThread(step_ms=20) as b:
        d["engine"].update(mode="endpoint", endpoints=[a, b])
        assert run_round(plan_from_dict(d, "two.toml"), out) == "complete"
    rd = read_round(read_bundle(out))
    led = build_ledger(rd)
    k = "p.L16-c4."
    assert led.value_of(k + "engine_names") == ("0/0", "1/0")
    sent = led.value_of(k + "endpoint_requests_sent")
    assert sent == (12, 12)
    done = led.value_of(k + "engine_requests_finished")
    assert len(done) == 2 and all(n > 0 for n in done)
    assert led.value_of(k + "engines_requests_finished_total") == sum(done)
    tok = led.value_of(k + "engine_output_tok_s")
    assert led.value_of(k + "engines_output_tok_s_total") == pytest.approx(sum(tok))
    assert led.value_of(k + "engine_token_balance") >= 1.0
    assert led.value_of(k + "engines_seen") == 2
