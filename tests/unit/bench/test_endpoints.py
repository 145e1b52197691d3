"""A round against several endpoints (data parallel): requests in turn, every /metrics on one tick."""

from __future__ import annotations

import asyncio
import tomllib

import aiohttp
import pytest

from bench.cli import plan_from_args
from bench.plan.parse import plan_from_dict
from bench.point_driver import route
from bench.prompts import PlanError
from bench.runner import run_round
from bench.samplers import Context
from bench.samplers.scrape import MetricsSampler
from bench.standin.thread import StandInThread
from bundle.metric_keys import split_key
from bundle.store.reader import read_bundle
from bundle.store.writer import BundleWriter
from serving_ledger.cli import build_parser
from tests.standin_round import STANDIN_ROUND_PLAN


def standin_plan(**engine) -> dict:
    d = tomllib.loads(STANDIN_ROUND_PLAN)
    d["engine"].update(engine)
    d["sampler"]["gpu"] = False
    return d


def test_route_sends_requests_in_turn_and_names_the_endpoint_only_when_several():
    assert route(["a"], 5, {"x": 1}) == ("a", {"x": 1})
    assert [route(["a", "b"], i)[0] for i in range(4)] == ["a", "b", "a", "b"]
    assert route(["a", "b", "c"], 5, None) == ("c", {"endpoint": 2})


@pytest.mark.parametrize("table, words", [
    ({"mode": "endpoint", "endpoint": "http://a:1", "endpoints": ["http://a:1", "http://b:1"]},
     "not both"),
    ({"mode": "endpoint", "endpoints": ["http://a:1"]}, "two or more"),
    ({"mode": "endpoint", "endpoints": ["http://a:1", "http://a:1"]}, "named twice"),
    ({"mode": "embedded", "endpoints": ["http://a:1", "http://b:1"]}, "launch or endpoint"),
    ({"mode": "launch", "endpoints": ["http://a:1", "http://b:1"], "commands": ["x"]},
     "1 command line(s) for 2 endpoints"),
    ({"mode": "endpoint", "endpoints": ["http://a:1", "http://b:1"], "commands": ["x", "y"]},
     "only in launch mode"),
    ({"mode": "endpoint", "endpoints": ["http://a:1", 3]}, "is not a string"),
])
def test_plan_refuses_endpoints_that_do_not_name_one_server_each(table, words):
    with pytest.raises(PlanError) as e:
        plan_from_dict(standin_plan(**table), "p.toml")
    assert words in str(e.value) and "p.toml [engine]." in str(e.value)


def test_repeated_endpoint_flags_are_the_plans_endpoints():
    args = build_parser().parse_args(["run", "--endpoint", "http://a:1", "--endpoint", "http://b:1",
                                      "--out", "x"])
    plan = plan_from_args(args)
    assert args.endpoint == ["http://a:1", "http://b:1"]
    args = build_parser().parse_args(["run", "--launch", "s0", "--launch", "s1", "--endpoint",
                                      "http://a:1", "--endpoint", "http://b:1", "--out", "x"])
    plan = plan_from_args(args)
    e = plan.engine
    assert (e.mode, e.endpoint, e.command) == ("launch", "", "")
    assert e.endpoints == ["http://a:1", "http://b:1"] and e.commands == ["s0", "s1"]
    args = build_parser().parse_args(["run", "--launch", "s0", "--endpoint", "http://a:1",
                                      "--endpoint", "http://b:1", "--out", "x"])
    with pytest.raises(PlanError, match="1 command line"):
        plan_from_args(args)


def test_a_round_against_two_standins_spreads_requests_and_labels_each_scrape(tmp_path):
    out = tmp_path / "bundle"
    with StandInThread(step_ms=5) as a, StandInThread(step_ms=5) as b:
        plan = plan_from_dict(standin_plan(mode="endpoint", endpoints=[a, b]), "two.toml")
        assert run_round(plan, out) == "complete"
    bundle = read_bundle(out)
    assert not bundle.warnings
    eng = bundle.manifest["engine"]
    assert eng["endpoints"] == [a, b] and [e["endpoint"] for e in eng["engines"]] == [a, b]
    for pid in ("L16-c1", "L16-c2"):
        recs = [r for r in bundle.requests if r["point"] == pid]
        assert [r["endpoint"] for r in sorted(recs, key=lambda r: r["i"])] == \
            [r["i"] % 2 for r in sorted(recs, key=lambda r: r["i"])]
    ok = [m for m in bundle.metrics if m["ok"]]
    assert len(ok) >= 2
    for m in ok:
        labels = [split_key(k)[1] for k in m["samples"]]
        assert {lab["endpoint"] for lab in labels} == {"0", "1"}
        assert all(lab.get("engine") == "0" for lab in labels if "engine" in lab)
    # Each stand-in counted its own requests: endpoint k finished the requests sent to it.
    last = ok[-1]["samples"]
    done = {k: sum(v for key, v in last.items() if key.startswith("vllm:request_success_total")
                   and split_key(key)[1]["endpoint"] == k) for k in ("0", "1")}
    sent = {k: sum(1 for r in bundle.requests if str(r["endpoint"]) == k) for k in ("0", "1")}
    assert done == sent


def test_a_round_against_one_endpoint_records_no_endpoint_index(tmp_path):
    out = tmp_path / "bundle"
    with StandInThread(step_ms=5) as a:
        plan = plan_from_dict(standin_plan(mode="endpoint", endpoint=a), "one.toml")
        assert run_round(plan, out) == "complete"
    bundle = read_bundle(out)
    assert all("endpoint" not in r for r in bundle.requests)
    assert "endpoints" not in bundle.manifest["engine"]
    assert all("endpoint" not in split_key(k)[1] for m in bundle.metrics if m["ok"] for k in m["samples"])


def test_a_scrape_is_a_gap_naming_the_endpoint_that_did_not_answer(tmp_path):
    dead = "http://127.0.0.1:9"     # the discard port: nothing listens there

    async def scrape(bases):
        async with aiohttp.ClientSession() as session:
            await MetricsSampler(0.5).scrape_once(Context(w, session, lambda: bases))

    w = BundleWriter(tmp_path / "b", {"engine": {}, "plan": {}, "tool": {}})
    with StandInThread(step_ms=5) as a:
        asyncio.run(scrape([a, dead]))
        asyncio.run(scrape([a, a.replace("127.0.0.1", "localhost")]))  # one server, twice
    w.close("complete")
    gap, both = read_bundle(tmp_path / "b").metrics
    assert not gap["ok"] and gap["error"].startswith(f"endpoint 1 ({dead}): ")
    assert both["ok"] and {split_key(k)[1]["endpoint"] for k in both["samples"]} == {"0", "1"}
