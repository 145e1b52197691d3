"""The catalogue of words: every text the report prints that is not a number, per language.

Texts live in package data, one TOML file per section and language
(`report/data/words/<section>.<lang>.toml`), each a flat table from a code to a text with
`{name}` fields. A code is `<section>.<key>`. Invariant (tests/unit/report/test_words.py): every code has
a text in every language, every field a text uses is given, and every text is used.
"""

from __future__ import annotations

import re
import string
import tomllib
from functools import cache
from importlib import resources
from typing import Any

# Every language of the pages, the first the primary one (the seeds' language): its page is
# the site's default.
LANGS = ("zh", "en")
# A traced number inside a sentence: `[[ledger.key]]`, or `[[ledger.key|SPEC]]` with SPEC pct,
# spct (signed %), pct0 (whole %) or int (a count, no unit). Pages print it traced, text as text.
PLACEHOLDER = re.compile(r"\[\[([^\]|]+)(?:\|(pct|pct0|spct|int|why))?\]\]")
SECTIONS = ("reason", "label", "quantity", "source", "finding", "prose")
# Chinese runs on without spaces: a space between two CJK characters or full-width marks is a
# leftover of joining sentences or filling a slot (the catalogue spaces a slot from Chinese, as
# from a Latin word: "由 {limit} 决定"), never a word break, and a reader sees it ("两个 直方图",
# "。 拐点"). One rule for every text printed: the pages' (publish.render.text.close_cjk_gaps) and
# the command line's (`closed`).
CJK = r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]"
# Full-width punctuation carries its own spacing: no space beside it, whatever stands on the
# other side ("N2。 C=64" reads "N2。C=64", "（随机权重， --load-format dummy ）" closes up).
PUNCT = r"[\u3001\u3002\u300c-\u300f\uff01\uff08\uff09\uff0c\uff1a\uff1b\uff1f]"


def cjk_gap(unseen: str = "") -> re.Pattern:
    """Spaces between two Chinese characters or beside a full-width mark, with UNSEEN (a pattern
    of what a reader does not see, e.g. markup) on either side of them kept as groups 1 and 2."""
    gap = rf"(?:{unseen})[ \t]+(?:{unseen})"
    return re.compile(rf"(?:(?<={PUNCT})|(?<={CJK})(?={gap}{CJK})|(?={gap}{PUNCT}))({unseen})[ \t]+({unseen})")


_CJK_GAP = cjk_gap()


def closed(text: str) -> str:
    """Plain TEXT with no space left between two Chinese characters (a slot that holds Chinese
    reads as one run with the words beside it); a space beside a Latin word or number stays."""
    return _CJK_GAP.sub(r"\1\2", text)


class WordError(KeyError):
    """A code has no text in a language, or a text's field was not given."""


@cache
def section(name: str, lang: str) -> dict[str, str]:
    """The texts of one section in one language (code key without the section prefix)."""
    if name not in SECTIONS or lang not in LANGS:
        raise WordError(f"no catalogue {name}.{lang}")
    path = resources.files("report").joinpath(f"data/words/{name}.{lang}.toml")
    if not path.is_file():
        return {}
    return tomllib.loads(path.read_text(encoding="utf-8"))


def fields_of(text: str) -> set[str]:
    """The `{name}` fields a text fills."""
    return {f for _, f, _, _ in string.Formatter().parse(text) if f}


def has(code: str, lang: str) -> bool:
    """Whether CODE has a text in LANG."""
    name, _, key = code.partition(".")
    return name in SECTIONS and key in section(name, lang)


class Named(str):
    """A name with its form in each language (a point's "set 1" is 配置 1 on a Chinese page);
    as a plain str it is its English form. word() and the pages print the form of their language."""

    langs: dict[str, str]

    def __new__(cls, langs: dict[str, str]) -> "Named":
        obj = super().__new__(cls, langs["en"])
        obj.langs = dict(langs)
        return obj

    def __reduce__(self):
        return (Named, (self.langs,))


def in_lang(value: Any, lang: str) -> Any:
    """VALUE's form in LANG where it is a Named, VALUE itself otherwise."""
    return value.langs.get(lang, str(value)) if isinstance(value, Named) else value


def word(code: str, lang: str, **params: Any) -> str:
    """The text of CODE in LANG with its fields filled from PARAMS."""
    name, _, key = code.partition(".")
    texts = section(name, lang)
    if key not in texts:
        raise WordError(f"{code!r} has no {lang} text in report/data/words/{name}.{lang}.toml")
    text = texts[key]
    missing = fields_of(text) - params.keys()
    if missing:
        raise WordError(f"{code!r} ({lang}) needs {sorted(missing)}")
    return text.format(**{k: in_lang(v, lang) for k, v in params.items()})


def group(prefix: str, lang: str) -> dict[str, str]:
    """The texts of LANG whose code starts with PREFIX (e.g. "label.fig_"), keyed by the rest.

    For a module that looks its words up by name in a table of its own (figure axes, the
    planner's labels); a name is in use when the owning module spells it out.
    """
    name, _, head = prefix.partition(".")
    return {k[len(head):]: v for k, v in section(name, lang).items() if k.startswith(head)}


def listed(items: list[str], lang: str) -> str:
    """ITEMS joined as a list is written in LANG ("a, b" / "a、b")."""
    return word("label.list_sep", lang).join(items)


def round_name(round_id: str, lang: str) -> str:
    """A round as a page names it in LANG ("Round 4", 第 4 轮), its id where it is not
    `round-<n>`."""
    number = re.fullmatch(r"round-(\d+)", round_id)
    return word("label.round_name", lang, n=number.group(1)) if number else round_id
