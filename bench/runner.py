"""A round: start the engine, run every point of the plan, sample everything, write the bundle.

Each point runs in this process (bench/local_point.py), over local worker processes
(bench/workers.py) or over a Ray cluster's nodes (bench/ray_cluster.py); what the manifest
records before the engine starts is bench/round_manifest.py's.

Invariants:
- the bundle stays readable at every instant: samples are appended line by line and the
  manifest is replaced atomically; an interrupted or failed round still says so in it;
- a server this round started is stopped before `run_round` returns, whatever happened;
- a server that dies mid-point ends that point (marked failed with the reason), never the
  round's earlier data; the round restarts the server (embedded/launch) or stops cleanly
  (endpoint mode);
- the client never stores a derived number; the progress line is for people only.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
from pathlib import Path
from typing import Callable

import aiohttp

from bench import replay
from bench.client import open_stream_session
from bench.engine import Engine, EngineError, EngineGroup, free_port
from bench.local_point import run_point
from bench.loop import collect_between_points
from bench.loop import run as run_loop
from bench.plan.checks import context_problem, flags_problem
from bench.plan.resume import resume_problem
from bench.plan.spec import Plan
from bench.point_driver import Phase, RoundFailed, ServerDied, progress_line
from bench.prompts import PlanError
from bench.round_manifest import dataset_tokenizer, initial_manifest, model_config_of, secrets_of
from bench.samplers import AT_ROUND, AT_SERVER, Context, round_samplers
from bench.search import SloSearch
from bundle.files import server_log_name
from bundle.lock import BundleLock
from bundle.redact import Redactor
from bundle.store.reader import read_bundle
from bundle.store.writer import BundleWriter


def make_engine(plan: Plan, port: int, flags: list[str]) -> Engine | EngineGroup:
    """The engine of a plan for one server-flag set: one server, or a group of several."""
    e = plan.engine
    if e.mode == "embedded":
        return Engine.embedded(flags=e.flags + flags, env=e.env, port=port)
    if e.mode == "endpoint":
        members = [Engine.external(url) for url in e.all_endpoints()]
    else:
        members = [Engine.launch(cmd, url, flags=e.flags + flags, env=e.env)
                   for cmd, url in zip(e.all_commands(), e.all_endpoints())]
    return members[0] if len(members) == 1 else EngineGroup(members)


class Progress:
    """Prints point progress: requests done, output tok/s, errors, ETA (plain lines)."""

    def __init__(self, total_points: int, stream=sys.stderr):
        self.total_points, self.stream = total_points, stream
        self.tty = stream.isatty()
        self.last = 0.0

    def update(self, idx: int, pid: str, done: int, total: int, tokens: int, errors: int,
               elapsed: float, final: bool = False, phase: Phase | None = None) -> None:
        now = time.monotonic()
        if not final and now - self.last < (0.5 if self.tty else 5.0):
            return
        self.last = now
        line = progress_line(f"[{idx + 1}/{self.total_points}] {pid}", done, total, tokens, errors,
                             elapsed, None if final else phase)
        if self.tty:
            self.stream.write("\r" + line.ljust(100) + ("\n" if final else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


async def models_with_key(session: aiohttp.ClientSession, endpoint: str) -> list | None:
    """The `data` of /v1/models asked through SESSION (which carries the bearer token)."""
    try:
        async with session.get(endpoint + "/v1/models", timeout=aiohttp.ClientTimeout(total=10)) as r:
            if r.status != 200:
                return None
            body = await r.json(content_type=None)
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError):
        return None
    return body.get("data") if isinstance(body, dict) else None


def completed_points(out: Path) -> set[str]:
    """Points whose end event says ok in an existing bundle (for resume)."""
    b = read_bundle(out)
    return {e["point"] for e in b.points if e.get("event") == "end" and e.get("status") == "ok"}


# Whether a point met the plan's SLO: (bundle directory, point id, the plan's [slo]) -> bool.
Judge = Callable[[Path, str, dict], bool]


def point_sequence(plan: Plan, search: SloSearch | None):
    """(index, point) in run order: the plan's points, or a search's as it chooses them."""
    if search is None:
        yield from enumerate(plan.points())
        return
    idx = 0
    while (c := search.next()) is not None:
        yield idx, plan.search_point(c)
        idx += 1


def search_length(plan: Plan) -> int:
    """About how many points a search sweep runs: its doublings, then a few bisections."""
    s = plan.sweep
    return max(1, math.ceil(math.log2(s.search_max / s.concurrency[0]))) + 4


async def _run(plan: Plan, writer: BundleWriter, skip: set[str], api_key: str | None,
               judge: Judge | None = None) -> None:
    w = writer
    points = plan.points()
    search = (SloSearch(plan.sweep.concurrency[0], plan.sweep.search_max, plan.sweep.search_tolerance)
              if plan.sweep.search else None)

    def judged(point: dict, met: bool | None = None) -> None:
        # A search sweep's next point depends on whether this one met the SLO.
        if search is not None:
            verdict = judge(w.path, point["id"], plan.slo) if met is None else met
            search.record(point["concurrency"], verdict)
            w.append("points", {"point": point["id"], "event": "search", "t": w.now(),
                                "met_slo": verdict})
    port = plan.engine.port or free_port()
    engine: Engine | None = None
    current_set: int | None = None
    stop = asyncio.Event()
    progress = Progress(search_length(plan) if search else len(points))
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    # Two pools: streams, and the side requests (/metrics, /v1/models) kept off them.
    session = aiohttp.ClientSession(headers=headers)
    streams = open_stream_session(headers, packet_stamps=plan.client.packet_stamps)
    side: list[asyncio.Task] = []
    workers = None   # the client worker processes ([client].workers > 1) or Ray workers
    sampling = False
    model = None

    last_endpoint: list[str] = plan.engine.all_endpoints()

    def endpoint() -> str | list[str]:
        # While a dead server is being replaced, scrapes go to where it was (and are gaps).
        # Several endpoints: the list, so every scrape labels each one's samples.
        where = engine.endpoints if engine else last_endpoint
        return where if len(where) > 1 else where[0]

    async def start_engine(flags: list[str], sset: int) -> Engine:
        eng = make_engine(plan, port, flags)
        w.append("points", {"point": None, "event": "server_start", "t": w.now(),
                            "server_set": sset, "mode": eng.mode, "command": eng.command or None})
        await asyncio.to_thread(eng.start, w.path / server_log_name(), plan.engine.startup_timeout_s)
        nonlocal last_endpoint
        last_endpoint = eng.endpoints
        w.append("points", {"point": None, "event": "server_ready", "t": w.now(), "server_set": sset})
        return eng

    async def stop_engine() -> None:
        nonlocal engine
        if engine is not None and engine.owned:
            status = await asyncio.to_thread(engine.stop)
            w.append("points", {"point": None, "event": "server_stop", "t": w.now(),
                                "exit_status": status})
        engine = None

    def engine_groups() -> int | list[int] | None:
        return (engine.pids if isinstance(engine, EngineGroup) else
                engine.proc.pid if engine is not None and engine.proc is not None else None)

    samplers = round_samplers(plan.sampler, bool(w.manifest.get("gpus")))
    ctx = Context(w, session, endpoint, engine_groups, streams)

    def start_samplers(when: str) -> None:
        side.extend(asyncio.create_task(s.sample(ctx, stop)) for s in samplers if s.starts == when)

    try:
        start_samplers(AT_ROUND)
        if (plan.client.workers > 1 or plan.client.ray) and any(p["id"] not in skip for p in points):
            if plan.client.ray:      # the load from a Ray cluster's nodes
                from bench.ray_cluster import RayPool as Pool
            else:
                from bench.workers import WorkerPool as Pool
            workers = Pool(plan, w, headers, replay.dataset_prompts(plan.workload, dataset_tokenizer(plan))
                           if plan.workload.kind == replay.SHAREGPT else None)
            await workers.start()
        for idx, point in point_sequence(plan, search):
            if point["id"] in skip:
                judged(point)
                continue
            if engine is None or current_set != point["server_set"]:
                await stop_engine()
                engine = await start_engine(point["server_flags"], point["server_set"])
                current_set = point["server_set"]
                if not sampling:
                    # From the first healthy server on; later restarts show up as gaps.
                    sampling = True
                    start_samplers(AT_SERVER)
                # Describe every (re)started server: its flags may differ.
                info = await asyncio.to_thread(engine.describe)
                if info.get("models") is None and headers:
                    # A server started with --api-key refuses /v1/models without the token
                    # (describe() never holds it); ask again with the session's header.
                    info["models"] = await models_with_key(session, engine.endpoint)
                problem = info.pop("models_problem", None)
                if problem and not info.get("models"):
                    raise RoundFailed(f"{problem}: is the endpoint an OpenAI-compatible server? "
                                      "No point was run on it")
                models = info.get("models") or []
                model = models[0]["id"] if models else "default"
                served = {tuple(m.get("id") for m in (e.get("models") or [])) for e in info.get("engines", [])}
                if len(served) > 1:
                    raise RoundFailed(f"the endpoints serve different models ({sorted(served)}); "
                                      "requests go to them in turn, so they must serve one model")
                too_long = context_problem(plan, [p for p in points if p["server_set"] == current_set
                                                  and p["id"] not in skip],
                                           models[0].get("max_model_len") if models else None,
                                           dataset_tokenizer(plan))
                if too_long:
                    raise RoundFailed(too_long)
                eng_info = dict(w.manifest.get("engine") or {})
                eng_info.update(info)
                eng_info.setdefault("server_sets", {})[str(current_set)] = engine.command or None
                w.update(engine=eng_info)
                m = dict(w.manifest.get("model") or {})
                m["served_name"] = model
                w.update(model=m)
            try:
                if workers is not None:
                    await workers.run_point(engine, point, idx, progress, model)
                else:
                    await run_point(streams, engine, plan, point, idx, w, progress, model, headers)
            except ServerDied as e:
                if engine.owned and plan.engine.restart_on_failure:
                    print(f"point {point['id']}: server died ({e}); restarting it", file=sys.stderr)
                    await stop_engine()
                    judged(point, met=False)    # a load the server died under meets no SLO
                    continue
                raise RoundFailed(f"point {point['id']}: the server stopped answering ({e}); "
                                  "earlier points are kept") from None
            collect_between_points()
            judged(point)
            if plan.sweep.cooldown_s > 0:
                await asyncio.sleep(plan.sweep.cooldown_s)
    finally:
        if workers is not None:
            await workers.close()
        stop.set()
        for t in side:
            try:
                await asyncio.wait_for(t, timeout=5)
            except (asyncio.TimeoutError, asyncio.CancelledError, Exception):  # noqa: BLE001
                t.cancel()
        await session.close()
        await streams.close()
        await stop_engine()


def run_round(plan: Plan, out: Path, endpoint_override: str | list[str] | None = None,
              resume: bool = False, api_key: str | None = None, judge: Judge | None = None) -> str:
    """Run PLAN into the bundle OUT; return the final status. JUDGE says whether a point met
    the plan's SLO (a search sweep needs it: the collector does not judge)."""
    if plan.sweep.search and judge is None:
        raise PlanError(f"{plan.source or 'plan'} [sweep].search: a search sweep needs the report's "
                        "SLO judge; run it through `serving-ledger run`")
    if endpoint_override:
        # One URL, or several (--endpoint given more than once: data parallel).
        several = isinstance(endpoint_override, list) and len(endpoint_override) > 1
        plan.engine.mode = "endpoint"
        plan.engine.endpoint = "" if several else (
            endpoint_override[0] if isinstance(endpoint_override, list) else endpoint_override)
        plan.engine.endpoints = list(endpoint_override) if several else []
        problem = flags_problem(plan, f"--endpoint over {plan.source or 'the plan'}:")
        if problem:
            raise PlanError(problem)
    # A plan that names a model config nobody can read records nothing, not even the lock;
    # nor one whose dataset cannot be read (it is read once, here, with the served tokenizer).
    model_config_of(plan)
    if plan.workload.kind == replay.SHAREGPT:
        replay.load_dataset(plan.workload, dataset_tokenizer(plan))
    # One writer per bundle, from before a resume reads what is there until the bundle closes.
    with BundleLock(out) as lock:
        if lock.took_over:
            print(f"{out}: the lock of process {lock.took_over}, which is gone, is taken over",
                  file=sys.stderr)
        return _record(plan, out, endpoint_override, resume, api_key, judge)


def _record(plan: Plan, out: Path, endpoint_override: str | list[str] | None, resume: bool,
            api_key: str | None, judge: Judge | None) -> str:
    """run_round's work, under the bundle's lock."""
    resuming = resume and (out / "manifest.json").exists()
    skip = completed_points(out) if resuming else set()
    if resuming:
        recorded = read_bundle(out).manifest.get("plan") or {}
        now = json.loads(Redactor(secrets_of(plan, api_key)).line(plan.to_dict(), json.dumps))
        problem = resume_problem(recorded, now)
        if problem:
            raise PlanError(problem)
    writer = BundleWriter(out, initial_manifest(plan, endpoint_override), resume=resuming,
                          secrets=secrets_of(plan, api_key))
    if resuming:
        writer.update(status="running", status_reason=None)
    status, reason = "failed", None
    try:
        run_loop(_run(plan, writer, skip, api_key, judge))
        status = "complete"
    except KeyboardInterrupt:
        status, reason = "interrupted", "interrupted by the user (Ctrl-C or SIGTERM)"
        raise
    except RoundFailed as e:
        status, reason = "failed", str(e)
        raise
    except EngineError as e:
        status, reason = "failed", f"engine: {e}".splitlines()[0]
        raise
    except BaseException as e:
        status, reason = "failed", f"{type(e).__name__}: {e}"
        raise
    finally:
        writer.close(status, reason)
    return status
