"""Our streaming client against every fault of the stand-in: each request is recorded with what
happened and none raises (a whole round over them: tests/integration/test_fault_round.py)."""

from __future__ import annotations

import asyncio
import time

import pytest

from bench.client import (
    EventSink,
    Timeouts,
    completion_payload,
    open_stream_session,
    stream_request,
)
from bench.standin.server import StandIn
from report.derive.stats.samples import itl_gaps_ms
from tests.conftest import output_tokens

STEP_MS = 10.0
MAX_TOKENS = 6


async def _requests(faults: list[str | None], max_tokens: int = MAX_TOKENS) -> list[dict]:
    """One stream_request per fault (None: no fault), concurrently, on one session."""
    async with StandIn(step_ms=STEP_MS) as url:
        session = open_stream_session()
        try:
            async def one(fault):
                body = completion_payload("standin", [5, 6, 7, 8], max_tokens)
                if fault:
                    body["standin_fault"] = fault
                rec: dict = {"fault": fault}
                return await stream_request(session, url + "/v1/completions", body, rec,
                                            time.monotonic, timeouts=Timeouts(total_s=30))
            return await asyncio.gather(*(one(f) for f in faults))
        finally:
            await session.close()


@pytest.fixture(scope="module")
def recs() -> dict[str, dict]:
    faults = [None, "malformed", "badshape", "cut", "nodone", "http_400", "http_500", "http_503",
              "error_event", "short", "multi", "slow_headers:200"]
    return {str(r["fault"]): r for r in asyncio.run(_requests(faults))}


def test_no_fault_is_ok(recs):
    r = recs["None"]
    assert r["status"] == "ok" and r["error"] is None and r["http_status"] == 200
    assert [n for _, n in r["chunks"]] == [1] * MAX_TOKENS
    assert r["finish_reason"] == "length" and r["usage"]["completion_tokens"] == MAX_TOKENS


def test_every_record_has_the_raw_fields(recs):
    for r in recs.values():
        assert r["status"] in ("ok", "error")
        assert r["t_send"] is not None and r["t_end"] is not None and r["t_end"] >= r["t_send"]
        assert isinstance(r["chunks"], list)
        if r["status"] == "error":
            assert r["error"], r


@pytest.mark.parametrize("code", [400, 500, 503])
def test_http_errors_keep_status_and_openai_message(recs, code):
    r = recs[f"http_{code}"]
    assert r["status"] == "error" and r["http_status"] == code
    assert r["error"].startswith(f"HTTP {code}: ") and '"stand-in fault' in r["error"]
    assert r["chunks"] == [] and r["t_first"] is None


def test_malformed_event_is_recorded_and_the_stream_goes_on(recs):
    r = recs["malformed"]
    assert r["status"] == "error" and r["http_status"] == 200
    assert r["error"].startswith("malformed SSE event: ")
    assert len(r["chunks"]) == MAX_TOKENS and r["finish_reason"] == "length"


def test_valid_json_of_the_wrong_shape_is_malformed_not_a_crash(recs):
    r = recs["badshape"]
    assert r["status"] == "error" and r["error"].startswith("malformed SSE event: ")
    assert [n for _, n in r["chunks"]] == [1] * MAX_TOKENS, "the bad events carry no tokens"
    assert r["usage"]["completion_tokens"] == MAX_TOKENS


def test_cut_stream_keeps_the_chunks_so_far(recs):
    r = recs["cut"]
    assert r["status"] == "error" and r["http_status"] == 200
    assert len(r["chunks"]) == 3, "the default cut comes after 3 tokens"
    assert "cancelled" not in r["error"] and r["finish_reason"] is None and r["usage"] is None
    assert "Payload" in r["error"] or "without [DONE]" in r["error"] or "Disconnected" in r["error"]


def test_missing_done_is_an_error(recs):
    r = recs["nodone"]
    assert r["status"] == "error"
    assert r["error"] == "stream ended without [DONE] (connection cut mid-stream)"
    assert len(r["chunks"]) == MAX_TOKENS


def test_error_event_inside_a_200_stream(recs):
    r = recs["error_event"]
    assert r["status"] == "error" and r["http_status"] == 200
    assert r["error"] == "error event in stream: stand-in fault: error inside the stream"
    assert len(r["chunks"]) == 2


def test_fewer_tokens_than_asked_keeps_finish_reason_and_real_count(recs):
    r = recs["short"]
    assert r["status"] == "ok" and r["finish_reason"] == "length"
    assert r["usage"]["completion_tokens"] == MAX_TOKENS // 2
    assert sum(n for _, n in r["chunks"]) == MAX_TOKENS // 2 == output_tokens(r)


def test_slow_headers(recs):
    r = recs["slow_headers:200"]
    assert r["status"] == "ok"
    assert r["t_headers"] - r["t_send"] >= 0.19


def test_multi_token_chunks_give_k_gaps_of_g_over_k(recs):
    r = recs["multi"]
    assert r["status"] == "ok"
    ch = r["chunks"]
    assert [n for _, n in ch] == [3, 3]
    g = (ch[1][0] - ch[0][0]) * 1e3
    gaps = itl_gaps_ms([r])
    assert gaps == pytest.approx([g / 3] * 3)
    # One event every 3rd step: the per-token ITL is at least about one step (a busy host
    # stretches steps, so no upper bound here).
    assert g / 3 > 0.5 * STEP_MS


def test_multi_token_itl_values_over_a_longer_stream():
    (r,) = asyncio.run(_requests(["multi:4"], max_tokens=14))
    ch = r["chunks"]
    assert [n for _, n in ch] == [4, 4, 4, 2]
    gaps = itl_gaps_ms([r])
    expect = []
    for (t0, _), (t1, n) in zip(ch, ch[1:]):
        expect += [(t1 - t0) * 1e3 / n] * n
    assert gaps == pytest.approx(expect) and len(gaps) == 10
    # The last event (2 tokens, 2 steps after the previous one) still gives about one step
    # per token, never less than about half a step.
    assert all(x > 0.4 * STEP_MS for x in gaps), gaps


def sink() -> EventSink:
    return EventSink({}, "completions", "usage")


def test_sse_events_split_at_any_read_boundary_and_crlf():
    stream = (b'data: {"a":1}\r\n\r\n: keep-alive\n\ndata: {"b":2}\n\n'
              b'event: x\ndata: line1\ndata: line2\n\ndata: [DONE]\n\n')
    want = [b'{"a":1}', b'{"b":2}', b"line1\nline2", b"[DONE]"]
    for cut in range(1, len(stream)):   # every split of the stream into two reads
        p = sink()
        assert p.payloads(stream[:cut]) + p.payloads(stream[cut:]) == want, cut
        assert p.buf == b""
    p = sink()
    assert [x for b in stream for x in p.payloads(bytes([b]))] == want   # one byte per read


def test_sse_splitting_is_linear_in_a_large_read():
    """A client far behind reads thousands of events at once; splitting them stays cheap."""
    ev = b'data: {"choices":[{"index":0,"text":" tok"}],"usage":{"completion_tokens":1}}\n\n'
    big = ev * 40_000   # ~3 MB in one read
    t = time.process_time()
    out = sink().payloads(big)
    assert len(out) == 40_000
    assert time.process_time() - t < 2.0   # quadratic splitting took minutes here


def test_reads_handed_over_in_batches_make_the_same_record_as_one_by_one():
    """The compiled reader hands a sink several reads at once (`feed_reads`), with a shortcut
    for a read that is exactly one usual event; the record must not depend on which path ran."""
    def ev(cum: int, text: str = "x", fr=None) -> bytes:
        fr_json = "null" if fr is None else f'"{fr}"'
        return (b'data: {"choices":[{"index":0,"text":"%s","finish_reason":%s}],'
                b'"usage":{"completion_tokens":%d}}\n\n' % (text.encode(), fr_json.encode(), cum))
    no_usage = b'data: {"choices":[{"index":0,"text":"y"}]}\n\n'
    usage_only = b'data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":5}}\n\n'
    reads = [ev(1), ev(2) + ev(4), ev(5)[:20], ev(5)[20:] + no_usage[:9], no_usage[9:],
             ev(6).replace(b"\n\n", b"\r\n\r\n"), ev(7, fr="length"), usage_only,
             b"data: [DONE]\n\n"]
    stamps = [float(i) for i in range(len(reads))]

    one, batched = EventSink({}, "completions", "usage"), EventSink({}, "completions", "usage")
    for s, r in zip(stamps, reads):
        one.feed(r, s + 0.5)
    batched.feed_reads(stamps[:3], reads[:3], 0.5)
    batched.feed_reads(stamps[3:], reads[3:], 0.5)
    one.close()
    batched.close()
    assert batched.rec == one.rec and batched.done and one.done
    assert one.rec["chunks"] == [(0.5, 1), (1.5, 1), (1.5, 2), (3.5, 1), (4.5, None), (5.5, 1),
                                 (6.5, 1)]
    assert one.rec["finish_reason"] == "length" and one.rec["usage"]["completion_tokens"] == 5


def _one(fault: str, timeouts: Timeouts, max_tokens: int = MAX_TOKENS) -> tuple[dict, float]:
    async def go():
        async with StandIn(step_ms=STEP_MS) as url:
            session = open_stream_session()
            try:
                body = completion_payload("standin", [5, 6, 7, 8], max_tokens)
                body["standin_fault"] = fault
                t = time.monotonic()
                rec = await stream_request(session, url + "/v1/completions", body, {},
                                           time.monotonic, timeouts=timeouts)
                return rec, time.monotonic() - t
            finally:
                await session.close()
    return asyncio.run(go())


def test_a_stream_that_goes_silent_fails_at_the_idle_timeout_with_its_chunks_kept():
    rec, took = _one("stall:20", Timeouts(first_byte_s=30, idle_s=0.5, total_s=60))
    assert rec["status"] == "error"
    assert rec["error"] == "TimeoutError: no byte for 0.5 s inside the stream"
    assert [n for _, n in rec["chunks"]] == [1, 1]
    assert 0.5 <= took < 5


def test_a_response_head_that_never_comes_fails_at_the_first_byte_timeout():
    rec, took = _one("slow_headers:10000", Timeouts(first_byte_s=0.5, idle_s=30, total_s=60))
    assert rec["error"] == "TimeoutError: no response head within 0.5 s of the send"
    assert rec["t_headers"] is None and 0.5 <= took < 5


def test_an_event_that_never_ends_fails_the_request_in_bounded_time():
    rec, took = _one("huge:64", Timeouts(first_byte_s=30, idle_s=30, total_s=60))
    assert rec["status"] == "error"
    assert "an SSE event over 8 MiB without its end" in rec["error"]
    assert took < 10, took   # linear: a 64 MiB line is refused after its first 8 MiB


def test_an_event_spanning_many_reads_is_gathered_in_linear_time():
    big = b'data: {"a":"' + b"x" * (6 << 20) + b'"}\n\n'
    p = sink()
    t = time.process_time()
    out = [x for i in range(0, len(big), 1 << 14) for x in p.payloads(big[i:i + (1 << 14)])]
    assert out == [big[6:-2]]
    assert time.process_time() - t < 2.0
