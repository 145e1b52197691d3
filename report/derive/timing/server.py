"""A point's time inside the server from its histograms: queue, prefill and the frontend's remainder of TTFT, its engine steps and KV peak."""

from __future__ import annotations

import numpy as np

from bundle.request_table.table import RequestTable, as_request_table
from report.derive.arith import ratio, share
from report.derive.series import scrapes as S
from report.ledger import Absent
from report.registry import point_quantity

QUEUE = "vllm:request_queue_time_seconds"
PREFILL = "vllm:request_prefill_time_seconds"
ITERATION_TOKENS = "vllm:iteration_tokens_total"


def mean_queue_ms(scrapes: list, t_start: float, t_end: float) -> float:
    """Mean time a request waited in the scheduler queue: Δsum/Δcount of request_queue_time_seconds, ms."""
    return 1e3 * S.histogram_window_mean(scrapes, t_start, t_end, QUEUE)


def mean_prefill_ms(scrapes: list, t_start: float, t_end: float) -> float:
    """Mean prefill time (scheduled to first token): Δsum/Δcount of request_prefill_time_seconds, ms."""
    return 1e3 * S.histogram_window_mean(scrapes, t_start, t_end, PREFILL)


def mean_iteration_tokens(scrapes: list, t_start: float, t_end: float) -> float:
    """Mean tokens per engine step: Δsum/Δcount of iteration_tokens_total."""
    return S.histogram_window_mean(scrapes, t_start, t_end, ITERATION_TOKENS)


def frontend_ms(ttft_ms_mean: float, queue_ms_mean: float, prefill_ms_mean: float) -> float:
    """Client TTFT not explained by server queue and prefill: API server, IPC and network."""
    return ttft_ms_mean - queue_ms_mean - prefill_ms_mean


def prefill_part_of_iteration(mean_iteration_tokens: float, decode_tokens: float) -> float:
    """Tokens per engine step that are not decode: mean step tokens minus running requests."""
    return mean_iteration_tokens - decode_tokens


def per_request_server_ms(requests: RequestTable, field: str) -> float:
    """Mean of one per-request server timing (from the usage chunk's metrics), ms."""
    vals = as_request_table(requests).server_metric(field)
    vals = vals[~np.isnan(vals)]
    if not len(vals):
        raise Absent("reason.no_server_field", field=field)
    return float(np.cumsum(vals)[-1]) / len(vals)  # summed in order, as sum()


# A mean queue time below this (ms) is scheduling noise: no power law is drawn through it.
QUEUE_FLOOR_MS = 1.0


def bracketing_window(scrapes: list, t_start: float, t_end: float) -> tuple[float, float]:
    """The window widened to the last successful scrape at or before its start and the first at or after its end.

    Counters and histograms are differenced between these two scrapes, so a point shorter
    than the scrape interval still gets its increase; points are separated by an idle
    cool-down, so the widening adds idle time only.
    """
    ok = [s["t"] for s in scrapes if s.get("ok")]
    before = [t for t in ok if t <= t_start]
    after = [t for t in ok if t >= t_end]
    return (before[-1] if before else t_start, after[0] if after else t_end)


def gauge_peak(scrapes: list, t_start: float, t_end: float, name: str, agg: str = "sum") -> float:
    """Largest sample of gauge NAME in the window, its series combined by AGG."""
    return S.peak_value(S.gauge_values(scrapes, t_start, t_end, name, agg=agg))


@point_quantity(unit="ms")
def queue_ms_mean(population_scrapes: list, population_start: float, population_end: float) -> float:
    """Mean time the population's requests waited in the scheduler queue, ms."""
    return mean_queue_ms(population_scrapes, population_start, population_end)


@point_quantity(unit="ms")
def prefill_ms_mean(population_scrapes: list, population_start: float, population_end: float) -> float:
    """Mean prefill time (scheduled to first token) of the population's requests, ms."""
    return mean_prefill_ms(population_scrapes, population_start, population_end)


@point_quantity(unit="ms")
def frontend_ms_mean(ttft_ms_mean_population: float, queue_ms_mean: float, prefill_ms_mean: float) -> float:
    """The population's client TTFT not explained by server queue and prefill, ms."""
    return frontend_ms(ttft_ms_mean_population, queue_ms_mean, prefill_ms_mean)


@point_quantity(unit="×")
def frontend_over_queue(frontend_ms_mean: float, queue_ms_mean: float) -> float:
    """The frontend's part of the population's mean TTFT over its time in the server's queue."""
    # Both parts are times: a remainder at or below zero is no frontend time to compare, and a
    # queue under the floor is scheduling noise, whose ratio would print thousands of times.
    if frontend_ms_mean <= 0:
        raise Absent("reason.frontend_not_positive", value=f"{frontend_ms_mean:.3g}")
    if queue_ms_mean < QUEUE_FLOOR_MS:
        raise Absent("reason.queue_under_floor", floor=QUEUE_FLOOR_MS)
    return ratio(frontend_ms_mean, queue_ms_mean)


@point_quantity(unit="fraction")
def queue_share(queue_ms_mean: float, ttft_ms_mean_population: float) -> float:
    """The server's queue time as a share of the population's client TTFT."""
    return share(queue_ms_mean, ttft_ms_mean_population)


@point_quantity(unit="fraction")
def queue_over_prefill(queue_ms_mean: float, prefill_ms_mean: float) -> float:
    """The server's mean queue time over its mean prefill time."""
    return ratio(queue_ms_mean, prefill_ms_mean)


@point_quantity(unit="ms")
def server_queue_ms_mean(measured: RequestTable) -> float:
    """Mean queue time the server reported per measured request (its usage chunk's metrics), ms."""
    return per_request_server_ms(measured, "queue_time_ms")


@point_quantity(unit="ms")
def server_prefill_ms_mean(measured: RequestTable) -> float:
    """Mean time to first token the server reported per measured request (its usage chunk's metrics), ms."""
    return per_request_server_ms(measured, "time_to_first_token_ms")


@point_quantity(unit="tok")
def iteration_tokens_mean(scrapes: list, bracket_start: float, bracket_end: float) -> float:
    """Mean tokens per engine step over the point's bracketing scrapes."""
    return mean_iteration_tokens(scrapes, bracket_start, bracket_end)


@point_quantity(unit="tok")
def prefill_tokens_per_iteration(iteration_tokens_mean: float, server_running_median: float) -> float:
    """Tokens per engine step that are not decode: mean step tokens minus the median running requests."""
    return prefill_part_of_iteration(iteration_tokens_mean, server_running_median)


@point_quantity(unit="×")
def step_tokens_per_running(iteration_tokens_mean: float, server_running_median: float) -> float:
    """Mean tokens per engine step over the median running requests."""
    return ratio(iteration_tokens_mean, server_running_median)


@point_quantity(unit="fraction")
def kv_usage_peak(point_scrapes: list, t_measure: float, t_end: float) -> float:
    """Largest KV cache usage sample inside the point's window (of the fullest engine where there are several)."""
    # Each engine's usage is a share of its own pool: the fullest one's, never their sum.
    return gauge_peak(point_scrapes, t_measure, t_end, "vllm:kv_cache_usage_perc", agg="max")
