"""One point's request loop, written once for the single client process and each worker.

The caller passes where the point's shared state lives — a `Slots`: the request counter,
the measured flag, the deadline and the stop flag; plain attributes in one process, shared
memory across worker processes — and what becomes of each finished request. Invariants:
request indices are unique and, counted, end at the point's total; indices below `warmup`
and every request sent before the ramp (or a closed loop's `warmup_s`) ends are warm-up, save
that an open loop sized by the point (warmup_ends_at_first_reply) ends its warm-up, in every
process, once one warm-up request has ended; the first other request marks the
window's start (exactly once per point, whichever process sends it) and, for a point bound
by duration, sets its deadline, checked against the time a slot came free.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol

if TYPE_CHECKING:
    from bench.engine import Engine
    from bundle.store.writer import BundleWriter

from bench.client import Timeouts, completion_payload, stream_request
from bench.loop import sleep_until
from bench.plan.budget import prompt_pool_size, warmup_count
from bench.plan.spec import Plan
from bench.workload import arrival_offsets, point_seed


class Slots(Protocol):
    """Where a point's counter, measured flag, deadline and stop flag live."""

    def next_index(self, t_slot: float) -> int | None: ...
    def first_measured(self) -> bool: ...
    def set_deadline(self, t: float) -> None: ...
    def stopped(self) -> bool: ...
    def end_warmup(self) -> None: ...
    def warmup_over(self) -> bool: ...


@dataclass
class LocalSlots:
    """A point's state in one process."""

    total: int
    by_duration: bool
    issued: int = 0
    measured: bool = False
    deadline: float = math.inf
    stop: bool = False
    warm_over: bool = False

    def next_index(self, t_slot: float) -> int | None:
        """The next request's index, or None when the point is done (count or deadline)."""
        if self.by_duration and t_slot >= self.deadline:
            return None
        if self.issued >= self.total:
            return None
        self.issued += 1
        return self.issued - 1

    def first_measured(self) -> bool:
        """True for the first non-warm-up request of the point, False ever after."""
        if self.measured:
            return False
        self.measured = True
        return True

    def set_deadline(self, t: float) -> None:
        self.deadline = t

    def stopped(self) -> bool:
        return self.stop

    def end_warmup(self) -> None:
        self.warm_over = True

    def warmup_over(self) -> bool:
        return self.warm_over


def is_warmup(i: int, warmup: int, t_slot: float, ramp_end: float) -> bool:
    """Whether request I is warm-up: among the first WARMUP, or sent before the ramp ended."""
    return i < warmup or t_slot < ramp_end


@dataclass
class PointRun:
    """What one process needs to send a point's requests."""

    pool: list                      # prompts; request i uses pool[i % len(pool)]
    warmup: int
    ramp_end: float
    by_duration: bool
    duration_s: float
    slots: Slots
    now: Callable[[], float]
    # send(prompt, i, is_warm, t_slot, t_sched) -> the request's record
    send: Callable[[Any, int, bool, float, float | None], Awaitable[dict]]
    on_measure: Callable[[float], None]          # the window's start, once per point
    on_record: Callable[[dict], Awaitable[None]]  # every finished request, warm-up included
    on_issue: Callable[[], None] = lambda: None   # each request issued (for progress)
    # The warm-up also ends once one warm-up request has ended (its lifetime), in any process.
    ends_at_first_reply: bool = False


def warm_until(point: dict, t_start: float, warmup_s: float) -> float:
    """Until when a point's sends are warm-up whatever their index: a closed loop's ramp, or
    its plan's warmup_s where longer; an open loop counts its warm-up (warmup_count)."""
    if point.get("request_rate"):
        return t_start
    return t_start + max(point.get("ramp_s") or 0.0, warmup_s)


def warm_or_measure(run: PointRun, i: int, t_slot: float) -> bool:
    """Whether request I is warm-up; the first other one marks the window's start."""
    is_warm = is_warmup(i, run.warmup, t_slot, run.ramp_end) and not (
        run.ends_at_first_reply and run.slots.warmup_over())
    if not is_warm and run.slots.first_measured():
        t = run.now()
        run.on_measure(t)
        if run.by_duration:
            run.slots.set_deadline(t + run.duration_s)
    return is_warm


async def send_one(run: PointRun, i: int, t_slot: float, t_sched: float | None) -> None:
    """Send request I and hand its record over."""
    is_warm = warm_or_measure(run, i, t_slot)
    rec = await run.send(run.pool[i % len(run.pool)], i, is_warm, t_slot, t_sched)
    if is_warm and run.ends_at_first_reply:
        run.slots.end_warmup()
    await run.on_record(rec)


async def drive_closed(run: PointRun, starts: list[float]) -> None:
    """A closed loop: one stream per start time, each sending its next request when the last ends."""
    async def stream(start: float) -> None:
        await sleep_until(start, run.now)
        while not run.slots.stopped():
            t_slot = run.now()
            i = run.slots.next_index(t_slot)
            if i is None:
                return
            run.on_issue()
            await send_one(run, i, t_slot, None)

    await asyncio.gather(*(stream(t) for t in starts))


async def drive_open(run: PointRun, arrivals: list[tuple[int, float]], cap: int | None) -> None:
    """An open loop: request i at its scheduled time; with a cap, a late one waits for a slot
    (that wait is recorded apart: t_sched against t_send)."""
    gate = asyncio.Semaphore(cap or 10**9)
    tasks = []

    async def gated(i: int, t_sched: float) -> None:
        async with gate:
            await send_one(run, i, t_sched, t_sched)

    for i, t_sched in arrivals:
        if run.slots.stopped():
            break
        # A warm-up ended early leaves arrivals past the window's deadline: they are not sent.
        if run.ends_at_first_reply and run.by_duration and run.slots.warmup_over() \
                and run.slots.next_index(t_sched) is None:
            break
        await sleep_until(t_sched, run.now)
        run.on_issue()
        tasks.append(asyncio.create_task(gated(i, t_sched)))
    await asyncio.gather(*tasks)


class RoundFailed(Exception):
    """The round could not continue; earlier points are kept in the bundle."""


class ServerDied(Exception):
    """The server stopped answering during a point."""


@dataclass
class Phase:
    """Where a point is, for its progress line: its warm-up requests ended of those planned,
    when its window started (seconds into the point; None: still warming up) and, for a point
    bound by duration, the window's length."""

    warm_done: int
    warm_total: int
    measured_at: float | None = None
    window_s: float | None = None


def _eta(elapsed: float, done: int, left: int) -> float:
    return elapsed / done * left if done else float("nan")


def progress_line(head: str, done: int, total: int, tokens: int, errors: int, elapsed: float,
                  phase: Phase | None = None) -> str:
    """A point's progress line: requests ended of TOTAL and the ETA; with a PHASE, the warm-up
    and the window apart, each with its own ETA (a window bound by duration: the time it has left)."""
    rate = tokens / elapsed if elapsed > 0 else 0.0
    tail = f"{rate:,.0f} output tok/s, {errors} errors"
    if phase is None:
        return f"{head}: {done}/{total} requests, {tail}, ETA {_eta(elapsed, done, total - done):,.0f} s"
    wd, wt = phase.warm_done, phase.warm_total
    if phase.measured_at is None and not wt:
        return f"{head}: window starting, {tail}"
    if phase.measured_at is None:
        return (f"{head}: warm-up {wd}/{wt} requests, warm-up ETA {_eta(elapsed, wd, wt - wd):,.0f} s, "
                f"{tail}")
    in_window, since = elapsed - phase.measured_at, max(done - wd, 0)
    if phase.window_s is not None:
        counted, eta = f"{since} requests", max(phase.window_s - in_window, 0.0)
    else:
        left = max(total - wt - since, 0)
        counted, eta = f"{since}/{max(total - wt, 0)} requests", _eta(in_window, since, left)
    return (f"{head}: warm-up {wd}/{wt} ended; window {counted}, {tail}, window ETA {eta:,.0f} s")


def lag_sample(t: float, loop_lag_s: float, streams=None) -> dict[str, Any]:
    """One client.jsonl record."""
    rec: dict[str, Any] = {"t": t, "loop_lag_s": loop_lag_s, "tasks": len(asyncio.all_tasks())}
    if streams is not None:
        rec.update(streams.stats.take())
    return rec


def point_shape(plan: Plan, point: dict, index: int) -> tuple[int, int, int, bool, int, int]:
    """(concurrency, warm-up requests, total requests, by duration, seed, prompt-pool size)."""
    sw = plan.sweep
    C = point.get("concurrency") or 1
    rate = point.get("request_rate")
    # An open loop's concurrency is its cap (none: no cap); a closed loop's, its streams.
    slots = point.get("concurrency") if rate else C
    warmup = warmup_count(sw, slots, rate)
    by_duration = sw.duration_s > 0
    total = warmup + (sw.requests_per_point if not by_duration else 10**9)
    pool_size = min(total, prompt_pool_size(sw, slots, rate))
    return C, warmup, total, by_duration, point_seed(plan.seed, index), pool_size


def open_loop_arrivals(plan: Plan, point: dict, total: int, warmup: int, by_duration: bool,
                       seed: int) -> list[float]:
    """The seeded open-loop schedule of a point: send offsets (s) from its base time."""
    sw = plan.sweep
    n = total if not by_duration else int(point["request_rate"] * sw.duration_s) + warmup
    return arrival_offsets(n, point["request_rate"],
                           sw.burstiness if sw.arrival == "gamma" else 1.0, seed)


async def send_request(session, url: str, model: str, wl, p, point_id: str, i: int, is_warm: bool,
                       t_slot: float, t_sched: float | None, now, headers: dict | None,
                       timeouts: Timeouts | None = None, turn: dict | None = None,
                       reply: list[int] | None = None) -> dict:
    """Stream request I of a point (prompt P) and return its record; TURN (a session's
    `session`, `turn`, `think_s`) goes into the record, REPLY receives the reply's token ids."""
    body = completion_payload(model, p.prompt, p.max_tokens, api=wl.api,
                              ignore_eos=wl.ignore_eos, chunk_token_counts=wl.chunk_token_counts)
    rec: dict[str, Any] = {"point": point_id, "i": i, "warmup": is_warm, "t_slot": t_slot,
                           "t_sched": t_sched, "input_len": p.input_len,
                           "max_tokens": p.max_tokens, "group": p.group, **(turn or {})}
    return await stream_request(session, url, body, rec, now, api=wl.api,
                                chunk_token_counts=wl.chunk_token_counts, headers=headers,
                                timeouts=timeouts, reply=reply)


def completion_urls(endpoints: list[str], api: str) -> list[str]:
    """The completions URL of each endpoint, in plan order."""
    path = "/v1/chat/completions" if api == "chat" else "/v1/completions"
    return [e + path for e in endpoints]


def route(urls: list[str], n: int, extra: dict | None = None) -> tuple[str, dict | None]:
    """The URL request (or conversation) N goes to, in turn over URLS, and EXTRA with the
    endpoint's index added when there are several (a round against one records none)."""
    if len(urls) == 1:
        return urls[0], extra
    k = n % len(urls)
    return urls[k], {**(extra or {}), "endpoint": k}


def tally(counts: dict, rec: dict) -> bool:
    """Count a finished request into COUNTS (done, tokens, errors); True if it succeeded."""
    counts["done"] += 1
    counts["warm_done"] = counts.get("warm_done", 0) + bool(rec.get("warmup"))
    if rec["status"] == "ok":
        counts["tokens"] += sum(n or 0 for _, n in rec["chunks"])
        return True
    counts["errors"] += 1
    return False


async def end_point(w: BundleWriter, point: dict, state: dict, engine: Engine, progress: Any,
                    index: int, t_start: float) -> str:
    """Write the point's end event: failed (and raise ServerDied) when the server is gone."""
    progress.update(index, point["id"], state["done"], state["done"], state["tokens"],
                    state["errors"], w.now() - t_start, final=True)
    if not state["died"] and state["transport_error"] and not await asyncio.to_thread(engine.alive):
        # The last requests were cut and none came after them to find the server gone.
        state["died"] = state["transport_error"]
    if state["died"]:
        w.append("points", {"point": point["id"], "event": "end", "t": w.now(), "status": "failed",
                            "reason": f"server stopped answering: {state['died']}"})
        raise ServerDied(state["died"])
    w.append("points", {"point": point["id"], "event": "end", "t": w.now(), "status": "ok",
                        "reason": None})
    return "ok"


def transport_error(rec: dict) -> bool:
    """Whether a failed request failed at the connection (no HTTP answer, or a 200 stream cut)."""
    if rec["http_status"] is None:
        return not (rec["error"] or "").startswith("cancelled")
    return rec["http_status"] == 200 and (rec["error"] or "").startswith(
        ("ClientPayloadError", "ServerDisconnectedError", "ClientOSError",
         "ClientConnectionError", "ClientConnectorError", "stream ended without [DONE]"))
