"""The client's timing error, measured from what it recorded, and the engine's ITL to hold it against.

Events read together share one stamp, so within a request two consecutive chunks with the
same time were read (or, with the packet ring, received in one TCP segment) together. Only
such an event can carry a later event's stamp; an event read alone keeps its own kernel stamp
exactly, however long it waited in the socket. A co-read event is late by at most the longest
time bytes waited in the socket during its 0.5 s client sample; only where that exceeds the
tolerance may its time be wrong. If a share s of the events may be wrong, at most 2s of the
gaps are (each event bounds two), and a measured q-quantile is off by at most the distance to
the (q ± 200s)-quantiles: the error of ITL p50 and p99 is that distance, in ms.

Across hosts (a Ray round) each worker's clock is put on the driver's to within a bound it
measured before every point; the round's largest is `clock_uncertainty_max_ms`, and each
worker's delivery (planned, sent, late) is kept apart, per worker, at the end of this module.
"""

from __future__ import annotations

import numpy as np

from bundle.request_table import RequestTable, as_request_table
from report.derive import validity as V
from report.derive.load.inflight import late_send_share
from report.derive.series import scrapes as S
from report.derive.stats.samples import percentile
from report.ledger import Absent
from report.registry import DOES_NOT_APPLY, point_quantity, round_quantity

ENGINE_ITL = "vllm:inter_token_latency_seconds"


def _pairs(requests: RequestTable) -> tuple[np.ndarray, np.ndarray]:
    """(gap in s, time of the later chunk) of every two consecutive chunks of one request."""
    t, _, off = as_request_table(requests).chunks()
    if len(t) < 2:
        return np.zeros(0), np.zeros(0)
    same = np.ones(len(t) - 1, dtype=bool)
    starts = off[1:-1]
    starts = starts[(starts > 0) & (starts < len(t))]
    same[starts - 1] = False                  # chunk j+1 opens the next request
    return np.diff(t)[same], t[1:][same]


def chunk_gaps_ms(requests: RequestTable) -> np.ndarray:
    """Gaps between consecutive chunks of each request, ms (a chunk, not a token, is the unit)."""
    gaps, _ = _pairs(requests)
    return gaps * 1e3


@point_quantity(unit="")
def zero_gap_chunks(measured: RequestTable) -> int:
    """Chunks that arrived with the same stamp as the chunk before them in their request."""
    gaps, _ = _pairs(measured)
    return int(np.count_nonzero(gaps == 0))


@point_quantity(unit="")
def events_received(measured: RequestTable) -> int:
    """Chunks (stream events that carried tokens) the client received."""
    t, _, _ = as_request_table(measured).chunks()
    return int(len(t))


@point_quantity(unit="")
def reads_in_window(client_samples: list, t_measure: float, t_end: float) -> int:
    """Stream reads the client made inside the window (client.jsonl's read counters)."""
    rows = [s for s in client_samples if t_measure <= s["t"] <= t_end and "reads" in s]
    if not rows:
        raise Absent("reason.no_read_counters")
    return int(sum(s["reads"] for s in rows))


@point_quantity(unit="fraction")
def coread_share_by_counters(all_requests: RequestTable, client_samples: list, t_measure: float,
                             t_end: float) -> float:
    """Share of the window's events that shared a read, by the counters: (events − reads) ÷ events, at least 0 (a read may also carry no event)."""
    t, _, _ = as_request_table(all_requests).chunks()
    events = int(np.count_nonzero((t >= t_measure) & (t < t_end)))
    if not events:
        raise Absent("reason.no_samples")
    reads = reads_in_window(client_samples, t_measure, t_end)
    return max(0, events - reads) / events


@point_quantity(unit="fraction")
def zero_gap_share(zero_gap_chunks: int, events_received: int) -> float:
    """The share of the events received that arrived with the same stamp as the one before them."""
    from report.derive.arith import share
    return share(zero_gap_chunks, events_received)


@point_quantity(unit="ms")
def chunk_itl_ms_p50(measured: RequestTable) -> float:
    """Median gap between consecutive chunks of the measured requests (a chunk, not a token, is the unit)."""
    return percentile(chunk_gaps_ms(measured), 50)


@point_quantity(unit="ms")
def chunk_itl_ms_p99(measured: RequestTable) -> float:
    """p99 of the gaps between consecutive chunks of the measured requests."""
    return percentile(chunk_gaps_ms(measured), 99)


def _sample_of(client_samples: list, times: np.ndarray) -> tuple[np.ndarray, list]:
    """The index of the client sample whose interval [t, next t) holds each time (-1: none)."""
    rows = sorted(client_samples, key=lambda s: s["t"])
    ts = np.array([s["t"] for s in rows], dtype=np.float64)
    return np.searchsorted(ts, times, side="right") - 1, rows


# The ITL the client's error is held against: the engine's own where it was sampled (the
# client's may be the distorted one), else the client's per-chunk p50.
@point_quantity(unit="ms", first_present=True)
def itl_reference_ms(engine_itl_ms_mean: float | None = None, chunk_itl_ms_p50: float | None = None) -> float:
    """The ITL the client's timing error is held against: the engine's mean where it was sampled, else the client's per-chunk p50."""
    return engine_itl_ms_mean if engine_itl_ms_mean is not None else chunk_itl_ms_p50


@point_quantity(unit="ms")
def client_error_tolerance_ms(rule_client_error_max: float, itl_reference_ms: float) -> float:
    """How late an event's stamp may be before it counts as mistimed: the policy's share of the reference ITL."""
    return rule_client_error_max * itl_reference_ms


@point_quantity(unit="")
def mistimed_events(measured: RequestTable, client_samples: list, client_error_tolerance_ms: float) -> int:
    """Co-read events whose stamp may be later than their arrival by more than the tolerance.

    A co-read event (same stamp as the chunk before it) is counted when its client sample was
    not wholly packet-stamped and its longest socket wait (or, for a client without read
    counters, its event-loop delay) exceeded the tolerance.
    """
    gaps, later = _pairs(measured)
    times = later[gaps == 0]
    if not len(times):
        return 0
    if not client_samples:
        raise Absent("reason.no_client_lag")
    idx, rows = _sample_of(client_samples, times)
    late = np.zeros(len(rows), dtype=bool)
    for i, s in enumerate(rows):
        if "reads" in s:
            packet = s.get("reads_packet_stamped", 0)
            whole = s["reads"] > 0 and packet >= s["reads"]
            late[i] = not whole and s["read_wait_max_s"] * 1e3 > client_error_tolerance_ms
        else:
            late[i] = s["loop_lag_s"] * 1e3 > client_error_tolerance_ms
    inside = idx >= 0
    return int(np.count_nonzero(late[idx[inside]])) + int(np.count_nonzero(~inside))


@point_quantity(unit="fraction")
def mistimed_share(mistimed_events: int, events_received: int) -> float:
    """The share of the events received whose stamp may be later than their arrival by more than the tolerance."""
    from report.derive.arith import share
    return share(mistimed_events, events_received)


def quantile_error_ms(gaps_ms: np.ndarray, q: float, wrong_share: float) -> float:
    """How far the q-th percentile of GAPS_MS can be from the truth when a share WRONG_SHARE of events is mistimed: the distance to the (q ± 200·share)-th percentiles, ms."""
    xs = np.sort(np.asarray(gaps_ms, dtype=np.float64))
    if not len(xs):
        raise Absent("reason.no_samples")
    d = 200.0 * wrong_share
    lo, mid, hi = np.percentile(xs, [max(0.0, q - d), q, min(100.0, q + d)])
    return float(max(hi - mid, mid - lo))


def engine_itl_bucket_ms(scrapes: list, t_start: float, t_end: float, q: float, edge: str) -> float:
    """The lower or upper bound (EDGE) of the engine ITL histogram bucket that holds its q-th percentile over the window, ms."""
    delta = S.histogram_increase(scrapes, t_start, t_end, ENGINE_ITL)
    if delta.count <= 0 or not delta.buckets:
        raise Absent("reason.no_observations_mean", name=ENGINE_ITL)
    rank = q / 100.0 * delta.count
    lower = 0.0
    for le, cum in delta.buckets:
        if cum >= rank:
            return (lower if edge == "low" else le) * 1e3
        lower = le
    return lower * 1e3


def outside_bucket(value: float, low: float, high: float) -> float:
    """How far VALUE lies outside [LOW, HIGH], as a share of the nearer bound (0 inside)."""
    if low <= value <= high:
        return 0.0
    bound = low if value < low else high
    if bound <= 0:
        raise Absent("reason.no_observations_mean", name=ENGINE_ITL)
    return abs(value - bound) / bound


# Each of ITL p50 and p99: how far the client's mistimed events can move it, and where it lies
# against the engine's own percentile, to the resolution of its histogram's buckets.
def _itl_error_ms(measured: RequestTable, q: float, mistimed_share: float, late_ms: float | None) -> float:
    # Two bounds hold at once: only the mistimed events' gaps moved (the quantile can move no
    # further than the percentiles the moved share spans), and none moved by more than a stamp
    # can be late (a gap's two ends are each late by 0 to LATE_MS, so the gap by at most LATE_MS).
    from report.derive.stats.samples import itl_gaps_ms
    spread = quantile_error_ms(itl_gaps_ms(measured), q, mistimed_share)
    return spread if late_ms is None else min(spread, late_ms)


@point_quantity(unit="ms")
def itl_error_ms_p50(measured: RequestTable, mistimed_share: float, client_timing_error_ms: float | None = None) -> float:
    """How far the client's ITL p50 can be from the truth with its mistimed events (no further than the percentiles they span, nor than a stamp can be late), ms."""
    return _itl_error_ms(measured, 50, mistimed_share, client_timing_error_ms)


@point_quantity(unit="fraction")
def itl_error_share_p50(itl_error_ms_p50: float, itl_reference_ms: float) -> float:
    """The ITL p50's possible error as a share of the reference ITL."""
    from report.derive.arith import ratio
    return ratio(itl_error_ms_p50, itl_reference_ms)


@point_quantity(unit="ms")
def engine_itl_ms_p50_low(scrapes: list, bracket_start: float, bracket_end: float) -> float:
    """The lower bound of the engine ITL histogram bucket that holds its median over the point's window, ms."""
    return engine_itl_bucket_ms(scrapes, bracket_start, bracket_end, 50, "low")


@point_quantity(unit="ms")
def engine_itl_ms_p50_high(scrapes: list, bracket_start: float, bracket_end: float) -> float:
    """The upper bound of the engine ITL histogram bucket that holds its median over the point's window, ms."""
    return engine_itl_bucket_ms(scrapes, bracket_start, bracket_end, 50, "high")


@point_quantity(unit="fraction")
def client_outside_engine_itl_p50(itl_ms_p50: float, engine_itl_ms_p50_low: float,
                                  engine_itl_ms_p50_high: float) -> float:
    """How far the client's ITL p50 lies outside the engine's median bucket, as a share of its nearer bound (0 inside)."""
    return outside_bucket(itl_ms_p50, engine_itl_ms_p50_low, engine_itl_ms_p50_high)


@point_quantity(unit="ms")
def itl_error_ms_p99(measured: RequestTable, mistimed_share: float, client_timing_error_ms: float | None = None) -> float:
    """How far the client's ITL p99 can be from the truth with its mistimed events (no further than the percentiles they span, nor than a stamp can be late), ms."""
    return _itl_error_ms(measured, 99, mistimed_share, client_timing_error_ms)


@point_quantity(unit="fraction")
def itl_error_share_p99(itl_error_ms_p99: float, itl_ms_p99: float) -> float:
    """The ITL p99's possible error as a share of the client's ITL p99."""
    from report.derive.arith import ratio
    return ratio(itl_error_ms_p99, itl_ms_p99)


@point_quantity(unit="ms")
def engine_itl_ms_p99_low(scrapes: list, bracket_start: float, bracket_end: float) -> float:
    """The lower bound of the engine ITL histogram bucket that holds its p99 over the point's window, ms."""
    return engine_itl_bucket_ms(scrapes, bracket_start, bracket_end, 99, "low")


@point_quantity(unit="ms")
def engine_itl_ms_p99_high(scrapes: list, bracket_start: float, bracket_end: float) -> float:
    """The upper bound of the engine ITL histogram bucket that holds its p99 over the point's window, ms."""
    return engine_itl_bucket_ms(scrapes, bracket_start, bracket_end, 99, "high")


@point_quantity(unit="fraction")
def client_outside_engine_itl_p99(itl_ms_p99: float, engine_itl_ms_p99_low: float,
                                  engine_itl_ms_p99_high: float) -> float:
    """How far the client's ITL p99 lies outside the engine's p99 bucket, as a share of its nearer bound (0 inside)."""
    return outside_bucket(itl_ms_p99, engine_itl_ms_p99_low, engine_itl_ms_p99_high)


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
