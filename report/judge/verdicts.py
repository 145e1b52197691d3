"""A round's ledger with its verdicts: each point's quantities, then its validity and
bottleneck, then the quantities over the valid points only (fits never see an invalid point),
then each point against the SLO and the capacity answer (report/judge/goodput.py)."""

from __future__ import annotations

from pathlib import Path

from bundle.store import read_bundle
from report.derive import occupancy, reconcile
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
from report.judge import goodput
from report.judge.diagnosis import passed_every_check, point_bottleneck, point_validity
from report.judge.sets import set_comparisons
from report.ledger import Ledger
from report.registry import resolve_point, resolve_round


def build_ledger(rd: RoundData) -> Ledger:
    """Every number of one round, with each point's validity and bottleneck in `rd.extras`."""
    led = measured_ledger(rd)
    rd.extras["validity"] = {p.pid: point_validity(led, p.pid, p.window.status) for p in rd.points}
    for pid, v in rd.extras["validity"].items():
        led.derive(f"p.{pid}.valid", passed_every_check, unit="",
                   sources=tuple(k for k in v.evidence), failed_checks=tuple(v.reasons))
    rd.extras["attribution"] = {p.pid: point_bottleneck(led, p.pid) for p in rd.points}
    valid_points_ledger(led, rd)
    # The admission queue (it reads the prefill step the valid points measured), each point
    # against the SLO, then the capacity answer over the valid points.
    for p in rd.points:
        raw = point_raw(rd, p)
        resolve_point(led, occupancy.__name__, p.pid, raw)
        resolve_point(led, goodput.__name__, p.pid, raw)
    pts = sorted(valid_points(rd), key=lambda p: load_of(p) or 0)
    resolve_round(led, goodput.__name__, [p.pid for p in pts], round_raw(rd, pts))
    resolve_round(led, reconcile.__name__, [p.pid for p in pts], round_raw(rd, pts))
    # A round of server sets: each set against the base set, on its question's two signals.
    rd.extras["set_comparisons"] = set_comparisons(led, rd)
    return led


def read_bundle_ledger(path: str | Path, slo=None):
    """(RoundData, Ledger) of the bundle at PATH (a run directory or its bundle/); SLO, a
    (Slo, where stated) pair, overrides the round's own."""
    d = Path(path)
    if (d / "bundle" / "manifest.json").exists():
        d = d / "bundle"
    rd = read_round(read_bundle(d), slo)
    return rd, build_ledger(rd)
