"""Length distributions for prompts and outputs: a plan's `[workload.input_dist]` and
`[workload.output_dist]` tables, each drawn per request from the point's seeded generator.

Kinds (every length is a whole number of tokens, at least 1):
  fixed      the nominal length (the point's input_len or the workload's output_len); the default
  uniform    vLLM's `range_ratio` semantics: U[⌊L(1 − r)⌋, ⌈L(1 + r)⌉] around the nominal L, 0 ≤ r < 1
  normal     mean (default the nominal), sd, clamped to [min, max], rounded
  lognormal  mean and sd of the lengths themselves (not of their log), clamped to [min, max], rounded
  mixture    components = [{weight, kind, ...}, ...]: one component drawn by weight, then its length
Each request's drawn lengths are what the bundle records (its `input_len` and `max_tokens`).
"""

from __future__ import annotations

import math
import random
from typing import Any, Callable

from bench.prompts import MAX_TOKENS, PlanError

KINDS = ("fixed", "uniform", "normal", "lognormal", "mixture")
KEYS = {"fixed": set(), "uniform": {"range_ratio"}, "normal": {"mean", "sd", "min", "max"},
        "lognormal": {"mean", "sd", "min", "max"}, "mixture": {"components"}}

Sampler = Callable[[random.Random], int]


def _number(spec: dict, key: str, where: str, default: float | None = None) -> float:
    v = spec.get(key, default)
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        raise PlanError(f"{where}.{key}: expected a finite number, got {v!r}")
    return float(v)


def check_dist(spec: Any, where: str) -> None:
    """Refuse a distribution table no draw could honour, naming its key."""
    if not isinstance(spec, dict):
        raise PlanError(f"{where}: must be a table")
    kind = spec.get("kind", "fixed")
    if kind not in KINDS:
        raise PlanError(f"{where}.kind: {kind!r} is not one of {', '.join(KINDS)}")
    unknown = set(spec) - {"kind", "weight"} - KEYS[kind]
    if unknown:
        raise PlanError(f"{where}: unknown key(s) {sorted(unknown)} for kind {kind!r}; known: {sorted(KEYS[kind])}")
    if kind == "uniform" and not 0 <= _number(spec, "range_ratio", where, 0.0) < 1:
        raise PlanError(f"{where}.range_ratio: must be at least 0 and below 1, got {spec['range_ratio']!r}")
    if kind in ("normal", "lognormal"):
        # A length is 1 to MAX_TOKENS: a mean or sd outside that range draws nothing a request
        # can ask for, and a larger one overflows the draw (sd 1e308).
        for key in ("mean", "sd"):
            if key in spec or key == "sd":
                v = _number(spec, key, where)
                if not 0 < v <= MAX_TOKENS or (key == "mean" and v < 1):
                    raise PlanError(f"{where}.{key}: must be {'at least 1' if key == 'mean' else 'above 0'} "
                                    f"and at most {MAX_TOKENS:,} tokens, got {spec[key]!r}")
        if "max" not in spec:
            raise PlanError(f"{where}.max: a {kind} length needs a max (its tail would pass any context)")
        lo, hi = _number(spec, "min", where, 1), _number(spec, "max", where)
        if not 1 <= lo <= hi <= MAX_TOKENS:
            raise PlanError(f"{where}: min {lo:g} and max {hi:g} must satisfy 1 ≤ min ≤ max ≤ {MAX_TOKENS}")
    if kind == "mixture":
        parts = spec.get("components")
        if not isinstance(parts, list) or not parts:
            raise PlanError(f"{where}.components: a list of distribution tables, each with a weight")
        for i, part in enumerate(parts):
            check_dist(part, f"{where}.components[{i}]")
            if part.get("kind") == "mixture":
                raise PlanError(f"{where}.components[{i}]: a mixture of mixtures; list their components instead")
            if _number(part, "weight", f"{where}.components[{i}]") <= 0:
                raise PlanError(f"{where}.components[{i}].weight: must be above 0")
        # Drawing sums the weights: a sum past the float range draws nothing.
        if not math.isfinite(sum(float(p["weight"]) for p in parts)):
            raise PlanError(f"{where}.components: the weights sum past the float range; scale "
                            "them down (only their ratios count)")


def longest(spec: dict, nominal: int) -> int:
    """The longest length SPEC can draw (what must fit the served context)."""
    kind = spec.get("kind", "fixed")
    if kind == "fixed":
        return nominal
    if kind == "uniform":
        return max(1, math.ceil(nominal * (1 + float(spec.get("range_ratio", 0.0)))))
    if kind == "mixture":
        return max(longest(p, nominal) for p in spec["components"])
    return int(spec["max"])


def _clamped(x: float, spec: dict) -> int:
    lo, hi = int(spec.get("min", 1)), int(spec.get("max", MAX_TOKENS))
    return max(lo, min(hi, max(1, round(x))))


def length_sampler(spec: dict, nominal: int) -> Sampler:
    """Draws one length from SPEC (an empty table: always NOMINAL), given the point's generator."""
    kind = spec.get("kind", "fixed")
    if kind == "fixed":
        return lambda rng: nominal
    if kind == "uniform":
        r = float(spec.get("range_ratio", 0.0))
        lo, hi = max(1, math.floor(nominal * (1 - r))), max(1, math.ceil(nominal * (1 + r)))
        return lambda rng: rng.randint(lo, hi)
    mean, sd = float(spec.get("mean", nominal)), float(spec["sd"]) if "sd" in spec else 0.0
    if kind == "normal":
        return lambda rng: _clamped(rng.gauss(mean, sd), spec)
    if kind == "lognormal":
        sigma2 = math.log(1 + (sd / mean) ** 2)
        mu, sigma = math.log(mean) - sigma2 / 2, math.sqrt(sigma2)
        return lambda rng: _clamped(rng.lognormvariate(mu, sigma), spec)
    parts = [(float(p["weight"]), length_sampler(p, nominal)) for p in spec["components"]]
    weights = [w for w, _ in parts]

    def mixture(rng: random.Random) -> int:
        return rng.choices(parts, weights)[0][1](rng)
    return mixture
