"""Property tests of what the collector reads from outside: a plan of any shape is a Plan or one
PlanError, never another exception; any bytes a server streams make a record the bundle reader
accepts (or fail the request with a StreamError), whatever the read boundaries."""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.client import EventSink
from bench.httpstream.framing import StreamError
from bench.plan.parse import load_plan, plan_from_dict
from bench.plan.spec import SECTIONS
from bench.prompts import PlanError
from bundle.schema import record_problem
from bundle.textsafety import terminal_line

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**65, 2**65),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
KEYS = {name: [f.name for f in dataclasses.fields(cls)] for name, cls in SECTIONS.items()}


@st.composite
def plans(draw) -> dict:
    """A plan dict: known sections with known keys (and now and then an unknown one) of any value."""
    data: dict = {}
    for section in draw(st.lists(st.sampled_from(sorted(KEYS)), max_size=4, unique=True)):
        keys = draw(st.lists(st.sampled_from(KEYS[section] + ["typo_key"]), max_size=4, unique=True))
        data[section] = {k: draw(VALUES) for k in keys}
    if draw(st.booleans()):
        data[draw(st.sampled_from(["seed", "id", "title", "expect", "nonsense"]))] = draw(VALUES)
    return data


@settings(max_examples=300, deadline=None, derandomize=True)
@given(data=plans())
def test_a_plan_of_any_shape_is_a_plan_or_one_plan_error(data):
    try:
        plan_from_dict(data, "fuzz.toml")
    except PlanError as e:
        # printed through terminal_line, so a key holding a newline stays on the one line
        assert str(e).startswith("fuzz.toml") and "\n" not in terminal_line(str(e))


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_a_plan_file_of_any_bytes_is_refused_in_one_line(tmp_path, text):
    p = tmp_path / "plan.toml"
    p.write_bytes(text)
    try:
        load_plan(p)
    except PlanError as e:
        assert str(e).startswith(str(p))


EVENTS = st.sampled_from([
    b'data: {"choices":[{"index":0,"text":" a","finish_reason":null}],"usage":{"prompt_tokens":4,'
    b'"completion_tokens":1,"total_tokens":5}}\n\n',
    b'data: {"choices":[{"index":0,"text":" b","finish_reason":"length"}],"usage":{"prompt_tokens":4,'
    b'"completion_tokens":2,"total_tokens":6}}\n\n',
    b'data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2},"metrics":{"x":1.5}}\n\n',
    b"data: [DONE]\n\n", b": keep-alive\n\n", b"data: {\"choices\": [7]}\n\n",
    b'data: {"usage":{"completion_tokens":-3},"choices":[{"text":"x"}]}\n\n',
    b'data: {"usage":{"completion_tokens":99999999999999999999999},"choices":[{"text":"x"}]}\n\n',
    b'data: {"error":{"message":"boom"}}\n\n', b"data: not json\n\n", b"\r\n", b"\n\n",
]) | st.binary(max_size=40)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(events=st.lists(EVENTS, max_size=12), cuts=st.lists(st.integers(1, 64), max_size=20),
       mode=st.sampled_from(["usage", "token_ids", "none"]), api=st.sampled_from(["completions", "chat"]))
def test_any_stream_makes_a_record_the_bundle_reader_accepts(events, cuts, mode, api):
    rec = {"point": "P", "i": 0, "warmup": False, "t_send": 0.0, "t_headers": 0.0, "t_first": None,
           "t_end": 1.0, "chunks": [], "status": "error", "http_status": 200, "error": None,
           "finish_reason": None, "usage": None, "server_metrics": None}
    sink = EventSink(rec, api, mode)
    stream, at, t = b"".join(events), 0, 0.0
    try:
        for n in cuts + [len(stream)]:
            t += 0.001
            sink.feed(stream[at:at + n], t)
            at += n
    except StreamError:
        pass
    sink.close()
    assert record_problem("requests", rec) is None, rec
