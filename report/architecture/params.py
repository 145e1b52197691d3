"""Parameters, weight bytes and FLOPs of a decoder: dense, mixture-of-experts and quantized checkpoints.

Matrices only (biases and norm weights left out, as in `report.architecture.theory`). A routed expert is
a gated FFN of three matrices; "active" parameters are those one token uses: every
non-expert matrix, the shared experts, its top-k routed experts and both embedding tables
(the convention behind "Mixtral 46.7 B / 12.9 B active"). Quantized matrices take the
scheme's bytes per weight with their scales; the router, the embeddings and the LM head stay
in the served dtype, and for mxfp4 (gpt-oss) so do attention and dense FFNs, because vLLM
quantizes only the experts there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from report.architecture.modelconfig import ModelShape, QuantScheme
from report.architecture.theory import (
    _non_negative,
    _positive,
    _shape,
    attention_params_per_layer,
    mla_attention_params_per_layer,
)
from report.ledger import Absent, Reason


@dataclass(frozen=True)
class ParamCounts:
    """Matrix parameters of a model by kind, summed over its layers."""

    attention: int        # Q, K, V, O (or the MLA projections), every layer
    dense_ffn: int        # gated FFNs of the layers without experts
    expert: int           # one routed expert's three matrices
    experts: int          # every routed expert of every MoE layer
    experts_active: int   # the top-k routed experts one token uses, every MoE layer
    shared_experts: int   # always-on shared experts, every MoE layer
    router: int           # router (gate) matrices
    embedding: int        # the input embedding table
    lm_head: int          # the LM head (0 when tied to the embedding)
    unembedding: int      # vocab × hidden: the LM head's matrix product, tied or not

    @property
    def non_embedding(self) -> int:
        """All parameters but the embedding tables."""
        return self.attention + self.dense_ffn + self.experts + self.shared_experts + self.router

    @property
    def active_non_embedding(self) -> int:
        """Parameters one token uses, the embedding tables left out."""
        return self.attention + self.dense_ffn + self.experts_active + self.shared_experts + self.router

    @property
    def total(self) -> int:
        """All parameters, the embedding counted once when tied."""
        return self.non_embedding + self.embedding + self.lm_head

    @property
    def active(self) -> int:
        """Parameters one token uses, both embedding tables included."""
        return self.active_non_embedding + self.embedding + self.lm_head


def attention_params(shape: ModelShape) -> int:
    """Attention matrix parameters of every layer (GQA/MHA/MQA or MLA; cross-attention layers have the same matrices)."""
    if shape.is_mla:
        if shape.qk_nope_head_dim is None or shape.v_head_dim is None:
            raise Absent("reason.mla_params")
        per_layer = mla_attention_params_per_layer(shape.hidden, shape.heads, shape.kv_lora_rank,
                                                   shape.qk_rope_head_dim, shape.qk_nope_head_dim,
                                                   shape.v_head_dim, shape.q_lora_rank)
    else:
        per_layer = attention_params_per_layer(shape.hidden, shape.heads, shape.kv_heads, shape.head_dim)
    return shape.layers * per_layer


def param_counts(shape: ModelShape) -> ParamCounts:
    """The model's matrix parameters by kind: attention, dense FFN, routed and shared experts, router, embeddings."""
    gated = 3 * shape.hidden
    moe_layers = shape.moe_layers if shape.num_experts else 0
    expert = gated * shape.expert_intermediate if moe_layers else 0
    if moe_layers and not shape.experts_per_token:
        raise Absent("reason.moe_no_topk", experts=shape.num_experts)
    table = shape.vocab * shape.hidden
    return ParamCounts(
        attention=attention_params(shape),
        dense_ffn=(shape.layers - moe_layers) * gated * shape.intermediate,
        expert=expert,
        experts=moe_layers * shape.num_experts * expert,
        experts_active=moe_layers * shape.experts_per_token * expert,
        shared_experts=moe_layers * gated * shape.shared_expert_intermediate,
        router=moe_layers * shape.hidden * shape.num_experts,
        embedding=table, lm_head=0 if shape.tied_embeddings else table, unembedding=table,
    )


def _weight_bytes(dtype_bytes: float, quant: QuantScheme | None, quant_unmodelled: Reason | None,
                  matrices: float, experts: float, plain: float) -> int:
    """Bytes of MATRICES (attention, dense and shared FFN), routed EXPERTS and PLAIN (router, tables) parameters."""
    if quant_unmodelled:
        raise Absent.because(quant_unmodelled)
    _positive("dtype_bytes", dtype_bytes)
    q = quant.bytes_per_weight if quant else dtype_bytes
    m = dtype_bytes if quant is None or quant.experts_only else q
    return int(matrices * m + experts * q + plain * dtype_bytes)


def weight_bytes_in_memory(counts: ParamCounts, shape: ModelShape) -> int:
    """Bytes the weights occupy: quantized matrices at the scheme's bytes per weight, scales included; the rest in the served dtype."""
    return _weight_bytes(shape.dtype_bytes, shape.quant, shape.quant_unmodelled,
                         matrices=counts.attention + counts.dense_ffn + counts.shared_experts,
                         experts=counts.experts, plain=counts.router + counts.embedding + counts.lm_head)


def experts_touched(experts: int, experts_per_token: int, tokens: float) -> float:
    """Routed experts per layer that at least one of T tokens uses, if routing is uniform: E·(1 − (1 − k/E)^T)."""
    _positive("experts", experts)
    _positive("experts_per_token", experts_per_token)
    _non_negative("tokens", tokens)
    return experts * (1 - (1 - experts_per_token / experts) ** tokens)


def weight_bytes_read_per_step(counts: ParamCounts, shape: ModelShape, tokens: float) -> int:
    """Weight bytes one forward step of T tokens reads: every non-expert matrix, the LM head, and the experts those tokens touch."""
    _positive("tokens", tokens)
    touched = 0.0
    if counts.experts:
        share = experts_touched(shape.num_experts, shape.experts_per_token, tokens) / shape.num_experts
        touched = counts.experts * share
    # The LM head is read whole; the input embedding only gathers T rows (left out).
    return _weight_bytes(shape.dtype_bytes, shape.quant, shape.quant_unmodelled,
                         matrices=counts.attention + counts.dense_ffn + counts.shared_experts,
                         experts=touched, plain=counts.router + counts.unembedding)


def matmul_flops_per_token(active_non_embedding: int, unembedding: int) -> int:
    """FLOPs of one token's matrix products: 2 × (active non-embedding parameters + the LM head's vocab × hidden)."""
    _positive("active_non_embedding", active_non_embedding)
    _positive("unembedding", unembedding)
    return 2 * (active_non_embedding + unembedding)


def flops_per_token_at_context(matmul_flops: float, attention_width: int, attended_layer_tokens: float) -> float:
    """FLOPs of one decode token at a context: matrix products + 4 × heads·head_dim per attended token per layer (QKᵀ and AV)."""
    _positive("matmul_flops", matmul_flops)
    _positive("attention_width", attention_width)
    _non_negative("attended_layer_tokens", attended_layer_tokens)
    return matmul_flops + 4 * attention_width * attended_layer_tokens


def total_params(counts: ParamCounts) -> int:
    """All matrix parameters, the embedding counted once when tied (experts all counted)."""
    return counts.total


def active_params(counts: ParamCounts) -> int:
    """Matrix parameters one token uses: non-expert matrices, its top-k and shared experts, both embedding tables."""
    return counts.active


def active_params_non_embedding(counts: ParamCounts) -> int:
    """Matrix parameters one token uses, the embedding tables left out (what 2N FLOPs per token counts)."""
    return counts.active_non_embedding


def non_embedding_params(counts: ParamCounts) -> int:
    """All matrix parameters but the embedding tables (every expert counted)."""
    return counts.non_embedding


def unembedding_params(counts: ParamCounts) -> int:
    """The LM head's vocab × hidden, which every decode token multiplies, tied or not."""
    return counts.unembedding


def model_weight_bytes(config: Mapping[str, Any] | ModelShape) -> int:
    """Bytes this model's weights occupy (weight_bytes_in_memory), from its config."""
    shape = _shape(config)
    return weight_bytes_in_memory(param_counts(shape), shape)


def model_decode_read_bytes(config: Mapping[str, Any] | ModelShape) -> int:
    """Weight bytes one decode step of a single token reads (weight_bytes_read_per_step at one token), from its config."""
    shape = _shape(config)
    return weight_bytes_read_per_step(param_counts(shape), shape, 1)


def model_params_non_embedding(config: Mapping[str, Any] | ModelShape) -> int:
    """Non-embedding parameters of this model, from its config (MLA attention and mixture-of-experts handled)."""
    return param_counts(_shape(config)).non_embedding
