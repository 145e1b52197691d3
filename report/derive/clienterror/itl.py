"""The client's timing error, measured from what it recorded, and the engine's ITL to hold it against.

Events read together share one stamp, so within a request two consecutive chunks with the
same time were read (or, with the packet ring, received in one TCP segment) together. Only
such an event can carry a later event's stamp; an event read alone keeps its own kernel stamp
exactly, however long it waited in the socket. A co-read event is late by at most the longest
time bytes waited in the socket during its 0.5 s client sample; only where that exceeds the
tolerance may its time be wrong. If a share s of the events may be wrong, at most 2s of the
gaps are (each event bounds two), and a measured q-quantile is off by at most the distance to
the (q ± 200s)-quantiles: the error of ITL p50 and p99 is that distance, in ms.
"""

from __future__ import annotations

import numpy as np

from bundle.request_table.table import RequestTable, as_request_table
from report.derive.series import scrapes as S
from report.derive.stats.samples import percentile
from report.ledger import Absent
from report.registry import point_quantity

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
