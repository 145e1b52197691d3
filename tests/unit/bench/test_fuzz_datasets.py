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


HOSTILE = st.one_of(st.integers(-2, 10 ** 7), st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([1e308, 10 ** 12, 0.5, 600_000, 3_600_001]), st.text(max_size=2), st.none())


def mostly(good):
    """GOOD four times in five, else a hostile value: enough plans pass to check their draws."""
    return st.tuples(st.integers(0, 4), good, HOSTILE).map(lambda t: t[1] if t[0] else t[2])


COUNT, RATIO = mostly(st.integers(1, 3000)), mostly(st.floats(0, 0.99))
DIST = st.one_of(
    st.just({}),
    st.builds(lambda r: {"kind": "uniform", "range_ratio": r}, RATIO),
    st.builds(lambda k, m, sd, lo, hi: {"kind": k, "mean": m, "sd": sd, "min": lo, "max": hi},
              st.sampled_from(["normal", "lognormal"]), COUNT, COUNT, st.integers(-1, 50), COUNT),
    st.builds(lambda ws: {"kind": "mixture", "components": [{"weight": w, "kind": "uniform", "range_ratio": 0.5}
                                                            for w in ws]},
              st.lists(mostly(st.floats(0.1, 10)), min_size=1, max_size=3)))


@FAST
@given(turns=mostly(st.integers(1, 40)), think_ms=mostly(st.integers(0, 5000)), input_len=st.integers(1, 4000), output_len=st.integers(1, 4000),
       dists=st.dictionaries(st.sampled_from(["turns_dist", "think_dist", "input_dist", "output_dist"]),
                             DIST, max_size=3),
       duration=st.sampled_from([0, 3, 60]), concurrency=st.integers(1, 64))
def test_a_sessions_plan_is_refused_in_one_line_or_its_users_draws_are_bounded(
        turns, think_ms, input_len, output_len, dists, duration, concurrency):
    from bench.plan import budget
    from bench.plan.parse import plan_from_dict
    from bench.sessions import MAX_THINK_MS, SessionDraws, longest_prompt
    w = {"kind": "sessions", "api": "completions", "chunk_token_counts": "token_ids",
         "input_len": input_len, "output_len": output_len, "turns": turns, "think_ms": think_ms,
         **{k: v for k, v in dists.items() if v}}
    sweep = {"concurrency": [concurrency], **({"duration_s": duration} if duration else {"requests_per_point": 8})}
    kept = budget.host_memory_bytes, budget.available_memory_bytes
    budget.host_memory_bytes, budget.available_memory_bytes = (lambda: 8 << 30), (lambda: None)
    try:
        plan = plan_from_dict({"workload": w, "sweep": sweep}, "p.toml")
    except PlanError as e:
        one_line(e, "p.toml")
        return
    finally:
        budget.host_memory_bytes, budget.available_memory_bytes = kept
    wl = plan.workload
    most_in, most_out = longest_prompt(wl, input_len, output_len)
    # What the memory check counted holds every history the users can draw.
    parts = dict((words.split(" ", 1)[1], b) for b, words in budget.client_memory_parts(plan, plan.points()[0]))
    assert parts["users' histories of up to " + f"{most_in:,} tokens"] >= concurrency * most_in * budget.PROMPT_TOKEN_BYTES
    draws = SessionDraws(wl, input_len, output_len, seed=1)
    sent = 0
    while sent < 40:
        c, reply = draws.conversation(), []
        assert 1 <= c.turns
        while c.turn < c.turns and sent < 40:
            prompt, think = draws.turn(c, reply)
            sent += 1
            assert len(prompt.prompt) == prompt.input_len <= most_in and 1 <= prompt.max_tokens <= most_out
            if think is not None:
                assert 0 <= think <= MAX_THINK_MS / 1000 and (not duration or think < duration)
            reply = [wl.token_id_low] * prompt.max_tokens


@settings(max_examples=100, deadline=None, derandomize=True)
@given(input_len=mostly(st.integers(2, 3000)), prefix_len=mostly(st.integers(1, 2999)),
       num_prefixes=mostly(st.integers(1, 400)), concurrency=st.integers(1, 32),
       requests=st.integers(1, 40), dist=DIST)
def test_a_shared_prefix_plan_is_refused_in_one_line_or_holds_what_its_check_counted(
        input_len, prefix_len, num_prefixes, concurrency, requests, dist):
    from bench.plan import budget
    from bench.plan.parse import plan_from_dict
    from bench.workload import make_prompts
    w = {"kind": "shared-prefix", "input_len": input_len, "prefix_len": prefix_len,
         "num_prefixes": num_prefixes, **({"input_dist": dist} if dist else {})}
    kept = budget.host_memory_bytes, budget.available_memory_bytes
    budget.host_memory_bytes, budget.available_memory_bytes = (lambda: 32 << 20), (lambda: None)
    try:
        plan = plan_from_dict({"workload": w, "sweep": {"concurrency": [concurrency],
                                                          "requests_per_point": requests}}, "p.toml")
    except PlanError as e:
        one_line(e, "p.toml")
        return
    finally:
        budget.host_memory_bytes, budget.available_memory_bytes = kept
    point = plan.points()[0]
    n = budget.prompt_pool_size(plan.sweep, concurrency)
    prompts = make_prompts(plan.workload, point["input_len"], plan.workload.output_len, n, seed=3)
    held = sum(len(p.prompt) for p in prompts) + max(1, num_prefixes) * prefix_len
    assert held * budget.PROMPT_TOKEN_BYTES <= budget.client_memory_bytes(plan, point)
    for p in prompts:       # each prompt is its group's prefix and at least one token of its own
        assert len(p.prompt) == p.input_len > prefix_len
        assert p.prompt[:prefix_len] == prompts[p.group].prompt[:prefix_len]
