"""A round's ledger resolved stage by stage: the driver that walks report/phases.py's phases of a round."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from report.derive import delivery as DL  # noqa: F401 (registers what the phases resolve)
from report.derive import host as HO  # noqa: F401 (registers what the phases resolve)
from report.derive import peers as PR  # noqa: F401 (registers what the phases resolve)
from report.derive import prefilltail as PT  # noqa: F401 (registers what the phases resolve)
from report.derive import serverlog as SL  # noqa: F401 (registers what the phases resolve)
from report.derive import sizes as SZ  # noqa: F401 (registers what the phases resolve)
from report.derive import step as SP  # noqa: F401 (registers what the phases resolve)
from report.derive import validity as V  # noqa: F401 (registers what the phases resolve)
from report.derive.clienterror import itl as CE  # noqa: F401 (registers what the phases resolve)
from report.derive.clienterror import nodes as CN  # noqa: F401 (registers what the phases resolve)
from report.derive.gpu import across as GA  # noqa: F401 (registers what the phases resolve)
from report.derive.gpu import ceiling as GC  # noqa: F401 (registers what the phases resolve)
from report.derive.gpu import datasheet as DS  # noqa: F401 (registers what the phases resolve)
from report.derive.gpu import dcgm as DC  # noqa: F401 (registers what the phases resolve)
from report.derive.gpu import energy as EN  # noqa: F401 (registers what the phases resolve)
from report.derive.gpu import gpm as GM  # noqa: F401 (registers what the phases resolve)
from report.derive.gpu import parallel as GP  # noqa: F401 (registers what the phases resolve)
from report.derive.gpu import per_gpu as PG  # noqa: F401 (registers what the phases resolve)
from report.derive.gpu import power as PW  # noqa: F401 (registers what the phases resolve)
from report.derive.load import admission as LA  # noqa: F401 (registers what the phases resolve)
from report.derive.load import engines as LE  # noqa: F401 (registers what the phases resolve)
from report.derive.load import inflight as LI  # noqa: F401 (registers what the phases resolve)
from report.derive.reconcile import model as R  # noqa: F401 (registers what the phases resolve)
from report.derive.round.raw import (
    model_config_raw,
    modelled_raw,
    peer_raw,
    point_raw,
    prefill_tail_raw,
    round_raw,
)
from report.derive.round.read import (
    PointData,
    RoundData,
    load_of,
    modelled_lengths,
    ok_points,
    prefill_reference,
    valid_points,
)
from report.derive.series import cache_config as CC  # noqa: F401 (registers what the phases resolve)
from report.derive.series import sampler as SM  # noqa: F401 (registers what the phases resolve)
from report.derive.series import scrapes as S  # noqa: F401 (registers what the phases resolve)
from report.derive.series import server as SV  # noqa: F401 (registers what the phases resolve)
from report.derive.stats import point as STP  # noqa: F401 (registers what the phases resolve)
from report.derive.stats import requests as ST  # noqa: F401 (registers what the phases resolve)
from report.derive.stats import sessions as SES  # noqa: F401 (registers what the phases resolve)
from report.derive.sweep import concurrency as SC  # noqa: F401 (registers what the phases resolve)
from report.derive.sweep import lengths as SLN  # noqa: F401 (registers what the phases resolve)
from report.derive.timing import client as TC  # noqa: F401 (registers what the phases resolve)
from report.derive.timing import server as TS  # noqa: F401 (registers what the phases resolve)
from report.ledger import Ledger, Reason
from report.phases import PHASES, Phase, module_order
from report.registry import RawSources, resolve_across, resolve_point, resolve_round


def settings_raw(p: PointData) -> RawSources:
    """The settings of point P the quantities across points read: its concurrency and whether it
    ran in a closed loop (no arrival rate)."""
    raw = RawSources()
    raw.add("concurrency", p.settings.get("concurrency"))
    raw.add("closed_loop", not p.settings.get("request_rate"))
    return raw


def prefill_rate_raw(led: Ledger, rd: RoundData, pts: list[PointData]) -> RawSources:
    """The round's inputs of the prefill FLOP rate measured alone: its reference point's (prefill_reference) prompt and prefill."""
    ref = prefill_reference(pts, rd.replayed_trace)
    raw = RawSources()
    raw.add("model_config", *model_config_raw(rd))
    no_ref = Reason.of("reason.no_c1_point")
    raw.add("reference_input_len", no_ref if ref is None else modelled_lengths(led, rd, ref)[0])
    raw.add("reference_prefill_ms", no_ref if ref is None else led[f"p.{ref.pid}.prefill_ms_mean"])
    return raw


# The ledger, phase by phase (report/phases.py): what each phase's `points`, `when` and
# `raw` name.


@dataclass
class _Stage:
    """What the phases of one stage read: the round, its points' validity, the valid points."""

    rd: RoundData
    validity: Mapping[str, Any]
    valid: list[PointData]

    def points(self, which: str) -> list[PointData]:
        """The points a phase runs over, in load order where it says so."""
        return {"all": self.rd.points, "ok": ok_points(self.rd), "valid": self.valid,
                "valid_by_load": sorted(self.valid, key=lambda p: load_of(p) or 0)}[which]

    def holds(self, when: str) -> bool:
        """Whether a phase's condition holds for the round."""
        rd, n = self.rd, len(self.valid)
        return {"": True, "peers": bool(rd.peers), "valid_points": n > 0,
                "prefill_reference": n > 0 and rd.config is not None
                and prefill_reference(self.valid, rd.replayed_trace) is not None,
                "concurrency_axis": n > 0 and rd.axis == "concurrency",
                "concurrency_fits": n >= 2 and rd.axis == "concurrency",
                "length_fits": n >= 2 and rd.axis == "input_len"}[when]


def _point_raw_once(rd: RoundData, p: PointData) -> RawSources:
    """Point P's raw inputs (point_raw), built once per round and shared by every phase that reads them."""
    if p.pid not in rd._point_raws:
        rd._point_raws[p.pid] = point_raw(rd, p)
    return rd._point_raws[p.pid]


def _with(raw: RawSources) -> RawSources:
    return RawSources(dict(raw.values), dict(raw.sources))


def _point_phase_raw(led: Ledger, st: _Stage, kind: str, p: PointData, made: dict[str, RawSources]) -> RawSources:
    """Point P's raw inputs of KIND, each built once for the point (MADE): its point_raw; with the
    lengths the models read (`modelled`); with the other tools' results too (`peers`); its failed
    checks (`checks`); the inputs of its prefill tail (`prefill_tail_point`)."""
    if kind in made:
        return made[kind]
    rd = st.rd
    if kind == "point":
        raw = _point_raw_once(rd, p)
    elif kind == "modelled":        # the lengths the point's own quantities measured
        raw = _with(_point_raw_once(rd, p))
        modelled_raw(led, rd, p, raw)
    elif kind == "peers":
        raw = _with(_point_phase_raw(led, st, "modelled", p, made))
        peer_raw(rd, p, raw)
    elif kind == "checks":
        v, raw = st.validity[p.pid], RawSources()
        raw.add("failed_checks", tuple(v.reasons), tuple(v.evidence))
    elif kind == "prefill_tail_point":
        ref = prefill_reference(st.valid, rd.replayed_trace)
        raw = prefill_tail_raw(led, rd, p, led["r.prefill_flop_rate"], led[f"p.{ref.pid}.sm_clock_load_mhz"])
    else:
        raise ValueError(f"no point phase reads raw inputs {kind!r}")
    made[kind] = raw
    return raw


def _round_phase(led: Ledger, st: _Stage, ph: Phase, order: list[str]) -> None:
    """One phase of round quantities, or of point quantities across points, over its points; ORDER: its modules'."""
    pts = st.points(ph.points)
    pids = [p.pid for p in pts]
    if ph.raw == "settings":        # across points: each point's settings, the others' values
        raws = {p.pid: settings_raw(p) for p in ok_points(st.rd)}
        for module in order:
            resolve_across(led, module, pids, [p.pid for p in st.valid], raws)
        return
    if ph.raw == "round":           # before the points' validity: over no point
        raw, pids = round_raw(st.rd, []), []
    elif ph.raw == "valid":
        raw = round_raw(st.rd, pts)
    elif ph.raw == "prefill_tail":
        raw = prefill_rate_raw(led, st.rd, pts)
    else:
        raise ValueError(f"no round phase reads raw inputs {ph.raw!r}")
    for module in order:
        resolve_round(led, module, pids, raw, ph.over_points)


def resolve_stage(led: Ledger, rd: RoundData, stage: str, validity: Mapping[str, Any] | None = None) -> None:
    """Every phase of STAGE (report/phases.py) into LED, in the table's order, each where its
    condition holds; consecutive point phases over the same points run point after point.
    VALIDITY: each point's (report.judge.diagnosis), once the judge has found it."""
    st = _Stage(rd, validity or {}, valid_points(rd, validity or {}))
    todo = [ph for ph in PHASES if ph.stage == stage]
    order = {ph: module_order(ph) for ph in todo}
    while todo:
        ph = todo.pop(0)
        if ph.scope != "point":
            if st.holds(ph.when):
                _round_phase(led, st, ph, order[ph])
            continue
        run = [ph]
        while todo and todo[0].scope == "point" and todo[0].points == ph.points:
            run.append(todo.pop(0))
        run = [q for q in run if st.holds(q.when)]
        for p in st.points(ph.points) if run else ():
            made: dict[str, RawSources] = {}
            for q in run:
                for module in order[q]:
                    resolve_point(led, module, p.pid, _point_phase_raw(led, st, q.raw, p, made), q.after_valid_points)
