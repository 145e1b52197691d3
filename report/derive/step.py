"""The engine step at each point: its measured time and token mix, and what the model predicts.

The measured side comes from what every vLLM server exports (the step histogram's count, the
prompt, prefix-hit and generation counters), else from the client alone (its in-flight
requests and token rates: every step emits one token per running request). The predicted side
binds report/architecture/stepmodel.py to that mix, the model's config, the KV cache's dtype
as the server states it and the GPU's datasheet peaks at the clock it ran at (the
specification's clock where none was sampled). vLLM's own FLOP and byte counters, NVML and
the GPU's hardware counters are not inputs here: the verdicts hold them against these terms as
second signals (report/judge/rules.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from bundle.request_table.table import RequestTable
from bundle.server_flags import has_flag, server_flag
from report.architecture import roofline as RF
from report.architecture import stepmodel as SM
from report.derive import validity as V
from report.derive.arith import ratio
from report.derive.stats.samples import itl_gaps_ms, percentile
from report.ledger import Absent
from report.registry import DOES_NOT_APPLY, bound_quantity, point_quantity


def point_flag(flag: str, engine_command: Any, settings: Mapping | None, log_args: Mapping | None) -> str | None:
    """A server flag's value at a point: its server set's flags, else the launch command's, else the log's."""
    return server_flag(flag, engine_command, (settings or {}).get("server_flags"), log_args)


@point_quantity(unit="")
def kv_cache_dtype(engine_command: Any = None, settings: dict | None = None, log_args: dict | None = None) -> str:
    """The KV cache's dtype the server ran with (--kv-cache-dtype; "auto" is the model's own dtype)."""
    return point_flag("--kv-cache-dtype", engine_command, settings, log_args) or "auto"


@point_quantity(unit="")
def eager_engine(engine_command: Any = None, settings: dict | None = None, log_args: dict | None = None) -> bool:
    """Whether the server ran without CUDA graphs (--enforce-eager in its set's flags, launch command or log)."""
    if engine_command is None and log_args is None:
        raise Absent("reason.no_engine_command")
    return has_flag("--enforce-eager", engine_command, (settings or {}).get("server_flags")) or \
        bool((log_args or {}).get("enforce_eager"))


def _whole(flag: str, value: str | None) -> int:
    if value is None:
        raise Absent("reason.flag_default", flag=flag)
    try:
        return int(float(value))
    except ValueError:
        raise Absent("reason.flag_unreadable", flag=flag, value=value) from None


@point_quantity(unit="req")
def sequence_cap(engine_command: Any = None, settings: dict | None = None, log_args: dict | None = None) -> int:
    """The most requests the server runs at once (--max-num-seqs), as its set's flags, its launch command or its log state it."""
    return _whole("--max-num-seqs", point_flag("--max-num-seqs", engine_command, settings, log_args))


@point_quantity(unit="tok")
def step_token_budget(engine_command: Any = None, settings: dict | None = None, log_args: dict | None = None,
                      max_num_batched_tokens: int | None = None) -> int:
    """The most tokens one engine step schedules (--max-num-batched-tokens): its set's flag, the launch command's, else what the server log states."""
    value = point_flag("--max-num-batched-tokens", engine_command, settings, log_args)
    if value is None and max_num_batched_tokens is not None:
        return int(max_num_batched_tokens)
    return _whole("--max-num-batched-tokens", value)


@point_quantity(unit="req")
def running_peak(steady_running: list[float]) -> float:
    """Most requests the running gauge counted at once over the steady window."""
    if not steady_running:
        raise Absent("reason.no_gauge_samples", what="vllm:num_requests_running")
    return max(steady_running)


# ---------------------------------------------------------------- the measured step and its mix

def _steps(engine_steps_per_s: float, bracket_start: float, bracket_end: float) -> float:
    steps = engine_steps_per_s * (bracket_end - bracket_start)
    if steps <= 0:
        raise Absent("reason.step_count_unknown", steps=steps)
    return steps


@point_quantity(unit="tok")
def step_prefill_tokens_server(prompt_tokens_server: float, engine_steps_per_s: float, bracket_start: float,
                               bracket_end: float, prefix_cache_hits: float | None = None) -> float:
    """Prompt tokens an engine step computes on average: the prompt counter less the prefix cache's hits, over the steps counted in the window."""
    return max(0.0, prompt_tokens_server - (prefix_cache_hits or 0.0)) / _steps(engine_steps_per_s, bracket_start, bracket_end)


@point_quantity(unit="tok")
def step_decode_tokens_server(generation_tokens_server: float, engine_steps_per_s: float, bracket_start: float,
                              bracket_end: float) -> float:
    """Tokens an engine step generates on average (one per running request it decodes): the generation counter over the steps counted in the window."""
    return generation_tokens_server / _steps(engine_steps_per_s, bracket_start, bracket_end)


def _per_endpoint(value: float, endpoints: Sequence | None) -> float:
    """VALUE shared evenly over the endpoints the client sent to (the plan's, not the server's count)."""
    return value / max(1, len(endpoints or ()))


@point_quantity(unit="ms")
def step_ms_client(client_inflight_mean: float, output_tok_s: float) -> float:
    """One engine's mean step as the client sees it: each step emits one token per request in flight, so requests in flight over output tokens per second (the same for each of several engines fed evenly)."""
    return ratio(client_inflight_mean, output_tok_s, scale=1e3)


@point_quantity(unit="tok")
def step_decode_tokens_client(client_inflight_mean: float, endpoints: list | None = None) -> float:
    """Tokens an engine step generates as the client sees it: one per request in flight (those waiting in the server's queue included), shared over the endpoints."""
    return _per_endpoint(client_inflight_mean, endpoints)


@point_quantity(unit="tok")
def step_prefill_tokens_client(total_tok_s: float, output_tok_s: float, step_ms_client: float,
                               endpoints: list | None = None) -> float:
    """Prompt tokens an engine step carries as the client sees it: the prompt tokens it sent per second over the steps per second, shared over the endpoints (no prefix-cache hit subtracted)."""
    return _per_endpoint(max(0.0, total_tok_s - output_tok_s), endpoints) * step_ms_client / 1e3


@point_quantity(unit="ms", first_present=True)
def step_ms_measured(step_ms_mean: float | None = None, step_ms_client: float | None = None) -> float:
    """The engine's mean step: its step histogram's count over the window, else as the client sees it."""
    return step_ms_mean if step_ms_mean is not None else step_ms_client


@point_quantity(unit="tok", first_present=True)
def step_prefill_tokens(step_prefill_tokens_server: float | None = None,
                        step_prefill_tokens_client: float | None = None) -> float:
    """Prompt tokens the mean step computes: the server's counters, else the client's rates."""
    return step_prefill_tokens_server if step_prefill_tokens_server is not None else step_prefill_tokens_client


@point_quantity(unit="tok", first_present=True)
def step_decode_tokens(step_decode_tokens_server: float | None = None,
                       step_decode_tokens_client: float | None = None) -> float:
    """Tokens the mean step generates: the server's counters, else the client's requests in flight."""
    return step_decode_tokens_server if step_decode_tokens_server is not None else step_decode_tokens_client


# ---------------------------------------------------------------- what the model predicts
# Steps come in two kinds: those that carry a prompt's chunk beside the running requests' decode
# tokens, and decode-only ones. A step's time is the larger of its compute and memory terms (in
# one step every matrix product has the same rows, so each runs at the same roof); the mean step
# is the two kinds weighted by the share of steps that carry a chunk. The mean mix alone would
# put the prefill's FLOPs into every step and hide the roof each kind of step sits at.


def _decode_context(modelled_input_len: float, modelled_output_len: float) -> float:
    return modelled_input_len + modelled_output_len / 2


@point_quantity(unit="tok")
def step_prefill_chunk_tokens(modelled_input_len: float, step_token_budget: int | None = None,
                              prefix_cache_hit_rate: float | None = None) -> float:
    """Prompt tokens a step that prefills carries: one prompt's uncached tokens, at most the step budget."""
    computed = modelled_input_len * (1.0 - (prefix_cache_hit_rate or 0.0))
    if computed <= 0:
        raise Absent("reason.step_carries_no_token")
    return min(float(step_token_budget), computed) if step_token_budget else computed


@point_quantity(unit="fraction")
def step_prefill_share(step_prefill_tokens: float, step_prefill_chunk_tokens: float) -> float:
    """The share of steps that carry a prompt's chunk: prompt tokens per step over the tokens one such step carries (at most 1)."""
    return min(1.0, ratio(step_prefill_tokens, step_prefill_chunk_tokens))


@point_quantity(unit="GFLOP")
def step_gflop_model(model_config: Mapping[str, Any], step_prefill_tokens: float, step_decode_tokens: float,
                     modelled_input_len: float, modelled_output_len: float,
                     tensor_parallel_size: int | None = None) -> float:
    """GFLOP one GPU computes in the mean step, from the architecture: its prompt tokens at half the prompt's context, its decode tokens at in + out/2."""
    flops = SM.step_flops(model_config, step_prefill_tokens, modelled_input_len / 2,
                          step_decode_tokens, _decode_context(modelled_input_len, modelled_output_len))
    return flops / (tensor_parallel_size or 1) / 1e9


def _step_terms(model_config, kv_cache_dtype, prefill, decode, L, out, tp, tflops, bandwidth, share) -> tuple[float, float]:
    """(compute ms, memory ms) of one step of PREFILL prompt and DECODE decode tokens on one GPU."""
    ctx = _decode_context(L, out)
    flops = SM.step_flops(model_config, prefill, L / 2, decode, ctx) / (tp or 1)
    read = SM.step_read_bytes(model_config, kv_cache_dtype, prefill, decode, ctx) / (tp or 1)
    return SM.term_ms(flops, tflops * 1e12) * share, SM.term_ms(read, bandwidth) * share


@point_quantity(unit="TFLOP/s", first_present=True)
def compute_ceiling_tflops(compute_ceiling_at_clock: float | None = None, peak_tflops: float | None = None) -> float:
    """The dense tensor peak the step's FLOPs run against: at the SM clock the GPU ran at where sampled, else the datasheet's figure at its specified clock."""
    return compute_ceiling_at_clock if compute_ceiling_at_clock is not None else peak_tflops


@point_quantity(unit="TFLOP/s")
def compute_ceiling_at_clock(peak_tflops: float, sm_clock_load_mhz: float, peak_clock_mhz: float) -> float:
    """The dense tensor peak at the sampled SM clock, scaled from the clock the datasheet specifies it at."""
    return SM.ceiling_at_clock(peak_tflops, sm_clock_load_mhz, peak_clock_mhz)


def _sharing(engines_stepping: int | None, gpus_sampled: int | None) -> float:
    """How many engines share one GPU's roofs (1 where one engine steps); Absent where several
    engines step and no GPU was sampled (how many GPUs they share is not known)."""
    if (engines_stepping or 1) > 1 and not gpus_sampled:
        raise Absent("reason.engines_gpus_unknown", engines=engines_stepping)
    return max((engines_stepping or 1) / gpus_sampled, 1.0) if gpus_sampled else 1.0


def step_term_ms(model_config: Mapping[str, Any], kv_cache_dtype: str, prefill_tokens: float, step_decode_tokens: float,
                 modelled_input_len: float, modelled_output_len: float, compute_ceiling_tflops: float,
                 peak_bandwidth: float, term: int, tensor_parallel_size: int | None = None,
                 engines_stepping: int | None = None, gpus_sampled: int | None = None) -> float:
    """One term of a step of PREFILL_TOKENS prompt tokens beside the decode tokens on one GPU: TERM 0, compute (its FLOPs at the compute ceiling), or 1, memory (the weights and the decoding requests' KV at peak bandwidth)."""
    terms = _step_terms(model_config, kv_cache_dtype, prefill_tokens, step_decode_tokens, modelled_input_len,
                        modelled_output_len, tensor_parallel_size, compute_ceiling_tflops, peak_bandwidth,
                        _sharing(engines_stepping, gpus_sampled))
    return terms[term]


# The two kinds of step, each with its two terms: a step carrying a prompt's chunk, and a decode-only step.
for _kind, _prefill in (("prefill", "step_prefill_chunk_tokens"), ("decode", 0.0)):
    for _term, _name in enumerate(("compute", "memory")):
        bound_quantity("point", f"{_kind}_step_{_name}_ms_model", step_term_ms, unit="ms",
                       prefill_tokens=_prefill, term=_term)


@point_quantity(unit="ms")
def step_ms_model(step_prefill_share: float, prefill_step_compute_ms_model: float, prefill_step_memory_ms_model: float,
                  decode_step_compute_ms_model: float, decode_step_memory_ms_model: float) -> float:
    """The mean step the model predicts at the roofs: steps with a chunk and decode-only steps, each at the larger of its terms, weighted by their shares."""
    return SM.mixed_step_ms(step_prefill_share, prefill_step_compute_ms_model, prefill_step_memory_ms_model,
                            decode_step_compute_ms_model, decode_step_memory_ms_model)


@point_quantity(unit="fraction")
def step_compute_share(step_prefill_share: float, prefill_step_compute_ms_model: float, prefill_step_memory_ms_model: float,
                       decode_step_compute_ms_model: float, decode_step_memory_ms_model: float) -> float:
    """The share of the modelled step time spent in steps whose compute term is the larger (the rest sits at the bandwidth roof)."""
    return SM.compute_bound_share(step_prefill_share, prefill_step_compute_ms_model, prefill_step_memory_ms_model,
                                  decode_step_compute_ms_model, decode_step_memory_ms_model)


@point_quantity(unit="fraction")
def step_roof_share(step_ms_model: float, step_ms_measured: float) -> float:
    """The share of the measured step the roofs explain: the modelled step over the measured one (the efficiency against the roofs)."""
    return ratio(step_ms_model, step_ms_measured)


@point_quantity(unit="ms")
def step_host_ms(step_ms_measured: float, step_ms_model: float) -> float:
    """What the measured step takes beyond the roofs: the host side (scheduling, Python, launches) or the roofs run below their peaks."""
    return step_ms_measured - step_ms_model


# ---------------------------------------------------------------- what relieving a queue predicts
# A server that queues behind its sequence cap or its pool runs fewer requests than the client
# sends. With every sent request running, each step carries C decode tokens and the prompts in
# the same proportion (each request's prompt is computed once a lifetime), at the efficiency the
# point's own step ran at against the roofs.


@point_quantity(unit="ms")
def all_running_step_ms_model(model_config: Mapping[str, Any], kv_cache_dtype: str, concurrency: float,
                              step_decode_tokens: float, step_prefill_tokens: float, step_prefill_chunk_tokens: float,
                              modelled_input_len: float, modelled_output_len: float, compute_ceiling_tflops: float,
                              peak_bandwidth: float, step_roof_share: float, tensor_parallel_size: int | None = None,
                              engines_stepping: int | None = None, gpus_sampled: int | None = None) -> float:
    """The mean step with every request the client sent running at once: C decode tokens and the prompts scaled alike, at the roofs, at the efficiency the point's step ran at."""
    if step_decode_tokens <= 0 or step_roof_share <= 0:
        raise Absent("reason.denominator_zero")
    scale = max(1.0, concurrency / step_decode_tokens)
    decode, prefill = step_decode_tokens * scale, step_prefill_tokens * scale
    share, args = _sharing(engines_stepping, gpus_sampled), (modelled_input_len, modelled_output_len,
                                                            tensor_parallel_size, compute_ceiling_tflops, peak_bandwidth)
    pc, pm = _step_terms(model_config, kv_cache_dtype, step_prefill_chunk_tokens, decode, *args, share)
    dc, dm = _step_terms(model_config, kv_cache_dtype, 0.0, decode, *args, share)
    return SM.mixed_step_ms(min(1.0, ratio(prefill, step_prefill_chunk_tokens)), pc, pm, dc, dm) / step_roof_share


@point_quantity(unit="tok/s")
def all_running_output_tok_s_model(concurrency: float, step_decode_tokens: float, all_running_step_ms_model: float) -> float:
    """Output tokens per second one engine would give with every sent request running: one token per request each predicted step."""
    return ratio(max(concurrency, step_decode_tokens), all_running_step_ms_model, scale=1e3)


@point_quantity(unit="×")
def all_running_output_gain_model(all_running_output_tok_s_model: float, output_tok_s: float) -> float:
    """The output throughput predicted with every sent request running over the one measured."""
    return ratio(all_running_output_tok_s_model, output_tok_s)


@point_quantity(unit="tok")
def tail_step_prefill_tokens(modelled_input_len: float, waiting_peak: float, step_token_budget: int,
                             prefix_cache_hit_rate: float | None = None) -> float:
    """Prompt tokens the fullest step of the point computes: the waiting prompts' uncached tokens (at least one prompt's), up to the step budget."""
    computed = modelled_input_len * (1.0 - (prefix_cache_hit_rate or 0.0))
    if computed <= 0:
        raise Absent("reason.step_carries_no_token")
    return RF.largest_prefill_step_tokens(computed, waiting_peak, step_token_budget)


@point_quantity(unit="ms")
def itl_tail_ms_model(model_config: Mapping[str, Any], kv_cache_dtype: str, tail_step_prefill_tokens: float,
                      step_decode_tokens: float, modelled_input_len: float, modelled_output_len: float,
                      compute_ceiling_tflops: float, peak_bandwidth: float, step_roof_share: float,
                      tensor_parallel_size: int | None = None, engines_stepping: int | None = None,
                      gpus_sampled: int | None = None) -> float:
    """The gap a decoding request sees when its step carries the fullest prefill: that step at the roofs, at the efficiency the point's mean step ran at (the ITL tail the step budget sets)."""
    if step_roof_share <= 0:
        raise Absent("reason.denominator_zero")
    c, m = _step_terms(model_config, kv_cache_dtype, tail_step_prefill_tokens, step_decode_tokens, modelled_input_len,
                       modelled_output_len, tensor_parallel_size, compute_ceiling_tflops, peak_bandwidth,
                       _sharing(engines_stepping, gpus_sampled))
    return max(c, m) / step_roof_share


@point_quantity(unit="×")
def itl_p99_over_tail_model(itl_ms_p99: float, itl_tail_ms_model: float) -> float:
    """The measured ITL p99 over the gap the fullest prefill step predicts (1: the tail is that step)."""
    return ratio(itl_ms_p99, itl_tail_ms_model)


@point_quantity(unit="×")
def step_flops_counter_ratio(step_gflop: float, step_gflop_model: float) -> float:
    """vLLM's FLOP counter per step over the model's FLOPs per step (1: the counter confirms the compute term's size)."""
    return ratio(step_gflop, step_gflop_model)


# ---------------------------------------------------------------- how often a prefill lands in a decode gap
# In a closed loop of C streams each of the C - 1 others prefills one prompt per lifetime of a
# request, that is once per out - 1 token gaps of a decoding stream, in as many steps as the step
# budget splits its uncached prompt into. Those gaps are the longest, so they fill the top of the
# ITL distribution from the percentile 100 (1 - share) up: at C=2 with 256 output tokens, one gap
# in 255, the top 0.4 %, above what p99 reads.

# The percentile the pages read the ITL tail at (policy, report/derive/validity.py).
TAIL_PERCENTILE = V.TAIL_PERCENTILE


@point_quantity(unit="")
def prefill_steps_per_prompt(modelled_input_len: float, step_token_budget: int | None = None,
                             prefix_cache_hit_rate: float | None = None) -> int:
    """Engine steps one prompt's prefill takes: its uncached tokens over the step budget, rounded up (one step without a budget)."""
    computed = modelled_input_len * (1.0 - (prefix_cache_hit_rate or 0.0))
    if computed <= 0:
        raise Absent("reason.step_carries_no_token")
    return max(1, math.ceil(computed / step_token_budget)) if step_token_budget else 1


@point_quantity(unit="fraction")
def prefill_gap_share(closed_loop_concurrency: int, modelled_output_len: float, prefill_steps_per_prompt: int) -> float:
    """The share of a decoding stream's token gaps whose step carries another stream's prefill: C - 1 prompts, each in its prefill steps, per lifetime of out - 1 gaps (at most 1)."""
    if not closed_loop_concurrency or closed_loop_concurrency < 2:
        return DOES_NOT_APPLY
    gaps = modelled_output_len - 1
    if gaps <= 0:
        raise Absent("reason.denominator_zero")
    return min(1.0, (closed_loop_concurrency - 1) * prefill_steps_per_prompt / gaps)


@point_quantity(unit="")
def prefill_gap_percentile(prefill_gap_share: float) -> float:
    """The ITL percentile from which up the gaps carrying another stream's prefill lie: 100 × (1 - their share)."""
    return 100.0 * (1.0 - prefill_gap_share)


@point_quantity(unit="ms")
def itl_ms_at_prefill_gaps(measured: RequestTable, prefill_gap_percentile: float) -> float:
    """The measured inter-token latency at the percentile where the gaps carrying another stream's prefill begin, ms."""
    return percentile(itl_gaps_ms(measured), prefill_gap_percentile)


@point_quantity(unit="ms")
def itl_p99_first_step_predicted(prefill_gap_share: float, itl_p99_with_prefill_predicted: float,
                                 first_valid_itl_ms_p99: float) -> float:
    """ITL p99 one step up from a single stream, with how often a prefill lands in a decode gap: that step where such gaps are at least 1 % of all, else the single stream's ITL p99 (decode steps alone), ms."""
    if prefill_gap_share >= 1.0 - TAIL_PERCENTILE / 100.0:
        return itl_p99_with_prefill_predicted
    return first_valid_itl_ms_p99


@point_quantity(unit="×")
def itl_p99_over_first_step(itl_ms_p99: float, itl_p99_first_step_predicted: float) -> float:
    """The measured ITL p99 over its prediction with the prefill's frequency counted (1: the prediction holds)."""
    return ratio(itl_ms_p99, itl_p99_first_step_predicted)


@point_quantity(unit="×")
def itl_prefill_gaps_over_step(itl_ms_at_prefill_gaps: float, itl_p99_with_prefill_predicted: float,
                               first_valid_concurrency: int) -> float:
    """One step up from a single stream, the measured ITL at the percentile the prefill gaps begin over the decode step predicted to carry a whole prefill (1: those gaps are such steps)."""
    if first_valid_concurrency != 1:
        raise Absent("reason.not_step_to_two_streams")
    return ratio(itl_ms_at_prefill_gaps, itl_p99_with_prefill_predicted)
