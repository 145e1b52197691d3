"""A service-level objective: latency thresholds a request or a point must meet.

It is a plan's `[slo]` table (travelling in the manifest as `plan.slo`), a round's
`slo.toml` beside its bundle, or `--slo ttft:500,tpot:50,p:99` on the command line. The
collector checks it with the plan and, in a search sweep, asks it of each probe; the report
derives attainment, goodput and the capacity answer from it.

Objectives, each optional, in ms:
  ttft_ms  time to first token of a request
  tpot_ms  time per output token after the first: (E2E − TTFT) / (output tokens − 1)
  e2e_ms   end-to-end latency of a request
  itl_ms   inter-token latency: a point's percentile over all token gaps (a request's own
           gaps are TPOT's business; ITL has no per-request reading)
A point meets an objective when the objective's `percentile` over its measured requests (or
gaps) is within the threshold.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bundle.textfile import read_text_file, read_toml_file

# Objective keys in the order the report lists them; the per-request ones first.
REQUEST_OBJECTIVES = ("ttft_ms", "tpot_ms", "e2e_ms")
OBJECTIVES = REQUEST_OBJECTIVES + ("itl_ms",)
# Short names accepted by --slo (vLLM's --goodput spells E2E "e2el").
SHORT = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2e": "e2e_ms", "e2el": "e2e_ms", "itl": "itl_ms",
         "p": "percentile", "percentile": "percentile"}
DEFAULT_PERCENTILE = 99.0


class SloError(ValueError):
    """An SLO table or text that does not state valid objectives."""


@dataclass(frozen=True)
class Slo:
    """Thresholds in ms (None: no such objective) and the percentile a point is judged at."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    itl_ms: float | None = None
    percentile: float = DEFAULT_PERCENTILE

    def objectives(self) -> dict[str, float]:
        """The objectives set, in OBJECTIVES order: key -> threshold in ms."""
        return {k: getattr(self, k) for k in OBJECTIVES if getattr(self, k) is not None}

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def slo_from_dict(data: Any, source: str) -> Slo:
    """An [slo] table, checked: positive finite thresholds, a percentile in (0, 100], one objective at least."""
    if not isinstance(data, dict):
        raise SloError(f"{source}: [slo] must be a table")
    known = set(OBJECTIVES) | {"percentile"}
    unknown = set(data) - known
    if unknown:
        raise SloError(f"{source} [slo]: unknown key(s) {sorted(unknown)}; known: {sorted(known)}")
    for key, value in data.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            raise SloError(f"{source} [slo].{key}: expected a finite number, got {value!r}")
        if value <= 0:
            raise SloError(f"{source} [slo].{key}: must be above 0, got {value!r}")
    if not any(k in data for k in OBJECTIVES):
        raise SloError(f"{source} [slo]: no objective; give one of {list(OBJECTIVES)}")
    if data.get("percentile", DEFAULT_PERCENTILE) > 100:
        raise SloError(f"{source} [slo].percentile: must be at most 100, got {data['percentile']!r}")
    return Slo(**{k: float(v) for k, v in data.items()})


def slo_from_text(text: str, source: str = "--slo") -> Slo:
    """`ttft:500,tpot:50,p:99` (vLLM's --goodput spelling, commas or spaces between)."""
    table: dict[str, float] = {}
    for part in text.replace(",", " ").split():
        name, sep, value = part.partition(":")
        if not sep or name.lower() not in SHORT:
            raise SloError(f"{source}: {part!r} is not NAME:MS with NAME one of {sorted(SHORT)}")
        try:
            table[SHORT[name.lower()]] = float(value)
        except ValueError:
            raise SloError(f"{source}: {part!r}: {value!r} is not a number") from None
    return slo_from_dict(table, source)


# A round's slo.toml states a handful of thresholds; anything larger is not one.
MAX_SLO_BYTES = 64 << 10


def slo_file_text(path: Path) -> str:
    """The text of a round's slo.toml, read as slo_of_file reads it (SloError otherwise)."""
    return read_text_file(path, str(path), MAX_SLO_BYTES, SloError)


def slo_of_file(path: Path) -> Slo:
    """The [slo] table of a TOML file (a plan or a round's slo.toml), read as every file a user
    names is (bundle/textfile.py: a regular file, bounded, UTF-8, nested boundedly)."""
    data = read_toml_file(path, str(path), MAX_SLO_BYTES, SloError)
    if "slo" not in data:
        raise SloError(f"{path}: no [slo] table")
    return slo_from_dict(data["slo"], str(path))
