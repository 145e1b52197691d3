"""Property-based: the files a collector reads its requests from (a ShareGPT dataset as a JSON
array or JSONL, a JSONL prompt file, a Mooncake trace's records) give either requests that hold
the reader's invariants or one PlanError line naming the file, whatever their records, bytes,
nesting or cut; never another exception. Examples are fixed (tests/fuzzbudget.py)."""

from __future__ import annotations

import json
import math

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bench.datasets import MAX_PROMPT_LEN, MAX_TOTAL_LEN, MIN_LEN, load_sharegpt
from bench.prompts import MAX_TOKENS, PlanError, read_prompt_file
from bench.traces import MAX_GAP_S, MAX_SPAN_S, load_trace

FAST = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def words(s: str) -> int:
    return len(s.split())


def one_line(e: Exception, path) -> None:
    text = str(e)
    assert str(path) in text and "\n" not in text, text


TEXT = st.one_of(st.integers(0, 40).map(lambda n: "w " * n), st.text(max_size=12))
SCALARS = st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False) | TEXT
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.sampled_from(["from", "role", "value", "content", "x"]),
                                      inner, max_size=3), max_leaves=6)
TURN = st.fixed_dictionaries({"from": st.sampled_from(["human", "user", "gpt", "assistant", "system", 7]),
                              "value": TEXT | SCALARS})
RECORD = st.one_of(
    st.builds(lambda u, r: {"conversations": [{"from": "human", "value": u}, {"from": "gpt", "value": r}]},
              TEXT, TEXT),
    st.builds(lambda ts: {"conversations": ts}, st.lists(TURN, max_size=4)),
    st.builds(lambda ts: {"messages": [{"role": t["from"], "content": t["value"]} for t in ts]},
              st.lists(TURN, max_size=4)),
    JSON)
# A record as text: as json writes it, or something no reader of JSON takes.
RECORD_TEXT = RECORD.map(json.dumps) | st.sampled_from(
    ["[" * 5000, "{" * 3000, '{"conversations": ' + "[" * 4000, "NaN", "{bad", '"\\ud800"', "\x00", ""])


@FAST
@given(records=st.lists(RECORD_TEXT, max_size=6), array=st.booleans(), cut=st.floats(0, 1),
       junk=st.just(b"") | st.binary(max_size=3))
@example(records=['{"conversations": []}', "{" * 3000], array=False, cut=1.0, junk=b"")
@example(records=['{"conversations": []}', "[" * 5000 + "]" * 5000], array=True, cut=1.0, junk=b"")
def test_a_dataset_is_requests_inside_the_filters_or_one_line_naming_it(tmp_path, records, array, cut, junk):
    text = ("[\n" + ",\n".join(records) + "\n]") if array else "\n".join(records) + "\n"
    data = text.encode()
    data = data[:int(cut * len(data))] if cut < 0.9 else data
    p = tmp_path / ("d.json" if array else "d.jsonl")
    p.write_bytes(data + junk)
    try:
        d = load_sharegpt(str(p), words)
    except PlanError as e:
        one_line(e, p)
        return
    assert d.requests and d.read == len(d.requests) + sum(
        n for why, n in d.dropped.items() if why != "cut_tail")
    for r in d.requests:
        assert isinstance(r.prompt, str)
        assert MIN_LEN <= r.input_len <= MAX_PROMPT_LEN and MIN_LEN <= r.output_len
        assert r.input_len + r.output_len <= MAX_TOTAL_LEN


@FAST
@given(pairs=st.lists(st.tuples(st.integers(0, 1100), st.integers(0, 1100)), min_size=1, max_size=6),
       indent=st.sampled_from([None, 1, 4]), limit=st.none() | st.integers(1, 4))
def test_one_dataset_as_an_array_or_as_lines_gives_the_same_requests(tmp_path, pairs, indent, limit):
    rows = [{"conversations": [{"from": "human", "value": "u " * u}, {"from": "gpt", "value": "r " * r}]}
            for u, r in pairs]
    (tmp_path / "a.json").write_text(json.dumps(rows, indent=indent))
    (tmp_path / "l.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    want = [(u, r) for u, r in pairs
            if MIN_LEN <= u <= MAX_PROMPT_LEN and r >= MIN_LEN and u + r <= MAX_TOTAL_LEN][:limit]
    for name in ("a.json", "l.jsonl"):
        try:
            d = load_sharegpt(str(tmp_path / name), words, limit)
        except PlanError as e:
            assert not want and "no conversation kept" in str(e), e
            continue
        assert [(r.input_len, r.output_len) for r in d.requests] == want
        assert d.read == len(pairs) and "cut_tail" not in d.dropped


PROMPT_LINE = st.one_of(
    st.builds(lambda p, m: json.dumps({"prompt": p, **({} if m is None else {"max_tokens": m})}),
              TEXT | st.lists(st.integers(0, 200_000), max_size=8) | JSON,
              st.none() | st.integers(-2, MAX_TOKENS + 2) | SCALARS),
    st.builds(lambda m: json.dumps({"messages": m}), JSON),
    RECORD_TEXT)


@FAST
@given(lines=st.lists(PROMPT_LINE, max_size=6), output_len=st.integers(1, 64))
@example(lines=['{"prompt": "a"}', '{"prompt": ' + "[" * 5000], output_len=4)
def test_a_prompt_file_is_prompts_with_their_lengths_or_one_line_naming_it(tmp_path, lines, output_len):
    p = tmp_path / "p.jsonl"
    p.write_text("\n".join(lines) + "\n")
    try:
        rows = read_prompt_file(str(p), output_len)
    except PlanError as e:
        one_line(e, p)
        return
    assert rows
    for r in rows:
        assert type(r.max_tokens) is int and 1 <= r.max_tokens <= MAX_TOKENS
        if isinstance(r.prompt, list) and all(type(t) is int for t in r.prompt):
            assert r.input_len == len(r.prompt)


TRACE_VALUE = st.one_of(st.integers(-2, 5000), st.integers(10 ** 12, 10 ** 13), st.text(max_size=4),
                        st.floats(allow_nan=False), st.none(), st.booleans(),
                        st.lists(st.integers(-2, 5), max_size=3))
TRACE_LINE = st.one_of(
    st.builds(lambda t, i, o, h: json.dumps({"timestamp": t, "input_length": i, "output_length": o,
                                             "hash_ids": h}),
              st.integers(0, 10 ** 6), TRACE_VALUE, TRACE_VALUE, TRACE_VALUE),
    st.builds(lambda d: json.dumps(d), st.dictionaries(st.sampled_from(
        ["timestamp", "input_length", "output_length", "hash_ids"]), TRACE_VALUE, max_size=4)),
    RECORD_TEXT)


@FAST
@given(lines=st.lists(TRACE_LINE, min_size=1, max_size=6))
@example(lines=['{"timestamp": 0, "input_length": 5, "output_length": 5}', "[" * 5000])
def test_a_mooncake_traces_records_of_any_shape_are_a_schedule_or_one_line(tmp_path, lines):
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(lines) + "\n")
    try:
        trace = load_trace(str(p), "mooncake")
    except PlanError as e:
        one_line(e, p)
        return
    at = [r.send_at_s for r in trace.requests]
    assert all(math.isfinite(t) and 0 <= t <= MAX_SPAN_S for t in at) and at == sorted(at)
    assert all(b - a <= MAX_GAP_S for a, b in zip(at, at[1:]))
    for r in trace.requests:
        assert 1 <= r.input_len <= MAX_TOKENS and 1 <= r.output_len <= MAX_TOKENS
        assert all(type(h) is int for h in r.hash_ids)
