"""Reconciliation: vLLM's own counters against what the theory predicts from the bundle's records.

Two reconciliations live here, both pure functions over raw samples (docs/analyses.md items 7, 15, 16):

1. vLLM's estimator (`--enable-mfu-metrics`). The counters
   `vllm:estimated_{flops,read_bytes,write_bytes}_per_gpu_total` are bumped once per scheduler
   step by `ModelMetrics.get_step_perf_stats_per_gpu` (vllm/v1/metrics/perf.py), from the
   step's (n = scheduled tokens, c = computed + n) per request. A request's lifecycle, when its
   prompt is not chunked, not served from the prefix cache and never preempted, is

       prefill:  one step,         n = prompt − cached,  c = prompt           (a "new" request)
       decode:   out − 1 steps,    n = 1,                c = prompt + j,  j = 1 … out − 1

   (the prefill step samples output token 1; decode step j schedules the token at position
   prompt + j − 1 and samples token j + 1). Every FLOPs term is linear in the step's scheduled
   tokens T, in Σ n·c, or in the logits tokens (one per prefill request plus every decode
   token), so FLOPs are additive over requests: the window's total is the sum of the
   lifecycles of the requests that ran wholly inside it, whatever the batching. The same holds
   for write bytes and for every read-bytes term but the weight reads, which vLLM bills once
   per step however many requests share it: read bytes need the step count. The
   `vllm:iteration_tokens_total` histogram gets one observation per step that returned
   outputs, so Δ`_count` is the step count the bundle has; vLLM also runs one step that
   schedules nothing each time the engine goes idle (the step that hands the finished
   requests' ids to the worker: `Scheduler.has_requests()` is still true) and bills the weight
   reads for it, although it adds no histogram observation. Those idle steps are bounded below
   by the gaps the client's own records prove and above by the requests that finished.
   A request counts as inside a window when it was sent after the first scrape's reply ended
   and ended before the last scrape began (the first scrape may have read the counters after a
   request sent during it had been billed); the others are reported as straddling, with the
   most their lifecycles could add. What else breaks the additivity is named term by term in
   each reconciliation's explanation: chunked prefill (several prefill steps per prompt: less
   Σ n·c, more logits rows, the context re-read per chunk), prefix-cache hits (fewer scheduled
   tokens), preemption (a recomputed prefill).

2. The KV pool. vLLM's `kv_cache_usage_perc` is `1 − free/(num_gpu_blocks − 1)`: the null
   block is excluded, so the usable pool is (num_gpu_blocks − 1) × block_size, while the log's
   "KV cache size: N tokens" and `cache_config_info` count num_gpu_blocks × block_size.
   A request holds whole blocks. The gauge is published after every step, and a request that
   finishes in a step is freed before the gauge is set, so a request is seen at progress
   j = 0 … out − 2 (j = decode steps done), holding ceil((in + j)/block) blocks. With steps of
   equal length a request spends one step at each progress, so the blocks one request holds
   at a random instant follow the distribution of ceil((in + j)/block) over j = 0 … out − 2.
   C requests at independent phases hold the sum of C draws; C requests in lockstep (closed
   loop, equal lengths, started together) hold C times one draw. The expected steady-state
   median is the median of that sum; the expected mean is C × the mean draw. The seeds'
   ceil((in + out/2)/block) rounds the mean *tokens* up to blocks, which is not the mean of
   the blocks: at in = 1024, out = 256, block 16 it gives 72 blocks against a mean draw of
   72.41; at in = 100, out = 300, block 128 it gives 2 blocks against 2.42 (a request spends
   29 steps at 1 block, 128 at 2, 128 at 3 and 14 at 4).
   Not modelled: steps that take longer than others (a step with a prefill lengthens the
   state before it), and the turnaround of a closed-loop slot (after a request's last step
   and before its successor's first, the slot holds nothing). Both move the mean usage (the
   turnaround lowers it); they move the median only once they cover half the samples. When
   turnaround keeps the median running count below C, use the effective concurrency.

Every public function is named for what it returns and raises `report.ledger.Absent` with a
reason in words when its inputs cannot give a value; none returns 0 for a missing input. The
whole-window reconciliations the engine tests check a real engine against, and the closed
forms only they use, are in tests/oracles.py: this module holds the ledger's quantities and their steps.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from bundle.request_table import RequestTable, as_request_table
from report.architecture import roofline as RF
from report.architecture import theory as T
from report.derive import arith as A
from report.derive import series as S
from report.derive import sizes as SZ
from report.derive.stats import lengths_sent
from report.ledger import Absent
from report.registry import point_quantity, require_points, round_quantity

FLOPS = "vllm:estimated_flops_per_gpu_total"
READ_BYTES = "vllm:estimated_read_bytes_per_gpu_total"
WRITE_BYTES = "vllm:estimated_write_bytes_per_gpu_total"
ITERATIONS = "vllm:iteration_tokens_total_count"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
PREEMPTIONS = "vllm:num_preemptions_total"

# vLLM's breakdown keys ("component.term") -> the short names the report prints.
FLOPS_TERM_NAMES = {
    "attn.qkv_proj": "qkv_proj", "attn.out_proj": "out_proj", "attn.attn_qk": "attn_qk",
    "attn.attn_av": "attn_av", "ffn.dense_ffn": "ffn", "unembed.unembed": "unembed",
}
FLOPS_TERMS = tuple(FLOPS_TERM_NAMES.values())

Config = Mapping[str, Any] | T.ModelShape


def _shape(config: Config) -> T.ModelShape:
    """A ModelShape from a config.json mapping or an existing shape."""
    if isinstance(config, T.ModelShape):
        return config
    if config is None:
        raise Absent("reason.no_config_in_bundle")
    return T.model_shape(config)


# ============================================================================ window and requests


def lifecycle_window(scrapes: Sequence[Mapping], t_start: float | None, t_end: float | None) -> tuple[float, float]:
    """Where a request must run for the window's counter increase to hold all of its work: after the first scrape's reply, before the last scrape."""
    ok = S.scrapes_in_window(scrapes, t_start, t_end)
    if len(ok) < 2:
        raise Absent("reason.counter_needs_two_scrapes", n=len(ok))
    # The first scrape read the counters at some instant before its reply ended (t + dt); a
    # request sent earlier may already be in that reading.
    return ok[0]["t"] + (ok[0].get("dt") or 0.0), ok[-1]["t"]


def quiet_bracketing_window(scrapes: Sequence[Mapping], t_start: float, t_end: float) -> tuple[float, float]:
    """The scrapes around [t_start, t_end] for counter reconciliation: the last whose reply ended by t_start, the first begun at or after t_end."""
    ok = sorted((s for s in scrapes if s.get("ok") and "samples" in s), key=lambda s: s["t"])
    before = [s["t"] for s in ok if s["t"] + (s.get("dt") or 0.0) <= t_start]
    after = [s["t"] for s in ok if s["t"] >= t_end]
    if not before:
        raise Absent("reason.no_scrape_before", t_start=t_start)
    if not after:
        raise Absent("reason.no_scrape_after", t_end=t_end)
    return before[-1], after[0]


def _lifecycle(r: Mapping) -> tuple[float, float] | None:
    """(send, end) of a request on the bundle's clock, None when either is unknown."""
    t0, t1 = r.get("t_send"), r.get("t_end")
    if t0 is None or t1 is None:
        return None
    return float(t0), float(t1)


def requests_inside_window(requests: RequestTable, t_start: float, t_end: float) -> RequestTable:
    """The requests that finished ok and whose whole lifecycle (send to end) lies inside [t_start, t_end]."""
    requests = as_request_table(requests)
    send, end = requests.col("t_send"), requests.col("t_end")
    return requests.take(requests.col("ok") & (t_start <= send) & (end <= t_end))


def _token_count_rows(requests: RequestTable) -> list[tuple[int, int, int]]:
    """(prompt, completion, cached prompt) tokens of each request, as request_token_counts."""
    prompt, completion = requests.col("usage_prompt"), requests.col("usage_completion")
    bad = np.flatnonzero(np.isnan(prompt) | np.isnan(completion))
    if len(bad):
        request_token_counts(requests[int(bad[0])])  # raises Absent naming the request
    cached = np.nan_to_num(requests.col("usage_cached"), nan=0.0)
    return list(zip(np.trunc(prompt).astype(np.int64).tolist(),
                    np.trunc(completion).astype(np.int64).tolist(),
                    np.trunc(cached).astype(np.int64).tolist()))


# ============================================================================ one request's steps


def request_token_counts(request: Mapping) -> tuple[int, int, int]:
    """(prompt, completion, cached prompt) tokens of one request, from the server's usage record."""
    u = request.get("usage") or {}
    if "prompt_tokens" not in u or "completion_tokens" not in u:
        raise Absent("reason.no_usage_record",
                     request=request.get('i', '?'), point=request.get('point', '?'))
    details = u.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens") or 0
    return int(u["prompt_tokens"]), int(u["completion_tokens"]), int(cached)


def _check_counts(prompt: int, completion: int, cached: int) -> None:
    """Raise Absent for token counts no request can have."""
    if prompt < 1:
        raise Absent("reason.no_prefill", prompt=prompt)
    if completion < 1:
        raise Absent("reason.prefill_unfinished", completion=completion)
    if not 0 <= cached < prompt:
        # vLLM recomputes at least the last prompt token, even on a full prefix-cache hit.
        raise Absent("reason.cached_impossible", cached=cached, prompt=prompt)


def _compact_rows(prompt: int, completion: int, cached: int,
                  window: int | None) -> list[tuple[int, int, bool]]:
    """A request's lifecycle as estimator rows with the same sums as its steps (exact, O(1) rows)."""
    _check_counts(prompt, completion, cached)
    rows = [(prompt - cached, prompt, True)]
    if completion < 2:
        return rows
    if window is not None:
        # Sliding window: vLLM clamps each step's c, so every decode step is needed as is.
        return rows + [(1, prompt + j, False) for j in range(1, completion)]
    # Decode steps enter vLLM's sums only through Σn = out − 1, Σc = Σn·c = S. The two rows
    # (1, S) and (out − 2, 0) have exactly those sums.
    s = (completion - 1) * prompt + (completion - 1) * completion // 2
    rows.append((1, s, False))
    if completion > 2:
        rows.append((completion - 2, 0, False))
    return rows


def _window_rows(shape: T.ModelShape, requests: Sequence[Mapping]) -> list[tuple[int, int, bool]]:
    """Estimator rows of every request's whole lifecycle."""
    if not requests:
        raise Absent("reason.nothing_to_predict")
    rows: list[tuple[int, int, bool]] = []
    for counts in _token_count_rows(as_request_table(requests)):
        rows += _compact_rows(*counts, shape.sliding_window)
    return rows


# ============================================================================ predictions


def predicted_flops_terms(config: Config, requests: Sequence[Mapping], tp: int = 1, pp: int = 1,
                          dp: int = 1) -> dict[str, int]:
    """vLLM's estimated FLOPs per GPU summed over the requests' lifecycles, term by term (qkv_proj, out_proj, attn_qk, attn_av, ffn, unembed)."""
    shape = _shape(config)
    terms = T.vllm_estimated_flops_terms(shape, _window_rows(shape, requests), tp, pp, dp)
    return {FLOPS_TERM_NAMES.get(k, k): v for k, v in terms.items()}


def predicted_flops(config: Config, requests: Sequence[Mapping], tp: int = 1, pp: int = 1,
                    dp: int = 1) -> int:
    """vLLM's estimated FLOPs per GPU summed over the requests' lifecycles (prefill step + decode steps each)."""
    return sum(predicted_flops_terms(config, requests, tp, pp, dp).values())


# ============================================================================ measured side


def estimated_counter_increase(scrapes: Sequence[Mapping], t_start: float | None, t_end: float | None,
                               name: str) -> float:
    """Increase of one of vLLM's estimated_* counters over the window; absent when it did not move (MFU metrics off)."""
    inc = S.counter_increase(scrapes, t_start, t_end, name)
    if inc <= 0:
        raise Absent("reason.mfu_counter_still", name=name)
    return inc


def estimator_ratio(measured: float, predicted: float) -> float:
    """Measured counter increase ÷ the prediction from the requests' lifecycles (1 = the counter is fully explained)."""
    if predicted is None or predicted <= 0:
        raise Absent("reason.prediction_zero")
    return measured / predicted


# ============================================================================ KV pool


def kv_blocks_at_progress(input_len: int, progress: int, block_size: int) -> int:
    """Blocks one request holds after PROGRESS decode steps: ceil((in + progress) / block)."""
    T._positive("input_len", input_len)
    T._non_negative("progress", progress)
    T._positive("block_size", block_size)
    return math.ceil((input_len + progress) / block_size)


def kv_blocks_distribution(input_len: int, output_len: int, block_size: int) -> dict[int, float]:
    """Share of a request's visible steps (progress 0 … out − 2) at which it holds each block count."""
    T._positive("output_len", output_len)
    if output_len == 1:
        # The prefill step finishes the request; it is freed before the gauge is published.
        return {0: 1.0}
    counts: dict[int, int] = {}
    # ceil((in + j)/B) is a step function of j: count the j in each block level at once.
    j = 0
    last = output_len - 2
    while j <= last:
        b = kv_blocks_at_progress(input_len, j, block_size)
        j_end = min(last, b * block_size - input_len)  # the last progress still at b blocks
        counts[b] = counts.get(b, 0) + (j_end - j + 1)
        j = j_end + 1
    n = output_len - 1
    return {b: c / n for b, c in sorted(counts.items())}


def _convolve(a: Mapping[int, float], b: Mapping[int, float]) -> dict[int, float]:
    out: dict[int, float] = {}
    for x, p in a.items():
        for y, q in b.items():
            out[x + y] = out.get(x + y, 0.0) + p * q
    return out


def _median_of(dist: Mapping[int, float]) -> float:
    """The median of a discrete distribution (the midpoint when the CDF sits exactly at one half)."""
    acc = 0.0
    items = sorted(dist.items())
    for i, (x, p) in enumerate(items):
        acc += p
        if math.isclose(acc, 0.5, abs_tol=1e-12) and i + 1 < len(items):
            return (x + items[i + 1][0]) / 2
        if acc > 0.5:
            return float(x)
    return float(items[-1][0])


def kv_blocks_in_use_distribution(concurrency: int, input_len: int, output_len: int, block_size: int,
                                  lockstep: bool = False) -> dict[int, float]:
    """Distribution of the blocks C requests hold at a random instant: C independent draws, or C times one draw in lockstep."""
    T._positive("concurrency", concurrency)
    if concurrency != int(concurrency):
        raise Absent("reason.block_distribution_whole", concurrency=concurrency)
    one = kv_blocks_distribution(input_len, output_len, block_size)
    if lockstep:
        return {b * int(concurrency): p for b, p in one.items()}
    total: dict[int, float] = {0: 1.0}
    for _ in range(int(concurrency)):
        total = _convolve(total, one)
    return total


def expected_kv_usage_median_fraction(concurrency: int, input_len: int, output_len: int, block_size: int,
                                      usable_pool_tokens: int, lockstep: bool = False) -> float:
    """Expected steady-state median KV usage: the median of the blocks C requests hold (sum of block-rounded draws) × block ÷ usable pool."""
    T._positive("usable_pool_tokens", usable_pool_tokens)
    dist = kv_blocks_in_use_distribution(concurrency, input_len, output_len, block_size, lockstep)
    return _median_of(dist) * block_size / usable_pool_tokens


def effective_concurrency(concurrency: float, server_running_median: float) -> float:
    """Requests that actually hold KV: the median running count when the pool (or anything else) caps it below C, else C."""
    T._positive("concurrency", concurrency)
    T._non_negative("server_running_median", server_running_median)
    return min(concurrency, server_running_median)


def expected_kv_usage_median_fraction_effective(concurrency: int, server_running_median: float, input_len: int,
                                                output_len: int, block_size: int, usable_pool_tokens: int,
                                                lockstep: bool = False) -> float:
    """Expected median KV usage at the effective concurrency min(C, median running); a fractional one interpolates its neighbours."""
    c = effective_concurrency(concurrency, server_running_median)
    lo, hi = math.floor(c), math.ceil(c)

    def at(n: int) -> float:
        if n == 0:
            return 0.0
        return expected_kv_usage_median_fraction(n, input_len, output_len, block_size,
                                                 usable_pool_tokens, lockstep)
    if lo == hi:
        return at(lo)
    return at(lo) + (at(hi) - at(lo)) * (c - lo)


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


# The KV pool for requests of their own lengths (distributions, datasets, traces, sessions):
# the same models over each request's prompt and output tokens as its usage reports them.
# Invariant: over requests that all share one (in, out) each value equals the nominal one.

def request_peak_tokens_sent_mean(requests: RequestTable, block_size: int) -> float:
    """Mean over the answered requests of the block-rounded KV tokens each holds when it finishes."""
    prompt, out = lengths_sent(requests)
    return float(np.mean([T.request_peak_tokens(int(i), int(o), block_size) for i, o in zip(prompt, out)]))


def request_mean_tokens_sent_mean(requests: RequestTable, block_size: int) -> float:
    """Block-rounded KV tokens a request holds on average while decoding, averaged over the
    answered requests weighted by their output tokens (a request holds its KV for as many steps)."""
    prompt, out = lengths_sent(requests)
    each = [T.request_mean_tokens(int(i), int(o), block_size) for i, o in zip(prompt, out)]
    return float(np.average(each, weights=out))


def block_alignment_waste_tokens_sent(requests: RequestTable, block_size: int, concurrency: int) -> float:
    """KV tokens lost to block rounding at a request's end, mean over the answered requests, times C."""
    prompt, out = lengths_sent(requests)
    return float(np.mean([T.block_alignment_waste_tokens(int(i), int(o), block_size) for i, o in zip(prompt, out)])
                 * concurrency)


def kv_blocks_distribution_sent(requests: RequestTable, block_size: int) -> dict[int, float]:
    """Share of all the answered requests' visible steps (each request's progress 0 … out − 2)
    at which one of them holds each block count: one slot at a random instant."""
    prompt, out = lengths_sent(requests)
    steps: dict[int, float] = {}
    for i, o in zip(prompt.tolist(), out.tolist()):
        for b, share in kv_blocks_distribution(i, o, block_size).items():
            steps[b] = steps.get(b, 0.0) + share * max(o - 1, 0)
    total = sum(steps.values())
    if total == 0:
        return {0: 1.0}         # every request finished in its prefill step
    return {b: n / total for b, n in sorted(steps.items())}


def expected_kv_usage_median_fraction_sent(concurrency: int, server_running_median: float,
                                           requests: RequestTable, block_size: int,
                                           usable_pool_tokens: int) -> float:
    """Expected median KV usage at the effective concurrency min(C, median running), each slot
    drawing from the answered requests' own block counts; a fractional one interpolates."""
    T._positive("usable_pool_tokens", usable_pool_tokens)
    one = kv_blocks_distribution_sent(requests, block_size)
    c = effective_concurrency(concurrency, server_running_median)
    lo, hi = math.floor(c), math.ceil(c)

    probs = np.zeros(max(one) + 1)          # index: blocks one slot holds
    for b, share in one.items():
        probs[b] = share

    def at(n: int) -> float:
        total = np.ones(1)
        for _ in range(n):
            total = np.convolve(total, probs)
        return _median_of({b: float(q) for b, q in enumerate(total) if q > 0}) * block_size / usable_pool_tokens
    if lo == hi:
        return at(lo)
    return at(lo) + (at(hi) - at(lo)) * (c - lo)


# In a round of several server sets, the pool of the set a point ran on (the sets' pools may
# differ): `set_scrapes` is DOES_NOT_APPLY in a round of one set, where the round's pool is each point's.
@point_quantity(unit="tok")
def pool_tokens_set(set_scrapes: list, set_start: float, set_end: float) -> int | None:
    """KV pool size in tokens of the server set the point ran on (its cache_config_info)."""
    labels = S.cache_config_info(set_scrapes, set_start, set_end)
    return S.kv_pool_tokens_from_cache_config(labels).blocks_times_block_size


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
# them: round_ledger.modelled_lengths); `own_lengths` is the measured requests where each
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
    """Expected median KV usage of the running requests at uniform decode progress, per engine, less the shared prefix blocks the prefix cache stores once (reconcile.py)."""
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
