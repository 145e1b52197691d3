"""The tests' oracles: what vLLM's estimator counters and KV gauge should read, and closed forms only tests check.

tests/integration/test_reconcile.py and test_kv_real.py (and the unit tests of their steps) hold
a real engine's counters against the reconciliations here, and tests/unit/report/test_theory.py
checks the closed forms of a dense model (parameters, weight bytes, FLOPs per token, vLLM's
read and write byte terms) that theory.py's quantities agree with; no report prints them, so
they are not ledger quantities and this is not a quantity module. Each reconciliation returns the measured
increase, the prediction term by term, their ratio and why they may differ (docs/analyses.md
items 15, 16).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from bundle.request_table.table import RequestTable, as_request_table
from report.architecture import theory as T
from report.architecture.modelconfig import ModelShape
from report.architecture.theory import (
    _non_negative,
    _par,
    _positive,
    _require_mla_dims,
    attention_flops_per_context_token,
    attention_params_per_layer,
    request_peak_tokens,
    vllm_step_requests,
)
from report.derive.reconcile.estimator import (
    FLOPS,
    ITERATIONS,
    PREEMPTIONS,
    PREFIX_HITS,
    READ_BYTES,
    WRITE_BYTES,
    Config,
    _check_counts,
    _shape,
    _token_count_rows,
    _window_rows,
    estimated_counter_increase,
    estimator_ratio,
    lifecycle_window,
    predicted_flops,
    predicted_flops_terms,
    requests_inside_window,
)
from report.derive.reconcile.kvpool import kv_blocks_distribution
from report.derive.series import cache_config
from report.derive.series import scrapes as S
from report.ledger import Absent


def counter_window(scrapes: Sequence[Mapping], t_start: float | None, t_end: float | None) -> tuple[float, float]:
    """The start times of the first and last successful scrapes in [t_start, t_end]: a counter's increase runs between them."""
    ok = S.scrapes_in_window(scrapes, t_start, t_end)
    if len(ok) < 2:
        raise Absent("reason.counter_needs_two_scrapes", n=len(ok))
    return ok[0]["t"], ok[-1]["t"]


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


def request_lifecycle_steps(prompt_tokens: int, completion_tokens: int,
                            cached_tokens: int = 0) -> list[tuple[int, int, bool]]:
    """Each scheduler step of one request as vLLM's estimator sees it: prefill (n = prompt − cached, c = prompt), then n = 1, c = prompt + j."""
    _check_counts(prompt_tokens, completion_tokens, cached_tokens)
    steps = [(prompt_tokens - cached_tokens, prompt_tokens, True)]
    steps += [(1, prompt_tokens + j, False) for j in range(1, completion_tokens)]
    return steps


def predicted_write_bytes_terms(config: Config, requests: Sequence[Mapping], tp: int = 1, pp: int = 1,
                                dp: int = 1, kv_cache_dtype_bytes: float | None = None) -> dict[str, int]:
    """vLLM's estimated bytes written per GPU summed over the requests' lifecycles, term by term."""
    shape = _shape(config)
    return vllm_estimated_write_bytes_terms(shape, _window_rows(shape, requests), tp, pp, dp,
                                              kv_cache_dtype_bytes)


def predicted_write_bytes(config: Config, requests: Sequence[Mapping], tp: int = 1, pp: int = 1,
                          dp: int = 1, kv_cache_dtype_bytes: float | None = None) -> int:
    """vLLM's estimated bytes written per GPU summed over the requests' lifecycles (no per-step part)."""
    return sum(predicted_write_bytes_terms(config, requests, tp, pp, dp, kv_cache_dtype_bytes).values())


def weight_read_bytes_per_step_terms(config: Config, tp: int = 1, pp: int = 1, dp: int = 1,
                                     weight_dtype_bytes: float | None = None) -> dict[str, int]:
    """The read-bytes terms vLLM bills on every scheduler step whatever it schedules (the weight reads), by term."""
    terms = vllm_estimated_read_bytes_terms(_shape(config), [], tp, pp, dp, None, weight_dtype_bytes)
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
    terms = vllm_estimated_read_bytes_terms(shape, rows, tp, pp, dp, kv_cache_dtype_bytes, None)
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


def usable_pool_tokens(num_gpu_blocks: int, block_size: int) -> int:
    """Tokens vLLM's kv_cache_usage_perc is a fraction of: (num_gpu_blocks − 1) × block_size, the null block excluded."""
    T._positive("num_gpu_blocks", num_gpu_blocks)
    T._positive("block_size", block_size)
    if num_gpu_blocks < 2:
        raise Absent("reason.pool_all_null")
    return (num_gpu_blocks - 1) * block_size


def pool_tokens_from_cache_config(labels: Mapping[str, str]) -> int:
    """KV pool tokens from cache_config_info: num_gpu_blocks × block_size (the null block included, as the log counts)."""
    pool = cache_config.kv_pool_tokens_from_cache_config(labels)
    if pool.blocks_times_block_size is None:
        raise Absent("reason.cache_config_lacks")
    return pool.blocks_times_block_size


def usable_pool_tokens_from_cache_config(labels: Mapping[str, str]) -> int:
    """Usable KV pool tokens from cache_config_info labels: (num_gpu_blocks − 1) × block_size."""
    blocks, block = cache_config._int_label(labels, "num_gpu_blocks"), cache_config._int_label(labels, "block_size")
    if blocks is None or block is None:
        raise Absent("reason.cache_config_lacks")
    return usable_pool_tokens(blocks, block)


def kv_mean_blocks_per_request(input_len: int, output_len: int, block_size: int) -> float:
    """Blocks one request holds on average over its visible steps: mean of ceil((in + j)/block), j = 0 … out − 2."""
    return sum(b * p for b, p in kv_blocks_distribution(input_len, output_len, block_size).items())


def expected_kv_usage_mean_fraction(concurrency: float, input_len: int, output_len: int, block_size: int,
                                    usable_pool_tokens: int) -> float:
    """Expected mean KV usage: C × mean blocks per request (ceil((in + j)/block) over j = 0 … out − 2) × block ÷ usable pool."""
    T._non_negative("concurrency", concurrency)
    T._positive("usable_pool_tokens", usable_pool_tokens)
    return concurrency * kv_mean_blocks_per_request(input_len, output_len, block_size) * block_size / usable_pool_tokens


def kv_usage_error_pp(measured: float, expected: float) -> float:
    """Measured minus expected KV usage, both fractions of the usable pool, in percentage points."""
    return 100.0 * (measured - expected)


# Closed forms of theory.py that only the unit tests check (tests/unit/report/test_theory.py).

def max_concurrency(pool_tokens: int, input_len: int, output_len: int, block_size: int) -> int:
    """How many requests of in + out tokens fit in the pool at once (whole blocks each)."""
    _positive("pool_tokens", pool_tokens)
    peak = request_peak_tokens(input_len, output_len, block_size)
    _positive("request peak tokens", peak)
    return pool_tokens // peak


def max_input_len_at_concurrency_whole_blocks(pool_tokens: int, concurrency: int, output_len: int,
                                              block_size: int) -> int:
    """Longest prompt that fits C requests when each request holds whole blocks: floor(pool/block/C)·block − out."""
    _positive("pool_tokens", pool_tokens)
    _positive("concurrency", concurrency)
    _positive("block_size", block_size)
    _non_negative("output_len", output_len)
    longest = (pool_tokens // block_size // concurrency) * block_size - output_len
    if longest < 1:
        raise Absent("reason.pool_tokens_too_small_blocks",
                     pool_tokens=pool_tokens, concurrency=concurrency, output_len=output_len,
                     block_size=block_size)
    return longest


def params_non_embedding(layers: int, hidden: int, heads: int, kv_heads: int, head_dim: int,
                         intermediate: int) -> int:
    """Non-embedding parameters of a dense decoder: per layer the attention matrices plus a gated FFN's three matrices."""
    _positive("layers", layers)
    _positive("intermediate", intermediate)
    per_layer = attention_params_per_layer(hidden, heads, kv_heads, head_dim) + 3 * hidden * intermediate
    return layers * per_layer


def embedding_params(vocab: int, hidden: int, tied_embeddings: bool) -> int:
    """Embedding parameters: the input table plus the LM head, counted once when they are tied."""
    _positive("vocab", vocab)
    _positive("hidden", hidden)
    return vocab * hidden * (1 if tied_embeddings else 2)


def weight_bytes(params_non_embedding: int, vocab: int, hidden: int, dtype_bytes: float,
                 tied_embeddings: bool) -> int:
    """Bytes the weights occupy: (non-embedding + input embedding + LM head unless tied) × dtype bytes."""
    _positive("params_non_embedding", params_non_embedding)
    _positive("dtype_bytes", dtype_bytes)
    return int((params_non_embedding + embedding_params(vocab, hidden, tied_embeddings)) * dtype_bytes)


def flops_per_token(params_non_embedding: float, attention_width: int, layers: int, context_len: float = 0) -> float:
    """FLOPs to compute one token: 2N (non-embedding parameters) + 4 × d_model × layers per context token."""
    _positive("params_non_embedding", params_non_embedding)
    _non_negative("context_len", context_len)
    return 2 * params_non_embedding + attention_flops_per_context_token(attention_width, layers) * context_len


def vllm_estimated_read_bytes_terms(shape: ModelShape, requests: Sequence[Sequence[int | bool]], tp: int = 1,
                                    pp: int = 1, dp: int = 1, kv_cache_dtype_bytes: float | None = None,
                                    weight_dtype_bytes: float | None = None) -> dict[str, int]:
    """vLLM's estimated bytes read per GPU for one scheduler step, term by term (weights, activations, KV reads)."""
    ctx = vllm_step_requests(requests)
    p = _par(shape, tp, pp, dp, kv_cache_dtype_bytes, weight_dtype_bytes)
    T, D, a, w, k = ctx.tokens, shape.hidden, p.a, p.w, p.k
    terms: dict[str, int] = {}
    if shape.is_mla:
        _require_mla_dims(shape)
        L = p.L_int
        qk = shape.qk_nope_head_dim + shape.qk_rope_head_dim
        c, r, vd, qr = shape.kv_lora_rank, shape.qk_rope_head_dim, shape.v_head_dim, shape.q_lora_rank
        if qr is not None:
            terms["mla_attn.q_a_input"] = int(T * D * a * L)
            terms["mla_attn.q_a_weight"] = int(D * qr * w * L)
            terms["mla_attn.q_b_input"] = int(T * qr * a * L)
            terms["mla_attn.q_b_weight"] = int(qr * p.q * qk * w * L)
        else:
            terms["mla_attn.q_input"] = int(T * D * a * L)
            terms["mla_attn.q_weight"] = int(D * p.q * qk * w * L)
        terms["mla_attn.kv_a_input"] = int(T * D * a * L)
        terms["mla_attn.kv_a_weight"] = int(D * (c + r) * w * L)
        terms["mla_attn.kv_b_input"] = int(T * c * a * L)
        terms["mla_attn.kv_b_weight"] = int(c * p.q * (shape.qk_nope_head_dim + vd) * w * L)
        attn = 0
        if ctx.prefill_tokens:
            attn += (ctx.prefill_tokens * p.q * qk * a * L
                     + ctx.prefill_context * p.q * (qk + vd) * a * L)
        if ctx.decode_tokens:
            attn += ctx.decode_tokens * p.q * qk * a * L + ctx.decode_context * (c + r) * k * L
        if ctx.tokens:
            terms["mla_attn.attn_input"] = int(attn)
        terms["mla_attn.out_input"] = int(T * p.q * vd * a * L)
        terms["mla_attn.out_weight"] = int(p.q * vd * D * w * L)
    else:
        d, L = shape.head_dim, p.L
        win = shape.sliding_window
        terms["attn.qkv_input"] = int(T * D * a * L)
        terms["attn.qkv_weight"] = int(D * (p.q + 2 * p.kv) * d * w * L)
        attn = 0.0
        if ctx.prefill_tokens:
            # vLLM bills prefill K/V at activation bytes over Σ context (not Σ n·c).
            attn += (ctx.prefill_tokens * p.q + 2 * ctx.context_in_window(win, True) * p.kv) * d * a * L
        if ctx.decode_tokens:
            attn += (ctx.decode_tokens * p.q * d * a * L
                     + 2 * ctx.context_in_window(win, False) * p.kv * d * k * L)
        if ctx.tokens:
            terms["attn.attn_input"] = int(attn)
        terms["attn.out_input"] = int(T * p.q * d * a * L)
        terms["attn.out_weight"] = int(p.q * d * D * w * L)
    if p.L_int:
        Ld, DI = p.L_int, p.ffn_inter
        terms["ffn.dense_up_gate_input"] = int(T * D * a * Ld)
        terms["ffn.dense_up_gate_weights"] = int(2 * D * DI * w * Ld)
        terms["ffn.dense_silu_input"] = int(2 * T * DI * a * Ld)
        terms["ffn.dense_down_input"] = int(T * DI * a * Ld)
        terms["ffn.dense_down_weights"] = int(D * DI * w * Ld)
    terms["unembed.input"] = int(ctx.logits_tokens * D * a)
    terms["unembed.weight"] = int(D * p.vocab * w)
    return terms


def vllm_estimated_write_bytes_terms(shape: ModelShape, requests: Sequence[Sequence[int | bool]], tp: int = 1,
                                     pp: int = 1, dp: int = 1,
                                     kv_cache_dtype_bytes: float | None = None) -> dict[str, int]:
    """vLLM's estimated bytes written per GPU for one scheduler step, term by term (activations, KV cache writes, logits)."""
    ctx = vllm_step_requests(requests)
    p = _par(shape, tp, pp, dp, kv_cache_dtype_bytes, None)
    T, D, a, k = ctx.tokens, shape.hidden, p.a, p.k
    terms: dict[str, int] = {}
    if shape.is_mla:
        _require_mla_dims(shape)
        L = p.L_int
        qk = shape.qk_nope_head_dim + shape.qk_rope_head_dim
        c, r, vd, qr = shape.kv_lora_rank, shape.qk_rope_head_dim, shape.v_head_dim, shape.q_lora_rank
        if qr is not None:
            terms["mla_attn.q_a_output"] = int(T * qr * a * L)
            terms["mla_attn.q_b_output"] = int(T * p.q * qk * a * L)
        else:
            terms["mla_attn.q_output"] = int(T * p.q * qk * a * L)
        terms["mla_attn.kv_a_output"] = int(T * (c + r) * a * L)
        terms["mla_attn.kv_b_output"] = int(T * p.q * (shape.qk_nope_head_dim + vd) * a * L)
        terms["mla_attn.kv_cache"] = int(T * (c + r) * k * L)
        terms["mla_attn.out_output"] = int(T * D * a * L)
    else:
        d, L = shape.head_dim, p.L
        terms["attn.qkv_output"] = int(T * (p.q + 2 * p.kv) * d * a * L)
        terms["attn.kv_cache"] = int(2 * T * p.kv * d * k * L)
        terms["attn.out_output"] = int(T * D * a * L)
    if p.L_int:
        Ld, DI = p.L_int, p.ffn_inter
        terms["ffn.dense_up_gate_output"] = int(2 * T * DI * a * Ld)
        terms["ffn.dense_silu_output"] = int(T * DI * a * Ld)
        terms["ffn.dense_down_output"] = int(T * D * a * Ld)
    terms["unembed.output"] = int(ctx.logits_tokens * p.vocab * a)
    return terms


def vllm_estimated_read_bytes_by_kind(shape: ModelShape, requests: Sequence[Sequence[int | bool]], tp: int = 1,
                                      pp: int = 1, dp: int = 1, kv_cache_dtype_bytes: float | None = None,
                                      weight_dtype_bytes: float | None = None) -> dict[str, int]:
    """vLLM's estimated read bytes per GPU for one step grouped as weights, activations and KV cache reads."""
    terms = vllm_estimated_read_bytes_terms(shape, requests, tp, pp, dp, kv_cache_dtype_bytes, weight_dtype_bytes)
    weights = sum(v for key, v in terms.items() if key.endswith(("_weight", "_weights", ".weight")))
    ctx = vllm_step_requests(requests)
    p = _par(shape, tp, pp, dp, kv_cache_dtype_bytes, weight_dtype_bytes)
    # Only decode reads the KV cache at cache dtype; attn_input's other parts are activations.
    if shape.is_mla:
        kv = int(ctx.decode_context * (shape.kv_lora_rank + shape.qk_rope_head_dim) * p.k * p.L_int)
    else:
        kv = int(2 * ctx.context_in_window(shape.sliding_window, False) * p.kv * shape.head_dim * p.k * p.L)
    total = sum(terms.values())
    return {"weights": weights, "activations": total - weights - kv, "kv_cache": kv}
