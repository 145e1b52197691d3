"""An NVIDIA DCGM exporter's page (dcgm.jsonl, a remote server's GPUs) read as GPU rows."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from bundle.metric_keys import split_key
from bundle.plausible import (
    DCGM_FIELDS,
    Maxima,
    dcgm_blank,
    dcgm_value_problem,
    described_maxima,
    device_maxima,
    field_problem,
    page_maxima,
)
from report.architecture.gpus import lookup_gpu
from report.derive.gpu.power import Samples

# An NVIDIA DCGM exporter's page (dcgm.jsonl, a remote server's GPUs) is read as NVML's GPU
# rows (power.py) through bundle/plausible.py's DCGM_FIELDS (each exporter name's row field and scale).


@lru_cache(maxsize=64)
def _table_maxima(name: str) -> Maxima:
    """The highest power a GPU named NAME may draw, from its rated power in the GPU table
    (report/data/gpus.toml); nothing when the table lacks it."""
    spec = lookup_gpu(name) if name else None
    return device_maxima(spec.power_limit_w if spec else None,
                         power_source="its rated power in the GPU table")


def _gpu_maxima(gpu: dict | None) -> Maxima:
    """The highest power and clocks the samples of a GPU the manifest describes (NVML's figures)
    may take, the GPU table's rated power where NVML stated no power limit."""
    if not isinstance(gpu, dict):
        return {}
    name = gpu.get("name")
    return {**_table_maxima(name if isinstance(name, str) else ""), **described_maxima(gpu)}


def plausible_gpu_rows(rows: Samples, gpus: Any) -> list[dict]:
    """gpu.jsonl's rows with a power or a clock above its GPU's maximum (`_gpu_maxima`, of the
    manifest's `gpus`) left out: a bundle recorded before the collector withheld them holds such
    values as numbers. A row with none is the row as read."""
    by_index = {g["index"]: _gpu_maxima(g) for g in gpus or () if isinstance(g, dict)
                and isinstance(g.get("index"), int)}
    out = []
    for row in rows:
        maxima = by_index.get(row.get("gpu", 0))
        bad = maxima and [f for f in maxima if isinstance(row.get(f), (int, float))
                          and field_problem(f, row[f], maxima)]
        out.append({**row, **dict.fromkeys(bad, None)} if bad else row)
    return out


def dcgm_gpu_rows(scrapes: Samples) -> list[dict]:
    """The exporter's scrapes as GPU rows, one per GPU (its `gpu` label) and answered scrape: the
    fields DCGM_FIELDS maps, a blank or a value out of its range or above its GPU's maximum (the
    page's own limits, else the GPU table's rated power for its `modelName`) left out; the
    profiling counters cover the interval since the previous answered scrape (DCGM averages them
    over its own sampling period within it)."""
    rows, last_t = [], None
    keys: dict[str, tuple[str, dict]] = {}     # each sample key parsed once: they repeat every scrape
    for s in scrapes:
        if not s.get("ok"):
            continue
        by_gpu: dict[int, dict] = {}
        stated = page_maxima(s.get("samples") or {})
        # read_s: the page was written at some moment within [t, t + read_s] (the scrape's dt).
        read = {"read_s": s["dt"]} if s.get("dt") is not None else {}
        for key, value in (s.get("samples") or {}).items():
            name, labels = keys.get(key) or keys.setdefault(key, split_key(key))
            if name not in DCGM_FIELDS or "gpu" not in labels or value is None:
                continue
            maxima = {**_table_maxima(labels.get("modelName", "")),
                      **stated.get((labels.get("endpoint", ""), labels["gpu"]), {})}
            if dcgm_blank(name, value) or dcgm_value_problem(name, value, maxima):
                continue    # no reading, or none the GPU can give (kept out by later collectors)
            field_name, scale = DCGM_FIELDS[name]
            row = by_gpu.setdefault(int(labels["gpu"]), {"t": s["t"], "gpu": int(labels["gpu"]), **read})
            row[field_name] = value * scale
        for row in by_gpu.values():
            if last_t is not None:
                row["gpm_interval_s"] = s["t"] - last_t
        rows += [by_gpu[g] for g in sorted(by_gpu)]
        last_t = s["t"]
    return rows


def dcgm_gpus(scrapes: Samples) -> list[dict]:
    """The GPUs an exporter's page describes: index, name (`modelName`) and UUID, in index order."""
    found: dict[int, dict] = {}
    for s in scrapes:
        for key in (s.get("samples") or {}) if s.get("ok") else ():
            name, labels = split_key(key)
            if name.startswith("DCGM_FI_") and "gpu" in labels:
                found.setdefault(int(labels["gpu"]), {"index": int(labels["gpu"]),
                                                      "name": labels.get("modelName", ""),
                                                      "uuid": labels.get("UUID", ""),
                                                      "source": "dcgm-exporter"})
        if found:
            break
    return [found[g] for g in sorted(found)]
