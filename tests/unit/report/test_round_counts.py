"""The round's sampler, pool, peak, request and point counts are registered round quantities
with the values, reasons and sources the hand-wired records gave (report/registry.py's `key=`
for a key a point quantity also has, `over_points=True` for one known once validity is)."""

from __future__ import annotations

import pytest

from report.derive.round.read import ok_points, valid_points
from report.judge.verdicts import read_bundle_ledger
from report.registry import REGISTRY, declared
from tests.conftest import FIXTURES, ROOT


@pytest.fixture(scope="module")
def h200():
    return read_bundle_ledger(FIXTURES / "h200-round-4")


def test_a_round_key_beside_a_point_key_of_one_name(h200):
    rd, led = h200
    assert REGISTRY["round.preemptions"].name == "preemptions"
    assert led["r.preemptions"].func == "report.derive.series.server.round_preemptions"
    assert led[f"p.{rd.points[0].pid}.preemptions"].func == "report.derive.series.server.preemptions"
    assert led.value_of("r.requests") == sum(len(p.measured) + len(p.failed) for p in rd.points)
    assert led["r.scrapes"].func == "report.derive.series.sampler.scrape_count"
    assert led.value_of("r.scrapes") == len(rd.bundle.metrics)


def test_the_valid_points_are_counted_once_validity_is_known(h200):
    rd, led = h200
    assert REGISTRY["round.valid_points"].over_points and not REGISTRY["round.points"].over_points
    assert "valid_points" not in {d.name for d in declared("round", "report.derive.validity")
                                  if not d.over_points}
    validity = rd.verdicts.validity
    assert led.value_of("r.valid_points") == len(valid_points(rd, validity)) < len(ok_points(rd))
    assert led.value_of("r.points") == len(ok_points(rd))
    assert led["r.valid_points"].sources == (f"{rd.name}/points.jsonl",)


def test_the_peaks_and_the_pool_cite_what_they_read(h200):
    rd, led = h200
    assert led["r.peak_flops"].sources == (f"{rd.name}/manifest.json: gpus; report/data/gpus.toml",)
    assert led["r.max_sm_clock_mhz"].sources == (f"{rd.name}/manifest.json: gpus",)
    assert led.value_of("r.block_size") == 16
    assert led.value_of("r.flop_intervals_over_peak") == 0


def test_without_scrapes_or_a_gpu_the_values_are_absent_with_the_recorded_reasons():
    _, led = read_bundle_ledger(ROOT / "runs" / "round-1" / "bundle")
    assert led.value_of("r.scrapes") == 0
    for key in ("r.duration_s", "r.preemptions"):
        assert led[key].missing.code == "reason.no_metrics_sampler"
    assert led["r.peak_flops"].missing.code == "reason.no_gpu"
    assert led["r.source_read"].missing.code == "reason.no_replayed_source"
    assert led["r.max_sm_clock_mhz"].missing.code.startswith("reason.nvml_")
