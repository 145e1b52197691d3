"""The provenance of a page's numbers: what each value is (its meaning in the page's language),
each id's entry (its value, inputs, sources and why it is absent), the pop-up of a number
(HTML) and the appendix that lists every id, grouped by the section that first shows it."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from markupsafe import Markup

from report.ledger import Source, Value, quantity_name
from report.publish.numbers import Format, format_parts, format_value, missing_reason, raw_text
from report.words import has, word

_HEADING = re.compile(r"<h2[^>]*>(.*?)</h2>", re.S)
_TAG = re.compile(r"<[^>]+>")
INPUTS = "\0inputs"   # the appendix group of ids no section shows


def source_file(src: Source | str) -> str:
    """The bundle file a source names, without which of its records ("round-4/metrics.jsonl.gz")."""
    return src.file if isinstance(src, Source) else str(src).split(":", 1)[0]


def heading_text(html: str) -> str:
    """A rendered section's first heading without its markup ("" when it has none)."""
    m = _HEADING.search(str(html))
    return _TAG.sub("", m.group(1)).strip() if m else ""


_N_VALUES = re.compile(r"^(\d+) values$")   # how Ledger.derive describes a list input
_N_FIELDS = re.compile(r"^(\d+) fields$")   # ... and a mapping input (a model config)


def quantity_code(value: Value) -> str:
    """The catalogue code of VALUE's meaning: its quantity function as the ledger records it,
    less its package and stage ("report.derive.stats.samples.mean" -> "stats.samples.mean"), or for a value read directly, "observed." and its key with the
    point id written "*"."""
    if value.func == "observed":
        parts = value.key.split(".")
        if parts[0] in ("p", "x") and len(parts) >= 3:
            parts[1] = "*"
        return "quantity.observed." + ".".join(parts)
    return "quantity." + quantity_name(value.func)


def meaning(value: Value, lang: str) -> str:
    """What VALUE is, in one line of LANG: the docstring's first line (or the doc recorded with
    it) in English, the catalogue's text in other languages. A value whose function has no text
    yet falls back to English (tests/unit/report/test_words_labels.py holds every committed round to it)."""
    code = quantity_code(value)
    if lang != "en" and has(code, lang):
        return word(code, lang)
    return value.doc


def _input_words(desc: str, lang: str) -> str:
    """An input that is not a ledger key, as described at derive time, in LANG."""
    m = _N_VALUES.match(desc)
    if m:
        return word("label.n_values", lang, n=int(m.group(1)))
    m = _N_FIELDS.match(desc)
    return word("label.n_fields", lang, n=int(m.group(1))) if m else desc


class Provenance:
    """Each id's entry, a number's pop-up and the appendix of a page assembled for one mode
    (report.publish.render.assembly.Assembly: its page, mode, lang, words, report, macros,
    ids, shown, section_of, first_fmt and pop-up cache)."""

    def _inputs(self, value: Value) -> list[tuple[str, str, str | None, str]]:
        """(name, description, id or None, formatted value) per input."""
        out = []
        for name, desc in value.inputs:
            if desc in self.report.ledger:
                iv = self.report.ledger[desc]
                out.append((name, desc, self.ids.get(desc), format_value(iv, self.lang)))
            else:
                out.append((name, _input_words(desc, self.lang), None, ""))
        return out

    def entry(self, key: str) -> dict[str, Any]:
        value = self.report.ledger[key]
        observed = value.func == "observed"
        # as the reader first saw it, but always with its unit (table cells print theirs
        # in the column header)
        fmt = dataclasses.replace(self.first_fmt.get(key, Format()), unit=True)
        text, _ = format_parts(value, self.lang, fmt, short_missing=True)
        raw = raw_text(value)
        try:
            raw_differs = float(text.replace(",", "").lstrip("+")) != float(raw)
        except ValueError:
            raw_differs = False
        return {
            "id": self.ids[key], "key": key, "text": format_value(value, self.lang, fmt),
            "short": format_value(value, self.lang, fmt, short_missing=True),
            "raw": raw, "raw_differs": raw_differs, "unit": value.unit, "doc": meaning(value, self.lang),
            "func": value.func.removeprefix("serving_ledger."), "observed": observed,
            "func_short": quantity_name(value.func),
            "inputs": self._inputs(value), "sources": [src.text(self.lang) if isinstance(src, Source) else src for src in value.sources], "flags": value.flags,
            "files": list(dict.fromkeys(source_file(src) for src in value.sources if source_file(src))),
            "missing": self._reason(value),
            "input_only": key not in self.shown,
        }

    def _reason(self, value) -> str:
        """Why VALUE is absent, in the page's language ("" when it is present)."""
        reason = missing_reason(value)
        return reason.text(self.lang) if reason else ""

    def popup(self, key: str) -> Markup:
        if key not in self._pop_cache:
            self._pop_cache[key] = self.macros.popup(e=self.entry(key))
        return self._pop_cache[key]

    def appendix(self) -> Markup:
        """Every id's entry, grouped by the section that first shows it (in the page's order),
        then the inputs that no section shows."""
        titles = {s.name: heading_text(s.html) for s in self.page.sections}
        groups: dict[str, list[dict[str, Any]]] = {}
        told: set[str] = set()   # quantities whose meaning an earlier entry of the print appendix gave
        for k in self.ids:
            e = self.entry(k)
            quantity = k.split(".", 2)[2] if k.startswith("p.") and k.count(".") >= 2 else k
            if self.mode == "pdf" and quantity in told:
                e = {**e, "doc": ""}
            told.add(quantity)
            # shown outside every section (a notice): first, under no heading; inputs last
            groups.setdefault(self.section_of.get(k, "") if k in self.shown else INPUTS, []).append(e)
        ordered = [("", groups[""])] if "" in groups else []
        ordered += [(Markup(titles[s.name]), groups[s.name]) for s in self.page.sections if s.name in groups]
        if INPUTS in groups:
            ordered.append((self.words["appendix_inputs"], groups[INPUTS]))
        return self.macros.appendix(groups=ordered)
