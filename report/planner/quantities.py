"""The capacity planner's quantities (report/registry.py `plan_quantity`), key `<name>`, and the
small steps they are made of: KV per token, the pool, capacity from the per-request KV curve,
the roofline and the fit on the GPU. `report.planner.capacity.plan` resolves them by group."""

from __future__ import annotations

from report.architecture import fit
from report.architecture import kvlayout as K
from report.architecture import params as P
from report.architecture import theory as th
from report.registry import plan_quantity


def _mean_context(input_len: int, output_len: int) -> float:
    """Mean context a request has while it decodes: in + out/2."""
    return input_len + output_len / 2


def _final_context(input_len: int, output_len: int) -> int:
    """Context a request has when it finishes: in + out."""
    return input_len + output_len


def _gib_to_bytes(kv_memory_gib: float) -> float:
    """Bytes in X GiB."""
    return kv_memory_gib * th.GIB


def _blocks_times_bytes(pool_blocks: int, block_bytes: int) -> int:
    """KV memory the pool occupies: pool blocks × bytes per block."""
    return pool_blocks * block_bytes


def _times(count: int, concurrency: int) -> int:
    """A per-request count times C requests."""
    return count * concurrency


def _twice(max_num_batched_tokens: int) -> int:
    """Tokens in flight with async scheduling (vLLM's default): two batches of max_num_batched_tokens."""
    return 2 * max_num_batched_tokens


def _peak(spec, dtype: str, sparse: bool) -> float:
    """The GPU's tensor peak for the model's dtype."""
    return spec.peak_flops(dtype, sparse=sparse)


# The plan's quantities (report/registry.py `plan_quantity`), key `<name>`, by group in the order
# `plan` resolves them: KV per token, then (the layout known) each block, the pool from whichever
# size was given, and the rest. A parameter reads a raw input of `plan_raw`, else the ledger's key.
# KV per layer and per token.
plan_quantity("kv_dtype_bytes", th.kv_cache_dtype_bytes, unit="B", per="kv")
plan_quantity("kv_layer_bytes_per_token", th.model_layer_kv_bytes_per_token, unit="B", per="kv")
plan_quantity("kv_bytes_per_token", th.model_kv_bytes_per_token, unit="B", per="kv")
plan_quantity("mha_kv_bytes_per_token", th.model_mha_kv_bytes_per_token, unit="B", per="kv")
# The layout vLLM gives it.
plan_quantity("kv_bytes_per_token_beyond_window", K.kv_bytes_per_token_beyond_windows, unit="B", per="layout")
plan_quantity("kv_block_bytes", K.kv_block_bytes, unit="B", per="layout")
plan_quantity("mha_kv_block_bytes", K.kv_block_bytes, unit="B", per="layout", layout="mha_layout")
# The pool from the KV memory (--kv-memory-gib), and the same memory cut into MHA-sized blocks.
plan_quantity("kv_memory_bytes", _gib_to_bytes, unit="B", per="memory")
plan_quantity("kv_pool_blocks", K.kv_pool_blocks, unit="blocks", per="memory", block_bytes="kv_block_bytes")
plan_quantity("mha_kv_pool_blocks", K.kv_pool_blocks, unit="blocks", per="memory", block_bytes="mha_kv_block_bytes")
plan_quantity("mha_kv_pool_tokens", K.kv_pool_tokens, unit="tokens", per="memory", pool_blocks="mha_kv_pool_blocks",
              layout="mha_layout")
# The pool in tokens from its blocks (from the memory, or --kv-pool-blocks).
plan_quantity("kv_pool_tokens", K.kv_pool_tokens, unit="tokens", per="from_blocks", pool_blocks="kv_pool_blocks")
# The pool in blocks from its tokens (--kv-pool-tokens).
plan_quantity("kv_pool_blocks", K.kv_pool_blocks_from_tokens, unit="blocks", per="tokens", pool_tokens="kv_pool_tokens")
# Only the pool's size is known: its memory, and the MHA pool scaled by the bytes ratio (the seeds' 86,864 / 7).
plan_quantity("kv_memory_bytes", _blocks_times_bytes, unit="B", per="scaled", pool_blocks="kv_pool_blocks",
              block_bytes="kv_block_bytes")
plan_quantity("mha_kv_pool_tokens", th.pool_tokens_at_kv_bytes, unit="tokens", per="scaled",
              pool_tokens="kv_pool_tokens", other_kv_bytes_per_token="mha_kv_bytes_per_token")
plan_quantity("mha_kv_pool_blocks", th.pool_tokens_at_kv_bytes, unit="blocks", per="scaled",
              pool_tokens="kv_pool_blocks", other_kv_bytes_per_token="mha_kv_bytes_per_token")
# vLLM's default prefill chunk, where --max-num-batched-tokens was not given.
plan_quantity("max_num_batched_tokens", fit.default_max_num_batched_tokens, unit="tokens", per="default_chunk")
# The datasheet's peaks and the ridge.
plan_quantity("peak_flops", _peak, unit="FLOP/s", sparse=False)
plan_quantity("peak_flops_sparse", _peak, unit="FLOP/s", sparse=True)
plan_quantity("ridge_flops_per_byte", th.ridge_flops_per_byte, unit="FLOP/B")
# Capacity from the per-request KV curve.
plan_quantity("request_context_tokens", _final_context, unit="tokens")
plan_quantity("decode_context_len", _mean_context, unit="tokens")
plan_quantity("request_peak_tokens", th.request_peak_tokens, unit="tokens")
plan_quantity("request_mean_tokens", th.request_mean_tokens, unit="tokens")
plan_quantity("request_peak_blocks", K.request_kv_blocks, unit="blocks", context_tokens="request_context_tokens")
plan_quantity("request_mean_blocks", K.request_kv_blocks, unit="blocks", context_tokens="decode_context_len")
plan_quantity("request_peak_kv_bytes", K.request_kv_bytes, unit="B", context_tokens="request_context_tokens")
plan_quantity("expected_kv_peak_fraction", th.expected_kv_peak_fraction, unit="fraction",
              peak_tokens="request_peak_blocks", pool_tokens="kv_pool_blocks")
plan_quantity("expected_kv_mean_fraction", th.expected_kv_mean_fraction, unit="fraction",
              mean_tokens="request_mean_blocks", pool_tokens="kv_pool_blocks")
# One request's waste (the function's default concurrency of 1), then C requests'.
plan_quantity("block_alignment_waste_tokens", th.block_alignment_waste_tokens, unit="tokens", concurrency=1)
plan_quantity("block_alignment_waste_tokens_total", _times, unit="tokens", count="block_alignment_waste_tokens")
plan_quantity("max_concurrency", K.max_concurrency_in_pool, pool_blocks="kv_pool_blocks")
plan_quantity("max_input_len_at_concurrency", K.max_input_len_in_tokens, unit="tokens", pool_tokens="kv_pool_tokens")
plan_quantity("max_input_len_at_concurrency_whole_blocks", K.max_input_len_in_blocks, unit="tokens",
              pool_blocks="kv_pool_blocks")
plan_quantity("mha_max_concurrency", K.max_concurrency_in_pool, pool_blocks="mha_kv_pool_blocks", layout="mha_layout")
plan_quantity("mha_max_input_len_at_concurrency", K.max_input_len_in_tokens, unit="tokens",
              pool_tokens="mha_kv_pool_tokens", layout="mha_layout")
plan_quantity("kv_bytes_per_token_at_decode_context", K.kv_bytes_per_token_at_context, unit="B",
              context_tokens="decode_context_len")
plan_quantity("itl_kv_slope_ms_per_token", th.itl_kv_slope_ms_per_token, unit="ms/token",
              kv_bytes_per_token="kv_bytes_per_token_at_decode_context")
# Parameters, weights, FLOPs and the roofline.
plan_quantity("param_counts", P.param_counts)
plan_quantity("params_total", P.total_params, counts="param_counts")
plan_quantity("params_active", P.active_params, counts="param_counts")
plan_quantity("params_non_embedding", P.non_embedding_params, counts="param_counts")
plan_quantity("params_active_non_embedding", P.active_params_non_embedding, counts="param_counts")
plan_quantity("params_unembedding", P.unembedding_params, counts="param_counts")
plan_quantity("weight_bytes", P.weight_bytes_in_memory, unit="B", counts="param_counts")
plan_quantity("weight_bytes_per_gpu", fit.weight_bytes_per_gpu, unit="B")
plan_quantity("weight_bytes_read_per_step", P.weight_bytes_read_per_step, unit="B", counts="param_counts",
              tokens="concurrency")
plan_quantity("flops_per_token", P.matmul_flops_per_token, unit="FLOP",
              active_non_embedding="params_active_non_embedding", unembedding="params_unembedding")
plan_quantity("attention_flops_per_context_token", th.attention_flops_per_context_token, unit="FLOP",
              layers="kv_layers")
plan_quantity("attended_layer_tokens", K.attended_layer_tokens, unit="tokens", context_tokens="decode_context_len")
plan_quantity("flops_per_token_at_decode_context", P.flops_per_token_at_context, unit="FLOP",
              matmul_flops="flops_per_token")
plan_quantity("kv_bytes_read_per_request", K.kv_bytes_read_per_request, unit="B", context_tokens="decode_context_len")
plan_quantity("decode_arithmetic_intensity", th.decode_step_arithmetic_intensity, unit="FLOP/B",
              flops_per_token="flops_per_token_at_decode_context", weight_bytes="weight_bytes_read_per_step")
plan_quantity("prefill_weight_bytes_read", P.weight_bytes_read_per_step, unit="B", counts="param_counts",
              tokens="input_len")
plan_quantity("prefill_arithmetic_intensity", th.prefill_arithmetic_intensity, unit="FLOP/B",
              params_non_embedding="params_active_non_embedding", weight_bytes="prefill_weight_bytes_read")
# Fit on the GPU, and what vLLM's own log would print.
plan_quantity("memory_budget_bytes", fit.memory_budget_bytes, unit="B")
plan_quantity("kv_memory_ceiling_bytes", fit.kv_memory_ceiling_bytes, unit="B")
plan_quantity("max_in_flight_tokens", _twice, unit="tokens")
plan_quantity("vllm_max_concurrency_logged", K.vllm_max_concurrency_logged, pool_blocks="kv_pool_blocks")
plan_quantity("vllm_kv_cache_tokens_logged", K.vllm_kv_cache_tokens_logged, unit="tokens", pool_blocks="kv_pool_blocks")
