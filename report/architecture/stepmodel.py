"""The engine step predicted from the model's structure and the GPU's datasheet.

One engine step runs every scheduled token through the model once: the prompt tokens it
prefills and one token for each request it decodes. Its work has two terms, each a time at a
roof of the device:

- compute: the step's FLOPs (every token's matrix products, its attention over the context it
  attends to, the LM head for the tokens whose logits are computed) at the dense tensor peak
  scaled to the SM clock the GPU ran at;
- memory: the bytes the step reads (the weights once, each decoding request's KV over its
  context, in the KV cache's own dtype) at the peak memory bandwidth.

A step cannot be shorter than the larger term; what the measured step takes beyond it is the
host side (scheduling, Python, kernel launches) or a roof reached at a lower efficiency. These
functions are pure: the ledger binds them to a point's measured token mix (report/derive/step.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from report.architecture import kvlayout as K
from report.architecture import params as P
from report.architecture import theory as T
from report.architecture.modelconfig import model_shape
from report.ledger import Absent

BLOCK_TOKENS = 16   # the KV layout's block size: it does not change bytes read, only rounding


def _layout(config: Mapping[str, Any], kv_cache_dtype: str) -> K.KVLayout:
    shape = model_shape(config)
    return K.kv_layout(shape.kinds, shape.sliding_window,
                       T.model_layer_kv_bytes_per_token(shape, kv_cache_dtype), BLOCK_TOKENS)


def token_flops(config: Mapping[str, Any], context_len: float, logits: bool) -> float:
    """FLOPs of one token at a context: its matrix products (the LM head where its logits are computed) and attention over the context."""
    shape = model_shape(config)
    counts = P.param_counts(shape)
    matmul = (P.matmul_flops_per_token(counts.active_non_embedding, counts.unembedding) if logits
              else 2 * counts.active_non_embedding)
    layout = K.kv_layout(shape.kinds, shape.sliding_window, T.model_layer_kv_bytes_per_token(shape),
                         BLOCK_TOKENS)
    return P.flops_per_token_at_context(matmul, shape.attention_width,
                                        K.attended_layer_tokens(layout, context_len))


def step_flops(config: Mapping[str, Any], prefill_tokens: float, prefill_context: float,
               decode_tokens: float, decode_context: float) -> float:
    """FLOPs of one engine step: its prompt tokens at their mean prefill context, without logits, and its decode tokens at theirs, with logits."""
    T._non_negative("prefill_tokens", prefill_tokens)
    T._non_negative("decode_tokens", decode_tokens)
    if prefill_tokens + decode_tokens <= 0:
        raise Absent("reason.step_carries_no_token")
    flops = 0.0
    if prefill_tokens:
        flops += prefill_tokens * token_flops(config, prefill_context, logits=False)
    if decode_tokens:
        flops += decode_tokens * token_flops(config, decode_context, logits=True)
    return flops


def step_read_bytes(config: Mapping[str, Any], kv_cache_dtype: str, prefill_tokens: float,
                    decode_tokens: float, decode_context: float) -> float:
    """Bytes one engine step reads from memory: the weights once for all its tokens, and each decoding request's KV (in the cache's dtype) over its context."""
    T._non_negative("prefill_tokens", prefill_tokens)
    T._non_negative("decode_tokens", decode_tokens)
    tokens = prefill_tokens + decode_tokens
    if tokens <= 0:
        raise Absent("reason.step_carries_no_token")
    shape = model_shape(config)
    weights = P.weight_bytes_read_per_step(P.param_counts(shape), shape, tokens)
    kv = decode_tokens * K.kv_bytes_read_per_request(_layout(config, kv_cache_dtype), decode_context)
    return weights + kv


def ceiling_at_clock(peak: float, clock_mhz: float, peak_clock_mhz: float) -> float:
    """A tensor peak specified at PEAK_CLOCK_MHZ, at the clock the GPU ran at (tensor throughput scales with the SM clock)."""
    T._positive("peak", peak)
    T._positive("clock_mhz", clock_mhz)
    T._positive("peak_clock_mhz", peak_clock_mhz)
    return peak * clock_mhz / peak_clock_mhz


def term_ms(amount: float, rate: float) -> float:
    """Milliseconds AMOUNT takes at RATE per second."""
    T._non_negative("amount", amount)
    T._positive("rate", rate)
    return amount / rate * 1e3


def mixed_step_ms(prefill_share: float, prefill_compute_ms: float, prefill_memory_ms: float,
                  decode_compute_ms: float, decode_memory_ms: float) -> float:
    """The mean step of a mix: PREFILL_SHARE of steps carrying a chunk, the rest decode-only, each at the larger of its two terms."""
    if not 0 <= prefill_share <= 1:
        raise Absent("reason.share_out_of_range", share=prefill_share)
    return (prefill_share * max(prefill_compute_ms, prefill_memory_ms)
            + (1 - prefill_share) * max(decode_compute_ms, decode_memory_ms))


def compute_bound_share(prefill_share: float, prefill_compute_ms: float, prefill_memory_ms: float,
                        decode_compute_ms: float, decode_memory_ms: float) -> float:
    """The share of a mix's modelled time spent in steps whose compute term is the larger."""
    total = mixed_step_ms(prefill_share, prefill_compute_ms, prefill_memory_ms, decode_compute_ms, decode_memory_ms)
    if total <= 0:
        raise Absent("reason.denominator_zero")
    compute = (prefill_share * prefill_compute_ms * (prefill_compute_ms >= prefill_memory_ms)
               + (1 - prefill_share) * decode_compute_ms * (decode_compute_ms >= decode_memory_ms))
    return compute / total
