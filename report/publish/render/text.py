"""The text passes of a page: the placeholders that keep what a template prints away from
markdown, the markdown parser, and the spacing of Chinese text (no gap between two Chinese
characters; a Chinese word of a narrow table cell kept on one line)."""

from __future__ import annotations

import re

from markdown_it import MarkdownIt
from markupsafe import Markup

from report.words import CJK, cjk_gap

# Placeholders use private-use characters that markdown treats as plain text.
PH = re.compile("\ue000([a-zA-Z])(\\d*)\ue001")
BLOCK_P = re.compile("<p>\\s*(\ue000b\\d+\ue001)\\s*</p>")


def ph(kind: str, i: int | str = "") -> Markup:
    """The placeholder of the I-th item of KIND (t: a text, n: a number, b: a block, ...)."""
    return Markup(f"\ue000{kind}{i}\ue001")


APPENDIX_PH = "\ue000A\ue001"


def markdown() -> MarkdownIt:
    """The markdown parser of the section templates: CommonMark with tables and strikethrough."""
    md = MarkdownIt("commonmark", {"html": True, "typographer": False})
    md.enable(["table", "strikethrough"])
    return md


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


def cjk_words_whole(html: str) -> str:
    """HTML whose table cells and headings keep each run of Chinese characters on one line."""
    return _TD.sub(_cjk_words_whole, html)
