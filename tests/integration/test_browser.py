"""The HTML pages in headless Chromium with every network load blocked: charts draw, the
CSP is not violated, the number popup opens on focus. Screenshots go to artifacts/browser/."""

from __future__ import annotations

import base64
import hashlib
import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from report.publish.site import build_site
from tests.render_fixture import ROUND_ID, hand_built_report

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "browser"
LANGS = ("zh", "en")

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(),
                                reason="no /usr/bin/chromium (apt-get install -y chromium)")


def chromium(url: str, *action: str, window: str = "1200,3200") -> str:
    """Run headless Chromium, offline, on URL with ACTION flags; returns stdout."""
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        cmd = [
            str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-background-networking", "--no-first-run", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={profile}",
            "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9",
            "--hide-scrollbars", f"--window-size={window}", "--virtual-time-budget=15000",
            *action, url,
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    build_site([hand_built_report()], out, formats=("html",))
    return out


def _charts_drawn(dom: str) -> None:
    for fig_id in hand_built_report().figures:
        m = re.search(rf'<div class="chart[^"]*" id="chart-{fig_id}"([^>]*)>(.*?)</figure>', dom,
                      re.S)
        assert m, f"chart {fig_id} missing from the DOM"
        assert 'data-rendered="1"' in m.group(1), f"chart {fig_id} not rendered"
        assert "<svg" in m.group(2) or "<canvas" in m.group(2), f"chart {fig_id} has no drawing"
        assert "chart-error" not in m.group(0)


@pytest.mark.parametrize("lang", LANGS)
def test_charts_render_offline_without_csp_violations(site, lang):
    page = site / ROUND_ID / f"index.{lang}.html"
    dom = chromium(page.as_uri(), "--dump-dom")
    _charts_drawn(dom)
    root = re.search(r"<html[^>]*>", dom).group(0)
    assert "data-csp-violations" not in root, root  # set by the page's violation listener
    assert "js" in re.search(r'class="([^"]*)"', root).group(1).split()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / f"{ROUND_ID}.{lang}.png"
    shot.unlink(missing_ok=True)
    chromium(page.as_uri(), f"--screenshot={shot}")
    assert shot.exists() and shot.stat().st_size > 50_000  # a drawn page, not a blank one


def _with_script(page: Path, js: str, dest: Path) -> Path:
    """A copy of PAGE running JS as well, its hash added to the page's CSP."""
    text = page.read_text(encoding="utf-8")
    digest = base64.b64encode(hashlib.sha256(js.encode()).digest()).decode()
    text = text.replace("script-src ", f"script-src &#39;sha256-{digest}&#39; ", 1)
    head, tail = text.rsplit("</body>", 1)  # the last one: the Vega bundle has the string too
    text = f"{head}<script>{js}</script>\n</body>{tail}"
    dest.write_text(text, encoding="utf-8")
    return dest


@pytest.mark.parametrize("lang", LANGS)
def test_number_popup_opens_on_focus(site, lang, tmp_path):
    page = site / ROUND_ID / f"index.{lang}.html"
    # a number near the top, focused without scrolling: headless screenshots of a scrolled
    # page come out partly blank
    js = ('window.addEventListener("load", function () {'
          ' document.querySelector(\'.card .num[data-key="point.c64.ttft_mean"]\')'
          '.focus({preventScroll: true}); });')
    probe = _with_script(page, js, page.with_name(f"focus.{lang}.html"))
    dom = chromium(probe.as_uri(), "--dump-dom")
    m = re.search(r'<div id="numpop"([^>]*)>(.*?)</div>', dom, re.S)
    assert m, "no popup element"
    assert "open" in m.group(1) and "hidden" not in m.group(1)
    assert 'class="pop-id">N' in m.group(2)
    assert "render_fixture.mean_ms" in m.group(2)
    assert 'aria-describedby="numpop"' in dom
    assert "data-csp-violations" not in re.search(r"<html[^>]*>", dom).group(0)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    chromium(probe.as_uri(), f"--screenshot={ARTIFACTS / f'{ROUND_ID}.{lang}.focus.png'}",
             window="1100,800")
    probe.unlink()


def test_site_index_opens(site):
    dom = chromium((site / "index.html").as_uri(), "--dump-dom")
    assert f'href="{ROUND_ID}/index.zh.html"' in dom
