"""Tensor parallel: the engine's TP size, the all-reduce traffic it implies against the links' measured traffic, and each GPU's shard."""

from __future__ import annotations

from report.ledger import Absent
from report.registry import point_quantity

# Tensor parallel: the engine's TP size and the all-reduce traffic it implies, against the
# links' measured traffic. Each layer all-reduces the hidden state twice (after attention and
# after the MLP); a ring all-reduce of M bytes over TP ranks sends 2·(TP−1)/TP × M from each
# GPU. So each processed token (prompt or output) costs every GPU
# 2·(TP−1)/TP × hidden × dtype bytes × 2 × layers bytes sent over its links.

TP_FLAGS = ("--tensor-parallel-size", "-tp")


def _tp_in_command(command: list[str] | str) -> int | None:
    """The --tensor-parallel-size (or -tp) a launch command gives, None when it gives none."""
    words = command.split() if isinstance(command, str) else [str(w) for w in command]
    for i, w in enumerate(words):
        flag, eq, value = w.partition("=")
        if flag in TP_FLAGS:
            text = value if eq else (words[i + 1] if i + 1 < len(words) else "")
            if not text.isdigit() or int(text) < 1:
                raise Absent("reason.tp_not_a_size", value=text)
            return int(text)
    return None


@point_quantity(unit="GPU")
def tensor_parallel_size(engine_command: list[str] | str | None = None,
                         log_args: dict | None = None) -> int:
    """The engine's tensor-parallel size: its launch command's --tensor-parallel-size, else the server log's non-default args, else vLLM's default of 1 where the command is known."""
    if engine_command:
        found = _tp_in_command(engine_command)
        if found is not None:
            return found
    if log_args and isinstance(log_args.get("tensor_parallel_size"), int):
        return log_args["tensor_parallel_size"]
    if engine_command or log_args is not None:
        return 1        # the command or the log's arguments are known and set no TP: vLLM's default
    raise Absent("reason.tp_unknown")


@point_quantity(unit="B/tok")
def allreduce_bytes_per_token(tensor_parallel_size: int, model_config: dict) -> float:
    """Bytes each GPU sends per processed token in the all-reduces tensor parallel implies: 2·(TP−1)/TP × hidden × dtype bytes × 2 per layer."""
    if tensor_parallel_size <= 1:
        raise Absent("reason.tp_one")
    from report.architecture.modelconfig import model_shape
    shape = model_shape(model_config)
    tp = tensor_parallel_size
    return 2 * (tp - 1) / tp * shape.hidden * shape.dtype_bytes * 2 * shape.layers


@point_quantity(unit="B/s")
def allreduce_bytes_per_s(allreduce_bytes_per_token: float, total_tok_s: float) -> float:
    """The all-reduce traffic each GPU should send at the point's token rate (prompt and output tokens per second)."""
    return allreduce_bytes_per_token * total_tok_s


@point_quantity(unit="×")
def nvlink_over_allreduce(allreduce_bytes_per_s: float, nvlink_tx_bytes_per_s: float) -> float:
    """Measured NVLink traffic out of the GPU over the all-reduce traffic tensor parallel predicts (1 = the links carried exactly the all-reduces)."""
    if allreduce_bytes_per_s <= 0:
        raise Absent("reason.no_token_processed")
    return nvlink_tx_bytes_per_s / allreduce_bytes_per_s


@point_quantity(unit="B")
def weight_bytes_per_gpu(weight_bytes: float, tensor_parallel_size: int) -> float:
    """The weights one GPU holds and rereads each step, the model's sharded by tensor parallel (bytes)."""
    return weight_bytes / tensor_parallel_size


def _kv_heads(model_config: dict) -> int:
    from report.architecture.modelconfig import model_shape
    return model_shape(model_config).kv_heads


@point_quantity(unit="head")
def kv_heads_per_gpu(tensor_parallel_size: int, model_config: dict) -> int:
    """The KV heads each GPU holds under tensor parallel: num_kv_heads ÷ TP, or one when there are fewer KV heads than GPUs (vLLM then replicates each head over TP ÷ num_kv_heads GPUs)."""
    heads, tp = _kv_heads(model_config), tensor_parallel_size
    if heads >= tp and heads % tp:
        raise Absent("reason.kv_heads_not_divisible", heads=heads, tp=tp)
    if heads < tp and tp % heads:
        raise Absent("reason.kv_heads_not_divisible", heads=heads, tp=tp)
    return max(1, heads // tp)


@point_quantity(unit="×")
def kv_head_replicas(tensor_parallel_size: int, model_config: dict, kv_heads_per_gpu: int) -> float:
    """How many GPUs hold a copy of each KV head: 1 when the heads divide among the GPUs, TP ÷ num_kv_heads when there are fewer heads than GPUs."""
    return kv_heads_per_gpu * tensor_parallel_size / _kv_heads(model_config)


@point_quantity(unit="B")
def kv_bytes_per_token_per_gpu(kv_bytes_per_token: float, kv_heads_per_gpu: int, model_config: dict) -> float:
    """The KV cache bytes one token takes on each GPU: its share of the token's KV heads (kv_bytes_per_token ÷ TP when the heads divide; one head's bytes when replicated)."""
    return kv_bytes_per_token * kv_heads_per_gpu / _kv_heads(model_config)


@point_quantity(unit="fraction")
def weight_read_bandwidth_share(weight_bytes_per_gpu: float, engine_steps_per_s: float,
                                peak_bandwidth: float) -> float:
    """The share of one GPU's peak memory bandwidth its shard of the weights takes, reread once every engine step (a floor under its MBU)."""
    if peak_bandwidth <= 0:
        raise Absent("reason.denominator_zero")
    return weight_bytes_per_gpu * engine_steps_per_s / peak_bandwidth
