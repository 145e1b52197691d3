"""Several client processes for one point: worker processes send, the coordinator keeps the rest.

`[client].workers = N` (or `--workers N`) with N > 1 makes a round spawn N worker processes
once (multiprocessing, spawn start method), each with its own asyncio loop and its own stream
pool. The coordinator (the round's own process) keeps the engine, the point events, the
samplers and the progress line; per point it hands each worker a share of the load:

- closed loop at concurrency C: worker k runs C // N streams (the first C % N workers one
  more); every stream takes its next request index from one counter in shared memory, so
  indices are unique, the point's total is exact and warm-up requests are indices
  0 .. warmup-1, as in one process;
- open loop: the coordinator draws the seeded schedule once; worker k sends arrivals
  k, k+N, k+2N, ... at their scheduled times, under its share of the concurrency cap;
- a trace (bench/replay.py): the same split of the trace's requests in their order, each at
  its scheduled time with no cap; a ShareGPT dataset: the coordinator's kept prompts (given
  to each worker once, at its start) sent in the point's closed or open loop;
- a point never uses more workers than it has streams (or cap slots).

Invariants:
- worker k appends its finished requests, one flushed JSON line each, to
  `requests.w{k}.jsonl`, with the fields of requests.jsonl and times on the bundle's clock
  (`time.monotonic() - t0`, t0 the coordinator's: CLOCK_MONOTONIC is one clock per host);
  secrets are redacted as BundleWriter redacts them;
- `measure` is the send time of the first non-warm-up request of any worker (one flag in
  shared memory decides which); in duration mode its time + duration_s is every worker's
  deadline;
- a worker's own event-loop lag goes to the coordinator, which appends it to client.jsonl
  with `"worker": k`;
- a worker that sees a transport error tells the coordinator, which asks the engine whether
  it is alive and, if not, stops every worker issuing (the point then ends failed, as in one
  process);
- no worker outlives the round: the coordinator stops them on every exit path (terminate,
  then kill), a worker ignores SIGINT (the coordinator decides) and exits by itself when its
  parent is gone.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing as mp
import os
import queue
import signal
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from bench import replay
from bench.client import Timeouts, open_stream_session
from bench.loop import collect_between_points
from bench.loop import run as run_loop
from bench.plan.budget import warmup_ends_at_first_reply
from bench.plan.spec import Plan
from bench.point_driver import (
    Phase,
    PointRun,
    RoundFailed,
    Slots,
    completion_urls,
    drive_closed,
    drive_open,
    end_point,
    lag_sample,
    open_loop_arrivals,
    point_shape,
    route,
    send_request,
    tally,
    transport_error,
    warm_until,
)
from bench.prompts import PlanError, Prompt
from bench.workload import make_prompts, stream_start_offsets
from bundle.redact import Redactor
from bundle.store.writer import BundleWriter, check_written, reopen_for_append, request_line

RUN, STOP, ABORT = 0, 1, 2     # shared stop flag: go on, stop issuing (server died), cancel now
PROGRESS_EVERY_S = 0.25        # a worker reports its counts at most this often
OPEN_LOOP_LEAD_S = 0.05        # the open-loop schedule starts this long after the point's start
READY_TIMEOUT_S = 120.0        # spawn + imports of one worker, on a loaded host


def shard_name(k: int) -> str:
    """The requests shard of worker K."""
    return f"requests.w{k}.jsonl"


class ShardWriter:
    """Appends one worker's request records to its shard, each line flushed, secrets redacted.

    SECRETS is BundleWriter.secrets (a Redactor), or the secrets themselves. The file is opened on the first record; a resumed bundle's shard that close()
    compressed goes back to plain .jsonl and a truncated last line is cut, as BundleWriter
    does for its own streams.
    """

    def __init__(self, bundle: str | os.PathLike, k: int, t0: float, secrets: Redactor | tuple = ()):
        self.path = Path(bundle) / shard_name(k)
        self.t0 = t0
        self.secrets = secrets if isinstance(secrets, Redactor) else Redactor(secrets)
        self._f = None

    def now(self) -> float:
        """Seconds since the bundle's t0."""
        return time.monotonic() - self.t0

    def _open(self):
        reopen_for_append(self.path)
        return open(self.path, "a", encoding="utf-8")

    def append(self, record: dict[str, Any]) -> None:
        check_written("requests", record)
        if self._f is None:
            self._f = self._open()
        line = self.secrets.line(record, request_line) if self.secrets else request_line(record)
        self._f.write(line + "\n")
        self._f.flush()

    def append_lines(self, text: str) -> None:
        """Whole lines another ShardWriter wrote (checked and redacted there), as they are."""
        if not text:
            return
        if self._f is None:
            self._f = self._open()
        self._f.write(text)
        self._f.flush()

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


# ----------------------------------------------------------------------------- worker side

class Shared:
    """Per-round shared memory: the request counter, the deadline and the flags."""

    def __init__(self, ctx):
        self.lock = ctx.Lock()
        self.counter = ctx.RawValue("q", 0)       # next closed-loop request index
        self.deadline = ctx.RawValue("d", math.inf)  # duration mode: last send time
        self.measured = ctx.RawValue("i", 0)      # 1 once a non-warm-up request was sent
        self.stop = ctx.RawValue("i", RUN)
        self.warm_over = ctx.RawValue("i", 0)     # 1 once a warm-up request ended (when that ends it)

    def reset(self) -> None:
        self.counter.value, self.deadline.value, self.measured.value = 0, math.inf, 0
        self.stop.value, self.warm_over.value = RUN, 0


def worker_main(k: int, plan: Plan, bundle: str, t0: float, secrets: Redactor,
                headers: dict | None, cpus: list[int] | None, commands, results,
                shared: Shared, dataset: list[Prompt] | None = None) -> None:
    """Entry point of worker K (a spawned process); DATASET: a sharegpt workload's prompts."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the coordinator's to handle
    if cpus:
        os.sched_setaffinity(0, set(cpus))
    try:
        run_loop(_worker(k, plan, ShardWriter(bundle, k, t0, secrets), headers, commands, results,
                         shared, dataset))
    except BaseException as e:  # noqa: BLE001 - reported to the coordinator, then exit
        results.put(("error", k, type(e).__name__, f"{e}\n{traceback.format_exc()[-2000:]}"))
        raise SystemExit(1) from None


def _next_command(commands, shared: Shared, ppid: int):
    """The next command, or None when told to exit, aborted, or orphaned."""
    while True:
        try:
            return commands.get(timeout=0.25)
        except queue.Empty:
            if shared.stop.value == ABORT or os.getppid() != ppid:
                return None


async def _worker(k: int, plan: Plan, shard: ShardWriter, headers: dict | None, commands,
                  results, shared: Shared, dataset: list[Prompt] | None,
                  slots_of: Callable[[dict], Slots] | None = None) -> None:
    """Worker K's loop: each command from COMMANDS is one point's share, run through the point
    driver; messages go to RESULTS (anything with `put`). SLOTS_OF gives a share's slots (the
    round's shared memory by default; a Ray actor's own stride of the indices)."""
    ppid = os.getppid()
    # No packet ring per worker: each would capture every worker's segments, and on loopback
    # the kernel copies every segment once per ring on the server's own core.
    session = open_stream_session(headers, packet_stamps=False)
    loop = asyncio.get_running_loop()
    stop_lag = asyncio.Event()
    lag = asyncio.create_task(_lag_monitor(k, shard, results, stop_lag, session))
    results.put(("ready", k, os.getpid()))
    try:
        while True:
            cmd = await loop.run_in_executor(None, _next_command, commands, shared, ppid)
            if cmd is None:
                return
            slots = (slots_of or shared_slots(shared))(cmd)
            share = asyncio.create_task(_run_share(k, cmd, plan, session, shard, results, slots,
                                                   headers, dataset))
            while not share.done():
                await asyncio.wait({share}, timeout=0.05)
                if not share.done() and (shared.stop.value == ABORT or os.getppid() != ppid):
                    share.cancel()   # in-flight requests are not recorded, as in one process
                    try:
                        await share
                    except asyncio.CancelledError:
                        pass
                    return
            try:
                share.result()
            except Exception as e:  # noqa: BLE001 - the coordinator fails the round with it
                results.put(("error", k, type(e).__name__, str(e)))
                continue
            collect_between_points()
            results.put(("done", k, cmd["point"]["id"]))
    finally:
        stop_lag.set()
        lag.cancel()
        await session.close()
        shard.close()


async def _lag_monitor(k: int, shard: ShardWriter, results, stop: asyncio.Event,
                       streams=None, interval_s: float = 0.5) -> None:
    """The worker's own lag, sent to the coordinator (bench/samplers/lag.py's record)."""
    while not stop.is_set():
        start = time.monotonic()
        await asyncio.sleep(interval_s)
        took = time.monotonic() - start
        # Timed on the raw monotonic clock and stamped on the shard's clock at the end: a clock
        # sync during the sleep (a Ray worker's shard put on the driver's clock) moves neither.
        results.put(("lag", k, {**lag_sample(shard.now() - took, took - interval_s, streams),
                                "worker": k}))


class SharedSlots:
    """A point's counter, measured flag, deadline and stop flag in the round's shared memory."""

    def __init__(self, shared: Shared, total: int, by_duration: bool):
        self.shared, self.total, self.by_duration = shared, total, by_duration

    def next_index(self, t_slot: float) -> int | None:
        """The next request's index of any worker, or None when the point is done."""
        sh = self.shared
        if self.by_duration and t_slot >= sh.deadline.value:
            return None
        with sh.lock:
            i = sh.counter.value
            if i >= self.total:
                return None
            sh.counter.value = i + 1
        return i

    def first_measured(self) -> bool:
        """True for the point's first non-warm-up request of any worker, False ever after."""
        sh = self.shared
        if sh.measured.value:
            return False
        with sh.lock:
            if sh.measured.value:
                return False
            sh.measured.value = 1
            return True

    def set_deadline(self, t: float) -> None:
        self.shared.deadline.value = t

    def stopped(self) -> bool:
        return bool(self.shared.stop.value)

    def end_warmup(self) -> None:
        self.shared.warm_over.value = 1

    def warmup_over(self) -> bool:
        return bool(self.shared.warm_over.value)


def share_prompts(plan: Plan, cmd: dict, dataset: list[Prompt] | None) -> list[Prompt]:
    """The prompts a worker's share indexes: the whole trace, the dataset, or drawn ones."""
    wl, point = plan.workload, cmd["point"]
    if wl.kind == replay.TRACE:
        return replay.trace_prompts(wl, cmd["seed"])
    if wl.kind == replay.SHAREGPT:
        if not dataset:
            raise RoundFailed("a sharegpt workload's worker was given no prompts")
        return dataset
    return make_prompts(wl, point["input_len"], point["output_len"], cmd["pool_size"], cmd["seed"])


def shared_slots(shared: Shared) -> Callable[[dict], SharedSlots]:
    """A share's slots in the round's shared memory (the local workers' counter)."""
    return lambda cmd: SharedSlots(shared, cmd["total"], cmd["by_duration"])


async def _run_share(k: int, cmd: dict, plan: Plan, session, shard: ShardWriter, results,
                     slots: Slots, headers: dict | None, dataset: list[Prompt] | None) -> None:
    """Worker K's share of one point, through the same driver as one process."""
    wl, point = plan.workload, cmd["point"]
    urls, model, now = cmd["urls"], cmd["model"], shard.now
    counts = {"done": 0, "tokens": 0, "errors": 0, "issued": 0, "warm_done": 0}
    sent = dict(counts)
    last = [time.monotonic()]

    def report(force: bool = False) -> None:
        if force or time.monotonic() - last[0] >= PROGRESS_EVERY_S:
            last[0] = time.monotonic()
            delta = {key: counts[key] - sent[key] for key in counts}
            sent.update(counts)
            results.put(("progress", k, delta))

    async def record(rec: dict) -> None:
        shard.append(rec)
        if not tally(counts, rec) and transport_error(rec):
            results.put(("transport_error", k, rec["error"]))
        report()

    def issued() -> None:
        counts["issued"] += 1

    def send(p, i, warm, t_slot, t_sched):
        url, extra = route(urls, i, {"shared_blocks": replay.shared_blocks(wl, i)}
                           if wl.kind == replay.TRACE else None)
        if cmd.get("record_worker"):    # across hosts: which worker (so which node) sent it
            extra = {**(extra or {}), "worker": k}
        return send_request(session, url, model, wl, p, point["id"], i, warm, t_slot, t_sched,
                            now, headers, Timeouts.of(plan.client), extra)

    run = PointRun(
        pool=share_prompts(plan, cmd, dataset),
        warmup=cmd["warmup"], ramp_end=cmd.get("ramp_end", 0.0), by_duration=cmd["by_duration"],
        duration_s=plan.sweep.duration_s,
        slots=slots, now=now,
        send=send,
        on_measure=lambda t: results.put(("measure", k, t)), on_record=record, on_issue=issued,
        ends_at_first_reply=cmd.get("warm_ends", False))
    share = cmd["share"]
    for url in urls:               # within the lead the schedule leaves (OPEN_LOOP_LEAD_S)
        await session.prepare(url)
    if "arrivals" in share:
        await drive_open(run, share["arrivals"], share["cap"])
    else:
        await drive_closed(run, share["starts"])
    report(force=True)


# ------------------------------------------------------------------------ coordinator side

def split(n: int, parts: int) -> list[int]:
    """N split into PARTS shares that differ by at most one, larger shares first."""
    return [n // parts + (k < n % parts) for k in range(parts)]


def share_count(plan: Plan, point: dict, workers: int) -> int:
    """How many of WORKERS a point uses: never more than it has streams (or cap slots)."""
    wl = plan.workload
    if wl.kind == replay.TRACE:
        slots = workers          # no cap: one worker per request at most
    elif point.get("request_rate"):
        slots = point.get("concurrency") or workers
    else:
        slots = point_shape(plan, point, 0)[0]
    return max(1, min(workers, slots))


def point_commands(plan: Plan, point: dict, index: int, n: int, endpoints: list[str], model: str,
                   t_start: float, lead: float) -> list[dict]:
    """Each of N workers' share of a point, as the command it is sent: streams starting at
    T_START (closed loop), or arrivals k, k+n, ... of the schedule from T_START + LEAD."""
    wl = plan.workload
    C, warmup, total, by_duration, seed, pool_size = point_shape(plan, point, index)
    trace = wl.kind == replay.TRACE
    if trace:
        total, warmup = replay.trace_counts(wl, plan.sweep.warmup_requests)
        # Every kept request once, at its own time, with no cap (as in one process).
        arrivals = replay.trace_schedule(wl, t_start + lead)
        shares = [{"arrivals": arrivals[k::n], "cap": None} for k in range(n)]
    elif point.get("request_rate"):
        offs = open_loop_arrivals(plan, point, total, warmup, by_duration, seed)
        base = t_start + lead
        caps = split(point["concurrency"], n) if point.get("concurrency") else [None] * n
        shares = [{"arrivals": [(i, base + offs[i]) for i in range(k, len(offs), n)],
                   "cap": caps[k]} for k in range(n)]
    else:
        # Stream g of the point starts at its ramp offset; worker k runs streams k, k+n, ...
        starts = [t_start + off for off in stream_start_offsets(C, point.get("ramp_s") or 0.0, seed)]
        shares = [{"starts": starts[k::n]} for k in range(n)]
    return [{"point": point, "urls": completion_urls(endpoints, wl.api), "model": model,
             "warmup": warmup, "total": total, "by_duration": by_duration, "seed": seed,
             "pool_size": pool_size, "share": shares[k],
             "ramp_end": warm_until(point, t_start, plan.sweep.warmup_s),
             "warm_ends": not trace and warmup_ends_at_first_reply(plan.sweep, point.get("request_rate"))}
            for k in range(n)]


class WorkerPool:
    """The round's worker processes and the coordinator's side of every point."""

    def __init__(self, plan: Plan, writer: BundleWriter, headers: dict | None,
                 dataset: list[Prompt] | None = None):
        self.plan, self.writer, self.headers = plan, writer, headers
        self.dataset = dataset      # a sharegpt workload's prompts, read once by the coordinator
        self.n = plan.client.workers
        self.ctx = mp.get_context("spawn")
        self.shared = Shared(self.ctx)
        self.results = self.ctx.Queue()
        self.commands = [self.ctx.Queue() for _ in range(self.n)]
        self.procs: list = []
        self.inbox: asyncio.Queue | None = None
        self._pump: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Spawn the workers and wait until each has its loop and stream pool."""
        self._loop = asyncio.get_running_loop()
        self.inbox = asyncio.Queue()
        self._pump = threading.Thread(target=self._pump_results, name="worker-results", daemon=True)
        self._pump.start()
        cpus = self.plan.client.cpu_affinity
        w = self.writer
        for k in range(self.n):
            p = self.ctx.Process(
                target=worker_main, name=f"bench-worker-{k}", daemon=True,
                args=(k, self.plan, str(w.path), w.t0, w.secrets, self.headers,
                      [cpus[k % len(cpus)]] if cpus else None, self.commands[k], self.results,
                      self.shared, self.dataset))
            await asyncio.to_thread(p.start)
            self.procs.append(p)
        ready: set[int] = set()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while len(ready) < self.n:
            msg = await self._next(deadline - time.monotonic(), "starting the client workers")
            if msg[0] == "ready":
                ready.add(msg[1])

    def _pump_results(self) -> None:
        """Move worker messages onto the loop: lag samples straight to client.jsonl."""
        while True:
            msg = self.results.get()
            if msg is None:
                return
            try:
                self._loop.call_soon_threadsafe(self._dispatch, msg)
            except RuntimeError:   # the loop is closed: the round is over
                return

    def _dispatch(self, msg: tuple) -> None:
        if msg[0] == "lag":
            self.writer.append("client", msg[2])
        else:
            self.inbox.put_nowait(msg)

    async def _next(self, timeout: float, what: str) -> tuple:
        """The next worker message; RoundFailed if a worker died or reported an error."""
        end = time.monotonic() + timeout
        while True:
            try:
                msg = await asyncio.wait_for(self.inbox.get(), timeout=min(1.0, max(0.0, end - time.monotonic())))
            except asyncio.TimeoutError:
                self._check_procs(what)
                if time.monotonic() >= end:
                    raise RoundFailed(f"client workers: no answer within {timeout:.0f} s while {what}") from None
                continue
            if msg[0] == "error":
                _, k, etype, text = msg
                if etype == "PlanError":
                    raise PlanError(text)
                raise RoundFailed(f"client worker {k} failed while {what}: {etype}: {text}")
            return msg

    def _check_procs(self, what: str) -> None:
        for k, p in enumerate(self.procs):
            if p.exitcode is not None:
                raise RoundFailed(f"client worker {k} exited (code {p.exitcode}) while {what}")

    async def close(self) -> None:
        """Stop every worker: ask, wait a little, terminate, kill. Never leaves one behind."""
        self.shared.stop.value = ABORT
        for q in self.commands:
            try:
                q.put(None)
            except (ValueError, OSError):
                pass
        await asyncio.to_thread(self._reap)
        self.results.put(None)
        if self._pump is not None:
            await asyncio.to_thread(self._pump.join, 5)

    def _reap(self) -> None:
        deadline = time.monotonic() + 5.0
        for p in self.procs:
            p.join(max(0.0, deadline - time.monotonic()))
        for p in self.procs:
            if p.exitcode is None:
                p.terminate()
                p.join(2.0)
            if p.exitcode is None:
                p.kill()
                p.join(2.0)

    # -- one point -------------------------------------------------------------------------

    async def run_point(self, engine, point: dict, index: int, progress, model: str) -> str:
        """Run one point over the workers; return "ok" or raise ServerDied (as run_point)."""
        w = self.writer
        n = share_count(self.plan, point, self.n)
        self.shared.reset()
        seed = point_shape(self.plan, point, index)[4]
        w.append("points", {"point": point["id"], "event": "start", "t": w.now(), "settings": point,
                            "seed": seed, "workers": n})
        t_start = w.now()
        cmds = point_commands(self.plan, point, index, n, engine.endpoints, model, t_start,
                              OPEN_LOOP_LEAD_S)
        total, by_duration = cmds[0]["total"], cmds[0]["by_duration"]
        for k in range(n):
            self.commands[k].put(cmds[k])
        state = {"done": 0, "tokens": 0, "errors": 0, "issued": 0, "warm_done": 0, "died": None,
                 "transport_error": None}
        phase = Phase(0, cmds[0]["warmup"], window_s=self.plan.sweep.duration_s if by_duration else None)
        check: asyncio.Task | None = None

        async def check_server(err: str) -> None:
            # Off the loop, as in one process; the workers keep their own clocks meanwhile.
            if not await asyncio.to_thread(engine.alive):
                state["died"] = err
                self.shared.stop.value = max(self.shared.stop.value, STOP)

        pending = set(range(n))
        try:
            while pending:
                msg = await self._next(math.inf, f"running point {point['id']}")
                kind, k = msg[0], msg[1]
                if kind == "progress":
                    for key, v in msg[2].items():
                        state[key] += v
                    phase.warm_done = state["warm_done"]
                    progress.update(index, point["id"], state["done"],
                                    total if not by_duration else state["issued"],
                                    state["tokens"], state["errors"], w.now() - t_start, phase=phase)
                elif kind == "measure":
                    phase.measured_at = msg[2] - t_start
                    w.append("points", {"point": point["id"], "event": "measure", "t": msg[2]})
                elif kind == "transport_error":
                    state["transport_error"] = msg[2]
                    if not state["died"] and (check is None or check.done()):
                        check = asyncio.create_task(check_server(msg[2]))
                elif kind == "done":
                    pending.discard(k)
            if check is not None:
                await check
        finally:
            if check is not None and not check.done():
                check.cancel()
        return await end_point(w, point, state, engine, progress, index, t_start)
