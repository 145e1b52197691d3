"""The roofline by phase: decode steps and prefills apart, from the model's config.

A time-averaged arithmetic intensity blends prefill (about one FLOP per byte per prompt
token) with decode (a few FLOP per byte per running request), so it lands between the two
and describes neither; each phase is judged on its own intensity against the ridge. These
functions compose the terms the capacity planner uses (params, kvlayout, theory): a dense or
mixture-of-experts model, full or sliding-window attention, the weights a step reads.
"""

from __future__ import annotations

from typing import Any, Mapping

from report.architecture import kvlayout as K
from report.architecture import params as P
from report.architecture import theory as T
from report.architecture.modelconfig import model_shape


def decode_context(input_len: float, output_len: float) -> float:
    """Mean context a request has while it decodes: in + out/2."""
    return input_len + output_len / 2


def prefill_context(input_len: float) -> float:
    """Mean context a prompt token attends to while its prompt is prefilled: L/2."""
    return input_len / 2


def _layout(shape) -> K.KVLayout:
    return K.kv_layout(shape.kinds, shape.sliding_window, T.model_layer_kv_bytes_per_token(shape), 16)


def model_flops_per_token(config: Mapping[str, Any], context_len: float, logits: bool = True) -> float:
    """FLOPs one token costs at a context: 2 × (active non-embedding parameters + the LM head's vocab × hidden, for a token whose logits are computed) + attention over the context each layer attends to."""
    shape = model_shape(config)
    counts = P.param_counts(shape)
    matmul = (P.matmul_flops_per_token(counts.active_non_embedding, counts.unembedding) if logits
              else 2 * counts.active_non_embedding)
    return P.flops_per_token_at_context(matmul, shape.attention_width,
                                        K.attended_layer_tokens(_layout(shape), context_len))


def model_decode_intensity(config: Mapping[str, Any], running: float, input_len: float,
                           output_len: float) -> float:
    """FLOP per byte of one decode step of RUNNING requests at the mean decode context: their FLOPs over the weights the step reads plus each request's KV."""
    shape = model_shape(config)
    ctx = decode_context(input_len, output_len)
    weights = P.weight_bytes_read_per_step(P.param_counts(shape), shape, running)
    return T.decode_step_arithmetic_intensity(
        running, model_flops_per_token(config, ctx), weights,
        K.kv_bytes_read_per_request(_layout(shape), ctx))


def model_prefill_intensity(config: Mapping[str, Any], input_len: float) -> float:
    """FLOP per byte of one prompt's prefill that reads the weights once: L × 2 × active non-embedding parameters ÷ the weights it reads."""
    shape = model_shape(config)
    counts = P.param_counts(shape)
    return T.prefill_arithmetic_intensity(input_len, counts.active_non_embedding,
                                          P.weight_bytes_read_per_step(counts, shape, input_len))


def prefill_flops(config: Mapping[str, Any], tokens: float, input_len: float) -> float:
    """FLOPs of a prefill of TOKENS prompt tokens of prompts of length INPUT_LEN: each token at the prompt's mean context, logits only for a prompt's last token (left out: one row in L)."""
    return tokens * model_flops_per_token(config, prefill_context(input_len), logits=False)


def prefill_flop_rate(config: Mapping[str, Any], input_len: float, prefill_ms: float) -> float:
    """FLOP/s of one prompt's prefill run alone: its FLOPs over the engine's prefill time."""
    T._positive("prefill_ms", prefill_ms)
    return prefill_flops(config, input_len, input_len) / (prefill_ms / 1e3)


def prefill_step_ms(config: Mapping[str, Any], step_tokens: float, input_len: float,
                    flop_rate: float) -> float:
    """Milliseconds of one engine step that carries STEP_TOKENS prompt tokens, at a measured prefill FLOP rate."""
    T._positive("flop_rate", flop_rate)
    return prefill_flops(config, step_tokens, input_len) / flop_rate * 1e3


def step_ms_at_flop_rate(step_gflop: float, flop_rate: float) -> float:
    """Milliseconds of an engine step of STEP_GFLOP at a measured FLOP rate (FLOP/s)."""
    T._positive("flop_rate", flop_rate)
    return step_gflop * 1e9 / flop_rate * 1e3


def step_with_prefill_ms(decode_step_ms: float, prefill_ms: float) -> float:
    """Milliseconds of a decode step that also carries one prompt's whole prefill: the step alone plus that prompt's prefill time alone."""
    return decode_step_ms + prefill_ms


def ttft_behind_step_ms(ttft_ms: float, step_ms: float) -> float:
    """Milliseconds to a first token whose request arrives while such a step runs: its TTFT alone plus, at most, that whole step."""
    return ttft_ms + step_ms


def largest_prefill_step_tokens(input_len: int, waiting_peak: float, budget: int) -> float:
    """Prompt tokens the fullest prefill step of a point carries: the waiting prompts (at least one), up to the step budget (--max-num-batched-tokens)."""
    T._positive("input_len", input_len)
    T._positive("budget", budget)
    return float(min(budget, input_len * max(1.0, waiting_peak)))


def step_ms_at_clock(step_ms: float, reference_clock_mhz: float, clock_mhz: float) -> float:
    """A step's time at another SM clock, if its compute scales with the clock: STEP_MS × the reference clock ÷ this clock."""
    T._positive("clock_mhz", clock_mhz)
    T._positive("reference_clock_mhz", reference_clock_mhz)
    return step_ms * reference_clock_mhz / clock_mhz
