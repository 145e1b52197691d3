"""A Ray round's client nodes kept apart: what each worker was asked to send and sent, how late
it sent, and how well its clock was put on the driver's (bundle shards.jsonl).

Each quantity of a worker is declared with per="worker": the raw input `worker_items` names
the point's workers ("w1" -> {"worker": 1}); the manifest's `ray.workers` names each one's
node. A round from one host has no items, so none of these is recorded for it, and the
round's clock bound is absent with its reason.
"""

from __future__ import annotations

import numpy as np

from bundle.request_table import RequestTable, as_request_table
from report.derive.occupancy import late_send_share
from report.ledger import Absent
from report.registry import point_quantity, round_quantity


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


@round_quantity(unit="ms")
def clock_uncertainty_max_ms(shard_clocks: list) -> float:
    """The largest bound on a client node's clock offset to the driver's, over every worker and point: half the kept probe's round trip, ms."""
    found = [s["clock_uncertainty_s"] for s in shard_clocks if s.get("clock_uncertainty_s") is not None]
    if not found:
        raise Absent("reason.no_clock_offsets")
    return 1e3 * max(found)
