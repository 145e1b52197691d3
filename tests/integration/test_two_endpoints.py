"""A round against two endpoints with the real embedded vLLM. Only one engine runs in this
session, so the two endpoints are THE SAME SERVER under two URLs (127.0.0.1 and localhost):
this checks that requests alternate, that each endpoint's /metrics is scraped on one tick and
kept apart by its `endpoint` label, and that each label's counters are that server's own; it
does not measure two engines (their sums here count the one server twice)."""

from __future__ import annotations

import pytest

from bundle.metric_keys import split_key
from bundle.store import read_bundle
from report.judge.verdicts import read_bundle_ledger
from tests.conftest import run_bench

pytestmark = pytest.mark.engine

SUCCESS = "vllm:request_success_total"


def success_total(samples: dict, endpoint: str) -> float:
    return sum(v for k, v in samples.items()
               if split_key(k)[0] == SUCCESS and split_key(k)[1].get("endpoint") == endpoint)


def test_one_engine_seen_through_two_endpoints_is_labelled_per_endpoint(engine, tmp_path):
    one, two = engine.endpoint, engine.endpoint.replace("127.0.0.1", "localhost")
    out = tmp_path / "bundle"
    run_bench("run", "--endpoint", one, "--endpoint", two, "--concurrency", "2",
              "--requests-per-point", "40", "--input-len", "16", "--output-len", "8",
              "--metrics-interval", "0.25", "--out", str(out), timeout=300)
    b = read_bundle(out)
    assert b.manifest["engine"]["endpoints"] == [one, two]
    reqs = sorted(b.requests, key=lambda r: r["i"])
    assert [r["endpoint"] for r in reqs] == [r["i"] % 2 for r in reqs]
    ok = [m for m in b.metrics if m["ok"]]
    assert len(ok) >= 3
    for m in ok:
        assert {split_key(k)[1].get("endpoint") for k in m["samples"]} == {"0", "1"}
    # Both labels are the one server: each counted every request it finished, whichever URL
    # it came through (a scrape of one endpoint may land a request or two after the other's).
    finished = [success_total(ok[-1]["samples"], e) - success_total(ok[0]["samples"], e) for e in "01"]
    ended = sum(1 for r in b.requests if r["status"] == "ok" and ok[0]["t"] < r["t_end"] <= ok[-1]["t"])
    assert all(abs(n - ended) <= 2 for n in finished), (finished, ended)
    _, led = read_bundle_ledger(out)
    assert led.value_of("p.L16-c2.endpoint_requests_sent") == (20, 20)
    assert led.value_of("p.L16-c2.engine_names") == ("0/0", "1/0")
