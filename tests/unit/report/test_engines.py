"""Several engines kept apart, summed and compared (report/derive/load/engines.py), over scrapes whose
samples carry the endpoint label of bundle format 3 and vLLM's own data-parallel `engine` label.

The scrapes of the first tests are HAND-BUILT in metrics.jsonl's format (docs/bundle.md); the last
test records a round against two stand-in servers (bench/standin/), not vLLM."""

from __future__ import annotations

import tomllib

import pytest

from bench.plan.parse import plan_from_dict
from bench.runner import run_round
from bench.standin.thread import StandInThread
from bundle.metric_keys import sample_key
from bundle.request_table.table import RequestTable
from bundle.store.reader import read_bundle
from report.derive.load import admission as LA
from report.derive.load import engines as OC
from report.derive.load import inflight as LI
from report.derive.round.read import read_round
from report.judge.verdicts import build_ledger
from report.ledger import Absent, Ledger
from report.publish.tables import ENGINE_COLUMNS, item_table
from report.registry import RawSources, resolve_point
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
    return {OC.RUNNING: running, OC.WAITING: waiting, OC.KV_USAGE: kv, OC.GENERATION: gen,
            OC.FINISHED: done}


# Two endpoints, the second running two data-parallel ranks; endpoint 10 sorts after 2.
SCRAPES = [
    scrape(0.0, {("0", "0"): engine_values(4, 0, 0.2, 0, 0), ("1", "0"): engine_values(2, 1, 0.1, 0, 0),
                 ("1", "1"): engine_values(2, 0, 0.1, 0, 0), ("10", "0"): engine_values(0, 0, 0.0, 0, 0)}),
    scrape(1.0, {("0", "0"): engine_values(6, 2, 0.4, 300, 3), ("1", "0"): engine_values(2, 1, 0.1, 100, 1),
                 ("1", "1"): engine_values(4, 0, 0.3, 100, 1), ("10", "0"): engine_values(0, 0, 0.0, 0, 0)}),
    scrape(2.0, {("0", "0"): engine_values(5, 1, 0.3, 600, 6), ("1", "0"): engine_values(2, 1, 0.1, 200, 2),
                 ("1", "1"): engine_values(3, 0, 0.2, 200, 2), ("10", "0"): engine_values(0, 0, 0.0, 0, 0)}),
]


def ledger_of(scrapes, measured=None, endpoints=("a",)) -> Ledger:
    led, raw = Ledger(), RawSources()
    for name in ("scrapes", "steady_scrapes"):
        raw.add(name, scrapes, ("metrics.jsonl",))
    for name in ("bracket_start", "steady_start"):
        raw.add(name, 0.0)
    for name in ("bracket_end", "steady_end"):
        raw.add(name, 2.0)
    raw.add("engine_items", OC.engine_items(scrapes, 0.0, 2.0), ("metrics.jsonl",))
    raw.add("measured", measured if measured is not None else RequestTable.from_records([]))
    raw.add("endpoints", list(endpoints))
    for module in (LI, LA, OC):
        resolve_point(led, module.__name__, "c8", raw)
    return led


def test_engines_are_endpoint_and_rank_pairs_in_numeric_order():
    led = ledger_of(SCRAPES)
    assert led.value_of("p.c8.engine_names") == ("0/0", "1/0", "1/1", "10/0")
    assert led.value_of("p.c8.engine_count") == 4 and led.value_of("p.c8.engines_seen") == 4
    assert [led.value_of(f"p.c8.engine{k}.engine_name_of") for k in range(4)] == ["0/0", "1/0", "1/1", "10/0"]


def test_each_engine_is_kept_apart_and_the_sums_add_them():
    led = ledger_of(SCRAPES)

    def each(name):
        return [led.value_of(f"p.c8.engine{k}.{name}") for k in range(4)]
    assert each("engine_running_mean") == [5.0, 2.0, 3.0, 0.0]
    assert each("engine_waiting_mean") == [1.0, 1.0, 0.0, 0.0]
    assert each("engine_kv_usage_p50") == [0.3, 0.1, 0.2, 0.0]
    assert each("engine_output_tok_s") == [300.0, 100.0, 100.0, 0.0]
    assert each("engine_requests_finished") == [6.0, 2.0, 2.0, 0.0]
    assert led.value_of("p.c8.engines_running_total") == 10.0
    assert led.value_of("p.c8.engines_waiting_total") == 2.0
    assert led.value_of("p.c8.engines_output_tok_s_total") == 500.0
    assert led.value_of("p.c8.engines_requests_finished_total") == 10.0
    assert led.value_of("p.c8.engines_kv_usage_mean") == pytest.approx(0.15)
    # The busiest engine made 300 of a mean 125 tok/s; running: 5 against a mean 2.5.
    assert led.value_of("p.c8.engine_token_balance") == pytest.approx(2.4)
    assert led.value_of("p.c8.engine_running_balance") == pytest.approx(2.0)
    assert led.value_of("p.c8.engine_load_balance") == pytest.approx(3.0 / 1.25)
    table = item_table(led, "c8", "engine", "engine_table", {"en": "", "zh": ""}, ENGINE_COLUMNS,
                       "label.row_engine", name="engine_name_of")
    assert [lab["en"] for lab in table.row_labels] == [f"engine {n}" for n in ("0/0", "1/0", "1/1", "10/0")]


def test_one_engine_has_its_values_and_no_balance():
    one = [scrape(t, {(None, "0"): engine_values(3, 0, 0.5, 100 * t, t)}) for t in (0.0, 1.0, 2.0)]
    led = ledger_of(one)
    assert led.value_of("p.c8.engine_names") == ("0",)
    assert led.value_of("p.c8.engine0.engine_output_tok_s") == 100.0
    assert "one engine" in str(led["p.c8.engine_token_balance"].missing)
    assert "one endpoint" in str(led["p.c8.endpoint_requests_sent"].missing)


def test_an_engine_missing_a_gauge_makes_the_sum_absent_naming_it():
    holed = [dict(s, samples={k: v for k, v in s["samples"].items()
                              if not (k.startswith(OC.WAITING) and 'endpoint="1"' in k)}) for s in SCRAPES]
    led = ledger_of(holed)
    assert "engine 1/0 has no value" in str(led["p.c8.engines_waiting_total"].missing)
    assert not led["p.c8.engine1.engine_waiting_mean"].present
    assert led.value_of("p.c8.engine0.engine_waiting_mean") == 1.0
    with pytest.raises(Absent, match="no vllm:num_requests_running"):
        LA.engine_names([], 0.0, 2.0)


def test_requests_sent_per_endpoint_come_from_the_request_records():
    recs = [{"point": "p", "i": i, "warmup": False, "status": "ok", "endpoint": i % 3 and 1}
            for i in range(7)]
    table = RequestTable.from_records(recs)
    assert OC.endpoint_requests_sent(table, ["a", "b"]) == (3, 4)
    assert OC.endpoint_request_balance((3, 4)) == pytest.approx(4 / 3.5)
    plain = RequestTable.from_records([{"point": "p", "i": 0, "warmup": False, "status": "ok"}])
    with pytest.raises(Absent, match="record no endpoint"):
        OC.endpoint_requests_sent(plain, ["a", "b"])


def test_the_ledger_of_a_round_against_two_standins_keeps_each_apart(tmp_path):
    d = tomllib.loads(STANDIN_ROUND_PLAN)
    d["sweep"].update(concurrency=[4], requests_per_point=24)
    d["sampler"]["gpu"] = False
    out = tmp_path / "bundle"
    with StandInThread(step_ms=20) as a, StandInThread(step_ms=20) as b:
        d["engine"].update(mode="endpoint", endpoints=[a, b])
        assert run_round(plan_from_dict(d, "two.toml"), out) == "complete"
    led = build_ledger(read_round(read_bundle(out)))
    k = "p.L16-c4."
    assert led.value_of(k + "engine_names") == ("0/0", "1/0")
    assert led.value_of(k + "endpoint_requests_sent") == (12, 12)
    assert led.value_of(k + "endpoint_request_balance") == 1.0
    done = [led.value_of(f"{k}engine{e}.engine_requests_finished") for e in (0, 1)]
    assert all(n > 0 for n in done)
    assert led.value_of(k + "engines_requests_finished_total") == sum(done)
    tok = [led.value_of(f"{k}engine{e}.engine_output_tok_s") for e in (0, 1)]
    assert led.value_of(k + "engines_output_tok_s_total") == pytest.approx(sum(tok))
    assert led.value_of(k + "engine_token_balance") >= 1.0
    assert led.value_of(k + "engines_seen") == 2


def test_the_parallel_section_is_on_the_page_only_with_engines_or_gpus_in_parallel():
    from report.publish.tables import runs_in_parallel
    assert runs_in_parallel(ledger_of(SCRAPES), "c8")
    one = ledger_of([scrape(t, {(None, "0"): engine_values(3, 0, 0.5, 100 * t, t)}) for t in (0.0, 1.0)])
    assert not runs_in_parallel(one, "c8") and not runs_in_parallel(one, None)
    one.record("p.c8.tensor_parallel_size", 2, doc="hand-set for the test")
    assert runs_in_parallel(one, "c8")
