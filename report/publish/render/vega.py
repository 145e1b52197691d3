"""The figures' Vega-Lite specs on a page: checked and embedded in the HTML page (Vega,
Vega-Lite and Vega-Embed inline), or drawn as static SVG for the PDF (vl-convert)."""

from __future__ import annotations

import copy
import functools
import json
import re
from typing import Any

from report.publish.render.templating import RenderError

FONT_STACK = "Noto Sans CJK SC, WenQuanYi Micro Hei, sans-serif"


def _walk(obj: Any):
    if isinstance(obj, dict):
        yield obj
        for v in obj.values():
            yield from _walk(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _walk(v)


def prepare_spec(fig_id: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A copy of a Vega-Lite spec fit to embed: inline data only, our font, no $schema URL."""
    spec = copy.deepcopy(spec)
    for d in _walk(spec):
        data = d.get("data")
        if isinstance(data, dict) and "url" in data:
            raise RenderError(f"figure {fig_id!r} loads data from {data['url']!r}; inline the values")
    spec.pop("$schema", None)  # vegaEmbed is told mode "vega-lite"; keeps URLs out of the page
    config = spec.setdefault("config", {})
    config.setdefault("font", FONT_STACK)
    return spec


def spec_json(spec: dict[str, Any]) -> str:
    """Deterministic JSON safe inside a <script> element."""
    s = json.dumps(spec, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return (s.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


@functools.lru_cache(maxsize=512)
def _svg_cached(spec_text: str) -> str:
    import vl_convert

    return vl_convert.vegalite_to_svg(json.loads(spec_text))


def figure_svg(fig_id: str, spec: dict[str, Any]) -> str:
    """Static SVG of a figure (vl-convert), font set so Chinese has glyphs."""
    prepared = prepare_spec(fig_id, spec)
    try:
        return _svg_cached(json.dumps(prepared, sort_keys=True))
    except Exception as e:  # vl-convert raises ValueError with the Vega-Lite message
        raise RenderError(f"figure {fig_id!r}: vl-convert failed: {e}") from e


@functools.lru_cache(maxsize=1)
def vega_bundle() -> str:
    """Vega, Vega-Lite and Vega-Embed as one inline script (about 0.9 MB)."""
    import vl_convert

    js = vl_convert.javascript_bundle()
    return re.sub(r"</(script)", r"<\\/\1", js, flags=re.I)
