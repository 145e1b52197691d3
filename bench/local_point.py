"""One point run in the round's own process: its prompts, its schedule, its requests to the bundle.

The loop drives the point (bench/point_driver.py) in this process's stream pool: closed or
open loop, a trace, a dataset or a conversation's turns. Invariants: each finished request is
appended to requests.jsonl as it ends; a transport error asks the server whether it is alive,
off the event loop, and a dead server stops the point issuing (it then ends failed).
"""

from __future__ import annotations

import asyncio

import aiohttp

from bench import replay, sessions
from bench.client import Timeouts
from bench.engine import Engine
from bench.plan.budget import warmup_ends_at_first_reply
from bench.plan.spec import Plan
from bench.point_driver import (
    LocalSlots,
    Phase,
    PointRun,
    completion_urls,
    drive_closed,
    drive_open,
    end_point,
    open_loop_arrivals,
    point_shape,
    route,
    send_request,
    tally,
    transport_error,
    warm_or_measure,
    warm_until,
)
from bench.round_manifest import dataset_tokenizer
from bench.workload import make_prompts, stream_start_offsets
from bundle.store.writer import BundleWriter


async def run_point(session: aiohttp.ClientSession, engine: Engine, plan: Plan, point: dict,
                    index: int, writer: BundleWriter, progress, model: str,
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
