"""Trace loaders (bench/traces.py): Mooncake and Azure schedules, time scale, limits, the
blocks equal hash ids share, and bad lines named by file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.prompts import PlanError
from bench.traces import BLOCK_TOKENS, TraceRequest, block_tokens, load_trace, trace_prompt

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "traffic"


def test_mooncake_schedule_is_the_trace_times_scaled_from_the_first_request():
    t = load_trace(str(FIX / "mooncake-tiny.jsonl"), "mooncake", time_scale=0.5)
    assert [r.send_at_s for r in t.requests] == [0.0, 0.125, 0.3, 0.3, 0.75]
    assert [r.input_len for r in t.requests] == [1100, 1024, 300, 1536, 40]
    assert [r.shared_blocks for r in t.requests] == [0, 2, 0, 2, 0]
    assert t.read == 5 and t.dropped == {}


def test_limits_drop_with_counts():
    t = load_trace(str(FIX / "mooncake-tiny.jsonl"), "mooncake", max_duration_s=0.7)
    assert len(t.requests) == 4 and t.dropped == {"past_max_duration": 1}
    t = load_trace(str(FIX / "mooncake-tiny.jsonl"), "mooncake", max_requests=2, max_model_len=1100)
    assert [r.input_len for r in t.requests] == [1024, 300]
    assert t.dropped == {"over_model_len": 1, "past_max_requests": 2}


def test_azure_times_lengths_and_zero_lengths_dropped():
    t = load_trace(str(FIX / "azure-tiny.csv"), "azure")
    assert [round(r.send_at_s, 6) for r in t.requests] == [0.0, 4.314579, 4.31941, 8.56941]
    assert [(r.input_len, r.output_len) for r in t.requests][0] == (374, 44)
    assert t.dropped == {"zero_length": 1} and t.read == 5


@pytest.mark.parametrize("line, field", [
    ('{"timestamp": 5, "output_length": 3}', "field input_length: missing"),
    ('{"timestamp": "x", "input_length": 3, "output_length": 3}', "field timestamp"),
    ('{"timestamp": 5, "input_length": -1, "output_length": 3}', "field input_length"),
    ('{"timestamp": 5, "input_length": 3, "output_length": 3, "hash_ids": "no"}', "field hash_ids"),
    ('{"timestamp": 1, "input_length": 3, "output_length": 3}', "earlier than the line before"),
    ('{"timestamp": 5, "input_', "line 2: not a JSON object"),
])
def test_a_bad_mooncake_line_is_named(tmp_path, line, field):
    p = tmp_path / "t.jsonl"
    p.write_text('{"timestamp": 2, "input_length": 3, "output_length": 3}\n' + line + "\n")
    with pytest.raises(PlanError) as e:
        load_trace(str(p), "mooncake")
    assert f"{p} line 2" in str(e.value) and field in str(e.value)


def test_a_bad_azure_row_is_named(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n1.0,5,5\nsoon,5,5\n")
    with pytest.raises(PlanError, match=r"t.csv line 3: field TIMESTAMP"):
        load_trace(str(p), "azure")
    p.write_text("TIMESTAMP,Context\n1.0,5\n")
    with pytest.raises(PlanError, match=r"line 1: field ContextTokens: missing"):
        load_trace(str(p), "azure")


def test_format_and_time_scale_are_checked():
    with pytest.raises(PlanError, match="format"):
        load_trace(str(FIX / "azure-tiny.csv"), "splunk")
    with pytest.raises(PlanError, match="time_scale"):
        load_trace(str(FIX / "azure-tiny.csv"), "azure", time_scale=0)


ids = st.lists(st.integers(0, 50), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(a=ids, b=ids, seed=st.integers(0, 3))
def test_equal_hash_ids_give_identical_blocks_and_different_ids_differ(a, b, seed):
    ra = TraceRequest(0.0, len(a) * BLOCK_TOKENS, 1, tuple(a))
    rb = TraceRequest(0.0, len(b) * BLOCK_TOKENS, 1, tuple(b))
    pa, pb = trace_prompt(ra, 0, seed, 10, 150000), trace_prompt(rb, 1, seed, 10, 150000)
    assert len(pa) == ra.input_len
    for i, (x, y) in enumerate(zip(a, b)):
        blk_a = pa[i * BLOCK_TOKENS:(i + 1) * BLOCK_TOKENS]
        blk_b = pb[i * BLOCK_TOKENS:(i + 1) * BLOCK_TOKENS]
        assert (blk_a == blk_b) == (x == y)
        assert all(10 <= t < 150000 for t in blk_a)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 3 * BLOCK_TOKENS), i=st.integers(0, 100), j=st.integers(0, 100))
def test_blocks_no_id_names_are_the_requests_own(n, i, j):
    r = TraceRequest(0.0, n, 1, ())
    p, q = trace_prompt(r, i, 0, 0, 1000), trace_prompt(r, j, 0, 0, 1000)
    assert len(p) == n and ((p == q) == (i == j) or n < 8)


def test_a_partial_last_block_is_the_prefix_of_the_full_one():
    full = block_tokens(7, 1, 0, 1000)
    assert trace_prompt(TraceRequest(0.0, 100, 1, (7,)), 0, 1, 0, 1000) == full[:100]
