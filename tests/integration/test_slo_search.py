"""The questions users bring, against the real embedded vLLM: a search sweep (the
concurrencies it chose follow from each point's verdict, every verdict is the report's, the
report's capacity sits inside the bracket the search ended on), and a next step's plan that
runs as `serving-ledger next` wrote it."""

from __future__ import annotations

import pytest

from bench.search import SloSearch
from bundle.store.reader import read_bundle
from report.derive.round.read import read_round
from report.judge.search import point_meets_slo
from report.judge.verdicts import build_ledger
from tests.conftest import run_bench

pytestmark = pytest.mark.engine

# The session engine's pool is 24 blocks of 128 tokens: from a few streams of 512-token
# prompts on, requests wait for KV, so TTFT grows with the concurrency.
PLAN = """
[workload]
input_len = 512
output_len = 16
[sweep]
search = "slo"
concurrency = [1]
search_max = 8
search_tolerance = 0.2
requests_per_point = 8
cooldown_s = 1
[slo]
ttft_ms = 150
percentile = 90
"""


def test_a_search_sweep_runs_the_points_its_verdicts_choose(engine, tmp_path):
    (tmp_path / "plan.toml").write_text(PLAN)
    out = tmp_path / "search"
    run_bench("run", "--plan", str(tmp_path / "plan.toml"), "--out", str(out),
              "--endpoint", engine.endpoint)
    b = read_bundle(out)
    events = [e for e in b.points if e["event"] == "search"]
    ran = [e["settings"]["concurrency"] for e in b.points if e["event"] == "start"]
    assert [e["point"] for e in events] == [f"L512-c{c}" for c in ran]
    # The sequence is the search's, fed the recorded verdicts.
    replay = SloSearch(1, 8, 0.2)
    for c, e in zip(ran, events):
        assert replay.next() == c
        replay.record(c, e["met_slo"])
    assert replay.next() is None
    # Each verdict is the report's judgement of the same requests.
    for e in events:
        assert point_meets_slo(out, e["point"], b.manifest["plan"]["slo"]) is e["met_slo"]
    rd = read_round(b)
    led = build_ledger(rd)
    for e in events:
        assert led.value_of(f"p.{e['point']}.slo_met") is e["met_slo"]
    cap = led["r.slo_capacity"]
    if replay.met is not None and replay.failed is not None and cap.present:
        assert replay.met <= cap.value < replay.failed


def test_a_next_step_plan_runs_unchanged(tmp_path):
    # The CPU demo round ran without the MFU counters: its next step's plan turns them on.
    from tests.conftest import FIXTURES
    target = tmp_path / "round-9" / "plan.toml"
    target.parent.mkdir()
    run_bench("next", str(FIXTURES / "cpu-demo"), "--write", str(target), "--step", "enable_mfu")
    run_bench("run", "--plan", str(target), "--out", str(tmp_path / "round-9" / "bundle"))
    b = read_bundle(tmp_path / "round-9" / "bundle")
    assert b.manifest["status"] == "complete"
    assert "--enable-mfu-metrics" in b.manifest["plan"]["engine"]["flags"]
    assert any(k.startswith("vllm:estimated_flops_per_gpu_total") for s in b.metrics if s["ok"]
               for k in s["samples"])
