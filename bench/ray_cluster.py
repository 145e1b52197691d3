"""Load from a Ray cluster's nodes, merged into one bundle: the driver's side.

`[client] ray = ADDRESS` (or `--ray ADDRESS`) makes the round's own process the driver: it
connects to the cluster, reserves `nodes` bundles of `workers_per_node` CPUs in one placement
group spread strictly (one bundle per node), and starts one `ShardActor` (bench/ray_shard.py)
per worker in its node's bundle, worker k on node k mod nodes. The driver keeps everything a
local round keeps (engine, point events, samplers, progress) and per point:

1. asks every worker to measure its offset to the driver's clock (`ClockServer`, a UDP port
   on the driver's host), so each writes its times on the driver's clock;
2. picks a start time RAY_LEAD_S ahead on that clock and hands each worker its share
   (`workers.point_commands`: streams k, k+n, ... or arrivals k, k+n, ...), whose times are
   all driver times: every node starts at that one time, not when its order arrives;
3. appends each worker's returned lines to `requests.w{k}.jsonl`, its lag samples to
   client.jsonl (each naming its worker and node) and one `shards.jsonl` record: node, what it was asked to send and what it
   sent and finished, its clock offset and uncertainty, and "ok", "died" or "lost";
4. ends the point: "failed" and the nodes named when a worker died or lost its connection to
   the cluster (the round goes on; Ray restarts the actor for the next point), else as a
   local point ends (a dead server ends it failed, as in one process).

Invariants: every request index of a point is sent by exactly one worker; a point's lines
reach the bundle only when its worker returns them, so a driver killed mid-point loses that
point's lines and `--resume` runs it again; the manifest's `ray` lists every worker with its
shard and node.
"""

from __future__ import annotations

import asyncio
import importlib.util
import ipaddress
import os
import socket
import sys
import threading
import urllib.parse
from pathlib import Path
from typing import Any

from bench.clock_sync import ClockServer
from bench.plan.spec import Plan
from bench.point_driver import Phase, RoundFailed, end_point, point_shape
from bench.prompts import Prompt
from bench.shard_writer import ShardWriter, shard_name
from bench.workers import point_commands, share_count
from bundle.store.writer import BundleWriter

INSTALL_HINT = ("Ray is not installed in this environment; install it with "
                "pip install 'serving-ledger[ray]'")
RAY_LEAD_S = 0.5            # a point starts this long after its orders go out
START_TIMEOUT_S = 120.0     # placement group and actors ready
POLL_S = 0.5                # progress and transport errors are asked for this often
RESTARTS = 3                # a worker that died is started again this often in a round
SHIPPED = ("bench", "bundle")   # the driver's own code, run by every worker


def ray_installed() -> bool:
    """Whether Ray can be imported here."""
    return importlib.util.find_spec("ray") is not None


def _host_of(address: str) -> str | None:
    """The host of a cluster ADDRESS ("host:port" or "ray://host:port"); None for "auto"."""
    if address == "auto":
        return None
    return urllib.parse.urlsplit(address if "://" in address else "ray://" + address).hostname


def _is_loopback(host: str | None) -> bool:
    try:
        return host is not None and ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        return False


def facing_address(host: str) -> str:
    """This host's address on the route to HOST (what the cluster's nodes reach it by)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((socket.gethostbyname(host), 9))      # no packet is sent
        return s.getsockname()[0]


def reachable(address: str, timeout_s: float = 5.0) -> str | None:
    """Why nothing answers at a cluster ADDRESS (a TCP connect to its port), None when it does
    or cannot be checked ("auto"): Ray itself retries an absent cluster for minutes."""
    host = _host_of(address)
    if host is None:
        return None
    port = urllib.parse.urlsplit(address if "://" in address else "ray://" + address).port
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as e:
        return f"nothing answers at {host}:{port} ({e.strerror or type(e).__name__})"


def connect(address: str):
    """Connect this process to the cluster at ADDRESS, shipping bench/ and bundle/ to it."""
    import ray
    root = Path(__file__).resolve().parents[1]
    host = _host_of(address)
    kwargs: dict[str, Any] = {}
    if _is_loopback(host) and not address.startswith("ray://"):
        kwargs["_node_ip_address"] = "127.0.0.1"   # a cluster on this host's loopback
    # The compiled reader's build goes too (the checkout's .gitignore leaves *.so out); a node
    # it does not fit reads through the event loop, and says so (`compiled_reader`).
    os.environ["RAY_RUNTIME_ENV_IGNORE_GITIGNORE"] = "1"
    ray.init(address=address, runtime_env={"py_modules": [str(root / m) for m in SHIPPED],
                                           "excludes": ["__pycache__"]},
             log_to_driver=False, logging_level="ERROR", **kwargs)
    return ray


def clock_host(ray, address: str) -> str:
    """Where the cluster's nodes reach the driver's clock server."""
    host = _host_of(address)
    if _is_loopback(host):
        return "127.0.0.1"
    if address.startswith("ray://") and host:
        return facing_address(host)
    return ray.util.get_node_ip_address()


async def _in_daemon_thread(fn, *args):
    """FN(*ARGS) in a daemon thread: a call that never returns (Ray connecting to a cluster
    that went away) must not keep the process alive after Ctrl-C or SIGTERM."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def run() -> None:
        try:
            res = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting task
            loop.call_soon_threadsafe(lambda exc=e: fut.done() or fut.set_exception(exc))
        else:
            loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(res))

    threading.Thread(target=run, name="ray-connect", daemon=True).start()
    return await fut


def _failed(exc: BaseException) -> asyncio.Future:
    """A worker's point that was never sent: its clock could not be measured (EXC)."""
    f = asyncio.get_running_loop().create_future()
    f.set_exception(exc)
    return f


class RayPool:
    """The round's workers on a Ray cluster and the driver's side of every point."""

    def __init__(self, plan: Plan, writer: BundleWriter, headers: dict | None,
                 dataset: list[Prompt] | None = None):
        self.plan, self.writer, self.headers, self.dataset = plan, writer, headers, dataset
        self.ray = None
        self.clock: ClockServer | None = None
        self.pg = None
        self.actors: list = []
        self.workers: list[dict] = []     # per worker: its shard and node (the manifest's list)
        self.shards: dict[int, ShardWriter] = {}

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, reserve one bundle per node (strictly spread), start and place the workers."""
        c, w = self.plan.client, self.writer
        problem = await asyncio.to_thread(reachable, c.ray)
        if problem:
            raise RoundFailed(f"[client].ray: cannot connect to the Ray cluster at {c.ray}: {problem}")
        try:
            self.ray = ray = await _in_daemon_thread(connect, c.ray)
        except Exception as e:  # noqa: BLE001 - Ray raises several kinds; the line names it
            raise RoundFailed(f"[client].ray: cannot connect to the Ray cluster at {c.ray}: "
                              f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from bench.ray_shard import ShardActor
        alive = [n for n in ray.nodes() if n.get("Alive")]
        nodes = c.nodes or len(alive)
        if nodes > len(alive):
            raise RoundFailed(f"[client].nodes: {nodes} client nodes asked, the Ray cluster at "
                              f"{c.ray} has {len(alive)} alive")
        K = c.workers_per_node
        self.pg = placement_group([{"CPU": K}] * nodes, strategy="STRICT_SPREAD")
        try:
            await asyncio.wait_for(asyncio.wrap_future(self.pg.ready().future()), START_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise RoundFailed(f"[client].nodes: no {nodes} nodes of the cluster at {c.ray} each "
                              f"have {K} CPU free for [client].workers_per_node within "
                              f"{START_TIMEOUT_S:.0f} s") from None
        self.clock = ClockServer(w.now, host=clock_host(ray, c.ray))
        actor = ray.remote(ShardActor)
        for k in range(nodes * K):
            self.actors.append(actor.options(
                num_cpus=1, max_concurrency=4, max_restarts=RESTARTS,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self.pg, placement_group_bundle_index=k % nodes),
            ).remote(k, self.plan, w.secrets, self.headers, self.dataset, self.clock.address))
        where = await self._gather([a.node.remote() for a in self.actors], START_TIMEOUT_S,
                                   "starting the Ray workers")
        known = {n["NodeID"]: n for n in ray.nodes()}
        self.workers = [{**n, "shard": shard_name(n["worker"]),
                         "node_ip": known.get(n["node"], {}).get("NodeManagerAddress")}
                        for n in where]
        w.update(ray={"address": c.ray, "nodes": nodes, "workers_per_node": K,
                      "clock_server": f"{self.clock.address[0]}:{self.clock.address[1]}",
                      "workers": self.workers})
        print(f"ray: {nodes * K} workers on {len({n['node'] for n in where})} nodes of {c.ray}",
              file=sys.stderr)

    async def _gather(self, refs: list, timeout: float, what: str) -> list:
        try:
            return await asyncio.wait_for(
                asyncio.gather(*(asyncio.wrap_future(r.future()) for r in refs)), timeout)
        except asyncio.TimeoutError:
            raise RoundFailed(f"Ray workers: no answer within {timeout:.0f} s while {what}") from None
        except self.ray.exceptions.RayError as e:
            raise RoundFailed(f"Ray workers failed while {what}: {type(e).__name__}: "
                              f"{str(e).splitlines()[0] if str(e) else ''}") from None

    async def close(self) -> None:
        """Stop every worker, release the placement group, disconnect; never raises."""
        ray = self.ray
        if ray is not None:
            for a in self.actors:
                try:
                    await asyncio.wait_for(asyncio.wrap_future(a.close.remote().future()), 15)
                except Exception:  # noqa: BLE001 - a worker already gone is closed
                    pass
                try:
                    ray.kill(a, no_restart=True)
                except Exception:  # noqa: BLE001
                    pass
            if self.pg is not None:
                try:
                    ray.util.remove_placement_group(self.pg)
                except Exception:  # noqa: BLE001
                    pass
            await asyncio.to_thread(ray.shutdown)
        for s in self.shards.values():
            s.close()
        if self.clock is not None:
            self.clock.close()

    # -- one point -------------------------------------------------------------------------

    async def run_point(self, engine, point: dict, index: int, progress, model: str) -> str:
        """Run one point over the cluster; "ok", "failed" (a node named), or ServerDied."""
        w, ray = self.writer, self.ray
        n = share_count(self.plan, point, len(self.actors))
        used = self.actors[:n]
        seed = point_shape(self.plan, point, index)[4]
        w.append("points", {"point": point["id"], "event": "start", "t": w.now(), "settings": point,
                            "seed": seed, "workers": n})
        clocks = await asyncio.gather(*(self._call(a.sync_clock.remote(), START_TIMEOUT_S)
                                        for a in used))
        for k, clock in enumerate(clocks):
            # A worker that cannot reach the driver's clock cannot write on it: no point can run.
            if isinstance(clock, ray.exceptions.RayTaskError):
                raise RoundFailed(f"Ray worker {k} on node {self.workers[k]['node']}: "
                                  f"{str(clock.cause if hasattr(clock, 'cause') else clock).splitlines()[-1]}")
        t_start = w.now() + RAY_LEAD_S
        cmds = point_commands(self.plan, point, index, n, engine.endpoints, model, t_start, 0.0)
        total, by_duration = cmds[0]["total"], cmds[0]["by_duration"]
        phase = Phase(0, cmds[0]["warmup"], window_s=self.plan.sweep.duration_s if by_duration else None)
        futs = [asyncio.wrap_future(a.run_point.remote({**cmd, "stride": n, "record_worker": True})
                                    .future()) if isinstance(clock, dict) else _failed(clock)
                for a, cmd, clock in zip(used, cmds, clocks)]
        state = {"done": 0, "tokens": 0, "errors": 0, "issued": 0, "died": None,
                 "transport_error": None}
        stopped = False
        while not all(f.done() for f in futs):
            await asyncio.wait(futs, timeout=POLL_S)
            polls = await asyncio.gather(*(self._call(a.poll.remote(), POLL_S * 4)
                                           for a, f in zip(used, futs) if not f.done()))
            counts = {key: sum(p["counts"].get(key, 0) for p in polls if isinstance(p, dict))
                      for key in ("done", "tokens", "errors", "issued", "warm_done")}
            for f in futs:
                if f.done() and not f.exception():
                    for key in counts:
                        counts[key] += f.result()["counts"].get(key, 0)
            # For the progress line only: the window started when a worker first says it measured
            # (within a poll); the bundle's measure event is the earliest send, once shards return.
            phase.warm_done = counts["warm_done"]
            if phase.measured_at is None and any(isinstance(p, dict) and p.get("measure") is not None
                                                 for p in polls):
                phase.measured_at = w.now() - t_start
            progress.update(index, point["id"], counts["done"],
                            total if not by_duration else counts["issued"],
                            counts["tokens"], counts["errors"], w.now() - t_start, phase=phase)
            err = next((p["transport_error"] for p in polls
                        if isinstance(p, dict) and p["transport_error"]), None)
            if err and not stopped and not await asyncio.to_thread(engine.alive):
                state["died"], stopped = err, True
                for a in used:
                    a.stop.remote()
        failed = []
        for k, (f, clock) in enumerate(zip(futs, clocks)):
            # A worker whose call failed died if Ray runs it again as a new process (or cannot
            # reach it at all); it only lost its connection if the same process still answers.
            now = await self._call(used[k].node.remote(), START_TIMEOUT_S) if f.exception() else None
            died = isinstance(now, dict) and now["pid"] != self.workers[k]["pid"] \
                or isinstance(now, BaseException)
            failed += self._record_shard(point["id"], k, f, clock, state, died)
            if isinstance(now, dict) and died:
                self._moved(k, now)
        if state.get("measures"):
            # The window starts at the first non-warm-up send of any worker (on one clock).
            w.append("points", {"point": point["id"], "event": "measure",
                                "t": min(state["measures"])})
        if failed and not state["died"]:
            progress.update(index, point["id"], state["done"], state["done"], state["tokens"],
                            state["errors"], w.now() - t_start, final=True)
            w.append("points", {"point": point["id"], "event": "end", "t": w.now(),
                                "status": "failed", "reason": "; ".join(failed)})
            return "failed"
        return await end_point(w, point, state, engine, progress, index, t_start)

    async def _call(self, ref, timeout: float):
        """A worker method's answer, or the exception that stands for it (never raised)."""
        try:
            return await asyncio.wait_for(asyncio.wrap_future(ref.future()), timeout)
        except Exception as e:  # noqa: BLE001 - the point's end names what happened
            return e

    def _moved(self, k: int, where: dict) -> None:
        """Worker K runs again (a new process, perhaps on another node): the manifest says so."""
        self.workers[k] = {**self.workers[k], **where}
        self.writer.update(ray={**self.writer.manifest["ray"], "workers": self.workers})

    def _record_shard(self, pid: str, k: int, fut: asyncio.Future, clock, state: dict,
                      died: bool = False) -> list[str]:
        """Append worker K's lines and lag samples, write its shards.jsonl record; return the
        sentence that names its node when it died or lost its connection."""
        w = self.writer
        node = self.workers[k]
        rec: dict[str, Any] = {"t": w.now(), "point": pid, "worker": k, "node": node["node"],
                               "status": "ok", "error": None, "planned": None, "sent": None,
                               "done": None, "errors": None}
        if isinstance(clock, dict):
            rec.update(clock)
        exc = fut.exception()
        if exc is None:
            res = fut.result()
            if res["error"]:
                etype, text = res["error"]
                raise RoundFailed(f"Ray worker {k} on node {node['node']} failed while running "
                                  f"point {pid}: {etype}: {text}")
            self.shards.setdefault(k, ShardWriter(w.path, k, w.t0)).append_lines(res["lines"])
            for lag in res["lags"]:
                # Each sample names its worker and node: the report keeps the nodes' lag apart.
                w.append("client", {**lag, "worker": k, "node": node["node"]})
            if res["measure"] is not None:
                state.setdefault("measures", []).append(res["measure"])
            c = res["counts"]
            rec.update(planned=res["planned"], sent=c["issued"], done=c["done"], errors=c["errors"])
            for key in ("done", "tokens", "errors", "issued"):
                state[key] += c[key]
            if res["transport_error"]:
                state["transport_error"] = res["transport_error"]
        else:
            rec.update(status="died" if died else "lost",
                       error=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300])
        w.append("shards", rec)
        if rec["status"] == "ok":
            return []
        return [f"client node {node['node']} ({node['hostname']}, worker {k}) "
                f"{'lost its connection to the Ray cluster' if rec['status'] == 'lost' else 'died'}"
                f": {rec['error']}"]
