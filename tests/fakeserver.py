"""A minimal fake OpenAI-compatible streaming server for fault and security tests only.

It answers /health, /version, /v1/models, streaming /v1/completions (one token per event,
cumulative usage in every chunk, then a usage-only chunk and [DONE]) and /metrics, whose
answers follow a script: "ok" (a small vLLM-like page), "500", "malformed" (text that is not
exposition format) or "timeout" (no answer for 5 s); after the script, "ok" for ever.
Every Authorization header it receives is kept in `auth` (in-process) so a test can check
what the client sent. The model id, the version string and a startup log line are settable,
so hostile strings can be served.

In-process: `with FakeServer(model="m") as url: ...` (a thread with its own event loop).
As a process (for SIGKILL tests): `python -m tests.fakeserver --port P [--model M] ...`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import threading

from aiohttp import web
from serving_ledger.bench.engine import TINY_MODEL_DIR

# A short two-point round against a fake server (the embedded model's config gives the
# report its architecture; the fake serves no real model).
FAKE_ROUND_PLAN = f"""
[engine]
model_config = "{TINY_MODEL_DIR}"
[workload]
input_len = 16
output_len = 8
[sweep]
concurrency = [1, 2]
requests_per_point = 6
cooldown_s = 0.2
[sampler]
metrics_interval_s = 0.25
"""

OK_PAGE = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="{model}"}} {running}
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{engine="0",model_name="{model}"}} {gen}
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{{engine="0",model_name="{model}"}} {prompt}
"""
MALFORMED_PAGE = "vllm:num_requests_running{engine=\"0\" this is not exposition text\n"


async def _maybe(result) -> None:
    if asyncio.iscoroutine(result):
        await result


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class FakeServer:
    """The fake server; `url` once started. Not thread-safe beyond appending to lists."""

    def __init__(self, model: str = "fake", version: str = "fake-1", metrics=(),
                 token_delay_s: float = 0.002, port: int = 0, api_key: str | None = None,
                 error_body: str | None = None, burst: bool = False):
        self.model, self.version = model, version
        self.api_key = api_key          # like vLLM's --api-key: /v1/* needs the bearer token
        self.error_body = error_body    # every 3rd completion fails with HTTP 500 and this body
        self.burst = burst              # every event of a stream in one write (one client read)
        self.metrics_script = list(metrics)
        self.token_delay_s = token_delay_s
        self.port = port
        self.auth: list[str | None] = []
        self.scrapes = 0
        self.completions_seen = 0
        self.running = self.gen = self.prompt = 0
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    # -- handlers --

    def _seen(self, request: web.Request) -> None:
        self.auth.append(request.headers.get("Authorization"))

    async def health(self, request: web.Request) -> web.Response:
        self._seen(request)
        return web.Response(status=200)

    async def version_h(self, request: web.Request) -> web.Response:
        self._seen(request)
        return web.json_response({"version": self.version})

    def _refused(self, request: web.Request) -> web.Response | None:
        if self.api_key and request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        return None

    async def models(self, request: web.Request) -> web.Response:
        self._seen(request)
        if (refused := self._refused(request)) is not None:
            return refused
        return web.json_response({"object": "list", "data": [
            {"id": self.model, "object": "model", "owned_by": "fake", "max_model_len": 2048}]})

    async def metrics(self, request: web.Request) -> web.Response:
        self._seen(request)
        k = self.scrapes
        self.scrapes += 1
        mode = self.metrics_script[k] if k < len(self.metrics_script) else "ok"
        if mode == "500":
            return web.Response(status=500, text="internal error")
        if mode == "malformed":
            return web.Response(status=200, text=MALFORMED_PAGE)
        if mode == "timeout":
            await asyncio.sleep(5)
        return web.Response(text=OK_PAGE.format(model=_label(self.model), running=self.running,
                                                gen=self.gen, prompt=self.prompt))

    async def completions(self, request: web.Request) -> web.StreamResponse:
        self._seen(request)
        if (refused := self._refused(request)) is not None:
            return refused
        body = await request.json()
        if body.get("model") != self.model:
            return web.json_response({"error": {"message": f"model {body.get('model')!r} does not "
                                                           "exist", "code": 404}}, status=404)
        self.completions_seen += 1
        if self.error_body is not None and self.completions_seen % 3 == 0:
            return web.Response(status=500, text=self.error_body)
        n = int(body.get("max_tokens") or 16)
        prompt = body.get("prompt")
        p_tokens = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        opts = body.get("stream_options") or {}
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        self.running += 1
        self.prompt += p_tokens
        held: list[bytes] = []
        write = held.append if self.burst else resp.write
        try:
            for i in range(n):
                await asyncio.sleep(self.token_delay_s)
                chunk = {"id": "cmpl-fake", "object": "text_completion", "model": self.model,
                         "choices": [{"index": 0, "text": " tok", "logprobs": None,
                                      "finish_reason": "length" if i == n - 1 else None}]}
                if opts.get("continuous_usage_stats"):
                    chunk["usage"] = {"prompt_tokens": p_tokens, "completion_tokens": i + 1,
                                      "total_tokens": p_tokens + i + 1}
                self.gen += 1
                await _maybe(write(b"data: " + json.dumps(chunk).encode() + b"\n\n"))
            if opts.get("include_usage"):
                usage = {"id": "cmpl-fake", "object": "text_completion", "model": self.model,
                         "choices": [], "usage": {"prompt_tokens": p_tokens, "completion_tokens": n,
                                                  "total_tokens": p_tokens + n}}
                await _maybe(write(b"data: " + json.dumps(usage).encode() + b"\n\n"))
            await _maybe(write(b"data: [DONE]\n\n"))
            if held:
                await resp.write(b"".join(held))
            await resp.write_eof()
        finally:
            self.running -= 1
        return resp

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/health", self.health)
        app.router.add_get("/version", self.version_h)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_post("/v1/completions", self.completions)
        return app

    # -- lifecycle --

    async def _start(self) -> None:
        self._runner = web.AppRunner(self.app(), shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()

    def start(self) -> str:
        if not self.port:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                self.port = s.getsockname()[1]
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self._start())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the fake server did not start")
        self.url = f"http://127.0.0.1:{self.port}"
        return self.url

    def stop(self) -> None:
        if self._loop is None:
            return
        async def shutdown() -> None:
            await self._runner.cleanup()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        fut = asyncio.run_coroutine_threadsafe(shutdown(), self._loop)
        try:
            fut.result(timeout=10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", default="fake")
    ap.add_argument("--version", default="fake-1")
    ap.add_argument("--token-delay", type=float, default=0.002)
    ap.add_argument("--api-key", help="require this bearer token on /v1/* (logged, as vLLM does)")
    ap.add_argument("--log-line", action="append", default=[],
                    help="a line to print to stdout at startup (the server log)")
    args = ap.parse_args(argv)
    for line in args.log_line:
        print(line, flush=True)
    srv = FakeServer(model=args.model, version=args.version, token_delay_s=args.token_delay,
                     api_key=args.api_key)
    pid = os.getpid()
    print(f"(APIServer pid={pid}) INFO 01-01 00:00:00 [fake.py:1] fake server on port {args.port}",
          flush=True)
    if args.api_key:  # vLLM prints its non-default arguments, the key included
        print(f"(APIServer pid={pid}) INFO 01-01 00:00:00 [utils.py:1] non-default args: "
              f"{{'api_key': ['{args.api_key}'], 'port': {args.port}}}", flush=True)
    # What a server could leak: whether the client's key variable reached its environment.
    inherited = "SERVING_LEDGER_API_KEY" in os.environ
    print(f"(APIServer pid={pid}) INFO 01-01 00:00:00 [fake.py:2] client key variable in "
          f"environment: {inherited}", flush=True)
    web.run_app(srv.app(), host="127.0.0.1", port=args.port, print=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
