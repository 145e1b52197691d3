"""A round's ledger with its verdicts: each point's quantities, then its validity and
bottleneck, then the quantities over the valid points only (fits never see an invalid point),
then each point against the SLO and the capacity answer (report/judge/goodput.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from bundle.store import read_bundle
from report.derive.load import admission
from report.derive.reconcile import model as reconcile
from report.derive.round_ledger import (
    RoundData,
    load_of,
    measured_ledger,
    point_raw,
    read_round,
    round_raw,
    valid_points,
    valid_points_ledger,
)
from report.judge import cost, diagnosis, goodput
from report.judge.diagnosis import Attribution, Validity, point_bottleneck, point_validity
from report.judge.sets import SetComparison, set_comparisons
from report.ledger import Ledger
from report.registry import RawSources, resolve_point, resolve_round


@dataclass(frozen=True)
class Verdicts:
    """What the judge found of a round: each point's validity and bottleneck, the set comparisons."""

    validity: Mapping[str, Validity]          # by point id, every point of the round
    attribution: Mapping[str, Attribution]    # by point id, every point of the round
    set_comparisons: tuple[SetComparison, ...]


def build_ledger(rd: RoundData) -> Ledger:
    """Every number of one round; its Verdicts in `rd.verdicts`, built once at the end."""
    if rd.verdicts is not None:
        raise ValueError(f"{rd.name}: the round's ledger is built once")
    led = measured_ledger(rd)
    validity = MappingProxyType({p.pid: point_validity(led, p.pid, p.window.status) for p in rd.points})
    for pid, v in validity.items():
        raw = RawSources()
        raw.add("failed_checks", tuple(v.reasons), tuple(v.evidence))
        resolve_point(led, diagnosis.__name__, pid, raw)
    attribution = MappingProxyType({p.pid: point_bottleneck(led, p.pid) for p in rd.points})
    valid_points_ledger(led, rd, validity)
    # The admission queue (it reads the prefill step the valid points measured), each point
    # against the SLO, then the capacity answer over the valid points.
    for p in rd.points:
        raw = point_raw(rd, p)
        resolve_point(led, admission.__name__, p.pid, raw, after_valid_points=True)
        resolve_point(led, goodput.__name__, p.pid, raw)
        resolve_point(led, cost.__name__, p.pid, raw)
    pts = sorted(valid_points(rd, validity), key=lambda p: load_of(p) or 0)
    resolve_round(led, goodput.__name__, [p.pid for p in pts], round_raw(rd, pts))
    # What the capacity answer costs: its throughput, energy and price, the replicas a target needs.
    resolve_round(led, cost.__name__, [p.pid for p in pts], round_raw(rd, pts))
    resolve_round(led, reconcile.__name__, [p.pid for p in pts], round_raw(rd, pts))
    # A round of server sets: each set against the base set, on its question's two signals.
    rd.verdicts = Verdicts(validity=validity, attribution=attribution,
                           set_comparisons=tuple(set_comparisons(led, rd, validity)))
    return led


def read_bundle_ledger(path: str | Path, slo=None, gpu_name: str = "", cost=None):
    """(RoundData, Ledger) of the bundle at PATH (a run directory or its bundle/); SLO, a
    (Slo, where stated) pair, overrides the round's own; GPU_NAME names the server's GPU where
    the bundle sampled none; COST, a (Cost, where stated) pair, overrides the keys it gives."""
    d = Path(path)
    if (d / "bundle" / "manifest.json").exists():
        d = d / "bundle"
    rd = read_round(read_bundle(d), slo, gpu_name=gpu_name, cost=cost)
    return rd, build_ledger(rd)
