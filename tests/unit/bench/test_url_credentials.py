"""Credentials in a URL never reach a bundle: an endpoint carrying a user and password is
refused (requests carry a key only as SERVING_LEDGER_API_KEY), an exporter's is redacted
everywhere the round writes it; one server is never named twice, however it is spelled."""

from __future__ import annotations

import tomllib

import pytest

from bench.cli import plan_from_args
from bench.plan.parse import plan_from_dict
from bench.prompts import PlanError
from bench.runner import run_round
from bench.standin.thread import StandInThread
from bench.urls import same_server
from bundle.store.reader import read_bundle
from serving_ledger.cli import build_parser
from tests.standin_round import STANDIN_ROUND_PLAN


def standin_plan(**engine) -> dict:
    d = tomllib.loads(STANDIN_ROUND_PLAN)
    d["engine"].update(engine)
    d["sampler"]["gpu"] = False
    return d


@pytest.mark.parametrize("table, words", [
    ({"mode": "endpoint", "endpoint": "http://user:pw@gpu-host:8000"},
     "p.toml [engine].endpoint: the URL of gpu-host carries a user and password"),
    ({"mode": "endpoint", "endpoints": ["http://a:1", "http://me:secret@b:1"]},
     "p.toml [engine].endpoints: the URL of b carries a user and password"),
])
def test_an_endpoint_with_a_user_and_password_is_refused(table, words):
    with pytest.raises(PlanError) as e:
        plan_from_dict(standin_plan(**table), "p.toml")
    assert words in str(e.value) and "pw" not in str(e.value) and "secret" not in str(e.value)
    args = build_parser().parse_args(["run", "--endpoint", "http://user:pw@gpu-host:8000", "--out", "x"])
    with pytest.raises(PlanError, match="--endpoint: the URL of gpu-host carries a user and password"):
        plan_from_args(args)


def test_an_exporters_password_is_redacted_from_everything_the_round_writes(tmp_path):
    out = tmp_path / "bundle"
    with StandInThread(step_ms=5) as a:
        exporter = a.replace("http://", "http://scraper:s3cr%40tpw@") + "/metrics"
        d = standin_plan(mode="endpoint", endpoint=a)
        d["sampler"]["gpu_metrics"] = exporter
        assert run_round(plan_from_dict(d, "p.toml"), out) == "complete"
    b = read_bundle(out)
    assert b.manifest["plan"]["sampler"]["gpu_metrics"] == \
        a.replace("http://", "http://[redacted]@") + "/metrics"
    assert b.dcgm and all(r["ok"] for r in b.dcgm)       # it was scraped with them
    for f in out.iterdir():
        data = f.read_bytes()
        assert b"s3cr" not in data and b"scraper" not in data, f.name


@pytest.mark.parametrize("a, b, same", [
    ("http://127.0.0.1:8000", "http://localhost:8000/", True),
    ("http://127.0.0.1:80", "http://127.0.0.1", True),
    ("http://127.0.0.1:8000", "http://127.0.0.1:8001", False),
    ("http://127.0.0.1:8000/a", "http://127.0.0.1:8000/b", False),
    ("http://127.0.0.1:8000", "https://127.0.0.1:8000", False),
])
def test_one_server_is_one_server_however_it_is_spelled(a, b, same):
    assert same_server(a, b) is same


def test_one_server_named_twice_is_refused_in_a_plan_and_on_the_command_line():
    with pytest.raises(PlanError, match=r"\[engine\].endpoints: one server is named twice, "
                                        r"'http://127.0.0.1:8000' and 'http://localhost:8000'"):
        plan_from_dict(standin_plan(mode="endpoint", endpoints=["http://127.0.0.1:8000",
                                                                 "http://localhost:8000"]), "p.toml")
    args = build_parser().parse_args(["run", "--endpoint", "http://localhost:8000", "--endpoint",
                                      "http://127.0.0.1:8000/", "--out", "x"])
    with pytest.raises(PlanError, match="--endpoint: one server is named twice"):
        plan_from_args(args)
