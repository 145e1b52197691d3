"""GPU spec table: datasheet peaks, bandwidth, power limit and memory, kept as data.

The table lives in `report/data/gpus.toml`. `lookup_gpu` matches an NVML device name (or an
alias) case-insensitively and returns None for a GPU it does not know; callers then say
"unknown" in words rather than guess a peak.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from report.ledger import Absent, Reason

DTYPES = ("bf16", "fp16", "fp8")

_DTYPE_ALIASES = {
    "bf16": "bf16", "bfloat16": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16",
    "fp8": "fp8", "float8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
}

_ROW_KEYS = {"name", "aliases", "memory_gb", "memory_bandwidth_gbs", "power_limit_w", "source",
             "peak_clock_mhz",
             *(f"{d}_tflops" for d in DTYPES)}


@dataclass(frozen=True)
class GpuSpec:
    """One GPU's datasheet figures, in base units (FLOP/s, B/s, W, bytes)."""

    key: str
    name: str
    aliases: tuple[str, ...]
    memory_bytes: float | None               # None when the row does not say
    memory_bandwidth: float                  # B/s
    power_limit_w: float | None              # None when the row does not say
    dense_flops: Mapping[str, float] = field(default_factory=dict)   # dtype -> FLOP/s
    sparse_flops: Mapping[str, float] = field(default_factory=dict)  # dtype -> FLOP/s (2:4)
    source: str = ""
    # The SM clock the tensor peaks are specified at (SMs × tensor FLOP per clock × this
    # clock); None where the datasheet's arithmetic is not known.
    peak_clock_mhz: float | None = None

    def peak_flops(self, dtype: str = "bf16", sparse: bool = False) -> float:
        """Tensor-core peak FLOP/s for a dtype, dense unless sparse=True (2:4 structured sparsity)."""
        d = normalize_dtype(dtype)
        table = self.sparse_flops if sparse else self.dense_flops
        if d not in table:
            kind = Reason.of("reason.peak_sparse" if sparse else "reason.peak_dense")
            raise Absent("reason.no_tensor_peak", gpu=self.name, kind=kind, d=d)
        return table[d]

    def peak_label(self, dtype: str = "bf16", sparse: bool = False) -> str:
        """Words naming which peak was used, e.g. "dense bf16 tensor peak"."""
        return f"{'2:4-sparse' if sparse else 'dense'} {normalize_dtype(dtype)} tensor peak"


def normalize_dtype(dtype: str) -> str:
    """The table's dtype key for a dtype name (bfloat16 → bf16, float16 → fp16, fp8_e4m3 → fp8)."""
    key = str(dtype).lower().removeprefix("torch.")
    if key in _DTYPE_ALIASES:
        return _DTYPE_ALIASES[key]
    if key.startswith(("fp8", "float8")):
        return "fp8"
    return key


def normalize_name(name: str) -> str:
    """A device name reduced for matching: lower case, no leading "nvidia", single spaces."""
    s = re.sub(r"[\s_\-]+", " ", str(name).strip().lower())
    return s.removeprefix("nvidia ").strip()


def _row_to_spec(key: str, row: Mapping[str, Any]) -> GpuSpec:
    """A GpuSpec from one table row; ValueError naming the row and field when it is malformed."""
    unknown = set(row) - _ROW_KEYS
    if unknown:
        raise ValueError(f"GPU table row {key!r}: unknown field(s) {sorted(unknown)}")
    for f in ("name", "memory_bandwidth_gbs"):
        if f not in row:
            raise ValueError(f"GPU table row {key!r}: missing {f}")
    dense: dict[str, float] = {}
    sparse: dict[str, float] = {}
    for d in DTYPES:
        peaks = row.get(f"{d}_tflops")
        if peaks is None:
            continue
        if not isinstance(peaks, Mapping) or set(peaks) - {"dense", "sparse"}:
            raise ValueError(f"GPU table row {key!r}: {d}_tflops must be {{dense = .., sparse = ..}}")
        if "dense" in peaks:
            dense[d] = float(peaks["dense"]) * 1e12
        if "sparse" in peaks:
            sparse[d] = float(peaks["sparse"]) * 1e12
    return GpuSpec(
        key=key, name=str(row["name"]), aliases=tuple(str(a) for a in row.get("aliases", ())),
        memory_bytes=float(row["memory_gb"]) * 1e9 if "memory_gb" in row else None,
        memory_bandwidth=float(row["memory_bandwidth_gbs"]) * 1e9,
        power_limit_w=float(row["power_limit_w"]) if "power_limit_w" in row else None,
        dense_flops=dense, sparse_flops=sparse, source=str(row.get("source", "")),
        peak_clock_mhz=float(row["peak_clock_mhz"]) if "peak_clock_mhz" in row else None,
    )


def load_table_rows(overrides: Mapping[str, Mapping[str, Any]] | str | Path | None = None) -> dict[str, dict[str, Any]]:
    """The packaged table's rows keyed by row key, with OVERRIDES (rows or a TOML file of rows) merged over them."""
    text = resources.files("report").joinpath("data/gpus.toml").read_text(encoding="utf-8")
    rows = {k: dict(v) for k, v in tomllib.loads(text)["gpu"].items()}
    if overrides is None:
        return rows
    if isinstance(overrides, (str, Path)):
        with open(overrides, "rb") as f:
            data = tomllib.load(f)
        overrides = data.get("gpu", data)
    for k, v in overrides.items():
        rows[k] = {**rows.get(k, {}), **dict(v)}
    return rows


def load_gpu_table(overrides: Mapping[str, Mapping[str, Any]] | str | Path | None = None) -> list[GpuSpec]:
    """Every GPU in the table as a GpuSpec (overrides first in matching order)."""
    rows = load_table_rows(overrides)
    first = list(overrides) if isinstance(overrides, Mapping) else []
    order = first + [k for k in rows if k not in first]
    return [_row_to_spec(k, rows[k]) for k in order]


def lookup_gpu(name: str, overrides: Mapping[str, Mapping[str, Any]] | str | Path | None = None) -> GpuSpec | None:
    """The spec whose NVML name, alias or row key matches NAME (case-insensitive), or None when unknown."""
    if not name or not str(name).strip():
        return None
    want = normalize_name(name)
    for spec in load_gpu_table(overrides):
        names = (spec.name, spec.key, *spec.aliases)
        if any(normalize_name(n) == want for n in names):
            return spec
    return None


def known_gpu_names() -> list[str]:
    """The NVML names the table knows, in table order."""
    return [s.name for s in load_gpu_table()]
