"""vLLM's cache_config_info: each engine's, the KV pool and block size the round's engines agree on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from bundle.metric_keys import ENDPOINT_LABEL
from report.derive.series.scrapes import (
    Scrape,
    key_labels,
    scrapes_in_window,
    selector,
    window_text,
)
from report.ledger import Absent, Reason
from report.registry import round_quantity

CACHE_CONFIG_INFO = "vllm:cache_config_info"


ENGINE_LABELS = (ENDPOINT_LABEL, "engine")     # the labels that tell engines apart, outermost first


def engine_name(engine: Mapping[str, str]) -> str:
    """An engine's name: its endpoint and rank labels joined by "/" ("1/0"), or its rank alone."""
    return "/".join(engine[k] for k in ENGINE_LABELS if k in engine) or "-"


def cache_config_info(scrapes: Sequence[Scrape], t_start: float | None = None,
                      t_end: float | None = None, engine: str | None = None,
                      engine_labels: Mapping[str, str] | None = None) -> dict[str, str]:
    """The labels of vllm:cache_config_info in the window (one engine's; all must agree)."""
    where = (dict(engine_labels) if engine_labels is not None
             else {"engine": engine} if engine is not None else None)
    seen: dict[tuple[tuple[str, str], ...], None] = {}
    select = selector(CACHE_CONFIG_INFO, where)
    for s in scrapes_in_window(scrapes, t_start, t_end):
        for key in select(s["samples"]):
            seen[tuple(sorted(key_labels(key).items()))] = None
    if not seen:
        if where is not None:
            raise Absent("reason.no_cache_config_engine", metric=CACHE_CONFIG_INFO,
                         window=window_text(t_start, t_end), engine=engine_name(where))
        raise Absent("reason.no_cache_config", metric=CACHE_CONFIG_INFO,
                     window=window_text(t_start, t_end))
    sets = [dict(items) for items in seen]
    if len(sets) > 1:
        engines = sorted({engine_name(d) if any(k in d for k in ENGINE_LABELS) else "?" for d in sets})
        if where is None and len(engines) > 1:
            raise Absent("reason.cache_config_engines",
                         metric=CACHE_CONFIG_INFO, engines=', '.join(engines))
        changed = sorted(k for k in set().union(*sets) if len({d.get(k) for d in sets}) > 1)
        raise Absent("reason.cache_config_changed",
                     metric=CACHE_CONFIG_INFO, window=window_text(t_start, t_end),
                     labels=', '.join(changed))
    return sets[0]


def cache_config_engines(scrapes: Sequence[Scrape]) -> dict[str, dict[str, str]]:
    """Each engine's identity labels (ENGINE_LABELS) over the run's cache_config_info samples, by engine name."""
    found: dict[str, dict[str, str]] = {}
    select = selector(CACHE_CONFIG_INFO, None)
    for s in scrapes_in_window(scrapes, None, None):
        for key in select(s["samples"]):
            labels = {k: v for k, v in key_labels(key).items() if k in ENGINE_LABELS}
            found.setdefault(engine_name(labels), labels)
    return found


def _int_label(labels: Mapping[str, str], name: str) -> int | None:
    raw = labels.get(name)
    if raw is None or raw in ("None", ""):
        return None
    try:
        return int(raw)
    except ValueError:
        f = float(raw)
        if not f.is_integer():
            raise ValueError(f"cache_config_info {name}={raw!r} is not a whole number") from None
        return int(f)


@dataclass(frozen=True)
class KVPoolTokens:
    """KV pool size in tokens, two ways from cache_config_info (None where a label is unset)."""

    blocks_times_block_size: int | None  # num_gpu_blocks × block_size (summed over DP engines)
    kv_cache_size_tokens: int | None     # the engine's own figure, per engine, as in the log line


def kv_pool_tokens_from_cache_config(labels: Mapping[str, str]) -> KVPoolTokens:
    """KV pool tokens from cache_config_info labels: num_gpu_blocks × block_size and kv_cache_size_tokens."""
    blocks, block_size = _int_label(labels, "num_gpu_blocks"), _int_label(labels, "block_size")
    product = blocks * block_size if blocks is not None and block_size is not None else None
    logged = _int_label(labels, "kv_cache_size_tokens")
    if product is None and logged is None:
        raise Absent("reason.cache_config_no_pool")
    return KVPoolTokens(blocks_times_block_size=product, kv_cache_size_tokens=logged)


@dataclass(frozen=True)
class RoundCacheConfig:
    """The pool and block size cache_config_info states for the round (None where it states none)."""

    pool: KVPoolTokens | None
    block_size: int | None
    why: Reason | None      # why the pool is missing (the block size too, unless `read`)
    read: bool              # whether the round's own cache_config_info was read


def _block_agreed(labels: Sequence[Mapping[str, str]]) -> int | None:
    """The block size every one of LABELS states, None where they differ."""
    blocks = {_int_label(x, "block_size") for x in labels}
    return blocks.pop() if len(blocks) == 1 else None


def _pool_agreed(pools: Sequence[KVPoolTokens], differs: Reason) -> tuple[KVPoolTokens | None, Reason | None]:
    """The pool every one of POOLS is, or None and DIFFERS where they are not one."""
    if len({p.blocks_times_block_size for p in pools}) == 1:
        return pools[0], None
    return None, differs


def _sets_agreed(scrapes: Sequence[Scrape], server_set_spans: Mapping[int, tuple[float, float]]):
    """(pool, block size, reason): what every server set's own cache_config_info agrees on."""
    try:
        labels = [cache_config_info(scrapes, a, b) for a, b in server_set_spans.values()]
    except Absent as e:
        return None, None, e.reason
    block = _block_agreed(labels)
    try:
        pools = [kv_pool_tokens_from_cache_config(x) for x in labels]
    except Absent as e:
        return None, block, e.reason
    totals = sorted({p.blocks_times_block_size for p in pools})
    pool, why = _pool_agreed(pools, Reason.of("reason.pool_differs_by_set",
                                              pools=", ".join(f"{t:,}" for t in totals)))
    return pool, block, why


def _engines_agreed(scrapes: Sequence[Scrape]):
    """(pool, block size, reason): what every engine's own cache_config_info agrees on (each
    engine's pool, not their sum); an engine that states no pool leaves neither."""
    engines = cache_config_engines(scrapes)
    try:
        labels = [cache_config_info(scrapes, engine_labels=e) for e in engines.values()]
        pools = [kv_pool_tokens_from_cache_config(x) for x in labels]
    except Absent as e:
        return None, None, e.reason
    each = ", ".join(f"{name}: {p.blocks_times_block_size:,}" for name, p in zip(engines, pools)
                     if p.blocks_times_block_size is not None)
    pool, why = _pool_agreed(pools, Reason.of("reason.pool_differs_by_engine", pools=each))
    return pool, _block_agreed(labels), why


def round_cache_config(scrapes: Sequence[Scrape],
                       server_set_spans: Mapping[int, tuple[float, float]]) -> RoundCacheConfig:
    """The round's cache_config_info: its own, else what every server set's (SERVER_SET_SPANS:
    each set's span) or every engine's agrees on."""
    try:
        labels = cache_config_info(scrapes)
        return RoundCacheConfig(kv_pool_tokens_from_cache_config(labels), _int_label(labels, "block_size"),
                                None, True)
    except Absent as e:
        if len(server_set_spans) > 1:
            pool, block, why = _sets_agreed(scrapes, server_set_spans)
        elif e.reason.code == "reason.cache_config_engines":
            pool, block, why = _engines_agreed(scrapes)
        else:
            pool, block, why = None, None, None
        return RoundCacheConfig(pool, block, why or e.reason, False)


@round_quantity(unit="tok")
def pool_tokens_metrics(cache_config_scrapes: Sequence[Scrape],
                        server_set_spans: Mapping[int, tuple[float, float]]) -> int:
    """KV pool size in tokens: num_gpu_blocks × block_size from cache_config_info (each engine's, where several engines all state the same one)"""
    c = round_cache_config(cache_config_scrapes, server_set_spans)
    if c.pool is None or c.pool.blocks_times_block_size is None:
        raise Absent.because(c.why or Reason.of("reason.cache_config_no_blocks"))
    return c.pool.blocks_times_block_size


@round_quantity(unit="tok")
def block_size(cache_config_scrapes: Sequence[Scrape],
               server_set_spans: Mapping[int, tuple[float, float]]) -> int:
    """KV cache block size in tokens (cache_config_info)"""
    c = round_cache_config(cache_config_scrapes, server_set_spans)
    if c.block_size is None:
        raise Absent.because(c.why if not c.read and c.why else Reason.of("reason.cache_config_no_block_size"))
    return c.block_size
