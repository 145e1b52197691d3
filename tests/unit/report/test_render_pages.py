"""Rendering without PDFs or sites: the template contract, number formatting and the guards,
on the hand-built fixture (the rendered site and its PDFs: tests/integration/test_render.py)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from report.ledger import Reason, Value
from report.publish.document import RoundFacts
from report.publish.numbers import Format, format_number, format_value
from report.publish.render import assembly, vega
from report.publish.render.page import Page
from report.publish.render.templating import RenderError
from report.publish.site import build_site
from tests.render_fixture import hand_built_report, render_section, templates_with

LANGS = ("zh", "en")


@pytest.mark.parametrize("source,needle", [
    ('{{ n("no.such.key") }}', "no.such.key"),
    ('{{ v("no.such.key").value }}', "no.such.key"),
    ('{{ fig("no_such_fig") }}', "no_such_fig"),
    ('{{ table("no_such_table") }}', "no_such_table"),
    ('{{ ref("no_such_fig") }}', "no_such_fig"),
    ("{{ facts.no_such_fact }}", "no_such_fact"),
    ('{{ v("load.requests").value }}', "bare number"),
    ('{{ v("load.requests") }}', "n('load.requests')"),
    ('{{ n("point.c64.queue_ms", pct=True) }}', "pct=True"),
    ('{{ fig("ttft_breakdown") }}{{ fig("ttft_breakdown") }}', "placed twice"),
])
def test_template_errors_fail_the_build(tmp_path, source, needle):
    with pytest.raises(RenderError) as e:
        render_section(tmp_path, source)
    assert needle in str(e.value)


def test_template_error_names_the_line(tmp_path):
    with pytest.raises(RenderError, match=r"_t.md.j2:3 \(zh\): no ledger key 'nope'"):
        render_section(tmp_path, "# Title\n\ntext {{ n('nope') }}\n")


def test_missing_section_template_fails(tmp_path):
    report = replace(hand_built_report(), sections=["no_such_section"])
    with pytest.raises(RenderError, match="no_such_section"):
        Page(report, "zh")


def test_ref_to_unplaced_figure_fails(tmp_path):
    with pytest.raises(RenderError, match="not placed"):
        render_section(tmp_path, 'see {{ ref("ttft_breakdown") }}')


def test_code_filter_keeps_a_fact_literal(tmp_path):
    text = render_section(tmp_path, "run with {{ facts.server_flags|code }}",
                           facts=RoundFacts(server_flags="--max-num-batched-tokens <n> *x*"))
    assert "<code>--max-num-batched-tokens &lt;n&gt; *x*</code>" in text


def test_figure_and_table_may_share_an_id(tmp_path):
    report = hand_built_report()
    report.tables["ttft_breakdown"] = report.tables["points"]
    src = ('{{ fig("ttft_breakdown") }}\n\n{{ table("ttft_breakdown") }}\n\n'
           'see {{ ref("ttft_breakdown", "table") }} and {{ ref("ttft_breakdown", "figure") }}')
    tdir = templates_with(tmp_path, "_t", src)
    text = Page(replace(report, sections=["_t"]), "en", tdir).assemble("html")
    assert '<a class="xref" href="#tab-ttft_breakdown">Table 1</a>' in text
    assert '<a class="xref" href="#fig-ttft_breakdown">Figure 1</a>' in text
    tdir = templates_with(tmp_path / "b", "_t", '{{ ref("ttft_breakdown") }}')
    with pytest.raises(RenderError, match="both a figure and a table"):
        Page(replace(report, sections=["_t"]), "en", tdir)


def test_template_html_and_markdown_pass(tmp_path):
    text = render_section(tmp_path, "## Head\n\n> **bold** {{ n('load.requests') }}\n\n"
                                     '<div class="aside">raw html</div>\n')
    assert "<h2>Head</h2>" in text and "<strong>bold</strong>" in text
    assert '<div class="aside">raw html</div>' in text
    assert re.search(r"<blockquote>\s*<p><strong>bold</strong> <span class=\"num", text)


def test_figure_spec_loading_data_from_url_fails():
    with pytest.raises(RenderError, match="inline the values"):
        vega.prepare_spec("f", {"data": {"url": "https://example.com/x.csv"}, "mark": "bar"})


@pytest.mark.parametrize("x,fmt,unit,zh,en", [
    (86896, Format(), "tokens", "86,896 个 token", "86,896 tokens"),
    (0.3883, Format(pct=True, digits=1), "", "38.8%", "38.8%"),
    (0.0019, Format(pct=True, digits=2, sign=True), "", "+0.19%", "+0.19%"),
    (975.83, Format(), "ms", "976 ms", "976 ms"),
    (1.006, Format(), "s", "1.01 秒", "1.01 s"),
    (0.0, Format(digits=1), "ms", "0.0 ms", "0.0 ms"),
    (-0.00001, Format(digits=1), "pp", "0.0 个百分点", "0.0 pp"),
    (True, Format(), "", "是", "yes"),
    ("0.27.1", Format(unit=False), "", "0.27.1", "0.27.1"),
    (None, Format(), "ms", "未测得：没有记录到 /metrics 抓取", "not measured: no /metrics scrape was recorded"),
])
def test_format_value(x, fmt, unit, zh, en):
    v = Value("k", x, unit=unit, missing=Reason.of("reason.no_scrape") if x is None else None)
    assert format_value(v, "zh", fmt) == zh
    assert format_value(v, "en", fmt) == en


def test_format_refuses_nonsense():
    with pytest.raises(ValueError):
        format_value(Value("k", 38.8, unit="%"), "en", Format(pct=True))
    with pytest.raises(ValueError):
        format_value(Value("k", 12.0, unit="ms"), "en", Format(pct=True))
    assert format_number(1234567) == "1,234,567"
    assert format_value(Value("k", float("nan"), unit="ms"), "en") == (
        "not measured: the stored value is nan, not a number")


def test_unsafe_round_id_refused(tmp_path):
    bad = replace(hand_built_report(), round_id="../escape")
    with pytest.raises(ValueError):
        build_site([bad], tmp_path)


def test_bidi_and_invisible_characters_are_shown_not_obeyed(tmp_path):
    """A model name with U+202E once printed raw, and the PDF showed it reversed (issue 16)."""
    model = "evil\u202egnp.exe\u2066x\u200b"
    shown = "evil[U+202E]gnp.exe[U+2066]x[U+200B]"
    report = hand_built_report(model=model)
    for lang in ("en", "zh"):
        page = Page(report, lang)
        svgs = {b.ref: "<svg></svg>" for b in page.blocks if b.kind == "figure"}
        for mode in ("html", "pdf"):   # the PDF is printed from the "pdf" page
            text = page.assemble(mode, svgs=svgs)
            assert shown in text, (lang, mode)
            assert not any(c in text for c in "\u202e\u2066\u200b"), (lang, mode)


def test_a_pdf_with_chinese_text_and_no_font_for_it_is_refused_in_one_line():
    from report.publish.render.pdf import check_glyph_fonts
    from report.publish.render.templating import RenderError
    with pytest.raises(RenderError, match=r"no installed font has a glyph for '结' .*fonts-noto-cjk"):
        check_glyph_fonts("<p>结论</p>", fonts_for=lambda ch: [])
    check_glyph_fonts("<p>结论</p>", fonts_for=lambda ch: ["Noto Sans CJK SC"])
    check_glyph_fonts("<p>English only</p>", fonts_for=lambda ch: [])



def test_a_table_that_fits_a_page_is_kept_whole_and_a_long_one_repeats_its_header(tmp_path):
    report = hand_built_report()
    short = report.tables["points"]
    assert len(short.rows) <= assembly.SHORT_TABLE_ROWS
    long = replace(short, id="long", rows=short.rows * (assembly.SHORT_TABLE_ROWS // len(short.rows) + 1),
                   row_labels=short.row_labels * (assembly.SHORT_TABLE_ROWS // len(short.rows) + 1))
    report.tables["long"] = long
    tdir = templates_with(tmp_path, "_t", '{{ table("points") }}\n\n{{ table("long") }}')
    text = Page(replace(report, sections=["_t"]), "zh", tdir).assemble("pdf")
    assert '<div class="table-block table-short" id="tab-points">' in text
    assert '<div class="table-block" id="tab-long">' in text
    css = (tdir / "print.css").read_text(encoding="utf-8")
    assert re.search(r"\.table-block\.table-short\s*\{\s*break-inside:\s*avoid", css)
    assert re.search(r"thead\s*\{\s*display:\s*table-header-group", css)


def test_why_says_an_absent_values_reason_in_words_without_the_not_measured_mark(tmp_path):
    # the hand-built fixture's MFU counters stood still, so its intensity is absent
    text = render_section(tmp_path, 'MFU: {{ why("mfu.intensity") }}.')
    reason = Reason.of("reason.mfu_counters_still").text("zh")
    assert re.search(r'<span class="num num-why"[^>]*data-key="mfu.intensity"[^>]*><span class="num-v">'
                     + re.escape(reason), text)
    assert "missing" not in re.search(r'<span class="(num num-why[^"]*)"', text).group(1)
    with pytest.raises(RenderError, match="present"):
        render_section(tmp_path / "b", '{{ why("load.requests") }}')


def test_a_findings_why_placeholder_prints_the_reason_in_its_sentence(tmp_path):
    text = render_section(tmp_path, '{{ say("MFU: [[mfu.intensity|why]].") }}')
    assert Reason.of("reason.mfu_counters_still").text("zh") in text and "num-why" in text


def test_the_review_pdf_leaves_a_figure_to_the_web_page_and_keeps_every_numbers_id(monkeypatch):
    """A figure the review leaves out is not printed nor numbered there; the numbers of its
    caption keep the ids the web page and the audit give them; a figure a sentence points to stays."""
    report = hand_built_report()
    page = Page(report, "en")
    svgs = {b.ref: "<svg></svg>" for b in page.blocks if b.kind == "figure"}
    # The fixture's sentences point to both figures: the one to the breakdown is pointed elsewhere.
    page.refs = [("figure", "queue_vs_prefill") if r == ("figure", "ttft_breakdown") else r for r in page.refs]
    monkeypatch.setattr(assembly, "REVIEW_LEAVES_FIGURES", frozenset({"ttft_breakdown", "queue_vs_prefill"}))
    runs = {}
    for mode, part in (("html", "review"), ("pdf", "review"), ("pdf", "audit")):
        a = assembly.Assembly(page, mode, svgs, {}, part)
        runs[(mode, part)] = (a.run(), a.ids)
    review, ids = runs[("pdf", "review")]
    assert ids == runs[("html", "review")][1] == runs[("pdf", "audit")][1]
    assert 'id="fig-ttft_breakdown"' not in review and 'class="review-left"' in review
    assert 'id="fig-queue_vs_prefill"' in review            # a sentence points to it: it stays, Figure 1
    assert re.search(r'id="fig-queue_vs_prefill">\s*<div class="fig-head"><span class="fig-label">Figure 1<', review)
    assert 'id="fig-ttft_breakdown"' in runs[("html", "review")][0]


def test_the_audit_pdf_prints_the_figures_the_review_leaves_and_the_review_says_where(monkeypatch):
    """A reviewer with the PDFs alone still has every figure: the audit prints each one the review
    leaves, with its caption, before the provenance; the review names them in one line."""
    report = hand_built_report()
    page = Page(report, "en")
    svgs = {b.ref: "<svg></svg>" for b in page.blocks if b.kind == "figure"}
    page.refs = [("figure", "queue_vs_prefill") if r == ("figure", "ttft_breakdown") else r for r in page.refs]
    monkeypatch.setattr(assembly, "REVIEW_LEAVES_FIGURES", frozenset({"ttft_breakdown"}))
    review = assembly.Assembly(page, "pdf", svgs, {}, "review").run()
    audit = assembly.Assembly(page, "pdf", svgs, {}, "audit").run()
    title = report.figures["ttft_breakdown"].title["en"]
    line = re.search(r'<p class="elsewhere">(.*?)</p>', review, re.S).group(1)
    assert title in line and 'id="fig-ttft_breakdown"' not in review
    section = re.search(r'<section class="elsewhere-figures">(.*?)</section>', audit, re.S).group(1)
    assert 'id="fig-ttft_breakdown"' in section and '<figcaption class="fig-caption">' in section
    assert audit.index('class="elsewhere-figures"') < audit.index('class="appendix')
    html = assembly.Assembly(page, "html", svgs, {}, "review").run()
    assert 'class="elsewhere"' not in html and 'class="elsewhere-figures"' not in html
