"""Pure functions over the raw /metrics scrape list of a bundle (the records of metrics.jsonl).

A scrape is `{"t", "dt", "ok": true, "samples": {sample key: value}}` or a gap
`{"t", "dt", "ok": false, "error"}`; `t` is the scrape start in seconds since the bundle's
t0. A scrape belongs to a window [t_start, t_end] when its `t` does (both ends included).
Gaps never contribute values; they are listed by `scrape_gaps` so the report can say so.

Conventions:
- NAME is a sample name (`vllm:num_requests_waiting`, `vllm:prompt_tokens_total`) or, for
  histograms, the family name (`vllm:request_queue_time_seconds`). A renamed metric is also
  found under its legacy name (LEGACY_NAMES); in one scrape the current name wins.
- WHERE is a mapping of labels that must match exactly (`{"model_name": "tiny"}`); every
  other label is aggregated over (summed for counters and histograms, `agg` for gauges).
- Counters are differenced per series (one label set), the way Prometheus `increase()`
  treats resets: a drop means the counter restarted from 0, so the post-reset value is
  added. Unlike Prometheus there is no extrapolation to the window edges: the increase is
  between the first and last successful scrape in the window.
- A function that cannot give a value raises `report.ledger.Absent` with the reason in
  words; it never returns 0 for missing input.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise
from typing import Mapping, Sequence

from bundle.metric_keys import ENDPOINT_LABEL, split_key
from report.ledger import Absent, Reason
from report.registry import point_quantity, round_quantity

Scrape = Mapping
Where = Mapping[str, str] | None

# Current name -> names older vLLM versions exported for the same quantity
# (docs/analyses.md, metric names: vLLM renamed the cache metrics; ITL replaced TPOT).
LEGACY_NAMES: dict[str, tuple[str, ...]] = {
    "vllm:kv_cache_usage_perc": ("vllm:gpu_cache_usage_perc",),
    "vllm:prefix_cache_queries_total": ("vllm:gpu_prefix_cache_queries_total",),
    "vllm:prefix_cache_hits_total": ("vllm:gpu_prefix_cache_hits_total",),
    "vllm:inter_token_latency_seconds": ("vllm:time_per_output_token_seconds",),
}
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
GAUGE_AGGREGATES = ("sum", "mean", "max", "min")


# ---------------------------------------------------------------- selection within one scrape

def names_for(name: str) -> tuple[str, ...]:
    """NAME followed by the legacy names under which older vLLM versions exported it."""
    if name in LEGACY_NAMES:
        return (name, *LEGACY_NAMES[name])
    for suffix in _HISTOGRAM_SUFFIXES:
        base = name[: -len(suffix)]
        if name.endswith(suffix) and base in LEGACY_NAMES:
            return (name, *(old + suffix for old in LEGACY_NAMES[base]))
    return (name,)


@lru_cache(maxsize=1 << 16)
def _labels(key: str) -> dict[str, str]:
    # Shared cached dict: read it, never mutate it.
    return split_key(key)[1]


def _matches(key: str, where: Where) -> bool:
    if not where:
        return True
    labels = _labels(key)
    return all(labels.get(k) == v for k, v in where.items())


def _describe(name: str, where: Where) -> str:
    if not where:
        return name
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(where.items())) + "}"


def matching_samples(samples: Mapping[str, float], name: str, where: Where = None) -> dict[str, float]:
    """The samples of one scrape named NAME (or a legacy name) whose labels match WHERE, by key."""
    for cand in names_for(name):
        brace = cand + "{"
        found = {k: v for k, v in samples.items()
                 if (k == cand or k.startswith(brace)) and _matches(k, where)}
        if found:
            return found
    return {}


def _selector(name: str, where: Where):
    """A function giving the matching keys of a scrape, computed once per distinct key layout."""
    # Scrapes of one server share their key layout, so the scan over every key runs once per
    # layout instead of once per scrape (a 1 h run at 1 s has 3,600 scrapes of ~330 keys).
    cache: dict[tuple[str, ...], list[str]] = {}

    def select(samples: Mapping[str, float]) -> list[str]:
        layout = tuple(samples)
        keys = cache.get(layout)
        if keys is None:
            keys = cache[layout] = list(matching_samples(samples, name, where))
        return keys
    return select


def _combine(values: Sequence[float], agg: str) -> float:
    if agg == "sum":
        return math.fsum(values)
    if agg == "mean":
        return math.fsum(values) / len(values)
    return max(values) if agg == "max" else min(values)


def _check_agg(agg: str) -> None:
    if agg not in GAUGE_AGGREGATES:
        raise ValueError(f"agg must be one of {GAUGE_AGGREGATES}, not {agg!r}")


def scrape_value(samples: Mapping[str, float], name: str, where: Where = None,
                 agg: str = "sum") -> float:
    """One scrape's value of NAME: the matching samples combined by AGG (sum, mean, max or min)."""
    _check_agg(agg)
    found = matching_samples(samples, name, where)
    if not found:
        raise Absent("reason.no_sample_in_scrape", sample=_describe(name, where))
    return _combine(list(found.values()), agg)


# ---------------------------------------------------------------- windows

def _in_window(rec: Scrape, t_start: float | None, t_end: float | None) -> bool:
    t = rec["t"]
    return (t_start is None or t >= t_start) and (t_end is None or t <= t_end)


def _check_window(t_start: float | None, t_end: float | None) -> None:
    # An empty window is data, not a bug: an interrupted point, a round with one scrape.
    if t_start is not None and t_end is not None and not t_end > t_start:
        raise Absent("reason.window_not_forward", window=_window_text(t_start, t_end))


def _window_text(t_start: float | None, t_end: float | None) -> Reason:
    """The window in words, as a reason's parameter."""
    if t_start is None and t_end is None:
        return Reason.of("reason.window_whole_run")
    lo = Reason.of("reason.window_start") if t_start is None else f"{t_start:.3f} s"
    hi = Reason.of("reason.window_end") if t_end is None else f"{t_end:.3f} s"
    return Reason.of("reason.window_span", lo=lo, hi=hi)


def scrapes_in_window(scrapes: Sequence[Scrape], t_start: float | None = None,
                      t_end: float | None = None) -> list[Scrape]:
    """The successful scrapes whose start time lies in [t_start, t_end], in time order."""
    _check_window(t_start, t_end)
    ok = [s for s in scrapes if s.get("ok") and "samples" in s and _in_window(s, t_start, t_end)]
    return sorted(ok, key=lambda s: s["t"])


def scrape_gaps(scrapes: Sequence[Scrape], t_start: float | None = None,
                t_end: float | None = None) -> list[tuple[float, str]]:
    """The failed scrapes (gaps) in [t_start, t_end] as (t, error text), in time order."""
    _check_window(t_start, t_end)
    gaps = [(s["t"], str(s.get("error", "no error text recorded")))
            for s in scrapes if not s.get("ok") and _in_window(s, t_start, t_end)]
    return sorted(gaps, key=lambda g: g[0])


def steady_window(t_start: float, t_end: float, middle_fraction: float = 0.6) -> tuple[float, float]:
    """The steady-state part of a window: its middle MIDDLE_FRACTION, trimming both ends equally."""
    _check_window(t_start, t_end)
    if not 0 < middle_fraction <= 1:
        raise ValueError(f"middle_fraction must be in (0, 1], not {middle_fraction}")
    trim = (t_end - t_start) * (1 - middle_fraction) / 2
    return (t_start + trim, t_end - trim)


# ---------------------------------------------------------------- counters

def _series(ok: Sequence[Scrape], name: str, where: Where) -> dict[str, list[tuple[float, float]]]:
    """Per label set (the key without its name), the (t, value) observations of NAME."""
    out: dict[str, list[tuple[float, float]]] = {}
    select = _selector(name, where)
    for s in ok:
        samples = s["samples"]
        for key in select(samples):
            brace = key.find("{")
            ident = key[brace:] if brace >= 0 else ""
            out.setdefault(ident, []).append((s["t"], samples[key]))
    return out


def _increase(values: Sequence[float]) -> float:
    # Prometheus increase() without extrapolation: a drop is a restart from 0.
    total = 0.0
    for prev, cur in pairwise(values):
        total += cur - prev if cur >= prev else cur
    return total


@dataclass(frozen=True)
class _CounterWindow:
    increase: float
    by_series: dict[str, float]
    t_first: float
    t_last: float
    resets: tuple[float, ...]


def _counter_window(scrapes: Sequence[Scrape], t_start: float | None, t_end: float | None,
                    name: str, where: Where) -> _CounterWindow:
    ok = scrapes_in_window(scrapes, t_start, t_end)
    sample, window = _describe(name, where), _window_text(t_start, t_end)
    if len(ok) < 2:
        n_gaps = len(scrape_gaps(scrapes, t_start, t_end))
        if n_gaps:
            raise Absent("reason.increase_too_few_scrapes_failed", sample=sample, window=window,
                         n=len(ok), failed=n_gaps)
        raise Absent("reason.increase_too_few_scrapes", sample=sample, window=window, n=len(ok))
    series = _series(ok, name, where)
    if not series:
        raise Absent("reason.no_sample_in_window",
                     sample=_describe(name, where), window=_window_text(t_start, t_end))
    usable = {k: obs for k, obs in series.items() if len(obs) >= 2}
    if not usable:
        raise Absent("reason.series_seen_once", sample=sample, window=window)
    by_series = {k: _increase([v for _, v in obs]) for k, obs in usable.items()}
    resets = sorted({t for obs in usable.values()
                     for (_, prev), (t, cur) in pairwise(obs) if cur < prev})
    times = [t for obs in usable.values() for t, _ in obs]
    return _CounterWindow(math.fsum(by_series.values()), by_series, min(times), max(times),
                          tuple(resets))


def counter_increase(scrapes: Sequence[Scrape], t_start: float | None, t_end: float | None,
                     name: str, where: Where = None) -> float:
    """Increase of counter NAME between the first and last successful scrape in the window, resets included."""
    return _counter_window(scrapes, t_start, t_end, name, where).increase


def counter_rate(scrapes: Sequence[Scrape], t_start: float | None, t_end: float | None,
                 name: str, where: Where = None) -> float:
    """Per-second rate of counter NAME: its window increase over the time between the scrapes used."""
    w = _counter_window(scrapes, t_start, t_end, name, where)
    if w.t_last <= w.t_first:
        raise Absent("reason.rate_no_time", sample=_describe(name, where))
    return w.increase / (w.t_last - w.t_first)


def counter_moved(scrapes: Sequence[Scrape], t_start: float | None, t_end: float | None,
                  name: str, where: Where = None) -> bool:
    """Whether counter NAME increased at all in the window (False over a run with traffic: not enabled)."""
    return _counter_window(scrapes, t_start, t_end, name, where).increase > 0


# ---------------------------------------------------------------- histograms

@dataclass(frozen=True)
class HistogramDelta:
    """Increase of one histogram family over a window: Δsum, Δcount and cumulative Δbuckets by upper bound."""

    name: str
    sum: float
    count: float
    buckets: tuple[tuple[float, float], ...]  # (le, cumulative Δcount), ascending, +Inf last
    t_first: float
    t_last: float


def histogram_increase(scrapes: Sequence[Scrape], t_start: float | None, t_end: float | None,
                       name: str, where: Where = None) -> HistogramDelta:
    """Δsum, Δcount and Δbucket counts of histogram family NAME over the window, resets included."""
    s = _counter_window(scrapes, t_start, t_end, name + "_sum", where)
    c = _counter_window(scrapes, t_start, t_end, name + "_count", where)
    buckets: dict[float, float] = {}
    try:
        b = _counter_window(scrapes, t_start, t_end, name + "_bucket", where)
    except Absent:
        b = None
    if b is not None:
        for ident, inc in b.by_series.items():
            le = _labels(name + ident).get("le")  # ident is the label part "{...}"
            if le is None:
                continue
            bound = float(le)
            buckets[bound] = buckets.get(bound, 0.0) + inc
    return HistogramDelta(name=name, sum=s.increase, count=c.increase,
                          buckets=tuple(sorted(buckets.items())),
                          t_first=min(s.t_first, c.t_first), t_last=max(s.t_last, c.t_last))


def histogram_mean(delta: HistogramDelta) -> float:
    """Mean observation over a window: Δsum / Δcount of the histogram."""
    if delta.count <= 0:
        raise Absent("reason.no_observations_mean", name=delta.name)
    return delta.sum / delta.count


def histogram_window_mean(scrapes: Sequence[Scrape], t_start: float | None, t_end: float | None,
                          name: str, where: Where = None) -> float:
    """Mean observation of histogram family NAME over the window: Δsum / Δcount."""
    return histogram_mean(histogram_increase(scrapes, t_start, t_end, name, where))


# ---------------------------------------------------------------- gauges

def gauge_series(scrapes: Sequence[Scrape], t_start: float | None, t_end: float | None,
                 name: str, where: Where = None, agg: str = "sum") -> list[tuple[float, float]]:
    """(t, value) of gauge NAME for each successful scrape in the window, series combined by AGG."""
    _check_agg(agg)
    out = []
    select = _selector(name, where)
    for s in scrapes_in_window(scrapes, t_start, t_end):
        keys = select(s["samples"])
        if keys:
            out.append((s["t"], _combine([s["samples"][k] for k in keys], agg)))
    if not out:
        raise Absent("reason.no_sample_in_ok_scrape",
                     sample=_describe(name, where), window=_window_text(t_start, t_end))
    return out


def gauge_values(scrapes: Sequence[Scrape], t_start: float | None, t_end: float | None,
                 name: str, where: Where = None, agg: str = "sum") -> list[float]:
    """The values of gauge NAME over the window, one per successful scrape, series combined by AGG."""
    return [v for _, v in gauge_series(scrapes, t_start, t_end, name, where, agg)]


def _need(values: Sequence[float], what: Reason) -> None:
    if not values:
        raise Absent("reason.no_gauge_samples", what=what)


def median_value(values: Sequence[float]) -> float:
    """Median of the gauge samples."""
    _need(values, Reason.of("reason.stat_median"))
    return float(statistics.median(values))


def peak_value(values: Sequence[float]) -> float:
    """Largest gauge sample."""
    _need(values, Reason.of("reason.stat_peak"))
    return float(max(values))


def share_positive(values: Sequence[float]) -> float:
    """Share (0-1) of gauge samples above 0, e.g. queue incidence from num_requests_waiting."""
    _need(values, Reason.of("reason.stat_share_positive"))
    return sum(1 for v in values if v > 0) / len(values)


# ---------------------------------------------------------------- sampler quality

def _attempts(scrapes: Sequence[Scrape], t_start: float | None, t_end: float | None) -> list[Scrape]:
    _check_window(t_start, t_end)
    return sorted((s for s in scrapes if _in_window(s, t_start, t_end)), key=lambda s: s["t"])


# Over the whole round (no window) they are the round's r.scrapes and r.scrape_gaps.
@round_quantity(key="scrapes")
def scrape_count(scrapes: Sequence[Scrape], t_start: float | None = None,
                 t_end: float | None = None) -> int:
    """Number of scrape attempts (successful and failed) in the window."""
    return len(_attempts(scrapes, t_start, t_end))


@round_quantity(key="scrape_gaps")
def failed_scrape_count(scrapes: Sequence[Scrape], t_start: float | None = None,
                        t_end: float | None = None) -> int:
    """Number of failed scrapes (gaps) in the window."""
    return len(scrape_gaps(scrapes, t_start, t_end))


@round_quantity(unit="s")
def scrape_interval_p50(scrapes: Sequence[Scrape], t_start: float | None = None,
                        t_end: float | None = None) -> float:
    """Median time between consecutive scrape starts (attempts, gaps included) in the window."""
    ts = [s["t"] for s in _attempts(scrapes, t_start, t_end)]
    if len(ts) < 2:
        raise Absent("reason.interval_needs_two", n=len(ts), window=_window_text(t_start, t_end))
    return float(statistics.median(b - a for a, b in pairwise(ts)))


def _latencies(scrapes: Sequence[Scrape], t_start: float | None, t_end: float | None) -> list[float]:
    lat = [s["dt"] for s in scrapes_in_window(scrapes, t_start, t_end) if s.get("dt") is not None]
    if not lat:
        raise Absent("reason.no_ok_scrape_latency", window=_window_text(t_start, t_end))
    return lat


@round_quantity(unit="s")
def scrape_latency_p50(scrapes: Sequence[Scrape], t_start: float | None = None,
                       t_end: float | None = None) -> float:
    """Median duration of a successful /metrics scrape in the window."""
    return float(statistics.median(_latencies(scrapes, t_start, t_end)))


# ---------------------------------------------------------------- cache_config_info

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
    select = _selector(CACHE_CONFIG_INFO, where)
    for s in scrapes_in_window(scrapes, t_start, t_end):
        for key in select(s["samples"]):
            seen[tuple(sorted(_labels(key).items()))] = None
    if not seen:
        if where is not None:
            raise Absent("reason.no_cache_config_engine", metric=CACHE_CONFIG_INFO,
                         window=_window_text(t_start, t_end), engine=engine_name(where))
        raise Absent("reason.no_cache_config", metric=CACHE_CONFIG_INFO,
                     window=_window_text(t_start, t_end))
    sets = [dict(items) for items in seen]
    if len(sets) > 1:
        engines = sorted({engine_name(d) if any(k in d for k in ENGINE_LABELS) else "?" for d in sets})
        if where is None and len(engines) > 1:
            raise Absent("reason.cache_config_engines",
                         metric=CACHE_CONFIG_INFO, engines=', '.join(engines))
        changed = sorted(k for k in set().union(*sets) if len({d.get(k) for d in sets}) > 1)
        raise Absent("reason.cache_config_changed",
                     metric=CACHE_CONFIG_INFO, window=_window_text(t_start, t_end),
                     labels=', '.join(changed))
    return sets[0]


def cache_config_engines(scrapes: Sequence[Scrape]) -> dict[str, dict[str, str]]:
    """Each engine's identity labels (ENGINE_LABELS) over the run's cache_config_info samples, by engine name."""
    found: dict[str, dict[str, str]] = {}
    select = _selector(CACHE_CONFIG_INFO, None)
    for s in scrapes_in_window(scrapes, None, None):
        for key in select(s["samples"]):
            labels = {k: v for k, v in _labels(key).items() if k in ENGINE_LABELS}
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


def _scraped_span(scrapes: Sequence[Scrape], metrics_sampler_on: bool) -> tuple[float, float]:
    """The first and last scrape's times; Absent when there is none (the sampler off, or no scrape)."""
    if not scrapes:
        raise Absent("reason.no_metrics_sampler" if not metrics_sampler_on else "reason.no_scrape")
    return scrapes[0]["t"], scrapes[-1]["t"]


@round_quantity(unit="s")
def duration_s(scrapes: Sequence[Scrape], metrics_sampler_on: bool) -> float:
    """Time between the first and last scrape"""
    t0, t1 = _scraped_span(scrapes, metrics_sampler_on)
    return t1 - t0


@round_quantity(key="preemptions")
def round_preemptions(scrapes: Sequence[Scrape], metrics_sampler_on: bool) -> float:
    """Preemptions the server counted over the round"""
    return counter_increase(scrapes, *_scraped_span(scrapes, metrics_sampler_on), "vllm:num_preemptions_total")


# The point's steady-window gauges and bracketing-window counters, each key one function.
@point_quantity(unit="req")
def server_running_median(steady_running: list[float]) -> float:
    """Median of the running-requests gauge over the point's steady window."""
    return median_value(steady_running)


@point_quantity(unit="req")
def waiting_peak(steady_waiting: list[float]) -> float:
    """Peak of the waiting-requests gauge over the point's steady window."""
    return peak_value(steady_waiting)


@point_quantity(unit="fraction")
def waiting_share(steady_waiting: list[float]) -> float:
    """Share of the steady window's scrapes with a request waiting."""
    return share_positive(steady_waiting)


@point_quantity(unit="fraction")
def kv_usage_p50(steady_kv_usage: list[float]) -> float:
    """Median of the KV cache usage gauge over the point's steady window (the engines' mean at each scrape where there are several)."""
    return median_value(steady_kv_usage)


@point_quantity(unit="")
def preemptions(scrapes: list, bracket_start: float, bracket_end: float) -> float:
    """Preemptions the engine counted over the point's bracketing scrapes."""
    return counter_increase(scrapes, bracket_start, bracket_end, "vllm:num_preemptions_total")


@point_quantity(unit="tok")
def prefix_cache_hits(scrapes: list, bracket_start: float, bracket_end: float) -> float:
    """Prompt tokens served from the prefix cache over the point's bracketing scrapes."""
    return counter_increase(scrapes, bracket_start, bracket_end, "vllm:prefix_cache_hits_total")


@point_quantity(unit="tok")
def prompt_tokens_server(scrapes: list, bracket_start: float, bracket_end: float) -> float:
    """Prompt tokens the server counted over the point's bracketing scrapes."""
    return counter_increase(scrapes, bracket_start, bracket_end, "vllm:prompt_tokens_total")


@point_quantity(unit="tok")
def generation_tokens_server(scrapes: list, bracket_start: float, bracket_end: float) -> float:
    """Output tokens the server counted over the point's bracketing scrapes."""
    return counter_increase(scrapes, bracket_start, bracket_end, "vllm:generation_tokens_total")


# vLLM's MFU counters (--enable-mfu-metrics): estimated FLOPs and read bytes per GPU.
MFU_FLOPS = "vllm:estimated_flops_per_gpu_total"
MFU_READ_BYTES = "vllm:estimated_read_bytes_per_gpu_total"


def _mfu_counter_rate(scrapes: list, t_start: float, t_end: float, name: str) -> float:
    """Window rate of MFU counter NAME; Absent with the reason when the FLOPs counter did not move."""
    try:
        moved = counter_moved(scrapes, t_start, t_end, MFU_FLOPS)
    except Absent:
        moved = False
    if not moved:
        if len(scrapes_in_window(scrapes, t_start, t_end)) < 2:
            raise Absent("reason.too_few_scrapes_window")
        raise Absent("reason.mfu_counters_still")
    return counter_rate(scrapes, t_start, t_end, name)


@point_quantity(unit="TFLOP/s")
def tflops_s(scrapes: list, bracket_start: float, bracket_end: float) -> float:
    """Estimated FLOP rate from vLLM's MFU counter over the point's bracketing scrapes, in 10^12 per second."""
    return _mfu_counter_rate(scrapes, bracket_start, bracket_end, MFU_FLOPS) / 1e12


@point_quantity(unit="GB/s")
def read_gb_s(scrapes: list, bracket_start: float, bracket_end: float) -> float:
    """Estimated read-byte rate from vLLM's MFU counter over the point's bracketing scrapes, in 10^9 per second."""
    return _mfu_counter_rate(scrapes, bracket_start, bracket_end, MFU_READ_BYTES) / 1e9


# ---------------------------------------------------------------- the host's CPU (host.jsonl)
# The host's CPU over a window, from host.jsonl's cumulative counters: the engine, the client, all.
#
# Shares are of the host's cores (1.0: every core busy the whole window); the engine's is its
# process group's user + system time, so it counts every process the launcher started.


def _ends(host_samples: list, t_start: float, t_end: float, field: str) -> tuple[dict, dict]:
    rows = [s for s in host_samples if t_start <= s["t"] <= t_end and field in s]
    if len(rows) < 2:
        raise Absent("reason.no_host_samples")
    return rows[0], rows[-1]


def _cores_used(host_samples: list, t_start: float, t_end: float, field: str) -> tuple[float, int]:
    """(CPU seconds of FIELD per wall second over the window, the host's cores)."""
    a, b = _ends(host_samples, t_start, t_end, field)
    wall = b["t"] - a["t"]
    if wall <= 0:
        raise Absent("reason.window_empty")
    return (b[field] - a[field]) / wall, b["cores"]


@point_quantity(unit="fraction")
def engine_cpu_share(host_samples: list, t_measure: float, t_end: float) -> float:
    """CPU time of the engine's processes over the window's wall time × the host's cores, at most 1.

    /proc counts each process's CPU time in whole clock ticks, so over a window of a few
    seconds the sum over the engine's processes can pass the wall time by a tick or so each:
    a share past 1 is that rounding, and reads as every core busy.
    """
    used, cores = _cores_used(host_samples, t_measure, t_end, "engine_cpu_s")
    return min(1.0, used / cores)


@point_quantity(unit="")
def client_cpu_cores(host_samples: list, t_measure: float, t_end: float) -> float:
    """CPU time of the client process over the window's wall time (1.0: one core busy throughout)."""
    return _cores_used(host_samples, t_measure, t_end, "client_cpu_s")[0]


@point_quantity(unit="fraction")
def client_wait_share(host_samples: list, t_measure: float, t_end: float) -> float:
    """Share of the window the client's event loop was runnable but waiting for a core (its run-queue wait over wall time)."""
    return _cores_used(host_samples, t_measure, t_end, "client_wait_s")[0]


@point_quantity(unit="fraction")
def host_cpu_busy_share(host_samples: list, t_measure: float, t_end: float) -> float:
    """Share of the host's CPU time that was busy (not idle or waiting for I/O) over the window."""
    a, b = _ends(host_samples, t_measure, t_end, "cpu_busy_s")
    total = b["cpu_total_s"] - a["cpu_total_s"]
    if total <= 0:
        raise Absent("reason.window_empty")
    return (b["cpu_busy_s"] - a["cpu_busy_s"]) / total


@round_quantity(unit="")
def cpu_count(host: dict) -> int:
    """Logical CPU cores of the client host"""
    if host.get("cpu_count") is None:
        raise Absent("reason.not_recorded")
    return host["cpu_count"]
