"""Each point and round against the model, as ledger quantities: the KV pool it held against the blocks its requests need, the FLOP counter against vLLM's formulas, MFU, MBU and the roofline by phase.

Every public function is named for what it returns and raises `report.ledger.Absent` with a
reason in words when its inputs cannot give a value; none returns 0 for a missing input. The
models they read are estimator.py's and kvpool.py's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bundle.request_table.table import RequestTable
from report.architecture import roofline as RF
from report.architecture import theory as T
from report.derive import arith as A
from report.derive import sizes as SZ
from report.derive.reconcile.estimator import (
    FLOPS,
    estimated_counter_increase,
    estimator_ratio,
    lifecycle_window,
    predicted_flops,
    quiet_bracketing_window,
    requests_inside_window,
)
from report.derive.reconcile.kvpool import (
    block_alignment_waste_tokens_sent,
    effective_concurrency,
    expected_kv_usage_median_fraction_effective,
    expected_kv_usage_median_fraction_sent,
    request_mean_tokens_sent_mean,
    request_peak_tokens_sent_mean,
)
from report.derive.series import cache_config
from report.ledger import Absent
from report.registry import point_quantity, require_points, round_quantity


# The intercept of peak KV tokens on input length (length sweeps at one concurrency): what
# the C streams hold beyond their prompts. Invariant: staggered ≤ together.
def _one_setting(values: Sequence[float | None], name: str) -> float:
    """The one value a setting has at every valid point (Absent when it varies or is missing)."""
    require_points(values, range(len(values)), name)
    if not values or len(set(values)) > 1:
        raise Absent("reason.setting_varies", setting=name)
    return float(values[0])


@round_quantity(unit="tok")
def kv_intercept_staggered(each_concurrency: Sequence[float | None],
                           each_output_len: Sequence[float | None]) -> float:
    """KV tokens C streams at evenly staggered progress hold beyond their prompts: C × output ÷ 2."""
    return _one_setting(each_concurrency, "concurrency") * _one_setting(each_output_len, "output_len") / 2


@round_quantity(unit="tok")
def kv_intercept_together(each_concurrency: Sequence[float | None],
                          each_output_len: Sequence[float | None]) -> float:
    """KV tokens C streams hold beyond their prompts when all reach their last token together: C × output."""
    return _one_setting(each_concurrency, "concurrency") * _one_setting(each_output_len, "output_len")


# In a round of several server sets, the pool of the set a point ran on (the sets' pools may
# differ): `set_scrapes` is DOES_NOT_APPLY in a round of one set, where the round's pool is each point's.
@point_quantity(unit="tok")
def pool_tokens_set(set_scrapes: list, set_start: float, set_end: float) -> int | None:
    """KV pool size in tokens of the server set the point ran on (its cache_config_info)."""
    labels = cache_config.cache_config_info(set_scrapes, set_start, set_end)
    return cache_config.kv_pool_tokens_from_cache_config(labels).blocks_times_block_size


@point_quantity(unit="tok")
def pool_tokens_usable(pool_tokens_set: int, block_size: int) -> int:
    """Pool tokens of the point's server set that vLLM's usage gauge is a fraction of: one block (the null block) fewer."""
    return SZ.usable_pool_tokens(pool_tokens_set, block_size)


@round_quantity(unit="fraction")
def itl_slope_bandwidth_efficiency(itl_slope_vs_theory: float) -> float:
    """The share of the peak bandwidth the KV reads ran at, as the ITL slope implies: the slope at peak bandwidth over the fitted one (at most 1: no GPU reads faster than its peak)."""
    if itl_slope_vs_theory <= 0:
        raise Absent("reason.denominator_zero")
    return 1.0 / itl_slope_vs_theory


# ============================================================================ each point against the model
#
# Point quantities (report/registry.py). `modelled_input_len` / `modelled_output_len` are the
# lengths the sections model (the plan's, or the requests' own means where the workload varies
# them: round.read.modelled_lengths); `own_lengths` is the measured requests where each
# brings lengths of its own, and then the request-level forms above replace theory's closed
# forms. `pool_tokens_usable` is the point's server set's pool where the sets differ, else the
# round's. The FLOP counter's increase is taken between the quiet scrapes around the point.

# Several engines the client sent to in turn (`engine_items`, two or more) each hold their share
# of the point's requests in their own pool, and each engine's usage gauge is a share of its own
# pool (kv_usage_p50 averages the engines, kv_usage_peak is the fullest one's): the models below
# take C / engines requests against one engine's pool. With one engine nothing is divided.

def per_engine(value: float, engine_items: Mapping | None) -> float:
    """VALUE (requests, or tokens they hold) shared evenly over the engines (the value itself with one engine)."""
    n = len(engine_items or ())
    return value / n if n > 1 else value


@point_quantity(unit="tok")
def request_peak_tokens(block_size: int, modelled_input_len: float, modelled_output_len: float,
                        own_lengths: RequestTable | None = None) -> float:
    """KV tokens one request holds when it finishes, block-rounded (the requests' mean where each has its own lengths)."""
    if own_lengths is not None:
        return request_peak_tokens_sent_mean(own_lengths, block_size)
    return T.request_peak_tokens(modelled_input_len, modelled_output_len, block_size)


@point_quantity(unit="tok")
def request_mean_tokens(block_size: int, modelled_input_len: float, modelled_output_len: float,
                        own_lengths: RequestTable | None = None) -> float:
    """KV tokens one request holds on average while decoding, block-rounded (over the requests' own lengths where they vary)."""
    if own_lengths is not None:
        return request_mean_tokens_sent_mean(own_lengths, block_size)
    return T.request_mean_tokens(modelled_input_len, modelled_output_len, block_size)


@point_quantity(unit="req")
def requests_fit(pool_tokens_usable: float, request_peak_tokens: float) -> int:
    """Whole requests of the point's peak KV tokens that the usable pool holds at once."""
    return SZ.requests_that_fit(pool_tokens_usable, request_peak_tokens)


@point_quantity(unit="×")
def itl_over_decode_floor(itl_ms_p50: float, decode_floor_ms: float) -> float:
    """The point's ITL p50 against the shortest decode step the weights' bytes allow."""
    return A.ratio(itl_ms_p50, decode_floor_ms)


@point_quantity(unit="fraction")
def kv_expected_peak(concurrency: float, request_peak_tokens: float, pool_tokens_usable: float,
                     engine_items: dict | None = None, open_loop: bool = False,
                     kv_running_requests: float | None = None) -> float:
    """Expected peak KV usage: C (per engine; the requests running in an open loop, which sets none) × block-rounded peak tokens ÷ the usable pool."""
    if open_loop and kv_running_requests is not None:
        concurrency = kv_running_requests
    return T.expected_kv_peak_fraction(per_engine(concurrency, engine_items), request_peak_tokens, pool_tokens_usable)


@point_quantity(unit="fraction")
def kv_expected_mean(concurrency: float, request_mean_tokens: float, pool_tokens_usable: float,
                     engine_items: dict | None = None) -> float:
    """Expected steady-state KV usage at the set concurrency: C (per engine) × block-rounded mean tokens ÷ the usable pool."""
    return T.expected_kv_mean_fraction(per_engine(concurrency, engine_items), request_mean_tokens, pool_tokens_usable)


@point_quantity(unit="fraction")
def kv_expected_mean_effective(kv_running_requests: float, request_mean_tokens: float,
                               pool_tokens_usable: float, engine_items: dict | None = None,
                               kv_prefix_tokens_saved: float | None = None) -> float:
    """Expected steady-state KV usage of the running requests (the median running count where the pool caps C, or in an open loop), per engine, less the shared prefix blocks stored once."""
    return (T.expected_kv_mean_fraction(per_engine(kv_running_requests, engine_items), request_mean_tokens,
                                        pool_tokens_usable)
            - per_engine(kv_prefix_tokens_saved or 0.0, engine_items) / pool_tokens_usable)


@point_quantity(unit="")
def running_gauges_stale(server_running_median: float, client_inflight_mean: float) -> bool:
    """Whether the running gauge is stale: its median counts no request (under one) while the client kept at least one in flight, so the engine served requests it did not count."""
    return server_running_median < 1.0 <= client_inflight_mean


@point_quantity(unit="req")
def kv_running_requests(concurrency: float, server_running_median: float, open_loop: bool = False,
                        running_gauges_stale: bool | None = None) -> float:
    """Requests holding KV that the pool's account counts: the running gauge's median in an open loop (it sets no concurrency), else the smaller of C and that median; absent where the gauges read stale values."""
    if running_gauges_stale:
        raise Absent("reason.running_gauges_stale")
    T._non_negative("server_running_median", server_running_median)
    return server_running_median if open_loop else effective_concurrency(concurrency, server_running_median)


@point_quantity(unit="tok")
def kv_prefix_tokens_saved(block_size: int, shared_prefix_len: int, shared_prefixes: int, kv_running_requests: float,
                           prefix_cache_hit_rate: float | None = None) -> float:
    """KV tokens the running requests do not hold apart because the prefix cache stores a shared prefix's whole blocks once per prefix in use: those blocks times the running requests beyond one per prefix (0 where the cache did not hit)."""
    if not prefix_cache_hit_rate:
        return 0.0
    shared = (shared_prefix_len // block_size) * block_size
    return shared * max(0.0, kv_running_requests - min(float(shared_prefixes or 1), kv_running_requests))


@point_quantity(unit="fraction")
def kv_expected_median(kv_running_requests: float, block_size: int,
                       pool_tokens_usable: float, modelled_input_len: float, modelled_output_len: float,
                       own_lengths: RequestTable | None = None, engine_items: dict | None = None,
                       kv_prefix_tokens_saved: float | None = None) -> float:
    """Expected median KV usage of the running requests at uniform decode progress, per engine, less the shared prefix blocks the prefix cache stores once (reconcile/model.py)."""
    running = per_engine(kv_running_requests, engine_items)
    # The helpers take C and the running median and count the smaller: here both are the running
    # count (a C of at least one, so an idle gauge's 0 gives 0).
    c = max(running, 1.0)
    if own_lengths is not None:
        held = expected_kv_usage_median_fraction_sent(c, running, own_lengths, block_size, pool_tokens_usable)
    else:
        held = expected_kv_usage_median_fraction_effective(c, running, modelled_input_len, modelled_output_len,
                                                           block_size, pool_tokens_usable)
    return held - per_engine(kv_prefix_tokens_saved or 0.0, engine_items) / pool_tokens_usable


@point_quantity(unit="pp")
def kv_error_pp(kv_usage_p50: float, kv_expected_median: float) -> float:
    """Measured median KV usage minus the expected median, in percentage points."""
    return A.percentage_point_error(kv_usage_p50, kv_expected_median)


@point_quantity(unit="pp")
def kv_error_pp_mean_model(kv_usage_p50: float, kv_expected_mean_effective: float) -> float:
    """Measured median KV usage minus the mean model at the effective concurrency, in percentage points."""
    return A.percentage_point_error(kv_usage_p50, kv_expected_mean_effective)


@point_quantity(unit="pp")
def kv_error_pp_nominal(kv_usage_p50: float, kv_expected_mean: float) -> float:
    """Measured median KV usage minus the mean model at the set concurrency, in percentage points."""
    return A.percentage_point_error(kv_usage_p50, kv_expected_mean)


@point_quantity(unit="tok")
def block_waste_tokens(block_size: int, concurrency: float, modelled_input_len: float,
                       modelled_output_len: float, own_lengths: RequestTable | None = None,
                       engine_items: dict | None = None, open_loop: bool = False,
                       kv_running_requests: float | None = None) -> float:
    """KV tokens lost to block rounding at a request's end, times C per engine (the requests running in an open loop; the requests' mean where each has its own lengths)."""
    if open_loop and kv_running_requests is not None:
        concurrency = kv_running_requests
    concurrency = per_engine(concurrency, engine_items)
    if own_lengths is not None:
        return block_alignment_waste_tokens_sent(own_lengths, block_size, concurrency)
    return T.block_alignment_waste_tokens(modelled_input_len, modelled_output_len, block_size, concurrency)


@point_quantity(unit="tok")
def kv_tokens_peak(kv_usage_peak: float, pool_tokens_usable: float) -> float:
    """Tokens held in the KV cache at the usage gauge's peak: peak usage × the usable pool."""
    return SZ.kv_tokens_in_use(kv_usage_peak, pool_tokens_usable)


@point_quantity(unit="tok")
def kv_tokens_theory(concurrency: float, request_peak_tokens: float, engine_items: dict | None = None) -> float:
    """KV tokens C requests (per engine) hold when each has reached its peak: C × block-rounded peak tokens."""
    return A.product(per_engine(concurrency, engine_items), request_peak_tokens)


@point_quantity(unit="GiB")
def kv_memory_needed_gib(kv_tokens_theory: float, kv_bytes_per_token: float) -> float:
    """GiB of KV cache the point's C requests at their peak take (what `--kv-cache-memory` must give them)."""
    return SZ.kv_memory_gib(kv_tokens_theory, kv_bytes_per_token)


@point_quantity(unit="fraction")
def kv_peak_vs_blocks(kv_tokens_peak: float, kv_tokens_theory: float) -> float:
    """Relative difference of the gauge's peak tokens from the block-rounded theory."""
    return A.relative_difference(kv_tokens_peak, kv_tokens_theory)


@point_quantity(unit="fraction")
def kv_occupancy(concurrency: float, modelled_input_len: float, modelled_output_len: float,
                 pool_tokens_usable: float, engine_items: dict | None = None) -> float:
    """Theoretical KV occupancy C·(L+out) ÷ the usable pool (blocks not rounded), C per engine."""
    return SZ.kv_occupancy(per_engine(concurrency, engine_items), modelled_input_len, modelled_output_len, pool_tokens_usable)


@point_quantity(unit="FLOP")
def flops_measured(tflops_s: float, quiet_scrapes: list, window_start: float, t_end: float) -> float:
    """Increase of vLLM's estimated FLOPs counter between the quiet scrapes that bracket the point (where it measured a FLOP rate)."""
    a, b = quiet_bracketing_window(quiet_scrapes, window_start, t_end)
    return estimated_counter_increase(quiet_scrapes, a, b, FLOPS)


@point_quantity(unit="FLOP")
def flops_predicted(tflops_s: float, model_config: Mapping[str, Any], quiet_scrapes: list,
                    all_requests: RequestTable, window_start: float, t_end: float) -> float:
    """vLLM's FLOPs formulas summed over the lifecycles of the requests that ran wholly between those scrapes."""
    a, b = quiet_bracketing_window(quiet_scrapes, window_start, t_end)
    inside = requests_inside_window(all_requests, *lifecycle_window(quiet_scrapes, a, b))
    if not inside:
        raise Absent("reason.no_request_in_counter_window")
    return predicted_flops(model_config, inside)


@point_quantity(unit="×")
def flops_ratio(flops_measured: float, flops_predicted: float) -> float:
    """vLLM's FLOP counter increase ÷ its formulas over the requests' lifecycles (1: fully explained)."""
    return estimator_ratio(flops_measured, flops_predicted)


@point_quantity(unit="FLOP/B")
def intensity(tflops_s: float, read_gb_s: float) -> float:
    """Measured arithmetic intensity: vLLM's FLOP rate ÷ its read-byte rate, time-averaged over the point."""
    return A.ratio(tflops_s, read_gb_s, scale=1e3)


@point_quantity(unit="fraction")
def mfu(tflops_s: float, peak_flops: float) -> float:
    """Model FLOPs utilisation: the measured TFLOP/s against the GPU's dense peak."""
    return T.mfu(tflops_s * 1e12, peak_flops)


@point_quantity(unit="fraction")
def mbu(read_gb_s: float, peak_bandwidth: float) -> float:
    """Memory bandwidth utilisation: the measured read GB/s against the GPU's peak bandwidth."""
    return T.mbu(read_gb_s * 1e9, peak_bandwidth)


@point_quantity(unit="FLOP/B")
def decode_intensity(model_config: Mapping[str, Any], server_running_median: float,
                     modelled_input_len: float, modelled_output_len: float,
                     engine_items: dict | None = None) -> float:
    """FLOP per byte of one decode step of the median running requests (one engine's share of them) at the mean decode context (roofline.py)."""
    # Each engine steps its own batch and rereads the weights for it.
    return RF.model_decode_intensity(model_config, per_engine(server_running_median, engine_items),
                                     modelled_input_len, modelled_output_len)


@point_quantity(unit="FLOP/B")
def prefill_intensity(model_config: Mapping[str, Any], modelled_input_len: float) -> float:
    """FLOP per byte of one prompt's prefill that reads the weights once (roofline.py)."""
    return RF.model_prefill_intensity(model_config, modelled_input_len)
