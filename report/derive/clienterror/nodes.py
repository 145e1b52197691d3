"""A Ray round's client nodes kept apart: what each worker and node was asked to send and sent, how late, how lagged, and how well its clock was put on the driver's.

Across hosts (a Ray round) each worker's clock is put on the driver's to within a bound it
measured before every point; the round's largest is `clock_uncertainty_max_ms`, and each
worker's delivery (planned, sent, late) is kept apart, per worker.
"""

from __future__ import annotations

import numpy as np

from bundle.request_table.table import RequestTable, as_request_table
from report.derive import validity as V
from report.derive.load.inflight import late_send_share
from report.derive.stats.samples import percentile
from report.ledger import Absent
from report.registry import DOES_NOT_APPLY, point_quantity, round_quantity

# A Ray round's client nodes kept apart (bundle shards.jsonl): what each worker was asked to
# send and sent, how late it sent, and how well its clock was put on the driver's. Each is
# declared per="worker": the raw input `worker_items` names the point's workers ("w1" ->
# {"worker": 1}), the manifest's `ray.workers` each one's node. A round from one host has no
# items, so none is recorded for it, and the round's clock bound is absent with its reason.

def worker_items(shards: list[dict]) -> dict[str, dict[str, int]]:
    """Each worker of a point's shard records as an item ("w1" -> {"worker": 1}), in order."""
    return {f"w{k}": {"worker": k} for k in sorted({s["worker"] for s in shards})}


def _record(point_shards: list[dict], worker: int) -> dict:
    """Worker WORKER's shard record of the point."""
    for s in point_shards:
        if s["worker"] == worker:
            return s
    raise Absent("reason.worker_no_record", worker=worker)


def _returned(point_shards: list[dict], worker: int) -> dict:
    """The record of a worker that returned its point; Absent naming its status otherwise."""
    s = _record(point_shards, worker)
    if s["status"] != "ok":
        raise Absent("reason.worker_not_returned", worker=worker, node=s.get("node") or "?",
                     how=s["status"])
    return s


@point_quantity(unit="", per="worker")
def worker_planned_requests(point_shards: list, worker: int) -> int:
    """Requests the point's schedule gave this worker to send."""
    s = _returned(point_shards, worker)
    if s["planned"] is None:
        raise Absent("reason.worker_planned_by_duration")
    return int(s["planned"])


@point_quantity(unit="", per="worker")
def worker_sent_requests(point_shards: list, worker: int) -> int:
    """Requests this worker sent in the point (warm-up included)."""
    return int(_returned(point_shards, worker)["sent"])


@point_quantity(unit="fraction", per="worker")
def worker_sent_share(worker_sent_requests: int, worker_planned_requests: int) -> float:
    """The share of its planned requests this worker sent."""
    if worker_planned_requests <= 0:
        raise Absent("reason.worker_planned_none")
    return worker_sent_requests / worker_planned_requests


@point_quantity(unit="fraction", per="worker")
def worker_late_send_share(open_loop_requests: RequestTable, point_shards: list, worker: int) -> float:
    """Share of this worker's measured open-loop requests sent late against their scheduled time."""
    _returned(point_shards, worker)
    reqs = as_request_table(open_loop_requests)
    return late_send_share(reqs.take(np.flatnonzero(reqs.col("worker") == worker)))


@point_quantity(unit="ms", per="worker")
def worker_clock_uncertainty_ms(point_shards: list, worker: int) -> float:
    """Bound on this worker's clock offset to the driver's at the point: half its kept probe's round trip, ms."""
    u = _record(point_shards, worker).get("clock_uncertainty_s")
    if u is None:
        raise Absent("reason.worker_no_clock", worker=worker)
    return 1e3 * u


def _behind(s: dict, requests: RequestTable | None) -> bool:
    """Whether one worker's shard fell behind its part of the point: it did not return (lost its
    connection to Ray or died), sent under its share of the planned requests, or (an open loop)
    sent more of them late than the schedule check allows."""
    if s["status"] != "ok":
        return True
    if s.get("planned") and int(s["sent"]) < V.NODE_SENT_MIN * int(s["planned"]):
        return True
    if requests is None:
        return False
    mine = requests.take(np.flatnonzero(requests.col("worker") == s["worker"]))
    try:
        return late_send_share(mine) > V.LATE_SEND_MAX
    except Absent:
        return False


@point_quantity(unit="")
def client_nodes_behind(point_shards: list, open_loop_requests: RequestTable | None = None) -> str:
    """The client nodes (with their workers) that fell behind the point's schedule in a Ray round: a worker lost or dead, short of its planned sends, or sending late; "" where every node kept it."""
    if not point_shards:
        return DOES_NOT_APPLY
    reqs = None if open_loop_requests is None else as_request_table(open_loop_requests)
    nodes: dict[str, list[str]] = {}
    for s in sorted(point_shards, key=lambda s: s["worker"]):
        if _behind(s, reqs):
            nodes.setdefault(str(s.get("node") or "?"), []).append(f"w{s['worker']}")
    return ", ".join(f"{node} ({' '.join(ws)})" for node, ws in nodes.items())


# The same kept apart per client node (per="node": the raw input `node_items` names the point's
# nodes, "n0" -> {"node": <Ray node id>}, in the order of their first worker): what the node's
# workers were asked to send and sent, and the node's own event-loop lag (the client.jsonl
# samples its workers took, each naming its node). A sample without a node (the driver's own,
# or a bundle recorded before samples named their node) counts for no node.

def node_items(shards: list[dict]) -> dict[str, dict[str, str]]:
    """Each client node of a point's shard records as an item ("n0" -> {"node": id}), in the order of its first worker."""
    order: list[str] = []
    for s in sorted(shards, key=lambda s: s["worker"]):
        node = str(s.get("node") or "?")
        if node not in order:
            order.append(node)
    return {f"n{i}": {"node": node} for i, node in enumerate(order)}


def _node_records(point_shards: list[dict], node: str) -> list[dict]:
    """The shard records of the node's workers that returned the point (Absent: none did)."""
    mine = [s for s in point_shards if str(s.get("node") or "?") == node]
    ok = [s for s in mine if s["status"] == "ok"]
    if not ok:
        raise Absent("reason.node_not_returned", node=node,
                     how=", ".join(sorted({s["status"] for s in mine})) or "?")
    return ok


@point_quantity(unit="", per="node")
def node_id(node: str) -> str:
    """The Ray node id of this client node (the manifest's ray.workers[].node)."""
    return node


@point_quantity(unit="", per="node")
def node_planned_requests(point_shards: list, node: str) -> int:
    """Requests the point's schedule gave this node's workers to send (those that returned the point)."""
    recs = _node_records(point_shards, node)
    if any(s["planned"] is None for s in recs):
        raise Absent("reason.worker_planned_by_duration")
    return sum(int(s["planned"]) for s in recs)


@point_quantity(unit="", per="node")
def node_sent_requests(point_shards: list, node: str) -> int:
    """Requests this node's workers sent in the point (warm-up included): the load it delivered."""
    return sum(int(s["sent"]) for s in _node_records(point_shards, node))


@point_quantity(unit="fraction", per="node")
def node_sent_share(node_sent_requests: int, node_planned_requests: int) -> float:
    """The share of its planned requests this node sent."""
    if node_planned_requests <= 0:
        raise Absent("reason.worker_planned_none")
    return node_sent_requests / node_planned_requests


def node_lags_ms(client_samples: list, t_start: float, t_end: float, node: str) -> list[float]:
    """The event-loop lag samples (ms) the node's workers took inside the window; Absent when none names the node."""
    if not any("node" in s for s in client_samples):
        raise Absent("reason.no_node_lag")
    vals = [s["loop_lag_s"] * 1e3 for s in client_samples
            if s.get("node") == node and t_start <= s["t"] <= t_end]
    if not vals:
        raise Absent("reason.node_no_lag", node=node)
    return vals


@point_quantity(unit="ms", per="node")
def node_client_lag_ms_p50(client_samples: list, measure_window: tuple[float, float], node: str) -> float:
    """Median of this node's own client event-loop delay inside the point's window, ms."""
    return percentile(node_lags_ms(client_samples, *measure_window, node), 50)


@point_quantity(unit="ms", per="node")
def node_client_lag_ms_p99(client_samples: list, measure_window: tuple[float, float], node: str) -> float:
    """p99 of this node's own client event-loop delay inside the point's window, ms."""
    return percentile(node_lags_ms(client_samples, *measure_window, node), 99)


def lag_limit_ms(rule_lag_min_ms: float, rule_lag_share_of_itl: float, itl_ms: float | None) -> float:
    """The client-lag rule's bar, ms: the policy's floor, or its share of the ITL where that is higher."""
    return max(rule_lag_min_ms, rule_lag_share_of_itl * (itl_ms or 0.0))


def _nodes_past(point_shards: list, client_samples: list, window: tuple[float, float], q: float,
                bar: float) -> str:
    """The client nodes of the point whose own lag samples in WINDOW pass BAR at percentile Q,
    comma-separated ("" where none did); Absent where no node has a sample there."""
    nodes, measured = [], 0
    for item in node_items(point_shards).values():
        try:
            lag = percentile(node_lags_ms(client_samples, *window, item["node"]), q)
        except Absent:
            continue
        measured += 1
        if lag > bar:
            nodes.append(item["node"])
    if not measured:
        raise Absent("reason.no_node_lag")
    return ", ".join(nodes)


@point_quantity(unit="")
def client_nodes_lagging(point_shards: list, client_samples: list, measure_window: tuple[float, float],
                         rule_lag_min_ms: float, rule_lag_share_of_itl: float,
                         engine_itl_ms_mean: float | None = None) -> str:
    """The client nodes of a Ray round whose own event loop lagged past the client-lag rule at the median (p50 over the node's samples in the window against the floor, or the policy's share of the engine's ITL); "" where none did."""
    if not point_shards:
        return DOES_NOT_APPLY
    bar = lag_limit_ms(rule_lag_min_ms, rule_lag_share_of_itl, engine_itl_ms_mean)
    return _nodes_past(point_shards, client_samples, measure_window, 50, bar)


@point_quantity(unit="")
def client_nodes_tail_lagging(point_shards: list, client_samples: list, measure_window: tuple[float, float],
                              rule_lag_min_ms: float, rule_lag_share_of_itl: float,
                              itl_ms_p99: float | None = None) -> str:
    """The client nodes of a Ray round whose own event loop lagged past the client-lag rule at the tail (p99 over the node's samples in the window against the floor, or the policy's share of the ITL p99 the client measured), which the merged samples' p99 can hide; "" where none did."""
    if not point_shards:
        return DOES_NOT_APPLY
    bar = lag_limit_ms(rule_lag_min_ms, rule_lag_share_of_itl, itl_ms_p99)
    return _nodes_past(point_shards, client_samples, measure_window, 99, bar)


@point_quantity(unit="ms")
def point_clock_uncertainty_ms(point_shards: list) -> float:
    """The largest bound on a client node's clock offset to the driver's at this point, over its workers: half the kept probe's round trip, ms."""
    if not point_shards:
        return DOES_NOT_APPLY
    found = [s["clock_uncertainty_s"] for s in point_shards if s.get("clock_uncertainty_s") is not None]
    if not found:
        raise Absent("reason.no_clock_offsets")
    return 1e3 * max(found)


@point_quantity(unit="ms")
def timestamp_error_ms(client_timing_error_ms: float, point_clock_uncertainty_ms: float) -> float:
    """How far a chunk's timestamp on the driver's clock may be from its arrival in a Ray round: the client's own timing error plus the point's largest clock-offset bound, ms (a gap within one request, both ends on one worker's clock, carries the first term only)."""
    return client_timing_error_ms + point_clock_uncertainty_ms


@round_quantity(unit="ms")
def clock_uncertainty_max_ms(shard_clocks: list) -> float:
    """The largest bound on a client node's clock offset to the driver's, over every worker and point: half the kept probe's round trip, ms."""
    found = [s["clock_uncertainty_s"] for s in shard_clocks if s.get("clock_uncertainty_s") is not None]
    if not found:
        raise Absent("reason.no_clock_offsets")
    return 1e3 * max(found)
