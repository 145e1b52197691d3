"""The rendering pipeline on the hand-built fixture: the built site, its HTML and PDFs, provenance,
safety, determinism (rendering without a site or PDF: tests/unit/report/test_render_pages.py)."""

from __future__ import annotations

import base64
import hashlib
import html as htmllib
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from report.publish.document import RoundFacts
from report.publish.render import templating, vega
from report.publish.render.page import Page
from report.publish.render.templating import RenderError
from report.publish.site import build_site
from tests.render_fixture import ROUND_ID, hand_built_report, render_section

HOSTILE = "<script>alert(1)</script>"
LANGS = ("zh", "en")
NUM_SPAN = re.compile(r'<span class="num([^"]*)" tabindex="0" data-key="([^"]+)" data-nid="(N\d+)">')


def _clear_caches() -> None:
    vega._svg_cached.cache_clear()
    vega.vega_bundle.cache_clear()
    templating.static_file.cache_clear()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    built = build_site([hand_built_report(model=HOSTILE)], out)
    return out, built


def _page(site, lang: str) -> str:
    out, _ = site
    return (out / ROUND_ID / f"index.{lang}.html").read_text(encoding="utf-8")


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not installed (apt-get install poppler-utils)")
    return path


def _pdftext(path: Path, mode: str = "-layout") -> str:
    return subprocess.run([_tool("pdftotext"), mode, str(path), "-"], check=True,
                          capture_output=True, text=True).stdout


# -- files and structure -------------------------------------------------------------------


def test_every_page_is_written(site):
    out, built = site
    names = sorted(p.relative_to(out).as_posix() for p in built)
    assert names == sorted([
        "index.html", f"{ROUND_ID}/round.json",
        *(f"{ROUND_ID}/index.{lang}.html" for lang in LANGS),
        *(f"{ROUND_ID}/report.{lang}.pdf" for lang in LANGS),
        *(f"{ROUND_ID}/audit.{lang}.pdf" for lang in LANGS),
    ])
    assert not list(out.glob(".*.building"))


def test_site_index_links_every_page(site):
    out, _ = site
    index = (out / "index.html").read_text(encoding="utf-8")
    for lang in LANGS:
        assert f'href="{ROUND_ID}/index.{lang}.html"' in index
        assert f'href="{ROUND_ID}/report.{lang}.pdf"' in index
        assert f'href="{ROUND_ID}/audit.{lang}.pdf"' in index
    assert "手工样例" in index and "Hand-built fixture" in index
    assert 'http-equiv="Content-Security-Policy"' in index


@pytest.mark.parametrize("lang", LANGS)
def test_no_remote_loads(site, lang):
    out, _ = site
    for text in (_page(site, lang), (out / "index.html").read_text(encoding="utf-8")):
        assert not re.search(r"""\b(src|href|action|poster|srcset)\s*=\s*["']?\s*(https?:)?//""", text, re.I)
        assert not re.search(r"""url\(\s*["']?\s*(https?:)?//""", text, re.I)
        assert "@import" not in text
        for spec in re.findall(r'<script type="application/json"[^>]*>(.*?)</script>', text, re.S):
            assert "$schema" not in spec  # schema URL stripped; vegaEmbed is given the mode


def _csp(text: str) -> dict[str, list[str]]:
    m = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', text)
    assert m, "no CSP meta"
    policy = htmllib.unescape(m.group(1))
    return {d.split()[0]: d.split()[1:] for d in policy.split(";") if d.strip()}


def _sha(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


@pytest.mark.parametrize("lang", LANGS)
def test_csp_allows_only_our_inline_code(site, lang):
    text = _page(site, lang)
    csp = _csp(text)
    assert csp["default-src"] == ["'none'"]
    assert csp["base-uri"] == ["'none'"]
    for directive in ("script-src", "style-src"):
        assert not {"'unsafe-inline'", "'unsafe-eval'", "*", "data:"} & set(csp[directive])
    scripts = re.findall(r"<script>(.*?)</script>", text, re.S)
    styles = re.findall(r"<style>(.*?)</style>", text, re.S)
    assert sorted(map(_sha, scripts)) == sorted(csp["script-src"])
    assert sorted(map(_sha, styles)) == sorted(csp["style-src"])
    # the meta must come before anything it governs
    assert text.index("Content-Security-Policy") < text.index("<style>")


@pytest.mark.parametrize("lang", LANGS)
def test_vega_inlined_once_and_every_figure_embedded(site, lang):
    text = _page(site, lang)
    assert text.count("window.vegaEmbed=") == 1
    assert len(re.findall(r"<script>", text)) == 2  # the bundle and our init script
    report = hand_built_report()
    for fig_id in report.figures:
        assert text.count(f'<div class="chart" id="chart-{fig_id}"') == 1
        assert text.count(f'class="vl-spec" data-target="chart-{fig_id}"') == 1
    assert '"actions":false' not in text  # options live in the init script, not per spec
    assert "actions: false" in text


@pytest.mark.parametrize("lang,other,label", [("zh", "en", "English"), ("en", "zh", "中文")])
def test_language_switch(site, lang, other, label):
    text = _page(site, lang)
    assert (f'<a class="lang-switch" href="index.{other}.html" hreflang="{other}" lang="{other}">'
            f"{label}</a>") in text
    assert f'href="report.{lang}.pdf"' in text
    assert 'href="../index.html"' in text


# -- numbers and provenance ----------------------------------------------------------------


@pytest.mark.parametrize("lang", LANGS)
def test_numbers_carry_provenance(site, lang):
    text = _page(site, lang)
    ledger = hand_built_report().ledger
    spans = NUM_SPAN.findall(text)
    assert len(spans) > 20
    ids: dict[str, str] = {}
    for _, key, nid in spans:
        assert key in ledger
        assert ids.setdefault(key, nid) == nid, f"{key} has two ids"
        assert f'id="prov-{nid}"' in text
    assert len(set(ids.values())) == len(ids)
    # each popup says what the number is, how it was computed and from what
    m = re.search(r'data-key="point.c64.frontend_ms" data-nid="(N\d+)">.*?<span class="pop" '
                  r'role="tooltip">(.*?)<span class="pop-see">', text, re.S)
    assert m
    pop = m.group(2)
    assert htmllib.escape(ledger["point.c64.frontend_ms"].doc, quote=True) in pop
    assert "render_fixture.frontend_ms" in pop
    assert "ttft_ms" in pop and "queue_ms" in pop and "prefill_ms" in pop
    assert "fixture/metrics.jsonl[point=C64]" in pop
    assert 'class="pop-id">' + m.group(1) + "<" in pop


@pytest.mark.parametrize("lang", LANGS)
def test_appendix_lists_every_number_and_its_inputs(site, lang):
    text = _page(site, lang)
    ledger = hand_built_report().ledger
    appendix = text[text.index('id="provenance"'):]
    entries = re.findall(r'id="prov-(N\d+)"', appendix)
    assert entries == [f"N{i}" for i in range(1, len(entries) + 1)]
    shown = {key for _, key, _ in NUM_SPAN.findall(text)}
    listed = set(re.findall(r'<code class="prov-key">([^<]+)</code>', appendix))
    assert shown <= listed
    for key in listed:  # closed under inputs
        for _, desc in ledger[key].inputs:
            if desc in ledger:
                assert desc in listed
    # values carry their unit even when first shown in a table cell (unit in the header)
    entry = re.search(r'<div class="prov-head">(?:(?!</div>).)*>point\.c4\.kv</code>', appendix,
                      re.S).group(0)
    assert '<span class="prov-value">5.9%</span>' in entry
    # figure data keys are listed too, and linked from the caption
    assert "point.c1.queue_ms" in listed
    assert 'class="fig-data"' in text


@pytest.mark.parametrize("lang", LANGS)
def test_table_cells_use_number_markup(site, lang):
    text = _page(site, lang)
    table = text[text.index('id="tab-points"'):]
    table = table[:table.index("</table>")]
    report = hand_built_report()
    keys = [k for row in report.tables["points"].rows for k in row if k is not None]
    assert [key for _, key, _ in NUM_SPAN.findall(table)] == keys
    assert "<td></td>" in table  # the cell with no key stays empty
    assert "9,830" in table  # thousands separator, column digits 0


@pytest.mark.parametrize("lang,words", [
    ("zh", "未测得：vllm:estimated_* 计数器在该窗口内没有变化，服务端未开启 --enable-mfu-metrics"),
    ("en", "not measured: vllm:estimated_* counters did not move in this window: the server ran "
           "without --enable-mfu-metrics"),
])
def test_absent_values_say_why(site, lang, words):
    text = _page(site, lang)
    assert words in text
    m = re.search(r'data-key="mfu.intensity"[^>]*><span class="num-v">([^<]*)<', text)
    assert m and "0" not in m.group(1)
    assert "FLOP/B" not in text.split('id="provenance"')[0]  # no unit glued to a missing value


@pytest.mark.parametrize("lang", LANGS)
def test_notice_banner_first(site, lang):
    text = _page(site, lang)
    body = text[text.index("<body>"):]
    assert body.index('class="notice"') < body.index("<main>")


def test_pdf_ids_match_html_ids():
    report = hand_built_report()
    for lang in LANGS:
        page = Page(report, lang)
        html = page.assemble("html")
        svgs = {f: "<svg xmlns='http://www.w3.org/2000/svg' width='10' height='10'/>"
                for f in report.figures}
        html_ids = {key: nid for _, key, nid in NUM_SPAN.findall(html)}
        # The audit PDF: every number of the page under the id the web page gives it, each
        # linked to its entry.
        audit = page.assemble("pdf", svgs=svgs, part="audit")
        audit_ids = dict(re.findall(r'<div class="prov prov-print[^"]*" id="prov-(N\d+)"><b>\1&#8195;[^<]*</b>[^·]*· ([^ <]+)', audit))
        assert {k: v for v, k in audit_ids.items() if k in html_ids} == html_ids
        assert 'class="section"' not in audit
        # The review PDF: the numbers in prose keep their id as a plain superscript, the same
        # as the web page's; no appendix, no link to one.
        review = page.assemble("pdf", svgs=svgs)
        prose_ids = dict(re.findall(r'data-key="([^"]+)" data-nid="(N\d+)"><span class="num-v">[^<]*</span>'
                                    r'(?:<span class="num-u">[^<]*</span>)?</span><sup class="nid">\2</sup>', review))
        assert prose_ids and all(html_ids[k] == v for k, v in prose_ids.items())
        assert 'id="provenance"' not in review and 'href="#prov-' not in review
        for pdf in (audit, review):
            assert 'class="pop"' not in pdf and "Content-Security-Policy" not in pdf
            assert "<script" not in pdf


# -- template contract ---------------------------------------------------------------------


def test_hostile_facts_are_text(tmp_path, site):
    for lang in LANGS:
        text = _page(site, lang)
        assert HOSTILE not in text
        assert htmllib.escape(HOSTILE) in text
    facts = RoundFacts(model="*m* [x](javascript:alert(1)) ![i](https://evil.example/x.png) <b>b</b>",
                       gpu="`g` & | # _u_")
    text = render_section(
        tmp_path, "Model {{ facts.model }} on {{ facts.gpu }}; `{{ facts.gpu }}`\n\n"
                  "{{ cards(card('load.requests', facts.model, note=facts.gpu)) }}",
        facts=facts)
    body = text[text.index("<main>"):]
    assert "<em>" not in body and "<img" not in body and "javascript:" not in body.replace(
        "[x](javascript:alert(1))", "")
    assert "<b>b</b>" not in body
    assert "*m* [x](javascript:alert(1)) ![i](https://evil.example/x.png) &lt;b&gt;b&lt;/b&gt;" in body
    assert "<code>`g` &amp; | # _u_</code>" in body  # a fact inside a code span stays literal


def test_forward_reference_resolves(site):
    text = _page(site, "zh")
    first_ref = text.index('<a class="xref" href="#fig-ttft_breakdown">图 1</a>')
    assert first_ref < text.index('id="fig-ttft_breakdown"')
    assert '<a class="xref" href="#fig-queue_vs_prefill">图 2</a>' in text


# -- PDF -----------------------------------------------------------------------------------


@pytest.mark.parametrize("lang", LANGS)
def test_pdf_embeds_cjk_regular_and_bold(site, lang):
    out, _ = site
    fonts = subprocess.run([_tool("pdffonts"), str(out / ROUND_ID / f"report.{lang}.pdf")],
                           check=True, capture_output=True, text=True).stdout
    rows = [line.split() for line in fonts.splitlines()[2:]]
    embedded = {r[0].split("+", 1)[-1] for r in rows if len(r) > 4 and r[-5] == "yes"}
    assert "Noto-Sans-CJK-SC" in embedded, fonts
    assert "Noto-Sans-CJK-SC-Bold" in embedded, fonts
    assert all(r[-5] == "yes" for r in rows if len(r) > 4), "a font is not embedded"


@pytest.mark.parametrize("lang,footer,notice", [
    ("zh", "第 1 页 / 共", "手工构造的测试样例"),
    ("en", "Page 1 of", "Hand-built test fixture"),
])
def test_pdf_text(site, lang, footer, notice):
    out, _ = site
    pdf = out / ROUND_ID / f"report.{lang}.pdf"
    # -raw: in its other modes pdftotext drops the spaces between CJK glyphs and digits
    # ("第1页/共5页") although the PDF has them
    assert footer in _pdftext(pdf, "-raw")
    text = _pdftext(pdf)
    assert notice in text
    assert HOSTILE in text  # escaped in HTML, shown literally as text
    # A card and a table cell print the number alone; the audit PDF lists it under its id.
    assert re.search(r"976\s+ms", text) and not re.search(r"976\s+ms\s*N1\b", text)
    assert "N1 976 ms" not in re.sub(r"\s+", " ", text)
    audit = _pdftext(out / ROUND_ID / f"audit.{lang}.pdf")
    assert "N1 976 ms" in re.sub(r"\s+", " ", audit)  # ... and its appendix entry
    title = hand_built_report().title[lang]
    assert text.count(title.split(" ")[0]) >= 2  # running header on the following pages
    assert audit.count(title.split(" ")[0]) >= 2  # ... and the audit PDF's


def test_pdf_info_has_no_dates(site):
    out, _ = site
    info = subprocess.run([_tool("pdfinfo"), str(out / ROUND_ID / "report.zh.pdf")], check=True,
                          capture_output=True, text=True).stdout
    assert "CreationDate" not in info and "ModDate" not in info
    assert "A4" in info


# -- determinism, incremental builds, timings -----------------------------------------------


def test_rebuild_is_byte_identical(tmp_path, site):
    out1, built1 = site
    _clear_caches()  # recompute SVGs and the bundle: they must be deterministic too
    out2 = tmp_path / "again"
    built2 = build_site([hand_built_report(model=HOSTILE)], out2)
    rel1 = sorted(p.relative_to(out1) for p in built1)
    assert rel1 == sorted(p.relative_to(out2) for p in built2)
    for rel in rel1:
        assert (out1 / rel).read_bytes() == (out2 / rel).read_bytes(), rel


def test_only_rebuilt_rounds_are_replaced(tmp_path):
    a, b = hand_built_report(), hand_built_report()
    a.round_id, b.round_id = "round-2", "round-10"
    out = tmp_path / "site"
    build_site([a, b], out, formats=("html",))
    (out / "round-10" / "keep.txt").write_text("untouched")
    (out / "round-2" / "stale.txt").write_text("stale")
    a.title = {"zh": "新标题", "en": "New title"}
    built = build_site([a], out, formats=("html",))
    assert (out / "round-10" / "keep.txt").exists()
    assert not (out / "round-2" / "stale.txt").exists()
    assert not (out / "round-2" / "report.zh.pdf").exists()
    index = (out / "index.html").read_text(encoding="utf-8")
    assert index.index("round-2/index.zh.html") < index.index("round-10/index.zh.html")
    assert "New title" in index and "report.zh.pdf" not in index
    assert out / "index.html" in built


def test_failed_build_keeps_previous_round(tmp_path):
    out = tmp_path / "site"
    good = hand_built_report()
    build_site([good], out, formats=("html",))
    before = (out / ROUND_ID / "index.zh.html").read_bytes()
    bad = replace(hand_built_report(), sections=["no_such_section"])
    with pytest.raises(RenderError):
        build_site([bad], out, formats=("html",))
    assert (out / ROUND_ID / "index.zh.html").read_bytes() == before
    assert not list(out.glob(".*.building"))


def test_timings_per_stage(site):
    _, built = site
    stages = {(t.lang, t.stage) for t in built.timings}
    for lang in LANGS:
        assert {(lang, s) for s in ("sections", "html", "figures", "pdf", "audit")} <= stages
    totals = built.stage_totals()
    assert all(v >= 0 for v in totals.values())
    assert "pdf" in built.summary()


