"""Each request's latencies and token counts as arrays, and the percentile and mean over them.

The records come as a RequestTable (bundle/request_table/: one numpy column per field, the
chunks of all requests in flat arrays); a list of record dicts is converted first. Lists of
values are numpy arrays.

Definitions (documented in the report's glossary through these docstrings):
- a point's window runs from its `measure` event (first measured request sent) to its
  `end` event; warm-up requests are excluded from latency statistics;
- TTFT is first token-bearing chunk minus send; E2E is last chunk minus send;
- ITL is per token: a chunk carrying k tokens after a gap g contributes k gaps of g/k;
- throughput counts the output tokens whose chunks arrived inside the window.
"""

from __future__ import annotations

import math

import numpy as np

from bundle.request_table.table import RequestTable, as_request_table
from report.ledger import Absent


def _floats(values) -> np.ndarray:
    return values if isinstance(values, np.ndarray) else np.asarray(values, dtype=np.float64)


def percentile(values: np.ndarray, q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation, as numpy's default."""
    xs = _floats(values)
    if len(xs) == 0:
        raise Absent("reason.no_samples")
    k = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    if not np.all(xs[1:] >= xs[:-1]):  # already in order: no partition needed
        xs = np.partition(xs, (lo, hi)) if hi != lo else np.partition(xs, lo)
    a, b = float(xs[lo]), float(xs[hi])
    return a + (b - a) * (k - lo)


def mean(values: np.ndarray) -> float:
    """Arithmetic mean."""
    xs = _floats(values)
    if len(xs) == 0:
        raise Absent("reason.no_samples")
    # Summed in order, as Python's sum(): the same float as before, not numpy's pairwise sum.
    return float(np.cumsum(xs)[-1]) / len(xs)


def ttfts_ms(requests: RequestTable) -> np.ndarray:
    """Time to first token per request: first token-bearing chunk minus send, in ms."""
    requests = as_request_table(requests)
    first, send = requests.col("t_first"), requests.col("t_send")
    has = ~np.isnan(first)
    return (first[has] - send[has]) * 1e3


def _last_chunk_times(requests: RequestTable) -> tuple[np.ndarray, np.ndarray]:
    """(mask of requests with chunks, their last chunk's time)."""
    counts = requests.chunk_counts()
    has = counts > 0
    t, _, off = requests.chunks()
    return has, t[off[1:][has] - 1]


def e2es_ms(requests: RequestTable) -> np.ndarray:
    """End-to-end latency per request: last token-bearing chunk minus send, in ms."""
    requests = as_request_table(requests)
    has, last = _last_chunk_times(requests)
    return (last - requests.col("t_send")[has]) * 1e3


def request_latencies_ms(requests: RequestTable) -> dict[str, np.ndarray]:
    """Per request, aligned with its rows: TTFT, TPOT and E2E in ms (as ttfts_ms, tpots_ms and
    e2es_ms define them), NaN where a request cannot give one (no token; TPOT: one token)."""
    requests = as_request_table(requests)
    has, last = _last_chunk_times(requests)
    send, first = requests.col("t_send"), requests.col("t_first")
    tokens = output_token_counts(requests)
    e2e, tpot = np.full(len(requests), np.nan), np.full(len(requests), np.nan)
    e2e[has] = (last - send[has]) * 1e3
    end = np.full(len(requests), np.nan)
    end[has] = last
    ok = has & ~np.isnan(tokens) & (tokens > 1)
    tpot[ok] = (end[ok] - first[ok]) * 1e3 / (tokens[ok] - 1)
    return {"ttft_ms": (first - send) * 1e3, "tpot_ms": tpot, "e2e_ms": e2e}


def ttfts_from_schedule_ms(requests: RequestTable) -> np.ndarray:
    """Open loop: time to first token from each request's scheduled send time, in ms (what a
    user arriving then waited: a send the client held back counts against it, so no
    coordinated omission)."""
    requests = as_request_table(requests)
    first, sched = requests.col("t_first"), requests.col("t_sched")
    has = ~np.isnan(first) & ~np.isnan(sched)
    return (first[has] - sched[has]) * 1e3


def e2es_from_schedule_ms(requests: RequestTable) -> np.ndarray:
    """Open loop: end-to-end latency from each request's scheduled send time, in ms."""
    requests = as_request_table(requests)
    has, last = _last_chunk_times(requests)
    sched = requests.col("t_sched")[has]
    keep = ~np.isnan(sched)
    return (last[keep] - sched[keep]) * 1e3


def slot_waits_ms(requests: RequestTable) -> np.ndarray:
    """Time a request waited for a client-side concurrency slot (kept apart from latency), ms."""
    requests = as_request_table(requests)
    slot, send = requests.col("t_slot"), requests.col("t_send")
    has = ~np.isnan(slot) & ~np.isnan(send)
    return (send[has] - slot[has]) * 1e3


def output_token_counts(requests: RequestTable) -> np.ndarray:
    """Output tokens per request: the usage count, else the sum over its chunks; NaN where unknown."""
    requests = as_request_table(requests)
    _, n, off = requests.chunks()
    total = np.full(len(off) - 1, np.nan)
    has = off[1:] > off[:-1]
    if len(n):
        starts = off[:-1][has]
        total[has] = np.add.reduceat(n, starts, dtype=np.int64)
        if np.any(n < 0):  # a null count anywhere in a request leaves its sum unknown
            nulls = np.add.reduceat((n < 0).astype(np.int64), starts)
            total[np.flatnonzero(has)[nulls > 0]] = np.nan
    usage = requests.col("usage_completion")
    return np.where(np.isnan(usage), total, np.trunc(usage))


def itl_gaps_ms(requests: RequestTable) -> np.ndarray:
    """Inter-token latency per token, ms: a chunk of k tokens after gap g gives k gaps of g/k."""
    requests = as_request_table(requests)
    t, n, off = requests.chunks()
    if len(t) < 2:
        return np.zeros(0)
    # Chunk j + 1 after chunk j, unless j + 1 is a request's first chunk (it has no gap).
    later = np.ones(len(t) - 1, dtype=bool)
    firsts = off[1:-1][off[1:-1] < off[-1]]
    later[firsts[firsts > 0] - 1] = False
    d = np.diff(t)
    d *= 1e3
    k = n[1:]
    if not np.any(k > 1):               # one token a chunk (a null count is one): no split
        return d[later]
    k = np.where(k > 1, k, 1)
    d /= k
    return np.repeat(d[later], k[later])


def tpots_ms(requests: RequestTable) -> np.ndarray:
    """Time per output token after the first, per request: (E2E − TTFT)/(tokens − 1), ms."""
    requests = as_request_table(requests)
    has, last = _last_chunk_times(requests)
    tokens = output_token_counts(requests)[has]
    first = requests.col("t_first")[has]
    ok = ~np.isnan(tokens) & (tokens > 1)
    return (last[ok] - first[ok]) * 1e3 / (tokens[ok] - 1)
