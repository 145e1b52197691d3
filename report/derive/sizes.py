"""The round's KV pool, the model's sizes and the GPU's peaks, as round quantities, and the KV arithmetic over them.

Round quantities over the pool cache_config_info states (`pool_tokens_metrics`, `block_size`,
series/cache_config.py), what the server log states (serverlog.py), the round's raw `model_config` and the
GPU's datasheet peaks (`peak_flops`, `peak_bandwidth`: gpu/datasheet.py); beside them, single
scrape intervals of vLLM's FLOP counter against the peak no GPU can pass.
"""

from __future__ import annotations

from typing import Any, Mapping

from bundle.server_flags import server_flag
from report.architecture import params as PA
from report.architecture import theory as T
from report.derive.arith import giga, product, ratio, relative_difference, tera
from report.derive.series import scrapes as S
from report.derive.series import server
from report.ledger import Absent
from report.registry import round_quantity


def usable_pool_tokens(pool_tokens: int, block_size: int) -> int:
    """Pool tokens vLLM's usage gauge is a fraction of: one block (the null block) fewer."""
    if pool_tokens <= block_size:
        raise Absent("reason.pool_one_block")
    return pool_tokens - block_size


def pool_tokens_agreement(log_tokens: float, metric_tokens: float) -> float:
    """Relative difference between the pool size from the log and from cache_config_info."""
    return (metric_tokens - log_tokens) / log_tokens


def kv_tokens_in_use(usage_fraction: float, pool_tokens: float) -> float:
    """Tokens held in the KV cache: usage fraction times the pool in tokens."""
    return usage_fraction * pool_tokens


def kv_occupancy(concurrency: float, input_len: float, output_len: float, pool_tokens: float) -> float:
    """Theoretical KV occupancy C·(L+out)/pool (blocks not rounded)."""
    return concurrency * (input_len + output_len) / pool_tokens


def requests_that_fit(pool_tokens: float, request_tokens: float) -> int:
    """Whole requests of REQUEST_TOKENS each that the pool's POOL_TOKENS hold at once."""
    if request_tokens <= 0:
        raise Absent("reason.denominator_zero")
    return int(pool_tokens // request_tokens)


def kv_memory_gib(tokens: float, kv_bytes_per_token: float) -> float:
    """GiB of KV cache that TOKENS tokens take at KV_BYTES_PER_TOKEN (what `--kv-cache-memory` must give them)."""
    return tokens * kv_bytes_per_token / 2**30


def peak_at_clock(peak: float, clock_mhz: float, max_clock_mhz: float) -> float:
    """A datasheet peak at the boost clock scaled to the clock the GPU ran at."""
    if max_clock_mhz <= 0:
        raise Absent("reason.denominator_zero")
    return peak * clock_mhz / max_clock_mhz


def counter_rate_series(scrapes: list, name: str) -> list[tuple[float, float]]:
    """(t, per-second rate) of counter NAME between consecutive successful scrapes; a drop (restart) is skipped."""
    pts = []
    for s in scrapes:
        if not s.get("ok"):
            continue
        try:
            pts.append((s["t"], S.scrape_value(s["samples"], name)))
        except Absent:
            continue
    out = []
    for (t0, v0), (t1, v1) in zip(pts, pts[1:]):
        if t1 > t0 and v1 >= v0:
            out.append(((t0 + t1) / 2, (v1 - v0) / (t1 - t0)))
    if not out:
        raise Absent("reason.too_few_scrapes_carry", name=name)
    return out


def counter_rate_max(scrapes: list, name: str) -> float:
    """The largest per-second rate of counter NAME between two consecutive successful scrapes."""
    return max(r for _, r in counter_rate_series(scrapes, name))


def counter_rate_intervals_above(scrapes: list, name: str, threshold: float) -> int:
    """How many scrape intervals carried counter NAME faster than THRESHOLD per second."""
    return sum(1 for _, r in counter_rate_series(scrapes, name) if r > threshold)


Config = Mapping[str, Any]


def _given(value: Any, absent: Absent) -> Any:
    """VALUE, or ABSENT (raised) where there is none."""
    if value is None:
        raise absent
    return value


@round_quantity(unit="ms")
def decode_floor_ms(decode_read_bytes: float, peak_bandwidth: float) -> float:
    """The shortest decode step: the weight bytes a step reads, once, at the peak bandwidth, in ms.

    A dense model's step reads every matrix and the LM head whatever the batch (the input
    embedding only gathers rows); its KV reads come on top.
    """
    if peak_bandwidth <= 0:
        raise Absent("reason.denominator_zero")
    return decode_read_bytes / peak_bandwidth * 1e3


@round_quantity(unit="fraction")
def pool_agreement(pool_tokens_log: int, pool_tokens_metrics: int) -> float:
    """Relative difference between the pool size from the log and from cache_config_info."""
    return pool_tokens_agreement(pool_tokens_log, pool_tokens_metrics)


@round_quantity(unit="tok")
def pool_tokens(pool_tokens_metrics: int | None = None, pool_tokens_log: int | None = None) -> int:
    """KV pool size in tokens: cache_config_info's where it is stated, else the server log's."""
    if pool_tokens_metrics is not None:
        return pool_tokens_metrics
    return _given(pool_tokens_log, Absent("reason.no_pool_size"))


@round_quantity(unit="tok")
def pool_tokens_usable(pool_tokens: int, block_size: int) -> int:
    """Pool tokens vLLM's usage gauge is a fraction of: one block (the null block) fewer."""
    return usable_pool_tokens(pool_tokens, block_size)


@round_quantity(unit="tok")
def pool_tokens_from_memory(kv_memory_gib: float, kv_bytes_per_token: int, block_size: int) -> int:
    """The pool from memory: the KV memory the log states ÷ the architecture's bytes per token (whole blocks)."""
    return T.kv_pool_tokens_from_gib(kv_memory_gib, kv_bytes_per_token, block_size)


@round_quantity(unit="tok")
def pool_tokens_sized(pool_tokens_log: int | None = None, blocks_before_override: int | None = None,
                      block_size: int | None = None) -> int:
    """The pool vLLM sized from memory: the blocks before an override × the block size, else the log's pool."""
    if blocks_before_override is not None:
        return product(blocks_before_override, _given(block_size, Absent("reason.input_none", input="block_size")))
    return _given(pool_tokens_log, Absent("reason.input_none", input="pool_tokens_log"))


@round_quantity(unit="fraction")
def pool_memory_agreement(pool_tokens_from_memory: int, pool_tokens_sized: int) -> float:
    """Relative difference of the pool from memory from the pool vLLM sized."""
    return relative_difference(pool_tokens_from_memory, pool_tokens_sized)


@round_quantity(unit="GiB")
def kv_cache_memory_suggested_gib(kv_cache_memory_suggested_bytes: int) -> float:
    """The KV cache memory the server log suggests, in GiB."""
    return ratio(kv_cache_memory_suggested_bytes, 2**30)


@round_quantity(unit="")
def kv_cache_dtype(engine_command: Any = None, log: Any = None) -> str:
    """The KV cache's dtype the round's server ran with (--kv-cache-dtype in its launch command or log; "auto" is the model's own dtype)."""
    return server_flag("--kv-cache-dtype", engine_command, None, getattr(log, "non_default_args", None)) or "auto"


@round_quantity(unit="B")
def kv_bytes_per_token(model_config: Config, kv_cache_dtype: str = "auto") -> int:
    """KV bytes per token from the architecture (every layer's K and V) in the KV cache's dtype (the model's own unless --kv-cache-dtype says otherwise)."""
    return T.model_kv_bytes_per_token(model_config, kv_cache_dtype or "auto")


@round_quantity(unit="B")
def kv_bytes_per_token_mha(model_config: Config) -> int:
    """KV bytes per token if every head had its own KV head (multi-head attention)."""
    return T.model_mha_kv_bytes_per_token(model_config)


@round_quantity(unit="")
def params_non_embedding(model_config: Config) -> int:
    """Parameters outside the embeddings, from the config."""
    return PA.model_params_non_embedding(model_config)


@round_quantity(unit="B")
def weight_bytes(model_config: Config) -> int:
    """Bytes the model's weights occupy, from the config."""
    return PA.model_weight_bytes(model_config)


@round_quantity(unit="GB")
def weight_gb(weight_bytes: int) -> float:
    """Bytes the model's weights occupy, in GB."""
    return giga(weight_bytes)


@round_quantity(unit="B")
def decode_read_bytes(model_config: Config) -> int:
    """Weight bytes one decode step reads (every matrix and the LM head; the input embedding only gathers rows)."""
    return PA.model_decode_read_bytes(model_config)


@round_quantity(unit="GB")
def decode_read_gb(decode_read_bytes: int) -> float:
    """Weight bytes one decode step reads, in GB."""
    return giga(decode_read_bytes)


@round_quantity(unit="FLOP/B")
def ridge(peak_flops: float, peak_bandwidth: float) -> float:
    """The roofline's ridge point: peak FLOP/s ÷ peak memory bandwidth (FLOP per byte)."""
    return T.ridge_flops_per_byte(peak_flops, peak_bandwidth)


@round_quantity(unit="TFLOP/s")
def peak_tflops(peak_flops: float) -> float:
    """The GPU's dense tensor peak in TFLOP/s."""
    return tera(peak_flops)


@round_quantity(unit="TB/s")
def peak_tb_s(peak_bandwidth: float) -> float:
    """The GPU's peak memory bandwidth in TB/s."""
    return tera(peak_bandwidth)


# Single scrape intervals of vLLM's FLOP counter over the round, against the peak no GPU can pass.

@round_quantity(unit="FLOP/s")
def flop_rate_interval_max(scrapes: list) -> float:
    """The largest per-second rate of vLLM's FLOP counter between two consecutive successful scrapes."""
    return counter_rate_max(scrapes, server.MFU_FLOPS)


@round_quantity(unit="TFLOP/s")
def tflops_interval_max(flop_rate_interval_max: float) -> float:
    """The largest per-second rate of vLLM's FLOP counter over one scrape interval, in TFLOP/s."""
    return tera(flop_rate_interval_max)


@round_quantity(unit="")
def flop_intervals_over_peak(scrapes: list, peak_flops: float) -> int:
    """How many scrape intervals carried vLLM's FLOP counter faster than the GPU's dense peak."""
    return counter_rate_intervals_above(scrapes, server.MFU_FLOPS, peak_flops)
