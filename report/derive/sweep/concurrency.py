"""Scaling across concurrency: the requests a point actually ran, growth and the queue/prefill crossover over the valid points, and each step up against the one before."""

from __future__ import annotations

import math
from typing import Sequence

from report.architecture import roofline as RF
from report.derive.arith import loglog_slope, ratio, running_max
from report.derive.timing.server import QUEUE_FLOOR_MS
from report.ledger import Absent
from report.registry import point_quantity, require_points, round_quantity


@point_quantity(unit="req")
def effective_concurrency(concurrency: float, server_running_median: float) -> float:
    """Requests actually holding KV: the median of running requests when the pool caps it below C, else C."""
    return min(concurrency, server_running_median)


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
