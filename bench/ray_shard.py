"""One load worker on a Ray node: the local workers' loop (bench/worker_loop.py) in a thread of an
actor, its share of each point on the driver's clock, its shard handed back per point.

`bench/ray_cluster.py` makes `ShardActor` a Ray actor (nothing here imports Ray but `node`).
The actor runs `worker_loop.command_loop` (the same request loop a local worker process runs) on its
own event loop, in a thread, and is driven through its methods, each called by the driver:

- `sync_clock` before every point: measures the offset to the driver's clock server
  (bench/clock_sync.py) and moves the shard's t0 with it, so every timestamp the worker
  writes from then on is on the driver's clock; returns the measurement for the bundle;
- `run_point(cmd)`: one point's share (`workers.point_commands`), whose stream starts or
  arrivals are driver times, so every node starts at one shared time whenever its order
  came; returns what it was asked to send (`planned`), what it sent and finished, its
  requests as shard lines and its loop-lag samples;
- `poll` (progress, a transport error) and `stop` (stop issuing) while a point runs.

Invariants: worker k of a point's n sends request indices k, k+n, k+2n, ... (`StrideSlots`:
no counter is shared across hosts), so every index is sent once over the cluster; a shard's
lines are written to a file on the node as they finish (redacted there) and handed back once
the point is done; a lag sample taken before the first clock measurement is dropped (it
would be on the node's own clock).
"""

from __future__ import annotations

import os
import queue
import resource
import shutil
import socket
import tempfile
import threading
import time
from types import SimpleNamespace
from typing import Any

from bench.clock_sync import measure_offset
from bench.loop import run as run_loop
from bench.point_driver import LocalSlots
from bench.shard_writer import ShardWriter
from bench.worker_loop import ABORT, READY_TIMEOUT_S, RUN, STOP, command_loop

POINT_COUNTS = ("done", "tokens", "errors", "issued", "warm_done")


class StrideSlots(LocalSlots):
    """Worker K of N's slots: indices K, K+N, K+2N, ... below the point's total; its own
    measured flag and deadline; stopped when the actor is told to stop."""

    def __init__(self, k: int, n: int, total: int, by_duration: bool, flags: Any):
        super().__init__(total=len(range(k, total, n)), by_duration=by_duration)
        self.k, self.n, self.flags = k, n, flags

    def next_index(self, t_slot: float) -> int | None:
        j = super().next_index(t_slot)
        return None if j is None else self.k + j * self.n

    def stopped(self) -> bool:
        return self.flags.stop.value != RUN


def planned_requests(k: int, cmd: dict) -> int | None:
    """How many requests a share asks worker K to send (None: a point bound by duration)."""
    share = cmd["share"]
    if "arrivals" in share:
        return len(share["arrivals"])
    return None if cmd["by_duration"] else len(range(k, cmd["total"], cmd["stride"]))


class Inbox:
    """The worker loop's messages (what a local worker sends its coordinator), kept for the
    actor's methods: counts, the window's start, a transport error, lag samples, the end."""

    def __init__(self):
        self.cv = threading.Condition()
        self.ready = False
        self.synced = False
        self.lags: list[dict] = []
        self.new_point()

    def new_point(self) -> None:
        self.counts = dict.fromkeys(POINT_COUNTS, 0)
        self.measure: float | None = None
        self.transport_error: str | None = None
        self.finished: tuple | None = None

    def put(self, msg: tuple) -> None:
        kind = msg[0]
        with self.cv:
            if kind == "ready":
                self.ready = True
            elif kind == "progress":
                for key, v in msg[2].items():
                    self.counts[key] += v
            elif kind == "measure":
                self.measure = msg[2] if self.measure is None else min(self.measure, msg[2])
            elif kind == "transport_error":
                self.transport_error = msg[2]
            elif kind == "lag":
                if self.synced:
                    self.lags.append(msg[2])
            elif kind in ("done", "error"):
                self.finished = msg
            self.cv.notify_all()

    def wait(self, cond, timeout: float | None = None) -> bool:
        with self.cv:
            return self.cv.wait_for(cond, timeout)


class ShardActor:
    """Worker K of a round on a Ray node (made an actor by bench/ray_cluster.py)."""

    def __init__(self, k: int, plan, secrets, headers: dict | None, dataset, clock: tuple[str, int]):
        self.k, self.clock = k, tuple(clock)
        # One connection per stream in flight: as many files as the node lets a process open.
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            except (ValueError, OSError):     # an unlimited hard limit the kernel caps lower
                pass
        # Ray starts its workers at nice 15 (RAY_worker_niceness): on a node with anything else
        # to run, the load would then wait for CPU. The loop's thread, started below, inherits
        # this thread's niceness; 0 where the node permits it (root or CAP_SYS_NICE).
        try:
            os.setpriority(os.PRIO_PROCESS, 0, 0)
        except OSError:
            pass
        # The node's own copy of the shard: lines are flushed here as requests finish.
        self.dir = tempfile.mkdtemp(prefix=f"serving-ledger-w{k}-")
        self.shard = ShardWriter(self.dir, k, time.monotonic(), secrets)
        self.read_at = 0
        self.commands: queue.Queue = queue.Queue()
        self.inbox = Inbox()
        self.flags = SimpleNamespace(stop=SimpleNamespace(value=RUN))
        loop = command_loop(k, plan, self.shard, headers, self.commands, self.inbox, self.flags, dataset,
                       slots_of=lambda cmd: StrideSlots(k, cmd["stride"], cmd["total"],
                                                        cmd["by_duration"], self.flags))
        self.thread = threading.Thread(target=self._run, args=(loop,), name=f"shard-{k}", daemon=True)
        self.thread.start()
        if not self.inbox.wait(lambda: self.inbox.ready or self.inbox.finished, READY_TIMEOUT_S):
            raise RuntimeError(f"worker {k}: its loop did not start within {READY_TIMEOUT_S:.0f} s")
        if self.inbox.finished:
            raise RuntimeError(f"worker {k}: {self.inbox.finished[2]}: {self.inbox.finished[3]}")

    def _run(self, loop) -> None:
        self.nice = os.getpriority(os.PRIO_PROCESS, 0)    # this thread's (Linux: per thread)
        try:
            run_loop(loop)
        except BaseException as e:  # noqa: BLE001 - handed to whoever waits on the inbox
            self.inbox.put(("error", self.k, type(e).__name__, str(e)))

    def node(self) -> dict:
        """Where this worker runs: its Ray node id, host name and process."""
        import ray

        from bench.httpstream import sockets as httpstream
        # Whether the compiled reader loaded here (the shipped build may not fit the node).
        return {"worker": self.k, "node": ray.get_runtime_context().get_node_id(),
                "hostname": socket.gethostname(), "pid": os.getpid(),
                "compiled_reader": httpstream._streamread is not None, "nice": self.nice}

    def sync_clock(self) -> dict:
        """Measure the offset to the driver's clock and put the shard's times on it."""
        off = measure_offset(self.clock)
        self.shard.t0 = off.t0
        with self.inbox.cv:
            self.inbox.synced = True
        return {**off.as_record(), "node": self.node()["node"]}

    def run_point(self, cmd: dict) -> dict:
        """Run this worker's share of one point; return its shard lines and what it did."""
        self.flags.stop.value = RUN
        with self.inbox.cv:
            self.inbox.new_point()
        self.commands.put(cmd)
        self.inbox.wait(lambda: self.inbox.finished is not None)
        with self.inbox.cv:
            finished, counts = self.inbox.finished, dict(self.inbox.counts)
            lags, self.inbox.lags = self.inbox.lags, []
            measure, terr = self.inbox.measure, self.inbox.transport_error
        return {"worker": self.k, "lines": self._new_lines(), "lags": lags, "measure": measure,
                "counts": counts, "planned": planned_requests(self.k, cmd),
                "transport_error": terr,
                "error": None if finished[0] == "done" else list(finished[2:])}

    def _new_lines(self) -> str:
        """The shard's lines written since the last call (whole lines: each is flushed)."""
        path = self.shard.path
        if not path.exists():
            return ""
        with open(path, "rb") as f:
            f.seek(self.read_at)
            data = f.read()
        data = data[:data.rfind(b"\n") + 1]
        self.read_at += len(data)
        return data.decode("utf-8")

    def poll(self) -> dict:
        """The running point's counts so far, and its last transport error."""
        with self.inbox.cv:
            return {"counts": dict(self.inbox.counts), "transport_error": self.inbox.transport_error,
                    "measure": self.inbox.measure}

    def stop(self) -> None:
        """Stop issuing requests (the server is gone): the share ends with what is in flight."""
        self.flags.stop.value = max(self.flags.stop.value, STOP)

    def close(self) -> None:
        """End the worker loop and remove the node's copy of the shard."""
        self.flags.stop.value = ABORT
        self.commands.put(None)
        self.thread.join(10)
        shutil.rmtree(self.dir, ignore_errors=True)
