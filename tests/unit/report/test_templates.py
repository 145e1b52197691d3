"""Narrative templates: no number typed by hand, no unknown ledger key, both languages alike.

A section's template is one file for every language; its prose is the catalogue's
(`prose.<key>`), so each check runs on the source a language compiles (section_source)."""

from __future__ import annotations

import re
from pathlib import Path

import jinja2
import pytest

from tests.conftest import ROOT

TEMPLATES = ROOT / "templates"
LANGS = ("zh", "en")
# Names with digits in them: a percentile (p99) and E2E (end-to-end), not typed numbers.
ALLOWED = re.compile(r"\bp(50|90|99)\b|\b[Ee]2[Ee]\b")
NUMBER_FUNCS = {"n", "c", "span", "v", "card"}
# The only numeric literals templates may hold: list indices for the first and last point.
ALLOWED_LITERALS = {"0", "1"}
# The ledger key a number call cites: its first argument (a literal, or a point prefix ~ a suffix).
CITED = re.compile(r"\b(?:n|c|span|card)\(\s*((?:[^,()]|\([^()]*\))*)")


class Source:
    """A section's template as one language compiles it."""

    def __init__(self, name: str, text: str) -> None:
        self.name, self.text = name, text

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.text


def sections(lang: str) -> list[Source]:
    from report.publish.render.templating import section_source
    return [Source(p.name, section_source(TEMPLATES, p.name.removesuffix(".md.j2"), lang))
            for p in sorted(TEMPLATES.glob("*.md.j2")) if not p.name.startswith("_")]


def lex(path: Path | Source) -> list[tuple[int, str, str]]:
    env = jinja2.Environment()
    return list(env.lex(path.read_text(encoding="utf-8")))


def typed_numbers(path: Path) -> list[str]:
    """Digits in prose (template text or string literals) and numeric literals in expressions.

    Allowed: percentile names (p50), ledger keys, list indices 0 and 1, and `digits=N`
    (how many decimals to print is formatting, not a number of the report).
    """
    bad = []
    toks = [t for t in lex(path) if t[1] != "whitespace"]
    for i, (lineno, kind, value) in enumerate(toks):
        if kind in ("data", "string"):
            text = value[1:-1] if kind == "string" else value
            if kind == "string" and re.fullmatch(r"[a-z0-9_.]+", text):
                continue  # a ledger key or a point-quantity suffix is a name, not prose
            if re.search(r"[0-9]", ALLOWED.sub("", text)):
                bad.append(f"{path.name}:{lineno}: {text.strip()[:60]!r}")
        elif kind in ("integer", "float"):
            is_digits_kw = i >= 2 and toks[i - 1][2] == "=" and toks[i - 2][2] == "digits"
            if value not in ALLOWED_LITERALS and not is_digits_kw:
                bad.append(f"{path.name}:{lineno}: numeric literal {value}")
    return bad


def key_literals(path: Path) -> set[str]:
    """String literals that name ledger keys (full keys or point-quantity suffixes)."""
    toks = [(k, v) for _, k, v in lex(path) if k not in ("whitespace",)]
    out = set()
    for i, (kind, value) in enumerate(toks):
        if kind != "string":
            continue
        # Find the call this literal is an argument of: walk back over `name ~` and `(`.
        j = i - 1
        while j >= 0 and toks[j][0] in ("name", "tilde", "operator", "string") and toks[j][1] not in ("(", ","):
            j -= 1
        if j >= 1 and toks[j][1] == "(" and toks[j - 1][0] == "name" and toks[j - 1][1] in NUMBER_FUNCS:
            name = value[1:-1]
            # "p." ~ point ~ ".x": the prefix is not a key; nor is an empty string (an `else ""`)
            if name and not name.endswith("."):
                out.add(name.lstrip("."))
    return out


@pytest.mark.parametrize("lang", LANGS)
def test_no_number_is_typed_into_a_template(lang):
    bad = [b for p in sections(lang) for b in typed_numbers(p)]
    assert not bad, "numbers typed by hand:\n" + "\n".join(bad)


def test_scanner_catches_typed_numbers(tmp_path):
    p = tmp_path / "x.md.j2"
    p.write_text('Throughput was 1,234 tok/s; {{ n("r.failed") }} failed {% if v("a").value > 0.1 %}x{% endif %}')
    bad = typed_numbers(p)
    assert len(bad) == 2, bad


def test_both_languages_have_the_same_sections_and_keys():
    zh = {p.name: key_literals(p) for p in sections("zh")}
    en = {p.name: key_literals(p) for p in sections("en")}
    assert zh.keys() == en.keys()
    for name in zh:
        assert zh[name] == en[name], f"{name}: zh-only {zh[name] - en[name]}, en-only {en[name] - zh[name]}"
        # These sections print findings and tables, whose sentences and cells cite the keys.
        assert zh[name] or name in ("next.md.j2", "results.md.j2", "sets.md.j2", "peers.md.j2"), f"{name} names no ledger key"


def test_a_section_is_one_template_whose_prose_is_the_catalogues():
    from report.publish.render.templating import PROSE
    from report.words import section
    en, zh = section("prose", "en"), section("prose", "zh")
    assert en.keys() == zh.keys() and len(en) > 100
    used = {m.group(1) for p in TEMPLATES.glob("*.md.j2") for m in PROSE.finditer(p.read_text())}
    assert used == en.keys(), (sorted(en.keys() - used), sorted(used - en.keys()))
    assert not list(TEMPLATES.glob("*/*.md.j2")), "a section template per language"
    for key in en:
        # control flow is the template's, the same for every language
        assert "{%" not in en[key] + zh[key], key
        # the same numbers in both languages, so a page's ids are the same in both (how each
        # prints may differ: a Chinese count is followed by its measure word, not a unit)
        assert sorted(CITED.findall(en[key])) == sorted(CITED.findall(zh[key])), key
