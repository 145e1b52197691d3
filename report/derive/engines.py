"""Several engines behind a round (data parallel): each one's quantities kept apart, their sums,
and how evenly the load was spread over them.

An engine is one (`endpoint`, `engine`) label pair of the scrapes' samples: `endpoint` the
server's index in a round against several endpoints (bundle format 3), `engine` vLLM's own
data-parallel rank behind one endpoint. A round against one server without data parallelism
has one engine. Per-engine quantities are tuples in `engine_names` order (endpoint, then rank,
numerically); a quantity any engine lacks is absent, naming the engine.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Mapping, Sequence

import numpy as np

from bundle.metric_keys import ENDPOINT_LABEL, split_key
from bundle.request_table import RequestTable, as_request_table
from report.derive import series
from report.ledger import Absent
from report.registry import point_quantity

# The labels that tell engines apart, outermost first.
ENGINE_LABELS = (ENDPOINT_LABEL, "engine")
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = "vllm:kv_cache_usage_perc"
GENERATION = "vllm:generation_tokens_total"
FINISHED = "vllm:request_success_total"

Engine = Mapping[str, str]


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


def engine_name(engine: Engine) -> str:
    """An engine's name: its endpoint and rank labels joined by "/" ("1/0"), or its rank alone."""
    return "/".join(engine[k] for k in ENGINE_LABELS if k in engine) or "-"


def _engines(scrapes: Sequence[Mapping], t_start: float, t_end: float) -> list[dict[str, str]]:
    found = engines_of(scrapes, t_start, t_end, RUNNING)
    if not found:
        raise Absent("reason.no_running_gauge", metric=RUNNING)
    return found


def _mean(values: Sequence[float]) -> float:
    # gauge_values gives at least one value or raises Absent.
    return math.fsum(values) / len(values)


def _each(engines: list[dict[str, str]], value) -> tuple[float, ...]:
    """VALUE(engine) for each engine; absent, naming the engine, when one has none."""
    out = []
    for e in engines:
        try:
            out.append(float(value(e)))
        except Absent as a:
            raise Absent("reason.engine_absent", engine=engine_name(e), cause=a.reason) from None
    return tuple(out)


@point_quantity(unit="")
def engine_names(steady_scrapes: list, steady_start: float, steady_end: float) -> tuple[str, ...]:
    """The engines that reported requests running in the point's steady window, by endpoint and rank ("1/0": endpoint 1, rank 0)."""
    return tuple(engine_name(e) for e in _engines(steady_scrapes, steady_start, steady_end))


@point_quantity(unit="engine")
def engine_count(engine_names: tuple[str, ...]) -> int:
    """How many engines served the point (endpoints times data-parallel ranks)."""
    return len(engine_names)


@point_quantity(unit="req")
def engine_running_mean(steady_scrapes: list, steady_start: float, steady_end: float) -> tuple[float, ...]:
    """Each engine's mean of the running-requests gauge over the point's steady window."""
    return _each(_engines(steady_scrapes, steady_start, steady_end), lambda e: _mean(
        series.gauge_values(steady_scrapes, steady_start, steady_end, RUNNING, e)))


@point_quantity(unit="req")
def engine_waiting_mean(steady_scrapes: list, steady_start: float, steady_end: float) -> tuple[float, ...]:
    """Each engine's mean of the waiting-requests gauge over the point's steady window."""
    return _each(_engines(steady_scrapes, steady_start, steady_end), lambda e: _mean(
        series.gauge_values(steady_scrapes, steady_start, steady_end, WAITING, e)))


@point_quantity(unit="fraction")
def engine_kv_usage_p50(steady_scrapes: list, steady_start: float, steady_end: float) -> tuple[float, ...]:
    """Each engine's median of the KV cache usage gauge over the point's steady window."""
    return _each(_engines(steady_scrapes, steady_start, steady_end), lambda e: series.median_value(
        series.gauge_values(steady_scrapes, steady_start, steady_end, KV_USAGE, e)))


@point_quantity(unit="tok/s")
def engine_output_tok_s(scrapes: list, bracket_start: float, bracket_end: float,
                        engine_names: tuple[str, ...]) -> tuple[float, ...]:
    """Each engine's output tokens per second (its generation-token counter) over the point's bracketing scrapes."""
    return _each(_by_name(scrapes, bracket_start, bracket_end, engine_names),
                 lambda e: series.counter_rate(scrapes, bracket_start, bracket_end, GENERATION, e))


@point_quantity(unit="req")
def engine_requests_finished(scrapes: list, bracket_start: float, bracket_end: float,
                             engine_names: tuple[str, ...]) -> tuple[float, ...]:
    """Each engine's finished requests (its request-success counter) over the point's bracketing scrapes."""
    return _each(_by_name(scrapes, bracket_start, bracket_end, engine_names),
                 lambda e: series.counter_increase(scrapes, bracket_start, bracket_end, FINISHED, e))


def _by_name(scrapes: list, t_start: float, t_end: float, names: tuple[str, ...]) -> list[dict[str, str]]:
    """The engines of NAMES (the steady window's), as label selectors over the window's scrapes."""
    seen = {engine_name(e): e for e in engines_of(scrapes, t_start, t_end, RUNNING)}
    return [seen.get(n) or _missing(n) for n in names]


def _missing(name: str) -> dict[str, str]:
    raise Absent("reason.engine_not_in_window", engine=name)


@point_quantity(unit="req")
def engines_running_total(engine_running_mean: tuple[float, ...]) -> float:
    """The engines' mean running requests, summed: the requests in flight of the whole deployment."""
    return math.fsum(engine_running_mean)


@point_quantity(unit="req")
def engines_waiting_total(engine_waiting_mean: tuple[float, ...]) -> float:
    """The engines' mean waiting requests, summed."""
    return math.fsum(engine_waiting_mean)


@point_quantity(unit="fraction")
def engines_kv_usage_mean(engine_kv_usage_p50: tuple[float, ...]) -> float:
    """The engines' median KV cache usage, averaged over the engines (each pool a share of its own)."""
    return math.fsum(engine_kv_usage_p50) / len(engine_kv_usage_p50)


@point_quantity(unit="tok/s")
def engines_output_tok_s_total(engine_output_tok_s: tuple[float, ...]) -> float:
    """The engines' output tokens per second, summed: the deployment's server-side throughput."""
    return math.fsum(engine_output_tok_s)


@point_quantity(unit="req")
def engines_requests_finished_total(engine_requests_finished: tuple[float, ...]) -> float:
    """The engines' finished requests over the point, summed."""
    return math.fsum(engine_requests_finished)


def max_over_mean(values: Sequence[float]) -> float:
    """The largest of VALUES over their mean: 1 when evenly spread, n when one holds everything."""
    if len(values) < 2:
        raise Absent("reason.one_engine")
    mean = math.fsum(values) / len(values)
    if mean <= 0:
        raise Absent("reason.engines_all_idle")
    return max(values) / mean


@point_quantity(unit="×")
def engine_token_balance(engine_output_tok_s: tuple[float, ...]) -> float:
    """The busiest engine's output tokens per second over the engines' mean (1 = evenly spread)."""
    return max_over_mean(engine_output_tok_s)


@point_quantity(unit="×")
def engine_running_balance(engine_running_mean: tuple[float, ...]) -> float:
    """The engine with the most requests running (mean) over the engines' mean (1 = evenly spread)."""
    return max_over_mean(engine_running_mean)


def plan_endpoints(manifest: Mapping) -> list[str]:
    """The endpoints a bundle's plan names, in order: `engine.endpoints`, else its one `endpoint`."""
    engine = (manifest.get("plan") or {}).get("engine") or {}
    return list(engine.get("endpoints") or [engine.get("endpoint") or ""])


def _endpoint_column(requests: RequestTable) -> np.ndarray:
    return as_request_table(requests).col(ENDPOINT_LABEL)


@point_quantity(unit="req")
def endpoint_requests_sent(measured: RequestTable, endpoints: list[str]) -> tuple[int, ...]:
    """How many of the point's measured requests the client sent to each endpoint, in plan order."""
    if len(endpoints) < 2:
        raise Absent("reason.one_endpoint")
    col = _endpoint_column(measured)
    if np.isnan(col).any():
        raise Absent("reason.request_without_endpoint", n=int(np.isnan(col).sum()))
    return tuple(int((col == k).sum()) for k in range(len(endpoints)))
