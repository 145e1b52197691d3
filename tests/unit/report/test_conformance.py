"""Every verdict the report can give, on real bundles where its cause was forced by construction.

The corpus (tests/fixtures/corpus/*/bundle, recorded by our collector against a real vLLM: the
embedded CPU engine or vLLM 0.24.0 on an H200; see tests/fixtures/corpus/README.md) and the
committed rounds carry the truth in their plans' [expect] tables: the bottleneck a forced cause
must get, the verdicts that must stay silent, the checks that must fail. This test holds every
one of them and prints the table and the confusion matrix of bottlenecks.
"""

from __future__ import annotations

import pytest

from bundle.expect import ExpectError, expect_from_dict
from report.judge.conformance import (
    bundle_checks,
    checks_table,
    confusion,
    confusion_table,
    point_checks,
)
from report.judge.diagnosis import BOTTLENECKS
from tests.conftest import FIXTURES, ROOT

CORPUS = sorted((FIXTURES / "corpus").glob("*/bundle")) + sorted((ROOT / "runs").glob("round-*/bundle"))


@pytest.fixture(scope="module")
def checks():
    return [c for p in CORPUS for c in bundle_checks(p)]


def test_every_forced_cause_is_named_and_every_silent_rule_stays_silent(checks):
    print("\n" + checks_table(checks) + "\n\n" + confusion_table(checks))
    failed = [c for c in checks if not c.holds]
    assert not failed, "\n" + checks_table(failed)


def test_the_corpus_forces_most_verdicts_and_silences_each_rule(checks):
    forced = {c.expected for c in checks if c.kind in ("bottleneck", "invalid")}
    silenced = {c.expected for c in checks if c.kind == "not"}
    for code in ("kv_pool", "scheduler_budget", "engine_host", "client", "client_distorted",
                 "lockstep", "over_saturated"):
        assert code in forced, code
    for code in ("kv_pool", "scheduler_budget", "engine_host", "client", "client_distorted",
                 "frontend", "under_driven", "gpu_compute"):
        assert code in silenced, code
    m = confusion(checks)
    assert sum(m.values()) >= 8 and all(e in BOTTLENECKS and g in BOTTLENECKS for e, g in m)


def test_a_check_fails_when_the_verdict_is_wrong():
    bad = point_checks("b", "p", {"bottleneck": "kv_pool", "not": ["client"], "invalid": ["lockstep"],
                                  "valid": True}, valid=False, reasons=["not_held"], bottleneck="client")
    assert [c.holds for c in bad] == [False, False, False, False]
    good = point_checks("b", "p", {"bottleneck": "client", "not": ["kv_pool", "lockstep"]},
                        valid=True, reasons=[], bottleneck="client")
    assert all(c.holds for c in good)


def test_a_malformed_expect_table_names_the_point_and_key():
    with pytest.raises(ExpectError, match=r"\[expect.c8\].bottleneck: expected a string"):
        expect_from_dict({"c8": {"bottleneck": 3}}, "plan.toml")
    with pytest.raises(ExpectError, match=r"unknown key\(s\) \['bottlenek'\]"):
        expect_from_dict({"c8": {"bottlenek": "kv_pool"}}, "plan.toml")

