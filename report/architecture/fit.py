"""Whether a plan can run: the tensor-parallel sizes vLLM accepts, and memory per GPU.

The TP checks are vLLM's own: `ModelConfig.verify_with_parallel_config` refuses a TP size
that does not divide the attention heads, and each attention layer splits its KV heads
across ranks when there are at least TP of them (they must divide evenly) or replicates
them (TP must then be a multiple of them). MLA keeps one latent per token on every rank.
"""

from __future__ import annotations

from report.architecture.modelconfig import ModelShape
from report.architecture.theory import _non_negative, _positive
from report.ledger import Reason

GIB = 1024**3


def tp_refusal(heads: int, kv_heads: int, tp: int, mla: bool = False) -> Reason | None:
    """Why vLLM refuses this tensor-parallel size for these head counts, or None when it accepts it."""
    if heads % tp:
        return Reason.of("reason.tp_heads_indivisible", heads=heads, tp=tp)
    if mla:
        return None
    if kv_heads >= tp and kv_heads % tp:
        return Reason.of("reason.tp_kv_heads_split", kv_heads=kv_heads, tp=tp)
    if kv_heads < tp and tp % kv_heads:
        return Reason.of("reason.tp_kv_heads_replicate", kv_heads=kv_heads, tp=tp)
    return None


def valid_tp_sizes(heads: int, kv_heads: int, mla: bool = False) -> list[int]:
    """Every TP size up to the head count that vLLM accepts for these heads."""
    return [tp for tp in range(1, heads + 1) if tp_refusal(heads, kv_heads, tp, mla) is None]


def kv_head_replicas(kv_heads: int, tp: int) -> int:
    """How many GPUs hold a copy of each KV head (1 when the heads are split, TP ÷ KV heads when replicated)."""
    _positive("kv_heads", kv_heads)
    _positive("tp", tp)
    return max(1, tp // kv_heads)


def quant_tp_problem(shape: ModelShape, tp: int) -> str | None:
    """Why the quantized matrices do not divide into TP shards of whole scale groups/blocks, or None."""
    q = shape.quant
    if q is None or tp == 1:
        return None
    widths = {"intermediate_size": shape.intermediate}
    if shape.num_experts:
        widths = {"expert intermediate size": shape.expert_intermediate}
    if q.group_size:
        # Row-parallel layers (down projection) split their input; each shard needs whole groups.
        step, what = q.group_size, "group_size"
    elif q.block and not q.experts_only:
        step, what = q.block[0], "weight block"
    else:
        return None
    for name, width in widths.items():
        if (width // tp) % step or width % tp:
            return (f"{name} {width:,} ÷ TP {tp} = {width / tp:,.1f} is not a multiple of the "
                    f"{q.method} {what} {step}; vLLM rejects such shards")
    return None


def weight_bytes_per_gpu(weight_bytes: float, tp: int) -> float:
    """Weight bytes on each GPU: the total ÷ TP (replicated KV projections, router and norms add a little)."""
    _positive("weight_bytes", weight_bytes)
    _positive("tp", tp)
    return weight_bytes / tp


def memory_budget_bytes(gpu_memory_bytes: float, gpu_memory_utilization: float) -> float:
    """Memory vLLM may use per GPU: the GPU's memory × --gpu-memory-utilization."""
    _positive("gpu_memory_bytes", gpu_memory_bytes)
    _positive("gpu_memory_utilization", gpu_memory_utilization)
    return gpu_memory_bytes * gpu_memory_utilization


def kv_memory_ceiling_bytes(memory_budget_bytes: float, weight_bytes_per_gpu: float) -> float:
    """The most KV memory a GPU could give: its budget minus the weights (activations and CUDA graphs not subtracted)."""
    _non_negative("weight_bytes_per_gpu", weight_bytes_per_gpu)
    return memory_budget_bytes - weight_bytes_per_gpu


def default_max_num_batched_tokens(gpu_memory_bytes: float, gpu_name: str) -> int:
    """vLLM 0.32's default prefill chunk for the API server: 16,384 from 160 GiB, 8,192 from 70 GiB (not A100), else 2,048."""
    _positive("gpu_memory_bytes", gpu_memory_bytes)
    if gpu_memory_bytes >= 160 * GIB:
        return 16_384
    if gpu_memory_bytes >= 70 * GIB and "a100" not in gpu_name.lower():
        return 8_192
    return 2_048
