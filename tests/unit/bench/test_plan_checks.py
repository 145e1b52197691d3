"""Plan and flag checks made before anything starts: an open loop is open, an [expect] table
names real points, a title is a string or one per known language, and an API key is one a
header can carry and the bundle can lose."""

from __future__ import annotations

import pytest

from bench.cli import api_key_problem
from bench.plan.parse import plan_from_dict
from bench.prompts import PlanError

OPEN = {"sweep": {"request_rate": [4, 200], "arrival": "poisson", "duration_s": 5}}


def test_an_open_loop_without_a_concurrency_has_no_cap():
    plan = plan_from_dict(OPEN)
    assert plan.sweep.concurrency == []
    assert [p["concurrency"] for p in plan.points()] == [None, None]
    capped = plan_from_dict({"sweep": {**OPEN["sweep"], "concurrency": [64]}})
    assert [p["concurrency"] for p in capped.points()] == [64, 64]


def test_a_closed_loop_still_needs_a_concurrency():
    with pytest.raises(PlanError, match=r"\[sweep\].concurrency: at least one value"):
        plan_from_dict({"sweep": {"concurrency": []}})


def test_expectations_must_name_points_of_the_plan():
    plan = plan_from_dict({"sweep": {"concurrency": [1, 8]},
                           "expect": {"L128-c8": {"bottleneck": "kv_pool", "why": "pool of 2"}}})
    assert plan.expect["L128-c8"]["bottleneck"] == "kv_pool"
    assert plan.to_dict()["expect"] == plan.expect        # it travels in the manifest
    with pytest.raises(PlanError, match=r"\[expect\]: no point has the id\(s\) \['L128-c9'\]"):
        plan_from_dict({"sweep": {"concurrency": [1, 8]}, "expect": {"L128-c9": {"valid": True}}})
    with pytest.raises(PlanError, match=r"\[expect.L128-c8\].valid: expected true/false"):
        plan_from_dict({"sweep": {"concurrency": [8]}, "expect": {"L128-c8": {"valid": "yes"}}})


def test_a_title_is_a_string_or_one_per_language():
    assert plan_from_dict({"title": "Concurrency sweep"}).title == "Concurrency sweep"
    both = {"en": "Concurrency sweep", "zh": "并发扫描"}
    plan = plan_from_dict({"title": both})
    assert plan.title == both and plan.to_dict()["title"] == both     # it travels in the manifest
    assert plan_from_dict({"title": {"zh": "并发扫描"}}).title == {"zh": "并发扫描"}
    with pytest.raises(PlanError, match=r"^plan: title.fr: unknown language; known: en, zh$"):
        plan_from_dict({"title": {"en": "Sweep", "fr": "Balayage"}})
    with pytest.raises(PlanError, match=r"^plan: title.zh must be a string, got 3$"):
        plan_from_dict({"title": {"zh": 3}})
    with pytest.raises(PlanError, match=r"^plan: title must be a string or a table"):
        plan_from_dict({"title": ["Sweep"]})


@pytest.mark.parametrize("key, problem", [
    ("sk-live-0123456789", None), ("k3y", None), (None, None),
    ("ok", "a word of 2 characters"), ("1234", "a number of 4 characters"),
    ("abc\r\nX-Injected: 1", "control character"), ("clé-secrète-1", "outside ASCII"),
])
def test_api_keys_a_header_cannot_carry_or_the_bundle_cannot_lose_are_refused(key, problem):
    got = api_key_problem(key)
    assert (got is None) if problem is None else (problem in got)
