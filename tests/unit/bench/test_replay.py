"""Trace and sharegpt plan kinds: keys checked with one line naming the key, paths read from
the plan file's folder, and a trace's prompts, schedule and shared blocks in the trace's order
(the hand-built fixtures of tests/fixtures/traffic)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from bench import replay
from bench.plan.parse import load_plan, plan_from_dict
from bench.prompts import PlanError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "traffic"
TRACE = str(FIXTURES / "mooncake-tiny.jsonl")
DATASET = str(FIXTURES / "sharegpt-cut.json")


def trace_plan(**over):
    w = {"kind": "trace", "trace": TRACE, "format": "mooncake", "time_scale": 0.5, **over}
    return {"workload": {k: v for k, v in w.items() if v is not None}}


def test_a_trace_plan_reads_its_trace_from_the_plan_files_folder(tmp_path):
    shutil.copy(TRACE, tmp_path / "t.jsonl")
    (tmp_path / "plan.toml").write_text('[workload]\nkind = "trace"\ntrace = "t.jsonl"\n'
                                        'format = "mooncake"\ntime_scale = 0.5\n')
    plan = load_plan(tmp_path / "plan.toml")
    assert Path(plan.workload.trace) == tmp_path / "t.jsonl"
    sched = replay.trace_schedule(plan.workload, 10.0)
    assert sched == [(0, 10.0), (1, 10.125), (2, 10.3), (3, 10.3), (4, 10.75)]


def test_trace_prompts_are_the_trace_lengths_and_share_the_named_blocks():
    w = plan_from_dict(trace_plan()).workload
    ps = replay.trace_prompts(w, 7)
    assert [(len(p.prompt), p.input_len, p.max_tokens) for p in ps] == [
        (1100, 1100, 8), (1024, 1024, 6), (300, 300, 4), (1536, 1536, 5), (40, 40, 3)]
    assert ps[1].prompt == ps[0].prompt[:1024] and ps[3].prompt[:1024] == ps[0].prompt[:1024]
    assert ps[2].prompt[:300] != ps[0].prompt[:300]
    assert [replay.shared_blocks(w, i) for i in range(5)] == [0, 2, 0, 2, 0]


def test_a_trace_plan_with_client_workers_is_accepted_and_counts_its_warm_up():
    plan = plan_from_dict({**trace_plan(), "client": {"workers": 2}, "sweep": {"warmup_requests": 9}})
    assert plan.client.workers == 2
    # Every kept request once; warm-up as asked, but at least one request measured.
    assert replay.trace_counts(plan.workload, 9) == (5, 4)
    assert replay.trace_counts(plan.workload, 0) == (5, 0)


def test_the_manifest_facts_count_what_the_limits_dropped():
    w = plan_from_dict(trace_plan(max_requests=3)).workload
    facts = replay.source_facts(w, None)
    assert (facts["read"], facts["kept"], facts["dropped"]) == (5, 3, {"past_max_requests": 2})
    assert facts["span_s"] == 0.3 and facts["format"] == "mooncake"


@pytest.mark.parametrize("over, key", [
    (trace_plan(trace=""), "[workload].trace"),
    (trace_plan(format="csv"), "[workload].format"),
    (trace_plan(time_scale=0), "[workload].time_scale"),
    (trace_plan(max_requests=-1), "[workload].max_requests"),
    (trace_plan(api="chat"), "[workload].api"),
    (trace_plan(dataset=DATASET), "[workload].dataset"),
    ({**trace_plan(), "sweep": {"request_rate": [2.0], "arrival": "poisson"}}, "[sweep].request_rate"),
    ({**trace_plan(), "sweep": {"duration_s": 5.0}}, "[sweep].duration_s"),
    ({"workload": {"kind": "sharegpt"}}, "[workload].dataset"),
    ({"workload": {"kind": "sharegpt", "dataset": DATASET, "format": "azure"}}, "[workload].format"),
    ({"workload": {"kind": "sharegpt", "dataset": DATASET, "num_prompts": -2}}, "[workload].num_prompts"),
    ({"workload": {"kind": "sharegpt", "dataset": "/nonexistent/sharegpt.json"}}, "[workload].dataset"),
    ({"workload": {"kind": "random", "trace": TRACE}}, "[workload].trace"),
])
def test_a_replay_plan_no_point_could_honour_is_refused_naming_its_key(over, key):
    with pytest.raises(PlanError, match=re.escape(key)) as e:
        plan_from_dict(over)
    assert "\n" not in str(e.value)


def test_a_bad_trace_line_is_refused_before_the_round_naming_file_line_and_field(tmp_path):
    (tmp_path / "t.jsonl").write_text('{"timestamp": 0, "input_length": 10, "output_length": 2}\n'
                                      '{"timestamp": 5, "input_length": "x", "output_length": 2}\n')
    (tmp_path / "plan.toml").write_text('[workload]\nkind = "trace"\ntrace = "t.jsonl"\n'
                                        'format = "mooncake"\n')
    with pytest.raises(PlanError, match=r"t\.jsonl line 2: field input_length"):
        load_plan(tmp_path / "plan.toml")

