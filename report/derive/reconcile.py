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
reason in words when its inputs cannot give a value; none returns 0 for a missing input.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bundle.request_table import RequestTable, as_request_table
from report.architecture import theory as T
from report.derive import series as S
from report.ledger import Absent
from report.registry import round_quantity

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


def counter_window(scrapes: Sequence[Mapping], t_start: float | None, t_end: float | None) -> tuple[float, float]:
    """The start times of the first and last successful scrapes in [t_start, t_end]: a counter's increase runs between them."""
    ok = S.scrapes_in_window(scrapes, t_start, t_end)
    if len(ok) < 2:
        raise Absent("reason.counter_needs_two_scrapes", n=len(ok))
    return ok[0]["t"], ok[-1]["t"]


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


def requests_straddling_window(requests: RequestTable, t_start: float, t_end: float) -> RequestTable:
    """Requests whose work the window's counters may hold only in part: overlapping its edges, failed inside it, or without timestamps."""
    requests = as_request_table(requests)
    send, end = requests.col("t_send"), requests.col("t_end")
    inside = requests.col("ok") & (t_start <= send) & (end <= t_end)
    unknown = np.isnan(send) | np.isnan(end)
    # Without both times: counted when it was sent inside the window or its send is unknown.
    partial = np.isnan(send) | ((t_start <= send) & (send <= t_end))
    overlapping = (send <= t_end) & (end >= t_start)
    return requests.take(~inside & np.where(unknown, partial, overlapping))


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


def request_lifecycle_steps(prompt_tokens: int, completion_tokens: int,
                            cached_tokens: int = 0) -> list[tuple[int, int, bool]]:
    """Each scheduler step of one request as vLLM's estimator sees it: prefill (n = prompt − cached, c = prompt), then n = 1, c = prompt + j."""
    _check_counts(prompt_tokens, completion_tokens, cached_tokens)
    steps = [(prompt_tokens - cached_tokens, prompt_tokens, True)]
    steps += [(1, prompt_tokens + j, False) for j in range(1, completion_tokens)]
    return steps


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


def predicted_write_bytes_terms(config: Config, requests: Sequence[Mapping], tp: int = 1, pp: int = 1,
                                dp: int = 1, kv_cache_dtype_bytes: float | None = None) -> dict[str, int]:
    """vLLM's estimated bytes written per GPU summed over the requests' lifecycles, term by term."""
    shape = _shape(config)
    return T.vllm_estimated_write_bytes_terms(shape, _window_rows(shape, requests), tp, pp, dp,
                                              kv_cache_dtype_bytes)


def predicted_write_bytes(config: Config, requests: Sequence[Mapping], tp: int = 1, pp: int = 1,
                          dp: int = 1, kv_cache_dtype_bytes: float | None = None) -> int:
    """vLLM's estimated bytes written per GPU summed over the requests' lifecycles (no per-step part)."""
    return sum(predicted_write_bytes_terms(config, requests, tp, pp, dp, kv_cache_dtype_bytes).values())


def weight_read_bytes_per_step_terms(config: Config, tp: int = 1, pp: int = 1, dp: int = 1,
                                     weight_dtype_bytes: float | None = None) -> dict[str, int]:
    """The read-bytes terms vLLM bills on every scheduler step whatever it schedules (the weight reads), by term."""
    terms = T.vllm_estimated_read_bytes_terms(_shape(config), [], tp, pp, dp, None, weight_dtype_bytes)
    return {k: v for k, v in terms.items() if v}


def weight_read_bytes_per_step(config: Config, tp: int = 1, pp: int = 1, dp: int = 1,
                               weight_dtype_bytes: float | None = None) -> int:
    """Bytes vLLM's estimator bills for reading the weights on every scheduler step, even one that schedules nothing."""
    return sum(weight_read_bytes_per_step_terms(config, tp, pp, dp, weight_dtype_bytes).values())


def predicted_read_bytes_per_request_terms(config: Config, requests: Sequence[Mapping], tp: int = 1,
                                           pp: int = 1, dp: int = 1,
                                           kv_cache_dtype_bytes: float | None = None) -> dict[str, int]:
    """The read-bytes terms that scale with the requests (activations, KV reads), summed over their lifecycles."""
    shape = _shape(config)
    rows = _window_rows(shape, requests)
    terms = T.vllm_estimated_read_bytes_terms(shape, rows, tp, pp, dp, kv_cache_dtype_bytes, None)
    per_step = weight_read_bytes_per_step_terms(shape, tp, pp, dp)
    return {k: v - per_step.get(k, 0) for k, v in terms.items() if v - per_step.get(k, 0)}


def predicted_read_bytes_terms(config: Config, requests: Sequence[Mapping], steps: float, tp: int = 1,
                               pp: int = 1, dp: int = 1, kv_cache_dtype_bytes: float | None = None,
                               weight_dtype_bytes: float | None = None) -> dict[str, float]:
    """vLLM's estimated bytes read per GPU, term by term: the requests' activation and KV reads plus STEPS × the weight reads."""
    if steps is None or steps < 0:
        raise Absent("reason.step_count_unknown", steps=steps)
    terms: dict[str, float] = dict(predicted_read_bytes_per_request_terms(
        config, requests, tp, pp, dp, kv_cache_dtype_bytes))
    for k, v in weight_read_bytes_per_step_terms(config, tp, pp, dp, weight_dtype_bytes).items():
        terms[k] = terms.get(k, 0) + steps * v
    return terms


def predicted_read_bytes(config: Config, requests: Sequence[Mapping], steps: float, tp: int = 1,
                         pp: int = 1, dp: int = 1, kv_cache_dtype_bytes: float | None = None,
                         weight_dtype_bytes: float | None = None) -> float:
    """vLLM's estimated bytes read per GPU: the requests' activation and KV reads plus STEPS × one step's weight reads."""
    return sum(predicted_read_bytes_terms(config, requests, steps, tp, pp, dp, kv_cache_dtype_bytes,
                                          weight_dtype_bytes).values())


# ============================================================================ measured side


def estimated_counter_increase(scrapes: Sequence[Mapping], t_start: float | None, t_end: float | None,
                               name: str) -> float:
    """Increase of one of vLLM's estimated_* counters over the window; absent when it did not move (MFU metrics off)."""
    inc = S.counter_increase(scrapes, t_start, t_end, name)
    if inc <= 0:
        raise Absent("reason.mfu_counter_still", name=name)
    return inc


def steps_with_outputs(scrapes: Sequence[Mapping], t_start: float | None, t_end: float | None) -> float:
    """Scheduler steps that returned outputs in the window: Δ vllm:iteration_tokens_total_count (one observation per such step)."""
    return S.counter_increase(scrapes, t_start, t_end, ITERATIONS)


def engine_busy_periods(requests: Sequence[Mapping], t_end: float | None = None) -> int:
    """Busy periods of the engine the client's records prove (the union of [send, end] split by gaps), counting those over by T_END."""
    requests = as_request_table(requests)
    send, end = requests.col("t_send"), requests.col("t_end")
    known = ~np.isnan(send) & ~np.isnan(end)
    if not known.any():
        raise Absent("reason.no_send_and_end")
    order = np.lexsort((end[known], send[known]))
    t0, t1 = send[known][order], end[known][order]
    reach = np.maximum.accumulate(t1)  # the latest end so far: a gap after it starts a period
    starts = np.flatnonzero(np.concatenate(([True], t0[1:] > reach[:-1])))
    ends = reach[np.concatenate((starts[1:] - 1, [len(t0) - 1]))]
    return int(len(ends) if t_end is None else np.count_nonzero(ends <= t_end))


def idle_steps_implied(measured_read_bytes: float, per_request_read_bytes: float, steps_with_outputs: float,
                       weight_read_bytes_per_step: float) -> float:
    """Steps the read-bytes counter billed beyond the steps with outputs, in units of one step's weight reads."""
    if weight_read_bytes_per_step <= 0:
        raise Absent("reason.step_weight_reads_zero")
    return (measured_read_bytes - per_request_read_bytes) / weight_read_bytes_per_step - steps_with_outputs


def estimator_ratio(measured: float, predicted: float) -> float:
    """Measured counter increase ÷ the prediction from the requests' lifecycles (1 = the counter is fully explained)."""
    if predicted is None or predicted <= 0:
        raise Absent("reason.prediction_zero")
    return measured / predicted


# ============================================================================ the reconciliation


@dataclass(frozen=True)
class EstimatorReconciliation:
    """One estimated_* counter over a window: measured increase, the prediction term by term, their ratio, and why they may differ."""

    counter: str
    window: tuple[float, float]          # first and last scrape used
    measured: float
    predicted_terms: dict[str, float]
    predicted: float
    ratio: float
    requests_inside: int
    requests_straddling: int
    explanation: dict[str, str]
    steps: float | None = None           # read bytes: the step count used
    steps_upper: float | None = None     # read bytes: steps if every finishing request idled the engine
    predicted_upper: float | None = None
    idle_steps: float | None = None      # read bytes: steps beyond those with outputs the counter implies
    notes: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class _Evidence:
    """What the window says about the causes of a difference."""

    window: tuple[float, float]
    inside: RequestTable
    straddling: RequestTable
    hits: float | None
    preemptions: float | None
    prompts: list[int]
    chunking: str


def _optional_increase(scrapes, a: float, b: float, name: str) -> float | None:
    try:
        return S.counter_increase(scrapes, a, b, name)
    except Absent:
        return None


def _chunking_note(prompts: Sequence[int], concurrency: int | None, budget: int | None) -> str:
    """Whether vLLM can have split a prompt over several steps, from the token budget."""
    if not prompts:
        return "No prompts in the window"
    longest = max(prompts)
    if budget is None:
        return (f"The step token budget (--max-num-batched-tokens) is not known, so chunking of the "
                f"prompts (up to {longest} tokens) cannot be ruled out")
    if longest > budget:
        return f"Prompts of up to {longest} tokens exceed the step budget of {budget}: they were chunked"
    if concurrency is None:
        return (f"The longest prompt ({longest}) fits the step budget ({budget}), but without the "
                "concurrency several prompts sharing a step may still have been split")
    worst = concurrency * longest
    if worst <= budget:
        return (f"No prompt can have been chunked: C × longest prompt = {concurrency} × {longest} = "
                f"{worst} ≤ the step budget {budget}")
    return (f"C × longest prompt = {worst} exceeds the step budget {budget}: prompts admitted in the "
            "same step may have been split")


def _evidence(scrapes, requests, t_start, t_end, concurrency, budget) -> _Evidence:
    a, b = counter_window(scrapes, t_start, t_end)
    life = lifecycle_window(scrapes, t_start, t_end)
    requests = as_request_table(requests)  # once: inside and straddling select from one table
    inside = requests_inside_window(requests, *life)
    straddling = requests_straddling_window(requests, *life)
    prompts = [c[0] for c in _token_count_rows(inside)]
    return _Evidence(window=(a, b), inside=inside, straddling=straddling,
                     hits=_optional_increase(scrapes, a, b, PREFIX_HITS),
                     preemptions=_optional_increase(scrapes, a, b, PREEMPTIONS),
                     prompts=prompts, chunking=_chunking_note(prompts, concurrency, budget))


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.3g} %" if whole else "n/a"


def _straddler_bound(ev: _Evidence, predict) -> str:
    """How much of the measured increase the straddling requests can account for at most."""
    if not ev.straddling:
        return "no request straddles the window's edges"
    prompt, completion = ev.straddling.col("usage_prompt"), ev.straddling.col("usage_completion")
    known = ev.straddling.take(~np.isnan(prompt) & (prompt != 0) & ~np.isnan(completion) & (completion != 0))
    if not known:
        return (f"{len(ev.straddling)} request(s) straddle the window's edges or failed inside it; "
                "their share of the counter is unknown")
    try:
        bound = predict(known)
    except Absent as e:
        return (f"{len(ev.straddling)} request(s) straddle the window's edges or failed inside it; "
                f"their share of the counter is unknown ({e})")
    return (f"{len(ev.straddling)} request(s) straddle the window's edges or failed inside it; "
            f"they can add up to {bound:.4g} (their whole lifecycles) to the measured increase")


def _flops_explanation(shape: T.ModelShape, ev: _Evidence, terms: Mapping[str, float],
                       measured: float, predicted: float) -> dict[str, str]:
    """Term by term, what can make vLLM's FLOPs counter differ from the lifecycle sum, with this window's evidence."""
    hits = ev.hits
    mean_prompt = sum(ev.prompts) / len(ev.prompts) if ev.prompts else 0
    counts = _token_count_rows(ev.inside)
    cached = sum(c for _, _, c in counts)
    hit_text = ("Prefix-cache hits are not known for this window" if hits is None else
                "No prefix-cache hits in the window" if hits == 0 else
                f"{hits:.0f} prompt tokens were prefix-cache hits in the window, {cached} of them "
                "named in the usage records' cached_tokens and so in the prediction")
    hit_lin = ""
    scheduled = sum(p - c + o - 1 for p, o, c in counts)
    missed = (hits or 0) - cached
    if missed > 0 and scheduled:
        # qkv_proj, out_proj and ffn are proportional to the scheduled tokens; attn_qk and
        # attn_av to Σ n·c, which a hit of h tokens on a prompt P lowers by h·P.
        per_token = sum(terms.get(k, 0) for k in ("qkv_proj", "out_proj", "ffn")) / scheduled
        nc = sum((p - c) * p + (o - 1) * p + (o - 1) * o // 2 for p, o, c in counts)
        per_nc = (terms.get("attn_qk", 0) + terms.get("attn_av", 0)) / nc if nc else 0.0
        est = per_token * missed + per_nc * missed * mean_prompt
        hit_lin = (f"; the other {missed:.0f}, if they fell on requests inside the window, make "
                   f"≈ {est:.4g} FLOPs fewer than predicted ({per_token * missed:.4g} in qkv_proj, "
                   f"out_proj and ffn, {per_nc * missed * mean_prompt:.4g} in attn_qk and attn_av)")
    pre_text = ("Preemptions are not known for this window" if ev.preemptions is None else
                "No preemptions" if ev.preemptions == 0 else
                f"{ev.preemptions:.0f} preemption(s): a preempted request recomputes its prompt and "
                "the tokens it had generated, so the counter holds more than one prefill for it")
    straddle = _straddler_bound(ev, lambda rs: predicted_flops(shape, rs))
    diff = measured - predicted
    ex = {
        "qkv_proj": (f"2·T·D·(q+2kv)·d·L, linear in scheduled tokens T: differs only if the "
                     f"scheduled tokens differ. {hit_text}{hit_lin}. {pre_text}."),
        "out_proj": "2·T·D·q·d·L, linear in T: the same causes as qkv_proj, in the same proportion.",
        "attn_qk": (f"2·q·Σn·c·d·L. The prediction puts each prompt in one prefill step, "
                    f"Σn·c = prompt²; chunked prefill in k pieces gives Σ n_i·c_i = (prompt² + Σ n_i²)/2, "
                    f"less. {ev.chunking}. A prefix-cache hit of h tokens lowers n to prompt − h "
                    f"(Σn·c by h·prompt; mean prompt here {mean_prompt:.0f})."),
        "attn_av": "2·q·Σn·c·d·L, identical to attn_qk in vLLM's estimator: the same causes.",
        "ffn": "2·D·3·DI·T·L, linear in T: the same causes as qkv_proj.",
        "unembed": ("2·(prefill requests + decode tokens)·D·V: one logits row per prefill step. A "
                    "prompt chunked over k steps is billed k rows (k − 1 more than predicted); a "
                    "preempted request is billed again on recompute."),
        "window": (f"{len(ev.inside)} request(s) ran wholly inside the window "
                   f"[{ev.window[0]:.3f}, {ev.window[1]:.3f}] s; {straddle}. Measured − predicted = "
                   f"{diff:.4g} ({_pct(diff, predicted)} of the prediction)."),
    }
    return ex


def flops_reconciliation(config: Config, scrapes: Sequence[Mapping], requests: Sequence[Mapping],
                         t_start: float | None = None, t_end: float | None = None, tp: int = 1, pp: int = 1,
                         dp: int = 1, concurrency: int | None = None,
                         max_num_batched_tokens: int | None = None) -> EstimatorReconciliation:
    """vLLM's FLOPs counter over the window against the requests' lifecycles: measured, predicted by term, ratio, explanation."""
    shape = _shape(config)
    ev = _evidence(scrapes, requests, t_start, t_end, concurrency, max_num_batched_tokens)
    a, b = ev.window
    measured = estimated_counter_increase(scrapes, a, b, FLOPS)
    terms = predicted_flops_terms(shape, ev.inside, tp, pp, dp)
    predicted = sum(terms.values())
    return EstimatorReconciliation(
        counter=FLOPS, window=ev.window, measured=measured, predicted_terms=terms, predicted=predicted,
        ratio=estimator_ratio(measured, predicted), requests_inside=len(ev.inside),
        requests_straddling=len(ev.straddling),
        explanation=_flops_explanation(shape, ev, terms, measured, predicted))


def read_bytes_reconciliation(config: Config, scrapes: Sequence[Mapping], requests: Sequence[Mapping],
                              t_start: float | None = None, t_end: float | None = None, tp: int = 1,
                              pp: int = 1, dp: int = 1, concurrency: int | None = None,
                              max_num_batched_tokens: int | None = None,
                              kv_cache_dtype_bytes: float | None = None,
                              weight_dtype_bytes: float | None = None) -> EstimatorReconciliation:
    """vLLM's read-bytes counter over the window against lifecycles + weight reads × steps (from iteration_tokens_total_count)."""
    shape = _shape(config)
    ev = _evidence(scrapes, requests, t_start, t_end, concurrency, max_num_batched_tokens)
    a, b = ev.window
    measured = estimated_counter_increase(scrapes, a, b, READ_BYTES)
    with_outputs = steps_with_outputs(scrapes, a, b)
    # Every engine busy period ends with one step that schedules nothing; the client's records
    # prove a lower bound on them, and each needs at least one request finishing.
    idle_lo = engine_busy_periods(ev.inside.concat(ev.straddling), b)
    idle_hi = len(ev.inside) + len(ev.straddling)
    steps, steps_hi = with_outputs + idle_lo, with_outputs + idle_hi
    terms = predicted_read_bytes_terms(shape, ev.inside, steps, tp, pp, dp, kv_cache_dtype_bytes,
                                       weight_dtype_bytes)
    predicted = sum(terms.values())
    per_req = sum(predicted_read_bytes_per_request_terms(shape, ev.inside, tp, pp, dp,
                                                         kv_cache_dtype_bytes).values())
    w = weight_read_bytes_per_step(shape, tp, pp, dp, weight_dtype_bytes)
    upper = per_req + steps_hi * w
    implied = idle_steps_implied(measured, per_req, with_outputs, w)
    straddle = _straddler_bound(ev, lambda rs: sum(predicted_read_bytes_per_request_terms(
        shape, rs, tp, pp, dp, kv_cache_dtype_bytes).values()))
    diff = measured - predicted
    whole = abs(implied - round(implied)) < 1e-6
    explanation = {
        "weights": (f"vLLM bills {w:,} B of weight reads on every scheduler step, whatever it schedules, "
                    f"so bytes need the step count. Steps with outputs = Δ vllm:iteration_tokens_total_count "
                    f"= {with_outputs:.0f} (one histogram observation per step that returned outputs). "
                    f"Steps without outputs are not in that count but are billed: the step that runs each "
                    f"time the engine goes idle (it hands finished ids to the worker and schedules nothing; "
                    f"the client's records prove {idle_lo} such idle period(s), the {idle_hi} finished "
                    f"requests allow at most {idle_hi}), and every step in which all scheduled requests are "
                    f"mid-way through a chunked prefill ({ev.chunking[0].lower() + ev.chunking[1:]}). The counter implies "
                    f"{implied:.3f} steps beyond those with outputs"
                    + (" — a whole number, as it must be if only such steps differ." if whole else
                       " — not a whole number, so more than the step count differs.")),
        "activations": ("T·D·a·L-type input reads per token and the logits rows: linear in scheduled tokens, "
                        "so they change only with hits, chunking (one logits row per chunk) or preemption, "
                        "as the FLOPs do."),
        "kv_cache": ("Decode reads 2·Σc·kv·d·k·L (every decode step re-reads the whole context at cache "
                     "bytes); prefill reads 2·Σc·kv·d·a·L at activation bytes over Σc, not Σn·c. A chunked "
                     "prompt is billed its context once per chunk, so chunking raises this term."),
        "window": (f"{len(ev.inside)} request(s) inside [{a:.3f}, {b:.3f}] s; {straddle}. Measured − predicted "
                   f"(with {steps:.0f} steps) = {diff:.4g} ({_pct(diff, predicted)}); with {steps_hi:.0f} steps "
                   f"the prediction is {upper:.4g}."),
    }
    return EstimatorReconciliation(
        counter=READ_BYTES, window=ev.window, measured=measured, predicted_terms=terms, predicted=predicted,
        ratio=estimator_ratio(measured, predicted), requests_inside=len(ev.inside),
        requests_straddling=len(ev.straddling), explanation=explanation, steps=steps, steps_upper=steps_hi,
        predicted_upper=upper, idle_steps=implied)


def write_bytes_reconciliation(config: Config, scrapes: Sequence[Mapping], requests: Sequence[Mapping],
                               t_start: float | None = None, t_end: float | None = None, tp: int = 1,
                               pp: int = 1, dp: int = 1, concurrency: int | None = None,
                               max_num_batched_tokens: int | None = None,
                               kv_cache_dtype_bytes: float | None = None) -> EstimatorReconciliation:
    """vLLM's write-bytes counter over the window against the requests' lifecycles (every term scales with tokens)."""
    shape = _shape(config)
    ev = _evidence(scrapes, requests, t_start, t_end, concurrency, max_num_batched_tokens)
    a, b = ev.window
    measured = estimated_counter_increase(scrapes, a, b, WRITE_BYTES)
    terms = predicted_write_bytes_terms(shape, ev.inside, tp, pp, dp, kv_cache_dtype_bytes)
    predicted = sum(terms.values())
    straddle = _straddler_bound(ev, lambda rs: predicted_write_bytes(shape, rs, tp, pp, dp,
                                                                            kv_cache_dtype_bytes))
    diff = measured - predicted
    explanation = {
        "activations": ("Outputs of every projection and FFN GEMM: linear in scheduled tokens T, so only "
                        "hits (fewer tokens), preemption (recompute) or straddling requests change them."),
        "kv_cache": "2·T·kv·d·k·L: every computed token writes its K and V once; linear in T.",
        "logits": "One logits row of V per prefill step and per decode token: chunking adds a row per chunk.",
        "window": (f"{len(ev.inside)} request(s) inside [{a:.3f}, {b:.3f}] s; {straddle}. Measured − predicted "
                   f"= {diff:.4g} ({_pct(diff, predicted)}). No per-step part: a step that schedules "
                   "nothing writes nothing."),
    }
    return EstimatorReconciliation(
        counter=WRITE_BYTES, window=ev.window, measured=measured, predicted_terms=terms, predicted=predicted,
        ratio=estimator_ratio(measured, predicted), requests_inside=len(ev.inside),
        requests_straddling=len(ev.straddling), explanation=explanation)


# ============================================================================ KV pool


def usable_pool_tokens(num_gpu_blocks: int, block_size: int) -> int:
    """Tokens vLLM's kv_cache_usage_perc is a fraction of: (num_gpu_blocks − 1) × block_size, the null block excluded."""
    T._positive("num_gpu_blocks", num_gpu_blocks)
    T._positive("block_size", block_size)
    if num_gpu_blocks < 2:
        raise Absent("reason.pool_all_null")
    return (num_gpu_blocks - 1) * block_size


def pool_tokens_from_cache_config(labels: Mapping[str, str]) -> int:
    """KV pool tokens from cache_config_info: num_gpu_blocks × block_size (the null block included, as the log counts)."""
    pool = S.kv_pool_tokens_from_cache_config(labels)
    if pool.blocks_times_block_size is None:
        raise Absent("reason.cache_config_lacks")
    return pool.blocks_times_block_size


def usable_pool_tokens_from_cache_config(labels: Mapping[str, str]) -> int:
    """Usable KV pool tokens from cache_config_info labels: (num_gpu_blocks − 1) × block_size."""
    blocks, block = S._int_label(labels, "num_gpu_blocks"), S._int_label(labels, "block_size")
    if blocks is None or block is None:
        raise Absent("reason.cache_config_lacks")
    return usable_pool_tokens(blocks, block)


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


def kv_mean_blocks_per_request(input_len: int, output_len: int, block_size: int) -> float:
    """Blocks one request holds on average over its visible steps: mean of ceil((in + j)/block), j = 0 … out − 2."""
    return sum(b * p for b, p in kv_blocks_distribution(input_len, output_len, block_size).items())


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


def expected_kv_usage_mean_fraction(concurrency: float, input_len: int, output_len: int, block_size: int,
                                    usable_pool_tokens: int) -> float:
    """Expected mean KV usage: C × mean blocks per request (ceil((in + j)/block) over j = 0 … out − 2) × block ÷ usable pool."""
    T._non_negative("concurrency", concurrency)
    T._positive("usable_pool_tokens", usable_pool_tokens)
    return concurrency * kv_mean_blocks_per_request(input_len, output_len, block_size) * block_size / usable_pool_tokens


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


def kv_usage_error_pp(measured: float, expected: float) -> float:
    """Measured minus expected KV usage, both fractions of the usable pool, in percentage points."""
    return 100.0 * (measured - expected)


# The intercept of peak KV tokens on input length (length sweeps at one concurrency): what
# the C streams hold beyond their prompts. Invariant: staggered ≤ together.

def _one_setting(values: Sequence[float | None], name: str) -> float:
    """The one value a setting has at every valid point (Absent when it varies or is missing)."""
    if not values or any(v is None for v in values) or len(set(values)) > 1:
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

def lengths_sent(requests: RequestTable) -> tuple[np.ndarray, np.ndarray]:
    """(prompt tokens, output tokens) of each answered request, as its usage reports them."""
    reqs = as_request_table(requests)
    prompt, out = reqs.col("usage_prompt"), reqs.col("usage_completion")
    has = reqs.col("ok").astype(bool) & ~np.isnan(prompt) & ~np.isnan(out) & (out > 0)
    if not has.any():
        raise Absent("reason.no_lengths_sent")
    return prompt[has].astype(np.int64), out[has].astype(np.int64)


def prompt_tokens_sent_mean(requests: RequestTable) -> float:
    """Mean prompt tokens of the answered requests, as their usage reports them."""
    return float(lengths_sent(requests)[0].mean())


def output_tokens_sent_mean(requests: RequestTable) -> float:
    """Mean output tokens of the answered requests, as their usage reports them."""
    return float(lengths_sent(requests)[1].mean())


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
