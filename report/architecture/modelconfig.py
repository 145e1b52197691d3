"""A model's config.json read the way vLLM and the model's own configuration class read it.

`model_shape` turns a Hugging Face config into the dimensions the theory needs. Where the
config omits a field, the default is the one the model's configuration class in
`transformers` applies (Gemma-3's head_dim 256, Gemma's tied embeddings…), and the shape
records that it used it, so the planner can say so. Multimodal configs keep the decoder in
`text_config`. Booleans must be JSON booleans: a string "false" is refused, not read as true.

Conventions taken from vLLM 0.32:

- dtype "auto": the config's dtype, except that float32 is served in bfloat16; a config
  without a dtype counts as float32 (vLLM first looks at the checkpoint's tensors, which
  this planner cannot see) and is therefore served in bfloat16 too.
- `sliding_window` without `layer_types` applies to every layer (vLLM sets the model-level
  window only when no layer is full attention); a window of 0 means none.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from report.ledger import Absent, Reason

FULL, SLIDING, CROSS = "full", "sliding", "cross"

MAX_CONFIG_DEPTH = 32
_LARGEST_DIMENSION = 2**40

_DTYPE_BYTES = {
    "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2,
    "float32": 4, "fp32": 4, "float": 4,
    "float8": 1, "fp8": 1, "int8": 1,
}

# Defaults of the configuration classes in transformers, for the fields the theory reads.
ARCH_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma": {"head_dim": 256, "tie_word_embeddings": True},
    "gemma2": {"head_dim": 256, "tie_word_embeddings": True, "sliding_window": 4096},
    "gemma3_text": {"head_dim": 256, "tie_word_embeddings": True, "sliding_window": 4096,
                    "sliding_window_pattern": 6, "vocab_size": 262_208},
    "gpt_oss": {"head_dim": 64, "tie_word_embeddings": False, "sliding_window": 128,
                "num_experts_per_tok": 4},
    "mistral": {"tie_word_embeddings": False, "sliding_window": 4096},
    "mixtral": {"tie_word_embeddings": False, "num_local_experts": 8, "num_experts_per_tok": 2},
    "llama": {"tie_word_embeddings": False},
    "mllama_text_model": {"tie_word_embeddings": False,
                          "cross_attention_layers": [3, 8, 13, 18, 23, 28, 33, 38]},
    "qwen2": {"tie_word_embeddings": False},
    "qwen3": {"tie_word_embeddings": False, "head_dim": 128},
    "qwen2_moe": {"tie_word_embeddings": False},
    "qwen3_moe": {"tie_word_embeddings": False},
    "deepseek_v2": {"tie_word_embeddings": False},
    "deepseek_v3": {"tie_word_embeddings": False},
}

# The model_type of the decoder inside a multimodal wrapper whose text_config omits it.
TEXT_MODEL_TYPES = {"gemma3": "gemma3_text", "mllama": "mllama_text_model"}

# Layer patterns the configuration classes derive when the config has no layer_types:
# (period, index within the period that is full attention).
SLIDING_PATTERNS = {"gemma2": 2, "gpt_oss": 2}

_LAYER_TYPE_KINDS = {"full_attention": FULL, "attention": FULL, "sliding_attention": SLIDING}


@dataclass(frozen=True)
class QuantScheme:
    """How a quantized checkpoint stores its matrices: bytes per weight (scales included) and which matrices."""

    method: str
    bytes_per_weight: float
    experts_only: bool      # mxfp4 (gpt-oss): only the MoE experts are quantized
    group_size: int | None = None   # AWQ/GPTQ: weights per scale group
    block: tuple[int, int] | None = None   # fp8: weight_block_size (rows, columns)


@dataclass(frozen=True)
class ModelShape:
    """The dimensions of a decoder that the theory needs, read from a Hugging Face config."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool
    dtype_bytes: int
    dtype: str                             # the dtype vLLM serves the model in
    kv_lora_rank: int | None = None        # MLA (DeepSeek-V2/V3): latent width per token
    qk_rope_head_dim: int | None = None    # MLA: the RoPE part stored next to the latent
    qk_nope_head_dim: int | None = None    # MLA: per-head non-RoPE query/key width
    v_head_dim: int | None = None          # MLA: per-head value width
    q_lora_rank: int | None = None         # MLA: low-rank query path, None when direct
    num_experts: int = 0                   # mixture-of-experts: routed experts (0 = dense)
    sliding_window: int | None = None      # the config's window, None = full attention
    layer_kinds: tuple[str, ...] = ()      # per layer: full, sliding or cross (empty = all full)
    experts_per_token: int = 0             # MoE: routed experts each token uses
    expert_intermediate: int = 0           # MoE: width of one routed expert's FFN
    shared_expert_intermediate: int = 0    # MoE: total width of the always-on shared experts
    moe_layers: int = 0                    # MoE: layers whose FFN is routed (the rest are dense)
    quant: QuantScheme | None = None       # quantized checkpoint, None = weights in dtype
    quant_unmodelled: Reason | None = None  # why a quantization_config could not be modelled
    config_dtype: str | None = None        # the dtype the config declares, None when it has none
    model_type: str = ""
    max_position_embeddings: int | None = None
    defaults_used: tuple[tuple[str, Any], ...] = ()   # (field, value) taken from the class defaults
    chunked_attention: int | None = None   # Llama-4 attention_chunk_size (not modelled)

    @property
    def is_mla(self) -> bool:
        """Whether the config describes multi-head latent attention (kv_lora_rank and qk_rope_head_dim set)."""
        return self.kv_lora_rank is not None and self.qk_rope_head_dim is not None

    @property
    def attention_width(self) -> int:
        """heads × head_dim: the width of Q (equals hidden for most models)."""
        return self.heads * self.head_dim

    @property
    def attention_kind(self) -> str:
        """MHA, GQA, MQA or MLA, from the head counts."""
        if self.is_mla:
            return "MLA"
        if self.kv_heads == self.heads:
            return "MHA"
        if self.kv_heads == 1:
            return "MQA"
        return "GQA"

    @property
    def kv_layers(self) -> int:
        """Layers that store K and V for every text token (all but cross-attention layers)."""
        return sum(1 for k in self.kinds if k != CROSS)

    @property
    def kinds(self) -> tuple[str, ...]:
        """Each layer's attention kind; every layer full attention when the config says nothing else."""
        return self.layer_kinds or (FULL,) * self.layers


# --------------------------------------------------------------------------------------------
# Strict JSON
# --------------------------------------------------------------------------------------------


def _refuse_constant(name: str) -> Any:
    """json.loads hook: NaN and Infinity are not numbers a config may hold."""
    raise Absent("reason.config_not_finite", name=name)


def _finite_float(text: str) -> float:
    """json.loads hook: a float literal that must stay finite (1e400 overflows to inf)."""
    v = float(text)
    if not math.isfinite(v):
        raise Absent("reason.config_overflow", text=text)
    return v


def _depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value (a scalar is 0), walked without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict | list):
            deepest = max(deepest, d + 1)
            if deepest > MAX_CONFIG_DEPTH:
                return deepest
            stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return deepest


def parse_config_json(text: str) -> dict[str, Any]:
    """A config.json's text as a dict; Absent naming the problem for NaN, Infinity, deep nesting or bad JSON."""
    try:
        config = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:
        raise Absent("reason.config_too_deep", MAX_CONFIG_DEPTH=MAX_CONFIG_DEPTH) from None
    except json.JSONDecodeError as e:
        raise Absent("reason.json_invalid", error=e.msg, line=e.lineno) from None
    except ValueError as e:   # e.g. an integer literal longer than Python converts
        raise Absent("reason.json_unusable", error=e) from None
    if not isinstance(config, dict):
        raise Absent("reason.file_not_object")
    if _depth(config) > MAX_CONFIG_DEPTH:
        raise Absent("reason.config_too_deep", MAX_CONFIG_DEPTH=MAX_CONFIG_DEPTH)
    return config


# --------------------------------------------------------------------------------------------
# Typed fields
# --------------------------------------------------------------------------------------------


def _int_or_none(cfg: Mapping[str, Any], name: str, minimum: int) -> int | None:
    """An integer field ≥ MINIMUM, or None when unset; Absent naming the field when it is not one."""
    v = cfg.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or int(v) != v or v < minimum:
        kind = Reason.of("reason.kind_positive" if minimum > 0 else "reason.kind_non_negative")
        raise Absent("reason.field_not_integer", name=name, kind=kind, v=v)
    if v > _LARGEST_DIMENSION:
        raise Absent("reason.field_too_large", name=name, v=v)
    return int(v)


def _required_int(cfg: Mapping[str, Any], name: str, *aliases: str) -> int:
    """A positive integer field of the config (or an alias); Absent naming the field when missing or bad."""
    for n in (name, *aliases):
        if cfg.get(n) is not None:
            return _int_or_none(cfg, n, 1)
    raise Absent("reason.config_no_field", name=name)


def _optional_int(cfg: Mapping[str, Any], name: str) -> int | None:
    """A non-negative integer field of the config, or None when it is not set."""
    return _int_or_none(cfg, name, 0)


def _strict_bool(cfg: Mapping[str, Any], name: str, default: bool | None) -> bool | None:
    """A JSON boolean field; a string such as "false" is refused rather than read as true."""
    v = cfg.get(name)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise Absent("reason.field_not_bool", name=name, v=v, type=type(v).__name__)
    return v


def _int_list(cfg: Mapping[str, Any], name: str, below: int) -> list[int]:
    """A list of layer indices in [0, BELOW); Absent when it is not one."""
    v = cfg.get(name) or []
    if not isinstance(v, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < below
                                          for i in v):
        raise Absent("reason.field_not_layer_list", name=name, below=below, v=v)
    return v


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a dtype name (bfloat16 → 2, float32 → 4, fp8 → 1)."""
    if not isinstance(dtype, str):
        raise Absent("reason.dtype_not_name", dtype=dtype)
    name = dtype.lower().removeprefix("torch.")
    if name.startswith("fp8") or name.startswith("float8"):
        return 1
    if name not in _DTYPE_BYTES:
        raise Absent("reason.dtype_unknown", dtype=dtype)
    return _DTYPE_BYTES[name]


def served_dtype(config_dtype: str | None, requested: str = "auto") -> str:
    """The dtype vLLM serves in: --dtype when given, else the config's, with float32 (or no dtype) served as bfloat16."""
    if requested and requested.lower() != "auto":
        dtype_bytes(requested)
        return requested.lower()
    if config_dtype is None or dtype_bytes(config_dtype) == 4:
        return "bfloat16"
    return str(config_dtype).lower().removeprefix("torch.")


# --------------------------------------------------------------------------------------------
# The decoder's fields, with the class defaults applied
# --------------------------------------------------------------------------------------------


def decoder_config(config: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[tuple[str, Any], ...]]:
    """The decoder's fields (text_config merged over the wrapper) with the class defaults filled in, and which defaults were used."""
    if not isinstance(config, Mapping):
        raise Absent("reason.config_not_object")
    cfg = dict(config)
    text = config.get("text_config")
    if text is not None and not isinstance(text, Mapping):
        raise Absent("reason.text_config_not_object", text=text)
    if text is not None and "num_hidden_layers" not in config:
        # Multimodal wrappers keep the decoder's dimensions in text_config.
        outer_type = config.get("model_type")
        cfg = {**config, **text}
        if "model_type" not in text:
            cfg["model_type"] = TEXT_MODEL_TYPES.get(outer_type, outer_type)
    model_type = cfg.get("model_type")
    used = []
    for key, value in ARCH_DEFAULTS.get(model_type if isinstance(model_type, str) else "", {}).items():
        if key not in cfg:
            cfg[key] = value
            used.append((key, value))
    return cfg, tuple(used)


def sliding_window_of(cfg: Mapping[str, Any]) -> int | None:
    """The sliding window in tokens, None when the config has none, disables it or sets it to 0."""
    window = _optional_int(cfg, "sliding_window")
    if _strict_bool(cfg, "use_sliding_window", None) is False or not window:
        return None
    return window


def layer_kinds_of(cfg: Mapping[str, Any], layers: int, window: int | None) -> tuple[str, ...]:
    """Each layer's attention kind from layer_types, cross_attention_layers or the architecture's pattern."""
    model_type = cfg.get("model_type")
    types = cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            raise Absent("reason.layer_types_count", layers=layers, types=types)
        unknown = sorted({t for t in types if t not in _LAYER_TYPE_KINDS}, key=str)
        if unknown:
            raise Absent("reason.layer_type_unmodelled", layer_type=unknown[0])
        kinds = tuple(_LAYER_TYPE_KINDS[t] for t in types)
        if SLIDING in kinds and window is None:
            raise Absent("reason.sliding_without_window")
        return kinds
    cross = set(_int_list(cfg, "cross_attention_layers", layers))
    if window is None:
        return tuple(CROSS if i in cross else FULL for i in range(layers))
    if model_type == "gemma3_text":
        period = _required_int(cfg, "sliding_window_pattern")
    else:
        period = SLIDING_PATTERNS.get(model_type)
    if period is not None:
        # transformers: layer i is sliding unless (i + 1) is a multiple of the period.
        return tuple(SLIDING if (i + 1) % period else FULL for i in range(layers))
    if _strict_bool(cfg, "use_sliding_window", None) and cfg.get("max_window_layers") is not None:
        # Qwen2/Qwen3: layers from max_window_layers on use the window.
        first = _optional_int(cfg, "max_window_layers")
        return tuple(SLIDING if i >= first else FULL for i in range(layers))
    # No per-layer information: vLLM applies the model's window to every layer (Mistral-7B-v0.1).
    return tuple(CROSS if i in cross else SLIDING for i in range(layers))


def _experts(cfg: Mapping[str, Any]) -> int:
    """Routed experts per MoE layer (0 for a dense model)."""
    for name in ("n_routed_experts", "num_local_experts", "num_experts"):
        v = _optional_int(cfg, name)
        if v:
            return v
    return 0


def moe_layer_count(cfg: Mapping[str, Any], layers: int) -> int:
    """How many layers route their FFN through experts (DeepSeek's first_k_dense_replace, Qwen's mlp_only_layers)."""
    if cfg.get("first_k_dense_replace") is not None or cfg.get("moe_layer_freq") is not None:
        first = _optional_int(cfg, "first_k_dense_replace") or 0
        freq = _optional_int(cfg, "moe_layer_freq") or 1
        return sum(1 for i in range(layers) if i >= first and i % freq == 0)
    if cfg.get("decoder_sparse_step") is not None or cfg.get("mlp_only_layers"):
        step = _optional_int(cfg, "decoder_sparse_step") or 1
        dense = set(_int_list(cfg, "mlp_only_layers", layers))
        return sum(1 for i in range(layers) if i not in dense and (i + 1) % step == 0)
    return layers


def quant_scheme(cfg: Mapping[str, Any]) -> QuantScheme | None:
    """The checkpoint's quantization as bytes per weight (scales included); Absent for a method not modelled."""
    q = cfg.get("quantization_config")
    if q is None:
        return None
    if not isinstance(q, Mapping):
        raise Absent("reason.quant_config_not_object", q=q)
    method = str(q.get("quant_method", "")).lower()
    if method == "fp8":
        block = q.get("weight_block_size")
        if block is None:
            return QuantScheme("fp8", 1.0, False)      # one scale per tensor
        if (not isinstance(block, list) or len(block) != 2
                or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
            raise Absent("reason.fp8_block_size", block=block)
        # One float32 scale per block of rows × columns.
        return QuantScheme("fp8", 1 + 4 / (block[0] * block[1]), False, block=(block[0], block[1]))
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        bits = _required_int(q, "bits", "w_bit")
        group = q.get("group_size", q.get("q_group_size", 128))
        if isinstance(group, bool) or not isinstance(group, int):
            raise Absent("reason.group_size_not_integer", method=method, group=group)
        # Per group: one 16-bit scale and one packed zero point of `bits` bits.
        extra = (2 + bits / 8) / group if group > 0 else 0.0
        return QuantScheme(method, bits / 8 + extra, False, group_size=group if group > 0 else None)
    if method == "mxfp4":
        # 4-bit values plus one 8-bit shared exponent per 32 values; vLLM quantizes only the experts.
        return QuantScheme("mxfp4", 0.5 + 1 / 32, True)
    raise Absent("reason.quant_not_modelled", method=method or '(none named)')


def model_shape(config: Mapping[str, Any], dtype: str = "auto") -> ModelShape:
    """The model's dimensions (layers, heads, KV heads, head_dim, served dtype, layer kinds, experts…) from its config.json."""
    cfg, used = decoder_config(config)
    layers = _required_int(cfg, "num_hidden_layers", "n_layer", "num_layers")
    hidden = _required_int(cfg, "hidden_size", "n_embd", "d_model")
    heads = _required_int(cfg, "num_attention_heads", "n_head")
    # Hugging Face convention: no num_key_value_heads means one KV head per query head (MHA).
    kv_heads = _required_int(cfg, "num_key_value_heads") if cfg.get("num_key_value_heads") is not None else heads
    mla = cfg.get("kv_lora_rank") is not None and cfg.get("qk_rope_head_dim") is not None
    if cfg.get("head_dim") is not None:
        head_dim = _required_int(cfg, "head_dim")
    elif mla and cfg.get("qk_nope_head_dim") is not None:
        # MLA has no single head_dim; the query/key head width is nope + rope.
        head_dim = _required_int(cfg, "qk_nope_head_dim") + _required_int(cfg, "qk_rope_head_dim")
    else:
        if hidden % heads:
            raise Absent("reason.head_dim_underivable", hidden=hidden, heads=heads)
        head_dim = hidden // heads
    intermediate = _required_int(cfg, "intermediate_size", "n_inner", "ffn_dim")
    vocab = _required_int(cfg, "vocab_size")
    declared = cfg.get("torch_dtype", cfg.get("dtype"))
    if declared is not None:
        dtype_bytes(declared)
    served = served_dtype(declared, dtype)
    tied = _strict_bool(cfg, "tie_word_embeddings", None)
    if tied is None:
        tied = False
        used = (*used, ("tie_word_embeddings", False))
    window = sliding_window_of(cfg)
    kinds = layer_kinds_of(cfg, layers, window)
    experts = _experts(cfg)
    top_k = expert_width = shared = moe_layers = 0
    if experts:
        top_k = next((v for n in ("num_experts_per_tok", "experts_per_token", "moe_topk")
                      if (v := _optional_int(cfg, n))), 0)
        expert_width = _optional_int(cfg, "moe_intermediate_size") or intermediate
        shared = ((_optional_int(cfg, "n_shared_experts") or 0) * expert_width
                  or _optional_int(cfg, "shared_expert_intermediate_size") or 0)
        moe_layers = moe_layer_count(cfg, layers)
    try:
        quant, quant_why = quant_scheme(cfg), None
    except Absent as e:
        quant, quant_why = None, e.reason
    return ModelShape(
        layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        intermediate=intermediate, vocab=vocab, tied_embeddings=tied, dtype_bytes=dtype_bytes(served),
        dtype=served,
        kv_lora_rank=_optional_int(cfg, "kv_lora_rank"),
        qk_rope_head_dim=_optional_int(cfg, "qk_rope_head_dim"),
        qk_nope_head_dim=_optional_int(cfg, "qk_nope_head_dim"),
        v_head_dim=_optional_int(cfg, "v_head_dim"),
        q_lora_rank=_optional_int(cfg, "q_lora_rank"),
        num_experts=experts, sliding_window=window,
        layer_kinds=kinds if set(kinds) != {FULL} else (),
        experts_per_token=top_k, expert_intermediate=expert_width,
        shared_expert_intermediate=shared, moe_layers=moe_layers,
        quant=quant, quant_unmodelled=quant_why,
        config_dtype=None if declared is None else str(declared),
        model_type=str(cfg.get("model_type") or ""),
        max_position_embeddings=_optional_int(cfg, "max_position_embeddings"),
        defaults_used=used, chunked_attention=_optional_int(cfg, "attention_chunk_size"),
    )
