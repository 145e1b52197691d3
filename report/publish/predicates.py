"""The relations a page's words choose by, each decided here from ledger values and policy.

A section's template picks its sentences by these names (`facts.holds.<name>`) and compares no
numbers itself: every threshold is policy (report/derive/validity.py), every relation is made
once, in code. A relation whose values are absent does not hold.
"""

from __future__ import annotations

from typing import Any, Callable

from report.derive import validity as V
from report.ledger import Ledger


def _cmp(a: Any, b: Any, op: Callable[[Any, Any], bool]) -> bool:
    return a is not None and b is not None and op(a, b)


def _lt(a: Any, b: Any) -> bool:
    return _cmp(a, b, lambda x, y: x < y)


def _le(a: Any, b: Any) -> bool:
    return _cmp(a, b, lambda x, y: x <= y)


def _eq(a: Any, b: Any) -> bool:
    return _cmp(a, b, lambda x, y: x == y)


def _more_than_one(a: Any) -> bool:
    return _lt(1, a)


def _some(a: Any) -> bool:
    return _lt(0, a)


def _all(share: Any) -> bool:
    """A share that is the whole (every read, every event)."""
    return _eq(share, 1)


# name -> its relation over x (a ledger key's value, None where absent), the headline point's
# keys ("last" + name), the first point's ("first" + name) and the round's facts.
RELATIONS: dict[str, Callable[[Callable[[str], Any], str, str, dict], bool]] = {
    # The client's reads: every one stamped by the packet ring, or by the kernel; zero gaps the
    # page explains (policy: ZERO_GAP_NOTE_SHARE).
    "packet_all_stamped": lambda x, last, first, f: _all(x(last + "packet_stamped_read_share")),
    "kernel_all_stamped": lambda x, last, first, f: _all(x(last + "kernel_stamped_read_share")),
    "zero_gaps_noted": lambda x, last, first, f: _le(V.ZERO_GAP_NOTE_SHARE, x(last + "zero_gap_share")),
    # The previous round: one shared point, or several.
    "repro_one_point": lambda x, last, first, f: f.get("repro_points") == 1,
    # Where a request's time went: less queueing than prefill; the crossover beyond the headline.
    "queue_under_prefill": lambda x, last, first, f: _lt(x(last + "queue_ms_mean"), x(last + "prefill_ms_mean")),
    "crossover_beyond": lambda x, last, first, f: _lt(x(last + "concurrency"), x("r.crossover_concurrency")),
    # What the round held fixed across its sweep.
    "fixed_c_and_output": lambda x, last, first, f: _eq(x(first + "concurrency"), x(last + "concurrency"))
    and _eq(x(first + "output_len"), x(last + "output_len")),
    "fixed_lengths_ends": lambda x, last, first, f: _eq(x(first + "input_len"), x(last + "input_len"))
    and _eq(x(first + "output_len"), x(last + "output_len")),
    # Engines and GPUs.
    "engines_several": lambda x, last, first, f: _more_than_one(x(last + "engine_count")),
    "one_gpu_sampled": lambda x, last, first, f: _eq(x(last + "gpus_sampled"), 1),
    "gpus_several": lambda x, last, first, f: _more_than_one(x(last + "gpus_sampled")),
    "tensor_parallel": lambda x, last, first, f: _more_than_one(x(last + "tensor_parallel_size")),
    "kv_heads_replicated": lambda x, last, first, f: _more_than_one(x(last + "kv_head_replicas")),
    # The KV account (policy: POOL_ROOM_SHARE, KV_CLOSE_PP).
    "scraped": lambda x, last, first, f: _some(x("r.scrapes")),
    "kv_running_short": lambda x, last, first, f: _lt(x(last + "kv_running_requests"), x(last + "concurrency")),
    "pool_near_full": lambda x, last, first, f: _le(V.POOL_ROOM_SHARE, x(last + "kv_usage_peak")),
    "prefix_saved": lambda x, last, first, f: _some(x(last + "kv_prefix_tokens_saved")),
    "kv_balances": lambda x, last, first, f: x(last + "kv_error_pp") is not None
    and abs(x(last + "kv_error_pp")) <= V.KV_CLOSE_PP,
    "kv_intercept_between": lambda x, last, first, f: _le(x("r.kv_intercept_staggered"), x("r.kv_lin_intercept"))
    and _le(x("r.kv_lin_intercept"), x("r.kv_intercept_together")),
    "input_over_model_len": lambda x, last, first, f: _lt(x("r.max_model_len"), x("r.max_input_len")),
    "input_mha_over_model_len": lambda x, last, first, f: _lt(x("r.max_model_len"), x("r.max_input_len_mha")),
    # FLOPs and bandwidth (policy: FLOPS_CLOSE, PREDICTION_TOL).
    "flops_close": lambda x, last, first, f: x(last + "flops_ratio") is not None
    and abs(x(last + "flops_ratio") - 1) < V.FLOPS_CLOSE,
    "flop_intervals_over_peak": lambda x, last, first, f: _some(x("r.flop_intervals_over_peak")),
    "dram_over_mbu": lambda x, last, first, f: _lt(x(last + "mbu"), x(last + "dram_bandwidth_share")),
    "slope_over_bandwidth": lambda x, last, first, f: _lt(1 + V.PREDICTION_TOL,
                                                          x("r.itl_slope_bandwidth_efficiency")),
    "slope_steeper": lambda x, last, first, f: _more_than_one(x("r.itl_slope_vs_theory")),
    "total_up_output_down": lambda x, last, first, f: _some(x("r.total_tok_s_change"))
    and _lt(x("r.output_tok_s_change"), 0),
    # Power (policy: CLOCK_SLOWER).
    "power_capped_some": lambda x, last, first, f: _some(x(last + "power_cap_share")),
    "clock_held": lambda x, last, first, f: _le(x(last + "sm_clock_below_max"), V.CLOCK_SLOWER),
    "power_over_limit": lambda x, last, first, f: _some(x(last + "power_peak_over_limit")),
}


def page_holds(led: Ledger, facts: dict) -> dict[str, bool]:
    """Which of RELATIONS hold for the round: at its headline point, against its first point."""
    last, first = f"p.{facts.get('headline_point')}.", f"p.{facts.get('first_point')}."
    return {name: bool(rel(led.value_of, last, first, facts)) for name, rel in RELATIONS.items()}
