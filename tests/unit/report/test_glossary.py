"""One term per concept in each language (report/data/words/glossary.toml): every catalogue
text uses the glossary's term and none of the words it replaces."""

from __future__ import annotations

import re
import tomllib
from importlib import resources

import pytest

from report.words import LANGS, SECTIONS, section

GLOSSARY = tomllib.loads(resources.files("report").joinpath("data/words/glossary.toml").read_text(
    encoding="utf-8"))


def texts(lang: str) -> dict[str, str]:
    """Every catalogue text of LANG by its code (the quantity meanings are Chinese only)."""
    return {f"{s}.{k}": v for s in SECTIONS for k, v in section(s, lang).items()}


@pytest.mark.parametrize("lang", LANGS)
def test_no_catalogue_text_uses_a_word_the_glossary_replaces(lang):
    found = {code: word for concept in GLOSSARY.values() for word in concept.get(f"avoid_{lang}", [])
             for code, text in texts(lang).items() if word in text}
    assert not found, found


@pytest.mark.parametrize("lang", LANGS)
def test_every_glossary_term_is_in_use(lang):
    every = "\n".join(texts(lang).values())
    unused = [c[lang] for c in GLOSSARY.values() if c[lang] not in every]
    assert not unused, unused


# A word of `avoid_words_<lang>` standing alone: not inside `code`, not part of a name
# (prompt_tokens, num_prompts, --enable-prompt-tokens-details, {prompt}).
def _alone(word: str) -> re.Pattern:
    return re.compile(rf"(?<![\w`{{\-.]){re.escape(word)}(?![\w`}}\-])")


def _outside_code(text: str) -> str:
    """TEXT with each `code` span as a stand-in Latin word (the spaces beside it are right)."""
    return re.sub(r"`[^`]*`", "code", text)


@pytest.mark.parametrize("lang", LANGS)
def test_no_catalogue_text_uses_a_word_the_glossary_replaces_standing_alone(lang):
    found = {code: word for concept in GLOSSARY.values() for word in concept.get(f"avoid_words_{lang}", [])
             for code, text in texts(lang).items() if _alone(word).search(_outside_code(text))}
    assert not found, found


def test_a_standing_alone_word_is_told_from_a_name():
    p = _alone("prompt")
    assert p.search("每个 prompt 的共享比例") and p.search("(prompt)")
    for name in ("prompt_tokens", "num_prompts", "--enable-prompt-tokens-details", "{prompt} 个"):
        assert not p.search(name), name


# Chinese runs on without spaces: a space between two CJK characters (or full-width
# punctuation) is a leftover of a substitution, never a word break.
CJK_GAP = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef] +[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]")


def test_no_chinese_catalogue_text_has_a_space_between_two_chinese_characters():
    found = {code: m.group(0) for code, text in texts("zh").items()
             if (m := CJK_GAP.search(_outside_code(text)))}
    assert not found, found
