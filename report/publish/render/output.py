"""A round's pages written: each language in each format (HTML, PDF), each stage timed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from report.publish.document import RoundReport
from report.publish.render.page import MODES, Page
from report.publish.render.pdf import html_to_pdf
from report.publish.render.templating import TEMPLATES_DIR, RenderError
from report.publish.render.vega import figure_svg, vega_bundle
from report.words import LANGS


@dataclass
class Timing:
    """Seconds one stage took for one round and language."""

    round_id: str
    lang: str
    stage: str      # "sections", "bundle", "html", "figures", "pdf", "audit"
    seconds: float


@dataclass
class RoundOutput:
    round_id: str
    paths: list[Path]
    timings: list[Timing]


def page_name(lang: str, fmt: str) -> str:
    """File name of a round's page: index.zh.html, report.en.pdf (what a reviewer reads),
    audit.en.pdf (where each of its numbers comes from), ..."""
    return {"html": f"index.{lang}.html", "audit": f"audit.{lang}.pdf"}.get(fmt, f"report.{lang}.pdf")


def files_of(formats: tuple[str, ...]) -> tuple[str, ...]:
    """The kinds of file FORMATS write: a PDF comes with its audit PDF."""
    return tuple(f for fmt in formats for f in ((fmt, "audit") if fmt == "pdf" else (fmt,)))


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
        links = {f"{lg}.{fm}": page_name(lg, fm) for lg in LANGS for fm in files_of(formats)}
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
            t0 = time.perf_counter()
            path = round_dir / page_name(lang, "audit")
            path.write_bytes(html_to_pdf(page.assemble("pdf", svgs=svgs, links=links, part="audit")))
            out.paths.append(path)
            timed(lang, "audit", t0)
    return out
