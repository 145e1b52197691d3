"""A bound quantity reads its inputs by their names and is recorded as its function; an `each_`
input's absent point is named with its reason (report/registry.py)."""

from __future__ import annotations

import pytest

from report.derive import arith as A
from report.ledger import Absent, Ledger, Reason, Value
from report.registry import PointValues, bind, require_points


def test_a_bound_function_reads_its_inputs_by_name_and_is_recorded_as_itself():
    f = bind(A.ratio, "prefill_under_concurrency_ratio", numerator="prefill_ms_mean",
             denominator="prefill_c1_ms", scale=1e3)
    led = Ledger()
    led.record("prefill_c1_ms", 2.0, unit="ms", doc="hand-built", sources=("a.jsonl",))
    v = led.derive("r", f, prefill_ms_mean=6.0, prefill_c1_ms=led["prefill_c1_ms"])
    assert v.value == pytest.approx(3e3)
    assert (v.func, v.doc) == ("report.derive.arith.ratio", "One quantity divided by another (times a unit scale).")
    assert v.inputs == (("prefill_ms_mean", "6"), ("prefill_c1_ms", "prefill_c1_ms"))
    assert v.sources == ("a.jsonl",)


def test_an_absent_point_of_an_each_input_is_named_with_its_reason():
    why = Reason.of("reason.no_values")
    found = [Value("p.c1.q", 1.0), Value("p.c2.q", None, missing=why), None]
    values = PointValues("q", ["c1", "c2", "c4"], found)
    assert list(values) == [1.0, None, None]
    with pytest.raises(Absent) as e:
        require_points(values, (0, 1), "q")
    assert e.value.reason == Reason.of("reason.point_input_absent", input="q", point="c2", cause=why)
    with pytest.raises(Absent) as e:
        require_points(values, (2,), "q")
    assert e.value.reason.param("cause") == Reason.of("reason.not_derived", key="p.c4.q")
    with pytest.raises(Absent) as e:   # a plain list (a direct call) names the input only
        require_points([1.0, None], (1,), "q")
    assert e.value.reason == Reason.of("reason.input_none", input="q")
    assert "q is absent at c2" in str(Absent.because(values.absence(1)))

