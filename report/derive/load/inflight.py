"""How many requests a point kept in flight, seen three ways, and whether its queue kept growing.

The server's gauges (running + waiting), the client's own send and end times, and Little's
law over the engine's counters (Δ`e2e_request_latency_seconds_sum` ÷ window: the mean number
of requests inside the server) are independent signals of one quantity; a gauge that the
other two contradict is stale, not a point that was not held. Each is a pure function.
"""

from __future__ import annotations

import numpy as np

from bundle.request_table.table import RequestTable, as_request_table
from report.derive.arith import ratio
from report.derive.series import scrapes as S
from report.derive.validity import LATE_SEND_MS
from report.ledger import Absent
from report.registry import point_quantity

E2E = "vllm:e2e_request_latency_seconds"


# The engine's and the client's means describe one population when their counts are this close.
POPULATION_SLACK = 0.1


# Requests in flight, three ways (the gauges' share is held_concurrency_fraction): the client's
# count over the steady window, and the engine's, which is the client's times the share of each
# request's life spent inside the engine (the same finished requests on both sides: so neither a
# warm-up tail nor a window shorter than a lifetime pushes it past C). What applies to one kind
# of loop only reads a raw input that is DOES_NOT_APPLY at the other kind's points
# (`open_loop_requests`, `closed_loop_concurrency`, `capped_concurrency`).
@point_quantity(unit="")
def open_loop(settings: dict, replayed_trace: bool) -> bool:
    """Whether the point sent on a schedule (an arrival rate or a trace's own times), not in a closed loop."""
    # A replayed trace is an open loop too: each request sent at its own time, no cap.
    return bool(settings.get("request_rate")) or replayed_trace


@point_quantity(unit="req")
def client_inflight_mean(all_requests: RequestTable, steady_start: float, steady_end: float) -> float:
    """Time-weighted mean of the requests the client had in flight (sent, not yet ended) over the window."""
    if steady_end <= steady_start:
        raise Absent("reason.window_empty")
    reqs = as_request_table(all_requests)
    send, end = reqs.col("t_send"), reqs.col("t_end")
    ok = ~np.isnan(send)
    send, end = send[ok], np.where(np.isnan(end[ok]), steady_end, end[ok])
    overlap = np.clip(np.minimum(end, steady_end) - np.maximum(send, steady_start), 0.0, None)
    return float(overlap.sum()) / (steady_end - steady_start)


def _streams(all_requests: RequestTable, steady_start: float, steady_end: float) -> tuple[np.ndarray, np.ndarray]:
    """Each request's streaming span at the client (first token to end), clipped to the window."""
    if steady_end <= steady_start:
        raise Absent("reason.window_empty")
    reqs = as_request_table(all_requests)
    first, end = reqs.col("t_first"), reqs.col("t_end")
    ok = ~np.isnan(first)
    first, end = first[ok], np.where(np.isnan(end[ok]), steady_end, end[ok])
    start, stop = np.maximum(first, steady_start), np.minimum(end, steady_end)
    keep = stop > start
    return start[keep], stop[keep]


@point_quantity(unit="req")
def client_streaming_mean(all_requests: RequestTable, steady_start: float, steady_end: float) -> float:
    """Time-weighted mean of the requests streaming tokens to the client (first token received, not yet ended) over the window: the requests the engine decodes, as the client sees them."""
    start, stop = _streams(all_requests, steady_start, steady_end)
    return float((stop - start).sum()) / (steady_end - steady_start)


@point_quantity(unit="req")
def client_streaming_plateau(all_requests: RequestTable, steady_start: float, steady_end: float,
                             rule_plateau_share: float) -> int:
    """The most requests streaming to the client at once that the window held for at least its plateau share of the time: a server that runs N at a time streams to N, however many the client sent."""
    start, stop = _streams(all_requests, steady_start, steady_end)
    if not len(start):
        raise Absent("reason.no_samples")
    times = np.concatenate([start, stop])
    steps = np.concatenate([np.ones(len(start)), -np.ones(len(stop))])
    order = np.lexsort((steps, times))          # at one instant an end goes before a start
    times, count = times[order], np.cumsum(steps[order])
    held = np.diff(np.append(times, steady_end))  # how long each count lasted
    span = steady_end - steady_start
    # Time at or above each level, from the top: the plateau is the highest level held long enough.
    for level in range(int(count.max()), 0, -1):
        if held[count >= level].sum() >= rule_plateau_share * span:
            return level
    return 0


@point_quantity(unit="req")
def client_awaiting_mean(client_inflight_mean: float, client_streaming_mean: float) -> float:
    """Requests the client had sent that had not streamed a token yet (queued in the server or in their prefill), time-weighted over the window."""
    return max(0.0, client_inflight_mean - client_streaming_mean)


def engine_inflight_mean(scrapes: list, t_start: float, t_end: float) -> float:
    """Mean requests inside the server by Little's law: Δsum of e2e_request_latency_seconds ÷ window."""
    if t_end <= t_start:
        raise Absent("reason.window_empty")
    delta = S.histogram_increase(scrapes, t_start, t_end, E2E)
    if delta.count <= 0:
        raise Absent("reason.no_observations_mean", name=E2E)
    return delta.sum / (delta.t_last - delta.t_first if delta.t_last > delta.t_first
                        else t_end - t_start)


@point_quantity(unit="req")
def engine_inflight_little(scrapes: list, bracket_start: float, bracket_end: float) -> float:
    """Mean requests inside the server over the point's bracketing scrapes, by Little's law."""
    return engine_inflight_mean(scrapes, bracket_start, bracket_end)


@point_quantity(unit="ms")
def engine_e2e_ms_mean(population_scrapes: list, population_start: float, population_end: float) -> float:
    """Mean time a request spent in the server from its arrival in the API server's engine client to its finish: Δsum/Δcount of e2e_request_latency_seconds, ms."""
    return 1e3 * S.histogram_window_mean(population_scrapes, population_start, population_end, E2E)


@point_quantity(unit="ms")
def client_lifetime_ms_mean(population: RequestTable) -> float:
    """Mean time from a request's send to its last byte at the client, ms."""
    reqs = as_request_table(population)
    life = reqs.col("t_end") - reqs.col("t_send")
    life = life[~np.isnan(life)]
    if not len(life):
        raise Absent("reason.no_samples")
    return float(np.mean(life)) * 1e3


@point_quantity(unit="fraction")
def engine_life_share(engine_e2e_ms_mean: float, client_lifetime_ms_mean: float,
                      population_requests_server: float, population_requests_client: float) -> float:
    """Share of a request's life at the client that it spent inside the engine (the same requests on both sides)."""
    if client_lifetime_ms_mean <= 0:
        raise Absent("reason.lifetime_zero")
    server, client = population_requests_server, population_requests_client
    if abs(server - client) > POPULATION_SLACK * max(client, 1):
        raise Absent("reason.populations_differ", server=int(server), client=int(client))
    return engine_e2e_ms_mean / client_lifetime_ms_mean


@point_quantity(unit="fraction")
def outside_engine_share(engine_life_share: float) -> float:
    """Share of a request's life at the client that it spent outside the engine (API server, network, client)."""
    return 1.0 - engine_life_share


def share_of_concurrency(mean_in_flight: float, concurrency: int) -> float:
    """A mean number in flight as a share of the set concurrency (may exceed 1: requests in flight beyond C are the warm-up's tail)."""
    if not concurrency:
        raise Absent("reason.no_concurrency")
    return mean_in_flight / concurrency


@point_quantity(unit="fraction")
def late_send_share(open_loop_requests: RequestTable, late_ms: float = LATE_SEND_MS) -> float:
    """Share of an open loop's requests sent more than LATE_MS after their scheduled time (they waited for a slot under the cap)."""
    reqs = as_request_table(open_loop_requests)
    sched, send = reqs.col("t_sched"), reqs.col("t_send")
    has = ~np.isnan(sched) & ~np.isnan(send)
    if not np.any(has):
        raise Absent("reason.no_schedule")
    return float(np.count_nonzero((send[has] - sched[has]) * 1e3 > late_ms)) / int(np.count_nonzero(has))


@point_quantity(unit="fraction")
def cap_held_fraction(client_inflight_mean: float, capped_concurrency: int) -> float:
    """The client's mean requests in flight as a share of an open loop's concurrency cap."""
    return share_of_concurrency(client_inflight_mean, capped_concurrency)


@point_quantity(unit="fraction")
def client_held_fraction(client_inflight_mean: float, closed_loop_concurrency: int) -> float:
    """The client's mean requests in flight as a share of a closed loop's concurrency."""
    return share_of_concurrency(client_inflight_mean, closed_loop_concurrency)


@point_quantity(unit="fraction")
def engine_held_fraction(client_held_fraction: float, engine_life_share: float) -> float:
    """The requests inside the engine as a share of a closed loop's concurrency: the client's share times the share of each life spent inside."""
    return client_held_fraction * engine_life_share


@point_quantity(unit="fraction")
def engine_little_held_fraction(engine_inflight_little: float, closed_loop_concurrency: int) -> float:
    """The engine's mean requests by Little's law as a share of a closed loop's concurrency."""
    # The signal independent of the client (it can pass 1 where lifetimes are long against the
    # window; only compared, not printed).
    return share_of_concurrency(engine_inflight_little, closed_loop_concurrency)


# Whether the queue kept growing (open loop) or the pace drifted (steady state): over the span
# the measured requests were sent in (`send_span_start`/`send_span_end`: send_span), not the
# drain after the last send; the server's side over the scrapes bracketing that span.
def inflight_at(requests: RequestTable, t: float) -> int:
    """Requests the client had in flight at time T."""
    reqs = as_request_table(requests)
    send, end = reqs.col("t_send"), reqs.col("t_end")
    return int(np.count_nonzero((send <= t) & ~(end <= t)))


def send_span(requests: RequestTable, t_start: float, t_end: float) -> tuple[float, float]:
    """The first and last send of REQUESTS inside the window (the window itself when fewer than two)."""
    send = as_request_table(requests).col("t_send")
    send = send[(send >= t_start) & (send <= t_end)]
    if len(send) < 2:
        return t_start, t_end
    return float(send.min()), float(send.max())


@point_quantity(unit="req/s")
def send_rate(all_requests: RequestTable, send_span_start: float, send_span_end: float) -> float:
    """Requests the client sent per second inside the window."""
    if send_span_end <= send_span_start:
        raise Absent("reason.window_empty")
    send = as_request_table(all_requests).col("t_send")
    return float(np.count_nonzero((send >= send_span_start) & (send < send_span_end))) / (send_span_end - send_span_start)


@point_quantity(unit="s")
def send_span_s(send_span_start: float, send_span_end: float) -> float:
    """Seconds from the point's first measured send to its last."""
    return send_span_end - send_span_start


@point_quantity(unit="req/s")
def engine_finish_rate(span_scrapes: list, span_bracket_start: float, span_bracket_end: float) -> float:
    """Requests the server finished per second: Δcount of e2e_request_latency_seconds over the window."""
    t_start, t_end = span_bracket_start, span_bracket_end
    if t_end <= t_start:
        raise Absent("reason.window_empty")
    delta = S.histogram_increase(span_scrapes, t_start, t_end, E2E)
    span = delta.t_last - delta.t_first if delta.t_last > delta.t_first else t_end - t_start
    return delta.count / span


@point_quantity(unit="fraction")
def finish_over_send(engine_finish_rate: float, send_rate: float) -> float:
    """Requests the server finished per second over those the client sent (1: it kept up)."""
    return ratio(engine_finish_rate, send_rate)


@point_quantity(unit="req/s")
def inflight_growth(all_requests: RequestTable, send_span_start: float, send_span_end: float) -> float:
    """Requests in flight at the window's end minus at its start, per second of window."""
    t_start, t_end = send_span_start, send_span_end
    if t_end <= t_start:
        raise Absent("reason.window_empty")
    return (inflight_at(all_requests, t_end) - inflight_at(all_requests, t_start)) / (t_end - t_start)


@point_quantity(unit="×")
def ttft_trend(measured: RequestTable, send_span_start: float, send_span_end: float) -> float:
    """Median TTFT of the requests sent in the window's last third over that of its first third."""
    t_start, t_end = send_span_start, send_span_end
    reqs = as_request_table(measured)
    send, first = reqs.col("t_send"), reqs.col("t_first")
    ok = ~np.isnan(send) & ~np.isnan(first)
    send, ttft = send[ok], first[ok] - send[ok]
    third = (t_end - t_start) / 3
    early = ttft[(send >= t_start) & (send < t_start + third)]
    late = ttft[(send >= t_end - third) & (send < t_end)]
    if len(early) < 3 or len(late) < 3:
        raise Absent("reason.few_requests_per_third", n=min(len(early), len(late)))
    base = float(np.median(early))
    if base <= 0:
        raise Absent("reason.lifetime_zero")
    return float(np.median(late)) / base


@point_quantity(unit="×")
def throughput_trend(all_requests: RequestTable, send_span_start: float, send_span_end: float) -> float:
    """Chunks received in the window's second half over those of its first half (1: steady)."""
    t_start, t_end = send_span_start, send_span_end
    t, _, _ = as_request_table(all_requests).chunks()
    mid = (t_start + t_end) / 2
    first = np.count_nonzero((t >= t_start) & (t < mid))
    second = np.count_nonzero((t >= mid) & (t < t_end))
    if first == 0:
        raise Absent("reason.no_samples")
    return second / first


@point_quantity(unit="×")
def engine_throughput_trend(span_scrapes: list, span_bracket_start: float, span_bracket_end: float) -> float:
    """Generation tokens the server counted in the window's second half over its first half."""
    scrapes, t_start, t_end = span_scrapes, span_bracket_start, span_bracket_end
    mid = (t_start + t_end) / 2
    # Each half needs a few scrapes: a counter differenced over one or two scrape intervals
    # moves by whole steps of the interval and reads as a drift.
    for lo, hi in ((t_start, mid), (mid, t_end)):
        if len(S.scrapes_in_window(scrapes, lo, hi)) < 3:
            raise Absent("reason.too_few_scrapes_halves")
    a = S.counter_increase(scrapes, t_start, mid, "vllm:generation_tokens_total")
    b = S.counter_increase(scrapes, mid, t_end, "vllm:generation_tokens_total")
    if a <= 0:
        raise Absent("reason.mfu_counters_still")
    return b / a
