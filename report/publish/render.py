"""Render one RoundReport in one language to a self-contained HTML page or a PDF.

Narrative sections are `templates/{section}.md.j2`, one per section for every language: the
control flow and the numbers' calls are the template's, each `{@key@}` a fragment of prose the
catalogue holds per language (`prose.<key>`, report/data/words/prose.<lang>.toml), put in
before jinja2 compiles it. Then jinja2 (autoescaped) and markdown-it. Everything a template prints through `{{ }}` is swapped for a placeholder
before markdown runs, so markdown can neither mangle our markup nor interpret a fact
(a model name) as markup; placeholders are resolved after markdown, in document order:

  blocks (figures, tables, cards) -> figure/table numbers -> references -> number ids
  (N1, N2, ... in reading order, then the inputs they were derived from) -> appendix ->
  number markup -> escaped text.

HTML and PDF are assembled from the same rendered sections, so a number has the same id
in the popup (HTML), the superscript (PDF) and the provenance appendix (both).
"""

from __future__ import annotations

import base64
import bisect
import copy
import dataclasses
import functools
import hashlib
import json
import numbers
import re
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from markdown_it import MarkdownIt
from markupsafe import Markup, escape

from bundle.textsafety import neutralise_controls
from report.ledger import Source, Value, quantity_name
from report.publish.document import RoundReport
from report.publish.numbers import (
    Format,
    absent,
    format_parts,
    format_value,
    missing_reason,
    raw_text,
    unit_heading,
)
from report.words import CJK, LANGS, cjk_gap, group, has, in_lang, section, word


def templates_dir() -> Path:
    """The narrative templates: templates/ beside the package in a checkout, else the copy
    installed as package data `report.templates` (pyproject maps one onto the other)."""
    package = Path(__file__).resolve().parents[1]      # report/
    checkout = package.parent / "templates"
    if (checkout / "base.html.j2").is_file():
        return checkout
    return package / "templates"


TEMPLATES_DIR = templates_dir()
# A fragment of prose in a section template: `{@key@}`, the catalogue's `prose.<key>`.
PROSE = re.compile(r"\{@([a-z0-9_]+)@\}")


def section_source(templates: Path, name: str, lang: str) -> str:
    """Section NAME's template in LANG: templates/NAME.md.j2 with each `{@key@}` replaced by
    the catalogue's fragment (jinja, so filled as it is, not as a `{field}` text)."""
    texts = section("prose", lang)

    def fragment(m: re.Match) -> str:
        if m.group(1) not in texts:
            raise RenderError(f"{name}.md.j2: prose.{m.group(1)} has no {lang} text "
                              f"in report/data/words/prose.{lang}.toml")
        return texts[m.group(1)]
    return PROSE.sub(fragment, (templates / f"{name}.md.j2").read_text(encoding="utf-8"))


class _SectionLoader(jinja2.BaseLoader):
    """Section templates in one language, their prose put in from the catalogue."""

    def __init__(self, templates: Path, lang: str) -> None:
        self.templates, self.lang = templates, lang

    def get_source(self, environment: jinja2.Environment, template: str):
        path = self.templates / template
        if not path.is_file():
            raise jinja2.TemplateNotFound(template)
        mtime = path.stat().st_mtime
        return (section_source(self.templates, template.removesuffix(".md.j2"), self.lang),
                str(path), lambda: path.stat().st_mtime == mtime)
FONT_STACK = "Noto Sans CJK SC, WenQuanYi Micro Hei, sans-serif"
HTML_LANG = {"zh": "zh-CN", "en": "en"}
MODES = ("html", "pdf")
# A table of at most this many rows fits on one A4 page of the PDF, so it is never split
# (print.css: .table-short); a longer one breaks between rows and repeats its header row.
SHORT_TABLE_ROWS = 24

# Placeholders use private-use characters that markdown treats as plain text.
_PH = re.compile("\ue000([a-zA-Z])(\\d*)\ue001")
_BLOCK_P = re.compile("<p>\\s*(\ue000b\\d+\ue001)\\s*</p>")


def _ph(kind: str, i: int | str = "") -> Markup:
    return Markup(f"\ue000{kind}{i}\ue001")


APPENDIX_PH = "\ue000A\ue001"
# Where each section of the assembled page begins (templates/base.html.j2).
_SECTION_START = re.compile(r'<section class="section" id="sec-([\w-]+)">')
_HEADING = re.compile(r"<h2[^>]*>(.*?)</h2>", re.S)
_TAG = re.compile(r"<[^>]+>")
INPUTS = "\0inputs"   # the appendix group of ids no section shows


_TD = re.compile(r"(<t[dh]\b[^>]*>)(.*?)(</t[dh]>)", re.S)   # body cells and headings
_CJK_RUN = re.compile(r"[\u3400-\u9fff]{2,}")
_TAG_SPLIT = re.compile(r"(<[^>]+>)")


def _cjk_words_whole(m: re.Match) -> str:
    """A table cell or heading whose runs of Chinese characters each stay on one line: a narrow cell
    breaks at the spaces and punctuation between them, never inside one ("显/存")."""
    parts = _TAG_SPLIT.split(m.group(2))
    body = "".join(p if p.startswith("<") else _CJK_RUN.sub(r'<span class="nobr">\g<0></span>', p)
                   for p in parts)
    return m.group(1) + body + m.group(3)


# A page closes the catalogue's gaps between two Chinese characters (report.words.cjk_gap, the
# rule the command line's plain text follows too) through what a reader does not see.
# What a reader does not see between two words: tags, a number's pop-up (templates/macros.j2:
# it ends with its "see" line; pop-ups do not nest) and, in the PDF, a number's id. A missing
# value in words ("未测得：…") is a Chinese word followed by either.
_POPUP = re.compile(r'<span class="pop" role="tooltip">.*?<span class="pop-see">[^<]*</span></span>', re.S)
_HELD = "\ue010{}\ue011"   # a pop-up set aside while the gaps close (private-use marks)
_UNSEEN = r'(?:<[^>]+>|\ue010\d+\ue011|<sup class="nid"><a [^>]*>[^<]*</a></sup>)*'
_CJK_GAP = cjk_gap(_UNSEEN)
_CJK_BREAK = re.compile(rf"(?<={CJK})[ \t]*\n[ \t]*(?={CJK})")
# Where text is kept as written: scripts, styles and preformatted blocks (inline code is not
# one of them: a number's pop-up holds code, and the gap after it must close).
_VERBATIM = re.compile(r"(<(script|style|pre)\b.*?</\2>)", re.S)


def _closed(text: str) -> str:
    """TEXT (no script, style or pre in it) with its gaps between Chinese characters closed."""
    held: list[str] = []

    def hold(m: re.Match) -> str:
        held.append(m.group(0))
        return _HELD.format(len(held) - 1)
    text = _CJK_BREAK.sub("", _CJK_GAP.sub(r"\1\2", _POPUP.sub(hold, text)))
    return re.sub("\ue010(\\d+)\ue011", lambda m: held[int(m.group(1))], text)


def close_cjk_gaps(html: str) -> str:
    """HTML with no space (or line break) left between two Chinese characters of its text."""
    parts = _VERBATIM.split(html)
    # split yields text, element, tag name, text, ...: only the text parts are closed up
    return "".join(_closed(p) if i % 3 == 0 else p for i, p in enumerate(parts) if i % 3 != 2)


def _source_file(src: Source | str) -> str:
    """The bundle file a source names, without which of its records ("round-4/metrics.jsonl.gz")."""
    return src.file if isinstance(src, Source) else str(src).split(":", 1)[0]


def _heading_text(html: str) -> str:
    """A rendered section's first heading without its markup ("" when it has none)."""
    m = _HEADING.search(str(html))
    return _TAG.sub("", m.group(1)).strip() if m else ""

# The page's words (headings, appendix labels, link names): `label.page_*` in the catalogue.
WORDS = {lang: group("label.page_", lang) for lang in LANGS}


_N_VALUES = re.compile(r"^(\d+) values$")   # how Ledger.derive describes a list input
_N_FIELDS = re.compile(r"^(\d+) fields$")   # ... and a mapping input (a model config)


def quantity_code(value: Value) -> str:
    """The catalogue code of VALUE's meaning: its quantity function as the ledger records it,
    less its package and stage ("report.derive.stats.mean" -> "stats.mean"), or for a value read directly, "observed." and its key with the
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


class RenderError(Exception):
    """A template or a report cannot be rendered; the message says which and why."""


# ---------------------------------------------------------------------------------------
# Figures


def _walk(obj: Any):
    if isinstance(obj, dict):
        yield obj
        for v in obj.values():
            yield from _walk(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _walk(v)


def prepare_spec(fig_id: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A copy of a Vega-Lite spec fit to embed: inline data only, our font, no $schema URL."""
    spec = copy.deepcopy(spec)
    for d in _walk(spec):
        data = d.get("data")
        if isinstance(data, dict) and "url" in data:
            raise RenderError(f"figure {fig_id!r} loads data from {data['url']!r}; inline the values")
    spec.pop("$schema", None)  # vegaEmbed is told mode "vega-lite"; keeps URLs out of the page
    config = spec.setdefault("config", {})
    config.setdefault("font", FONT_STACK)
    return spec


def spec_json(spec: dict[str, Any]) -> str:
    """Deterministic JSON safe inside a <script> element."""
    s = json.dumps(spec, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return (s.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


@functools.lru_cache(maxsize=512)
def _svg_cached(spec_text: str) -> str:
    import vl_convert

    return vl_convert.vegalite_to_svg(json.loads(spec_text))


def figure_svg(fig_id: str, spec: dict[str, Any]) -> str:
    """Static SVG of a figure (vl-convert), font set so Chinese has glyphs."""
    prepared = prepare_spec(fig_id, spec)
    try:
        return _svg_cached(json.dumps(prepared, sort_keys=True))
    except Exception as e:  # vl-convert raises ValueError with the Vega-Lite message
        raise RenderError(f"figure {fig_id!r}: vl-convert failed: {e}") from e


@functools.lru_cache(maxsize=1)
def vega_bundle() -> str:
    """Vega, Vega-Lite and Vega-Embed as one inline script (about 0.9 MB)."""
    import vl_convert

    js = vl_convert.javascript_bundle()
    return re.sub(r"</(script)", r"<\\/\1", js, flags=re.I)


# ---------------------------------------------------------------------------------------
# Page state


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
        self._md = MarkdownIt("commonmark", {"html": True, "typographer": False})
        self._md.enable(["table", "strikethrough"])
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
        return _ph("t", len(self.texts) - 1)

    def _section_env(self) -> jinja2.Environment:
        env = jinja2.Environment(
            loader=_SectionLoader(self.templates_dir, self.lang),
            autoescape=True, undefined=jinja2.StrictUndefined, finalize=self._finalize,
            trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
        )
        env.filters["code"] = self._code
        env.globals.update(
            n=self.n, c=self.c, why=self.why, span=self.span, v=self.v, say=self.say, w=self.w, fig=self.fig, table=self.table, ref=self.ref,
            card=self.card, cards=self.cards,
            facts=self.report.facts, notices=self.report.notices, lang=self.lang,
        )
        return env

    def _code(self, value: Any) -> Markup:
        """`{{ x|code }}`: a fact as inline code (escaped, never read as markdown)."""
        self.texts.append(str(value))
        return Markup("<code>") + _ph("t", len(self.texts) - 1) + Markup("</code>")

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

    def _use(self, key: str, fmt: Format, where: str) -> Markup:
        value = self.value(key)
        try:  # check the format now so the error names the template line
            format_value(value, self.lang, fmt)
        except ValueError as e:
            raise RenderError(str(e)) from None
        self.uses.append(_NumUse(key, fmt, where))
        return _ph("n", len(self.uses) - 1)

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
        return _ph("b", len(self.blocks) - 1)

    def _place(self, kind: str, ref: str) -> None:
        if (kind, ref) in self._placed:
            raise RenderError(f"{kind} {ref!r} placed twice on one page")
        self._placed[(kind, ref)] = len(self.blocks)

    def fig(self, fig_id: str) -> Markup:
        """Place a figure: interactive chart (HTML) or static SVG (PDF), with caption."""
        figure = self.report.figures.get(fig_id)
        if figure is None:
            raise RenderError(f"no figure {fig_id!r} in round {self.report.round_id}")
        if self.lang not in figure.specs:
            raise RenderError(f"figure {fig_id!r} has no {self.lang} spec")
        self._place("figure", fig_id)
        caption = Markup("")
        if figure.caption.get(self.lang):
            src = self.env.from_string(figure.caption[self.lang]).render()
            caption = Markup(self._md.renderInline(src))
        keys = self._keyref_list(figure.keys)
        return self._block(_Block("figure", fig_id, {"caption": caption, "keys": keys}))

    def _keyref_list(self, keys: tuple[str, ...]) -> Markup:
        """Ids of KEYS as links, sorted and with runs shortened (N2, N9–N14), once known."""
        for k in keys:
            self.value(k)
        if not keys:
            return Markup("")
        self.keyrefs.append(tuple(dict.fromkeys(keys)))
        return _ph("k", len(self.keyrefs) - 1)

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
        return _ph("r", len(self.refs) - 1)

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
                 links: dict[str, str] | None = None) -> str:
        """The whole page for MODE ("html" or "pdf"); PDF mode needs each figure's SVG."""
        if mode not in MODES:
            raise RenderError(f"unknown mode {mode!r}")
        return _Assembly(self, mode, svgs or {}, links or {}).run()


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


@functools.lru_cache(maxsize=16)
def _static(templates_dir: Path, name: str) -> str:
    return (templates_dir / name).read_text(encoding="utf-8")


INIT_JS = """(function () {
  var root = document.documentElement;
  root.classList.add("js");
  var bad = [];
  document.addEventListener("securitypolicyviolation", function (e) {
    bad.push(e.violatedDirective + " " + (e.blockedURI || "inline"));
    root.setAttribute("data-csp-violations", bad.join("; "));
  });
  var failed = root.getAttribute("data-chart-failed") || "";
  // ast: Vega's expression interpreter, so the CSP needs no 'unsafe-eval'; the embed and
  // tooltip default styles would inject <style> elements the CSP refuses (report.css has them).
  var opts = {actions: false, renderer: "svg", mode: "vega-lite", ast: true, defaultStyle: false,
              tooltip: {disableDefaultStyle: true}};
  var specs = document.querySelectorAll("script.vl-spec");
  Array.prototype.forEach.call(specs, function (s) {
    var el = document.getElementById(s.getAttribute("data-target"));
    if (!el || typeof vegaEmbed !== "function") { return; }
    vegaEmbed(el, JSON.parse(s.textContent), opts).then(function () {
      el.setAttribute("data-rendered", "1");
    }).catch(function (err) {
      el.classList.add("chart-error");
      el.textContent = failed + String(err && err.message || err);
    });
  });
  var pop = document.getElementById("numpop");
  if (!pop) { return; }
  var current = null;
  function place(el) {
    var r = el.getBoundingClientRect();
    var w = pop.offsetWidth, h = pop.offsetHeight, m = 8;
    var left = Math.max(m, Math.min(r.left, window.innerWidth - w - m));
    var top = r.bottom + 6;
    if (top + h > window.innerHeight - m && r.top - h - 6 > m) { top = r.top - h - 6; }
    pop.style.left = left + "px";
    pop.style.top = top + "px";
  }
  function show(el) {
    var src = el.querySelector(".pop");
    if (!src) { return; }
    current = el;
    while (pop.firstChild) { pop.removeChild(pop.firstChild); }
    Array.prototype.forEach.call(src.childNodes, function (c) { pop.appendChild(c.cloneNode(true)); });
    pop.hidden = false;
    pop.classList.add("open");
    el.setAttribute("aria-describedby", "numpop");
    place(el);
  }
  function hide(el) {
    if (el && el !== current) { return; }
    if (current) { current.removeAttribute("aria-describedby"); }
    current = null;
    pop.hidden = true;
    pop.classList.remove("open");
  }
  function num(e) { return e.target && e.target.closest ? e.target.closest(".num") : null; }
  document.addEventListener("focusin", function (e) { var el = num(e); if (el) { show(el); } });
  document.addEventListener("focusout", function (e) { var el = num(e); if (el) { hide(el); } });
  document.addEventListener("mouseover", function (e) { var el = num(e); if (el && el !== current) { show(el); } });
  document.addEventListener("mouseout", function (e) {
    var el = num(e);
    if (el && !(e.relatedTarget && el.contains(e.relatedTarget)) && document.activeElement !== el) { hide(el); }
  });
  document.addEventListener("keydown", function (e) { if (e.key === "Escape") { hide(current); } });
  window.addEventListener("scroll", function () { if (current) { place(current); } }, {passive: true});
})();"""


class _Assembly:
    """Resolves a page's placeholders for one mode (see the module docstring for the order)."""

    def __init__(self, page: Page, mode: str, svgs: dict[str, str], links: dict[str, str]):
        self.page, self.mode, self.svgs, self.links = page, mode, svgs, links
        self.lang, self.words, self.report = page.lang, page.words, page.report
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(page.templates_dir)), autoescape=True,
            undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
        )
        self.macros = self.env.get_template("macros.j2").make_module(
            {"w": self.words, "mode": mode, "lang": self.lang})
        self.numbers: dict[tuple[str, str], int] = {}  # (kind, id) -> its number on the page
        self.ids: dict[str, str] = {}         # ledger key -> "N3"
        self.shown: set[str] = set()          # keys shown on the page (not only inputs)
        self.section_of: dict[str, str] = {}  # shown key -> the section it is first shown in
        self.first_fmt: dict[str, Format] = {}  # how each key was first printed
        self._pop_cache: dict[str, Markup] = {}

    def run(self) -> str:
        doc = self.skeleton()
        doc = self.expand_blocks(doc)
        doc = _PH.sub(self._ref_sub, doc)
        self.assign_ids(doc)
        doc = doc.replace(APPENDIX_PH, str(self.appendix()))
        doc = _PH.sub(self._final_sub, doc)
        if self.lang == "zh":
            doc = close_cjk_gaps(doc)
        if self.mode == "pdf" and self.lang == "zh":
            doc = _TD.sub(_cjk_words_whole, doc)
        if "\ue000" in doc or "\ue001" in doc:
            raise RenderError("unresolved placeholder left in the page")
        return neutralise_controls(doc)   # every rendered string, in HTML and PDF alike

    # -- skeleton --

    def skeleton(self) -> str:
        page, mode = self.page, self.mode
        has_figs = any(b.kind == "figure" for b in page.blocks)
        tdir = page.templates_dir
        css = _static(tdir, "report.css") + ("\n" + _static(tdir, "print.css") if mode == "pdf" else "")
        scripts = [vega_bundle(), INIT_JS] if (mode == "html" and has_figs) else (
            [INIT_JS] if mode == "html" else [])
        csp = None
        if mode == "html":
            csp = "; ".join([
                "default-src 'none'",
                "script-src " + " ".join(_sha256(s) for s in scripts),
                "style-src " + _sha256(css),
                "base-uri 'none'",
                "form-action 'none'",
            ])
        title = self.report.title.get(self.lang, self.report.round_id)
        tpl = self.env.get_template("base.html.j2")
        return tpl.render(
            mode=mode, lang=self.lang, html_lang=HTML_LANG[self.lang], w=self.words,
            title=title, subtitle=self.report.subtitle.get(self.lang, ""), round_id=self.report.round_id, css=Markup(css), csp=csp,
            scripts=[Markup(s) for s in scripts], sections=page.sections,
            notices=[n.get(self.lang) or next(iter(n.values()), "") for n in self.report.notices],
            bundles=self.report.bundles, links=self.links, appendix=Markup(APPENDIX_PH),
            footer=Markup(self.words["footer"]),
        )

    # -- blocks --

    def expand_blocks(self, doc: str) -> str:
        counters = {"figure": 0, "table": 0}
        order = [int(m.group(2)) for m in _PH.finditer(doc) if m.group(1) == "b"]
        rendered: dict[int, str] = {}
        for i in order:
            b = self.page.blocks[i]
            if b.kind in counters:
                counters[b.kind] += 1
                self.numbers[(b.kind, b.ref)] = counters[b.kind]
            rendered[i] = str(self.render_block(b))
        doc = _BLOCK_P.sub(lambda m: rendered[int(m.group(1)[2:-1])], doc)
        return _PH.sub(lambda m: rendered[int(m.group(2))] if m.group(1) == "b" else m.group(0),
                       doc)

    def render_block(self, b: _Block) -> Markup:
        m = self.macros
        if b.kind == "figure":
            f = self.report.figures[b.ref]
            label = self.words["fig_label"].format(n=self.numbers[("figure", b.ref)])
            if self.mode == "html":
                body = Markup('<div class="chart" id="chart-{0}" role="img" aria-label="{1}"></div>'
                              '<script type="application/json" class="vl-spec" data-target="chart-{0}">'
                              '{2}</script>').format(
                    b.ref, f.title.get(self.lang, ""),
                    Markup(spec_json(prepare_spec(b.ref, f.specs[self.lang]))))
            else:
                svg = self.svgs.get(b.ref)
                if svg is None:
                    raise RenderError(f"figure {b.ref!r}: no SVG given for the PDF")
                uri = "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()
                body = Markup('<img class="chart-img" src="{0}" alt="{1}">').format(
                    uri, f.title.get(self.lang, ""))
            return m.figure(id=b.ref, label=label, title=f.title.get(self.lang, ""), body=body,
                            caption=b.payload["caption"], keys=b.payload["keys"])
        if b.kind == "table":
            t = self.report.tables[b.ref]
            label = self.words["table_label"].format(n=self.numbers[("table", b.ref)])
            headers = [(c.header.get(self.lang, c.id), unit_heading(c.unit, self.lang)) for c in t.columns]
            return m.table(id=b.ref, label=label, title=t.title.get(self.lang, ""),
                           headers=headers, rows=b.payload["rows"],
                           has_labels=any(lbl for lbl, _ in b.payload["rows"]),
                           short=len(b.payload["rows"]) <= SHORT_TABLE_ROWS)
        for c in b.payload:
            value = self.report.ledger[c.key]
            if absent(value):
                c.missing = self._reason(value)
        return m.cards(items=b.payload)

    # -- references and ids --

    def _ref_sub(self, m: re.Match) -> str:
        if m.group(1) != "r":
            return m.group(0)
        kind, target = self.page.refs[int(m.group(2))]
        if (kind, target) not in self.numbers:
            raise RenderError(f"ref({target!r}) but that {kind} is not placed on the page")
        label = "fig_label" if kind == "figure" else "table_label"
        text = self.words[label].format(n=self.numbers[(kind, target)])
        anchor = ("fig-" if kind == "figure" else "tab-") + target
        return str(Markup('<a class="xref" href="#{0}">{1}</a>').format(anchor, text))

    def assign_ids(self, doc: str) -> None:
        starts = [(m.start(), m.group(1)) for m in _SECTION_START.finditer(doc)]
        at = [pos for pos, _ in starts]

        def section_at(pos: int) -> str:
            i = bisect.bisect_right(at, pos) - 1
            return starts[i][1] if i >= 0 else ""

        for m in _PH.finditer(doc):
            kind = m.group(1)
            if kind in ("n", "k"):
                keys = ((self.page.uses[int(m.group(2))].key,) if kind == "n"
                        else self.page.keyrefs[int(m.group(2))])
                for key in keys:
                    self.section_of.setdefault(key, section_at(m.start()))
            if kind == "n":
                use = self.page.uses[int(m.group(2))]
                key = use.key
                self.first_fmt.setdefault(key, use.fmt)
            elif kind == "k":
                for key in self.page.keyrefs[int(m.group(2))]:
                    self.shown.add(key)
                    self.ids.setdefault(key, f"N{len(self.ids) + 1}")
                continue
            else:
                continue
            self.shown.add(key)
            self.ids.setdefault(key, f"N{len(self.ids) + 1}")
        queue = list(self.ids)
        while queue:  # inputs that are ledger keys, breadth first, get the next ids
            key = queue.pop(0)
            for _, desc in self.report.ledger[key].inputs:
                if desc in self.report.ledger and desc not in self.ids:
                    self.ids[desc] = f"N{len(self.ids) + 1}"
                    queue.append(desc)

    # -- provenance --

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
            "files": list(dict.fromkeys(_source_file(src) for src in value.sources if _source_file(src))),
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
        titles = {s.name: _heading_text(s.html) for s in self.page.sections}
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

    # -- final pass --

    def _final_sub(self, m: re.Match) -> str:
        kind, i = m.group(1), m.group(2)
        if kind == "t":
            return str(escape(self.page.texts[int(i)]))
        if kind == "k":
            nums = sorted(int(self.ids[k][1:]) for k in self.page.keyrefs[int(i)])
            runs: list[list[int]] = []
            for x in nums:
                if runs and x == runs[-1][-1] + 1:
                    runs[-1].append(x)
                else:
                    runs.append([x])
            return str(self.macros.keyrefs(runs=[(r[0], r[-1]) for r in runs]))
        if kind == "n":
            use = self.page.uses[int(i)]
            value = self.report.ledger[use.key]
            if use.where == "why":
                main, unit = missing_reason(value).text(self.lang), ""
            else:
                main, unit = format_parts(value, self.lang, use.fmt, short_missing=use.where != "prose")
            return str(self.macros.num(
                key=use.key, nid=self.ids[use.key], main=main, unit=unit, where=use.where,
                missing=absent(value) and use.where != "why", flags=value.flags,
                popup=self.popup(use.key) if self.mode == "html" else "",
            ))
        raise RenderError(f"placeholder of kind {kind!r} left after its pass")


# ---------------------------------------------------------------------------------------
# Output


def _fetcher():
    from weasyprint.urls import FatalURLFetchingError, URLFetcher

    class DataOnlyFetcher(URLFetcher):
        """Resolves data: URIs only: rendering a PDF must never read the network or disk."""

        def fetch(self, url, headers=None):
            if not url.startswith("data:"):
                raise FatalURLFetchingError(f"PDF rendering refused to fetch {url!r}")
            return super().fetch(url, headers)

    return DataOnlyFetcher(allowed_protocols=("data",))


_CJK = re.compile(r"[\u3400-\u9fff\uff00-\uffef]")


def fonts_with_char(char: str) -> list[str] | None:
    """Font families fontconfig knows that have a glyph for CHAR; None when it cannot be asked."""
    import shutil
    import subprocess
    fc = shutil.which("fc-list")
    if fc is None:
        return None
    out = subprocess.run([fc, f":charset={ord(char):x}", "family"], capture_output=True,
                         text=True, timeout=30).stdout
    return [ln for ln in out.splitlines() if ln.strip()]


def check_glyph_fonts(html: str, fonts_for=fonts_with_char) -> None:
    """Refuse a page whose Chinese text no installed font can draw (it would print as boxes)."""
    m = _CJK.search(html)
    if m is None:
        return
    fonts = fonts_for(m.group(0))
    if fonts is not None and not fonts:
        raise RenderError(f"no installed font has a glyph for {m.group(0)!r} (U+{ord(m.group(0)):04X}): "
                          "the Chinese PDF would print boxes; install fonts-noto-cjk (make setup-system)")


def html_to_pdf(html: str) -> bytes:
    """PDF bytes from a page assembled in "pdf" mode; no dates, so rebuilds are identical."""
    import weasyprint

    check_glyph_fonts(html)

    doc = weasyprint.HTML(string=html, url_fetcher=_fetcher(), base_url=None)
    return doc.write_pdf(full_fonts=False, uncompressed_pdf=False)


@dataclass
class Timing:
    """Seconds one stage took for one round and language."""

    round_id: str
    lang: str
    stage: str      # "sections", "bundle", "html", "figures", "pdf"
    seconds: float


@dataclass
class RoundOutput:
    round_id: str
    paths: list[Path]
    timings: list[Timing]


def page_name(lang: str, fmt: str) -> str:
    """File name of a round's page: index.zh.html, report.en.pdf, ..."""
    return f"index.{lang}.html" if fmt == "html" else f"report.{lang}.pdf"


def render_round(report: RoundReport, round_dir: Path, formats: tuple[str, ...] = ("html", "pdf"),
                 langs: tuple[str, ...] = ("zh", "en"),
                 templates_dir: Path = TEMPLATES_DIR) -> RoundOutput:
    """Write a round's pages into ROUND_DIR (which must exist) and time each stage."""
    import time

    for f in formats:
        if f not in MODES:
            raise RenderError(f"unknown format {f!r}")
    out = RoundOutput(report.round_id, [], [])

    def timed(lang: str, stage: str, t0: float) -> None:
        out.timings.append(Timing(report.round_id, lang, stage, time.perf_counter() - t0))

    for lang in langs:
        # every page links to both languages, also when this call renders only one
        links = {f"{lg}.{fm}": page_name(lg, fm) for lg in LANGS for fm in formats}
        t0 = time.perf_counter()
        page = Page(report, lang, templates_dir)
        timed(lang, "sections", t0)
        if "html" in formats:
            if any(b.kind == "figure" for b in page.blocks):
                t0 = time.perf_counter()
                vega_bundle()  # about 1.5 s on the first call in a process, cached after
                timed(lang, "bundle", t0)
            t0 = time.perf_counter()
            path = round_dir / page_name(lang, "html")
            path.write_text(page.assemble("html", links=links), encoding="utf-8")
            out.paths.append(path)
            timed(lang, "html", t0)
        if "pdf" in formats:
            t0 = time.perf_counter()
            svgs = {b.ref: figure_svg(b.ref, report.figures[b.ref].specs[lang])
                    for b in page.blocks if b.kind == "figure"}
            timed(lang, "figures", t0)
            t0 = time.perf_counter()
            path = round_dir / page_name(lang, "pdf")
            path.write_bytes(html_to_pdf(page.assemble("pdf", svgs=svgs, links=links)))
            out.paths.append(path)
            timed(lang, "pdf", t0)
    return out
