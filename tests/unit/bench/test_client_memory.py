"""The client-memory check counts what a point holds before it sends: a trace's every kept
prompt, a drawn length at its longest, not the nominal input_len, a shared-prefix workload's
every prefix, a sessions workload's histories, a prompt file or dataset read whole; against half
of the host's memory or what it has available now, whichever is less."""

from __future__ import annotations

import json

import pytest

from bench.plan import budget
from bench.plan.parse import plan_from_dict
from bench.prompts import PlanError


@pytest.fixture
def one_gib_host(monkeypatch):
    monkeypatch.setattr(budget, "host_memory_bytes", lambda: 1 << 30)
    monkeypatch.setattr(budget, "available_memory_bytes", lambda: None)


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


SHARED = {"kind": "shared-prefix", "input_len": 2000, "prefix_len": 1000}
FEW = {"concurrency": [1], "requests_per_point": 8}


def test_every_shared_prefix_counts_however_few_prompts_use_it(one_gib_host):
    # 8 prompts of 2,000 tokens are under a MiB; 20,000 prefixes of 1,000 tokens are 0.9 GiB.
    with pytest.raises(PlanError, match=r"^p.toml: point L2000-c1 needs about 0.9 GiB of client memory "
                                        r"before it sends a request: 20,000 shared prefixes of 1,000 "
                                        r"tokens \(0.9 GiB\), a pool of 9 prompts .*over half of this "
                                        r"host's 1.0 GiB; .*num_prefixes"):
        plan_from_dict({"workload": {**SHARED, "num_prefixes": 20_000}, "sweep": FEW}, "p.toml")
    plan_from_dict({"workload": {**SHARED, "num_prefixes": 2_000}, "sweep": FEW}, "p.toml")
    # A shared prefix times the concurrency: every slot's prompt is the prefix and more.
    with pytest.raises(PlanError, match=r"point L2000-c8192 needs about"):
        plan_from_dict({"workload": {**SHARED, "num_prefixes": 1},
                        "sweep": {"concurrency": [8192], "requests_per_point": 1}}, "p.toml")


def test_the_memory_a_host_has_available_bounds_a_point(monkeypatch):
    monkeypatch.setattr(budget, "host_memory_bytes", lambda: 64 << 30)
    monkeypatch.setattr(budget, "available_memory_bytes", lambda: 200 << 20)
    with pytest.raises(PlanError, match=r"needs about 0.4 GiB .*over the 0.2 GiB this host has "
                                        r"available \(MemAvailable\)"):
        plan_from_dict({"workload": {**SHARED, "num_prefixes": 8_000}, "sweep": FEW}, "p.toml")
    monkeypatch.setattr(budget, "available_memory_bytes", lambda: 1 << 30)
    plan_from_dict({"workload": {**SHARED, "num_prefixes": 8_000}, "sweep": FEW}, "p.toml")


def test_this_hosts_available_memory_is_read_from_the_kernel():
    avail = budget.available_memory_bytes()
    assert avail is None or 0 < avail <= budget.host_memory_bytes()


def test_a_dataset_or_prompt_file_counts_at_its_size(tmp_path, monkeypatch):
    monkeypatch.setattr(budget, "host_memory_bytes", lambda: 2 << 20)       # 1 MiB for the client
    monkeypatch.setattr(budget, "available_memory_bytes", lambda: None)
    conv = {"conversations": [{"from": "human", "value": "w " * 200}, {"from": "gpt", "value": "r " * 50}]}
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps(conv) for _ in range(300)) + "\n")     # about 160 KB
    with pytest.raises(PlanError, match=r"needs about 1.3 MiB of client memory .*its dataset of 0.2 MiB "
                                        r"read whole, about 8 bytes held a byte"):
        plan_from_dict({"workload": {"kind": "sharegpt", "dataset": str(data)}, "sweep": FEW}, "p.toml")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": list(range(100))}) + "\n" for _ in range(400)))
    with pytest.raises(PlanError, match=r"its prompt file of 0.2 MiB read whole"):
        plan_from_dict({"workload": {"kind": "jsonl", "jsonl": str(prompts)}, "sweep": FEW}, "p.toml")
    data.write_text(json.dumps(conv) + "\n")
    plan_from_dict({"workload": {"kind": "sharegpt", "dataset": str(data)}, "sweep": FEW}, "p.toml")


def test_a_sessions_users_histories_count_at_their_longest(one_gib_host):
    w = {"kind": "sessions", "api": "completions", "chunk_token_counts": "token_ids",
         "input_len": 2000, "output_len": 1000, "turns": 40}
    # 64 users, each with up to 40 x 2,000 + 39 x 1,000 tokens of history: 0.3 GiB; 256: 1.4 GiB.
    plan_from_dict({"workload": w, "sweep": {"concurrency": [64], "requests_per_point": 8}}, "p.toml")
    with pytest.raises(PlanError, match=r"256 users' histories of up to 119,000 tokens \(1.4 GiB\)"):
        plan_from_dict({"workload": w, "sweep": {"concurrency": [256], "requests_per_point": 8}}, "p.toml")


def test_run_refuses_such_a_plan_in_one_line_and_exit_2_writing_nothing(tmp_path, one_gib_host, capsys):
    from serving_ledger.cli import main
    plan = tmp_path / "p.toml"
    plan.write_text('[workload]\nkind = "shared-prefix"\ninput_len = 2000\nprefix_len = 1000\n'
                    'num_prefixes = 20000\n[sweep]\nconcurrency = [1]\nrequests_per_point = 8\n')
    rc = main(["run", "--plan", str(plan), "--endpoint", "http://127.0.0.1:9", "--out", str(tmp_path / "b")])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "20,000 shared prefixes of 1,000 tokens" in err
    assert not (tmp_path / "b").exists()
