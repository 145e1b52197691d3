"""A round's verdicts are one frozen object built once; the thresholds and the MFU counters'
rates are registered quantities with the values and reasons the hand-wired calls gave."""

from __future__ import annotations

import dataclasses

import pytest

from bundle.store.reader import read_bundle
from report.derive import validity as V
from report.derive.round.read import read_round
from report.derive.series import scrapes as S
from report.derive.series import server
from report.derive.timing.server import bracketing_window
from report.judge.verdicts import build_ledger, read_bundle_ledger
from tests.conftest import FIXTURES


@pytest.fixture(scope="module")
def h200():
    return read_bundle_ledger(FIXTURES / "h200-round-4")


def test_the_verdicts_cover_every_point_and_cannot_be_changed(h200):
    rd, _ = h200
    pids = [p.pid for p in rd.points]
    assert list(rd.verdicts.validity) == pids and list(rd.verdicts.attribution) == pids
    with pytest.raises(dataclasses.FrozenInstanceError):
        rd.verdicts.validity = {}
    with pytest.raises(TypeError):
        rd.verdicts.validity[pids[0]] = None
    assert rd.verdicts.set_comparisons == ()          # one server set: nothing to compare


def test_a_round_is_judged_once():
    rd = read_round(read_bundle(FIXTURES / "cpu-demo"))
    assert rd.verdicts is None
    build_ledger(rd)
    with pytest.raises(ValueError, match="built once"):
        build_ledger(rd)


def test_a_threshold_is_a_round_quantity_citing_the_policy_file(h200):
    _, led = h200
    v = led["r.rule_held_min"]
    assert v.value == V.HELD_MIN and v.func == "report.derive.validity.rule_held_min"
    assert v.sources == ("report/derive/validity.py",) and v.inputs == ()
    # The ITL slope is read as the bandwidth efficiency it implies, against the physical ceiling: no band
    assert "r.rule_itl_slope_min" not in led and "r.rule_itl_slope_max" not in led


def test_the_mfu_rates_are_the_counters_rates_over_the_bracketing_scrapes(h200):
    rd, led = h200
    p = rd.points[0]
    a, b = bracketing_window(rd.bundle.metrics, p.window.t_measure, p.window.t_end)
    got = led[f"p.{p.pid}.tflops_s"]
    assert got.func == "report.derive.series.server.tflops_s"
    assert got.value == S.counter_rate(rd.bundle.metrics, a, b, server.MFU_FLOPS) / 1e12 > 0
    assert led.value_of(f"p.{p.pid}.read_gb_s") == S.counter_rate(rd.bundle.metrics, a, b, server.MFU_READ_BYTES) / 1e9


def test_without_mfu_metrics_the_rates_are_absent_with_the_reason():
    _, led = read_bundle_ledger(FIXTURES / "cpu-demo")
    for key in ("p.L128-c8.tflops_s", "p.L128-c8.read_gb_s"):
        assert not led[key].present and led[key].missing.code == "reason.mfu_counters_still"
