"""The Chinese catalogue writes a space between a Chinese character and a Latin word, a number,
a slot, a ledger key or a code span ("GPU 显存带宽"); the renderer closes a space between two
Chinese characters (render.text.close_cjk_gaps), so a slot that holds Chinese reads as one run."""

from __future__ import annotations

import re

from report.words import SECTIONS, section

HAN = r"[\u3400-\u9fff]"
# What stands as one Latin word beside Chinese: a code span, a ledger key, a slot, a word or number.
LATIN = r"(?:`[^`]*`|\[\[[^\]]*\]\]|\{[^{}]*\}|[A-Za-z0-9])"
UNSPACED = re.compile(rf"{HAN}{LATIN}|{LATIN}(?<![\]`}}]{{2}}){HAN}|(?:`|\]\]|\}}){HAN}")


def unspaced(text: str) -> list[str]:
    """The places in TEXT where a Chinese character touches a Latin word, number, slot, key or code."""
    return [text[max(0, m.start() - 6):m.end() + 6] for m in UNSPACED.finditer(text)]


def test_the_rule_finds_a_latin_word_slot_key_or_code_touching_chinese():
    for bad in ("瓶颈是GPU", "GPU显存", "由{limit}决定", "{limit}限制", "为[[p.x]]的", "见`x`的", "第4轮"):
        assert unspaced(bad), bad
    for good in ("瓶颈是 GPU 显存带宽", "由 {limit} 决定", "为 [[p.x]] 的", "见 `x` 的", "第 4 轮",
                 "（{limit}）", "ShareGPT 形态，{sweep}", "`--max-num-seqs`、"):
        assert not unspaced(good), good


def test_every_chinese_catalogue_text_spaces_chinese_from_latin():
    found = {f"{s}.{k}": unspaced(v) for s in SECTIONS for k, v in section(s, "zh").items() if unspaced(v)}
    assert not found, found
