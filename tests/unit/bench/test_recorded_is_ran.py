"""What is recorded is what ran: server flags refused where they cannot reach a server (endpoint
mode), identical flag sets refused, and --resume refusing a changed server count or a search's
SLO, each in one line naming the key."""

from __future__ import annotations

import tomllib

import pytest

from bench.plan.parse import plan_from_dict
from bench.plan.resume import resume_problem
from bench.prompts import PlanError
from bench.runner import run_round
from tests.standin_round import STANDIN_ROUND_PLAN


def plan_dict(engine=None, sweep=None) -> dict:
    d = tomllib.loads(STANDIN_ROUND_PLAN)
    d["engine"].update(engine or {})
    d["sweep"].update(sweep or {})
    d["sampler"]["gpu"] = False
    return d


@pytest.mark.parametrize("table, sweep, words", [
    ({"mode": "endpoint", "endpoint": "http://gpu-host:8000"},
     {"server_flags": [["--no-enable-prefix-caching"], ["--enable-prefix-caching"]]},
     "p.toml [sweep].server_flags: 2 server-flag sets in endpoint mode, where the server already runs"),
    ({"mode": "endpoint", "endpoint": "http://gpu-host:8000", "flags": ["--max-num-seqs", "8"]}, {},
     "p.toml [engine].flags: the flags ['--max-num-seqs', '8'] in endpoint mode"),
    ({}, {"server_flags": [["--a", "1"], [], ["--a", "1"]]},
     "p.toml [sweep].server_flags: sets 0 and 2 are the same flags"),
])
def test_flags_that_cannot_reach_a_server_or_do_not_differ_are_refused(table, sweep, words):
    with pytest.raises(PlanError) as e:
        plan_from_dict(plan_dict(table, sweep), "p.toml")
    assert words in str(e.value) and "\n" not in str(e.value)
    # The same flags in launch mode, or sets that differ, are accepted.
    plan_from_dict(plan_dict({"mode": "launch", "endpoint": "http://127.0.0.1:8000", "command": "x"},
                             {"server_flags": [["--a"], ["--b"]]}), "p.toml")


def test_an_endpoint_given_over_a_plan_of_flag_sets_is_refused_before_anything_is_written(tmp_path):
    plan = plan_from_dict(plan_dict(sweep={"server_flags": [["--a"], ["--b"]]}), "p.toml")
    with pytest.raises(PlanError, match=r"--endpoint over p.toml: \[sweep\].server_flags: 2 server-flag sets"):
        run_round(plan, tmp_path / "b", endpoint_override="http://127.0.0.1:9")
    assert not (tmp_path / "b").exists()


def test_resume_refuses_another_server_count_or_a_searchs_slo():
    one = {"engine": {"endpoint": "http://a:1", "endpoints": []}, "sweep": {}}
    two = {"engine": {"endpoint": "", "endpoints": ["http://a:1", "http://b:1"]}, "sweep": {}}
    assert "recorded against 1 server(s) and is given 2 now" in resume_problem(one, two)
    moved = {"engine": {"endpoint": "", "endpoints": ["http://c:1", "http://d:1"]}, "sweep": {}}
    assert resume_problem(two, moved) is None                       # servers moved, as many
    search = {"engine": {}, "sweep": {"search": "slo"}, "slo": {"ttft_ms": 500.0}}
    assert "[slo] was {'ttft_ms': 500.0} when the search chose its points" in resume_problem(
        search, {**search, "slo": {"ttft_ms": 900.0}})
    plain = {"engine": {}, "sweep": {}, "slo": {"ttft_ms": 500.0}}
    assert resume_problem(plain, {**plain, "slo": {"ttft_ms": 900.0}}) is None   # judged at report time
