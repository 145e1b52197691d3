"""Which notes a capacity plan carries: what it modelled, what it did not, and warnings.

Each note is (code, fields); report.planner.labels says it in English or Chinese.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from report.architecture import fit
from report.architecture.kvlayout import KVLayout, kv_block_bytes
from report.architecture.modelconfig import CROSS, FULL, SLIDING, ModelShape
from report.architecture.params import experts_touched
from report.ledger import Ledger, Reason
from report.planner.labels import NOTES
from report.words import closed

Note = tuple[str, dict[str, Any]]


def _gb(v: float) -> str:
    """Bytes as GB with two decimals."""
    return f"{v / 1e9:,.2f} GB"


def _billions(v: float) -> str:
    """A parameter count in billions."""
    return f"{v / 1e9:,.2f} B"


def _dtype_note(shape: ModelShape, requested: str) -> Note:
    """Which dtype the model is served in, and why."""
    fields = {"served": shape.dtype, "config": shape.config_dtype}
    if requested and requested != "auto":
        return "dtype_requested", fields
    if shape.config_dtype is None:
        return "dtype_missing", fields
    if shape.config_dtype.lower().removeprefix("torch.") in ("float32", "fp32", "float"):
        return "dtype_downcast", fields
    return "dtype_config", fields


def _layer_notes(shape: ModelShape, layout: KVLayout) -> list[Note]:
    """The KV layout: layer kinds, windows, groups and padding."""
    kinds = shape.kinds
    full, sliding = kinds.count(FULL), kinds.count(SLIDING)
    notes: list[Note] = []
    if sliding:
        cap = math.ceil(shape.sliding_window / layout.block_size) + 1
        fields = {"full": full, "sliding": sliding, "window": shape.sliding_window,
                  "cap_blocks": cap, "cap_tokens": cap * layout.block_size}
        notes.append(("layers_hybrid" if full else "layers_all_sliding", fields))
    else:
        notes.append(("layers_full", {"layers": full}))
    cross = [i for i, k in enumerate(kinds) if k == CROSS]
    if cross:
        notes.append(("cross_layers", {"cross": len(cross), "indices": ", ".join(map(str, cross))}))
    if len(layout.groups) > 1:
        notes.append(("groups", {"groups": len(layout.groups), "size": layout.group_size,
                                 "block": layout.block_size, "block_bytes": kv_block_bytes(layout)}))
    if layout.padding_layers:
        notes.append(("padding", {"padding": layout.padding_layers, "size": layout.group_size}))
    if shape.is_mla:
        notes.append(("mla", {"rank": shape.kv_lora_rank, "rope": shape.qk_rope_head_dim}))
    if shape.model_type == "gpt_oss":
        notes.append(("sinks", {}))
    return notes


def _value(lg: Ledger, key: str) -> Any:
    """A ledger value, or None when the key is absent or missing."""
    return lg.value_of(key)


def modelled_notes(shape: ModelShape, layout: KVLayout, lg: Ledger, settings: Mapping[str, Any]) -> list[Note]:
    """What the plan modelled, in the order a reader checks it."""
    notes = _layer_notes(shape, layout)
    notes.append(_dtype_note(shape, settings.get("dtype", "auto")))
    notes.append(("kv_dtype", {"kv_bytes": _value(lg, "kv_dtype_bytes"), "kv_dtype": settings["kv_dtype"]}))
    for field, value in shape.defaults_used:
        notes.append(("default", {"field": field, "value": value, "model_type": shape.model_type or "(unknown)"}))
    if shape.tied_embeddings:
        notes.append(("tied", {}))
    if shape.num_experts and _value(lg, "params_total") is not None:
        shared = ""
        if shape.shared_expert_intermediate:
            shared = f" + {shape.shared_expert_intermediate // shape.expert_intermediate} shared"
        notes.append(("moe", {"experts": shape.num_experts, "top_k": shape.experts_per_token,
                              "moe_layers": shape.moe_layers, "layers": shape.layers, "shared": shared,
                              "total": _billions(_value(lg, "params_total")),
                              "active": _billions(_value(lg, "params_active"))}))
    if shape.quant is not None:
        scope = "quant_scope_experts" if shape.quant.experts_only else "quant_scope_linear"
        notes.append(("quant", {"method": shape.quant.method, "bpw": shape.quant.bytes_per_weight,
                                "scope": scope, "dtype": shape.dtype}))
    tp = settings["tp"]
    if tp > 1 and not shape.is_mla:
        replicas = fit.kv_head_replicas(shape.kv_heads, tp)
        if replicas > 1:
            notes.append(("tp_replicated", {"tp": tp, "kv_heads": shape.kv_heads, "replicas": replicas}))
        else:
            notes.append(("tp_split", {"tp": tp, "per_gpu": shape.kv_heads // tp}))
    blocks, c = _value(lg, "request_peak_blocks"), settings.get("concurrency")
    if blocks is not None:
        notes.append(("capacity_curve", {"context": settings["input_len"] + settings["output_len"],
                                         "blocks": blocks}))
    if shape.num_experts and c and shape.experts_per_token:
        touched = experts_touched(shape.num_experts, shape.experts_per_token, c)
        notes.append(("decode_reads", {"c": c, "touched": touched, "experts": shape.num_experts}))
    return notes


def unmodelled_notes(shape: ModelShape, config: Mapping[str, Any], settings: Mapping[str, Any]) -> list[Note]:
    """What the plan leaves out, for this model."""
    notes: list[Note] = [("nm_memory", {}), ("nm_norms", {}), ("nm_prefix", {})]
    if SLIDING in shape.kinds:
        notes.append(("nm_prefill", {}))
    if CROSS in shape.kinds:
        notes.append(("nm_encoder", {}))
    if isinstance(config.get("vision_config"), Mapping):
        notes.append(("nm_vision", {}))
    if shape.chunked_attention:
        notes.append(("nm_chunked", {"chunk": shape.chunked_attention}))
    mtp = config.get("num_nextn_predict_layers")
    if isinstance(mtp, int) and not isinstance(mtp, bool) and mtp > 0:
        notes.append(("nm_mtp", {"n": mtp}))
    if shape.quant_unmodelled:
        notes.append(("nm_quant", {"reason": shape.quant_unmodelled}))
    if shape.num_experts:
        notes.append(("nm_routing", {}))
    if settings["tp"] > 1:
        notes.append(("nm_tp_weights", {}))
    return notes


def warning_notes(shape: ModelShape, layout: KVLayout, lg: Ledger, spec: Any,
                  settings: Mapping[str, Any]) -> list[Note]:
    """Plain warnings: weights or KV that cannot fit the GPU, requests longer than max_model_len, bad shards."""
    notes: list[Note] = []
    tp, util = settings["tp"], settings["gpu_memory_utilization"]
    memory = spec.memory_bytes
    weights, budget = _value(lg, "weight_bytes_per_gpu"), _value(lg, "memory_budget_bytes")
    kv = _value(lg, "kv_memory_bytes")
    if memory is None:
        notes.append(("w_no_gpu_memory", {"gpu": spec.name}))
    else:
        common = {"gpu": spec.name, "memory": _gb(memory), "util": util, "tp": tp}
        if weights is not None and weights > budget:
            notes.append(("w_weights", {**common, "weights": _gb(weights), "budget": _gb(budget)}))
        if kv is not None and kv > memory:
            notes.append(("w_kv_gpu", {**common, "kv": _gb(kv)}))
        elif kv is not None and weights is not None and weights <= budget < kv + weights:
            notes.append(("w_kv_budget", {**common, "kv": _gb(kv), "weights": _gb(weights),
                                          "budget": _gb(budget)}))
    limit = _value(lg, "max_model_len")
    if settings.get("input_len") is not None and settings.get("output_len") is not None and limit:
        context = settings["input_len"] + settings["output_len"]
        if context > limit:
            notes.append(("w_max_len", {"context": context, "limit": limit}))
    problem = fit.quant_tp_problem(shape, tp)
    if problem:
        notes.append(("w_quant_tp", {"problem": problem}))
    if settings.get("kv_pool_tokens") is not None and len(layout.groups) > 1:
        notes.append(("w_pool_tokens_hybrid", {"groups": len(layout.groups)}))
    return notes


def say(notes: list[Note], lang: str) -> list[str]:
    """The notes as sentences in LANG."""
    words = NOTES[lang]
    out = []
    for code, fields in notes:
        f = dict(fields)
        if "scope" in f:
            f["scope"] = words[f["scope"]]
        f = {k: v.text(lang) if isinstance(v, Reason) else v for k, v in f.items()}
        out.append(closed(words[code].format(**f)))
    return out
