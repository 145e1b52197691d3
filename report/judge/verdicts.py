"""A round's ledger with its verdicts: each point's quantities, then its validity and
bottleneck, then the quantities over the valid points only (fits never see an invalid point),
then each point against the SLO and the capacity answer (report/judge/goodput.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from bundle.files import bundle_dir
from bundle.store.reader import read_bundle
from report.derive.round.read import RoundData, read_round
from report.derive.round.stages import resolve_stage
from report.judge import cost as _cost  # noqa: F401 (registers what the phases resolve)
from report.judge import goodput as _goodput  # noqa: F401 (registers what the phases resolve)
from report.judge.diagnosis import Attribution, Validity, point_bottleneck, point_validity
from report.judge.sets import SetComparison, set_comparisons
from report.ledger import Ledger


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
    led = Ledger()
    resolve_stage(led, rd, "measured")
    validity = MappingProxyType({p.pid: point_validity(led, p.pid, p.window.status) for p in rd.points})
    resolve_stage(led, rd, "checked", validity)
    attribution = MappingProxyType({p.pid: point_bottleneck(led, p.pid) for p in rd.points})
    # The quantities over the valid points, each point against the SLO, the capacity answer.
    resolve_stage(led, rd, "valid_points", validity)
    # A round of server sets: each set against the base set, on its question's two signals.
    rd.verdicts = Verdicts(validity=validity, attribution=attribution,
                           set_comparisons=tuple(set_comparisons(led, rd, validity)))
    return led


def read_bundle_ledger(path: str | Path, slo=None, gpu_name: str = "", cost=None):
    """(RoundData, Ledger) of the bundle at PATH (a run directory or its bundle/); SLO, a
    (Slo, where stated) pair, overrides the round's own; GPU_NAME names the server's GPU where
    the bundle sampled none; COST, a (Cost, where stated) pair, overrides the keys it gives."""
    d = bundle_dir(path)
    rd = read_round(read_bundle(d), slo, gpu_name=gpu_name, cost=cost)
    return rd, build_ledger(rd)
