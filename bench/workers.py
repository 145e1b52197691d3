"""Several client processes for one point: the coordinator's side, which hands out the shares.

`[client].workers = N` (or `--workers N`) with N > 1 makes a round spawn N worker processes
once (multiprocessing, spawn start method; bench/worker_loop.py), each with its own asyncio
loop and its own stream pool. The coordinator (the round's own process) keeps the engine, the
point events, the samplers and the progress line; per point it hands each worker a share of
the load (`point_commands`):

- closed loop at concurrency C: worker k runs C // N streams (the first C % N workers one
  more), every stream taking its next request index from the round's one counter;
- open loop: the coordinator draws the seeded schedule once; worker k sends arrivals
  k, k+N, k+2N, ... at their scheduled times, under its share of the concurrency cap;
- a trace (bench/replay.py): the same split of the trace's requests in their order, each at
  its scheduled time with no cap;
- a point never uses more workers than it has streams (or cap slots).

Invariants:
- worker k writes its own shard, `requests.w{k}.jsonl` (bench/shard_writer.py);
- the coordinator appends the workers' lag samples to client.jsonl and writes the point's
  `measure` event from the first worker that says it measured;
- a worker that sees a transport error tells the coordinator, which asks the engine whether
  it is alive and, if not, stops every worker issuing (the point then ends failed, as in one
  process);
- no worker outlives the round: the coordinator stops them on every exit path (terminate,
  then kill).
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing as mp
import threading
import time

from bench import replay
from bench.plan.budget import warmup_ends_at_first_reply
from bench.plan.spec import Plan
from bench.point_driver import (
    Phase,
    RoundFailed,
    completion_urls,
    end_point,
    open_loop_arrivals,
    point_shape,
    warm_until,
)
from bench.prompts import PlanError, Prompt
from bench.worker_loop import ABORT, READY_TIMEOUT_S, STOP, Shared, worker_main
from bench.workload import stream_start_offsets
from bundle.store.writer import BundleWriter

OPEN_LOOP_LEAD_S = 0.05        # the open-loop schedule starts this long after the point's start


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
