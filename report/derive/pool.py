"""The round's KV pool and the server's settings, as its log and cache_config_info state them.

Round quantities (report/registry.py) over the round's raw `log` (the server log's facts,
report/derive/serverlog.py) and the pool the round's cache_config_info states
(`pool_tokens_metrics`, `block_size`, recorded by round_ledger.pool_ledger): the pool from the
log, from the metrics and from memory, and whether they agree.
"""

from __future__ import annotations

from typing import Any

from report.architecture import theory as T
from report.derive import analyses as A
from report.derive.serverlog import ServerLogFacts
from report.ledger import Absent
from report.registry import round_quantity


def _stated(value: Any, absent: Absent) -> Any:
    """VALUE the log states, or ABSENT (raised) where it states none."""
    if value is None:
        raise absent
    return value


@round_quantity(unit="tok")
def pool_tokens_log(log: ServerLogFacts) -> int:
    """KV pool size in tokens, as the server log states it."""
    return _stated(log.kv_cache_size_tokens, Absent("reason.log_no_kv_cache_size"))


@round_quantity(unit="fraction")
def pool_agreement(pool_tokens_log: int, pool_tokens_metrics: int) -> float:
    """Relative difference between the pool size from the log and from cache_config_info."""
    return A.pool_tokens_agreement(pool_tokens_log, pool_tokens_metrics)


@round_quantity(unit="tok")
def pool_tokens(pool_tokens_metrics: int | None = None, pool_tokens_log: int | None = None) -> int:
    """KV pool size in tokens: cache_config_info's where it is stated, else the server log's."""
    if pool_tokens_metrics is not None:
        return pool_tokens_metrics
    return _stated(pool_tokens_log, Absent("reason.no_pool_size"))


@round_quantity(unit="tok")
def pool_tokens_usable(pool_tokens: int, block_size: int) -> int:
    """Pool tokens vLLM's usage gauge is a fraction of: one block (the null block) fewer."""
    return A.usable_pool_tokens(pool_tokens, block_size)


@round_quantity(unit="GiB")
def kv_memory_gib(log: ServerLogFacts) -> float:
    """KV cache memory the server log states (Available KV cache memory / CPU KV cache GiB)."""
    gib = log.available_kv_cache_gib if log.available_kv_cache_gib is not None else log.cpu_kv_cache_gib
    return _stated(gib, Absent("reason.log_no_kv_memory"))


@round_quantity(unit="tok")
def pool_tokens_from_memory(kv_memory_gib: float, kv_bytes_per_token: int, block_size: int) -> int:
    """The pool from memory: the KV memory the log states ÷ the architecture's bytes per token (whole blocks)."""
    return T.kv_pool_tokens_from_gib(kv_memory_gib, kv_bytes_per_token, block_size)


@round_quantity(unit="blocks")
def blocks_before_override(log: ServerLogFacts) -> int:
    """Blocks vLLM sized from memory before --num-gpu-blocks-override replaced them."""
    return _stated(log.num_gpu_blocks_profiled, Absent("reason.log_no_blocks_override"))


@round_quantity(unit="tok")
def pool_tokens_sized(pool_tokens_log: int | None = None, blocks_before_override: int | None = None,
                      block_size: int | None = None) -> int:
    """The pool vLLM sized from memory: the blocks before an override × the block size, else the log's pool."""
    if blocks_before_override is not None:
        return A.product(blocks_before_override, _stated(block_size, Absent("reason.input_none", input="block_size")))
    return _stated(pool_tokens_log, Absent("reason.input_none", input="pool_tokens_log"))


@round_quantity(unit="fraction")
def pool_memory_agreement(pool_tokens_from_memory: int, pool_tokens_sized: int) -> float:
    """Relative difference of the pool from memory from the pool vLLM sized."""
    return A.relative_difference(pool_tokens_from_memory, pool_tokens_sized)


@round_quantity(unit="tok")
def max_num_batched_tokens(log: ServerLogFacts) -> int:
    """The scheduler's token budget per engine step, as the server log states it."""
    return _stated(log.max_num_batched_tokens, Absent("reason.log_no_max_num_batched_tokens"))


def _flag(log: ServerLogFacts, key: str, flag: str) -> int:
    value = (log.non_default_args or {}).get(key)
    return _stated(value if isinstance(value, int) else None, Absent("reason.flag_default", flag=flag))


@round_quantity(unit="req")
def max_num_seqs(log: ServerLogFacts) -> int:
    """The server's --max-num-seqs, as the log's non-default arguments state it."""
    return _flag(log, "max_num_seqs", "--max-num-seqs")


@round_quantity(unit="tok")
def max_model_len(log: ServerLogFacts) -> int:
    """The server's --max-model-len, as the log's non-default arguments state it."""
    return _flag(log, "max_model_len", "--max-model-len")


@round_quantity(unit="B")
def kv_cache_memory_suggested_bytes(log: ServerLogFacts) -> int:
    """The KV cache memory the server log suggests (--kv-cache-memory)."""
    return _stated(log.kv_cache_memory_fit_bytes, Absent("reason.log_no_kv_cache_memory_hint"))


@round_quantity(unit="GiB")
def kv_cache_memory_suggested_gib(kv_cache_memory_suggested_bytes: int) -> float:
    """The KV cache memory the server log suggests, in GiB."""
    return A.ratio(kv_cache_memory_suggested_bytes, 2**30)
