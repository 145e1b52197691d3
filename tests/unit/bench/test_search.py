"""The search sweep's choice of concurrencies (bench/search.py) and the plan checks that guard it."""

from __future__ import annotations

import pytest

from bench.plan.parse import plan_from_dict
from bench.prompts import PlanError
from bench.search import SloSearch


def run_search(search: SloSearch, capacity: int) -> list[int]:
    """The concurrencies SEARCH runs against a server that meets the SLO up to CAPACITY."""
    out = []
    while (c := search.next()) is not None:
        assert c not in out, "no point runs twice"
        out.append(c)
        search.record(c, c <= capacity)
    return out


def test_it_doubles_until_a_point_fails_then_bisects_to_the_tolerance():
    # 64 fails: bisect [32, 64] at geometric means (45 fails, 37 and 40 meet, 42 fails) until
    # 42 − 40 ≤ 10 % of 40.
    assert run_search(SloSearch(1, 1024, 0.1), 40) == [1, 2, 4, 8, 16, 32, 64, 45, 37, 40, 42]


@pytest.mark.parametrize("capacity", [0, 1, 3, 7, 100, 1023, 5000])
def test_the_bracket_ends_within_the_tolerance_around_the_capacity(capacity):
    s = SloSearch(1, 1024, 0.1)
    run_search(s, capacity)
    if capacity >= 1024:
        assert s.failed is None and s.met == 1024       # met up to the maximum: beyond it
    elif capacity == 0:
        assert s.met is None and s.failed == 1
    else:
        assert s.met <= capacity < s.failed
        assert s.failed - s.met <= max(1.0, 0.1 * s.met)


def test_a_search_plan_needs_an_slo_one_length_and_a_closed_loop():
    ok = {"slo": {"ttft_ms": 500}, "sweep": {"search": "slo", "concurrency": [2], "search_max": 64}}
    plan = plan_from_dict(ok)
    assert [p["concurrency"] for p in plan.points()] == [2]      # the rest are chosen as it runs
    assert plan.search_point(16)["concurrency"] == 16
    for change, field in (({"slo": None}, "has none"), ({"sweep": {"concurrency": [1, 2]}}, "one value"),
                          ({"sweep": {"search": "fast"}}, "is not"),
                          ({"sweep": {"search_max": 1, "concurrency": [4]}}, "search_max"),
                          ({"sweep": {"search_tolerance": 1.5}}, "search_tolerance")):
        data = {"slo": ok["slo"], "sweep": {**ok["sweep"], **change.get("sweep", {})}}
        if "slo" in change:
            del data["slo"]
        with pytest.raises(PlanError, match=field):
            plan_from_dict(data)
