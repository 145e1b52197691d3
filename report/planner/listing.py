"""The capacity plan as the command line prints it: one flat JSON object, or a short listing in
English or Chinese (each value in its unit, or why it is absent, then the notes)."""

from __future__ import annotations

import unicodedata
from typing import Any

from report.architecture import theory as th
from report.architecture.gpus import normalize_dtype
from report.architecture.modelconfig import CROSS, FULL, SLIDING
from report.planner import notes as N
from report.planner.capacity import Plan
from report.planner.labels import LABELS

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


# The listing prints a size in two units at once ("1,024 B (1.0 KiB)", "16.1 GB (15.0 GiB)") and
# a count with its exact value beside its scale; the page's formatter (report.publish.numbers)
# prints one unit a value at a digits rule of its own, and the planner stands on architecture/
# alone, so the listing keeps its own kinds.
def listed_value(value: Any, kind: str, lang: str = "en") -> str:
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
            shown = (listed_value(v.value, FORMATS[k], lang) if v.present
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
