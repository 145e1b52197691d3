"""A fast stand-in for an OpenAI-compatible streaming server: for benchmarks and fault tests only.

It is not an engine and never stands for one in a published run: it runs no model and
generates no text, only a timed stream of token events shaped like vLLM's
(docs/analyses.md, streaming), and a /metrics page with a few of vLLM's counters that
follow what it sent. Its default version string and model owner say "standin" so a bundle
recorded against it is recognisable. It is the project's one fake server: the load tools
(tools/bench_*.py) drive thousands of streams through it, and the fault and security tests
make it misbehave on cue (the fault modes and the server options below).

Decode loop: one global step timer with period `step_ms` (default 10 ms) on the grid
t0 + k·step. At every step each active stream gets exactly one token event (in `multi` fault
mode, k tokens every k-th step). A step that takes longer than `step_ms` (too many streams
for one core) stretches, like an engine whose step is compute-bound; ticks are never burst
to catch up. A new request joins at the next step, so its first token comes within one step.

Every event carries the server's send time as a top-level field
    "server_time": <seconds on CLOCK_MONOTONIC>
(Python's `time.monotonic()`; on Linux `time.perf_counter()` of any process on the same host
reads the same clock). A benchmark computes the client's distortion of a gap as
    (client arrival of event j+1 − client arrival of event j) − (server_time[j+1] − server_time[j]),
which removes the server's own step jitter from the figure.

Endpoints (also under any path prefix `/fault/<spec>`, see below):
    POST /v1/completions   streaming only (`"stream": true`); `max_tokens` (default 16),
                           `stream_options.include_usage` (final usage chunk with
                           `"choices": []`), `stream_options.continuous_usage_stats` (cumulative
                           usage in every chunk), `return_token_ids`; then `data: [DONE]`
    GET  /health           200, empty body
    GET  /version          {"version": "standin-1"}
    GET  /v1/models        one model (default id "standin")
    GET  /metrics          Prometheus text: vllm:num_requests_running, vllm:num_requests_waiting,
                           vllm:generation_tokens_total, vllm:prompt_tokens_total,
                           vllm:request_success_total{finished_reason=...}
    GET  /standin/trace    with tracing on: {"clock", "step_ms", "requests": {request id:
                           [server_time of each token event]}, "runs": {...}} for finished
                           requests, then forgets them (`?keep=1` keeps them)
    GET  /standin/stats    counters of the decode loop (steps, events, stretched steps)

Server options (constructor arguments; the CLI flag in brackets):
    version        the /version string [--version]; hostile strings are served as given
    model          the served model id [--model]; any id a request names is answered
    api_key        like vLLM's --api-key: every /v1/* request needs `Authorization: Bearer KEY`,
                   else 401 [--api-key; the CLI then logs it among its non-default args, as
                   vLLM does, so that a test can check the client redacts it]
    metrics_script answers of the successive /metrics scrapes: "ok", "500" (HTTP 500),
                   "malformed" (text that is not exposition format) or "timeout" (the page
                   comes 5 s late); "ok" for ever after the script
    error_body     every 3rd completion request fails with HTTP 500 and this body (text)
    burst          every event of a stream is held and sent in one write at its end (one
                   client read, as a buffering proxy or a starved client sees it)
The server keeps the Authorization header of every request it received in `auth` and counts
completion requests in `completions_seen` and /metrics scrapes in `scrapes`.

The request id is the `x-request-id` header (as `vllm bench serve` sends it), else
`standin-<n>`; the chunks' "id" is `cmpl-<request id>`.

Fault modes, per request: the body field `"standin_fault"` (a string "MODE" or "MODE:N", or
{"mode": MODE, "n": N}), or the path prefix `/fault/MODE[:N]/v1/completions`, which lets an
unmodified client (e.g. `python -m serving_ledger run --endpoint http://host:port/fault/cut`)
meet it:
    malformed     after N tokens (default 2) one event that is not JSON; the stream goes on
    badshape      after N tokens (default 2) one event that is valid JSON of the wrong shape
                  (`"choices": [7]`, `"usage": {"completion_tokens": null}`); the stream goes on
    cut           after N tokens (default 3) the connection is closed: no [DONE], no end
                  of the chunked body
    nodone        the stream ends cleanly after all tokens but without `data: [DONE]`
    http_400, http_500, http_503
                  that HTTP status with an OpenAI-style body {"error": {"message", "type",
                  "param", "code"}}
    error_event   after N tokens (default 2) `data: {"error": {...}}` then `data: [DONE]`
                  inside the 200 stream
    short         only N tokens (default max_tokens // 2, at least 1), finish_reason "length"
    multi         N tokens per event (default 3), one event every N-th step; the usage
                  counts say how many tokens each event carried
    slow_headers  the response headers are sent N ms late (default 300)
    stall         after 2 tokens the stream goes silent for N s (default 30), connection
                  open, then the connection is closed
    huge          after 2 tokens one `data:` line of N MiB (default 16) that never ends its
                  event; then silence, and the connection is closed after 30 s
    mix           each request takes the next mode of MIX_MODES in turn
Benchmark control (not a fault): `"standin_run": {"id": ID, "seconds": S}` ends every stream
of run ID with finish_reason "length" at the first step S seconds after the run's first
request arrived, so a client that issues fixed request counts (`vllm bench serve`) finishes
in bounded time.

Run it: `python -m bench.standin --port 8100 --step-ms 10 [--trace] [--cpu 1]
[--reuse-port] [--model M] [--version V] [--api-key K] [--log-line LINE ...]`
(`--reuse-port`: K processes started so on one port serve it together; `--admin-port P` lets
each of them be asked for its own trace); in-process:
`async with StandIn(step_ms=10) as url: ...` or `with StandInThread(step_ms=10) as url: ...`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import threading
import time
from array import array
from typing import Any, Sequence

from aiohttp import web

from bundle.redact import API_KEY_ENV

VERSION = "standin-1"
DEFAULT_MODEL = "standin"
TOKEN_TEXT = " tok"
FAULT_MODES = ("malformed", "badshape", "cut", "nodone", "http_400", "http_500", "http_503",
               "error_event", "short", "multi", "slow_headers", "stall", "huge")
MIX_MODES = ("none",) + FAULT_MODES
STEP_FAULTS = ("malformed", "badshape", "cut", "error_event", "multi", "stall", "huge")   # act during the stream
METRICS_MODES = ("ok", "500", "malformed", "timeout")
MALFORMED_PAGE = 'vllm:num_requests_running{engine="0" this is not exposition text\n'
HTTP_ERRORS = {"http_400": (400, "BadRequestError", "stand-in fault: bad request"),
               "http_500": (500, "InternalServerError", "stand-in fault: engine dead"),
               "http_503": (503, "ServiceUnavailableError", "stand-in fault: overloaded")}


def _label(value: str) -> str:
    """VALUE escaped as an exposition-format label value."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class FaultError(ValueError):
    """A fault specification the stand-in does not know."""


def parse_fault(spec: Any) -> tuple[str, int | None]:
    """(mode, n) from "MODE", "MODE:N" or {"mode": MODE, "n": N}; ("none", None) for none."""
    if spec in (None, "", "none"):
        return "none", None
    if isinstance(spec, dict):
        mode, n = spec.get("mode"), spec.get("n")
    elif isinstance(spec, str):
        mode, _, n = spec.partition(":")
        n = n or None
    else:
        raise FaultError(f"standin_fault must be a string or an object, got {spec!r}")
    if mode not in FAULT_MODES and mode not in ("mix", "none"):
        raise FaultError(f"unknown stand-in fault {mode!r}; known: {', '.join(FAULT_MODES)}, mix")
    try:
        n = int(n) if n is not None else None
    except (TypeError, ValueError):
        raise FaultError(f"stand-in fault parameter must be an integer, got {n!r}") from None
    return mode, n


def openai_error(status: int, etype: str, message: str) -> web.Response:
    """An OpenAI-style error response."""
    return web.json_response({"error": {"message": message, "type": etype, "param": None,
                                        "code": status}}, status=status)


def prompt_tokens(prompt: Any) -> int:
    """Tokens of a prompt: exact for token ids, a word count for text (there is no tokenizer)."""
    if isinstance(prompt, list):
        if prompt and isinstance(prompt[0], list):
            prompt = prompt[0]
        elif prompt and isinstance(prompt[0], str):
            prompt = prompt[0]
    if isinstance(prompt, list):
        return len(prompt)
    if isinstance(prompt, str):
        return max(1, len(prompt.split()))
    return 0


class _Stream:
    """One active request in the decode loop."""

    __slots__ = ("rid", "transport", "head", "plain", "prompt_tokens", "target", "sent", "pending",
                 "per_event", "usage_each", "usage_final", "token_ids", "mode", "n", "end_at",
                 "done", "times", "finish_reason", "ok", "held")

    def __init__(self, rid, transport, head, p_tokens, target, per_event, usage_each,
                 usage_final, token_ids, mode, n, end_at, done, times, burst=False):
        self.rid, self.transport, self.head = rid, transport, head
        self.prompt_tokens, self.target, self.per_event = p_tokens, target, per_event
        self.usage_each, self.usage_final, self.token_ids = usage_each, usage_final, token_ids
        self.mode, self.n, self.end_at, self.done, self.times = mode, n, end_at, done, times
        self.sent = 0        # tokens sent so far
        self.pending = 0     # tokens generated but not yet sent (multi mode)
        self.finish_reason = None
        self.ok = False
        self.held: list[str] | None = [] if burst else None   # burst: events held to the end
        # The prefix of an ordinary one-token event (None: every event goes through _emit).
        self.plain = (head + '"' + TOKEN_TEXT + '","logprobs":null,"finish_reason":null,'
                      '"stop_reason":null}],') \
            if per_event == 1 and not token_ids and mode not in STEP_FAULTS and not burst else None


class StandIn:
    """The stand-in server; `async with StandIn(...) as url` runs it on the current loop."""

    def __init__(self, step_ms: float = 10.0, model: str = DEFAULT_MODEL, trace: bool = False,
                 max_model_len: int = 1 << 20, version: str = VERSION, api_key: str | None = None,
                 metrics_script: Sequence[str] = (), error_body: str | None = None,
                 burst: bool = False):
        if step_ms <= 0:
            raise ValueError("step_ms must be > 0")
        bad = [m for m in metrics_script if m not in METRICS_MODES]
        if bad:
            raise ValueError(f"unknown /metrics answers {bad}; known: {', '.join(METRICS_MODES)}")
        self.step_s = step_ms / 1e3
        self.model, self.trace, self.max_model_len = model, trace, max_model_len
        self.version_text, self.api_key = version, api_key
        self.metrics_script, self.error_body, self.burst = list(metrics_script), error_body, burst
        self.auth: list[str | None] = []   # the Authorization header of every request received
        self.completions_seen = 0
        self.scrapes = 0
        self.active: dict[int, _Stream] = {}   # insertion-ordered: streams join at the end
        self.traces: dict[str, list[float]] = {}
        self.runs: dict[str, dict[str, float]] = {}
        self.counters = {"requests": 0, "prompt_tokens": 0, "generation_tokens": 0,
                         "steps": 0, "events": 0, "stretched_steps": 0, "step_busy_s": 0.0}
        self.finished: dict[str, int] = {}
        self._next_id = 0
        self._mix = 0
        self._wake: asyncio.Event | None = None
        self._ticker: asyncio.Task | None = None
        self._runner: web.AppRunner | None = None
        self.url: str | None = None

    # -- lifecycle -------------------------------------------------------------------------

    @web.middleware
    async def _gate(self, request: web.Request, handler):
        """Keep the Authorization header; with an API key, refuse /v1/* without it (as vLLM)."""
        header = request.headers.get("Authorization")
        self.auth.append(header)
        if self.api_key and "/v1/" in request.path and header != f"Bearer {self.api_key}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 << 20, middlewares=[self._gate])
        for prefix in ("", "/fault/{fault}"):
            app.router.add_post(prefix + "/v1/completions", self.completions)
            app.router.add_get(prefix + "/health", self.health)
            app.router.add_get(prefix + "/version", self.version)
            app.router.add_get(prefix + "/v1/models", self.models)
            app.router.add_get(prefix + "/metrics", self.metrics)
            app.router.add_get(prefix + "/standin/trace", self.trace_dump)
            app.router.add_get(prefix + "/standin/stats", self.stats)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0, reuse_port: bool = False) -> str:
        """Listen on HOST:PORT (0: a free port) and return the base URL.

        REUSE_PORT sets SO_REUSEPORT, so that several stand-in processes can serve one port
        (the kernel spreads connections over them; each keeps its own counters)."""
        self._wake = asyncio.Event()
        self._ticker = asyncio.create_task(self._loop())
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False,
                                     shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, backlog=4096, reuse_address=True,
                           reuse_port=True if reuse_port else None)
        await site.start()
        h, p = self._runner.addresses[0][:2]
        self.url = f"http://{h}:{p}"
        return self.url

    async def stop(self) -> None:
        """Stop listening; open streams are cut."""
        for s in list(self.active.values()):
            self._finish(s, "abort", ok=False)
            if s.transport is not None:
                s.transport.close()
        if self._ticker is not None:
            self._ticker.cancel()
            try:
                await self._ticker
            except asyncio.CancelledError:
                pass
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> str:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    # -- plain endpoints -------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": self.version_text})

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{
            "id": self.model, "object": "model", "created": 0, "owned_by": "serving-ledger-standin",
            "root": self.model, "parent": None, "max_model_len": self.max_model_len}]})

    async def metrics(self, request: web.Request) -> web.Response:
        k = self.scrapes
        self.scrapes += 1
        answer = self.metrics_script[k] if k < len(self.metrics_script) else "ok"
        if answer == "500":
            return web.Response(status=500, text="internal error")
        if answer == "malformed":
            return web.Response(status=200, text=MALFORMED_PAGE)
        if answer == "timeout":
            await asyncio.sleep(5)
        c, lab = self.counters, f'engine="0",model_name="{_label(self.model)}"'
        lines = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{lab}}} {float(len(self.active))}",
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{lab}}} 0.0",
            "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{{{lab}}} {float(c['prompt_tokens'])}",
            "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{lab}}} {float(c['generation_tokens'])}",
            "# HELP vllm:request_success_total Count of successfully processed requests.",
            "# TYPE vllm:request_success_total counter",
        ]
        for reason in sorted(set(self.finished) | {"length", "stop"}):
            lines.append(f'vllm:request_success_total{{{lab},finished_reason="{reason}"}} '
                         f"{float(self.finished.get(reason, 0))}")
        return web.Response(text="\n".join(lines) + "\n",
                            content_type="text/plain", charset="utf-8",
                            headers={"X-Content-Type": "version=0.0.4"})

    async def trace_dump(self, request: web.Request) -> web.Response:
        out = {"clock": "CLOCK_MONOTONIC seconds (time.monotonic)", "step_ms": self.step_s * 1e3,
               "requests": {k: list(v) for k, v in self.traces.items()},
               "runs": self.runs}
        if request.query.get("keep") != "1":
            self.traces = {}
        return web.json_response(out)

    async def stats(self, request: web.Request) -> web.Response:
        return web.json_response({**self.counters, "active": len(self.active),
                                  "step_ms": self.step_s * 1e3})

    # -- the streaming endpoint ------------------------------------------------------------

    def _fault_of(self, request: web.Request, body: dict) -> tuple[str, int | None]:
        spec = body.get("standin_fault")
        if spec is None:
            spec = request.match_info.get("fault")
        mode, n = parse_fault(spec)
        if mode == "mix":
            mode = MIX_MODES[self._mix % len(MIX_MODES)]
            self._mix += 1
        return mode, n

    async def completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return openai_error(400, "BadRequestError", "request body is not valid JSON")
        if not isinstance(body, dict):
            return openai_error(400, "BadRequestError", "request body must be a JSON object")
        self.completions_seen += 1
        if self.error_body is not None and self.completions_seen % 3 == 0:
            return web.Response(status=500, text=self.error_body)
        try:
            mode, n = self._fault_of(request, body)
        except FaultError as e:
            return openai_error(400, "BadRequestError", str(e))
        if mode in HTTP_ERRORS:
            return openai_error(*HTTP_ERRORS[mode])
        if body.get("stream") is not True:
            return openai_error(400, "BadRequestError", "the stand-in serves stream=true only")
        max_tokens = body.get("max_tokens", 16)
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            return openai_error(400, "BadRequestError", f"max_tokens must be an integer >= 1, "
                                                        f"got {max_tokens!r}")
        opts = body.get("stream_options") or {}
        if not isinstance(opts, dict):
            return openai_error(400, "BadRequestError", "stream_options must be an object")
        p_tokens = prompt_tokens(body.get("prompt"))
        self._next_id += 1
        rid = request.headers.get("x-request-id") or f"standin-{self._next_id}"
        end_at = None
        run = body.get("standin_run")
        if isinstance(run, dict) and run.get("id") is not None:
            r = self.runs.get(str(run["id"]))
            if r is None:
                t = time.monotonic()
                r = self.runs[str(run["id"])] = {"start": t, "end": t + float(run.get("seconds", 0))}
            end_at = r["end"]
        target = max_tokens
        if mode == "short":
            target = min(max_tokens, n if n is not None else max(1, max_tokens // 2))
        per_event = max(1, n if n is not None else 3) if mode == "multi" else 1
        self.counters["requests"] += 1
        self.counters["prompt_tokens"] += p_tokens
        if mode == "slow_headers":
            await asyncio.sleep((n if n is not None else 300) / 1e3)
        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream",
                                                       "Cache-Control": "no-cache",
                                                       "x-request-id": rid})
        resp.enable_chunked_encoding()
        try:
            await resp.prepare(request)   # StreamResponse sends its headers here
        except ConnectionError:           # the client went away (e.g. during slow headers)
            return resp
        head = ('data: {"id":' + json.dumps("cmpl-" + rid) + ',"object":"text_completion",'
                '"created":' + str(int(time.time())) + ',"model":' + json.dumps(self.model)
                + ',"choices":[{"index":0,"text":')
        done = asyncio.get_running_loop().create_future()
        s = _Stream(rid, request.transport, head, p_tokens, target, per_event,
                    bool(opts.get("continuous_usage_stats")), bool(opts.get("include_usage")),
                    bool(body.get("return_token_ids")), mode, n, end_at, done,
                    array("d") if self.trace else None, self.burst)
        self.active[id(s)] = s
        self._wake.set()
        try:
            await done
        except asyncio.CancelledError:
            self.active.pop(id(s), None)
            raise
        if s.ok:
            try:
                await resp.write_eof()
            except (ConnectionError, RuntimeError):
                pass
        return resp

    # -- the decode loop -------------------------------------------------------------------

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        step = self.step_s
        t0 = loop.time()
        next_t = t0
        while True:
            if not self.active:
                self._wake.clear()
                await self._wake.wait()
                now = loop.time()
                # Join the global grid at its next step.
                next_t = t0 + ((now - t0) // step + 1) * step
            delay = next_t - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            t_tick = loop.time()
            self._tick()
            self.counters["step_busy_s"] += loop.time() - t_tick
            next_t += step
            now = loop.time()
            if next_t < now:   # the step took longer than step_ms: it stretches, no burst
                self.counters["stretched_steps"] += 1
                next_t = now
                await asyncio.sleep(0)   # let the handlers run between stretched steps

    def _tick(self) -> None:
        """One decode step: every active stream gets its token(s)."""
        c = self.counters
        c["steps"] += 1
        mono = time.monotonic
        n_plain = 0
        for s in list(self.active.values()):
            tr = s.transport
            if tr is None or tr.is_closing():
                self._finish(s, "abort", ok=False)
                continue
            s.pending += 1
            now = mono()
            sent = s.sent + s.pending
            last = sent >= s.target or (s.end_at is not None and now >= s.end_at)
            if s.plain is not None and not last:
                # The common event (one token, no fault at this step): one f-string, one write.
                # Every part is ASCII (ids and names went through json.dumps), so the chunk
                # size is the string's length.
                s.sent, s.pending = sent, 0
                if s.usage_each:
                    text = (f'{s.plain}"usage":{{"prompt_tokens":{s.prompt_tokens},"total_tokens":'
                            f'{s.prompt_tokens + sent},"completion_tokens":{sent}}},'
                            f'"server_time":{now!r}}}\n\n')
                else:
                    text = f'{s.plain}"server_time":{now!r}}}\n\n'
                tr.write(f"{len(text):x}\r\n{text}\r\n".encode())
                if s.times is not None:
                    s.times.append(now)
                n_plain += 1
                continue
            if s.pending < s.per_event and not last:
                continue
            self._emit(s, tr, now, last)
        c["generation_tokens"] += n_plain
        c["events"] += n_plain

    def _emit(self, s: _Stream, tr, now: float, last: bool) -> None:
        k = s.pending
        s.pending = 0
        s.sent += k
        self.counters["generation_tokens"] += k
        self.counters["events"] += 1
        parts = [s.head, '"', TOKEN_TEXT * k, '","logprobs":null,"finish_reason":',
                 '"length"' if last else "null", ',"stop_reason":null']
        if s.token_ids:
            parts.append(',"token_ids":[' + ",".join(str(1000 + s.sent - k + i) for i in range(k))
                         + "]")
        parts.append("}]")
        if s.usage_each:
            parts.append(f',"usage":{{"prompt_tokens":{s.prompt_tokens},'
                         f'"total_tokens":{s.prompt_tokens + s.sent},'
                         f'"completion_tokens":{s.sent}}}')
        parts.append(f',"server_time":{now!r}}}\n\n')
        if s.times is not None:
            s.times.append(now)
        mode = s.mode
        if mode != "none" and s.sent == (s.n if s.n is not None else
                                         (2 if mode in ("malformed", "badshape", "error_event") else 3)):
            if mode == "malformed":
                parts.append('data: {"id": "broken", "choices": [{"text": \n\n')
            elif mode == "badshape":
                parts.append('data: {"choices":[{"text":" x","finish_reason":null}],'
                             '"usage":{"completion_tokens":null}}\n\n'
                             'data: {"choices":[7]}\n\n')
            elif mode == "error_event":
                parts.append('data: {"error":{"message":"stand-in fault: error inside the stream",'
                             '"type":"InternalServerError","param":null,"code":500}}\n\n'
                             "data: [DONE]\n\n")
                self._send(s, tr, "".join(parts), final=True)
                self._finish(s, "error", ok=True)
                return
            elif mode == "cut":
                self._send(s, tr, "".join(parts), final=True)
                tr.close()   # no [DONE], no end of the chunked body
                self._finish(s, "abort", ok=False)
                return
        if mode in ("stall", "huge") and s.sent == 2:
            if mode == "huge":
                parts.append("data: " + "x" * ((s.n or 16) << 20))
            self._send(s, tr, "".join(parts), final=True)
            self.active.pop(id(s), None)     # no more steps: silence, the connection open
            quiet = (s.n or 30) if mode == "stall" else 30
            asyncio.get_running_loop().call_later(quiet, self._hang_up, s, tr)
            return
        if last:
            if s.usage_final:
                parts.append(s.head[:s.head.index('"choices"')]
                             + f'"choices":[],"usage":{{"prompt_tokens":{s.prompt_tokens},'
                               f'"total_tokens":{s.prompt_tokens + s.sent},'
                               f'"completion_tokens":{s.sent}}},"server_time":{now!r}}}\n\n')
            if mode != "nodone":
                parts.append("data: [DONE]\n\n")
            self._send(s, tr, "".join(parts), final=True)
            self._finish(s, "length", ok=True)
            return
        self._send(s, tr, "".join(parts), final=False)

    def _send(self, s: _Stream, tr, text: str, final: bool) -> None:
        """Write TEXT now, or (burst) hold it until the stream's FINAL write."""
        if s.held is None:
            self._write(tr, text)
            return
        s.held.append(text)
        if final:
            self._write(tr, "".join(s.held))
            s.held = []

    @staticmethod
    def _write(tr, text: str) -> None:
        """One HTTP/1.1 chunk straight to the transport (the response is chunked and prepared)."""
        data = text.encode()
        tr.write(b"%x\r\n%b\r\n" % (len(data), data))

    def _hang_up(self, s: _Stream, tr) -> None:
        """End a silent stream: close its connection (no end of the body) and release its handler."""
        tr.close()
        s.finish_reason, s.ok = "abort", False
        if not s.done.done():
            s.done.set_result(None)

    def _finish(self, s: _Stream, reason: str, ok: bool) -> None:
        if self.active.pop(id(s), None) is None:
            return
        s.finish_reason, s.ok = reason, ok
        if reason in ("length", "stop"):
            self.finished[reason] = self.finished.get(reason, 0) + 1
        if s.times is not None:
            self.traces[s.rid] = s.times
        if not s.done.done():
            s.done.set_result(None)


class StandInThread:
    """The stand-in on its own event loop in a daemon thread: `with StandInThread() as url:`."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, **kwargs: Any):
        self.server = StandIn(**kwargs)
        self.host, self.port = host, port
        self.url: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def start(self, timeout_s: float = 10.0) -> str:
        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                self.url = loop.run_until_complete(self.server.start(self.host, self.port))
            except BaseException as e:  # noqa: BLE001 - reported to the starting thread
                self._error = e
                self._ready.set()
                return
            self._ready.set()
            loop.run_forever()
            loop.run_until_complete(self.server.stop())
            loop.close()

        self._thread = threading.Thread(target=run, name="standin", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise RuntimeError("the stand-in did not start in time")
        if self._error is not None:
            raise self._error
        return self.url

    def stop(self, timeout_s: float = 10.0) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout_s)

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.standin",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8100)
    ap.add_argument("--step-ms", type=float, default=10.0, help="decode step period (ms)")
    ap.add_argument("--model", default=DEFAULT_MODEL, help="served model id")
    ap.add_argument("--trace", action="store_true",
                    help="keep each request's token send times for GET /standin/trace")
    ap.add_argument("--cpu", type=int, default=None, help="pin the server to this CPU core")
    ap.add_argument("--reuse-port", action="store_true",
                    help="SO_REUSEPORT: start several stand-ins on one --port to serve it together")
    ap.add_argument("--admin-port", type=int, default=None,
                    help="also listen on this port alone (with --reuse-port: reach this process's "
                         "own /standin/trace and /standin/stats)")
    ap.add_argument("--version", default=VERSION, help="the /version string")
    ap.add_argument("--api-key", help="require this bearer token on /v1/* (logged, as vLLM does)")
    ap.add_argument("--log-line", action="append", default=[],
                    help="a line to print to stdout at startup (the server log)")
    args = ap.parse_args(argv)
    for line in args.log_line:
        print(line, flush=True)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})

    async def serve() -> None:
        server = StandIn(step_ms=args.step_ms, model=args.model, trace=args.trace,
                         version=args.version, api_key=args.api_key)
        url = await server.start(args.host, args.port, reuse_port=args.reuse_port)
        if args.admin_port is not None:
            await web.TCPSite(server._runner, args.host, args.admin_port).start()
        print(f"standin: listening on {url} (step {args.step_ms:g} ms; not an engine, "
              "never publish its numbers)", flush=True)
        pid = os.getpid()
        if args.api_key:   # vLLM prints its non-default arguments, the key included
            print(f"(APIServer pid={pid}) INFO 01-01 00:00:00 [standin.py:1] non-default args: "
                  f"{{'api_key': ['{args.api_key}'], 'port': {args.port}}}", flush=True)
        # What a server could leak: whether the client's key variable reached its environment.
        print(f"(APIServer pid={pid}) INFO 01-01 00:00:00 [standin.py:2] client key variable in "
              f"environment: {API_KEY_ENV in os.environ}", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await server.stop()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
