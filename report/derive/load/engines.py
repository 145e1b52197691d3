"""Data parallel: a point's engines kept apart, summed, and how evenly the load was spread over them.

An engine is one (`endpoint`, `engine`) label pair of the scrapes' samples: `endpoint` the
server's index in a round against several endpoints (bundle format 3), `engine` vLLM's own
data-parallel rank behind one endpoint; a round against one server without data parallelism
has one engine. Each engine's values are items (per="engine": keys
p.<point>.engine<k>.<name>, k its place in `engine_names` order: endpoint, then rank).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Mapping, Sequence

import numpy as np

from bundle.metric_keys import ENDPOINT_LABEL, split_key
from bundle.request_table.table import RequestTable, as_request_table
from report.derive.series import cache_config
from report.derive.series import scrapes as S
from report.ledger import Absent
from report.registry import point_quantity

ENGINE_LABELS = cache_config.ENGINE_LABELS     # the labels that tell engines apart, outermost first


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
    for s in S.scrapes_in_window(scrapes, t_start, t_end):
        for k in s["samples"]:
            name, engine = _engine_of(k)
            if name == metric:
                found.add(engine)
    return [dict(e) for e in sorted(found, key=_order)]


engine_name = cache_config.engine_name


def engine_items(scrapes: Sequence[Mapping], t_start: float, t_end: float) -> dict[str, dict]:
    """The engines running requests in the window as items ("engine1" -> {"engine_labels": its labels}), in order."""
    try:
        engines = engines_of(scrapes, t_start, t_end, RUNNING)
    except Absent:
        # An empty window (a point interrupted before its steady part) has no engine rows; the
        # point's own quantities say why it measured nothing.
        return {}
    return {f"engine{k}": {"engine_labels": e} for k, e in enumerate(engines)}


def engines_found(scrapes: Sequence[Mapping], t_start: float, t_end: float, metric: str = FINISHED) -> list[dict[str, str]]:
    """The engines whose METRIC is in the window (engines_of); Absent, naming the metric, when there are none."""
    found = engines_of(scrapes, t_start, t_end, metric)
    if not found:
        raise Absent("reason.no_finished_counter" if metric == FINISHED else "reason.no_running_gauge",
                     metric=metric)
    return found


@point_quantity(unit="engine")
def engines_seen(scrapes: list, bracket_start: float, bracket_end: float) -> int:
    """How many engines (vLLM's `engine` label, data-parallel ranks) reported finished requests in the point's scrapes."""
    return len(engines_found(scrapes, bracket_start, bracket_end))


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
    rates = [S.counter_rate(scrapes, bracket_start, bracket_end, FINISHED, e)
             for e in engines_of(scrapes, bracket_start, bracket_end, FINISHED)]
    return max_over_mean(rates, of_requests=True)


# Each engine's values, shared by its item quantities and the sums and balances over engines.

def _mean(values: Sequence[float]) -> float:
    # gauge_values gives at least one value or raises Absent.
    return math.fsum(values) / len(values)


def _running_mean(scrapes, t_start, t_end, engine: Mapping[str, str]) -> float:
    """One engine's mean of the running-requests gauge in the window."""
    return _mean(S.gauge_values(scrapes, t_start, t_end, RUNNING, engine))


def _waiting_mean(scrapes, t_start, t_end, engine: Mapping[str, str]) -> float:
    """One engine's mean of the waiting-requests gauge in the window."""
    return _mean(S.gauge_values(scrapes, t_start, t_end, WAITING, engine))


def _kv_usage_median(scrapes, t_start, t_end, engine: Mapping[str, str]) -> float:
    """One engine's median of the KV cache usage gauge in the window."""
    return S.median_value(S.gauge_values(scrapes, t_start, t_end, KV_USAGE, engine))


def _output_tok_rate(scrapes, t_start, t_end, engine: Mapping[str, str]) -> float:
    """One engine's output tokens per second (its generation-token counter) in the window."""
    return S.counter_rate(scrapes, t_start, t_end, GENERATION, engine)


def _requests_finished(scrapes, t_start, t_end, engine: Mapping[str, str]) -> float:
    """One engine's finished requests (its request-success counter) in the window."""
    return S.counter_increase(scrapes, t_start, t_end, FINISHED, engine)


def _each(scrapes, t_start: float, t_end: float, value, engines: list[dict[str, str]] | None = None) -> list[float]:
    """VALUE of each engine running requests in the window; absent, naming the engine, when one has none."""
    out = []
    for e in engines if engines is not None else engines_found(scrapes, t_start, t_end, RUNNING):
        try:
            out.append(value(scrapes, t_start, t_end, e))
        except Absent as a:
            raise Absent("reason.engine_absent", engine=engine_name(e), cause=a.reason) from None
    return out


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
    labels = cache_config.cache_config_info(steady_scrapes, steady_start, steady_end, engine_labels=engine_labels)
    pool = cache_config.kv_pool_tokens_from_cache_config(labels).blocks_times_block_size
    if pool is None:
        raise Absent("reason.cache_config_no_blocks")
    return pool


@point_quantity(unit="fraction", per="engine")
def engine_kv_usage_peak(steady_scrapes: list, steady_start: float, steady_end: float,
                         engine_labels: dict[str, str]) -> float:
    """This engine's peak of the KV cache usage gauge over the point's steady window (a share of its own pool)."""
    return S.peak_value(S.gauge_values(steady_scrapes, steady_start, steady_end, KV_USAGE, engine_labels))


def _engines_of_steady(steady_scrapes, steady_start, steady_end) -> list[dict[str, str]]:
    return engines_found(steady_scrapes, steady_start, steady_end, RUNNING)


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
