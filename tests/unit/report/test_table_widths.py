"""Every table of every committed round, laid out as the PDF prints it, fits between the page's
margins in both languages; the check itself sees a table that runs off the right edge."""

from __future__ import annotations

from dataclasses import replace

import pytest

from report.publish.compose import compose_rounds
from report.publish.render.page import Page
from tests.conftest import ROOT
from tests.render_fixture import templates_with

ROUNDS = sorted((ROOT / "runs").glob("round-*/bundle"))
SLACK_PX = 0.5   # layout rounding, not a column


def tables_past_the_margin(html: str) -> list[str]:
    """Each table box whose right edge lies beyond its page's content box, as 'page N: id'."""
    import weasyprint
    from weasyprint.formatting_structure import boxes

    doc = weasyprint.HTML(string=html, base_url=None).render()
    out = []
    for n, page in enumerate(doc.pages, 1):
        root = page._page_box
        right = root.content_box_x() + root.width
        for box in root.descendants():
            if isinstance(box, boxes.TableBox):
                edge = box.position_x + box.margin_width()
                if edge > right + SLACK_PX:
                    out.append(f"page {n}: {box.element.get('id') or box.element_tag} "
                               f"{edge - right:.0f}px past the margin")
    return out


@pytest.fixture(scope="module")
def reports():
    return compose_rounds([(b, b.parent.name) for b in ROUNDS])


def test_the_check_sees_a_table_wider_than_the_page():
    cells = "".join(f"<td>{'w' * 12}{i}</td>" for i in range(40))
    html = f"<html><body><table id='t'><tr>{cells}</tr></table></body></html>"
    assert tables_past_the_margin(html)
    assert tables_past_the_margin("<html><body><table><tr><td>a</td></tr></table></body></html>") == []


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_no_table_of_a_committed_round_is_wider_than_the_printed_page(reports, tmp_path, lang):
    wide = []
    for r in reports:
        if not r.tables:
            continue
        source = "\n\n".join(f'{{{{ table("{tid}") }}}}' for tid in r.tables)
        tdir = templates_with(tmp_path / f"{r.round_id}-{lang}", "_t", source)
        html = Page(replace(r, sections=["_t"]), lang, tdir).assemble("pdf")
        wide += [f"{r.round_id} {lang} {w}" for w in tables_past_the_margin(html)]
    assert wide == []
