"""What serving costs: a price per GPU-hour and the load a deployment must carry.

It is a plan's `[cost]` table (travelling in the manifest as `plan.cost`), a `[cost]` table in
a round's slo.toml beside its `[slo]`, or `--gpu-hour-price`, `--target-rps` and
`--target-tok-s` on the report's command line (each flag overrides that key of the round's
own). Keys, each optional:
  gpu_hour_price  the price of one GPU for one hour, in US dollars
  target_req_s    the requests per second a deployment must serve
  target_tok_s    the output tokens per second a deployment must serve
The report prices each point's tokens and the SLO capacity's, and counts the replicas a target
needs (docs/analyses.md item 29); without a price it prints no cost, never a cost of 0.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from bundle.slo import MAX_SLO_BYTES, SloError
from bundle.textfile import read_toml_file

KEYS = ("gpu_hour_price", "target_req_s", "target_tok_s")


class CostError(SloError):
    """A [cost] table or flag that does not state a price or a target (read where an SLO is)."""


@dataclass(frozen=True)
class Cost:
    """A price per GPU-hour (USD) and a target load, each None where not given."""

    gpu_hour_price: float | None = None
    target_req_s: float | None = None
    target_tok_s: float | None = None

    def to_dict(self) -> dict[str, float]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    def over(self, base: "Cost | None") -> "Cost":
        """This cost's keys given, BASE's for the others."""
        return replace(base or Cost(), **self.to_dict())


def cost_from_dict(data: Any, source: str) -> Cost:
    """A [cost] table, checked: known keys, each a finite number above 0."""
    if not isinstance(data, dict):
        raise CostError(f"{source}: [cost] must be a table")
    unknown = set(data) - set(KEYS)
    if unknown:
        raise CostError(f"{source} [cost]: unknown key(s) {sorted(unknown)}; known: {sorted(KEYS)}")
    for key, value in data.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            raise CostError(f"{source} [cost].{key}: expected a finite number, got {value!r}")
        if value <= 0:
            raise CostError(f"{source} [cost].{key}: must be above 0, got {value!r}")
    return Cost(**{k: float(v) for k, v in data.items()})


def cost_of_file(path: Path) -> Cost | None:
    """The [cost] table of a round's slo.toml, None where it has none (read as slo_of_file reads it)."""
    data = read_toml_file(path, str(path), MAX_SLO_BYTES, CostError)
    return cost_from_dict(data["cost"], str(path)) if "cost" in data else None
