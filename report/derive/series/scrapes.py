"""Reading the raw /metrics scrape list of a bundle (the records of metrics.jsonl): samples, windows, counters, histograms, gauges.

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

from bundle.metric_keys import split_key
from report.ledger import Absent, Reason

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
def key_labels(key: str) -> dict[str, str]:
    """The labels of a sample KEY, by name."""
    # Shared cached dict: read it, never mutate it.
    return split_key(key)[1]


def _matches(key: str, where: Where) -> bool:
    if not where:
        return True
    labels = key_labels(key)
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


def selector(name: str, where: Where):
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

def in_window(rec: Scrape, t_start: float | None, t_end: float | None) -> bool:
    """Whether a scrape's `t` lies in [t_start, t_end] (an open end: no bound)."""
    t = rec["t"]
    return (t_start is None or t >= t_start) and (t_end is None or t <= t_end)


def check_window(t_start: float | None, t_end: float | None) -> None:
    """Absent where the window does not run forward."""
    # An empty window is data, not a bug: an interrupted point, a round with one scrape.
    if t_start is not None and t_end is not None and not t_end > t_start:
        raise Absent("reason.window_not_forward", window=window_text(t_start, t_end))


def window_text(t_start: float | None, t_end: float | None) -> Reason:
    """The window in words, as a reason's parameter."""
    if t_start is None and t_end is None:
        return Reason.of("reason.window_whole_run")
    lo = Reason.of("reason.window_start") if t_start is None else f"{t_start:.3f} s"
    hi = Reason.of("reason.window_end") if t_end is None else f"{t_end:.3f} s"
    return Reason.of("reason.window_span", lo=lo, hi=hi)


def scrapes_in_window(scrapes: Sequence[Scrape], t_start: float | None = None,
                      t_end: float | None = None) -> list[Scrape]:
    """The successful scrapes whose start time lies in [t_start, t_end], in time order."""
    check_window(t_start, t_end)
    ok = [s for s in scrapes if s.get("ok") and "samples" in s and in_window(s, t_start, t_end)]
    return sorted(ok, key=lambda s: s["t"])


def scrape_gaps(scrapes: Sequence[Scrape], t_start: float | None = None,
                t_end: float | None = None) -> list[tuple[float, str]]:
    """The failed scrapes (gaps) in [t_start, t_end] as (t, error text), in time order."""
    check_window(t_start, t_end)
    gaps = [(s["t"], str(s.get("error", "no error text recorded")))
            for s in scrapes if not s.get("ok") and in_window(s, t_start, t_end)]
    return sorted(gaps, key=lambda g: g[0])


def steady_window(t_start: float, t_end: float, middle_fraction: float = 0.6) -> tuple[float, float]:
    """The steady-state part of a window: its middle MIDDLE_FRACTION, trimming both ends equally."""
    check_window(t_start, t_end)
    if not 0 < middle_fraction <= 1:
        raise ValueError(f"middle_fraction must be in (0, 1], not {middle_fraction}")
    trim = (t_end - t_start) * (1 - middle_fraction) / 2
    return (t_start + trim, t_end - trim)


# ---------------------------------------------------------------- counters

def _series(ok: Sequence[Scrape], name: str, where: Where) -> dict[str, list[tuple[float, float]]]:
    """Per label set (the key without its name), the (t, value) observations of NAME."""
    out: dict[str, list[tuple[float, float]]] = {}
    select = selector(name, where)
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
    sample, window = _describe(name, where), window_text(t_start, t_end)
    if len(ok) < 2:
        n_gaps = len(scrape_gaps(scrapes, t_start, t_end))
        if n_gaps:
            raise Absent("reason.increase_too_few_scrapes_failed", sample=sample, window=window,
                         n=len(ok), failed=n_gaps)
        raise Absent("reason.increase_too_few_scrapes", sample=sample, window=window, n=len(ok))
    series = _series(ok, name, where)
    if not series:
        raise Absent("reason.no_sample_in_window",
                     sample=_describe(name, where), window=window_text(t_start, t_end))
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
            le = key_labels(name + ident).get("le")  # ident is the label part "{...}"
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
    select = selector(name, where)
    for s in scrapes_in_window(scrapes, t_start, t_end):
        keys = select(s["samples"])
        if keys:
            out.append((s["t"], _combine([s["samples"][k] for k in keys], agg)))
    if not out:
        raise Absent("reason.no_sample_in_ok_scrape",
                     sample=_describe(name, where), window=window_text(t_start, t_end))
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
