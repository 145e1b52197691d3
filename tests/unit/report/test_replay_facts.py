"""The report's facts of a replayed trace or dataset (the manifest's workload_source), and the
method section saying nothing of one where the bundle replayed none."""

from __future__ import annotations

from dataclasses import replace

import pytest

from report.judge.result import source_facts
from report.publish.compose import compose_round
from report.publish.render.page import Page
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


def test_a_traces_shared_blocks_predict_the_prefix_cache_hit_rate_of_round_10():
    # Round 10 replayed one synthetic trace with prefix caching off (set 0) and on (set 1): the
    # whole engine blocks of each request's shared 512-token trace blocks over its prompt
    # tokens predict what vLLM's counters measured with caching on, and nothing with it off.
    from bundle.store.reader import read_bundle
    from report.derive.round.read import read_round
    from report.judge.verdicts import build_ledger

    led = build_ledger(read_round(read_bundle(ROOT / "runs" / "round-10" / "bundle")))
    on, off = "p.s1-L128-c1.", "p.s0-L128-c1."
    expected = led[on + "prefix_cache_hit_rate_expected"].value
    assert 0.2 < expected < 0.4
    assert led[on + "prefix_cache_hit_rate"].value == pytest.approx(expected, rel=0.01)
    assert led[off + "prefix_cache_hit_rate"].value is None


def test_a_round_with_no_shared_prompt_blocks_has_no_expected_hit_rate():
    from bundle.store.reader import read_bundle
    from report.derive.round.read import read_round
    from report.judge.verdicts import build_ledger

    led = build_ledger(read_round(read_bundle(ROOT / "runs" / "round-8" / "bundle")))
    key = next(k for k in led.values if k.endswith(".prefix_cache_hit_rate_expected"))
    assert led[key].value is None and "shares no prefix" in led[key].missing.text("en")
