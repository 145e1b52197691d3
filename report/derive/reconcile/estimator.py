"""vLLM's FLOP and byte estimator against the lifecycles of the requests a window holds: its counters, the steps it billed, the predictions (docs/analyses.md items 7, 15, 16).

vLLM's estimator (`--enable-mfu-metrics`): the counters
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

Each is a pure function over raw samples; the whole-window reconciliations the engine tests
check a real engine against, and the closed forms only they use, are in tests/oracles.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from bundle.request_table.table import RequestTable, as_request_table
from report.architecture import theory as T
from report.derive.series import scrapes as S
from report.ledger import Absent

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
