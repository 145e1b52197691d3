"""A length sweep's fits over its valid points: KV linearity, the ITL slope against its theory, throughput's divergence and the longest prompt the pool holds.

Round quantities over the valid points of a length sweep (in load order, None where a point's
value is absent), resolved by the phase "length fits" alone.
"""

from __future__ import annotations

from typing import Sequence

from report.architecture import theory as T
from report.derive.arith import fit_intercept, fit_r_squared, fit_slope, ratio, relative_difference
from report.ledger import Absent
from report.registry import round_quantity


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
    return fit_slope(each_input_len, _present(each_kv_tokens_peak, "kv_tokens_peak"))


@round_quantity(unit="tok")
def kv_lin_intercept(each_input_len: Sequence[float | None], each_kv_tokens_peak: Sequence[float | None]) -> float:
    """Least-squares intercept of peak KV tokens on input length."""
    return fit_intercept(each_input_len, _present(each_kv_tokens_peak, "kv_tokens_peak"))


@round_quantity(unit="")
def kv_lin_r2(each_input_len: Sequence[float | None], each_kv_tokens_peak: Sequence[float | None]) -> float:
    """R² of peak KV tokens on input length."""
    return fit_r_squared(each_input_len, _present(each_kv_tokens_peak, "kv_tokens_peak"))


@round_quantity(unit="fraction")
def kv_lin_slope_vs_theory(kv_lin_slope: float, each_concurrency: Sequence[float | None]) -> float:
    """Fitted KV slope relative to the concurrency."""
    return relative_difference(kv_lin_slope, _last(each_concurrency, "concurrency"))


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
    return fit_slope(*_itl_fit(each_input_len, each_itl_ms_p50, each_effective_concurrency, each_concurrency))


@round_quantity(unit="ms")
def itl_intercept(each_input_len: Sequence[float | None], each_itl_ms_p50: Sequence[float | None],
                  each_effective_concurrency: Sequence[float | None], each_concurrency: Sequence[float | None]) -> float:
    """Least-squares intercept of ITL p50 on input length."""
    return fit_intercept(*_itl_fit(each_input_len, each_itl_ms_p50, each_effective_concurrency, each_concurrency))


@round_quantity(unit="")
def itl_r2(each_input_len: Sequence[float | None], each_itl_ms_p50: Sequence[float | None],
           each_effective_concurrency: Sequence[float | None], each_concurrency: Sequence[float | None]) -> float:
    """R² of ITL p50 on input length."""
    return fit_r_squared(*_itl_fit(each_input_len, each_itl_ms_p50, each_effective_concurrency, each_concurrency))


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
    return relative_difference(last, first)


@round_quantity(unit="fraction")
def total_tok_s_change(each_total_tok_s: Sequence[float | None]) -> float:
    """Relative change of total (prompt and output) throughput from the shortest prompt's valid point to the longest's."""
    first, last = _present([each_total_tok_s[0], each_total_tok_s[-1]], "total_tok_s")
    return relative_difference(last, first)


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
