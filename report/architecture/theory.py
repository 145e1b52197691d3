"""The theory ledger: what the model's architecture and the GPU's datasheet predict.

Every function is a pure quantity named for what it returns; its parameters name its inputs
and its one-line docstring is the description the report prints. A function raises
`Absent` with a reason in words when its inputs cannot give a value; it never returns 0 for
a missing input.

Units: bytes, tokens, FLOPs, seconds unless the name says otherwise (`_ms_`, `_gib`).
"Per GPU" means per tensor-parallel rank, the way vLLM sizes its KV pool and counts its
`estimated_*` counters.

Conventions the seeds leave implicit, made explicit here:

- Parameters are counted from the matrices alone (attention projections, the gated FFN's
  three matrices, embedding and LM head); biases and norm weights are left out. For
  Qwen2.5-7B they are 0.005 % of the total.
- `weight_bytes` is what the weights occupy (input embedding + LM head unless tied).
  `weight_bytes_read_per_step` is what one forward step streams from memory: every matrix
  once, the LM head once, but only a few rows of the input embedding table, so the table
  itself is not counted. The second is exactly the weight part of vLLM's own estimator.
  For Qwen2.5-7B bf16: 15.23 GB occupied, 14.14 GB read per step. Nothing in config.json
  gives the seeds' "14.3 GB" exactly: it is 1.1 % above 14.14 GB and 0.8 % above 14.18 GiB
  (= 15.23e9 B). The closest logged figure is vLLM's "Loading model weights took 14.25 GiB"
  (14.2488) for this model, i.e. the loaded weights in GiB written as GB and rounded again.
  The golden tests therefore feed the seeds' 14.3e9 to the formulas and check the counts
  above separately.
- The seeds' "2N = 13.5 GFLOP" (N = 6.75e9) was fitted to vLLM's counters, which also bill
  the LM head (2·D·V = 1.09 GFLOP) on every decode token. The non-embedding count from the
  config is N = 6.53e9, 2N = 13.05 GFLOP; with the LM head it is 14.14 GFLOP.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from report.architecture.modelconfig import CROSS, ModelShape, dtype_bytes, model_shape  # noqa: F401 (callers read shapes here)
from report.ledger import Absent

GIB = 1024**3


def _positive(name: str, value: float) -> None:
    """Raise Absent unless VALUE is given and > 0."""
    if value is None:
        raise Absent("reason.not_given", name=name)
    if value <= 0:
        raise Absent("reason.must_be_positive", name=name, value=value)


def _non_negative(name: str, value: float) -> None:
    """Raise Absent unless VALUE is given and >= 0."""
    if value is None:
        raise Absent("reason.not_given", name=name)
    if value < 0:
        raise Absent("reason.must_not_be_negative", name=name, value=value)


def _ceil_to_block(tokens: float, block_size: int) -> int:
    """TOKENS rounded up to whole blocks."""
    return math.ceil(tokens / block_size) * block_size


def _shape(config: Mapping[str, Any] | ModelShape) -> ModelShape:
    """A ModelShape from either a config dict or an existing ModelShape."""
    return config if isinstance(config, ModelShape) else model_shape(config)


# --------------------------------------------------------------------------------------------
# KV cache bytes per token
# --------------------------------------------------------------------------------------------


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: int, tp: int = 1) -> int:
    """KV cache bytes one token takes on one GPU: 2 (K,V) × layers × KV heads/TP × head_dim × dtype bytes."""
    for n, v in (("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim),
                 ("dtype_bytes", dtype_bytes), ("tp", tp)):
        _positive(n, v)
    # vLLM replicates KV heads when TP exceeds them: each rank keeps at least one.
    return 2 * layers * max(1, kv_heads // tp) * head_dim * dtype_bytes


def mla_kv_bytes_per_token(layers: int, kv_lora_rank: int, qk_rope_head_dim: int, dtype_bytes: int) -> int:
    """MLA KV cache bytes per token: one latent of kv_lora_rank + qk_rope_head_dim per layer, no separate K and V."""
    for n, v in (("layers", layers), ("kv_lora_rank", kv_lora_rank),
                 ("qk_rope_head_dim", qk_rope_head_dim), ("dtype_bytes", dtype_bytes)):
        _positive(n, v)
    # The latent is shared by all heads, so every TP rank holds all of it: no division by TP.
    return layers * (kv_lora_rank + qk_rope_head_dim) * dtype_bytes


def kv_cache_dtype_bytes(kv_cache_dtype: str, model_dtype_bytes: int) -> int:
    """Bytes per KV cache element for a --kv-cache-dtype value ("auto" = the model's dtype, "fp8*" = 1)."""
    name = (kv_cache_dtype or "auto").lower()
    if name == "auto":
        _positive("model_dtype_bytes", model_dtype_bytes)
        return model_dtype_bytes
    try:
        return dtype_bytes(name)
    except Absent:
        raise Absent("reason.kv_dtype_unknown", kv_cache_dtype=kv_cache_dtype) from None


def model_layer_kv_bytes_per_token(config: Mapping[str, Any] | ModelShape, kv_cache_dtype: str = "auto",
                                   tp: int = 1) -> int:
    """KV cache bytes one token takes in one attention layer on one GPU (GQA/MHA/MQA K and V, or the MLA latent)."""
    shape = _shape(config)
    nbytes = kv_cache_dtype_bytes(kv_cache_dtype, shape.dtype_bytes)
    if shape.is_mla:
        return mla_kv_bytes_per_token(1, shape.kv_lora_rank, shape.qk_rope_head_dim, nbytes)
    return kv_bytes_per_token(1, shape.kv_heads, shape.head_dim, nbytes, tp)


def model_kv_bytes_per_token(config: Mapping[str, Any] | ModelShape, kv_cache_dtype: str = "auto",
                             tp: int = 1) -> int:
    """KV cache bytes per token per GPU over the layers that store K/V per text token (cross-attention layers do not)."""
    shape = _shape(config)
    return shape.kv_layers * model_layer_kv_bytes_per_token(shape, kv_cache_dtype, tp)


def mha_kv_bytes_per_token(layers: int, heads: int, head_dim: int, dtype_bytes: int, tp: int = 1) -> int:
    """KV bytes per token per GPU if the model had one KV head per attention head (the MHA counterfactual)."""
    return kv_bytes_per_token(layers, heads, head_dim, dtype_bytes, tp)


def model_mha_kv_bytes_per_token(config: Mapping[str, Any] | ModelShape, kv_cache_dtype: str = "auto",
                                 tp: int = 1) -> int:
    """The MHA counterfactual for this model: full K and V for every attention head (for MLA, K of qk_nope+qk_rope and V of v_head_dim)."""
    shape = _shape(config)
    nbytes = kv_cache_dtype_bytes(kv_cache_dtype, shape.dtype_bytes)
    if shape.is_mla:
        if shape.qk_nope_head_dim is None or shape.v_head_dim is None:
            raise Absent("reason.mla_mha_counterfactual")
        _positive("tp", tp)
        per_rank = max(1, shape.heads // tp)
        k = shape.qk_nope_head_dim + shape.qk_rope_head_dim
        return shape.kv_layers * per_rank * (k + shape.v_head_dim) * nbytes
    return mha_kv_bytes_per_token(shape.kv_layers, shape.heads, shape.head_dim, nbytes, tp)


# --------------------------------------------------------------------------------------------
# Pool size and request footprints
# --------------------------------------------------------------------------------------------


def kv_pool_tokens_from_memory(kv_memory_bytes: float, kv_bytes_per_token: int, block_size: int) -> int:
    """KV pool size in tokens the way vLLM sizes it: whole blocks of block_size tokens that fit in the KV memory."""
    _positive("kv_memory_bytes", kv_memory_bytes)
    _positive("kv_bytes_per_token", kv_bytes_per_token)
    _positive("block_size", block_size)
    # vLLM: num_blocks = available_memory // (kv_bytes_per_token × block_size) for one
    # full-attention group; the logged token count is num_blocks × block_size when block_size
    # divides max_model_len.
    return int(kv_memory_bytes // (kv_bytes_per_token * block_size)) * block_size


def kv_pool_tokens_from_gib(kv_memory_gib: float, kv_bytes_per_token: int, block_size: int) -> int:
    """KV pool tokens from the GiB figure of the log line "Available KV cache memory: X GiB" (whole blocks)."""
    _positive("kv_memory_gib", kv_memory_gib)
    return kv_pool_tokens_from_memory(kv_memory_gib * GIB, kv_bytes_per_token, block_size)


def pool_tokens_at_kv_bytes(pool_tokens: int, kv_bytes_per_token: int, other_kv_bytes_per_token: int) -> int:
    """Tokens the same KV memory would hold at another per-token size (pool × bytes ÷ other bytes, not rounded to blocks)."""
    _positive("pool_tokens", pool_tokens)
    _positive("kv_bytes_per_token", kv_bytes_per_token)
    _positive("other_kv_bytes_per_token", other_kv_bytes_per_token)
    return (pool_tokens * kv_bytes_per_token) // other_kv_bytes_per_token


def request_peak_tokens(input_len: int, output_len: int, block_size: int) -> int:
    """KV tokens one request holds when it finishes, block-rounded: ceil((in + out) / block) · block."""
    _non_negative("input_len", input_len)
    _non_negative("output_len", output_len)
    _positive("block_size", block_size)
    return _ceil_to_block(input_len + output_len, block_size)


def request_mean_tokens(input_len: int, output_len: int, block_size: int) -> int:
    """KV tokens one request holds on average while decoding, block-rounded: ceil((in + out/2) / block) · block."""
    _non_negative("input_len", input_len)
    _non_negative("output_len", output_len)
    _positive("block_size", block_size)
    return _ceil_to_block(input_len + output_len / 2, block_size)


def expected_kv_peak_fraction(concurrency: float, peak_tokens: int, pool_tokens: int) -> float:
    """Expected peak KV usage as a fraction of the pool: C × block-rounded peak tokens ÷ pool."""
    _non_negative("concurrency", concurrency)
    _positive("pool_tokens", pool_tokens)
    return concurrency * peak_tokens / pool_tokens


def expected_kv_mean_fraction(concurrency: float, mean_tokens: int, pool_tokens: int) -> float:
    """Expected steady-state KV usage as a fraction of the pool: C × block-rounded mean tokens ÷ pool."""
    _non_negative("concurrency", concurrency)
    _positive("pool_tokens", pool_tokens)
    return concurrency * mean_tokens / pool_tokens


def block_alignment_waste_tokens(input_len: int, output_len: int, block_size: int, concurrency: int = 1) -> int:
    """KV tokens lost to block rounding at the end of a request (ceil(n/block)·block − n), times C requests."""
    _non_negative("concurrency", concurrency)
    n = input_len + output_len
    return (request_peak_tokens(input_len, output_len, block_size) - n) * concurrency


def max_input_len_at_concurrency(pool_tokens: int, concurrency: int, output_len: int) -> int:
    """Longest prompt that lets C requests fit in the pool together: pool ÷ C − out (no block rounding)."""
    _positive("pool_tokens", pool_tokens)
    _positive("concurrency", concurrency)
    _non_negative("output_len", output_len)
    longest = math.floor(pool_tokens / concurrency - output_len)
    if longest < 1:
        raise Absent("reason.pool_tokens_too_small",
                     pool_tokens=pool_tokens, concurrency=concurrency, output_len=output_len)
    return longest


# --------------------------------------------------------------------------------------------
# Parameters, weights, FLOPs
# --------------------------------------------------------------------------------------------


def attention_params_per_layer(hidden: int, heads: int, kv_heads: int, head_dim: int) -> int:
    """Matrix parameters of one attention layer: Q, K, V and output projections (biases left out)."""
    for n, v in (("hidden", hidden), ("heads", heads), ("kv_heads", kv_heads), ("head_dim", head_dim)):
        _positive(n, v)
    return hidden * (heads + 2 * kv_heads) * head_dim + heads * head_dim * hidden


def mla_attention_params_per_layer(hidden: int, heads: int, kv_lora_rank: int, qk_rope_head_dim: int,
                                   qk_nope_head_dim: int, v_head_dim: int, q_lora_rank: int | None = None) -> int:
    """Matrix parameters of one MLA attention layer: Q path, KV down- and up-projections, output projection."""
    for n, v in (("hidden", hidden), ("heads", heads), ("kv_lora_rank", kv_lora_rank),
                 ("qk_rope_head_dim", qk_rope_head_dim), ("qk_nope_head_dim", qk_nope_head_dim),
                 ("v_head_dim", v_head_dim)):
        _positive(n, v)
    qk = qk_nope_head_dim + qk_rope_head_dim
    q = hidden * q_lora_rank + q_lora_rank * heads * qk if q_lora_rank else hidden * heads * qk
    kv_a = hidden * (kv_lora_rank + qk_rope_head_dim)
    kv_b = kv_lora_rank * heads * (qk_nope_head_dim + v_head_dim)
    out = heads * v_head_dim * hidden
    return q + kv_a + kv_b + out


def weight_bytes_read_per_step(params_non_embedding: int, vocab: int, hidden: int, dtype_bytes: float) -> int:
    """Weight bytes one forward step reads: every matrix once plus the LM head (the input embedding only gathers rows)."""
    _positive("params_non_embedding", params_non_embedding)
    _positive("dtype_bytes", dtype_bytes)
    _positive("vocab", vocab)
    _positive("hidden", hidden)
    return int((params_non_embedding + vocab * hidden) * dtype_bytes)


def attention_flops_per_context_token(attention_width: int, layers: int) -> int:
    """Attention FLOPs one new token spends per token of context: 4 × heads·head_dim (= d_model) × layers (QKᵀ and AV)."""
    _positive("attention_width", attention_width)
    _positive("layers", layers)
    return 4 * attention_width * layers


# --------------------------------------------------------------------------------------------
# Roofline: ridge, arithmetic intensity, MFU / MBU, ITL slope
# --------------------------------------------------------------------------------------------


def ridge_flops_per_byte(peak_flops: float, peak_bandwidth: float) -> float:
    """The roofline's ridge point: peak FLOP/s ÷ peak memory bandwidth (FLOP per byte)."""
    _positive("peak_flops", peak_flops)
    _positive("peak_bandwidth", peak_bandwidth)
    return peak_flops / peak_bandwidth


def decode_step_arithmetic_intensity(concurrency: float, flops_per_token: float, weight_bytes: float,
                                     kv_bytes_read_per_request: float, tp: int = 1) -> float:
    """FLOP per byte of one decode step per GPU: C × FLOPs per token ÷ TP over weights ÷ TP + C × KV bytes each request reads per GPU."""
    _positive("concurrency", concurrency)
    _positive("flops_per_token", flops_per_token)
    _positive("weight_bytes", weight_bytes)
    _non_negative("kv_bytes_read_per_request", kv_bytes_read_per_request)
    _positive("tp", tp)
    return concurrency * flops_per_token / tp / (weight_bytes / tp + concurrency * kv_bytes_read_per_request)


def prefill_arithmetic_intensity(input_len: float, params_non_embedding: float, weight_bytes: float) -> float:
    """FLOP per byte of a prefill of L tokens that reads the weights once: L × 2N ÷ weight bytes."""
    _positive("input_len", input_len)
    _positive("params_non_embedding", params_non_embedding)
    _positive("weight_bytes", weight_bytes)
    return input_len * 2 * params_non_embedding / weight_bytes


def mfu(flops_per_second: float, peak_flops: float) -> float:
    """Model FLOPs utilisation as a fraction: achieved FLOP/s ÷ the GPU's peak FLOP/s."""
    _non_negative("flops_per_second", flops_per_second)
    _positive("peak_flops", peak_flops)
    return flops_per_second / peak_flops


def mbu(bytes_per_second: float, peak_bandwidth: float) -> float:
    """Memory bandwidth utilisation as a fraction: achieved B/s ÷ the GPU's peak memory bandwidth."""
    _non_negative("bytes_per_second", bytes_per_second)
    _positive("peak_bandwidth", peak_bandwidth)
    return bytes_per_second / peak_bandwidth


def itl_kv_slope_ms_per_token(concurrency: float, kv_bytes_per_token: float, peak_bandwidth: float) -> float:
    """Theoretical ITL growth per token of context (ms): C × KV bytes per token ÷ peak bandwidth."""
    _positive("concurrency", concurrency)
    _non_negative("kv_bytes_per_token", kv_bytes_per_token)   # 0 past every sliding window
    _positive("peak_bandwidth", peak_bandwidth)
    return concurrency * kv_bytes_per_token / peak_bandwidth * 1e3


# --------------------------------------------------------------------------------------------
# vLLM's own estimator (--enable-mfu-metrics), term by term
# --------------------------------------------------------------------------------------------
# Mirrors vllm/v1/metrics/perf.py (0.32/0.33): per GPU, per scheduler step, from the config
# alone. Keys are vLLM's own breakdown names ("component.term") so they can be compared with
# VLLM_DEBUG_MFU_METRICS output. Not modelled: mixture-of-experts FFNs, quantization byte
# tables (pass weight_dtype_bytes instead), per-layer sliding-window patterns.


@dataclass(frozen=True)
class StepRequests:
    """One scheduler step's requests as vLLM's ExecutionContext sums them."""

    prefill_requests: int
    prefill_tokens: int
    prefill_context: int
    decode_tokens: int
    decode_context: int
    token_context_product: int
    requests: tuple[tuple[int, int, bool], ...]

    @property
    def tokens(self) -> int:
        """All tokens scheduled this step (T)."""
        return self.prefill_tokens + self.decode_tokens

    @property
    def logits_tokens(self) -> int:
        """Tokens that need logits: one per prefill request plus every decode token."""
        # Prefill needs logits for its last token only; decode for every token.
        return self.prefill_requests + self.decode_tokens

    def token_context_product_in_window(self, window: int | None) -> int:
        """Σ n·c over requests, with c clamped to the sliding window when there is one."""
        if window is None:
            return self.token_context_product
        return sum(n * min(c, window) for n, c, _ in self.requests)

    def context_in_window(self, window: int | None, prefill: bool) -> int:
        """Σ c over prefill (or decode) requests, clamped to the sliding window when there is one."""
        if window is None:
            return self.prefill_context if prefill else self.decode_context
        return sum(min(c, window) for _, c, p in self.requests if p == prefill)


def vllm_step_requests(requests: Sequence[Sequence[int | bool]]) -> StepRequests:
    """Sum one step's (n_scheduled, context[, is_prefill]) per request; n > 1 counts as prefill unless said."""
    rows: list[tuple[int, int, bool]] = []
    for r in requests:
        if len(r) not in (2, 3):
            raise Absent("reason.request_shape", r=r)
        n, c = int(r[0]), int(r[1])
        if n < 0 or c < 0:
            raise Absent("reason.negative_tokens", r=r)
        if n == 0:
            continue  # vLLM skips requests with nothing scheduled this step
        prefill = bool(r[2]) if len(r) == 3 else n > 1
        rows.append((n, c, prefill))
    pre = [(n, c) for n, c, p in rows if p]
    dec = [(n, c) for n, c, p in rows if not p]
    return StepRequests(
        prefill_requests=len(pre),
        prefill_tokens=sum(n for n, _ in pre), prefill_context=sum(c for _, c in pre),
        decode_tokens=sum(n for n, _ in dec), decode_context=sum(c for _, c in dec),
        token_context_product=sum(n * c for n, c, _ in rows),
        requests=tuple(rows),
    )


@dataclass(frozen=True)
class _Par:
    """Per-GPU divisors and byte sizes of one estimator call."""

    L: float          # attention layers per GPU (float, as vLLM bills fractional stages)
    L_int: int        # FFN / MLA layers per GPU (integer division, as vLLM does)
    q: int            # query heads per GPU
    kv: int           # KV heads per GPU
    ffn_inter: int    # intermediate width per GPU (divided by dp × tp)
    vocab: int        # LM head rows per GPU
    a: float          # activation bytes
    w: float          # weight bytes
    k: float          # KV cache bytes


def _par(shape: ModelShape, tp: int, pp: int, dp: int, kv_cache_dtype_bytes: float | None,
         weight_dtype_bytes: float | None) -> _Par:
    """The per-GPU divisors and byte sizes vLLM's estimator uses for this shape and parallelism."""
    for n, v in (("tp", tp), ("pp", pp), ("dp", dp)):
        _positive(n, v)
    if shape.num_experts:
        raise Absent("reason.moe_unmodelled", experts=shape.num_experts)
    return _Par(
        L=shape.layers / pp, L_int=shape.layers // pp,
        q=max(1, shape.heads // tp), kv=max(1, shape.kv_heads // tp),
        ffn_inter=shape.intermediate // (dp * tp), vocab=shape.vocab // tp,
        a=shape.dtype_bytes,
        w=weight_dtype_bytes if weight_dtype_bytes is not None else shape.dtype_bytes,
        k=kv_cache_dtype_bytes if kv_cache_dtype_bytes is not None else shape.dtype_bytes,
    )


def vllm_estimated_flops_terms(shape: ModelShape, requests: Sequence[Sequence[int | bool]], tp: int = 1,
                               pp: int = 1, dp: int = 1) -> dict[str, int]:
    """vLLM's estimated FLOPs per GPU for one scheduler step, term by term (qkv_proj, out_proj, attn_qk, attn_av, ffn, unembed)."""
    ctx = vllm_step_requests(requests)
    p = _par(shape, tp, pp, dp, None, None)
    T, D = ctx.tokens, shape.hidden
    terms: dict[str, int] = {}
    if shape.is_mla:
        _require_mla_dims(shape)
        L = p.L_int
        qk = shape.qk_nope_head_dim + shape.qk_rope_head_dim
        c, r, vd, qr = shape.kv_lora_rank, shape.qk_rope_head_dim, shape.v_head_dim, shape.q_lora_rank
        TC = ctx.token_context_product
        if qr is not None:
            terms["mla_attn.q_a_proj"] = 2 * T * D * qr * L
            terms["mla_attn.q_b_proj"] = 2 * T * qr * p.q * qk * L
        else:
            terms["mla_attn.q_proj"] = 2 * T * D * p.q * qk * L
        terms["mla_attn.kv_a_proj"] = 2 * T * D * (c + r) * L
        terms["mla_attn.kv_b_proj"] = 2 * T * c * p.q * (shape.qk_nope_head_dim + vd) * L
        terms["mla_attn.attn_qk"] = 2 * p.q * TC * qk * L
        terms["mla_attn.attn_av"] = 2 * p.q * TC * vd * L
        terms["mla_attn.out_proj"] = 2 * T * p.q * vd * D * L
    else:
        d = shape.head_dim
        TC = ctx.token_context_product_in_window(shape.sliding_window)
        terms["attn.qkv_proj"] = int(2 * T * D * (p.q + 2 * p.kv) * d * p.L)
        terms["attn.out_proj"] = int(2 * T * D * p.q * d * p.L)
        terms["attn.attn_qk"] = int(2 * p.q * TC * d * p.L)
        terms["attn.attn_av"] = int(2 * p.q * TC * d * p.L)
    if p.L_int:
        terms["ffn.dense_ffn"] = 2 * D * 3 * p.ffn_inter * T * p.L_int
    terms["unembed.unembed"] = 2 * ctx.logits_tokens * D * p.vocab
    return terms


def _require_mla_dims(shape: ModelShape) -> None:
    """Raise Absent when an MLA shape lacks the head widths vLLM's MLA terms need."""
    if shape.qk_nope_head_dim is None or shape.v_head_dim is None:
        raise Absent("reason.mla_terms")
