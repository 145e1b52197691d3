"""Point quantities across points (report/registry.py: `prev_<name>`, `first_valid_<name>`, resolved
by resolve_across): each valid point against the one before it and against the first one.

The ledger below is HAND-BUILT with Ledger.record (four points of a concurrency sweep, C=4 not
valid), its numbers typed here, not measured."""

from __future__ import annotations

import pytest

from report.derive.stats import point as ST
from report.derive.sweep import concurrency as A
from report.ledger import Ledger, Reason
from report.registry import RawSources, across_points, resolve_across, resolve_point

# C: (output tok/s, TTFT p99 ms, ITL p50 ms, ITL p99 ms, prefill mean ms); C=4 is not valid.
POINTS = {"c1": (100.0, 50.0, 10.0, 12.0, 20.0), "c2": (180.0, 40.0, 11.0, 30.0, 22.0),
          "c4": (300.0, 90.0, 12.0, 40.0, 25.0), "c8": (400.0, 60.0, 14.0, 50.0, 30.0)}
OK, VALID = list(POINTS), ["c1", "c2", "c8"]
NAMES = ("output_tok_s", "ttft_ms_p99", "itl_ms_p50", "itl_ms_p99", "prefill_ms_mean")


def ledger_of(points=POINTS) -> Ledger:
    """The HAND-BUILT points' values, each citing its point's requests, resolved across the points."""
    led = Ledger()
    for pid, values in points.items():
        for name, v in zip(NAMES, values):
            led.record(f"p.{pid}.{name}", v, doc=name, sources=(f"{pid}.requests",),
                       missing=Reason.of("reason.not_recorded"))
    raws = {}
    for pid in points:
        raws[pid] = RawSources()
        raws[pid].add("concurrency", int(pid[1:]))
        raws[pid].add("closed_loop", True)
    resolve_across(led, ST.__name__, OK, VALID, raws)
    resolve_across(led, A.__name__, VALID, VALID, raws)
    return led


def test_prev_names_the_last_valid_point_before_and_first_valid_the_first():
    led = ledger_of()
    assert led.value_of("p.c8.tput_growth_from_prev") == pytest.approx(400.0 / 180.0)    # not C=4's
    assert led.value_of("p.c2.tput_growth_from_prev") == pytest.approx(1.8)
    assert led.value_of("p.c4.scaling_eff") == pytest.approx(300.0 / (4 * 100.0))          # invalid: still scaled
    assert "p.c4.tput_growth_from_prev" not in led                                       # resolved at the valid only
    # A value across points cites both points' sources and names both keys as its inputs.
    v = led["p.c8.tput_growth_from_prev"]
    assert set(v.sources) == {"c8.requests", "c2.requests"}
    assert ("prev_output_tok_s", "p.c2.output_tok_s") in v.inputs


def test_at_the_first_point_prev_is_absent_with_its_reason_or_keeps_its_default():
    led = ledger_of()
    growth = led["p.c1.tput_growth_from_prev"]
    assert not growth.present and "no valid point comes before" in str(growth.missing)
    # The envelope's prev_ has a default: the first point's envelope is its own TTFT p99.
    assert [led.value_of(f"p.{p}.ttft_p99_envelope_ms") for p in VALID] == [50.0, 50.0, 60.0]
    assert led.value_of("p.c8.ttft_p99_envelope_growth_from_prev") == pytest.approx(1.2)


def test_an_absent_value_at_the_previous_point_makes_the_value_absent_default_or_not():
    points = {**POINTS, "c2": (180.0, None, 11.0, 30.0, 22.0)}
    led = ledger_of(points)
    assert not led["p.c2.ttft_p99_envelope_ms"].present
    env = led["p.c8.ttft_p99_envelope_ms"]
    assert not env.present and "prev_ttft_p99_envelope_ms" in str(env.missing)


def test_the_step_to_two_streams_is_predicted_at_c2_only():
    led = ledger_of()
    assert led.value_of("p.c2.itl_p99_with_prefill_predicted") == 10.0 + 20.0
    assert led.value_of("p.c2.itl_p99_over_prefill_step") == pytest.approx(1.0)
    assert led.value_of("p.c2.ttft_p99_behind_step_predicted") == 50.0 + 30.0
    assert led.value_of("p.c2.ttft_p99_over_behind_step") == pytest.approx(0.5)
    late = led["p.c8.itl_p99_over_prefill_step"]
    assert not late.present and "one stream to two" in str(late.missing)


def test_resolve_point_leaves_the_quantities_across_points_out():
    assert {"itl_p99_over_prefill_step", "ttft_p99_over_behind_step"} <= across_points(A.__name__)
    led = Ledger()
    resolve_point(led, ST.__name__, "c1", RawSources())
    assert "p.c1.output_tok_s" in led
    assert "p.c1.scaling_eff" not in led
