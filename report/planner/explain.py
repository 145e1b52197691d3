"""`serving-ledger explain`: a capacity planner over the theory ledger.

Given a model's config.json and a GPU name (plus, optionally, the KV memory or pool size and
a workload C / L / O), it prints what the architecture and the datasheet predict: KV bytes
per token, pool size, expected KV usage, the largest concurrency and prompt that fit, the
ridge point, arithmetic intensities, the ITL slope, and the same for an MHA counterfactual
("if this were MHA, the pool would hold 12,409 tokens and L could be at most 519 at C=16").

Capacity follows vLLM's KV layout (report.architecture.kvlayout): sliding-window layers hold at most the
window, cross-attention layers hold nothing per text token, and the pool, the largest
concurrency and the longest prompt come from the per-request KV curve. Parameters and weight
bytes count experts and quantization (report.architecture.params); a TP size vLLM refuses is refused here,
and weights or a KV budget that cannot fit the GPU are warned about (report.architecture.fit). The answer
says, in English or Chinese, what it modelled and what it did not (report.planner.notes).

Every number is a `Ledger.derive` of a pure function, so a value that cannot be computed is
null with a reason, never 0. Bad input gives one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from report.architecture import fit
from report.architecture import kvlayout as K
from report.architecture import params as P
from report.architecture import theory as th
from report.architecture.gpus import known_gpu_names, lookup_gpu, normalize_dtype
from report.architecture.modelconfig import CROSS, FULL, SLIDING, parse_config_json
from report.ledger import Absent, Ledger, Reason
from report.planner import notes as N
from report.planner.labels import LABELS
from report.planner.notes import Note
from report.registry import RawSources, plan_quantity, resolve_scope
from report.words import LANGS

PROG = "serving-ledger explain"


def _positive_int(text: str) -> int:
    """An argparse type: an integer ≥ 1."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {v}")
    return v


def _non_negative_int(text: str) -> int:
    """An argparse type: an integer ≥ 0."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 0, got {v}")
    return v


def _positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return v


KV_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16")
DTYPES = ("auto", "bfloat16", "float16", "float32")


def _fraction(text: str) -> float:
    """An argparse type: a number in (0, 1]."""
    v = _positive_float(text)
    if v > 1:
        raise argparse.ArgumentTypeError(f"expected a fraction of at most 1, got {text!r}")
    return v


DESCRIPTION = ("Capacity planner: what the architecture and the GPU datasheet predict for KV "
               "capacity, concurrency and the roofline.")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The flags of `serving-ledger explain`."""
    ap.add_argument("--model", required=True, metavar="CONFIG_JSON_OR_DIR",
                    help="a model's config.json, or a directory that holds one")
    ap.add_argument("--gpu", required=True, metavar="NAME",
                    help='NVML device name or alias, e.g. "NVIDIA GeForce RTX 4090", "H200"')
    ap.add_argument("--tp", type=_positive_int, default=1, help="tensor-parallel size (default 1)")
    ap.add_argument("--dtype", choices=DTYPES, default="auto",
                    help="as vLLM's --dtype (default auto: the config's, float32 served in bfloat16)")
    ap.add_argument("--kv-dtype", choices=KV_DTYPES, default="auto",
                    help="KV cache dtype, as vLLM's --kv-cache-dtype (default auto = model dtype)")
    ap.add_argument("--block-size", type=_positive_int, default=16, help="KV block size in tokens (default 16)")
    ap.add_argument("--concurrency", type=_positive_int, metavar="C", help="concurrent requests")
    ap.add_argument("--input-len", type=_non_negative_int, metavar="L", help="prompt tokens per request")
    ap.add_argument("--output-len", type=_non_negative_int, metavar="O", help="output tokens per request")
    pool = ap.add_mutually_exclusive_group()
    pool.add_argument("--kv-memory-gib", type=_positive_float, metavar="X",
                      help='KV memory per GPU, as the log\'s "Available KV cache memory: X GiB"')
    pool.add_argument("--kv-pool-tokens", type=_positive_int, metavar="N",
                      help='KV pool per GPU in tokens per KV group, as the log\'s "GPU KV cache size: '
                           'N tokens" for a model with one group')
    pool.add_argument("--kv-pool-blocks", type=_positive_int, metavar="N",
                      help="KV pool per GPU in blocks, as cache_config_info's num_gpu_blocks")
    ap.add_argument("--gpu-memory-utilization", type=_fraction, default=0.9, metavar="F",
                    help="as vLLM's flag (default 0.9): the share of GPU memory vLLM may use")
    ap.add_argument("--max-model-len", type=_positive_int, metavar="N",
                    help="as vLLM's flag (default: the config's max_position_embeddings)")
    ap.add_argument("--max-num-batched-tokens", type=_positive_int, metavar="N",
                    help="as vLLM's flag (default: vLLM 0.32's default for the GPU's memory)")
    ap.add_argument("--lang", choices=LANGS, default="en", help="language of the text output")
    ap.add_argument("--json", action="store_true", help="print one flat JSON object instead of text")


class InputError(Exception):
    """A model path or config that cannot be read; the message says why in one line."""


def load_config(path_text: str) -> tuple[dict[str, Any], Path]:
    """The config.json at PATH (or inside the directory PATH) as a dict, and the file it came from."""
    path = Path(path_text)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise InputError(f"no model config at {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read {path}: {e}") from None
    try:
        return parse_config_json(text), path
    except Absent as e:
        raise InputError(f"{path}: {e}") from None


# --------------------------------------------------------------------------------------------
# The plan: a small ledger of theory values
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """A capacity plan: its ledger, the model's shape, the GPU, the KV layout and the notes in codes."""

    ledger: Ledger
    shape: th.ModelShape
    spec: Any
    layout: K.KVLayout
    modelled: list[Note]
    not_modelled: list[Note]
    warnings: list[Note]


def _not_given(flag: str) -> Reason:
    """Why a command-line input is absent: the flag that was not given."""
    return Reason.of("reason.not_given_flag", flag=flag)


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


def _refuse_tp(shape: th.ModelShape, tp: int) -> None:
    """Raise Absent when vLLM would refuse this TP size, naming the sizes it accepts."""
    why = fit.tp_refusal(shape.heads, shape.kv_heads, tp, shape.is_mla)
    if why:
        sizes = ", ".join(map(str, fit.valid_tp_sizes(shape.heads, shape.kv_heads, shape.is_mla)))
        raise Absent("reason.tp_refused", tp=tp, why=why, sizes=sizes)


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

GPU_TABLE = ("report/data/gpus.toml",)       # where a GPU's row comes from

# Observed inputs: (key, value, unit, doc, sources, the reason when it is absent).
Observed = tuple[str, Any, str, str, tuple[str, ...], Reason | None]


def _pool_given(kv_memory_gib: float | None, kv_pool_tokens: int | None,
                kv_pool_blocks: int | None) -> tuple[tuple[str, ...], list[Observed]]:
    """The pool's groups in the order they resolve, and what it records, for whichever size was given."""
    if kv_memory_gib is not None:
        return ("memory", "from_blocks"), []
    if kv_pool_tokens is not None:
        return ("tokens", "scaled"), [("kv_pool_tokens", kv_pool_tokens, "tokens",
                                       "KV pool per GPU in tokens per group, as logged (--kv-pool-tokens)", (), None)]
    if kv_pool_blocks is not None:
        return ("from_blocks", "scaled"), [("kv_pool_blocks", kv_pool_blocks, "blocks",
                                            "KV pool per GPU in blocks, as num_gpu_blocks (--kv-pool-blocks)", (), None)]
    why = Reason.of("reason.give_kv_size")
    return (), [("kv_memory_bytes", None, "B", "KV memory per GPU", (), why),
                ("kv_pool_blocks", None, "blocks", "KV pool per GPU", (), why),
                ("kv_pool_tokens", None, "tokens", "KV pool per GPU", (), why),
                ("mha_kv_pool_blocks", None, "", "KV pool if MHA", (), why),
                ("mha_kv_pool_tokens", None, "tokens", "KV pool if MHA", (), why)]


def plan_raw(config: dict[str, Any], gpu_name: str, *, tp: int, dtype: str, kv_dtype: str, block_size: int,
             gpu_memory_utilization: float) -> RawSources:
    """The plan's raw inputs by name: the model's shape (citing its config.json), the GPU's row
    (citing the table), the settings; Absent for a config or TP vLLM cannot serve, LookupError
    for an unknown GPU. The KV layouts join once KV per token is known."""
    shape = th.model_shape(config, dtype)
    spec = lookup_gpu(gpu_name)
    if spec is None:
        raise LookupError(gpu_name)
    _refuse_tp(shape, tp)
    raw = RawSources()
    for name in ("config", "shape"):
        raw.add(name, shape, ("config.json",))
    raw.add("spec", spec, GPU_TABLE)
    raw.add("gpu_name", spec.name)
    raw.add("dtype", normalize_dtype(shape.dtype))
    raw.add("model_dtype_bytes", shape.dtype_bytes)
    raw.add("attention_width", shape.attention_width)
    raw.add("kv_layers", shape.kv_layers)
    raw.add("kv_cache_dtype", kv_dtype)
    raw.add("tp", tp)
    raw.add("block_size", block_size)
    raw.add("gpu_memory_utilization", gpu_memory_utilization)
    return raw


def plan(config: dict[str, Any], gpu_name: str, *, tp: int = 1, dtype: str = "auto", kv_dtype: str = "auto",
         block_size: int = 16, concurrency: int | None = None, input_len: int | None = None,
         output_len: int | None = None, kv_memory_gib: float | None = None,
         kv_pool_tokens: int | None = None, kv_pool_blocks: int | None = None,
         gpu_memory_utilization: float = 0.9, max_model_len: int | None = None,
         max_num_batched_tokens: int | None = None) -> Plan:
    """The capacity plan; Absent for a config or TP vLLM cannot serve, LookupError for an unknown GPU."""
    raw = plan_raw(config, gpu_name, tp=tp, dtype=dtype, kv_dtype=kv_dtype, block_size=block_size,
                   gpu_memory_utilization=gpu_memory_utilization)
    shape, spec = raw.values["shape"], raw.values["spec"]
    lg = Ledger()
    table, no_row = GPU_TABLE, Reason.of("reason.gpu_row_lacks")
    pool_groups, pool_observed = _pool_given(kv_memory_gib, kv_pool_tokens, kv_pool_blocks)
    observed: list[Observed] = [
        ("concurrency", concurrency, "", "Concurrent requests", (), _not_given("--concurrency")),
        ("input_len", input_len, "tokens", "Prompt tokens per request", (), _not_given("--input-len")),
        ("output_len", output_len, "tokens", "Output tokens per request", (), _not_given("--output-len")),
        ("kv_memory_gib", kv_memory_gib, "GiB", "KV memory per GPU", (), _not_given("--kv-memory-gib")),
        *pool_observed,
        ("peak_bandwidth", spec.memory_bandwidth, "B/s", f"Peak memory bandwidth of the {spec.name}", table, no_row),
        ("power_limit_w", spec.power_limit_w, "W", f"Power limit of the {spec.name}", table, no_row),
        ("gpu_memory_bytes", spec.memory_bytes, "B", f"Memory of the {spec.name}", table, no_row),
        ("max_model_len", max_model_len or shape.max_position_embeddings, "tokens",
         "max_model_len (--max-model-len, else the config's max_position_embeddings)", (),
         Reason.of("reason.give_max_model_len")),
        *([("max_num_batched_tokens", max_num_batched_tokens, "tokens", "Prefill chunk (--max-num-batched-tokens)",
            (), None)] if max_num_batched_tokens is not None else []),
    ]
    for key, value, unit, doc, sources, missing in observed:
        lg.record(key, value, unit=unit, doc=doc, sources=sources, missing=missing)
    resolve_scope(lg, "plan", __name__, "", raw, "kv")
    layer, mha = lg["kv_layer_bytes_per_token"], lg["mha_kv_bytes_per_token"]
    layout = K.kv_layout(shape.kinds, shape.sliding_window, layer.value, block_size)
    raw.add("layout", layout)
    raw.add("mha_layout", K.kv_layout(shape.kinds, shape.sliding_window, mha.value // shape.kv_layers, block_size)
            if mha.present else None)
    chunk = ("default_chunk",) if max_num_batched_tokens is None else ()
    for group in ("layout", *pool_groups, *chunk, ""):
        resolve_scope(lg, "plan", __name__, "", raw, group)

    settings = {"tp": tp, "dtype": dtype, "kv_dtype": kv_dtype, "concurrency": concurrency,
                "input_len": input_len, "output_len": output_len, "kv_pool_tokens": kv_pool_tokens,
                "gpu_memory_utilization": gpu_memory_utilization}
    return Plan(lg, shape, spec, layout,
                modelled=N.modelled_notes(shape, layout, lg, settings),
                not_modelled=N.unmodelled_notes(shape, config, settings),
                warnings=N.warning_notes(shape, layout, lg, spec, settings))


# Keys of the JSON object, in order. Settings first, then derived values.
JSON_KEYS = (
    "kv_dtype_bytes", "kv_layer_bytes_per_token", "kv_bytes_per_token", "kv_bytes_per_token_beyond_window",
    "kv_block_bytes", "kv_memory_bytes", "kv_pool_blocks", "kv_pool_tokens",
    "peak_flops", "peak_flops_sparse", "peak_bandwidth", "power_limit_w", "gpu_memory_bytes",
    "ridge_flops_per_byte",
    "request_peak_tokens", "request_mean_tokens", "request_peak_blocks", "request_mean_blocks",
    "request_peak_kv_bytes", "expected_kv_peak_fraction", "expected_kv_mean_fraction",
    "block_alignment_waste_tokens", "block_alignment_waste_tokens_total",
    "max_concurrency", "max_input_len_at_concurrency", "max_input_len_at_concurrency_whole_blocks",
    "kv_bytes_per_token_at_decode_context", "itl_kv_slope_ms_per_token",
    "params_total", "params_active", "params_non_embedding", "params_active_non_embedding",
    "weight_bytes", "weight_bytes_per_gpu", "weight_bytes_read_per_step",
    "flops_per_token", "attention_flops_per_context_token", "decode_context_len",
    "flops_per_token_at_decode_context", "kv_bytes_read_per_request",
    "decode_arithmetic_intensity", "prefill_weight_bytes_read", "prefill_arithmetic_intensity",
    "mha_kv_bytes_per_token", "mha_kv_pool_tokens", "mha_max_concurrency",
    "mha_max_input_len_at_concurrency",
    "memory_budget_bytes", "kv_memory_ceiling_bytes", "max_model_len", "max_in_flight_tokens",
    "vllm_max_concurrency_logged", "vllm_kv_cache_tokens_logged",
)


def plan_json(p: Plan, settings: dict[str, Any], lang: str = "en") -> dict[str, Any]:
    """One flat JSON-ready dict: settings, the model's shape, the GPU, every derived value (null when absent), the notes."""
    shape, spec = p.shape, p.spec
    kinds = shape.kinds
    out: dict[str, Any] = {
        "model": settings["model"], "gpu": spec.name, "gpu_source": spec.source,
        "tp": settings["tp"], "kv_cache_dtype": settings["kv_dtype"], "block_size": settings["block_size"],
        "concurrency": settings["concurrency"], "input_len": settings["input_len"],
        "output_len": settings["output_len"], "kv_memory_gib": settings["kv_memory_gib"],
        "layers": shape.layers, "full_attention_layers": kinds.count(FULL),
        "sliding_window_layers": kinds.count(SLIDING), "cross_attention_layers": kinds.count(CROSS),
        "sliding_window": shape.sliding_window if SLIDING in kinds else None,
        "kv_groups": len(p.layout.groups), "kv_group_layers": p.layout.group_size,
        "hidden": shape.hidden, "heads": shape.heads,
        "kv_heads": shape.kv_heads, "head_dim": shape.head_dim, "attention": shape.attention_kind,
        "dtype": shape.dtype, "config_dtype": shape.config_dtype, "dtype_bytes": shape.dtype_bytes,
        "quantization": shape.quant.method if shape.quant else None,
        "experts": shape.num_experts, "experts_per_token": shape.experts_per_token,
        "peak_flops_kind": spec.peak_label(normalize_dtype(shape.dtype)),
    }
    for k in JSON_KEYS:
        out[k] = p.ledger[k].value
    # Flat: each list of notes is one string, one note per line, in the --lang language.
    for key in ("modelled", "not_modelled", "warnings"):
        out[key] = "\n".join(N.say(getattr(p, key), lang))
    return out


# --------------------------------------------------------------------------------------------
# Text
# --------------------------------------------------------------------------------------------

# How each key is printed.
FORMATS = {
    "kv_dtype_bytes": "B", "kv_layer_bytes_per_token": "B_kib", "kv_bytes_per_token": "B_kib",
    "kv_bytes_per_token_beyond_window": "B_kib", "kv_block_bytes": "B_kib", "kv_memory_bytes": "B_gib",
    "kv_pool_blocks": "int", "kv_pool_tokens": "tokens",
    "request_peak_tokens": "tokens", "request_mean_tokens": "tokens", "request_peak_blocks": "int",
    "request_mean_blocks": "int", "request_peak_kv_bytes": "B_gb",
    "expected_kv_peak_fraction": "pct", "expected_kv_mean_fraction": "pct",
    "block_alignment_waste_tokens": "tokens", "block_alignment_waste_tokens_total": "tokens",
    "max_concurrency": "int", "max_input_len_at_concurrency": "tokens",
    "max_input_len_at_concurrency_whole_blocks": "tokens",
    "peak_flops": "tflops", "peak_flops_sparse": "tflops", "peak_bandwidth": "gbs",
    "power_limit_w": "watts", "ridge_flops_per_byte": "fpb",
    "kv_bytes_per_token_at_decode_context": "B_kib", "itl_kv_slope_ms_per_token": "ms_tok",
    "params_total": "giga", "params_active": "giga", "params_non_embedding": "giga",
    "params_active_non_embedding": "giga",
    "weight_bytes": "B_gb", "weight_bytes_per_gpu": "B_gb", "weight_bytes_read_per_step": "B_gb",
    "flops_per_token": "gflop", "attention_flops_per_context_token": "gflop6", "decode_context_len": "tokens",
    "flops_per_token_at_decode_context": "gflop", "kv_bytes_read_per_request": "B_gb",
    "decode_arithmetic_intensity": "fpb", "prefill_weight_bytes_read": "B_gb",
    "prefill_arithmetic_intensity": "fpb",
    "mha_kv_bytes_per_token": "B_kib", "mha_kv_pool_tokens": "tokens", "mha_max_concurrency": "int",
    "mha_max_input_len_at_concurrency": "tokens",
    "gpu_memory_bytes": "B_gb", "memory_budget_bytes": "B_gb", "kv_memory_ceiling_bytes": "B_gb",
    "max_model_len": "tokens", "max_in_flight_tokens": "tokens",
    "vllm_max_concurrency_logged": "times", "vllm_kv_cache_tokens_logged": "tokens",
}

SECTIONS = (
    ("kv", ("kv_dtype_bytes", "kv_layer_bytes_per_token", "kv_bytes_per_token",
            "kv_bytes_per_token_beyond_window", "kv_block_bytes", "kv_memory_bytes", "kv_pool_blocks",
            "kv_pool_tokens")),
    ("capacity", ("request_peak_tokens", "request_mean_tokens", "request_peak_blocks", "request_mean_blocks",
                  "request_peak_kv_bytes", "expected_kv_peak_fraction", "expected_kv_mean_fraction",
                  "block_alignment_waste_tokens", "block_alignment_waste_tokens_total", "max_concurrency",
                  "max_input_len_at_concurrency", "max_input_len_at_concurrency_whole_blocks")),
    ("roofline", ("peak_flops", "peak_flops_sparse", "peak_bandwidth", "power_limit_w",
                  "ridge_flops_per_byte", "params_total", "params_active", "params_non_embedding",
                  "params_active_non_embedding", "weight_bytes", "weight_bytes_read_per_step",
                  "flops_per_token", "attention_flops_per_context_token", "decode_context_len",
                  "flops_per_token_at_decode_context", "kv_bytes_read_per_request",
                  "decode_arithmetic_intensity", "prefill_weight_bytes_read", "prefill_arithmetic_intensity",
                  "kv_bytes_per_token_at_decode_context", "itl_kv_slope_ms_per_token")),
    ("fit", ("gpu_memory_bytes", "memory_budget_bytes", "weight_bytes_per_gpu", "kv_memory_ceiling_bytes")),
    ("vllm", ("max_model_len", "max_in_flight_tokens", "vllm_kv_cache_tokens_logged",
              "vllm_max_concurrency_logged")),
    ("mha", ("mha_kv_bytes_per_token", "mha_kv_pool_tokens", "mha_max_concurrency",
             "mha_max_input_len_at_concurrency")),
)


def display_width(text: str) -> int:
    """Columns TEXT takes in a terminal (CJK characters take two)."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def format_number(value: Any, kind: str, lang: str = "en") -> str:
    """A value printed for the text listing, with thousands separators and a unit."""
    v = value
    tokens = LABELS[lang]["tokens"]
    if kind == "B":
        return f"{v:,} B"
    if kind == "B_kib":
        return f"{v:,} B ({v / 1024:,.1f} KiB)"
    if kind == "B_gib":
        return f"{v:,.0f} B ({v / th.GIB:,.2f} GiB)"
    if kind == "B_gb":
        return f"{v / 1e9:,.2f} GB ({v / th.GIB:,.2f} GiB)"
    if kind == "tokens":
        return tokens.format(n=f"{v:,.0f}" if float(v).is_integer() else f"{v:,.1f}")
    if kind == "int":
        return f"{v:,}"
    if kind == "times":
        return f"{v:,.2f}x"
    if kind == "pct":
        return f"{v * 100:.1f} %"
    if kind == "tflops":
        return f"{v / 1e12:,.1f} TFLOP/s"
    if kind == "gbs":
        return f"{v / 1e9:,.0f} GB/s"
    if kind == "watts":
        return f"{v:,.0f} W"
    if kind == "fpb":
        return f"{v:,.1f} FLOP/B"
    if kind == "ms_tok":
        return f"{v:.5f} ms/token"
    if kind == "giga":
        return f"{v / 1e9:,.2f} × 10⁹ ({v:,})"
    if kind == "gflop":
        return f"{v / 1e9:,.2f} GFLOP"
    if kind == "gflop6":
        return f"{v / 1e9:.6f} GFLOP ({v:,} FLOP)"
    return str(v)


def plan_text(p: Plan, settings: dict[str, Any], lang: str) -> str:
    """The plan as a short listing in LANG (zh or en): settings, each value or why it is absent, then the notes."""
    w = LABELS[lang]
    shape, spec, lg = p.shape, p.spec, p.ledger
    c = w["colon"]
    lines = [
        f"{w['model']}{c}{settings['model']} · {shape.layers} {w['layers']} · {shape.attention_kind} "
        f"{shape.heads} {w['heads']} / {shape.kv_heads} {w['kv_heads']} · head_dim {shape.head_dim} · {shape.dtype}",
        f"{w['gpu']}{c}{spec.name} ({spec.source})",
        f"{w['settings']}{c}TP {settings['tp']} · --dtype {settings['dtype']} · --kv-cache-dtype "
        f"{settings['kv_dtype']} · block {settings['block_size']}",
        f"{w['workload']}{c}C={_or_dash(settings['concurrency'])} L={_or_dash(settings['input_len'])} "
        f"O={_or_dash(settings['output_len'])}",
        w["peak_used"].format(dtype=normalize_dtype(shape.dtype)),
    ]
    width = max(display_width(w[k]) for _, keys in SECTIONS for k in keys)
    for title, keys in SECTIONS:
        lines += ["", w["section"].format(title=w[title])]
        for k in keys:
            v = lg[k]
            why = v.missing.text(lang) if not v.present else ""
            shown = (format_number(v.value, FORMATS[k], lang) if v.present
                     else w["absent_because"].format(reason=why))
            pad = " " * (width - display_width(w[k]))
            lines.append(f"  {w[k]}{pad}  {shown}")
    lines += ["", _mha_sentence(p, settings, w)]
    for key in ("warnings", "modelled", "not_modelled"):
        said = N.say(getattr(p, key), lang)
        if said:
            lines += ["", w["section"].format(title=w[key])] + [f"  - {s}" for s in said]
    return "\n".join(lines) + "\n"


def _or_dash(v: Any) -> str:
    """V, or a dash when not given."""
    return "—" if v is None else f"{v:,}"


def _mha_sentence(p: Plan, settings: dict[str, Any], w: dict[str, str]) -> str:
    """The one-sentence MHA counterfactual, as far as the inputs reach."""
    shape, lg = p.shape, p.ledger
    if not shape.is_mla and shape.kv_heads == shape.heads:
        return w["already_mha"]
    mha, pool, maxl = lg["mha_kv_bytes_per_token"], lg["mha_kv_pool_tokens"], lg["mha_max_input_len_at_concurrency"]
    if not (mha.present and pool.present):
        return ""
    fields = {"heads": shape.heads, "kib": f"{mha.value / 1024:,.1f}", "pool": f"{pool.value:,}"}
    if maxl.present:
        return w["mha_sentence"].format(**fields, maxl=f"{maxl.value:,}", c=settings["concurrency"])
    return w["mha_sentence_short"].format(**fields)


# --------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------


def _fail(message: str) -> int:
    """One line on stderr, exit status 2."""
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    """`serving-ledger explain`: 0 on success, 2 with one line on stderr for bad input."""
    try:
        config, path = load_config(args.model)
    except InputError as e:
        return _fail(str(e))
    settings = {
        "model": str(path), "tp": args.tp, "dtype": args.dtype, "kv_dtype": args.kv_dtype,
        "block_size": args.block_size, "concurrency": args.concurrency, "input_len": args.input_len,
        "output_len": args.output_len, "kv_memory_gib": args.kv_memory_gib,
    }
    try:
        p = plan(config, args.gpu, tp=args.tp, dtype=args.dtype, kv_dtype=args.kv_dtype,
                 block_size=args.block_size, concurrency=args.concurrency, input_len=args.input_len,
                 output_len=args.output_len, kv_memory_gib=args.kv_memory_gib,
                 kv_pool_tokens=args.kv_pool_tokens, kv_pool_blocks=args.kv_pool_blocks,
                 gpu_memory_utilization=args.gpu_memory_utilization, max_model_len=args.max_model_len,
                 max_num_batched_tokens=args.max_num_batched_tokens)
    except Absent as e:
        return _fail(f"{path}: {e}")
    except LookupError:
        return _fail(f"unknown GPU {args.gpu!r}; the table knows: {', '.join(known_gpu_names())}")
    if args.json:
        print(json.dumps(plan_json(p, settings, args.lang), ensure_ascii=False))
    else:
        sys.stdout.write(plan_text(p, settings, args.lang))
    return 0
