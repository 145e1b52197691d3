"""Goodput, SLO attainment and the capacity answer: which requests and points meet the SLO
(bundle/slo.py), and the largest load that still does (docs/analyses.md item 22).

A request is good when it meets every per-request objective set (TTFT, TPOT, E2E); a failed
request is never good; a request one of whose objectives cannot be measured (no token; TPOT
of a one-token reply) is counted apart, in neither the good nor the judged requests. A
point's margin for an objective is 1 − (the objective's percentile at the point) / threshold:
positive where the point meets it. The capacity is where the margin, fitted non-increasing
in load over the valid points (pool-adjacent violators), crosses zero, interpolated in log
load between the two measured points that bracket the crossing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bundle.request_table.table import RequestTable
from bundle.slo import OBJECTIVES, REQUEST_OBJECTIVES, Slo
from report.derive.stats import samples as ST
from report.ledger import Absent
from report.registry import point_quantity, round_quantity

# How reasons name an objective (the catalogue's words name them the same in every language).
OBJECTIVE_NAMES = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "e2e_ms": "E2E", "itl_ms": "ITL"}


def _request_verdicts(measured: RequestTable, slo: Slo) -> tuple[np.ndarray, np.ndarray]:
    """(good, unmeasurable) masks over MEASURED for the SLO's per-request objectives."""
    objectives = {k: t for k, t in slo.objectives().items() if k in REQUEST_OBJECTIVES}
    if not objectives:
        raise Absent("reason.slo_no_request_objective")
    lat = ST.request_latencies_ms(measured)
    unmeasurable = np.zeros(len(measured), dtype=bool)
    good = np.ones(len(measured), dtype=bool)
    for k, threshold in objectives.items():
        unmeasurable |= np.isnan(lat[k])
        good &= lat[k] <= threshold          # NaN compares False
    return good & ~unmeasurable, unmeasurable


@round_quantity(unit="ms")
def slo_ttft_threshold_ms(slo: Slo) -> float:
    """The SLO's TTFT threshold."""
    return _threshold(slo, "ttft_ms")


@round_quantity(unit="ms")
def slo_tpot_threshold_ms(slo: Slo) -> float:
    """The SLO's TPOT threshold."""
    return _threshold(slo, "tpot_ms")


@round_quantity(unit="ms")
def slo_e2e_threshold_ms(slo: Slo) -> float:
    """The SLO's E2E threshold."""
    return _threshold(slo, "e2e_ms")


@round_quantity(unit="ms")
def slo_itl_threshold_ms(slo: Slo) -> float:
    """The SLO's ITL threshold."""
    return _threshold(slo, "itl_ms")


@round_quantity(unit="")
def slo_percentile(slo: Slo) -> float:
    """The percentile at which the SLO judges a point's objectives."""
    return int(slo.percentile) if float(slo.percentile).is_integer() else slo.percentile


def _threshold(slo: Slo, key: str) -> float:
    if getattr(slo, key) is None:
        raise Absent("reason.slo_objective_unset", objective=OBJECTIVE_NAMES[key])
    return getattr(slo, key)


@point_quantity(unit="req")
def slo_good_requests(measured: RequestTable, slo: Slo) -> int:
    """Measured requests that met every per-request objective of the SLO."""
    return int(np.count_nonzero(_request_verdicts(measured, slo)[0]))


@point_quantity(unit="req")
def slo_unmeasurable_requests(measured: RequestTable, slo: Slo) -> int:
    """Measured requests one of whose SLO objectives cannot be measured (counted apart)."""
    return int(np.count_nonzero(_request_verdicts(measured, slo)[1]))


@point_quantity(unit="req")
def slo_judged_requests(measured: RequestTable, failed: RequestTable, slo: Slo) -> int:
    """Requests the SLO judges: the measured ones whose objectives can be measured, and the failed."""
    return int(np.count_nonzero(~_request_verdicts(measured, slo)[1])) + len(failed)


@point_quantity(unit="fraction")
def slo_attainment(slo_good_requests: int, slo_judged_requests: int) -> float:
    """Share of the judged requests that met every per-request objective."""
    if slo_judged_requests <= 0:
        raise Absent("reason.slo_no_judged_request")
    return slo_good_requests / slo_judged_requests


def _good_in_window(measured: RequestTable, slo: Slo, t_measure: float, t_end: float) -> RequestTable:
    if t_end <= t_measure:
        raise Absent("reason.window_empty")
    end = measured.col("t_end")
    inside = (t_measure <= end) & (end <= t_end)
    return measured.take(np.flatnonzero(_request_verdicts(measured, slo)[0] & inside))


@point_quantity(unit="req/s")
def goodput_req_s(measured: RequestTable, slo: Slo, t_measure: float, t_end: float) -> float:
    """Request goodput: good requests completed inside the window, per second."""
    return len(_good_in_window(measured, slo, t_measure, t_end)) / (t_end - t_measure)


@point_quantity(unit="tok/s")
def goodput_tok_s(measured: RequestTable, slo: Slo, t_measure: float, t_end: float) -> float:
    """Token goodput: output tokens of the good requests completed inside the window, per second."""
    good = _good_in_window(measured, slo, t_measure, t_end)
    return float(np.nansum(ST.output_token_counts(good))) / (t_end - t_measure)


def _objective_ms(values: np.ndarray, slo: Slo, key: str) -> float:
    _threshold(slo, key)
    return ST.percentile(values[~np.isnan(values)], slo.percentile)


def _margin(value_ms: float, slo: Slo, key: str) -> float:
    return 1.0 - value_ms / getattr(slo, key)


@point_quantity(unit="ms")
def slo_ttft_ms(measured: RequestTable, slo: Slo) -> float:
    """TTFT at the SLO's percentile over the point's measured requests."""
    return _objective_ms(ST.request_latencies_ms(measured)["ttft_ms"], slo, "ttft_ms")


@point_quantity(unit="ms")
def slo_tpot_ms(measured: RequestTable, slo: Slo) -> float:
    """TPOT, (E2E − TTFT)/(tokens − 1), at the SLO's percentile over the point's measured requests."""
    return _objective_ms(ST.request_latencies_ms(measured)["tpot_ms"], slo, "tpot_ms")


@point_quantity(unit="ms")
def slo_e2e_ms(measured: RequestTable, slo: Slo) -> float:
    """E2E latency at the SLO's percentile over the point's measured requests."""
    return _objective_ms(ST.request_latencies_ms(measured)["e2e_ms"], slo, "e2e_ms")


@point_quantity(unit="ms")
def slo_itl_ms(measured: RequestTable, slo: Slo) -> float:
    """ITL at the SLO's percentile over every token gap of the point's measured requests."""
    return _objective_ms(ST.itl_gaps_ms(measured), slo, "itl_ms")


@point_quantity(unit="fraction")
def slo_margin_ttft(slo_ttft_ms: float, slo: Slo) -> float:
    """The TTFT objective's margin: 1 − measured / threshold (positive: met)."""
    return _margin(slo_ttft_ms, slo, "ttft_ms")


@point_quantity(unit="fraction")
def slo_margin_tpot(slo_tpot_ms: float, slo: Slo) -> float:
    """The TPOT objective's margin: 1 − measured / threshold (positive: met)."""
    return _margin(slo_tpot_ms, slo, "tpot_ms")


@point_quantity(unit="fraction")
def slo_margin_e2e(slo_e2e_ms: float, slo: Slo) -> float:
    """The E2E objective's margin: 1 − measured / threshold (positive: met)."""
    return _margin(slo_e2e_ms, slo, "e2e_ms")


@point_quantity(unit="fraction")
def slo_margin_itl(slo_itl_ms: float, slo: Slo) -> float:
    """The ITL objective's margin: 1 − measured / threshold (positive: met)."""
    return _margin(slo_itl_ms, slo, "itl_ms")


@point_quantity(unit="")
def slo_met(slo: Slo, slo_margin_ttft: float | None = None, slo_margin_tpot: float | None = None,
            slo_margin_e2e: float | None = None, slo_margin_itl: float | None = None) -> bool:
    """Whether the point meets every objective set, at the SLO's percentile."""
    margins = [m for m in (slo_margin_ttft, slo_margin_tpot, slo_margin_e2e, slo_margin_itl) if m is not None]
    if not margins:
        raise Absent("reason.slo_no_margin")
    return all(m >= 0 for m in margins)


def isotonic_non_increasing(ys: list[float]) -> list[float]:
    """The least-squares non-increasing fit of YS (pool-adjacent violators)."""
    blocks: list[list[float]] = []              # [mean, weight]
    for y in ys:
        blocks.append([y, 1.0])
        while len(blocks) > 1 and blocks[-2][0] < blocks[-1][0]:
            m2, w2 = blocks.pop()
            m1, w1 = blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2])
    return [m for m, w in blocks for _ in range(int(w))]


@dataclass(frozen=True)
class Crossing:
    """Where one objective's fitted margin crosses zero over the valid points."""

    objective: str
    capacity: float        # interpolated load (a whole concurrency, floored, where loads are whole)
    low: float             # the largest measured load whose fitted margin is ≥ 0
    high: float            # the smallest measured load whose fitted margin is < 0
    residual_max: float    # the largest |measured − fitted| margin


def objective_crossing(objective: str, margins: list[float | None], loads: list[float]) -> Crossing:
    """The crossing of one objective's margin curve, or Absent saying why there is none."""
    pairs = [(x, m) for x, m in zip(loads, margins) if m is not None]
    if len(pairs) < 2:
        raise Absent("reason.slo_too_few_points", objective=OBJECTIVE_NAMES[objective + "_ms"], n=len(pairs))
    xs, ms = [p[0] for p in pairs], [p[1] for p in pairs]
    fit = isotonic_non_increasing(ms)
    residual = max(abs(a - b) for a, b in zip(ms, fit))
    if fit[0] < 0:
        raise Absent("reason.slo_met_at_no_point", objective=OBJECTIVE_NAMES[objective + "_ms"], load=xs[0])
    if fit[-1] >= 0:
        raise Absent("reason.slo_met_at_every_point", objective=OBJECTIVE_NAMES[objective + "_ms"], load=xs[-1])
    i = max(j for j, m in enumerate(fit) if m >= 0)
    lo, hi, mlo, mhi = xs[i], xs[i + 1], fit[i], fit[i + 1]
    t = mlo / (mlo - mhi)
    cap = math.exp(math.log(lo) + t * (math.log(hi) - math.log(lo)))
    if all(float(x).is_integer() for x in xs):
        cap = int(max(lo, math.floor(cap)))      # a concurrency: the largest whole one inside
    return Crossing(objective, cap, lo, hi, residual)


def _crossings(margins: dict[str, list | None], loads: list[float]) -> list[Crossing]:
    """Every set objective's crossing, smallest capacity first; Absent if any objective has none."""
    set_ = {k: m for k, m in margins.items() if m is not None and any(x is not None for x in m)}
    if not set_:
        raise Absent("reason.slo_no_margin")
    out, beyond = [], None
    for k, m in set_.items():
        try:
            out.append(objective_crossing(k, m, loads))
        except Absent as e:
            if e.reason.code != "reason.slo_met_at_every_point":
                raise
            beyond = e
    if not out:
        raise beyond
    return sorted(out, key=lambda c: c.capacity)


def _binding(loads, each_slo_margin_ttft, each_slo_margin_tpot, each_slo_margin_e2e,
             each_slo_margin_itl) -> Crossing:
    margins = dict(zip((k.removesuffix("_ms") for k in OBJECTIVES),
                       (each_slo_margin_ttft, each_slo_margin_tpot, each_slo_margin_e2e, each_slo_margin_itl)))
    return _crossings(margins, loads)[0]


@round_quantity(unit="")
def slo_capacity(slo: Slo, loads: list[float], each_slo_margin_ttft: list | None = None,
                 each_slo_margin_tpot: list | None = None, each_slo_margin_e2e: list | None = None,
                 each_slo_margin_itl: list | None = None) -> float:
    """The largest load meeting every objective: the binding objective's fitted crossing."""
    return _binding(loads, each_slo_margin_ttft, each_slo_margin_tpot, each_slo_margin_e2e,
                    each_slo_margin_itl).capacity


@round_quantity(unit="")
def slo_capacity_low(slo: Slo, loads: list[float], each_slo_margin_ttft: list | None = None,
                     each_slo_margin_tpot: list | None = None, each_slo_margin_e2e: list | None = None,
                     each_slo_margin_itl: list | None = None) -> float:
    """The measured load below the capacity: the last whose fitted margins all hold."""
    return _binding(loads, each_slo_margin_ttft, each_slo_margin_tpot, each_slo_margin_e2e,
                    each_slo_margin_itl).low


@round_quantity(unit="")
def slo_capacity_high(slo: Slo, loads: list[float], each_slo_margin_ttft: list | None = None,
                      each_slo_margin_tpot: list | None = None, each_slo_margin_e2e: list | None = None,
                      each_slo_margin_itl: list | None = None) -> float:
    """The measured load above the capacity: the first where the binding objective's fit fails."""
    return _binding(loads, each_slo_margin_ttft, each_slo_margin_tpot, each_slo_margin_e2e,
                    each_slo_margin_itl).high


@round_quantity(unit="")
def slo_binding_objective(slo: Slo, loads: list[float], each_slo_margin_ttft: list | None = None,
                          each_slo_margin_tpot: list | None = None, each_slo_margin_e2e: list | None = None,
                          each_slo_margin_itl: list | None = None) -> str:
    """The objective whose margin reaches zero at the lowest load (it binds first)."""
    return _binding(loads, each_slo_margin_ttft, each_slo_margin_tpot, each_slo_margin_e2e,
                    each_slo_margin_itl).objective


@round_quantity(unit="fraction")
def slo_fit_residual_max(slo: Slo, loads: list[float], each_slo_margin_ttft: list | None = None,
                         each_slo_margin_tpot: list | None = None, each_slo_margin_e2e: list | None = None,
                         each_slo_margin_itl: list | None = None) -> float:
    """The binding objective's largest distance between measured and fitted margin."""
    return _binding(loads, each_slo_margin_ttft, each_slo_margin_tpot, each_slo_margin_e2e,
                    each_slo_margin_itl).residual_max


def _per_objective(objective: str, loads, margins) -> Crossing:
    if margins is None or all(m is None for m in margins):
        raise Absent("reason.slo_objective_unset", objective=OBJECTIVE_NAMES[objective + "_ms"])
    return objective_crossing(objective, margins, loads)


@round_quantity(unit="")
def slo_capacity_ttft(slo: Slo, loads: list[float], each_slo_margin_ttft: list | None = None) -> float:
    """The largest load meeting the TTFT objective (its fitted crossing)."""
    return _per_objective("ttft", loads, each_slo_margin_ttft).capacity


@round_quantity(unit="")
def slo_capacity_tpot(slo: Slo, loads: list[float], each_slo_margin_tpot: list | None = None) -> float:
    """The largest load meeting the TPOT objective (its fitted crossing)."""
    return _per_objective("tpot", loads, each_slo_margin_tpot).capacity


@round_quantity(unit="")
def slo_capacity_e2e(slo: Slo, loads: list[float], each_slo_margin_e2e: list | None = None) -> float:
    """The largest load meeting the E2E objective (its fitted crossing)."""
    return _per_objective("e2e", loads, each_slo_margin_e2e).capacity


@round_quantity(unit="")
def slo_capacity_itl(slo: Slo, loads: list[float], each_slo_margin_itl: list | None = None) -> float:
    """The largest load meeting the ITL objective (its fitted crossing)."""
    return _per_objective("itl", loads, each_slo_margin_itl).capacity


@round_quantity(unit="")
def slo_best_load(slo: Slo, loads: list[float], each_slo_met: list, each_output_tok_s: list) -> float:
    """The measured load with the highest output throughput among the valid points meeting the SLO."""
    ok = [(t, x) for x, met, t in zip(loads, each_slo_met, each_output_tok_s) if met and t is not None]
    if not ok:
        raise Absent("reason.slo_no_point_meets")
    return max(ok)[1]
