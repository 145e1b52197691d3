"""The round's samplers (bench/samplers/): each appends one stream bundle/schema.py declares, and
the plan's `[sampler]` table says which run; the runner starts them, it wires none by hand."""

from __future__ import annotations

import ast

from bench.plan.spec import SamplerSpec
from bench.samplers import AT_ROUND, AT_SERVER, Sampler, round_samplers
from bundle.schema import STREAM
from tests.conftest import ROOT


def test_every_sampler_writes_a_declared_stream():
    every = round_samplers(SamplerSpec(gpu_metrics="http://gpu-host:9400/metrics"), gpus=True)
    assert [s.stream for s in every] == ["gpu", "client", "host", "metrics", "dcgm"]
    assert all(isinstance(s, Sampler) and s.stream in STREAM for s in every)
    assert [s.stream for s in every if s.starts == AT_SERVER] == ["metrics", "dcgm"]
    assert all(s.starts in (AT_ROUND, AT_SERVER) for s in every)


def test_the_plan_turns_samplers_off():
    plain = round_samplers(SamplerSpec(), gpus=False)
    assert [s.stream for s in plain] == ["client", "host", "metrics"]
    off = round_samplers(SamplerSpec(metrics=False, gpu=False, gpu_metrics="http://x/metrics"), gpus=True)
    assert [s.stream for s in off] == ["client", "host"]


def test_the_host_interval_is_at_most_half_a_second():
    (host,) = [s for s in round_samplers(SamplerSpec(metrics_interval_s=2.0), False) if s.stream == "host"]
    assert host.interval_s == 0.5


def test_the_runner_appends_no_sample_stream_itself():
    # Only the point events are the runner's own; every sample stream is a sampler's.
    tree = ast.parse((ROOT / "bench" / "runner.py").read_text(encoding="utf-8"))
    streams = {node.args[0].value for node in ast.walk(tree)
               if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "append"
               and node.args and isinstance(node.args[0], ast.Constant)}
    assert streams <= {"points", "requests"}
