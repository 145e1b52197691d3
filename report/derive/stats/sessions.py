"""A multi-turn sessions workload at a point: each turn's requests, TTFT and prefix hits, and how long its users were held."""

from __future__ import annotations

import numpy as np

from bundle.request_table.table import RequestTable, as_request_table
from report.derive.stats.samples import mean, percentile, ttfts_ms
from report.ledger import Absent
from report.registry import point_quantity

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
