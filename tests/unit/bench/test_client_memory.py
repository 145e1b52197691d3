"""The client-memory check counts what a point holds before it sends: a trace's every kept
prompt, and a drawn length at its longest, not the nominal input_len."""

from __future__ import annotations

import pytest

from bench import plan as P
from bench.plan import PlanError, plan_from_dict


@pytest.fixture
def one_gib_host(monkeypatch):
    monkeypatch.setattr(P, "host_memory_bytes", lambda: 1 << 30)


def test_a_traces_prompts_count_each_at_its_own_length(tmp_path, one_gib_host):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(f'{{"timestamp": {k}, "input_length": 200000, "output_length": 4}}\n'
                             for k in range(100)))       # 2e7 prompt tokens, about 0.9 GiB held
    with pytest.raises(PlanError, match=r"needs about 0.9 GiB of client memory"):
        plan_from_dict({"workload": {"kind": "trace", "trace": str(trace), "format": "mooncake"}}, "p.toml")
    short = tmp_path / "short.jsonl"       # (a trace is read once per path and process)
    short.write_text("".join(f'{{"timestamp": {k}, "input_length": 2000, "output_length": 4}}\n'
                             for k in range(100)))
    plan_from_dict({"workload": {"kind": "trace", "trace": str(short), "format": "mooncake"}}, "p.toml")


def test_a_drawn_length_counts_at_its_longest(one_gib_host):
    dist = {"kind": "lognormal", "mean": 256, "sd": 128, "max": 1_000_000}
    with pytest.raises(PlanError, match=r"point L128-c1 needs about"):
        plan_from_dict({"workload": {"input_len": 128, "input_dist": dist},
                        "sweep": {"concurrency": [1], "requests_per_point": 20}}, "p.toml")
    plan_from_dict({"workload": {"input_len": 128, "input_dist": {**dist, "max": 1000}},
                    "sweep": {"concurrency": [1], "requests_per_point": 20}}, "p.toml")
