"""Prometheus exposition text -> flat {sample key: value} dicts, as stored in metrics.jsonl.

A sample key is the exposition sample name plus its labels sorted by label name, written in
Prometheus text form: `vllm:kv_cache_usage_perc{engine="0",model_name="tiny"}`; a sample
without labels is just its name. Only samples whose name starts with the prefix are kept,
and `*_created` samples are dropped (they are creation timestamps, not measurements).

Speed: this runs every 0.1-1 s while a benchmark runs, and prometheus_client's parser costs
about 15 us per labelled line (~8 ms for a 50 KB vLLM page). Between scrapes only the values
change, so the series part of each line (everything before the value) is parsed once by
`text_string_to_metric_families` and its sample key cached; later scrapes only split the
line and call float(). tests/unit/bench/test_exposition.py checks that the result equals a plain
whole-text parse on real vLLM pages.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from bundle.metric_keys import sample_key, split_key

__all__ = ["parse_exposition", "parse_exposition_uncached", "sample_key", "split_key"]

# series text (line up to the value) -> (sample name, sample key); bounded so label churn
# (e.g. a LoRA info gauge) cannot grow it without limit.
_SERIES_CACHE: dict[str, tuple[str, str]] = {}
_SERIES_CACHE_MAX = 50_000


def _parse_series(series: str) -> tuple[str, str]:
    """(sample name, sample key) of one series text, parsed by prometheus_client."""
    try:
        samples = [s for fam in text_string_to_metric_families(series + " 0\n")
                   for s in fam.samples]
    except ValueError as e:
        raise ValueError(f"malformed exposition line {series[:120]!r}: {e}") from None
    if len(samples) != 1:
        raise ValueError(f"malformed exposition line {series[:120]!r}")
    s = samples[0]
    return s.name, sample_key(s.name, s.labels)


def _parse_number(text: str, line: str) -> float:
    # float() also accepts "1_000" and surrounding space; the exposition format does not.
    if "_" in text:
        raise ValueError(f"malformed value in exposition line {line[:120]!r}")
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"malformed value in exposition line {line[:120]!r}") from None


def parse_exposition(text: str, prefix: str = "vllm:") -> dict[str, float]:
    """Every sample whose name starts with PREFIX, keyed by sample key; ValueError on malformed text."""
    out: dict[str, float] = {}
    n_samples = 0
    cache = _SERIES_CACHE
    for raw in text.split("\n"):
        line = raw.strip()
        if not line or line[0] == "#":
            continue
        # The series part ends at the last "}" when there are labels (a label value may hold
        # spaces or braces, the value and timestamp cannot); otherwise at the first blank.
        brace = line.rfind("}")
        if brace >= 0:
            series, rest = line[:brace + 1], line[brace + 1:].split()
        else:
            series, *rest = line.split()
        if not 1 <= len(rest) <= 2:
            raise ValueError(f"malformed exposition line {line[:120]!r}: expected a value "
                             "and an optional timestamp")
        value = _parse_number(rest[0], line)
        if len(rest) == 2:
            _parse_number(rest[1], line)
        hit = cache.get(series)
        if hit is None:
            hit = _parse_series(series)
            if len(cache) >= _SERIES_CACHE_MAX:
                cache.clear()
            cache[series] = hit
        n_samples += 1
        name, key = hit
        if not name.startswith(prefix) or name.endswith("_created"):
            continue
        if key in out:
            raise ValueError(f"duplicate sample {key!r} in exposition text")
        out[key] = value
    if n_samples == 0:
        raise ValueError("no samples in exposition text (empty or comments only)")
    return out


def parse_exposition_uncached(text: str, prefix: str = "vllm:") -> dict[str, float]:
    """The same dict as parse_exposition, by one plain prometheus_client parse of the whole text."""
    # Differs only for a counter whose samples lack `_total`: prometheus_client renames those.
    out: dict[str, float] = {}
    n_samples = 0
    try:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                n_samples += 1
                if not s.name.startswith(prefix) or s.name.endswith("_created"):
                    continue
                key = sample_key(s.name, s.labels)
                if key in out:
                    raise ValueError(f"duplicate sample {key!r} in exposition text")
                out[key] = float(s.value)
    except ValueError as e:
        raise ValueError(f"malformed exposition text: {e}") from None
    if n_samples == 0:
        raise ValueError("no samples in exposition text (empty or comments only)")
    return out
