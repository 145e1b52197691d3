"""A client worker's side: its loop of commands, each one point's share run through the point driver.

A local worker is a spawned process (`worker_main`) taking its commands from a queue of the
coordinator (bench/workers.py); a Ray worker runs the same `command_loop` in a thread of its
actor (bench/ray_shard.py). Per share:

- closed loop: its streams start at their scheduled times and take request indices from the
  share's slots (`SharedSlots`: one counter in the round's shared memory, so indices are
  unique, the point's total is exact and warm-up requests are indices 0 .. warmup-1);
- open loop or a trace: its arrivals, each at its scheduled time, under its share of the cap;
- a ShareGPT dataset: the coordinator's kept prompts, given to each worker once, at its start.

Invariants:
- the worker appends its finished requests to its shard (bench/shard_writer.py);
- `measure` is the send time of the first non-warm-up request of any worker (one flag in
  shared memory decides which); in duration mode its time + duration_s is every worker's
  deadline;
- its own event-loop lag goes to the coordinator (`lag_monitor`), which appends it to
  client.jsonl with `"worker": k`;
- a transport error is told to the coordinator, which decides whether the server is gone;
- a worker ignores SIGINT (the coordinator decides) and exits by itself when its parent is
  gone or the round is aborted.
"""

from __future__ import annotations

import asyncio
import math
import os
import queue
import signal
import time
import traceback
from typing import Callable

from bench import replay
from bench.client import Timeouts, open_stream_session
from bench.loop import collect_between_points
from bench.loop import run as run_loop
from bench.plan.spec import Plan
from bench.point_driver import (
    PointRun,
    RoundFailed,
    Slots,
    drive_closed,
    drive_open,
    lag_sample,
    route,
    send_request,
    tally,
    transport_error,
)
from bench.prompts import Prompt
from bench.shard_writer import ShardWriter
from bench.workload import make_prompts
from bundle.redact import Redactor

RUN, STOP, ABORT = 0, 1, 2     # shared stop flag: go on, stop issuing (server died), cancel now
PROGRESS_EVERY_S = 0.25        # a worker reports its counts at most this often
READY_TIMEOUT_S = 120.0        # spawn + imports of one worker, on a loaded host


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
        run_loop(command_loop(k, plan, ShardWriter(bundle, k, t0, secrets), headers, commands,
                              results, shared, dataset))
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


async def command_loop(k: int, plan: Plan, shard: ShardWriter, headers: dict | None, commands,
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
    lag = asyncio.create_task(lag_monitor(k, shard, results, stop_lag, session))
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


async def lag_monitor(k: int, shard: ShardWriter, results, stop: asyncio.Event,
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
    for url in urls:               # within the lead the schedule leaves (workers.OPEN_LOOP_LEAD_S)
        await session.prepare(url)
    if "arrivals" in share:
        await drive_open(run, share["arrivals"], share["cap"])
    else:
        await drive_closed(run, share["starts"])
    report(force=True)
