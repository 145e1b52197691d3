"""One round in one language as a page: its sections rendered once from their templates, each
number, figure, table, reference and card a placeholder (report.publish.render.text), then
assembled per mode (report.publish.render.assembly).

Narrative sections are `templates/{section}.md.j2`, one per section for every language: the
control flow and the numbers' calls are the template's, each `{@key@}` a fragment of prose the
catalogue holds per language (`prose.<key>`, report/data/words/prose.<lang>.toml), put in
before jinja2 compiles it. Then jinja2 (autoescaped) and markdown-it. Everything a template prints through `{{ }}` is swapped for a placeholder
before markdown runs, so markdown can neither mangle our markup nor interpret a fact
(a model name) as markup.
"""

from __future__ import annotations

import numbers
import re
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from report.ledger import Value
from report.publish.document import RoundReport
from report.publish.numbers import Format, absent, format_value
from report.publish.render.assembly import Assembly
from report.publish.render.templating import TEMPLATES_DIR, RenderError, SectionLoader
from report.publish.render.text import markdown, ph
from report.words import LANGS, group, in_lang, word

MODES = ("html", "pdf")
# The page's words (headings, appendix labels, link names): `label.page_*` in the catalogue.
WORDS = {lang: group("label.page_", lang) for lang in LANGS}


@dataclass
class _NumUse:
    key: str
    fmt: Format
    where: str  # "prose", "cell" or "card"


@dataclass
class _Block:
    kind: str           # "figure", "table", "cards"
    ref: str            # figure/table id
    payload: Any = None


@dataclass
class _Card:
    key: str
    num: Markup
    label: Any
    note: Any
    missing: str = ""  # filled at assembly: the reason, when the value is absent

    def __html__(self) -> str:
        raise RenderError("print cards with {{ cards(card(...), card(...)) }}")


@dataclass
class RenderedSection:
    name: str
    html: Markup


@dataclass
class Page:
    """One round in one language: sections rendered once, assembled per mode."""

    report: RoundReport
    lang: str
    templates_dir: Path = TEMPLATES_DIR
    texts: list[str] = field(default_factory=list)
    uses: list[_NumUse] = field(default_factory=list)
    keyrefs: list[tuple[str, ...]] = field(default_factory=list)
    blocks: list[_Block] = field(default_factory=list)
    refs: list[tuple[str, str]] = field(default_factory=list)   # (kind, id)
    sections: list[RenderedSection] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.lang not in WORDS:
            raise RenderError(f"unknown language {self.lang!r}")
        self.words = WORDS[self.lang]
        self._placed: dict[tuple[str, str], int] = {}  # (kind, id); figures and tables
        # are separate namespaces, so a figure and a table may share an id
        self._md = markdown()
        self.env = self._section_env()
        self.sections = [self._render_section(name) for name in self.report.sections]

    # -- template side -----------------------------------------------------------------

    def _finalize(self, value: Any) -> Any:
        if hasattr(value, "__html__"):
            return value
        value = in_lang(value, self.lang)   # a Named (a point's name) in the page's language
        if value is None:
            raise RenderError("a template printed None; test for it or use n() for ledger values")
        if isinstance(value, Value):
            raise RenderError(f"a template printed the Value {value.key!r}; use n({value.key!r})")
        if isinstance(value, numbers.Number) and not isinstance(value, bool):
            raise RenderError(f"a template printed the bare number {value!r}; numbers come from "
                              "the ledger through n(key) so they are formatted and traced")
        self.texts.append(str(value))
        return ph("t", len(self.texts) - 1)

    def _section_env(self) -> jinja2.Environment:
        env = jinja2.Environment(
            loader=SectionLoader(self.templates_dir, self.lang),
            autoescape=True, undefined=jinja2.StrictUndefined, finalize=self._finalize,
            trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
        )
        env.filters["code"] = self._code
        env.globals.update(
            n=self.n, c=self.c, why=self.why, span=self.span, v=self.v, has=self.has, say=self.say, w=self.w, fig=self.fig, table=self.table, ref=self.ref,
            card=self.card, cards=self.cards,
            facts=self.report.facts, notices=self.report.notices, lang=self.lang,
        )
        return env

    def _code(self, value: Any) -> Markup:
        """`{{ x|code }}`: a fact as inline code (escaped, never read as markdown)."""
        self.texts.append(str(value))
        return Markup("<code>") + ph("t", len(self.texts) - 1) + Markup("</code>")

    def value(self, key: str) -> Value:
        try:
            return self.report.ledger[key]
        except KeyError:
            raise RenderError(f"no ledger key {key!r} (round {self.report.round_id}, "
                              f"{self.lang})") from None

    def w(self, code: str, **fields: Any) -> str:
        """A catalogue word in the page's language (a label whose code the data names)."""
        return word(code, self.lang, **fields)

    def v(self, key: str) -> Value:
        """The raw Value, for conditions in templates."""
        return self.value(key)

    def has(self, key: str) -> bool:
        """Whether the ledger holds KEY with a value: a condition on a key some rounds do not
        record at all (a figure's caption at the ends of a sweep)."""
        return key in self.report.ledger and self.report.ledger[key].present

    def _use(self, key: str, fmt: Format, where: str) -> Markup:
        value = self.value(key)
        try:  # check the format now so the error names the template line
            format_value(value, self.lang, fmt)
        except ValueError as e:
            raise RenderError(str(e)) from None
        self.uses.append(_NumUse(key, fmt, where))
        return ph("n", len(self.uses) - 1)

    def n(self, key: str, digits: int | None = None, pct: bool = False, unit: bool = True,
          sign: bool = False) -> Markup:
        """A formatted, traced number (or the reason it is absent)."""
        return self._use(key, Format(digits, pct, unit, sign), "prose")

    def c(self, key: str, digits: int | None = None, pct: bool = False, unit: bool = True,
          sign: bool = False) -> Markup:
        """A traced number for a table cell: an absent value prints short, its reason in the
        appendix."""
        return self._use(key, Format(digits, pct, unit, sign), "cell")

    def why(self, key: str) -> Markup:
        """Why an absent value is absent, in words, traced to it (no "not measured" mark): for a
        sentence whose subject is the absence; a present value is a template error."""
        if not absent(self.value(key)):
            raise RenderError(f"why({key!r}): the value is present; print it with n()")
        return self._use(key, Format(), "why")

    def span(self, lo: str, hi: str, digits: int | None = None, pct: bool = False,
             sign: bool = False) -> Markup:
        """A range of two traced numbers, one number when both print the same."""
        fmt = Format(digits, pct, True, sign)
        a, b = self.value(lo), self.value(hi)
        if format_value(a, self.lang, fmt) == format_value(b, self.lang, fmt):
            return self.n(lo, digits, pct, sign=sign)
        return (self.n(lo, digits, pct, sign=sign) + self._finalize(word("label.range_to", self.lang))
                + self.n(hi, digits, pct, sign=sign))

    def say(self, text: str) -> Markup:
        """A finding's sentence: its text as text, each [[key|pct]] as a traced number."""
        from report.publish.numbers import placeholder_format
        from report.words import PLACEHOLDER
        out, at = [], 0
        for m in PLACEHOLDER.finditer(text):
            if m.start() > at:
                out.extend(self._prose(text[at:m.start()]))
            fmt = placeholder_format(m.group(2))
            if m.group(2) == "why":
                out.append(self.why(m.group(1)))
            else:
                out.append(self.n(m.group(1), pct=fmt.pct, digits=fmt.digits, unit=fmt.unit, sign=fmt.sign))
            at = m.end()
        if at < len(text):
            out.extend(self._prose(text[at:]))
        return Markup("").join(out)

    def _prose(self, text: str) -> list[Markup]:
        """Text of a sentence as text, its `backticked` spans (flags, names) as inline code."""
        parts = re.split(r"`([^`]+)`", text)
        return [self._code(p) if i % 2 else self._finalize(p) for i, p in enumerate(parts) if p]

    def _block(self, block: _Block) -> Markup:
        self.blocks.append(block)
        return ph("b", len(self.blocks) - 1)

    def _place(self, kind: str, ref: str) -> None:
        if (kind, ref) in self._placed:
            raise RenderError(f"{kind} {ref!r} placed twice on one page")
        self._placed[(kind, ref)] = len(self.blocks)

    def fig(self, fig_id: str, caption: Markup | None = None) -> Markup:
        """Place a figure: interactive chart (HTML) or static SVG (PDF), with its caption: CAPTION,
        the sentence its section renders of what the figure shows (`{% set cap %}...{% endset %}`),
        else the figure's own (report/publish/captions.py: a sentence citing [[key]], printed by say)."""
        figure = self.report.figures.get(fig_id)
        if figure is None:
            raise RenderError(f"no figure {fig_id!r} in round {self.report.round_id}")
        if self.lang not in figure.specs:
            raise RenderError(f"figure {fig_id!r} has no {self.lang} spec")
        self._place("figure", fig_id)
        said, caption = caption, Markup("")
        if said is not None and str(said).strip():
            caption = Markup(self._md.renderInline(str(said).strip()))
        elif figure.caption.get(self.lang):
            caption = self.say(figure.caption[self.lang])
        keys = self._keyref_list(figure.keys)
        return self._block(_Block("figure", fig_id, {"caption": caption, "keys": keys}))

    def _keyref_list(self, keys: tuple[str, ...]) -> Markup:
        """Ids of KEYS as links, sorted and with runs shortened (N2, N9–N14), once known."""
        for k in keys:
            self.value(k)
        if not keys:
            return Markup("")
        self.keyrefs.append(tuple(dict.fromkeys(keys)))
        return ph("k", len(self.keyrefs) - 1)

    def table(self, table_id: str) -> Markup:
        """Place a table; every cell is a ledger key printed through the same number markup."""
        t = self.report.tables.get(table_id)
        if t is None:
            raise RenderError(f"no table {table_id!r} in round {self.report.round_id}")
        self._place("table", table_id)
        rows = []
        for r, row in enumerate(t.rows):
            if len(row) != len(t.columns):
                raise RenderError(f"table {table_id!r} row {r} has {len(row)} cells, "
                                  f"{len(t.columns)} columns")
            cells = []
            for col, key in zip(t.columns, row):
                if key is None:
                    cells.append(None)
                    continue
                value = self.value(key)
                pct = col.unit == "%" and value.unit != "%" and isinstance(value.value, numbers.Real)
                cells.append(self._use(key, Format(col.digits, pct, unit=not col.unit), "cell"))
            label = t.row_labels[r].get(self.lang, "") if r < len(t.row_labels) else ""
            rows.append((label, cells))
        return self._block(_Block("table", table_id, {"rows": rows}))

    def ref(self, target_id: str, kind: str | None = None) -> Markup:
        """"图 2" / "Figure 2" (or "表 1"), a link; forward references work.

        KIND ("figure" or "table") is needed only when a figure and a table share the id."""
        kinds = [k for k, d in (("figure", self.report.figures), ("table", self.report.tables))
                 if target_id in d and kind in (None, k)]
        if not kinds:
            raise RenderError(f"ref({target_id!r}): no such {kind or 'figure or table'}")
        if len(kinds) > 1:
            raise RenderError(f"ref({target_id!r}): both a figure and a table have this id; "
                              "say ref(id, \"figure\") or ref(id, \"table\")")
        self.refs.append((kinds[0], target_id))
        return ph("r", len(self.refs) - 1)

    def card(self, key: str, label: str, note: str = "", digits: int | None = None,
             pct: bool = False, sign: bool = False) -> _Card:
        """One headline card: a label, a big number, a note (give to cards())."""
        return _Card(key, self._use(key, Format(digits, pct, True, sign), "card"), label, note)

    def cards(self, *items: _Card) -> Markup:
        """A row of headline cards."""
        if not all(isinstance(c, _Card) for c in items):
            raise RenderError("cards() takes card(...) items")
        return self._block(_Block("cards", "", list(items)))

    def _render_section(self, name: str) -> RenderedSection:
        path = f"{name}.md.j2"
        try:
            src = self.env.get_template(path).render()
        except jinja2.TemplateNotFound:
            raise RenderError(f"section {name!r}: no template {path}") from None
        except (jinja2.UndefinedError, RenderError) as e:
            # jinja rewrites tracebacks so template frames carry the template's own lines
            lines = [f.lineno for f in traceback.extract_tb(e.__traceback__)
                     if f.filename.replace("\\", "/").endswith(path)]
            where = f"{path}:{lines[-1]}" if lines else path
            raise RenderError(f"{where} ({self.lang}): {e}") from e
        return RenderedSection(name, Markup(self._md.render(src)))

    # -- assembly ----------------------------------------------------------------------

    def assemble(self, mode: str, svgs: dict[str, str] | None = None,
                 links: dict[str, str] | None = None, part: str = "review") -> str:
        """The whole page for MODE ("html" or "pdf"); PDF mode needs each figure's SVG and prints
        PART: "review" (the sections) or "audit" (the provenance of every number)."""
        if mode not in MODES:
            raise RenderError(f"unknown mode {mode!r}")
        return Assembly(self, mode, svgs or {}, links or {}, part).run()
