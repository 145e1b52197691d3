"""A round's ledger with its verdicts: each point's quantities, then its validity and
bottleneck, then the quantities over the valid points only (fits never see an invalid point)."""

from __future__ import annotations

from pathlib import Path

from bundle.store import read_bundle
from report.derive.round_ledger import RoundData, measured_ledger, read_round, valid_points_ledger
from report.judge.diagnosis import passed_every_check, point_bottleneck, point_validity
from report.ledger import Ledger


def build_ledger(rd: RoundData) -> Ledger:
    """Every number of one round, with each point's validity and bottleneck in `rd.extras`."""
    led = measured_ledger(rd)
    rd.extras["validity"] = {p.pid: point_validity(led, p.pid, p.window.status) for p in rd.points}
    for pid, v in rd.extras["validity"].items():
        led.derive(f"p.{pid}.valid", passed_every_check, unit="",
                   sources=tuple(k for k in v.evidence), failed_checks=tuple(v.reasons))
    rd.extras["attribution"] = {p.pid: point_bottleneck(led, p.pid) for p in rd.points}
    valid_points_ledger(led, rd)
    return led


def read_bundle_ledger(path: str | Path):
    """(RoundData, Ledger) of the bundle at PATH (a run directory or its bundle/)."""
    d = Path(path)
    if (d / "bundle" / "manifest.json").exists():
        d = d / "bundle"
    rd = read_round(read_bundle(d))
    return rd, build_ledger(rd)
