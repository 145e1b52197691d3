"""The PDF of a page assembled in "pdf" mode (weasyprint): its fonts checked (a Chinese page no
installed font can draw is refused), nothing fetched but data: URIs, no dates in it."""

from __future__ import annotations

import re

from report.publish.render.templating import RenderError


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
