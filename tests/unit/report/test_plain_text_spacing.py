"""The command line's plain text follows the page's rule: no space between two Chinese
characters, where a slot or a value in words holds Chinese ("GPU 算力 限制了" is
"GPU 算力限制了"); a space beside a Latin word or a number stays. One rule
(report.words.closed), read by the page (render.text.close_cjk_gaps) and the command line."""

from __future__ import annotations

import json
import re

import pytest

from report.ledger import Ledger, Reason
from report.publish.numbers import format_value, plain_text
from report.publish.render.text import close_cjk_gaps
from report.words import CJK, closed, word
from serving_ledger.cli import main
from tests.conftest import ROOT

GAP = re.compile(rf"{CJK}[ \t]+{CJK}")


@pytest.mark.parametrize("text, want", [
    ("功耗上限下的 GPU 算力 限制了本服务。", "功耗上限下的 GPU 算力限制了本服务。"),
    ("分布在 24 层中的 24 层 ：共 20.91 B 参数", "分布在 24 层中的 24 层：共 20.91 B 参数"),
    ("对比 配置 0：其参数", "对比配置 0：其参数"),
    ("排队 50.2 ms + prefill 219 ms", "排队 50.2 ms + prefill 219 ms"),     # Latin and numbers keep theirs
    ("The GPU's compute limits this server.", "The GPU's compute limits this server."),
])
def test_a_space_between_two_chinese_characters_closes_and_no_other(text, want):
    assert closed(text) == want
    # the page's function reads the same rule: on text without markup it gives the same
    assert close_cjk_gaps(text) == want


def test_a_value_said_in_chinese_words_joins_the_chinese_before_it():
    led = Ledger()
    led.record("p.c1.queue_ms_mean", None, unit="ms", doc="hand-built",
               missing=Reason.of("reason.frontend_not_positive", value="-3"))
    said = plain_text("排队 [[p.c1.queue_ms_mean]]。", led, "zh")
    assert said == "排队" + format_value(led["p.c1.queue_ms_mean"], "zh") + "。"
    assert not GAP.search(said)


def test_the_findings_json_says_a_chinese_limit_without_a_gap(capsys):
    bundle = ROOT / "runs" / "round-11" / "bundle"
    assert main(["findings", "--json", str(bundle)]) == 0
    out = json.loads(capsys.readouterr().out)
    thesis = next(f for f in out["findings"] if f["id"] == "thesis")
    limit = word("finding.thesis_limit_engine_host", "zh")
    assert "限制本服务的是" + limit in thesis["text_zh"]        # the slot that held Chinese
    assert not [f["text_zh"] for f in out["findings"] if GAP.search(f["text_zh"])]


@pytest.mark.parametrize("model", ["qwen3-8b-fp8", "gpt-oss-20b", "mixtral-8x7b-v0.1"])
def test_the_planners_chinese_notes_have_no_gap(model, capsys):
    cfg = ROOT / "tests" / "fixtures" / "models" / f"{model}.config.json"
    argv = ["explain", "--model", str(cfg), "--gpu", "H200", "--concurrency", "64", "--input-len", "1024",
            "--output-len", "256", "--lang", "zh"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert not GAP.findall(text), [text[max(0, m.start() - 20):m.end() + 10] for m in GAP.finditer(text)]
    assert main(argv + ["--json"]) == 0
    notes = [v for v in json.loads(capsys.readouterr().out).values() if isinstance(v, str)]
    assert notes and not [n for n in notes if GAP.search(n)]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_findings_and_the_ledger_print_plain_text_in_the_language_asked(lang, capsys):
    bundle = ROOT / "runs" / "round-11" / "bundle"
    assert main(["findings", "--json", str(bundle)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert main(["findings", "--lang", lang, str(bundle)]) == 0
    lines = capsys.readouterr().out.splitlines()
    p = out["points"][0]
    code = "label.cli_point_valid" if p["valid"] else "label.cli_point_invalid"
    assert lines[0] == word(code, lang, point=p["point"], bottleneck=p["bottleneck"],
                            reasons=", ".join(p["invalid_reasons"]))
    assert f"- {out['findings'][0]['text_' + lang]}" in lines
    assert not [t for t in lines if lang == "zh" and GAP.search(t)]
    assert main(["ledger", "--lang", lang, str(bundle)]) == 0
    said = dict(t.split("\t", 1) for t in capsys.readouterr().out.splitlines() if "\t" in t)
    assert said["r.block_size"].endswith("个 token" if lang == "zh" else "tok")
