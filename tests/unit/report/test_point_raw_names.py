"""Each raw input point_raw adds is said in POINT_RAW_INPUTS, and each said there is added."""

from __future__ import annotations

from bundle.store.reader import read_bundle
from report.derive.round.raw import POINT_RAW_INPUTS, point_raw
from report.derive.round.read import read_round
from tests.conftest import ROOT


def test_the_raw_inputs_a_point_gets_are_the_ones_declared():
    rd = read_round(read_bundle(ROOT / "tests/fixtures/cpu-demo"))
    assert set(point_raw(rd, rd.points[0]).values) == set(POINT_RAW_INPUTS)
