"""The stand-in's endpoints: health, version, models, metrics, traces, streamed completions."""

from __future__ import annotations

import asyncio
import json
import time
from array import array
from typing import Sequence

from aiohttp import web

from bench.standin.decode import DecodeLoop, Stream
from bench.standin.faults import (
    DEFAULT_MODEL,
    HTTP_ERRORS,
    MALFORMED_PAGE,
    METRICS_MODES,
    MIX_MODES,
    VERSION,
    FaultError,
    label_value,
    openai_error,
    parse_fault,
    prompt_tokens,
)


class StandIn(DecodeLoop):
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
        self.active: dict[int, Stream] = {}   # insertion-ordered: streams join at the end
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
        c, lab = self.counters, f'engine="0",model_name="{label_value(self.model)}"'
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
        s = Stream(rid, request.transport, head, p_tokens, target, per_event,
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
