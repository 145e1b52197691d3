"""A round: start the engine, run every point of the plan, sample everything, write the bundle.

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
import re
import shlex
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any, Callable

import aiohttp

from bench import replay, sessions
from bench.client import Timeouts, open_stream_session
from bench.engine import TINY_MODEL_DIR, Engine, EngineError, EngineGroup, free_port
from bench.loop import collect_between_points
from bench.loop import run as run_loop
from bench.plan.budget import warmup_ends_at_first_reply
from bench.plan.checks import context_problem, flags_problem
from bench.plan.resume import resume_problem
from bench.plan.spec import Plan
from bench.point_driver import (
    LocalSlots,
    Phase,
    PointRun,
    RoundFailed,
    ServerDied,
    completion_urls,
    drive_closed,
    drive_open,
    end_point,
    open_loop_arrivals,
    point_shape,
    progress_line,
    route,
    send_request,
    tally,
    transport_error,
    warm_or_measure,
    warm_until,
)
from bench.prompts import PlanError
from bench.provenance import (
    collect_host_metadata,
    collect_model_config,
    collect_tokenizer_vocab,
    collect_tool_metadata,
    model_dirs_of_command,
)
from bench.samplers import AT_ROUND, AT_SERVER, Context, round_samplers
from bench.search import SloSearch
from bench.workload import make_prompts, stream_start_offsets
from bundle.files import server_log_name
from bundle.lock import BundleLock
from bundle.redact import Redactor, url_credentials
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


async def run_point(session: aiohttp.ClientSession, engine: Engine, plan: Plan, point: dict,
                    index: int, writer: BundleWriter, progress: Progress, model: str,
                    headers: dict | None) -> str:
    """Run one point in this process; return "ok" or raise ServerDied."""
    w, wl, sw = writer, plan.workload, plan.sweep
    C, warmup, total, by_duration, seed, pool_size = point_shape(plan, point, index)
    urls = completion_urls(engine.endpoints, wl.api)
    # The client's own lazy set-up (address, packet ring) before the point's clock starts:
    # an open loop's first sends would otherwise wait for it.
    for url in urls:
        await session.prepare(url)
    w.append("points", {"point": point["id"], "event": "start", "t": w.now(), "settings": point,
                        "seed": seed})
    state = {"issued": 0, "done": 0, "tokens": 0, "errors": 0, "warm_done": 0, "died": None,
             "transport_error": None}
    t_start = w.now()
    slots = LocalSlots(total=total, by_duration=by_duration)
    phase = Phase(0, warmup, window_s=sw.duration_s if by_duration else None)

    def measure(t: float) -> None:
        phase.measured_at = t - t_start
        w.append("points", {"point": point["id"], "event": "measure", "t": t})

    async def record(rec: dict) -> None:
        w.append("requests", rec)
        if not tally(state, rec) and transport_error(rec):
            # The connection failed (refused, reset, cut mid-stream): ask whether the
            # server still answers, off the event loop so other streams keep their clock.
            state["transport_error"] = rec["error"]
            if not state["died"] and not await asyncio.to_thread(engine.alive):
                state["died"] = rec["error"]
                slots.stop = True
        phase.warm_done = state["warm_done"]
        progress.update(index, point["id"], state["done"], total if not by_duration else state["issued"],
                        state["tokens"], state["errors"], w.now() - t_start, phase=phase)

    def issued() -> None:
        state["issued"] += 1

    def send(p, i, warm, t_slot, t_sched):
        url, extra = route(urls, i, {"shared_blocks": replay.shared_blocks(wl, i)}
                           if wl.kind == replay.TRACE else None)
        return send_request(session, url, model, wl, p, point["id"], i, warm, t_slot, t_sched,
                            w.now, headers, Timeouts.of(plan.client), extra)

    def send_turn(p, i, warm, t_slot, s, k, think, reply):
        # A conversation's turns go to one endpoint (its prefix cache holds the history).
        url, extra = route(urls, s, {"session": s, "turn": k, "think_s": think})
        return send_request(session, url, model, wl, p, point["id"], i, warm, t_slot, None,
                            w.now, headers, Timeouts.of(plan.client), extra, reply)

    if wl.kind == replay.TRACE:
        # Every kept request of the trace, once each, in its order; warm-up only if asked.
        pool = replay.trace_prompts(wl, seed)
        total, warmup = replay.trace_counts(wl, sw.warmup_requests)
        slots.total = total
        phase.warm_total = warmup
    elif wl.kind == replay.SHAREGPT:
        pool = replay.dataset_prompts(wl, dataset_tokenizer(plan))
    else:
        pool = [] if wl.kind == sessions.KIND else make_prompts(
            wl, point["input_len"], point["output_len"], pool_size, seed)
    run = PointRun(
        pool=pool,
        warmup=warmup, ramp_end=warm_until(point, t_start, sw.warmup_s), by_duration=by_duration,
        duration_s=sw.duration_s, slots=slots, now=w.now,
        send=send,
        on_measure=measure,
        on_record=record, on_issue=issued,
        ends_at_first_reply=wl.kind not in (replay.TRACE, sessions.KIND)
        and warmup_ends_at_first_reply(sw, point.get("request_rate")))
    if wl.kind == sessions.KIND:
        await sessions.drive_sessions(
            run, sessions.SessionDraws(wl, point["input_len"], point["output_len"], seed),
            [t_start + off for off in stream_start_offsets(C, point.get("ramp_s") or 0.0, seed)],
            send_turn,
            warm_or_measure, vocab=served_vocab(w.manifest))
    elif wl.kind == replay.TRACE:
        # An open loop with no cap: each request goes at its own time whatever is in flight.
        await drive_open(run, replay.trace_schedule(wl, w.now()), None)
    elif point.get("request_rate"):
        offs = open_loop_arrivals(plan, point, total, warmup, by_duration, seed)
        base = w.now()
        await drive_open(run, [(i, base + off) for i, off in enumerate(offs)], point["concurrency"])
    else:
        offsets = stream_start_offsets(C, point.get("ramp_s") or 0.0, seed)
        await drive_closed(run, [t_start + off for off in offsets])
    return await end_point(w, point, state, engine, progress, index, t_start)


def served_vocab(manifest: dict) -> int | None:
    """How many token ids the served model can emit: the larger of its tokenizer's and its
    config's vocabulary (random weights emit ids past the tokenizer's), None when neither is known."""
    model = manifest.get("model") or {}
    sizes = [n for n in (model.get("tokenizer_vocab_size"), (model.get("config") or {}).get("vocab_size"))
             if isinstance(n, int) and not isinstance(n, bool) and n > 0]
    return max(sizes, default=None)


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


def served_model_paths(plan: Plan) -> tuple[str | None, str | None, str | None]:
    """(config path, tokenizer path, where the config path came from) of the served model:
    the plan's model_config, else the embedded model, else the launch command's model."""
    e = plan.engine
    if e.mode == "embedded":
        return e.model_config or str(TINY_MODEL_DIR), str(TINY_MODEL_DIR), \
            "[engine].model_config" if e.model_config else "the embedded model"
    model = tokenizer = None
    if e.mode == "launch":
        # Several servers (data parallel) serve one model: the first command line names it.
        first = e.all_commands()[0] if e.all_commands() else ""
        try:
            argv = shlex.split(first) if isinstance(first, str) else list(first)
        except ValueError:
            argv = []
        model, tokenizer = model_dirs_of_command(argv + list(e.flags))
    if e.model_config:
        return e.model_config, tokenizer, "[engine].model_config"
    if model and (Path(model) / "config.json").is_file():
        return str(Path(model) / "config.json"), tokenizer, "the launch command's model directory"
    return None, tokenizer, None


def dataset_tokenizer(plan: Plan) -> str | None:
    """The folder of the served model's tokenizer.json: the served model's, else the plan's
    [engine].model_config's folder, or that folder itself when it names one (an endpoint's
    model is known only from that)."""
    tok = served_model_paths(plan)[1]
    if tok is None and plan.engine.model_config:
        cfg = Path(plan.engine.model_config)     # config.json, or the model's folder itself
        tok = str(cfg if cfg.is_dir() else cfg.parent)
    return tok


def model_config_of(plan: Plan) -> tuple[dict | None, str | None]:
    """The served model's config.json and its path; PlanError where the plan names one that cannot be read."""
    config, src = collect_model_config(served_model_paths(plan)[0])
    if plan.engine.model_config and config is None:
        raise PlanError(f"{plan.source or 'plan'} [engine].model_config: cannot read a JSON "
                        f"config.json at {plan.engine.model_config}")
    return config, src


def initial_manifest(plan: Plan, endpoint_override: str | list[str] | None) -> dict[str, Any]:
    """Provenance known before the engine starts."""
    from bench.samplers.gpu import describe_gpus
    gpus, absent = describe_gpus()
    cfg_path, tok_path, cfg_how = served_model_paths(plan)
    config, cfg_src = model_config_of(plan)
    vocab, vocab_src = collect_tokenizer_vocab(tok_path)
    model_vocab = (config or {}).get("vocab_size")
    if vocab and isinstance(model_vocab, int) and vocab < model_vocab:
        print(f"warning: the served tokenizer ({vocab_src}) knows {vocab:,} ids but the model "
              f"emits ids up to {model_vocab:,}: with random weights the server's detokenizer "
              "can become the bottleneck", file=sys.stderr)
    return {
        "tool": collect_tool_metadata(), "host": collect_host_metadata(),
        "gpus": gpus, "gpu_absent_reason": absent,
        "engine": {"mode": plan.engine.mode, "endpoint_override": endpoint_override},
        "model": {"config": config, "config_source": cfg_src,
                  "config_found_by": cfg_how if config is not None else None,
                  "tokenizer_vocab_size": vocab, "tokenizer_source": vocab_src,
                  "name": "tiny-qwen2" if plan.engine.mode == "embedded" else None,
                  "load_format": "dummy" if plan.engine.mode == "embedded" else None},
        "plan": plan.to_dict(),
        "workload_source": replay.source_facts(plan.workload, dataset_tokenizer(plan))
        if plan.workload.kind in replay.KINDS else None,
    }


# Server flags whose value is a credential; environment names that hold one.
SECRET_FLAGS = ("--api-key", "--hf-token", "--ssl-keyfile-password")
SECRET_ENV = re.compile(r"(?:^|_)(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD)(?:$|_)", re.I)


def secrets_of(plan: Plan, api_key: str | None) -> list[str]:
    """Every credential the round knows of, to be kept out of the bundle."""
    out = [api_key] if api_key else []
    e = plan.engine
    argv: list[str] = []
    for cmd in e.all_commands():      # every server's command line
        try:
            argv += shlex.split(cmd) if isinstance(cmd, str) else list(cmd or [])
        except ValueError:
            pass
    argv += [str(f) for f in e.flags] + [str(f) for fl in plan.sweep.server_flags for f in fl]
    for i, a in enumerate(argv):
        if a in SECRET_FLAGS and i + 1 < len(argv):
            out.append(argv[i + 1])
        elif a.startswith(tuple(f + "=" for f in SECRET_FLAGS)):
            out.append(a.split("=", 1)[1])
    out += [str(v) for k, v in (e.env or {}).items() if SECRET_ENV.search(k)]
    # A URL's user and password (an exporter behind basic auth: aiohttp sends them); endpoints
    # carrying them are refused by the plan check (bench/urls.py).
    creds = [c for url in [plan.sampler.gpu_metrics, *e.all_endpoints()] if url
             and (c := url_credentials(url))]
    out += creds + [urllib.parse.unquote(c) for c in creds]   # as written, and as decoded
    return out


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
