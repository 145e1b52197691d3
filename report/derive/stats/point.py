"""A point's client statistics as quantities: its settings and counts, latency percentiles, throughput, scaling, an open loop's, the lengths sent."""

from __future__ import annotations

import numpy as np

from bundle.request_table.table import RequestTable, as_request_table
from report.derive.stats.samples import (
    e2es_from_schedule_ms,
    e2es_ms,
    itl_gaps_ms,
    mean,
    percentile,
    slot_waits_ms,
    tpots_ms,
    ttfts_from_schedule_ms,
    ttfts_ms,
)
from report.ledger import Absent
from report.registry import DOES_NOT_APPLY, point_quantity


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
