"""Every committed round's pages, read as a reviewer reads them: both languages give every
number the same id, nothing unresolved shows, the Chinese page has no English sentence and
the English page no Chinese (nor a Chinese page an English subtitle), and no point is called
"the last point"."""

from __future__ import annotations

import re
from html import unescape
from html.parser import HTMLParser

import pytest

from report.judge.diagnosis import point_bottleneck
from report.publish.compose import compose_rounds
from report.publish.render.page import Page
from tests.conftest import ROOT

ROUNDS = sorted((ROOT / "runs").glob("round-*/bundle"))
# Words that stay English on a Chinese page: names of metrics, flags, units, files, functions.
ENGLISH_RUN = re.compile(r"\b[A-Za-z][a-z]{2,}(?:[ '’][A-Za-z][a-z]{2,}){3,}\b")


@pytest.fixture(scope="module")
def reports():
    return compose_rounds([(b, b.parent.name) for b in ROUNDS])


@pytest.fixture(scope="module")
def pages(reports):
    return {(r.round_id, lang): Page(r, lang).assemble("html") for r in reports for lang in ("en", "zh")}


def test_no_point_is_called_compute_bound_below_the_ridge(reports):
    named = 0
    for r in reports:
        led = r.ledger
        for pid in r.facts.ok_points:
            if point_bottleneck(led, pid).bottleneck != "gpu_compute":
                continue
            named += 1
            phase = led.value_of(f"p.{pid}.prefill_intensity")
            past = phase if phase is not None else led.value_of(f"p.{pid}.intensity")
            assert past is not None and past >= led.value_of("r.ridge"), (r.round_id, pid)
    assert named       # round 4's C=128 at least: the check is not vacuous


def _ids(html: str) -> dict[str, str]:
    return dict(re.findall(r'data-key="([^"]+)" data-nid="(N\d+)"', html))


def _prose(html: str) -> str:
    """The page's reading text: no markup, no code, no provenance pop-ups or appendix."""
    html = html.split('id="appendix"')[0]
    html = re.sub(r"<(script|style|code|svg)\b.*?</\1>", " ", html, flags=re.S)
    html = re.sub(r'<span class="num-pop".*?</span></span>', " ", html, flags=re.S)
    return unescape(re.sub(r"<[^>]+>", " ", html))


class _Reader(HTMLParser):
    """A page's text as a reader sees it: inline markup joins its text with nothing between,
    a block (paragraph, cell, heading, a column heading's unit) starts a new line; a number's
    pop-up, its id and the appendix are not read; code stands as one Latin word."""

    BLOCK = {"p", "div", "li", "h1", "h2", "h3", "h4", "tr", "td", "th", "table", "section",
             "figure", "figcaption", "ul", "ol", "blockquote", "thead", "tbody", "header", "footer"}
    VOID = {"br", "img", "meta", "link", "input", "hr", "wbr"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out, self.hidden, self.depth = [], [], 0

    def handle_starttag(self, tag, attrs):
        if tag in self.VOID:
            self.out.append("\n" if tag == "br" and not self.depth else "")
            return
        cls = (dict(attrs).get("class") or "").split()
        code = tag == "code" and not self.depth
        hide = tag in ("script", "style", "svg", "code") or bool({"pop", "nid"} & set(cls))
        self.hidden.append(hide)
        self.depth += hide
        if code:
            self.out.append("code")
        if not self.depth and (tag in self.BLOCK or "th-unit" in cls):
            self.out.append("\n")

    def handle_endtag(self, tag):
        if tag in self.VOID or not self.hidden:
            return
        self.depth -= self.hidden.pop()
        if not self.depth and tag in self.BLOCK:
            self.out.append("\n")

    def handle_data(self, data):
        if not self.depth:
            self.out.append(data)


def _reading(html: str) -> str:
    r = _Reader()
    r.feed(html.split('id="provenance"')[0])
    return "".join(r.out)


# Chinese runs on without spaces: a space between two CJK characters or full-width marks.
CJK_GAP = re.compile(r".{0,12}[\u3000-\u303f\u3400-\u9fff\uff00-\uffef][ \t]+[\u3000-\u303f\u3400-\u9fff\uff00-\uffef].{0,12}")


def test_the_chinese_page_has_no_space_between_two_chinese_characters(pages):
    for r in ROUNDS:
        gaps = CJK_GAP.findall(_reading(pages[(r.parent.name, "zh")]))
        assert not gaps, (r.parent.name, gaps[:5])


def test_a_space_between_chinese_characters_is_seen_through_markup():
    assert CJK_GAP.search(_reading("<p>两个 <b>直方图</b></p>"))
    assert not CJK_GAP.search(_reading('<table><tr><th>请求<span class="th-unit">个</span></th>'
                                       "<td>是</td> <td>否</td></tr></table><p>见 <code>x</code> 的</p>"))


def test_the_gaps_close_around_markup_a_number_pop_up_and_its_id_but_not_beside_a_digit():
    from report.publish.render.text import close_cjk_gaps
    pop = ('<span class="pop" role="tooltip"><span class="pop-head"><code>k</code></span>'
           '<span class="pop-see">见附录 N1</span></span>')
    html = (f'<p>两个 <b>直方图</b>。 拐点 <span class="num"><span class="num-v">未测得</span>{pop}</span> 的'
            '<span class="num-v">缺失）</span><sup class="nid"><a href="#prov-N2">N2</a></sup> 超过'
            f' C=128 点 <span class="num"><span class="num-v">16</span>{pop}</span> 个</p>'
            '<script>"两个 直方图"</script>')
    out = close_cjk_gaps(html)
    assert not CJK_GAP.search(_reading(out))
    assert "C=128 点" in out and "16</span>" + pop + "</span> 个" in out   # beside a digit it stays
    assert pop in out and '<script>"两个 直方图"</script>' in out          # read, never rewritten
    assert CJK_GAP.search(_reading(html))                                  # the case it is about


def test_there_are_committed_rounds():
    assert len(ROUNDS) >= 5


def test_both_languages_give_every_number_the_same_id(pages):
    for r in ROUNDS:
        en, zh = _ids(pages[(r.parent.name, "en")]), _ids(pages[(r.parent.name, "zh")])
        assert len(en) > 100 and en == zh, r.parent.name


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_nothing_unresolved_and_no_last_point(pages, lang):
    for r in ROUNDS:
        text = _prose(pages[(r.parent.name, lang)])
        for left in ("[[", "{@", "]]", "@}", "末点", "首点", "last point", "first point"):
            assert left not in text, (r.parent.name, lang, left)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_no_sentence_prints_an_absent_number_and_no_round_is_named_by_its_id(pages, lang):
    """A sentence whose number is absent is gated: it says why in words (why()), never with the
    "not measured" mark a table cell uses; a round is "Round 11" / 第 11 轮, never `round-11`."""
    for r in ROUNDS:
        html = pages[(r.parent.name, lang)].split('id="appendix"')[0]
        assert not re.search(r'class="num num-prose missing', html), r.parent.name
        # a recorded plan's own title is quoted as the bundle holds it (“Next step of round-2: …”)
        text = re.sub(r"“[^”]*”|「[^」]*」", " ", _prose(html.split('id="provenance"')[0]))
        assert not re.search(r"(?<![\w/.-])round-\d+(?![\w/.-])", text), (r.parent.name, lang)


def test_the_chinese_page_has_no_english_sentence_and_the_english_no_chinese(pages):
    for r in ROUNDS:
        # a message quoted verbatim from a library or the engine stands in 「」
        zh = re.sub(r"「[^」]*」", " ", _prose(pages[(r.parent.name, "zh")]))
        runs = [m.group(0) for m in ENGLISH_RUN.finditer(zh)]
        assert not runs, (r.parent.name, runs[:5])
        en = _prose(pages[(r.parent.name, "en")])
        assert not re.search(r"[\u4e00-\u9fff]", en), r.parent.name


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_points_are_named_by_their_settings_never_by_their_id(pages, lang):
    from bundle.store.reader import read_bundle
    from report.derive.round.read import read_round
    from report.judge.result import point_labels
    for r in ROUNDS:
        rd = read_round(read_bundle(r))
        labels = point_labels(rd.points)
        text = _prose(pages[(r.parent.name, lang)].split('id="provenance"')[0])
        named_by_id = [p.pid for p in rd.points if labels[p.pid] != p.pid
                       and re.search(rf"(?<![\w.-]){re.escape(p.pid)}(?![\w-])", text)]
        assert not named_by_id, (r.parent.name, lang, named_by_id)


def test_the_reproducibility_sentence_agrees_with_the_count_of_shared_points(reports, pages):
    counts = {r.round_id: r.facts.repro_points for r in reports}
    one = {"en": "the one point measured with identical settings in both rounds differs",
           "zh": "两轮中设置完全相同的测量点只有一个"}
    many = {"en": "the points measured with identical settings in both rounds differ",
            "zh": "两轮中设置完全相同的测量点，"}
    assert 1 in counts.values() and any(n > 1 for n in counts.values())   # both cases committed
    for (rid, lang), html in pages.items():
        text = _prose(html)
        assert (one[lang] in text) == (counts[rid] == 1), (rid, lang)
        assert (many[lang] in text) == (counts[rid] > 1), (rid, lang)


def test_page_1_names_the_swept_axis_and_says_when_no_slo_was_given(reports, pages):
    no_slo = {"en": "No SLO was given for this round", "zh": "本轮没有给出 SLO"}
    by_length = {"en": "This round swept the input length from", "zh": "本轮扫描输入长度，从"}
    by_c = {"en": "This round swept concurrency from", "zh": "下扫描并发，从"}
    seen = set()
    for r in reports:
        slo = r.ledger["r.slo_percentile"].present
        for lang in ("en", "zh"):
            text = _prose(pages[(r.round_id, lang)])
            assert (no_slo[lang] in text) == (not slo and bool(r.facts.valid_points)), (r.round_id, lang)
            if r.facts.axis != "input_len":
                assert by_length[lang] not in text, (r.round_id, lang)
            if r.facts.axis != "concurrency":
                assert by_c[lang] not in text, (r.round_id, lang)
        seen.add((r.facts.axis, slo))
    text5 = _prose(pages[("round-5", "en")])
    assert by_length["en"] in text5 and "at a fixed concurrency of C=" in text5 and no_slo["en"] in text5
    text4 = _prose(pages[("round-4", "en")])
    assert by_c["en"] in text4 and no_slo["en"] not in text4
    assert ("concurrency", True) in seen and ("concurrency", False) in seen


def test_ledger_findings_and_pages_are_three_views_of_one_judged_round(reports):
    # `ledger --json` and `findings --json` judge a bundle as `build` does (against the round
    # beside it): every key, value, verdict, finding and next step of the page, none other.
    from report.judge.result import judge_bundle
    from report.publish.dumps import findings_json, ledger_json
    for r in reports:
        res = judge_bundle(ROOT / "runs" / r.round_id / "bundle")
        dumped = ledger_json(res.led)["values"]
        page = ledger_json(r.ledger)["values"]
        assert dumped == page, r.round_id
        found = findings_json(res)
        assert {p["point"]: p["bottleneck"] for p in found["points"] if p["point"] in r.facts.ok_points} == \
            r.facts.bottlenecks, r.round_id
        assert [f["id"] for f in found["findings"]] == [f["id"] for f in r.facts.findings], r.round_id
        assert [s["id"] for s in found["next_steps"]] == [s["id"] for s in r.facts.next_steps], r.round_id
        assert found["previous_round"] == (r.facts.prev_round and res.prev[0].round_id), r.round_id
    assert any(r.facts.has_prev for r in reports)      # a round compared with its predecessor is among them


def test_the_ledger_verb_prints_the_pages_ledger(capsys):
    import json

    from serving_ledger.cli import main
    assert main(["ledger", str(ROOT / "runs" / "round-5"), "--json"]) == 0
    values = json.loads(capsys.readouterr().out)["values"]
    # Round 5 is read against round 4 beside it: the comparison's values are there.
    assert any(k.startswith("x.") for k in values)


_SECTION = re.compile(r'<section class="section" id="sec-([\w-]+)">(.*?)</section>', re.S)
_TAGS = re.compile(r"<[^>]+>")


def _sections(html: str) -> dict[str, str]:
    return dict(_SECTION.findall(html))


def test_page_one_opens_with_the_limit_and_the_load_it_holds_from(reports, pages):
    from report.words import group, in_lang
    checked = 0
    for r in reports:
        if not r.facts.headline:
            continue
        top = r.facts.valid_points[-1]
        for lang in ("en", "zh"):
            summary = _sections(pages[(r.round_id, lang)])["summary"]
            first = re.search(r"<p>(.*?)</p>", summary, re.S).group(1)
            assert first.startswith("<strong>"), (r.round_id, lang, first[:80])
            sentence = r.facts.headline[lang][0]
            assert sentence.strip(), r.round_id
            # the load: a valid point as the page names it
            labels = [in_lang(r.facts.point_labels[p], lang) for p in r.facts.valid_points]
            assert any(lab in sentence for lab in labels), (r.round_id, lang, sentence)
            # the limit, unless no limit was reached: no verdict, or an open loop that kept up
            if r.facts.bottlenecks[top] not in ("unknown", "under_driven") and r.ledger.value_of(f"p.{top}.open_loop") is not True:
                limits = group("finding.thesis_limit_", lang).values()
                assert any(w in sentence for w in limits), (r.round_id, lang, sentence)
            checked += 1
    assert checked >= 10


def test_page_one_gives_the_answer_before_the_cards_in_order(reports, pages):
    for r in reports:
        if not r.facts.headline:
            continue
        summary = _sections(pages[(r.round_id, "en")])["summary"]
        text = unescape(_TAGS.sub("", summary))
        cards = summary.index('class="cards')
        head = text.index(r.facts.headline["en"][0].split("[[")[0].strip()[:30])
        slo = (text.index("No SLO was given") if not r.ledger["r.slo_percentile"].present
               else text.index("SLO ("))
        assert head < slo, r.round_id
        if r.facts.next_steps:
            assert slo < text.index("Next step:"), r.round_id
            assert summary.index("Next step:") < cards, r.round_id


def test_sections_with_nothing_to_report_are_a_line_of_not_measured_here(reports, pages):
    from report.publish.compose import NOT_MEASURED_SECTION
    listed = 0
    for r in reports:
        if not r.facts.ok_points:
            continue
        assert r.sections[-2:] == ["reading", "method"], r.round_id
        if not r.ledger["r.slo_percentile"].present:
            assert "slo" in r.facts.not_measured and "slo" not in r.sections, r.round_id
        for code in r.facts.not_measured:
            assert NOT_MEASURED_SECTION[code] not in r.sections, (r.round_id, code)
            listed += 1
        if r.facts.not_measured:
            items = re.findall(r"<li>", _sections(pages[(r.round_id, "en")])["notmeasured"])
            assert len(items) == len(r.facts.not_measured), r.round_id
    assert listed


def test_how_to_read_this_is_said_once_at_the_back(reports, pages):
    for r in reports:
        if not r.facts.ok_points:
            continue
        html = pages[(r.round_id, "en")]
        secs = _sections(html)
        assert "Each point is checked before it is judged" in secs["reading"], r.round_id
        assert html.count("Each point is checked before it is judged") == 1, r.round_id
        assert "Engine: vLLM" not in secs["summary"] and "Engine: vLLM" in secs["reading"], r.round_id


_CAPTION = re.compile(r'<figure class="figure" id="fig-([\w-]+)">.*?<figcaption class="fig-caption">(.*?)</figcaption>', re.S)
_POP = re.compile(r'<span class="pop" role="tooltip">.*?</span></span>', re.S)


def test_a_sweeps_figures_say_what_they_show(reports, pages):
    """Where a sweep has two ends, the throughput and latency figures' captions state what the
    figure shows (its two ends, from the ledger), not only the ids of their data."""
    said = 0
    for r in reports:
        if r.facts.first_point == r.facts.headline_point:
            continue
        for lang in ("en", "zh"):
            captions = {fid: unescape(_TAGS.sub("", _POP.sub("", cap))).strip()
                        for fid, cap in _CAPTION.findall(pages[(r.round_id, lang)])}
            for fid in ("throughput", "latency"):
                if fid in captions and fid in r.figures:
                    assert not captions[fid].startswith(("Data", "数据")), (r.round_id, lang, fid, captions[fid][:60])
                    said += 1
    assert said


# The Latin words a Chinese page may print outside code, a quoted title and a number's unit:
# the terms the Chinese reports themselves write in English (prefill, decode, token, chunk,
# block, goodput), metric and gauge names, tool and model names, and proper names.
LATIN_ALLOWED = {
    "prefill", "decode", "token", "chunk", "block", "goodput", "roofline", "graph", "server", "usage",
    "running", "gauge", "id", "bench", "serve", "vllm", "serving-ledger", "libnvidia-ml", "slo", "code",
    "ms", "MHz", "GiB", "Tensor", "Little", "PagedAttention", "Python", "ShareGPT", "Intel", "Xeon",
    "Processor", "tiny", "mooncake",
}
LATIN_WORD = re.compile(r"(?<![\w./:=\-\[])[A-Za-z][A-Za-z'’\-]*[a-z][A-Za-z'’\-]*(?![\w/:=\]])")


def latin_words(text: str) -> set[str]:
    """The Latin words of a Chinese page's reading text, quoted titles and messages (「」) and
    paths (round-14/external/x.json, running/waiting) left out."""
    return set(LATIN_WORD.findall(re.sub(r"[^\s（）()「」，、：；]*/[^\s（）()「」，、：；]*", " ",
                                         re.sub(r"「[^」]*」", " ", text))))


_SUBTITLE = re.compile(r'<p class="doc-subtitle">(.*?)</p>', re.S)


def subtitle_words(html: str) -> set[str]:
    """The Latin words of a page's subtitle (the plan's title), quoted or not, outside the
    allowed terms: a Chinese page's subtitle is the plan's Chinese title, never its English one."""
    text = " ".join(unescape(re.sub(r"<[^>]+>", " ", m)) for m in _SUBTITLE.findall(html))
    return set(LATIN_WORD.findall(text)) - LATIN_ALLOWED


def test_the_chinese_page_prints_no_english_word_outside_the_allowed_terms(pages):
    for r in ROUNDS:
        words = latin_words(_reading(pages[(r.parent.name, "zh")])) - LATIN_ALLOWED
        assert not words, (r.parent.name, sorted(words))
        assert not subtitle_words(pages[(r.parent.name, "zh")]), r.parent.name


def test_an_english_subtitle_on_a_chinese_page_is_caught():
    english = '<p class="doc-subtitle">计划标题：「Length sweep on the H200, round 5」</p>'
    assert subtitle_words(english) == {"Length", "sweep", "on", "the", "round"}
    assert not subtitle_words('<p class="doc-subtitle">计划：第 4 轮的下一步，缩小每步预算</p>')


def test_an_english_word_on_a_chinese_page_is_caught():
    assert latin_words("前缀缓存命中，prefix cache 命中率") == {"prefix", "cache"}
    assert not latin_words("「Next step of round-2」 `--enable-prefix-caching` 的 KV 池 L1024-c1 ITL p99 7.57 ms") - {"ms"}
    assert not latin_words("vllm bench serve（round-14/external/vllm-bench-serve-c1.json）") - {"vllm", "bench", "serve"}
