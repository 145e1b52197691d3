"""The compiled reader's fast path: the usual completions event parsed in C must give the
record the Python parser gives, for every stream, usual or not; and it must be the path
that actually ran for the usual stream."""

from __future__ import annotations

import asyncio
import time

import pytest

from bench.client import EventSink, Timeouts, stream_request
from bench.httpstream import sockets
from bench.httpstream.pool import StreamPool
from tests.unit.bench.test_httpstream import HEAD_CHUNKED, _threaded_server

compiled_only = pytest.mark.skipif(sockets._streamread is None,
                                   reason="bench._streamread is not built here")


def ev(cum: int, text: str = "x", fr=None) -> bytes:
    fr_json = "null" if fr is None else f'"{fr}"'
    return (b'data: {"id":"c","choices":[{"index":0,"text":"%s","finish_reason":%s}],'
            b'"usage":{"prompt_tokens":4,"completion_tokens":%d}}\n\n'
            % (text.encode(), fr_json.encode(), cum))


USAGE = b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":4,"completion_tokens":%d}}\n\n'
DONE = b"data: [DONE]\n\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


# Each stream is a list of SSE texts, each sent as one chunk in its own write.
STREAMS = {
    "usual": [ev(1), ev(2), ev(3), ev(4, fr="length"), USAGE % 4, DONE],
    "several per chunk": [ev(1) + ev(2), ev(3) + ev(5, fr="stop") + USAGE % 5 + DONE],
    "event split over chunks": [ev(1)[:17], ev(1)[17:] + ev(2)[:5], ev(2)[5:], DONE],
    "event in many pieces": [ev(1)[i:i + 9] for i in range(0, len(ev(1)), 9)] + [
        ev(2)[:-1], b"\n", DONE],
    "unusual in the middle": [ev(1), ev(2), b": keep-alive\n\n", ev(3), ev(4), DONE],
    "crlf line ends": [ev(1), ev(2).replace(b"\n", b"\r\n"), ev(3), DONE],
    "malformed event": [ev(1), b"data: {not json\n\n", ev(2), DONE],
    "error event": [ev(1), b'data: {"error":{"message":"boom"}}\n\n', DONE],
    "no usage": [ev(1), b'data: {"choices":[{"index":0,"text":"y"}]}\n\n', ev(3), DONE],
    "bool count": [ev(1), ev(2).replace(b'"completion_tokens":2', b'"completion_tokens":true'),
                   DONE],
    "huge count": [ev(1), ev(2).replace(b'"completion_tokens":2',
                                        b'"completion_tokens":99999999999999999999'), DONE],
    "no done": [ev(1), ev(2)],
    "empty events": [b"\n\n" + ev(1), b"\n\n\n\n", ev(2), DONE],
    "multi-line data": [ev(1), b'data: {"choices":[{"index":0,"text":"z"}],\ndata: '
                        b'"usage":{"completion_tokens":2}}\n\n', DONE],
}


def record(texts: list[bytes], compiled: bool, monkeypatch,
           with_head: bool = False) -> tuple[dict, int]:
    """REC of one request whose stream is TEXTS (one chunk each, 3 ms apart; WITH_HEAD: the
    first in the head's write), and how many events the compiled reader handed over parsed."""
    with monkeypatch.context() as m:
        if not compiled:
            m.setattr(sockets, "_streamread", None)
        fast_events = [0]
        feed_events = EventSink.feed_events

        def counting(self, stamps, *rest):
            fast_events[0] += len(stamps)
            return feed_events(self, stamps, *rest)
        m.setattr(EventSink, "feed_events", counting)
        pieces = [HEAD_CHUNKED] + [chunk(t) for t in texts] + [b"0\r\n\r\n"]
        if with_head:
            pieces[:2] = [pieces[0] + pieces[1]]
        url, th = _threaded_server(pieces, [0.0] + [0.003] * (len(pieces) - 1))

        async def main():
            pool = StreamPool()
            rec: dict = {}
            await stream_request(pool, url, {"prompt": "p"}, rec, time.monotonic,
                                 timeouts=Timeouts(total_s=10))
            await pool.close()
            return rec
        rec = asyncio.run(main())
        th.join(5)
    return rec, fast_events[0]


def shape(rec: dict) -> dict:
    """What must not depend on the reader (arrival times differ from run to run)."""
    return {k: rec[k] for k in ("status", "error", "finish_reason", "usage", "http_status")} | {
        "tokens": [n for _, n in rec["chunks"]]}


@compiled_only
@pytest.mark.parametrize("name", list(STREAMS))
def test_the_compiled_reader_records_what_the_python_parser_records(name, monkeypatch):
    fast, n_fast = record(STREAMS[name], True, monkeypatch)
    slow, n_slow = record(STREAMS[name], False, monkeypatch)
    assert shape(fast) == shape(slow)
    assert n_slow == 0
    ts = [t for t, _ in fast["chunks"]]
    assert ts == sorted(ts) and (not ts or fast["t_first"] == ts[0])


@compiled_only
def test_the_usual_stream_is_parsed_in_c_with_a_time_per_event(monkeypatch):
    rec, n_fast = record(STREAMS["usual"], True, monkeypatch)
    assert rec["status"] == "ok" and [n for _, n in rec["chunks"]] == [1, 1, 1, 1]
    assert n_fast == 4, "every usual event went through the compiled fast path"
    ts = [t for t, _ in rec["chunks"]]
    assert len(set(ts)) == 4, "events written 3 ms apart keep their own read times"


@compiled_only
def test_after_an_unusual_event_the_rest_goes_to_python(monkeypatch):
    rec, n_fast = record(STREAMS["unusual in the middle"], True, monkeypatch)
    assert [n for _, n in rec["chunks"]] == [1, 1, 1, 1] and rec["status"] == "ok"
    assert n_fast == 2


def test_the_compiled_reader_is_built_where_a_compiler_is():
    import shutil
    import sys
    if sys.platform != "linux" or not shutil.which("cc"):
        pytest.skip("no C compiler here: the event-loop reader is used")
    assert sockets._streamread is not None, "setup.py's extension failed to build"


@compiled_only
def test_events_read_with_the_head_are_counted_once(monkeypatch):
    # The head's read also holds the first events, which Python parses before handing the
    # body over: the compiled reader's counts continue from Python's cumulative count.
    texts = [ev(1) + ev(2), ev(3), ev(4), ev(6, fr="length"), USAGE % 6, DONE]
    rec, n_fast = record(texts, True, monkeypatch, with_head=True)
    assert [n for _, n in rec["chunks"]] == [1, 1, 1, 1, 2]
    assert n_fast == 3 and rec["status"] == "ok" and rec["finish_reason"] == "length"
