"""The round's samplers (bench/samplers/): each appends one stream bundle/schema.py declares, its
module declares the signal (its stream, its sampler from the plan's `[sampler]` table), and the
round's samplers are read from those declarations; the runner starts them, it wires none by hand."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil

import pytest

import bench.samplers
from bench.plan.spec import SamplerSpec
from bench.samplers import AT_ROUND, AT_SERVER, Sampler, round_samplers, signals
from bundle.schema import STREAM
from tests.conftest import ROOT

# The streams a round writes other than through a sampler: the runner's point events, the
# client's requests (and its worker processes' shards of them), a Ray round's workers.
NOT_SAMPLED = {"points", "requests", "shards"}


def test_every_sampler_writes_a_declared_stream():
    every = round_samplers(SamplerSpec(gpu_metrics="http://gpu-host:9400/metrics"), gpus=True)
    assert all(isinstance(s, Sampler) and s.stream in STREAM for s in every)
    assert [s.stream for s in every if s.starts == AT_ROUND] == ["gpu", "client", "host"]
    assert [s.stream for s in every if s.starts == AT_SERVER] == ["metrics", "dcgm"]
    assert all(s.starts in (AT_ROUND, AT_SERVER) for s in every)


def test_the_plan_turns_samplers_off():
    plain = round_samplers(SamplerSpec(), gpus=False)
    assert sorted(s.stream for s in plain) == ["client", "host", "metrics"]
    off = round_samplers(SamplerSpec(metrics=False, gpu=False, gpu_metrics="http://x/metrics"), gpus=True)
    assert [s.stream for s in off] == ["client", "host"]


def test_every_stream_is_declared_by_one_signal_or_written_by_the_round():
    declared = [signal.stream for signal in signals()]
    assert len(declared) == len(set(declared)), "a stream declared by two signals"
    assert set(declared) <= set(STREAM), "a signal of a stream bundle/schema.py does not declare"
    assert set(declared) | NOT_SAMPLED == set(STREAM), "a declared stream nothing writes"
    assert not set(declared) & NOT_SAMPLED


def test_a_sampler_module_declares_its_signals():
    # A Sampler that no module's SIGNALS makes would never run: the round reads only those.
    for info in pkgutil.iter_modules(bench.samplers.__path__):
        module = importlib.import_module(f"bench.samplers.{info.name}")
        samplers = [c for _, c in inspect.getmembers(module, inspect.isclass)
                    if issubclass(c, Sampler) and c is not Sampler and c.__module__ == module.__name__]
        if samplers:
            made = {type(s) for signal in module.SIGNALS
                    if (s := signal.sampler(SamplerSpec(gpu_metrics="http://x:9400/metrics"), True))}
            assert set(samplers) <= made, (info.name, samplers)


def test_the_host_interval_is_at_most_half_a_second():
    (host,) = [s for s in round_samplers(SamplerSpec(metrics_interval_s=2.0), False) if s.stream == "host"]
    assert host.interval_s == 0.5


@pytest.mark.parametrize("module", ["runner.py", "local_point.py"])
def test_the_runner_appends_no_sample_stream_itself(module):
    # Only the point events and requests are the round's own; every sample stream is a sampler's.
    tree = ast.parse((ROOT / "bench" / module).read_text(encoding="utf-8"))
    streams = {node.args[0].value for node in ast.walk(tree)
               if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "append"
               and node.args and isinstance(node.args[0], ast.Constant)}
    assert streams <= {"points", "requests"}
