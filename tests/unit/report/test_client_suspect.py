"""The client named as a suspect for a point's tails when its own event loop lagged past the
lag rule (read tail against tail: loop-lag p99 against the ITL p99 it measured), silent below
it; checked on HAND-BUILT ledgers and on round 2 (the embedded CPU engine on a 2-core host)."""

from __future__ import annotations

import pytest

from bundle.store.reader import read_bundle
from report.derive.round.read import read_round
from report.judge.diagnosis import Attribution
from report.judge.findings.points import client_suspect_finding
from report.judge.verdicts import build_ledger
from report.ledger import Ledger
from tests.conftest import ROOT


def _ledger(points: dict[str, tuple[float, float]]) -> Ledger:
    """HAND-BUILT: the lag rule and each point's loop-lag p99 and ITL p99 (ms)."""
    led = Ledger()
    led.record("r.rule_lag_min_ms", 5.0, unit="ms", doc="hand-built")
    led.record("r.rule_lag_share_of_itl", 0.5, unit="fraction", doc="hand-built")
    for pid, (lag, itl) in points.items():
        led.record(f"p.{pid}.client_lag_ms_p99", lag, unit="ms", doc="hand-built")
        led.record(f"p.{pid}.itl_ms_p99", itl, unit="ms", doc="hand-built")
    return led


def test_the_client_is_a_suspect_only_past_the_lag_rule():
    # c1 under the floor, c2 under half its ITL p99, c4 past both
    led = _ledger({"c1": (4.0, 2.0), "c2": (30.0, 80.0), "c4": (726.0, 62.0)})
    f = client_suspect_finding(led, ["c1", "c2", "c4"], {"c1": "C=1", "c2": "C=2", "c4": "C=4"})
    assert f is not None and f.kind == "validity"
    assert "the tails at C=4:" in f.texts["en"]          # the point named once; its numbers in the table
    assert {"p.c4.client_lag_ms_p99", "p.c4.itl_ms_p99"} <= set(f.evidence)
    assert "C=1" not in f.texts["en"] and "C=2" not in f.texts["en"]
    assert "C=4 点" in f.texts["zh"] and "C=2" not in f.texts["zh"]
    # every point below the rule: silent
    led = _ledger({"c1": (4.0, 2.0), "c2": (30.0, 80.0)})
    assert client_suspect_finding(led, ["c1", "c2"]) is None
    # a point whose verdict already names the client is not named twice
    led = _ledger({"c4": (726.0, 62.0)})
    att = {"c4": Attribution("c4", "client", "client_starved", {})}
    assert client_suspect_finding(led, ["c4"], attributions=att) is None
    # an unmeasured lag names no one
    led = _ledger({"c4": (726.0, 62.0)})
    led.values["p.c4.client_lag_ms_p99"] = led.values["p.c4.client_lag_ms_p99"].__class__(
        key="p.c4.client_lag_ms_p99", value=None, unit="ms", func="observed", doc="hand-built")
    assert client_suspect_finding(led, ["c4"]) is None


@pytest.fixture(scope="module")
def round2():
    rd = read_round(read_bundle(ROOT / "runs" / "round-2" / "bundle"))
    return rd, build_ledger(rd)


def test_round_2s_shared_host_names_the_client_at_c64(round2):
    rd, led = round2
    valid = [p for p, v in rd.verdicts.validity.items() if v.valid]
    f = client_suspect_finding(led, valid, {p: p for p in valid}, rd.verdicts.attribution)
    assert f is not None
    assert led.value_of("p.L256-c64.client_lag_ms_p99") == pytest.approx(726, abs=1)
    assert "p.L256-c64.client_lag_ms_p99" in f.evidence and "L256-c64" in f.texts["en"]


def test_the_diagnosis_prints_each_suspects_lag_in_a_table_not_a_clause_per_point():
    from report.publish.compose import compose_round
    report = compose_round(ROOT / "runs" / "round-2" / "bundle", "round-2")
    lag = report.tables["client_lag"]
    said = next(f for f in report.facts.findings if f["id"] == "client_suspect")
    assert [r[0] for r in lag.rows] == [f"p.{pid}.client_lag_ms_p99" for pid in report.facts.ok_points
                                       if f"p.{pid}.client_lag_ms_p99" in said["evidence"]]
    assert len(lag.rows) > 1 and "its loop lag p99 was" not in said["texts"]["en"]
    held = report.tables["held_table"]
    disagreed = next(f for f in report.facts.findings if f["id"] == "disagreements")
    assert len(held.rows) == len(disagreed["shown"]) > 1
    assert disagreed["texts"]["en"].count("the running/waiting gauges put") == 1
