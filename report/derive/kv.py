"""Each point's KV cache against the model: the tokens a request holds, how many fit, the usage expected.

Point quantities (report/registry.py) over the point's raw inputs: `modelled_input_len` and
`modelled_output_len` are the lengths the sections model (the plan's, or the requests' own
means where the workload varies them: round_ledger.modelled_lengths); `own_lengths` is the
measured requests where each brings lengths of its own, and then the request-level forms of
reconcile.py replace the closed forms of theory.py. `pool_tokens_usable` is the point's server
set's pool where the sets differ, else the round's (docs/analyses.md items 7, 8, 12).
"""

from __future__ import annotations

from bundle.request_table import RequestTable
from report.architecture import theory as T
from report.derive import analyses as A
from report.derive import reconcile as R
from report.registry import point_quantity


@point_quantity(unit="tok")
def request_peak_tokens(block_size: int, modelled_input_len: float, modelled_output_len: float,
                        own_lengths: RequestTable | None = None) -> float:
    """KV tokens one request holds when it finishes, block-rounded (the requests' mean where each has its own lengths)."""
    if own_lengths is not None:
        return R.request_peak_tokens_sent_mean(own_lengths, block_size)
    return T.request_peak_tokens(modelled_input_len, modelled_output_len, block_size)


@point_quantity(unit="tok")
def request_mean_tokens(block_size: int, modelled_input_len: float, modelled_output_len: float,
                        own_lengths: RequestTable | None = None) -> float:
    """KV tokens one request holds on average while decoding, block-rounded (over the requests' own lengths where they vary)."""
    if own_lengths is not None:
        return R.request_mean_tokens_sent_mean(own_lengths, block_size)
    return T.request_mean_tokens(modelled_input_len, modelled_output_len, block_size)


@point_quantity(unit="req")
def requests_fit(pool_tokens_usable: float, request_peak_tokens: float) -> int:
    """Whole requests of the point's peak KV tokens that the usable pool holds at once."""
    return A.requests_that_fit(pool_tokens_usable, request_peak_tokens)


@point_quantity(unit="×")
def itl_over_decode_floor(itl_ms_p50: float, decode_floor_ms: float) -> float:
    """The point's ITL p50 against the shortest decode step the weights' bytes allow."""
    return A.ratio(itl_ms_p50, decode_floor_ms)


@point_quantity(unit="fraction")
def kv_expected_peak(concurrency: float, request_peak_tokens: float, pool_tokens_usable: float) -> float:
    """Expected peak KV usage: C × block-rounded peak tokens ÷ the usable pool."""
    return T.expected_kv_peak_fraction(concurrency, request_peak_tokens, pool_tokens_usable)


@point_quantity(unit="fraction")
def kv_expected_mean(concurrency: float, request_mean_tokens: float, pool_tokens_usable: float) -> float:
    """Expected steady-state KV usage at the set concurrency: C × block-rounded mean tokens ÷ the usable pool."""
    return T.expected_kv_mean_fraction(concurrency, request_mean_tokens, pool_tokens_usable)


@point_quantity(unit="fraction")
def kv_expected_mean_effective(effective_concurrency: float, request_mean_tokens: float,
                               pool_tokens_usable: float) -> float:
    """Expected steady-state KV usage at the effective concurrency (the median running count where the pool caps it)."""
    return T.expected_kv_mean_fraction(effective_concurrency, request_mean_tokens, pool_tokens_usable)


@point_quantity(unit="fraction")
def kv_expected_median(concurrency: float, server_running_median: float, block_size: int,
                       pool_tokens_usable: float, modelled_input_len: float, modelled_output_len: float,
                       own_lengths: RequestTable | None = None) -> float:
    """Expected median KV usage of C requests at uniform decode progress, at min(C, median running) (reconcile.py)."""
    if own_lengths is not None:
        return R.expected_kv_usage_median_fraction_sent(concurrency, server_running_median, own_lengths,
                                                        block_size, pool_tokens_usable)
    return R.expected_kv_usage_median_fraction_effective(concurrency, server_running_median, modelled_input_len,
                                                         modelled_output_len, block_size, pool_tokens_usable)


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
                       modelled_output_len: float, own_lengths: RequestTable | None = None) -> float:
    """KV tokens lost to block rounding at a request's end, times C (the requests' mean where each has its own lengths)."""
    if own_lengths is not None:
        return R.block_alignment_waste_tokens_sent(own_lengths, block_size, concurrency)
    return T.block_alignment_waste_tokens(modelled_input_len, modelled_output_len, block_size, concurrency)


@point_quantity(unit="tok")
def kv_tokens_peak(kv_usage_peak: float, pool_tokens_usable: float) -> float:
    """Tokens held in the KV cache at the usage gauge's peak: peak usage × the usable pool."""
    return A.kv_tokens_in_use(kv_usage_peak, pool_tokens_usable)


@point_quantity(unit="tok")
def kv_tokens_theory(concurrency: float, request_peak_tokens: float) -> float:
    """KV tokens C requests hold when each has reached its peak: C × block-rounded peak tokens."""
    return A.product(concurrency, request_peak_tokens)


@point_quantity(unit="GiB")
def kv_memory_needed_gib(kv_tokens_theory: float, kv_bytes_per_token: float) -> float:
    """GiB of KV cache the point's C requests at their peak take (what `--kv-cache-memory` must give them)."""
    return A.kv_memory_gib(kv_tokens_theory, kv_bytes_per_token)


@point_quantity(unit="fraction")
def kv_peak_vs_blocks(kv_tokens_peak: float, kv_tokens_theory: float) -> float:
    """Relative difference of the gauge's peak tokens from the block-rounded theory."""
    return A.relative_difference(kv_tokens_peak, kv_tokens_theory)


@point_quantity(unit="fraction")
def kv_occupancy(concurrency: float, modelled_input_len: float, modelled_output_len: float,
                 pool_tokens_usable: float) -> float:
    """Theoretical KV occupancy C·(L+out) ÷ the usable pool (blocks not rounded)."""
    return A.kv_occupancy(concurrency, modelled_input_len, modelled_output_len, pool_tokens_usable)
