"""The admission queue at saturation: Little's law over the waiting gauge, what the step budget can admit, and the prefix cache's hits.

Declared where defined (report/registry.py); docs/analyses.md item 23. The engines a point ran
on are named here too: the step budget is each engine's, so the admission quantities read
their count (resolved in this module's dependency order; each engine's values: engines.py).
"""

from __future__ import annotations

import numpy as np

from bundle.schema import TRACE_BLOCK_TOKENS
from report.derive.arith import ratio
from report.derive.load.engines import RUNNING, engine_name, engines_found
from report.derive.series import scrapes as S
from report.ledger import Absent
from report.registry import point_quantity


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
    return S.counter_increase(scrapes, bracket_start, bracket_end, "vllm:prefix_cache_queries_total")


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


# The engines the step budget is divided among (prompts_per_step reads their count).
@point_quantity(unit="")
def engine_names(steady_scrapes: list, steady_start: float, steady_end: float) -> tuple[str, ...]:
    """The engines that reported requests running in the point's steady window, by endpoint and rank ("1/0": endpoint 1, rank 0)."""
    return tuple(engine_name(e) for e in engines_found(steady_scrapes, steady_start, steady_end, RUNNING))


@point_quantity(unit="engine")
def engine_count(engine_names: tuple[str, ...]) -> int:
    """How many engines served the point (endpoints times data-parallel ranks)."""
    return len(engine_names)
