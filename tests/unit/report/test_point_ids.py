"""Point ids are data: the reader takes only ids of the alphabet the collector makes, so none
can reach a `[[p.<id>.<key>]]` placeholder as markup; a placeholder naming no quantity is an
error, never a finding dropped in silence."""

from __future__ import annotations

import json
import shutil

import pytest

from bench.plan.spec import Plan, SamplerSpec, SweepSpec, WorkloadSpec
from bundle.expect import ExpectError, expect_from_dict
from bundle.files import BundleError
from bundle.schema import POINT_ID
from bundle.store.reader import read_bundle
from report.judge.findings import finding as FI
from report.judge.verdicts import read_bundle_ledger
from report.words import PLACEHOLDER
from tests.conftest import FIXTURES, run_bench

# An id that would close the placeholder and open another (another point's number), and one
# that would cut it at a format spec.
CRAFTED = ("L1]]x[[p.L128-c8.ttft_ms_p50", "L128-c8|pct", "L128 c8", "", "L" * 65, "-L1")


@pytest.mark.parametrize("crafted", CRAFTED)
def test_a_point_id_outside_the_collectors_alphabet_is_refused_on_read(tmp_path, crafted):
    b = tmp_path / "b"
    shutil.copytree(FIXTURES / "cpu-demo", b)
    lines = (b / "points.jsonl").read_text().splitlines(keepends=True)
    n = next(i for i, line in enumerate(lines) if json.loads(line).get("point"))
    lines[n] = lines[n].replace('"L128-c8"', json.dumps(crafted))
    (b / "points.jsonl").write_text("".join(lines))
    with pytest.raises(BundleError, match=rf"points.jsonl line {n + 1}: field 'point' is .*not a point id"):
        read_bundle(b)
    r = run_bench("findings", str(b), check=False, timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


def test_every_id_the_collector_makes_is_of_the_alphabet_and_one_placeholder_reads_it_whole():
    plan = Plan(workload=WorkloadSpec(), sampler=SamplerSpec(),   # the points, unchecked
                sweep=SweepSpec(input_len=[1, 2_147_483_647], request_rate=[0.5, 1e6, 3.25],
                                arrival="poisson", server_flags=[[], ["--x"]]))
    ids = [p["id"] for p in plan.points()]
    assert "s1-L2147483647-r1e+06" in ids and "s0-L1-r0.5" in ids
    for pid in ids:
        assert POINT_ID.fullmatch(pid)
        (m,) = PLACEHOLDER.finditer(f"at [[p.{pid}.ttft_ms_p99|pct]] ms")
        assert m.group(1) == f"p.{pid}.ttft_ms_p99" and m.group(2) == "pct"


def test_an_expect_table_keyed_by_no_point_id_is_refused():
    with pytest.raises(ExpectError, match=r"\[expect\]: 'a\]b' is not a point id"):
        expect_from_dict({"a]b": {"valid": True}}, "p.toml")
    assert expect_from_dict({"L1-c1": {"valid": True}}, "p.toml") == {"L1-c1": {"valid": True}}


def test_a_placeholder_naming_no_quantity_raises_and_one_of_another_point_is_left_out():
    _, led = read_bundle_ledger(FIXTURES / "cpu-demo", None)
    said = FI.make_finding(led, "f", "k", {"en": "TTFT [[p.L128-c8.ttft_ms_p50]] ms"}, [])
    assert said is not None and said.evidence == ["p.L128-c8.ttft_ms_p50"]
    # A quantity the round does not have (another point's): no finding, as an absent value.
    assert FI.make_finding(led, "f", "k", {"en": "[[p.L1-c1.ttft_ms_p50]]"}, []) is None
    with pytest.raises(FI.UnresolvedPlaceholder, match=r"\[\[p.L128-c8.ttft_ms_p5O\]\] names no quantity"):
        FI.make_finding(led, "f", "k", {"en": "[[p.L128-c8.ttft_ms_p5O]]"}, [])
