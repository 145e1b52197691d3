"""The stand-in server: its endpoints, its decode-loop timing, its controls and its CLI."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.request

import aiohttp
import pytest

from bench.exposition import parse_exposition
from bench.standin.faults import FAULT_MODES, parse_fault
from bench.standin.server import StandIn
from bench.standin.thread import StandInThread
from tests.conftest import ROOT

STEP_MS = 10.0


async def sse_events(session: aiohttp.ClientSession, url: str, body: dict,
                     headers: dict | None = None) -> tuple[int, list]:
    """POST BODY and return (status, [parsed data payloads; "[DONE]" kept as a string])."""
    async with session.post(url, json=body, headers=headers) as r:
        raw = await r.read()
    out = []
    for event in raw.decode().split("\n\n"):
        if event.startswith("data: "):
            p = event[6:]
            out.append(p if p == "[DONE]" else json.loads(p))
    return r.status, out


def body(max_tokens: int = 5, **extra) -> dict:
    return {"model": "standin", "prompt": [1, 2, 3, 4], "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}, **extra}


def test_stream_shape_usage_and_server_time():
    async def go():
        async with StandIn(step_ms=STEP_MS) as url, aiohttp.ClientSession() as s:
            status, ev = await sse_events(s, url + "/v1/completions", body(5),
                                          headers={"x-request-id": "r1"})
            return status, ev
    status, ev = asyncio.run(go())
    assert status == 200
    assert ev[-1] == "[DONE]"
    content, usage = ev[:5], ev[5]
    assert [e["usage"]["completion_tokens"] for e in content] == [1, 2, 3, 4, 5]
    assert all(e["id"] == "cmpl-r1" and e["choices"][0]["text"] == " tok" for e in content)
    assert [e["choices"][0]["finish_reason"] for e in content] == [None] * 4 + ["length"]
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 4, "total_tokens": 9,
                                                         "completion_tokens": 5}
    # One token per step: the server's send times advance one step at a time on its grid (a
    # late tick is followed by an on-time one, so single gaps vary; a busy host stretches them).
    st = [e["server_time"] for e in content]
    gaps = [(b - a) * 1e3 for a, b in zip(st, st[1:])]
    assert all(g > 0 for g in gaps), gaps
    assert 0.7 * STEP_MS < sum(gaps) / len(gaps) < 4 * STEP_MS, gaps


def test_plain_endpoints_and_metrics_counters():
    async def go():
        async with StandIn(step_ms=STEP_MS, model="m1") as url, aiohttp.ClientSession() as s:
            async with s.get(url + "/health") as r:
                health = r.status
            async with s.get(url + "/version") as r:
                version = await r.json()
            async with s.get(url + "/v1/models") as r:
                models = await r.json()
            async with s.get(url + "/metrics") as r:
                before = parse_exposition(await r.text())
            await asyncio.gather(*(sse_events(s, url + "/v1/completions", body(3))
                                   for _ in range(4)))
            async with s.get(url + "/metrics") as r:
                after = parse_exposition(await r.text())
            return health, version, models, before, after
    health, version, models, before, after = asyncio.run(go())
    assert health == 200
    assert "standin" in version["version"]
    assert models["data"][0]["id"] == "m1"
    lab = '{engine="0",model_name="m1"}'
    assert before[f"vllm:generation_tokens_total{lab}"] == 0
    assert after[f"vllm:generation_tokens_total{lab}"] == 12
    assert after[f"vllm:prompt_tokens_total{lab}"] == 16
    assert after[f"vllm:num_requests_running{lab}"] == 0
    assert after['vllm:request_success_total{engine="0",finished_reason="length",model_name="m1"}'] == 4


def test_every_active_stream_gets_one_token_per_step():
    """N concurrent streams share the steps: N events per step, not one stream after another."""
    n, tokens = 20, 10
    server = StandIn(step_ms=STEP_MS)

    async def go():
        async with server as url, aiohttp.ClientSession() as s:
            return await asyncio.gather(*(sse_events(s, url + "/v1/completions", body(tokens))
                                          for _ in range(n)))
    res = asyncio.run(go())
    assert all(len([e for e in ev if e != "[DONE]" and e["choices"]]) == tokens for _, ev in res)
    c = server.counters
    assert c["events"] == c["generation_tokens"] == n * tokens
    # Served side by side the run takes about `tokens` steps (plus the few steps over which
    # the requests arrived); one after another it would take n·tokens.
    assert tokens <= c["steps"] < n * tokens / 4, c


def test_standin_run_ends_streams_and_trace_records_send_times():
    async def go():
        async with StandIn(step_ms=STEP_MS, trace=True) as url, aiohttp.ClientSession() as s:
            t = time.monotonic()
            res = await asyncio.gather(*(
                sse_events(s, url + "/v1/completions",
                           body(10_000, standin_run={"id": "lvl", "seconds": 0.2}),
                           headers={"x-request-id": f"q{i}"}) for i in range(3)))
            took = time.monotonic() - t
            async with s.get(url + "/standin/trace") as r:
                tr = await r.json()
            async with s.get(url + "/standin/trace") as r:
                again = await r.json()
            return res, took, tr, again
    res, took, tr, again = asyncio.run(go())
    assert took < 10.0
    for i, (_, ev) in enumerate(res):
        content = [e for e in ev if e != "[DONE]" and e["choices"]]
        assert 1 <= len(content) <= 100, "ended at the run's end, far before 10,000 tokens"
        assert content[-1]["choices"][0]["finish_reason"] == "length"
        assert tr["requests"][f"q{i}"] == [e["server_time"] for e in content]
    assert set(tr["runs"]) == {"lvl"} and tr["runs"]["lvl"]["end"] - tr["runs"]["lvl"]["start"] == pytest.approx(0.2)
    assert again["requests"] == {}, "a dump forgets what it returned"


def test_fault_specs():
    assert parse_fault(None) == ("none", None)
    assert parse_fault("cut") == ("cut", None)
    assert parse_fault("cut:7") == ("cut", 7)
    assert parse_fault({"mode": "multi", "n": 4}) == ("multi", 4)
    for bad in ("nope", "cut:x", 3):
        with pytest.raises(ValueError):
            parse_fault(bad)
    assert "slow_headers" in FAULT_MODES and "http_503" in FAULT_MODES


def test_bad_requests_get_openai_errors():
    async def go():
        out = []
        async with StandIn(step_ms=STEP_MS) as url, aiohttp.ClientSession() as s:
            for b in (body(standin_fault="nope"), {**body(), "stream": False},
                      body(max_tokens=0)):
                async with s.post(url + "/v1/completions", json=b) as r:
                    out.append((r.status, await r.json()))
            async with s.post(url + "/fault/bogus/v1/completions", json=body()) as r:
                out.append((r.status, await r.json()))
            async with s.post(url + "/v1/completions", data=b"{not json") as r:
                out.append((r.status, await r.json()))
        return out
    for status, err in asyncio.run(go()):
        assert status == 400
        assert set(err["error"]) == {"message", "type", "param", "code"} and err["error"]["code"] == 400


def test_multi_token_events_carry_their_count():
    async def go():
        async with StandIn(step_ms=STEP_MS) as url, aiohttp.ClientSession() as s:
            return await sse_events(s, url + "/fault/multi:3/v1/completions", body(7))
    _, ev = asyncio.run(go())
    content = [e for e in ev if e != "[DONE]" and e["choices"]]
    assert [e["usage"]["completion_tokens"] for e in content] == [3, 6, 7]
    assert [e["choices"][0]["text"] for e in content] == [" tok" * 3, " tok" * 3, " tok"]
    st = [e["server_time"] for e in content]
    assert (st[1] - st[0]) * 1e3 > 2 * STEP_MS, "a 3-token event comes every 3rd step"


def test_thread_helper_serves_blocking_clients():
    with StandInThread(step_ms=STEP_MS) as url:
        with urllib.request.urlopen(url + "/health", timeout=5) as r:
            assert r.status == 200
        req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body(2)).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as r:
            text = r.read().decode()
    assert text.rstrip().endswith("data: [DONE]") and text.count('"text"') == 2


def test_cli_runs_and_stops():
    from bench.engine import free_port
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "bench.standin", "--port", str(port),
                          "--step-ms", "5"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert f"http://127.0.0.1:{port}" in line and "never publish" in line
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
            assert r.status == 200
    finally:
        p.terminate()
        p.wait(10)
        p.stdout.close()


def test_server_options_of_the_fault_and_security_tests():
    """Version, API key, the /metrics script, the error body and the auth log."""
    async def go():
        srv = StandIn(step_ms=2, model="<m>", version="<v>", api_key="k1",
                      metrics_script=["500", "malformed", "ok"], error_body="<boom>")
        async with srv as url, aiohttp.ClientSession() as s:
            async with s.get(url + "/version") as r:
                version = await r.json()
            async with s.get(url + "/v1/models") as r:
                refused = r.status
            auth = {"Authorization": "Bearer k1"}
            async with s.get(url + "/v1/models", headers=auth) as r:
                models = await r.json()
            pages = []
            for _ in range(4):
                async with s.get(url + "/metrics") as r:
                    pages.append((r.status, await r.text()))
            streams = [await sse_events(s, url + "/v1/completions", body(2), headers=auth)
                       for _ in range(3)]
            async with s.post(url + "/v1/completions", json=body(2)) as r:
                unauthorised = r.status
        return srv, version, refused, models, pages, streams, unauthorised
    srv, version, refused, models, pages, streams, unauthorised = asyncio.run(go())
    assert version == {"version": "<v>"} and models["data"][0]["id"] == "<m>"
    assert refused == 401 and unauthorised == 401
    assert [p[0] for p in pages] == [500, 200, 200, 200]
    with pytest.raises(ValueError):
        parse_exposition(pages[1][1])
    ok = parse_exposition(pages[2][1])
    assert any('model_name="<m>"' in k for k in ok) and pages[3][1] == pages[2][1]
    # Every third completion fails with the error body; the others stream as usual.
    assert [st for st, _ in streams] == [200, 200, 500]
    assert streams[0][1][-1] == "[DONE]"
    assert srv.completions_seen == 3 and srv.scrapes == 4
    assert srv.auth.count("Bearer k1") == 4 and srv.auth.count(None) == 7   # every request kept
    with pytest.raises(ValueError, match="unknown /metrics answers"):
        StandIn(metrics_script=["sometimes"])


def test_burst_sends_a_whole_stream_in_one_write():
    async def go():
        async with StandIn(step_ms=STEP_MS, burst=True) as url, aiohttp.ClientSession() as s:
            async with s.post(url + "/v1/completions", json=body(5)) as r:
                reads = [chunk async for chunk in r.content.iter_any()]
        return reads
    reads = asyncio.run(go())
    text = b"".join(reads).decode()
    assert len(reads) == 1, reads
    assert text.count('"text"') == 5 and text.rstrip().endswith("data: [DONE]")
