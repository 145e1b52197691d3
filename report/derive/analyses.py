"""Derived quantities that combine other ledger values (docs/analyses.md items 1-21).

Each is a pure function named for what it returns, with a one-line docstring that the
report shows as its description. Missing or degenerate inputs raise Absent with a reason.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from bundle.request_table import RequestTable, as_request_table
from bundle.server_flags import server_flag
from report.architecture import params as PA
from report.architecture import roofline as RF
from report.architecture import theory as T
from report.derive import series
from report.ledger import Absent
from report.registry import point_quantity, require_points, round_quantity

# -------------------------------------------------------------- server-side means (ms)

QUEUE = "vllm:request_queue_time_seconds"
PREFILL = "vllm:request_prefill_time_seconds"
DECODE = "vllm:request_decode_time_seconds"
SERVER_TTFT = "vllm:time_to_first_token_seconds"
ITERATION_TOKENS = "vllm:iteration_tokens_total"


def mean_queue_ms(scrapes: list, t_start: float, t_end: float) -> float:
    """Mean time a request waited in the scheduler queue: Δsum/Δcount of request_queue_time_seconds, ms."""
    return 1e3 * series.histogram_window_mean(scrapes, t_start, t_end, QUEUE)


def mean_prefill_ms(scrapes: list, t_start: float, t_end: float) -> float:
    """Mean prefill time (scheduled to first token): Δsum/Δcount of request_prefill_time_seconds, ms."""
    return 1e3 * series.histogram_window_mean(scrapes, t_start, t_end, PREFILL)


def mean_iteration_tokens(scrapes: list, t_start: float, t_end: float) -> float:
    """Mean tokens per engine step: Δsum/Δcount of iteration_tokens_total."""
    return series.histogram_window_mean(scrapes, t_start, t_end, ITERATION_TOKENS)


def frontend_ms(ttft_ms_mean: float, queue_ms_mean: float, prefill_ms_mean: float) -> float:
    """Client TTFT not explained by server queue and prefill: API server, IPC and network."""
    return ttft_ms_mean - queue_ms_mean - prefill_ms_mean


def share(part: float, whole: float) -> float:
    """A part as a fraction of its whole."""
    if whole == 0:
        raise Absent("reason.whole_zero")
    return part / whole


def ratio(numerator: float, denominator: float, scale: float = 1.0) -> float:
    """One quantity divided by another (times a unit scale)."""
    if denominator == 0:
        raise Absent("reason.denominator_zero")
    return numerator / denominator * scale


def product(a: float, b: float) -> float:
    """a times b."""
    return a * b


@point_quantity(unit="req")
def effective_concurrency(concurrency: float, server_running_median: float) -> float:
    """Requests actually holding KV: the median of running requests when the pool caps it below C, else C."""
    return min(concurrency, server_running_median)


def usable_pool_tokens(pool_tokens: int, block_size: int) -> int:
    """Pool tokens vLLM's usage gauge is a fraction of: one block (the null block) fewer."""
    if pool_tokens <= block_size:
        raise Absent("reason.pool_one_block")
    return pool_tokens - block_size


def difference(a: float, b: float) -> float:
    """a minus b."""
    return a - b


def relative_difference(new: float, old: float) -> float:
    """Relative change from OLD to NEW, as a fraction of OLD."""
    if old == 0:
        raise Absent("reason.reference_zero")
    return (new - old) / old


def percentage_point_error(measured: float, expected: float) -> float:
    """Measured minus expected, both fractions, in percentage points."""
    return 100.0 * (measured - expected)


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


# -------------------------------------------------------------- growth and crossover

def loglog_slope(x1: float, y1: float, x2: float, y2: float) -> float:
    """Slope of log y against log x between two points (the local power-law exponent)."""
    if min(x1, y1, x2, y2) <= 0:
        raise Absent("reason.log_of_nonpositive")
    if x1 == x2:
        raise Absent("reason.points_share_x")
    return math.log(y2 / y1) / math.log(x2 / x1)


# A mean queue time below this (ms) is scheduling noise: no power law is drawn through it.
QUEUE_FLOOR_MS = 1.0


def power_law_crossover(c_last: float, prefill_last: float, queue_last: float,
                        slope_queue: float, slope_prefill: float, queue_prev: float) -> float:
    """Concurrency where the queue and prefill power laws meet: C·exp(ln(P/Q)/(s_q − s_p)).

    Only where the queue was measurable at both points the slopes come from (QUEUE_PREV and
    QUEUE_LAST at or above QUEUE_FLOOR_MS): a line through a 0.02 ms queue extrapolates noise.
    """
    if min(queue_prev, queue_last) < QUEUE_FLOOR_MS:
        raise Absent("reason.queue_below_floor", floor=QUEUE_FLOOR_MS)
    if slope_queue <= slope_prefill:
        raise Absent("reason.queue_not_faster")
    if queue_last <= 0 or prefill_last <= 0:
        raise Absent("reason.queue_or_prefill_zero")
    return c_last * math.exp(math.log(prefill_last / queue_last) / (slope_queue - slope_prefill))


# Over the valid points of a concurrency sweep (in load order, None where a point's value is
# absent): the growth from the lowest to the highest, and the power laws of the top two.

def _last_two(values: Sequence[float | None], name: str) -> tuple[float, float]:
    """The values of the two highest valid points; Absent when there are fewer or either is absent."""
    if len(values) < 2:
        raise Absent("reason.fit_two_points")
    require_points(values, (-2, -1), name)
    return values[-2], values[-1]


def _growth(values: Sequence[float | None], name: str) -> float:
    """The highest valid point's value over the lowest's."""
    if len(values) < 2:
        raise Absent("reason.fit_two_points")
    require_points(values, (0, -1), name)
    return ratio(values[-1], values[0])


@round_quantity(unit="")
def queue_loglog_slope(each_concurrency: Sequence[float | None],
                       each_queue_ms_mean: Sequence[float | None]) -> float:
    """Local power-law exponent of the mean queue time on concurrency between the two highest valid points."""
    (x1, x2), (y1, y2) = _last_two(each_concurrency, "concurrency"), _last_two(each_queue_ms_mean, "queue_ms_mean")
    return loglog_slope(x1, y1, x2, y2)


@round_quantity(unit="")
def prefill_loglog_slope(each_concurrency: Sequence[float | None],
                         each_prefill_ms_mean: Sequence[float | None]) -> float:
    """Local power-law exponent of the mean prefill time on concurrency between the two highest valid points."""
    (x1, x2), (y1, y2) = (_last_two(each_concurrency, "concurrency"),
                          _last_two(each_prefill_ms_mean, "prefill_ms_mean"))
    return loglog_slope(x1, y1, x2, y2)


@round_quantity(unit="")
def crossover_concurrency(each_concurrency: Sequence[float | None], each_queue_ms_mean: Sequence[float | None],
                          each_prefill_ms_mean: Sequence[float | None], queue_loglog_slope: float,
                          prefill_loglog_slope: float) -> float:
    """Concurrency where the queue and prefill power laws of the two highest valid points meet."""
    c_last = _last_two(each_concurrency, "concurrency")[1]
    queue_prev, queue_last = _last_two(each_queue_ms_mean, "queue_ms_mean")
    prefill_last = _last_two(each_prefill_ms_mean, "prefill_ms_mean")[1]
    return power_law_crossover(c_last, prefill_last, queue_last, queue_loglog_slope, prefill_loglog_slope,
                               queue_prev)


@round_quantity(unit="×")
def prefill_growth(each_prefill_ms_mean: Sequence[float | None]) -> float:
    """Mean prefill time at the highest valid point over the lowest's."""
    return _growth(each_prefill_ms_mean, "prefill_ms_mean")


@round_quantity(unit="×")
def output_tok_s_growth(each_output_tok_s: Sequence[float | None]) -> float:
    """Output throughput at the highest valid point over the lowest's."""
    return _growth(each_output_tok_s, "output_tok_s")


@round_quantity(unit="×")
def ttft_p99_growth(each_ttft_ms_p99: Sequence[float | None]) -> float:
    """TTFT p99 at the highest valid point over the lowest's."""
    return _growth(each_ttft_ms_p99, "ttft_ms_p99")


# Each valid point of a concurrency sweep against the one before it (prev_<name>) and against
# the single stream, the first valid point (first_valid_<name>): what each step up bought and cost.

@point_quantity(unit="×")
def tput_growth_from_prev(output_tok_s: float, prev_output_tok_s: float) -> float:
    """Output throughput over the previous valid point's."""
    return ratio(output_tok_s, prev_output_tok_s)


@point_quantity(unit="×")
def ttft_p99_growth_from_prev(ttft_ms_p99: float, prev_ttft_ms_p99: float) -> float:
    """TTFT p99 over the previous valid point's."""
    return ratio(ttft_ms_p99, prev_ttft_ms_p99)


@point_quantity(unit="ms")
def ttft_p99_envelope_ms(ttft_ms_p99: float, prev_ttft_p99_envelope_ms: float | None = None) -> float:
    """TTFT p99's monotone envelope from the lowest valid point up: the larger of this point's and the envelope so far, ms."""
    # A dip below an earlier point is noise, not a step that bought latency back: the next
    # rise is measured from the highest TTFT p99 already seen.
    return running_max(ttft_ms_p99, prev_ttft_p99_envelope_ms)


@point_quantity(unit="×")
def ttft_p99_envelope_growth_from_prev(ttft_p99_envelope_ms: float, prev_ttft_p99_envelope_ms: float) -> float:
    """TTFT p99's envelope over the previous valid point's."""
    return ratio(ttft_p99_envelope_ms, prev_ttft_p99_envelope_ms)


@point_quantity(unit="ms")
def itl_p99_with_prefill_predicted(concurrency: int, first_valid_concurrency: int, first_valid_closed_loop: bool,
                                   first_valid_itl_ms_p50: float, first_valid_prefill_ms_mean: float) -> float:
    """At C=2, a decode step that also carries the other stream's whole prefill, from the single stream's ITL p50 and prefill, ms."""
    # The step from one stream to two: one request's prefill landing in the other's decode step
    # predicts the ITL tail, each from what the single stream measured alone.
    if not (first_valid_concurrency == 1 and first_valid_closed_loop and concurrency == 2):
        raise Absent("reason.not_step_to_two_streams")
    return RF.step_with_prefill_ms(first_valid_itl_ms_p50, first_valid_prefill_ms_mean)


@point_quantity(unit="×")
def itl_p99_over_prefill_step(itl_ms_p99: float, itl_p99_with_prefill_predicted: float) -> float:
    """ITL p99 at C=2 over the decode step predicted to carry the other stream's prefill."""
    return ratio(itl_ms_p99, itl_p99_with_prefill_predicted)


@point_quantity(unit="ms")
def ttft_p99_behind_step_predicted(first_valid_ttft_ms_p99: float, itl_p99_with_prefill_predicted: float) -> float:
    """At C=2, a first token that waits behind that step: the single stream's TTFT p99 plus the whole step, ms."""
    return RF.ttft_behind_step_ms(first_valid_ttft_ms_p99, itl_p99_with_prefill_predicted)


@point_quantity(unit="×")
def ttft_p99_over_behind_step(ttft_ms_p99: float, ttft_p99_behind_step_predicted: float) -> float:
    """TTFT p99 at C=2 over the first token predicted to wait behind the prefill step."""
    return ratio(ttft_ms_p99, ttft_p99_behind_step_predicted)


def _fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float, float]:
    if len(xs) != len(ys) or len(xs) < 2:
        raise Absent("reason.fit_two_points")
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        raise Absent("reason.x_all_equal")
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    slope = sxy / sxx
    intercept = my - slope * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - (intercept + slope * x)) ** 2 for x, y in zip(xs, ys))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return slope, intercept, r2


def fit_slope(xs: list, ys: list) -> float:
    """Least-squares slope of y on x."""
    return _fit(xs, ys)[0]


def fit_intercept(xs: list, ys: list) -> float:
    """Least-squares intercept of y on x."""
    return _fit(xs, ys)[1]


def fit_r_squared(xs: list, ys: list) -> float:
    """Coefficient of determination R² of the least-squares line of y on x."""
    if len(xs) < 3:
        raise Absent("reason.r2_two_points")
    return _fit(xs, ys)[2]


# -------------------------------------------------------------- KV

def kv_tokens_in_use(usage_fraction: float, pool_tokens: float) -> float:
    """Tokens held in the KV cache: usage fraction times the pool in tokens."""
    return usage_fraction * pool_tokens


def kv_occupancy(concurrency: float, input_len: float, output_len: float, pool_tokens: float) -> float:
    """Theoretical KV occupancy C·(L+out)/pool (blocks not rounded)."""
    return concurrency * (input_len + output_len) / pool_tokens


@round_quantity(unit="ms")
def decode_floor_ms(decode_read_bytes: float, peak_bandwidth: float) -> float:
    """The shortest decode step: the weight bytes a step reads, once, at the peak bandwidth, in ms.

    A dense model's step reads every matrix and the LM head whatever the batch (the input
    embedding only gathers rows); its KV reads come on top.
    """
    if peak_bandwidth <= 0:
        raise Absent("reason.denominator_zero")
    return decode_read_bytes / peak_bandwidth * 1e3


def requests_that_fit(pool_tokens: float, request_tokens: float) -> int:
    """Whole requests of REQUEST_TOKENS each that the pool's POOL_TOKENS hold at once."""
    if request_tokens <= 0:
        raise Absent("reason.denominator_zero")
    return int(pool_tokens // request_tokens)


def peak_at_clock(peak: float, clock_mhz: float, max_clock_mhz: float) -> float:
    """A datasheet peak at the boost clock scaled to the clock the GPU ran at."""
    if max_clock_mhz <= 0:
        raise Absent("reason.denominator_zero")
    return peak * clock_mhz / max_clock_mhz


def giga(value: float) -> float:
    """A value in units of 10^9."""
    return value / 1e9


def tera(value: float) -> float:
    """A value in units of 10^12."""
    return value / 1e12


def pool_tokens_agreement(log_tokens: float, metric_tokens: float) -> float:
    """Relative difference between the pool size from the log and from cache_config_info."""
    return (metric_tokens - log_tokens) / log_tokens


def minimum(values: list) -> float:
    """The smallest of a list of values."""
    if not values:
        raise Absent("reason.no_values")
    return min(values)


def maximum(values: list) -> float:
    """The largest of a list of values."""
    if not values:
        raise Absent("reason.no_values")
    return max(values)


def running_max(value: float, envelope: float | None = None) -> float:
    """The monotone envelope from below: the larger of this value and the envelope so far."""
    return value if envelope is None else max(value, envelope)


def loop_lag_p99_ms(client_samples: list, t_start: float, t_end: float) -> float:
    """p99 of the client's own event-loop delay inside the window, ms (the client's lag)."""
    return loop_lag_ms_quantile(client_samples, t_start, t_end, 99)


@point_quantity(unit="ms")
def client_lag_ms_p50(client_samples: list, measure_window: tuple[float, float]) -> float:
    """Median of the client's own event-loop delay inside the point's window, ms."""
    return loop_lag_ms_quantile(client_samples, *measure_window, 50)


def loop_lag_ms_quantile(client_samples: list, t_start: float, t_end: float, q: float) -> float:
    """The q-th percentile of the client's event-loop delay inside the window, ms."""
    from report.derive.stats import percentile
    vals = [s["loop_lag_s"] * 1e3 for s in client_samples if t_start <= s["t"] <= t_end]
    if not vals:
        raise Absent("reason.no_client_lag")
    return percentile(vals, q)


def _read_samples(client_samples: list, t_start: float, t_end: float) -> list:
    rows = [s for s in client_samples if t_start <= s["t"] <= t_end and "reads" in s]
    if not rows:
        raise Absent("reason.no_read_counters")
    return rows


@point_quantity(unit="fraction")
def kernel_stamped_read_share(client_samples: list, t_start: float, t_end: float) -> float:
    """Share of the client's stream reads in the window timed by the kernel's receive stamp."""
    rows = _read_samples(client_samples, t_start, t_end)
    reads = sum(s["reads"] for s in rows)
    if not reads:
        raise Absent("reason.no_stream_reads")
    return sum(s["reads_kernel_stamped"] for s in rows) / reads


@point_quantity(unit="fraction")
def packet_stamped_read_share(client_samples: list, t_start: float, t_end: float) -> float:
    """Share of the client's stream reads in the window whose every byte was timed by its own TCP segment's arrival (packet ring)."""
    rows = _read_samples(client_samples, t_start, t_end)
    if not any("reads_packet_stamped" in s for s in rows):
        raise Absent("reason.no_packet_ring")
    reads = sum(s["reads"] for s in rows)
    if not reads:
        raise Absent("reason.no_stream_reads")
    return sum(s.get("reads_packet_stamped", 0) for s in rows) / reads


def socket_wait_p99_ms(client_samples: list, t_start: float, t_end: float) -> float:
    """p99 over the window's lag samples of the longest socket-buffer wait of stream bytes timed by their read, ms.

    Each 0.5 s sample holds the longest time bytes waited before the client read them, known
    from kernel-stamped reads only; a p99, not the max: one stall of the host is not the rule.
    Reads whose bytes were all timed by their segments' arrival (packet ring) add no wait:
    their times do not depend on when they were read.
    """
    from report.derive.stats import percentile
    rows = [s for s in _read_samples(client_samples, t_start, t_end) if s["reads_kernel_stamped"]]
    if not rows:
        raise Absent("reason.no_kernel_stamp")
    return percentile([s["read_wait_max_s"] * 1e3 for s in rows], 99)


def client_timing_error_bound_ms(client_samples: list, t_start: float, t_end: float) -> float:
    """How late the client may have timed a chunk in the window, ms.

    Every read kernel-stamped: the p99 socket-buffer wait of bytes timed by their read (a
    read that holds several events gives the older ones the newest one's stamp; a lone event
    is timed exactly; bytes timed by their own segment's arrival wait for nothing, so with
    every read segment-stamped the bound is 0). Otherwise: the p99 of the event-loop delay
    (a chunk is timed when the loop reads it).
    """
    try:
        if kernel_stamped_read_share(client_samples, t_start, t_end) == 1.0:
            return socket_wait_p99_ms(client_samples, t_start, t_end)
    except Absent:
        pass
    return loop_lag_p99_ms(client_samples, t_start, t_end)


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


def identity_of(value: float) -> float:
    """The same value under another name: carried over from another round, or the source chosen."""
    return value


def interpolate(x: float, xs: list, ys: list) -> float:
    """Linear interpolation of y at x between measured (xs, ys) points, xs ascending."""
    if len(xs) < 2 or not xs[0] <= x <= xs[-1]:
        raise Absent("reason.outside_range_no_extrapolation")
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    raise Absent("reason.outside_range")


def counter_rate_series(scrapes: list, name: str) -> list[tuple[float, float]]:
    """(t, per-second rate) of counter NAME between consecutive successful scrapes; a drop (restart) is skipped."""
    pts = []
    for s in scrapes:
        if not s.get("ok"):
            continue
        try:
            pts.append((s["t"], series.scrape_value(s["samples"], name)))
        except Absent:
            continue
    out = []
    for (t0, v0), (t1, v1) in zip(pts, pts[1:]):
        if t1 > t0 and v1 >= v0:
            out.append(((t0 + t1) / 2, (v1 - v0) / (t1 - t0)))
    if not out:
        raise Absent("reason.too_few_scrapes_carry", name=name)
    return out


def kv_memory_gib(tokens: float, kv_bytes_per_token: float) -> float:
    """GiB of KV cache that TOKENS tokens take at KV_BYTES_PER_TOKEN (what `--kv-cache-memory` must give them)."""
    return tokens * kv_bytes_per_token / 2**30


def counter_rate_max(scrapes: list, name: str) -> float:
    """The largest per-second rate of counter NAME between two consecutive successful scrapes."""
    return max(r for _, r in counter_rate_series(scrapes, name))


def counter_rate_intervals_above(scrapes: list, name: str, threshold: float) -> int:
    """How many scrape intervals carried counter NAME faster than THRESHOLD per second."""
    return sum(1 for _, r in counter_rate_series(scrapes, name) if r > threshold)


def gauge_peak(scrapes: list, t_start: float, t_end: float, name: str, agg: str = "sum") -> float:
    """Largest sample of gauge NAME in the window, its series combined by AGG."""
    return series.peak_value(series.gauge_values(scrapes, t_start, t_end, name, agg=agg))


# The point's server-side decomposition and the client's own lag, each key one function.
@point_quantity(unit="ms")
def client_lag_ms_p99(client_samples: list, t_start: float, t_end: float) -> float:
    """p99 of the client's own event-loop delay inside the point's window, ms."""
    return loop_lag_p99_ms(client_samples, t_start, t_end)


@point_quantity(unit="ms")
def socket_wait_ms_p99(client_samples: list, t_start: float, t_end: float) -> float:
    """p99 of the longest socket-buffer wait of stream bytes timed by their read, inside the point's window, ms."""
    return socket_wait_p99_ms(client_samples, t_start, t_end)


@point_quantity(unit="ms")
def client_timing_error_ms(client_samples: list, t_start: float, t_end: float) -> float:
    """How late the client may have timed a chunk inside the point's window, ms."""
    return client_timing_error_bound_ms(client_samples, t_start, t_end)


@point_quantity(unit="fraction")
def client_lag_share_of_itl(client_timing_error_ms: float, itl_ms_p50: float) -> float:
    """The client's timing error bound as a share of the median ITL."""
    return ratio(client_timing_error_ms, itl_ms_p50)


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


# ---------------------------------------------------------------- the round's pool and the model's sizes
# Round quantities over the pool cache_config_info states (`pool_tokens_metrics`, `block_size`,
# series.py), what the server log states (serverlog.py), the round's raw `model_config` and the
# GPU's datasheet peaks (`peak_flops`, `peak_bandwidth`: power.py).

Config = Mapping[str, Any]


def _given(value: Any, absent: Absent) -> Any:
    """VALUE, or ABSENT (raised) where there is none."""
    if value is None:
        raise absent
    return value


@round_quantity(unit="fraction")
def pool_agreement(pool_tokens_log: int, pool_tokens_metrics: int) -> float:
    """Relative difference between the pool size from the log and from cache_config_info."""
    return pool_tokens_agreement(pool_tokens_log, pool_tokens_metrics)


@round_quantity(unit="tok")
def pool_tokens(pool_tokens_metrics: int | None = None, pool_tokens_log: int | None = None) -> int:
    """KV pool size in tokens: cache_config_info's where it is stated, else the server log's."""
    if pool_tokens_metrics is not None:
        return pool_tokens_metrics
    return _given(pool_tokens_log, Absent("reason.no_pool_size"))


@round_quantity(unit="tok")
def pool_tokens_usable(pool_tokens: int, block_size: int) -> int:
    """Pool tokens vLLM's usage gauge is a fraction of: one block (the null block) fewer."""
    return usable_pool_tokens(pool_tokens, block_size)


@round_quantity(unit="tok")
def pool_tokens_from_memory(kv_memory_gib: float, kv_bytes_per_token: int, block_size: int) -> int:
    """The pool from memory: the KV memory the log states ÷ the architecture's bytes per token (whole blocks)."""
    return T.kv_pool_tokens_from_gib(kv_memory_gib, kv_bytes_per_token, block_size)


@round_quantity(unit="tok")
def pool_tokens_sized(pool_tokens_log: int | None = None, blocks_before_override: int | None = None,
                      block_size: int | None = None) -> int:
    """The pool vLLM sized from memory: the blocks before an override × the block size, else the log's pool."""
    if blocks_before_override is not None:
        return product(blocks_before_override, _given(block_size, Absent("reason.input_none", input="block_size")))
    return _given(pool_tokens_log, Absent("reason.input_none", input="pool_tokens_log"))


@round_quantity(unit="fraction")
def pool_memory_agreement(pool_tokens_from_memory: int, pool_tokens_sized: int) -> float:
    """Relative difference of the pool from memory from the pool vLLM sized."""
    return relative_difference(pool_tokens_from_memory, pool_tokens_sized)


@round_quantity(unit="GiB")
def kv_cache_memory_suggested_gib(kv_cache_memory_suggested_bytes: int) -> float:
    """The KV cache memory the server log suggests, in GiB."""
    return ratio(kv_cache_memory_suggested_bytes, 2**30)



@round_quantity(unit="")
def kv_cache_dtype(engine_command: Any = None, log: Any = None) -> str:
    """The KV cache's dtype the round's server ran with (--kv-cache-dtype in its launch command or log; "auto" is the model's own dtype)."""
    return server_flag("--kv-cache-dtype", engine_command, None, getattr(log, "non_default_args", None)) or "auto"


@round_quantity(unit="B")
def kv_bytes_per_token(model_config: Config, kv_cache_dtype: str = "auto") -> int:
    """KV bytes per token from the architecture (every layer's K and V) in the KV cache's dtype (the model's own unless --kv-cache-dtype says otherwise)."""
    return T.model_kv_bytes_per_token(model_config, kv_cache_dtype or "auto")


@round_quantity(unit="B")
def kv_bytes_per_token_mha(model_config: Config) -> int:
    """KV bytes per token if every head had its own KV head (multi-head attention)."""
    return T.model_mha_kv_bytes_per_token(model_config)


@round_quantity(unit="")
def params_non_embedding(model_config: Config) -> int:
    """Parameters outside the embeddings, from the config."""
    return PA.model_params_non_embedding(model_config)


@round_quantity(unit="B")
def weight_bytes(model_config: Config) -> int:
    """Bytes the model's weights occupy, from the config."""
    return PA.model_weight_bytes(model_config)


@round_quantity(unit="GB")
def weight_gb(weight_bytes: int) -> float:
    """Bytes the model's weights occupy, in GB."""
    return giga(weight_bytes)


@round_quantity(unit="B")
def decode_read_bytes(model_config: Config) -> int:
    """Weight bytes one decode step reads (every matrix and the LM head; the input embedding only gathers rows)."""
    return PA.model_decode_read_bytes(model_config)


@round_quantity(unit="GB")
def decode_read_gb(decode_read_bytes: int) -> float:
    """Weight bytes one decode step reads, in GB."""
    return giga(decode_read_bytes)


@round_quantity(unit="FLOP/B")
def ridge(peak_flops: float, peak_bandwidth: float) -> float:
    """The roofline's ridge point: peak FLOP/s ÷ peak memory bandwidth (FLOP per byte)."""
    return T.ridge_flops_per_byte(peak_flops, peak_bandwidth)


@round_quantity(unit="TFLOP/s")
def peak_tflops(peak_flops: float) -> float:
    """The GPU's dense tensor peak in TFLOP/s."""
    return tera(peak_flops)


@round_quantity(unit="TB/s")
def peak_tb_s(peak_bandwidth: float) -> float:
    """The GPU's peak memory bandwidth in TB/s."""
    return tera(peak_bandwidth)


# Single scrape intervals of vLLM's FLOP counter over the round, against the peak no GPU can pass.

@round_quantity(unit="FLOP/s")
def flop_rate_interval_max(scrapes: list) -> float:
    """The largest per-second rate of vLLM's FLOP counter between two consecutive successful scrapes."""
    return counter_rate_max(scrapes, series.MFU_FLOPS)


@round_quantity(unit="TFLOP/s")
def tflops_interval_max(flop_rate_interval_max: float) -> float:
    """The largest per-second rate of vLLM's FLOP counter over one scrape interval, in TFLOP/s."""
    return tera(flop_rate_interval_max)


@round_quantity(unit="")
def flop_intervals_over_peak(scrapes: list, peak_flops: float) -> int:
    """How many scrape intervals carried vLLM's FLOP counter faster than the GPU's dense peak."""
    return counter_rate_intervals_above(scrapes, series.MFU_FLOPS, peak_flops)
