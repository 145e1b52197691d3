"""How many requests a point kept in flight, seen three ways, and whether its queue kept growing.

The server's gauges (running + waiting), the client's own send and end times, and Little's
law over the engine's counters (Δ`e2e_request_latency_seconds_sum` ÷ window: the mean number
of requests inside the server) are independent signals of one quantity; a gauge that the
other two contradict is stale, not a point that was not held. Each is a pure function.

A length sweep's fits over its valid points (round quantities, resolved by the phase "length fits"
alone): how peak KV and ITL grow with the prompt, how throughput diverges, and the longest
prompt the pool holds at the sweep's concurrency.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Mapping, Sequence

import numpy as np

from bundle.metric_keys import ENDPOINT_LABEL, split_key
from bundle.request_table import RequestTable, as_request_table
from bundle.schema import TRACE_BLOCK_TOKENS
from report.architecture import theory as T
from report.derive import analyses as A
from report.derive import series
from report.derive.analyses import ratio
from report.derive.validity import LATE_SEND_MS
from report.ledger import Absent
from report.registry import point_quantity, round_quantity

E2E = "vllm:e2e_request_latency_seconds"
# The engine's and the client's means describe one population when their counts are this close.
POPULATION_SLACK = 0.1
SUCCESS = "vllm:request_success_total"


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
    delta = series.histogram_increase(scrapes, t_start, t_end, E2E)
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
    return 1e3 * series.histogram_window_mean(population_scrapes, population_start, population_end, E2E)


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
    delta = series.histogram_increase(span_scrapes, t_start, t_end, E2E)
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
        if len(series.scrapes_in_window(scrapes, lo, hi)) < 3:
            raise Absent("reason.too_few_scrapes_halves")
    a = series.counter_increase(scrapes, t_start, mid, "vllm:generation_tokens_total")
    b = series.counter_increase(scrapes, mid, t_end, "vllm:generation_tokens_total")
    if a <= 0:
        raise Absent("reason.mfu_counters_still")
    return b / a


# The admission queue at saturation: Little's law over the waiting gauge, and what the step
# budget can admit (docs/analyses.md item 23). Declared where defined (report/registry.py).

@point_quantity(unit="req")
def waiting_mean(steady_waiting: list[float]) -> float:
    """Mean of the waiting-requests gauge over the point's steady window."""
    if not steady_waiting:
        raise Absent("reason.no_waiting_gauge", metric="vllm:num_requests_waiting")
    return float(np.mean(steady_waiting))


@point_quantity(unit="ms")
def queue_ms_little(waiting_mean: float, req_s: float) -> float:
    """Little's law: the mean wait in the queue that so many waiting requests imply at the point's request rate."""
    return ratio(waiting_mean, req_s, scale=1e3)


@point_quantity(unit="×")
def queue_over_little(queue_ms_mean: float, queue_ms_little: float) -> float:
    """The server's measured mean queue time over the one Little's law predicts."""
    return ratio(queue_ms_mean, queue_ms_little)


@point_quantity(unit="req/s")
def admission_capacity_req_s(prompts_per_step: float, engine_steps_per_s: float) -> float:
    """Prompts per second the step budget can admit: prompts a step times steps per second."""
    return prompts_per_step * engine_steps_per_s


@point_quantity(unit="fraction")
def admission_use(req_s: float, admission_capacity_req_s: float) -> float:
    """The share of the step budget's admission capacity the point's request rate used."""
    return ratio(req_s, admission_capacity_req_s)


@point_quantity(unit="")
def prompts_per_step(max_num_batched_tokens: int, server_running_median: float, input_len: int,
                     engine_count: int = 1) -> float:
    """Prompts one engine step can admit: the step budget less one token per decode that engine runs (the summed running over the engines), over the prompt length."""
    room = max_num_batched_tokens - server_running_median / max(engine_count or 1, 1)
    if room <= 0 or not input_len:
        raise Absent("reason.denominator_zero")
    return room / input_len


@point_quantity(unit="ms", after_valid_points=True)
def queue_ms_wave(waiting_peak: float, prompts_per_step: float, itl_tail_ms_predicted: float,
                  engine_count: int = 1) -> float:
    """The mean wait of a wave of waiting prompts admitted a step-budget's worth at a time: half the steps it takes each engine to drain its share, each as long as a step full of prefill."""
    return waiting_peak / max(engine_count or 1, 1) / prompts_per_step * itl_tail_ms_predicted / 2


@point_quantity(unit="×", after_valid_points=True)
def queue_over_wave(queue_ms_mean: float, queue_ms_wave: float) -> float:
    """The server's measured mean queue time over the one a draining wave predicts."""
    return ratio(queue_ms_mean, queue_ms_wave)


@point_quantity(unit="tok")
def prefix_cache_queries(scrapes: list, bracket_start: float, bracket_end: float) -> float:
    """Prompt tokens the prefix cache was asked for in the point's window: Δvllm:prefix_cache_queries_total."""
    return series.counter_increase(scrapes, bracket_start, bracket_end, "vllm:prefix_cache_queries_total")


@point_quantity(unit="fraction")
def prefix_cache_hit_rate(prefix_cache_hits: float, prefix_cache_queries: float) -> float:
    """The prefix cache's hit rate in the window: Δhits ÷ Δqueries (tokens)."""
    if prefix_cache_queries <= 0:
        raise Absent("reason.no_prefix_cache_queries")
    return prefix_cache_hits / prefix_cache_queries


@point_quantity(unit="fraction")
def prefix_cache_hit_rate_expected(block_size: int, workload_kind: str, input_len: int | None = None,
                                   shared_prefix_len: int | None = None, trace_requests=None) -> float:
    """The hit rate the prompts' shared tokens allow: vLLM caches whole blocks, so the whole blocks of a shared prefix (or of the trace blocks an earlier request sent) over the prompt tokens."""
    if not block_size:
        raise Absent("reason.denominator_zero")
    if trace_requests is not None:
        # A trace request's first `shared_blocks` blocks of BLOCK_TOKENS equal an earlier
        # request's; the cache can serve their whole engine blocks, never the last prompt token.
        shared = trace_requests.col("shared_blocks")
        lens = trace_requests.col("input_len")
        ok = ~(np.isnan(shared) | np.isnan(lens))
        if not ok.any() or not lens[ok].sum():
            raise Absent("reason.denominator_zero")
        cacheable = np.minimum(shared[ok].astype(float) * TRACE_BLOCK_TOKENS, lens[ok] - 1)
        return float((cacheable // block_size * block_size).sum() / lens[ok].sum())
    if shared_prefix_len is None or not input_len:
        raise Absent("reason.no_shared_prefix", kind=workload_kind)
    return (shared_prefix_len // block_size) * block_size / input_len


# Data parallel: several engines kept apart, summed, and how evenly the load was spread over
# them. An engine is one (`endpoint`, `engine`) label pair of the scrapes' samples: `endpoint`
# the server's index in a round against several endpoints (bundle format 3), `engine` vLLM's
# own data-parallel rank behind one endpoint; a round against one server without data
# parallelism has one engine. Each engine's values are items (per="engine": keys
# p.<point>.engine<k>.<name>, k its place in `engine_names` order: endpoint, then rank).

ENGINE_LABELS = series.ENGINE_LABELS     # the labels that tell engines apart, outermost first
FINISHED = "vllm:request_success_total"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = "vllm:kv_cache_usage_perc"
GENERATION = "vllm:generation_tokens_total"


@lru_cache(maxsize=1 << 14)
def _engine_of(key: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A sample key's name and its engine labels (those of ENGINE_LABELS it carries)."""
    name, labels = split_key(key)
    return name, tuple((k, labels[k]) for k in ENGINE_LABELS if k in labels)


def _order(engine: tuple[tuple[str, str], ...]) -> tuple:
    return tuple((int(v), "") if v.isdigit() else (math.inf, v) for _, v in engine)


def engines_of(scrapes: Sequence[Mapping], t_start: float, t_end: float, metric: str) -> list[dict[str, str]]:
    """The engines (their ENGINE_LABELS) whose METRIC is in the window's answered scrapes, in order."""
    found: set[tuple[tuple[str, str], ...]] = set()
    for s in series.scrapes_in_window(scrapes, t_start, t_end):
        for k in s["samples"]:
            name, engine = _engine_of(k)
            if name == metric:
                found.add(engine)
    return [dict(e) for e in sorted(found, key=_order)]


engine_name = series.engine_name


def engine_items(scrapes: Sequence[Mapping], t_start: float, t_end: float) -> dict[str, dict]:
    """The engines running requests in the window as items ("engine1" -> {"engine_labels": its labels}), in order."""
    try:
        engines = engines_of(scrapes, t_start, t_end, RUNNING)
    except Absent:
        # An empty window (a point interrupted before its steady part) has no engine rows; the
        # point's own quantities say why it measured nothing.
        return {}
    return {f"engine{k}": {"engine_labels": e} for k, e in enumerate(engines)}


def _engines(scrapes: Sequence[Mapping], t_start: float, t_end: float, metric: str = FINISHED) -> list[dict[str, str]]:
    found = engines_of(scrapes, t_start, t_end, metric)
    if not found:
        raise Absent("reason.no_finished_counter" if metric == FINISHED else "reason.no_running_gauge",
                     metric=metric)
    return found


@point_quantity(unit="engine")
def engines_seen(scrapes: list, bracket_start: float, bracket_end: float) -> int:
    """How many engines (vLLM's `engine` label, data-parallel ranks) reported finished requests in the point's scrapes."""
    return len(_engines(scrapes, bracket_start, bracket_end))


def max_over_mean(values: Sequence[float], of_requests: bool = False) -> float:
    """The largest of VALUES over their mean: 1 when evenly spread, n when one holds everything."""
    if len(values) < 2:
        raise Absent("reason.one_engine")
    mean = math.fsum(values) / len(values)
    if mean <= 0:
        raise (Absent("reason.no_request_finished_in_window") if of_requests
               else Absent("reason.engines_all_idle"))
    return max(values) / mean


@point_quantity(unit="×")
def engine_load_balance(scrapes: list, bracket_start: float, bracket_end: float) -> float:
    """The busiest engine's finished-request rate over the engines' mean rate in the window (1 = evenly spread; data parallel)."""
    # No counter at all leaves no engine to compare: "one engine", as fewer than two do.
    rates = [series.counter_rate(scrapes, bracket_start, bracket_end, FINISHED, e)
             for e in engines_of(scrapes, bracket_start, bracket_end, FINISHED)]
    return max_over_mean(rates, of_requests=True)


# Each engine's values, shared by its item quantities and the sums and balances over engines.

def _mean(values: Sequence[float]) -> float:
    # gauge_values gives at least one value or raises Absent.
    return math.fsum(values) / len(values)


def _running_mean(scrapes, t_start, t_end, engine: Mapping[str, str]) -> float:
    """One engine's mean of the running-requests gauge in the window."""
    return _mean(series.gauge_values(scrapes, t_start, t_end, RUNNING, engine))


def _waiting_mean(scrapes, t_start, t_end, engine: Mapping[str, str]) -> float:
    """One engine's mean of the waiting-requests gauge in the window."""
    return _mean(series.gauge_values(scrapes, t_start, t_end, WAITING, engine))


def _kv_usage_median(scrapes, t_start, t_end, engine: Mapping[str, str]) -> float:
    """One engine's median of the KV cache usage gauge in the window."""
    return series.median_value(series.gauge_values(scrapes, t_start, t_end, KV_USAGE, engine))


def _output_tok_rate(scrapes, t_start, t_end, engine: Mapping[str, str]) -> float:
    """One engine's output tokens per second (its generation-token counter) in the window."""
    return series.counter_rate(scrapes, t_start, t_end, GENERATION, engine)


def _requests_finished(scrapes, t_start, t_end, engine: Mapping[str, str]) -> float:
    """One engine's finished requests (its request-success counter) in the window."""
    return series.counter_increase(scrapes, t_start, t_end, FINISHED, engine)


def _each(scrapes, t_start: float, t_end: float, value, engines: list[dict[str, str]] | None = None) -> list[float]:
    """VALUE of each engine running requests in the window; absent, naming the engine, when one has none."""
    out = []
    for e in engines if engines is not None else _engines(scrapes, t_start, t_end, RUNNING):
        try:
            out.append(value(scrapes, t_start, t_end, e))
        except Absent as a:
            raise Absent("reason.engine_absent", engine=engine_name(e), cause=a.reason) from None
    return out


@point_quantity(unit="")
def engine_names(steady_scrapes: list, steady_start: float, steady_end: float) -> tuple[str, ...]:
    """The engines that reported requests running in the point's steady window, by endpoint and rank ("1/0": endpoint 1, rank 0)."""
    return tuple(engine_name(e) for e in _engines(steady_scrapes, steady_start, steady_end, RUNNING))


@point_quantity(unit="engine")
def engine_count(engine_names: tuple[str, ...]) -> int:
    """How many engines served the point (endpoints times data-parallel ranks)."""
    return len(engine_names)


@point_quantity(unit="", per="engine")
def engine_name_of(engine_labels: dict[str, str]) -> str:
    """This engine's name: its endpoint and data-parallel rank ("1/0"), or its rank alone."""
    return engine_name(engine_labels)


@point_quantity(unit="req", per="engine")
def engine_running_mean(steady_scrapes: list, steady_start: float, steady_end: float,
                        engine_labels: dict[str, str]) -> float:
    """This engine's mean of the running-requests gauge over the point's steady window."""
    return _running_mean(steady_scrapes, steady_start, steady_end, engine_labels)


@point_quantity(unit="req", per="engine")
def engine_waiting_mean(steady_scrapes: list, steady_start: float, steady_end: float,
                        engine_labels: dict[str, str]) -> float:
    """This engine's mean of the waiting-requests gauge over the point's steady window."""
    return _waiting_mean(steady_scrapes, steady_start, steady_end, engine_labels)


@point_quantity(unit="fraction", per="engine")
def engine_kv_usage_p50(steady_scrapes: list, steady_start: float, steady_end: float,
                        engine_labels: dict[str, str]) -> float:
    """This engine's median of the KV cache usage gauge over the point's steady window."""
    return _kv_usage_median(steady_scrapes, steady_start, steady_end, engine_labels)


@point_quantity(unit="tok/s", per="engine")
def engine_output_tok_s(scrapes: list, bracket_start: float, bracket_end: float,
                        engine_labels: dict[str, str]) -> float:
    """This engine's output tokens per second (its generation-token counter) over the point's bracketing scrapes."""
    return _output_tok_rate(scrapes, bracket_start, bracket_end, engine_labels)


@point_quantity(unit="req", per="engine")
def engine_requests_finished(scrapes: list, bracket_start: float, bracket_end: float,
                             engine_labels: dict[str, str]) -> float:
    """This engine's finished requests (its request-success counter) over the point's bracketing scrapes."""
    return _requests_finished(scrapes, bracket_start, bracket_end, engine_labels)


@point_quantity(unit="tok", per="engine")
def engine_pool_tokens(steady_scrapes: list, steady_start: float, steady_end: float,
                       engine_labels: dict[str, str]) -> int:
    """This engine's KV pool in tokens: num_gpu_blocks × block_size of its own cache_config_info in the steady window."""
    labels = series.cache_config_info(steady_scrapes, steady_start, steady_end, engine_labels=engine_labels)
    pool = series.kv_pool_tokens_from_cache_config(labels).blocks_times_block_size
    if pool is None:
        raise Absent("reason.cache_config_no_blocks")
    return pool


@point_quantity(unit="fraction", per="engine")
def engine_kv_usage_peak(steady_scrapes: list, steady_start: float, steady_end: float,
                         engine_labels: dict[str, str]) -> float:
    """This engine's peak of the KV cache usage gauge over the point's steady window (a share of its own pool)."""
    return series.peak_value(series.gauge_values(steady_scrapes, steady_start, steady_end, KV_USAGE, engine_labels))


def _engines_of_steady(steady_scrapes, steady_start, steady_end) -> list[dict[str, str]]:
    return _engines(steady_scrapes, steady_start, steady_end, RUNNING)


@point_quantity(unit="req")
def engines_running_total(steady_scrapes: list, steady_start: float, steady_end: float) -> float:
    """The engines' mean running requests over the steady window, summed: the deployment's requests in flight."""
    return math.fsum(_each(steady_scrapes, steady_start, steady_end, _running_mean))


@point_quantity(unit="req")
def engines_waiting_total(steady_scrapes: list, steady_start: float, steady_end: float) -> float:
    """The engines' mean waiting requests over the steady window, summed."""
    return math.fsum(_each(steady_scrapes, steady_start, steady_end, _waiting_mean))


@point_quantity(unit="fraction")
def engines_kv_usage_mean(steady_scrapes: list, steady_start: float, steady_end: float) -> float:
    """The engines' median KV cache usage over the steady window, averaged over the engines (each pool a share of its own)."""
    return _mean(_each(steady_scrapes, steady_start, steady_end, _kv_usage_median))


def _bracket_each(scrapes, bracket_start, bracket_end, steady_scrapes, steady_start, steady_end, value):
    # The steady window's engines, over the bracketing scrapes (counters are differenced there).
    return _each(scrapes, bracket_start, bracket_end, value,
                 _engines_of_steady(steady_scrapes, steady_start, steady_end))


@point_quantity(unit="tok/s")
def engines_output_tok_s_total(scrapes: list, bracket_start: float, bracket_end: float, steady_scrapes: list,
                               steady_start: float, steady_end: float) -> float:
    """The engines' output tokens per second over the bracketing scrapes, summed: the deployment's server-side throughput."""
    return math.fsum(_bracket_each(scrapes, bracket_start, bracket_end, steady_scrapes, steady_start,
                                   steady_end, _output_tok_rate))


@point_quantity(unit="req")
def engines_requests_finished_total(scrapes: list, bracket_start: float, bracket_end: float,
                                    steady_scrapes: list, steady_start: float, steady_end: float) -> float:
    """The engines' finished requests over the bracketing scrapes, summed."""
    return math.fsum(_bracket_each(scrapes, bracket_start, bracket_end, steady_scrapes, steady_start,
                                   steady_end, _requests_finished))


@point_quantity(unit="×")
def engine_token_balance(scrapes: list, bracket_start: float, bracket_end: float, steady_scrapes: list,
                         steady_start: float, steady_end: float) -> float:
    """The busiest engine's output tokens per second over the engines' mean (1 = evenly spread)."""
    return max_over_mean(_bracket_each(scrapes, bracket_start, bracket_end, steady_scrapes, steady_start,
                                       steady_end, _output_tok_rate))


@point_quantity(unit="×")
def engine_running_balance(steady_scrapes: list, steady_start: float, steady_end: float) -> float:
    """The engine with the most requests running (mean over the steady window) over the engines' mean (1 = evenly spread)."""
    return max_over_mean(_each(steady_scrapes, steady_start, steady_end, _running_mean))


def plan_endpoints(manifest: Mapping) -> list[str]:
    """The endpoints a bundle's plan names, in order: `engine.endpoints`, else its one `endpoint`."""
    engine = (manifest.get("plan") or {}).get("engine") or {}
    return list(engine.get("endpoints") or [engine.get("endpoint") or ""])


@point_quantity(unit="req")
def endpoint_requests_sent(measured: RequestTable, endpoints: list[str]) -> tuple[int, ...]:
    """How many of the point's measured requests the client sent to each endpoint, in plan order."""
    if len(endpoints) < 2:
        raise Absent("reason.one_endpoint")
    col = as_request_table(measured).col(ENDPOINT_LABEL)
    if np.isnan(col).any():
        raise Absent("reason.request_without_endpoint", n=int(np.isnan(col).sum()))
    return tuple(int((col == k).sum()) for k in range(len(endpoints)))


@point_quantity(unit="×")
def endpoint_request_balance(endpoint_requests_sent: tuple[int, ...]) -> float:
    """The endpoint sent the most measured requests over the endpoints' mean (1 = evenly spread; the client sends in turn)."""
    return max_over_mean(endpoint_requests_sent, of_requests=True)


# ---------------------------------------------------------------- the length sweep
# Round quantities over the valid points of a length sweep (in load order, None where a point's
# value is absent), resolved by the phase "length fits" alone: KV linearity, the ITL slope against
# its theory, how throughput diverges, and the longest prompt the pool holds at the sweep's C.

def _present(values: Sequence[float | None], name: str) -> list[float]:
    """VALUES when every one is present; Absent naming NAME otherwise."""
    if any(v is None for v in values):
        raise Absent("reason.input_none", input=name)
    return list(values)


def _last(values: Sequence[float | None], name: str) -> float:
    """The highest valid point's value."""
    return _present(values[-1:], name)[0]


@round_quantity(unit="tok/tok")
def kv_lin_slope(each_input_len: Sequence[float | None], each_kv_tokens_peak: Sequence[float | None]) -> float:
    """Least-squares slope of peak KV tokens on input length."""
    return A.fit_slope(each_input_len, _present(each_kv_tokens_peak, "kv_tokens_peak"))


@round_quantity(unit="tok")
def kv_lin_intercept(each_input_len: Sequence[float | None], each_kv_tokens_peak: Sequence[float | None]) -> float:
    """Least-squares intercept of peak KV tokens on input length."""
    return A.fit_intercept(each_input_len, _present(each_kv_tokens_peak, "kv_tokens_peak"))


@round_quantity(unit="")
def kv_lin_r2(each_input_len: Sequence[float | None], each_kv_tokens_peak: Sequence[float | None]) -> float:
    """R² of peak KV tokens on input length."""
    return A.fit_r_squared(each_input_len, _present(each_kv_tokens_peak, "kv_tokens_peak"))


@round_quantity(unit="fraction")
def kv_lin_slope_vs_theory(kv_lin_slope: float, each_concurrency: Sequence[float | None]) -> float:
    """Fitted KV slope relative to the concurrency."""
    return A.relative_difference(kv_lin_slope, _last(each_concurrency, "concurrency"))


def _held(each_effective_concurrency: Sequence[float | None], each_concurrency: Sequence[float | None]) -> list[int]:
    """The indices of the points that ran all C requests at once (the pool did not cap them)."""
    C = _last(each_concurrency, "concurrency")
    return [i for i, e in enumerate(each_effective_concurrency) if (e or 0) >= C]


@round_quantity(unit="")
def itl_fit_points(each_effective_concurrency: Sequence[float | None], each_concurrency: Sequence[float | None]) -> int:
    """Points of the length sweep that ran all C requests at once (the ITL slope's fit)."""
    return len(_held(each_effective_concurrency, each_concurrency))


def _itl_fit(each_input_len: Sequence[float | None], each_itl_ms_p50: Sequence[float | None],
             each_effective_concurrency: Sequence[float | None],
             each_concurrency: Sequence[float | None]) -> tuple[list[float], list[float]]:
    """The input lengths and ITL p50s of the points that ran all C at once; Absent with fewer than two."""
    # The ITL slope's theory has C requests reading their KV each step: only the points that ran
    # all C at once are fitted.
    held = _held(each_effective_concurrency, each_concurrency)
    if len(held) < 2:
        raise Absent("reason.itl_fit_too_few_held", held=len(held), points=len(each_concurrency))
    return [each_input_len[i] for i in held], _present([each_itl_ms_p50[i] for i in held], "itl_ms_p50")


@round_quantity(unit="ms/tok")
def itl_slope(each_input_len: Sequence[float | None], each_itl_ms_p50: Sequence[float | None],
              each_effective_concurrency: Sequence[float | None], each_concurrency: Sequence[float | None]) -> float:
    """Least-squares slope of ITL p50 on input length."""
    return A.fit_slope(*_itl_fit(each_input_len, each_itl_ms_p50, each_effective_concurrency, each_concurrency))


@round_quantity(unit="ms")
def itl_intercept(each_input_len: Sequence[float | None], each_itl_ms_p50: Sequence[float | None],
                  each_effective_concurrency: Sequence[float | None], each_concurrency: Sequence[float | None]) -> float:
    """Least-squares intercept of ITL p50 on input length."""
    return A.fit_intercept(*_itl_fit(each_input_len, each_itl_ms_p50, each_effective_concurrency, each_concurrency))


@round_quantity(unit="")
def itl_r2(each_input_len: Sequence[float | None], each_itl_ms_p50: Sequence[float | None],
           each_effective_concurrency: Sequence[float | None], each_concurrency: Sequence[float | None]) -> float:
    """R² of ITL p50 on input length."""
    return A.fit_r_squared(*_itl_fit(each_input_len, each_itl_ms_p50, each_effective_concurrency, each_concurrency))


@round_quantity(unit="ms/tok")
def itl_slope_theory(each_concurrency: Sequence[float | None], kv_bytes_per_token: float, peak_bandwidth: float) -> float:
    """Theoretical ITL growth per token of context at the sweep's C (ms): C × KV bytes per token ÷ peak bandwidth."""
    return T.itl_kv_slope_ms_per_token(_last(each_concurrency, "concurrency"), kv_bytes_per_token, peak_bandwidth)


@round_quantity(unit="fraction")
def itl_slope_vs_theory(itl_slope: float, itl_slope_theory: float) -> float:
    """Fitted ITL slope over its theory."""
    return ratio(itl_slope, itl_slope_theory)


@round_quantity(unit="fraction")
def output_tok_s_change(each_output_tok_s: Sequence[float | None]) -> float:
    """Relative change of output throughput from the shortest prompt's valid point to the longest's."""
    first, last = _present([each_output_tok_s[0], each_output_tok_s[-1]], "output_tok_s")
    return A.relative_difference(last, first)


@round_quantity(unit="fraction")
def total_tok_s_change(each_total_tok_s: Sequence[float | None]) -> float:
    """Relative change of total (prompt and output) throughput from the shortest prompt's valid point to the longest's."""
    first, last = _present([each_total_tok_s[0], each_total_tok_s[-1]], "total_tok_s")
    return A.relative_difference(last, first)


@round_quantity(unit="tok")
def pool_tokens_mha(pool_tokens: int, kv_bytes_per_token: int, kv_bytes_per_token_mha: int) -> int:
    """Tokens the same KV pool would hold with full multi-head attention's KV bytes per token."""
    return T.pool_tokens_at_kv_bytes(pool_tokens, kv_bytes_per_token, kv_bytes_per_token_mha)


@round_quantity(unit="tok")
def max_input_len_mha(pool_tokens_mha: int, each_concurrency: Sequence[float | None],
                      each_output_len: Sequence[float | None]) -> int:
    """Longest prompt that lets the sweep's C requests fit together in the pool at multi-head attention's KV size."""
    return T.max_input_len_at_concurrency(pool_tokens_mha, _last(each_concurrency, "concurrency"),
                                          _last(each_output_len, "output_len"))


@round_quantity(unit="tok")
def max_input_len(pool_tokens: int, each_concurrency: Sequence[float | None], each_output_len: Sequence[float | None]) -> int:
    """Longest prompt that lets the sweep's C requests fit together in the pool."""
    return T.max_input_len_at_concurrency(pool_tokens, _last(each_concurrency, "concurrency"),
                                          _last(each_output_len, "output_len"))
