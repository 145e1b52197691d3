"""The source phrases (where a value's samples are) in the catalogue: complete, used, and
worded per language on a real round."""

from __future__ import annotations

import ast
import re

from bundle.store.reader import read_bundle
from report.derive.round.read import read_round
from report.judge.verdicts import build_ledger
from report.ledger import Source
from report.words import LANGS, fields_of, section
from tests.conftest import ROOT  # noqa: E402

CODE = re.compile(r"^source\.[a-z_]+$")


def codes_in_source() -> set[str]:
    out = set()
    for path in (ROOT / "report").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and CODE.match(node.value):
                out.add(node.value)
    return out


def test_every_source_code_has_both_texts_with_the_same_fields_and_none_is_unused():
    used = {c.split(".", 1)[1] for c in codes_in_source()}
    assert used, "no source code found in report/"
    en, zh = section("source", "en"), section("source", "zh")
    assert used - en.keys() == set(), "codes without an English text"
    assert used - zh.keys() == set(), "codes without a Chinese text"
    assert en.keys() - used == set() and zh.keys() - used == set(), "texts no code uses"
    for key in used:
        assert fields_of(en[key]) == fields_of(zh[key]), key


def test_chinese_source_phrases_use_full_width_punctuation():
    for key, text in section("source", "zh").items():
        # fields, half-open intervals and metric names (vllm:...) are not prose
        prose = re.sub(r"\{[^}]*\}|[\[(][^\])]*[\])] s|\w+:\w+", "", text)
        assert not re.search(r"[,;:()]", prose), (key, text)


def test_a_real_rounds_sources_are_worded_in_each_language():
    led = build_ledger(read_round(read_bundle(ROOT / "runs" / "round-2" / "bundle")))
    src = next(s for s in led["p.L256-c4.held_concurrency_fraction"].sources if isinstance(s, Source))
    en, zh = src.text("en"), src.text("zh")
    assert en.startswith("round-2/metrics.jsonl") and "steady middle 60% of point L256-c4" in en
    assert zh.startswith("round-2/metrics.jsonl") and "测量点 L256-c4 中段 60% 的稳态" in zh
    assert "scrapes" not in zh and "point" not in zh
    phrases = {s.code for v in led.values.values() for s in v.sources if isinstance(s, Source)}
    for lang in LANGS:
        for v in led.values.values():
            for s in v.sources:
                if isinstance(s, Source):
                    s.text(lang)  # every phrase a real round uses fills in every language
    assert len(phrases) >= 8
