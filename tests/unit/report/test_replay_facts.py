"""The report's facts of a replayed trace or dataset (the manifest's workload_source), and the
method section saying nothing of one where the bundle replayed none."""

from __future__ import annotations

from dataclasses import replace

import pytest

from report.publish.compose import compose_round, source_facts
from report.publish.render import Page
from tests.conftest import ROOT


def test_the_report_facts_of_a_source_name_its_file_and_known_reasons_only():
    assert source_facts(None) == {} and source_facts({"kind": "random"}) == {}
    f = source_facts({"kind": "sharegpt", "path": "/data/x/sg.json", "format": "sharegpt",
                      "dropped": {"too_short": 2, "cut_tail": 1, "a_later_reason": 3, "no_reply": 0}})
    assert f == {"source_kind": "sharegpt", "source_path": "sg.json", "source_format": "sharegpt",
                 "source_drop_reasons": ["cut_tail", "too_short"]}



@pytest.mark.parametrize("lang, words", [("en", ("replayed the", "ShareGPT dataset", "left out:")),
                                         ("zh", ("轨迹", "ShareGPT 数据集", "剔除的请求"))])
def test_the_method_section_stays_silent_without_a_replayed_source(lang, words):
    # A recorded round of random prompts: its manifest names no trace or dataset.
    report = replace(compose_round(ROOT / "runs" / "round-8" / "bundle", "round-8"), sections=["method"])
    assert report.facts.source_kind is None
    text = Page(report, lang).assemble("html")
    assert all(w not in text for w in words)
