"""A page's placeholders resolved for one mode, in document order:

  blocks (figures, tables, cards) -> figure/table numbers -> references -> number ids
  (N1, N2, ... in reading order, then the inputs they were derived from) -> appendix ->
  number markup -> escaped text.

HTML and PDF are assembled from the same rendered sections, so a number has the same id
in the popup (HTML), the superscript (PDF) and the provenance appendix (both,
report.publish.render.appendix). The HTML page's script is templates/page.js.
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import re

import jinja2
from markupsafe import Markup, escape

from bundle.textsafety import neutralise_controls
from report.publish.numbers import Format, absent, format_parts, unit_heading, why_text
from report.publish.render.appendix import Provenance
from report.publish.render.templating import RenderError, static_file
from report.publish.render.text import (
    APPENDIX_PH,
    BLOCK_P,
    PH,
    cjk_words_whole,
    close_cjk_gaps,
)
from report.publish.render.vega import prepare_spec, spec_json, vega_bundle
from report.words import listed

HTML_LANG = {"zh": "zh-CN", "en": "en"}
# What a "pdf" assembly prints: the review (the sections) or the audit (the provenance appendix).
PARTS = ("review", "audit")
# A table of at most this many rows fits on one A4 page of the PDF, so it is never split
# (print.css: .table-short); a longer one breaks between rows and repeats its header row.
SHORT_TABLE_ROWS = 24
# A table of more than this many columns is printed in the smaller type of a wide one (print.css: .wide).
WIDE_TABLE_COLUMNS = 9
# Figures the review PDF leaves to the web page: each says again what its section's text or a
# table of the review already states (the queue against prefill: the TTFT breakdown; KV usage:
# the reconciliation table; the FLOP counter over time, the whole round's waveform, power and
# temperature over time: the sentences beside them). They stay in the HTML page, hidden in the
# review PDF (print.css: .review-left), so a number keeps one id in the web page and both PDFs;
# the review numbers only the figures it shows.
REVIEW_LEAVES_FIGURES = frozenset({"queue_vs_prefill", "kv", "tflops_timeline", "timeline", "power"})
# A figure the review leaves where the page places another that reads the same points along their
# axis: the step budget's sets, panel by panel, where its curve over the budget is placed.
REVIEW_PREFERS = {"sets_step_budget": "budget_curve"}
# Every figure the review leaves is printed, with its caption, in the audit PDF, and the review
# names them in one line (label.page_elsewhere): a reviewer with the PDFs alone still has them.
# Where each section of the assembled page begins (templates/base.html.j2).
_SECTION_START = re.compile(r'<section class="section" id="sec-([\w-]+)">')


def csp_hash(text: str) -> str:
    """The Content-Security-Policy source that allows exactly TEXT (a script or a style)."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def page_script(templates_dir) -> str:
    """The HTML page's own script (templates/page.js, less the file's last newline): the
    charts, and the pop-up of each number."""
    return static_file(templates_dir, "page.js").removesuffix("\n")


class Assembly(Provenance):
    """Resolves a page's placeholders for one mode (see the module docstring for the order)."""

    def __init__(self, page, mode: str, svgs: dict[str, str], links: dict[str, str], part: str = "review"):
        # PART, in "pdf" mode: "review" (the sections, no appendix: what a reviewer reads) or
        # "audit" (the appendix alone, its ids those of the review PDF and the web page).
        if part not in PARTS:
            raise RenderError(f"unknown part {part!r}")
        self.page, self.mode, self.svgs, self.links, self.part = page, mode, svgs, links, part
        self.lang, self.words, self.report = page.lang, page.words, page.report
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(page.templates_dir)), autoescape=True,
            undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
        )
        self.macros = self.env.get_template("macros.j2").make_module(
            {"w": self.words, "mode": mode, "lang": self.lang, "part": part})
        self.numbers: dict[tuple[str, str], int] = {}  # (kind, id) -> its number on the page
        self.ids: dict[str, str] = {}         # ledger key -> "N3"
        self.shown: set[str] = set()          # keys shown on the page (not only inputs)
        self.section_of: dict[str, str] = {}  # shown key -> the section it is first shown in
        self.first_fmt: dict[str, Format] = {}  # how each key was first printed
        self._pop_cache: dict[str, Markup] = {}

    def run(self) -> str:
        doc = self.skeleton()
        doc = self.expand_blocks(doc)
        doc = PH.sub(self._ref_sub, doc)
        self.assign_ids(doc)
        if self.mode == "pdf" and self.part == "audit":
            # The same ids as the review PDF's, under the title, with no section of its own: the
            # figures the review leaves, then the provenance of every number.
            doc = self.skeleton(sections=False)
            doc = doc.replace(APPENDIX_PH, str(self.elsewhere_figures()) + APPENDIX_PH)
        # The review PDF leaves the per-number provenance to the web page and the audit PDF.
        appendix = "" if self.mode == "pdf" and self.part == "review" else str(self.appendix())
        doc = doc.replace(APPENDIX_PH, appendix)
        doc = PH.sub(self._final_sub, doc)
        if self.lang == "zh":
            doc = close_cjk_gaps(doc)
        if self.mode == "pdf" and self.lang == "zh":
            doc = cjk_words_whole(doc)
        if "\ue000" in doc or "\ue001" in doc:
            raise RenderError("unresolved placeholder left in the page")
        return neutralise_controls(doc)   # every rendered string, in HTML and PDF alike

    # -- skeleton --

    def skeleton(self, sections: bool = True) -> str:
        page, mode = self.page, self.mode
        has_figs = any(b.kind == "figure" for b in page.blocks)
        tdir = page.templates_dir
        css = static_file(tdir, "report.css") + ("\n" + static_file(tdir, "print.css") if mode == "pdf" else "")
        scripts = ([vega_bundle()] if has_figs else []) + [page_script(tdir)] if mode == "html" else []
        csp = None
        if mode == "html":
            csp = "; ".join([
                "default-src 'none'",
                "script-src " + " ".join(csp_hash(s) for s in scripts),
                "style-src " + csp_hash(css),
                "base-uri 'none'",
                "form-action 'none'",
            ])
        title = self.report.title.get(self.lang, self.report.round_id)
        tpl = self.env.get_template("base.html.j2")
        return tpl.render(
            mode=mode, lang=self.lang, html_lang=HTML_LANG[self.lang], w=self.words,
            title=title, subtitle=self.report.subtitle.get(self.lang, ""), round_id=self.report.round_id, css=Markup(css), csp=csp,
            scripts=[Markup(s) for s in scripts], sections=page.sections if sections else [],
            notices=[n.get(self.lang) or next(iter(n.values()), "") for n in self.report.notices] if sections else [],
            part=self.part, elsewhere=self.elsewhere_line() if sections else "",
            bundles=self.report.bundles, links=self.links, appendix=Markup(APPENDIX_PH),
            footer=Markup(self.words["footer"]),
        )

    # -- blocks --

    def expand_blocks(self, doc: str) -> str:
        counters = {"figure": 0, "table": 0}
        order = [int(m.group(2)) for m in PH.finditer(doc) if m.group(1) == "b"]
        rendered: dict[int, str] = {}
        for i in order:
            b = self.page.blocks[i]
            if b.kind in counters and not self.review_leaves(b):
                counters[b.kind] += 1
                self.numbers[(b.kind, b.ref)] = counters[b.kind]
            rendered[i] = str(self.render_block(b))
        doc = BLOCK_P.sub(lambda m: rendered[int(m.group(1)[2:-1])], doc)
        return PH.sub(lambda m: rendered[int(m.group(2))] if m.group(1) == "b" else m.group(0),
                       doc)

    def review_leaves(self, b) -> bool:
        """Whether block B is a figure the review PDF leaves to the web page and the audit PDF
        (REVIEW_LEAVES_FIGURES, or REVIEW_PREFERS where the other is placed) and no sentence of the
        page points to; both PDFs number the figures the review shows, and only those."""
        if self.mode != "pdf" or b.kind != "figure" or ("figure", b.ref) in self.page.refs:
            return False
        preferred = REVIEW_PREFERS.get(b.ref)
        return b.ref in REVIEW_LEAVES_FIGURES or any(
            o.kind == "figure" and o.ref == preferred for o in self.page.blocks)

    def left_out(self, b) -> bool:
        """Whether block B is a figure the review PDF shows nothing of but its caption's ids."""
        return self.part == "review" and self.review_leaves(b)

    def elsewhere_blocks(self) -> list:
        """The figures the review leaves, in the page's order."""
        return [b for b in self.page.blocks if self.review_leaves(b)]

    def elsewhere_line(self) -> Markup:
        """The review's one line naming the figures it leaves to the web page and the audit PDF."""
        titles = [self.report.figures[b.ref].title.get(self.lang, b.ref) for b in self.elsewhere_blocks()]
        if self.part != "review" or not titles:
            return Markup("")
        return Markup('<p class="elsewhere">{0}</p>').format(
            self.words["elsewhere"].format(figures=listed(titles, self.lang)))

    def elsewhere_figures(self) -> Markup:
        """The audit PDF's figures the review leaves, each with its title and caption."""
        blocks = self.elsewhere_blocks()
        if not blocks:
            return Markup("")
        return Markup('<section class="elsewhere-figures"><h2>{0}</h2>{1}</section>').format(
            self.words["elsewhere_heading"], Markup("").join(self.render_block(b) for b in blocks))

    def render_block(self, b) -> Markup:
        m = self.macros
        if b.kind == "figure":
            f = self.report.figures[b.ref]
            if self.left_out(b):
                # Its caption's numbers keep their ids; the review shows none of it.
                return Markup('<div class="review-left">{0} {1}</div>').format(
                    b.payload["caption"], b.payload["keys"])
            label = (self.words["fig_label"].format(n=self.numbers[("figure", b.ref)])
                     if ("figure", b.ref) in self.numbers else self.words["elsewhere_label"])
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
                           short=len(b.payload["rows"]) <= SHORT_TABLE_ROWS,
                           wide=len(headers) > WIDE_TABLE_COLUMNS)
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

        for m in PH.finditer(doc):
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
                main, unit = why_text(value, self.lang), ""
            else:
                main, unit = format_parts(value, self.lang, use.fmt, short_missing=use.where != "prose")
            return str(self.macros.num(
                key=use.key, nid=self.ids[use.key], main=main, unit=unit, where=use.where,
                missing=absent(value) and use.where != "why", flags=value.flags,
                popup=self.popup(use.key) if self.mode == "html" else "",
            ))
        raise RenderError(f"placeholder of kind {kind!r} left after its pass")
