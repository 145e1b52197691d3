"""Sample keys of metrics.jsonl: a sample's name and its labels, sorted by label name, in
Prometheus text form (`vllm:kv_cache_usage_perc{engine="0",model_name="tiny"}`); a sample
without labels is just its name."""

from __future__ import annotations

import re

# The label a round against several endpoints adds to every sample of a scrape: the endpoint's
# index in plan.engine.endpoints ("0", "1", ...). vLLM's own `engine` label (its data-parallel
# ranks behind one endpoint) is kept as it is, so an engine is an (endpoint, engine) pair.
ENDPOINT_LABEL = "endpoint"


def _escape(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def sample_key(name: str, labels: dict[str, str]) -> str:
    """The sample key: NAME{label="value",...} with labels sorted by name (just NAME without labels)."""
    if not labels:
        return name
    inner = ",".join(f'{k}="{_escape(labels[k])}"' for k in sorted(labels))
    return f"{name}{{{inner}}}"


_KEY_RE = re.compile(r"([^{}]+)(?:\{(.*)\})?", re.S)
_LABEL_RE = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)', re.S)
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def split_key(key: str) -> tuple[str, dict[str, str]]:
    """The (sample name, labels) a sample key was built from; ValueError if KEY is not one."""
    m = _KEY_RE.fullmatch(key)
    if m is None:
        raise ValueError(f"not a sample key: {key!r}")
    name, inner = m.group(1), m.group(2)
    labels: dict[str, str] = {}
    if inner:
        pos = 0
        while pos < len(inner):
            lm = _LABEL_RE.match(inner, pos)
            if lm is None or (lm.group(3) == "," and lm.end() == len(inner)):
                raise ValueError(f"not a sample key: {key!r}")
            value = lm.group(2)
            if "\\" in value:
                value = re.sub(r"\\.", lambda e: _UNESCAPE.get(e.group(0), e.group(0)), value)
            labels[lm.group(1)] = value
            pos = lm.end()
    return name, labels
