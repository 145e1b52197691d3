"""The templates a page is made of: where they are, a section's source in one language (its
`{@key@}` prose put in from the catalogue), the files read as they are (CSS, the page's script),
and the error a template or a report that cannot be rendered raises."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import jinja2

from report.words import section


class RenderError(Exception):
    """A template or a report cannot be rendered; the message says which and why."""


def templates_dir() -> Path:
    """The narrative templates: templates/ beside the package in a checkout, else the copy
    installed as package data `report.templates` (pyproject maps one onto the other)."""
    package = Path(__file__).resolve().parents[2]      # report/
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


class SectionLoader(jinja2.BaseLoader):
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


@functools.lru_cache(maxsize=16)
def static_file(templates_dir: Path, name: str) -> str:
    """A file of the templates folder read as it is (report.css, print.css, page.js)."""
    return (templates_dir / name).read_text(encoding="utf-8")
