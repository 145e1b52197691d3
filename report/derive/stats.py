"""Per-point client statistics, pure functions over raw request records.

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
from dataclasses import dataclass

import numpy as np

from bundle.request_table.table import RequestTable, as_request_table
from report.ledger import Absent
from report.registry import DOES_NOT_APPLY, point_quantity, round_quantity

# A point's status when it has a `start` and no `end` event (the round was stopped inside it).
INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class Window:
    """A point's measurement window and settings, read from its point events."""

    point: str
    t_start: float
    t_measure: float
    t_end: float
    status: str
    reason: str | None
    settings: dict

    @property
    def duration(self) -> float:
        return self.t_end - self.t_measure


def point_windows(events: list[dict]) -> dict[str, Window]:
    """Each point's window from its start/measure/end events, in run order (last run wins)."""
    starts, measures, out = {}, {}, {}
    for e in events:
        pid = e.get("point")
        if pid is None:
            continue
        if e["event"] == "start":
            starts[pid] = e
            measures.pop(pid, None)
        elif e["event"] == "measure":
            measures[pid] = e["t"]
        elif e["event"] == "end" and pid in starts:
            s = starts[pid]
            out.pop(pid, None)
            out[pid] = Window(pid, s["t"], measures.get(pid, s["t"]), e["t"], e.get("status", "ok"),
                              e.get("reason"), s.get("settings", {}))
    for pid, s in starts.items():
        if pid not in out:  # started, never ended: the round stopped inside it
            out[pid] = Window(pid, s["t"], measures.get(pid, s["t"]), math.inf, INTERRUPTED,
                              "the round stopped before this point ended", s.get("settings", {}))
    return out


def interrupted_window(window: Window, requests: RequestTable) -> Window:
    """An interrupted point's window, ending when the last of its recorded requests ended.

    Requests are recorded when they end, so those still in flight at the interruption are
    not in the bundle: the window stops where the raw samples stop (at its measure time
    when none was recorded, an empty window whose statistics are absent).
    """
    ends = as_request_table(requests).col("t_end")
    ends = ends[np.isfinite(ends) & (ends >= window.t_measure)]
    t_end = float(ends.max()) if len(ends) else window.t_measure
    reason = (f"the round stopped before this point ended; its window ends at {t_end:.3f} s, "
              "when the last of its recorded requests ended" if len(ends) else
              "the round stopped before this point ended, before any of its requests ended")
    return Window(window.point, window.t_start, window.t_measure, t_end, INTERRUPTED, reason,
                  window.settings)


def requests_of_point(requests: RequestTable, window: Window) -> RequestTable:
    """The point's requests from its last run (records sent inside its start..end span)."""
    requests = as_request_table(requests)
    t = requests.col("t_send")
    inside = np.isnan(t) | ((window.t_start <= t) & (t <= window.t_end))
    return requests.take(requests.point_is(window.point) & inside)


def measured(requests: RequestTable) -> RequestTable:
    """Requests that count: not warm-up, finished without error."""
    requests = as_request_table(requests)
    return requests.take(~requests.col("warmup") & requests.col("ok"))


def failed_requests(requests: RequestTable) -> RequestTable:
    """Non-warm-up requests that ended with an error."""
    requests = as_request_table(requests)
    return requests.take(~requests.col("warmup") & ~requests.col("ok"))


# The round's requests: each point's measured and failed ones (`measured_requests`,
# `failed_requests`), and what the loader of a replayed trace or dataset counted.
@round_quantity(unit="req", key="requests")
def round_requests(measured_requests: RequestTable, failed_requests: RequestTable) -> int:
    """Requests of the round's points that were not warm-up, answered or failed."""
    return len(measured_requests) + len(failed_requests)


@round_quantity(unit="req", key="failed")
def round_failed(failed_requests: RequestTable) -> int:
    """Requests of the round's points that were not warm-up and ended with an error."""
    return len(failed_requests)


def _loader_count(workload_source: dict | None, name: str) -> int:
    """The count NAME the loader recorded in the manifest's workload_source (Absent without one)."""
    if workload_source is None:
        raise Absent("reason.no_replayed_source")
    if workload_source.get(name) is None:
        raise Absent("reason.not_recorded")
    return workload_source[name]


@round_quantity(unit="")
def source_read(workload_source: dict | None = None) -> int:
    """Requests (trace lines or whole conversations) the loader read from the file"""
    return _loader_count(workload_source, "read")


@round_quantity(unit="")
def source_kept(workload_source: dict | None = None) -> int:
    """Requests the loader kept after its limits and filters"""
    return _loader_count(workload_source, "kept")


@round_quantity(unit="×")
def source_time_scale(workload_source: dict | None = None) -> float:
    """The factor a trace's send times were scaled by"""
    # A dataset replays without a clock of its own: only a trace's send times are scaled.
    if workload_source is not None and workload_source.get("kind") != "trace":
        raise Absent("reason.no_replayed_source")
    return _loader_count(workload_source, "time_scale")


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


# The point's settings and counts, then its client statistics, in the order the ledger lists
# them: each key one function.
@point_quantity(unit="")
def concurrency(settings: dict) -> int | None:
    """Concurrency (requests in flight) set for the point."""
    return settings.get("concurrency")


@point_quantity(unit="tok")
def input_len(settings: dict) -> int | None:
    """Prompt length set for the point."""
    return settings.get("input_len")


@point_quantity(unit="tok")
def output_len(settings: dict) -> int | None:
    """Output length set for the point."""
    return settings.get("output_len")


@point_quantity(unit="req/s")
def request_rate(settings: dict) -> float:
    """Open-loop arrival rate set for the point (a closed-loop point has none)."""
    return settings.get("request_rate") or DOES_NOT_APPLY


@point_quantity(unit="req")
def requests(measured: RequestTable) -> int:
    """Measured requests of the point: past the warm-up, answered."""
    return len(measured)


@point_quantity(unit="req")
def failed(failed: RequestTable) -> int:
    """Requests of the point past the warm-up that failed."""
    return len(failed)


@point_quantity(unit="s")
def window_s(t_end: float, t_measure: float) -> float:
    """Seconds from the point's first measured send to its end."""
    return t_end - t_measure


@point_quantity(unit="ms")
def ttft_ms_mean(measured: RequestTable) -> float:
    """Mean time to first token of the measured requests."""
    return mean(ttfts_ms(measured))


@point_quantity(unit="ms")
def ttft_ms_p50(measured: RequestTable) -> float:
    """Median time to first token of the measured requests."""
    return percentile(ttfts_ms(measured), 50)


@point_quantity(unit="ms")
def itl_ms_p50(measured: RequestTable) -> float:
    """Median per-token inter-token latency of the measured requests."""
    return percentile(itl_gaps_ms(measured), 50)


@point_quantity(unit="ms")
def ttft_ms_p90(measured: RequestTable) -> float:
    """p90 of the measured requests' time to first token."""
    return percentile(ttfts_ms(measured), 90)


@point_quantity(unit="ms")
def itl_ms_p90(measured: RequestTable) -> float:
    """p90 of the measured requests' per-token inter-token latency."""
    return percentile(itl_gaps_ms(measured), 90)


@point_quantity(unit="ms")
def ttft_ms_p99(measured: RequestTable) -> float:
    """p99 of the measured requests' time to first token."""
    return percentile(ttfts_ms(measured), 99)


@point_quantity(unit="ms")
def itl_ms_p99(measured: RequestTable) -> float:
    """p99 of the measured requests' per-token inter-token latency."""
    return percentile(itl_gaps_ms(measured), 99)


@point_quantity(unit="ms")
def tpot_ms_mean(measured: RequestTable) -> float:
    """Mean time per output token after the first of the measured requests."""
    return mean(tpots_ms(measured))


@point_quantity(unit="ms")
def e2e_ms_mean(measured: RequestTable) -> float:
    """Mean end-to-end latency of the measured requests."""
    return mean(e2es_ms(measured))


@point_quantity(unit="ms")
def e2e_ms_p50(measured: RequestTable) -> float:
    """Median end-to-end latency of the measured requests."""
    return percentile(e2es_ms(measured), 50)


@point_quantity(unit="ms")
def e2e_ms_p99(measured: RequestTable) -> float:
    """p99 of the measured requests' end-to-end latency."""
    return percentile(e2es_ms(measured), 99)


def tpots_ms(requests: RequestTable) -> np.ndarray:
    """Time per output token after the first, per request: (E2E − TTFT)/(tokens − 1), ms."""
    requests = as_request_table(requests)
    has, last = _last_chunk_times(requests)
    tokens = output_token_counts(requests)[has]
    first = requests.col("t_first")[has]
    ok = ~np.isnan(tokens) & (tokens > 1)
    return (last[ok] - first[ok]) * 1e3 / (tokens[ok] - 1)


def _window_tokens(all_requests: RequestTable, t_measure: float, t_end: float) -> int:
    """Output tokens of ok requests whose chunks arrived in [t_measure, t_end] (a null count is 1)."""
    ok = all_requests.take(all_requests.col("ok"))
    t, n, _ = ok.chunks()
    inside = (t_measure <= t) & (t <= t_end)
    tok = n[inside]
    return int(np.where(tok > 0, tok, 1).sum(dtype=np.int64))


@point_quantity(unit="tok/s")
def output_tok_s(all_requests: RequestTable, t_measure: float, t_end: float) -> float:
    """Output tokens whose chunks arrived inside the window, per second of window."""
    if t_end <= t_measure:
        raise Absent("reason.window_empty")
    return _window_tokens(as_request_table(all_requests), t_measure, t_end) / (t_end - t_measure)


@point_quantity(unit="tok")
def output_tokens_in_window(all_requests: RequestTable, t_measure: float, t_end: float) -> int:
    """Output tokens whose chunks arrived inside the window (all requests, warm-up included)."""
    return _window_tokens(as_request_table(all_requests), t_measure, t_end)


@point_quantity(unit="tok/s")
def total_tok_s(all_requests: RequestTable, t_measure: float, t_end: float) -> float:
    """Prompt tokens (credited at first token) plus output tokens inside the window, per second."""
    if t_end <= t_measure:
        raise Absent("reason.window_empty")
    reqs = as_request_table(all_requests)
    out_tok = _window_tokens(reqs, t_measure, t_end)
    first = reqs.col("t_first")
    credited = reqs.col("ok") & (t_measure <= first) & (first <= t_end)
    prompt = reqs.col("usage_prompt")[credited]
    input_len = np.nan_to_num(reqs.col("input_len")[credited], nan=0.0)
    prompt = np.where(np.isnan(prompt), input_len, prompt)
    return (out_tok + int(prompt.sum())) / (t_end - t_measure)


@point_quantity(unit="req/s")
def req_s(measured: RequestTable, t_measure: float, t_end: float) -> float:
    """Measured requests completed inside the window, per second."""
    if t_end <= t_measure:
        raise Absent("reason.window_empty")
    end = as_request_table(measured).col("t_end")
    end = np.where(end == 0, -1.0, end)  # as `t_end or -1`: a zero end time never counts
    done = int(np.count_nonzero((t_measure <= end) & (end <= t_end)))
    return done / (t_end - t_measure)


def scaling_efficiency(throughput: float, concurrency: int, throughput_at_1: float) -> float:
    """Throughput at C relative to C times the throughput at C=1."""
    if throughput_at_1 <= 0:
        raise Absent("reason.throughput_c1_zero")
    return throughput / (concurrency * throughput_at_1)


@point_quantity(unit="fraction")
def scaling_eff(output_tok_s: float, concurrency: int, first_valid_output_tok_s: float, first_valid_concurrency: int) -> float:
    """Scaling efficiency tput(C)/(C·tput(1)), against the first valid point (C=1)."""
    if first_valid_concurrency != 1:
        raise Absent("reason.no_c1_point")
    return scaling_efficiency(output_tok_s, concurrency, first_valid_output_tok_s)


@point_quantity(unit="")
def multi_token_chunks(measured: RequestTable) -> int:
    """Chunks that carried more than one token (split evenly in the per-token ITL)."""
    _, n, _ = as_request_table(measured).chunks()
    return int(np.count_nonzero(n > 1))


@point_quantity(unit="ms")
def slot_wait_ms_p99(measured: RequestTable) -> float:
    """p99 of the time a measured request waited for a client-side concurrency slot."""
    return percentile(slot_waits_ms(measured), 99)


# An open loop's latencies from each request's scheduled time beside those from its send
# (coordinated omission); `open_loop_requests` is DOES_NOT_APPLY at a closed-loop point.
@point_quantity(unit="ms")
def ttft_sched_ms_p50(open_loop_requests: RequestTable) -> float:
    """Median time from a measured request's scheduled send to its first token."""
    return percentile(ttfts_from_schedule_ms(open_loop_requests), 50)


@point_quantity(unit="ms")
def ttft_sched_ms_p99(open_loop_requests: RequestTable) -> float:
    """p99 of the time from a measured request's scheduled send to its first token."""
    return percentile(ttfts_from_schedule_ms(open_loop_requests), 99)


@point_quantity(unit="ms")
def e2e_sched_ms_p99(open_loop_requests: RequestTable) -> float:
    """p99 of the time from a measured request's scheduled send to its last token."""
    return percentile(e2es_from_schedule_ms(open_loop_requests), 99)


# The lengths each request brings (its usage), where the workload varies them: what the KV,
# theory and MFU sections model in place of the plan's (round.read.modelled_lengths).
def lengths_sent(requests: RequestTable) -> tuple[np.ndarray, np.ndarray]:
    """(prompt tokens, output tokens) of each answered request, as its usage reports them."""
    reqs = as_request_table(requests)
    prompt, out = reqs.col("usage_prompt"), reqs.col("usage_completion")
    has = reqs.col("ok").astype(bool) & ~np.isnan(prompt) & ~np.isnan(out) & (out > 0)
    if not has.any():
        raise Absent("reason.no_lengths_sent")
    return prompt[has].astype(np.int64), out[has].astype(np.int64)


@point_quantity(unit="tok")
def prompt_tokens_sent_mean(measured: RequestTable, lengths_vary: bool) -> float:
    """Mean prompt tokens of the answered requests, as their usage reports them."""
    return float(lengths_sent(measured)[0].mean()) if lengths_vary else DOES_NOT_APPLY


@point_quantity(unit="tok")
def output_tokens_sent_mean(measured: RequestTable, lengths_vary: bool) -> float:
    """Mean output tokens of the answered requests, as their usage reports them."""
    return float(lengths_sent(measured)[1].mean()) if lengths_vary else DOES_NOT_APPLY


@point_quantity(unit="ms")
def ttft_ms_mean_population(population: RequestTable) -> float:
    """Mean TTFT, as the client measured it, of the requests the engine's finish-time histograms count."""
    return mean(ttfts_ms(population))


# ---------------------------------------------------------------- multi-turn sessions
# Per turn index k (0 the first turn) over the point's measured requests that carry a `turn`
# (a sessions workload's); a tuple holds one entry per turn index up to the deepest one sent,
# None where turn k has no value. Turn k's population is every measured request of turn k.

def _turns(measured: RequestTable) -> tuple[np.ndarray, int]:
    turn = as_request_table(measured).col("turn")
    if not np.any(~np.isnan(turn)):
        raise Absent("reason.no_session_turns")
    return turn, int(np.nanmax(turn)) + 1


def _per_turn(measured: RequestTable, of) -> tuple:
    """OF(requests of turn k) for each turn index k, None where OF has no value for it."""
    measured = as_request_table(measured)
    turn, depth = _turns(measured)
    out = []
    for k in range(depth):
        try:
            out.append(of(measured.take(np.flatnonzero(turn == k))))
        except Absent:
            out.append(None)
    return tuple(out)


@point_quantity(unit="req")
def session_turn_requests(measured: RequestTable) -> tuple:
    """Measured requests per turn of a sessions workload, the first turn first."""
    return _per_turn(measured, len)


@point_quantity(unit="ms")
def session_turn_ttft_ms_p50(measured: RequestTable) -> tuple:
    """Median TTFT per turn index over that turn's measured requests."""
    return _per_turn(measured, lambda r: percentile(np.sort(ttfts_ms(r)), 50))


@point_quantity(unit="ms")
def session_turn_ttft_ms_p99(measured: RequestTable) -> tuple:
    """TTFT p99 per turn index over that turn's measured requests."""
    return _per_turn(measured, lambda r: percentile(np.sort(ttfts_ms(r)), 99))


@point_quantity(unit="tok")
def session_turn_prompt_tokens_mean(measured: RequestTable) -> tuple:
    """Mean prompt length per turn index (the history resent, grown by each reply and new text)."""
    return _per_turn(measured, lambda r: mean(r.col("input_len")[~np.isnan(r.col("input_len"))]))


def _cached_share(requests: RequestTable) -> float:
    """Prompt tokens the server's prefix cache served over prompt tokens, from each request's usage."""
    cached, prompt = requests.col("usage_cached"), requests.col("usage_prompt")
    has = ~np.isnan(cached) & ~np.isnan(prompt)
    if not np.any(has):
        raise Absent("reason.no_cached_tokens")
    if prompt[has].sum() <= 0:
        raise Absent("reason.no_samples")
    return float(cached[has].sum() / prompt[has].sum())


@point_quantity(unit="fraction")
def session_turn_prefix_hit_rate(measured: RequestTable) -> tuple:
    """Prefix-cache hit rate per turn: cached over prompt tokens of that turn's requests, from their usage."""
    # Each request's own usage.prompt_tokens_details.cached_tokens: no scrape window is needed.
    rates = _per_turn(measured, _cached_share)
    if all(r is None for r in rates):
        raise Absent("reason.no_cached_tokens")
    return rates


@point_quantity(unit="")
def session_last_turn(session_turn_requests: tuple) -> int:
    """The deepest turn a measured request of the point reached, counting the first turn as one."""
    return len(session_turn_requests)


@point_quantity(unit="fraction")
def session_first_turn_hit_rate(session_turn_prefix_hit_rate: tuple) -> float:
    """Prefix-cache hit rate of the conversations' first turns."""
    return _entry(session_turn_prefix_hit_rate, 0)


@point_quantity(unit="fraction")
def session_last_turn_hit_rate(session_turn_prefix_hit_rate: tuple, session_last_turn: int) -> float:
    """Prefix-cache hit rate of the deepest turn reached."""
    return _entry(session_turn_prefix_hit_rate, session_last_turn - 1)


@point_quantity(unit="ms")
def session_first_turn_ttft_ms_p50(session_turn_ttft_ms_p50: tuple) -> float:
    """Median TTFT of the conversations' first turns."""
    return _entry(session_turn_ttft_ms_p50, 0)


@point_quantity(unit="ms")
def session_last_turn_ttft_ms_p50(session_turn_ttft_ms_p50: tuple, session_last_turn: int) -> float:
    """Median TTFT of the deepest turn reached."""
    return _entry(session_turn_ttft_ms_p50, session_last_turn - 1)


@point_quantity(unit="")
def session_cache_serves_history(session_first_turn_hit_rate: float,
                                 session_last_turn_hit_rate: float) -> bool:
    """Whether the deepest turn's prompts hit the prefix cache more than the first turn's."""
    return session_last_turn_hit_rate > session_first_turn_hit_rate


def _entry(values: tuple, k: int) -> float:
    if k >= len(values) or values[k] is None:
        raise Absent("reason.no_samples")
    return values[k]


@point_quantity(unit="fraction")
def session_users_held_fraction(measured: RequestTable, failed: RequestTable, concurrency: int,
                                t_measure: float, t_end: float) -> float:
    """Share of the window the point's C users were busy: in a request or thinking after one."""
    # Each request's [send, end + think time] clipped to the window, summed, over C × window;
    # a user's requests and think times follow one another, so they never overlap.
    measured, failed = as_request_table(measured), as_request_table(failed)
    _turns(measured)
    if t_end <= t_measure or not concurrency:
        raise Absent("reason.window_empty")
    busy = _busy_s(measured, t_measure, t_end) + _busy_s(failed, t_measure, t_end)
    return float(min(1.0, busy / (concurrency * (t_end - t_measure))))


def _busy_s(requests: RequestTable, t_measure: float, t_end: float) -> float:
    """Seconds of [send, end + think time] of REQUESTS inside the window, summed."""
    think = np.nan_to_num(requests.col("think_s"), nan=0.0)
    start, end = requests.col("t_send"), requests.col("t_end") + think
    has = ~np.isnan(start) & ~np.isnan(end)
    return float(np.clip(np.minimum(end[has], t_end) - np.maximum(start[has], t_measure), 0.0, None).sum())

