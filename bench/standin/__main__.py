"""A fast stand-in for an OpenAI-compatible streaming server: for benchmarks and fault tests only."""

from __future__ import annotations

import argparse
import asyncio
import os

from aiohttp import web

from bench.standin.faults import DEFAULT_MODEL, VERSION
from bench.standin.server import StandIn
from bundle.redact import API_KEY_ENV


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
