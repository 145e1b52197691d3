"""One term per concept in each language (report/data/words/glossary.toml): every catalogue
text uses the glossary's term and none of the words it replaces."""

from __future__ import annotations

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
