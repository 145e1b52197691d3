"""The pieces every figure shares: the catalogue's figure words, the palette, axes, legends, lines over a sweep and stacked bars.

A figure plots either ledger values (each key listed in `Figure.keys`, so its provenance is
the ledger's) or raw gauge samples straight from the bundle (the timeline). Nothing here
computes a number of its own.
"""

from __future__ import annotations

from typing import Any, Callable

import altair as alt
import pandas as pd

from report.ledger import Ledger
from report.words import LANGS, group

WIDTH, HEIGHT = 560, 240


# Axis titles, legends and figure titles: `label.fig_*` in the catalogue, looked up by name.
TEXT: dict[str, dict[str, str]] = {lang: group("label.fig_", lang) for lang in LANGS}


PALETTE = ["#2f6db5", "#e07b39", "#5aa469", "#b5443c", "#8a6bbf", "#7f7f7f"]


# A length axis is log2 (ticks at the swept lengths) once the lengths span more than this
# factor: on a linear axis L=256 and L=512 crowd each other beside L=8192.
LOG_LENGTH_SPAN = 8


def wide_span(rows: list[dict], field: str = "x") -> bool:
    """Whether the FIELD values of ROWS (those above zero) span more than LOG_LENGTH_SPAN."""
    xs = [r[field] for r in rows if r[field] > 0]
    return bool(xs) and max(xs) > LOG_LENGTH_SPAN * min(xs)


def log_share_axis(rows: list[dict]) -> bool:
    """Whether a share's y axis is log: its values span more than LOG_LENGTH_SPAN (the length
    axes' rule), and none is zero, which a log axis could not show."""
    return bool(rows) and all(r["y"] > 0 for r in rows) and wide_span(rows, "y")


def titled_legend(title: str, orient: str = "bottom") -> alt.Legend:
    """A legend of its own: titled, so two legends of a figure never read as one."""
    return alt.Legend(orient=orient, title=title)


def value_at(led: Ledger, key: str) -> float | None:
    """The value LED holds at KEY (None where it holds none or an absent one: Ledger.value_of)."""
    return led.value_of(key)


def point_rows(led: Ledger, pids: list[str], axis_key: str, series: dict[str, str],
               scale: float = 1.0) -> tuple[list[dict[str, Any]], list[str]]:
    """(rows, keys): each point's SERIES values (times SCALE) against its AXIS_KEY value, where
    both are present, with whether the point passed its checks; the keys the rows plot."""
    rows, keys = [], []
    for pid in pids:
        x = value_at(led, f"p.{pid}.{axis_key}")
        for label, q in series.items():
            key = f"p.{pid}.{q}"
            y = value_at(led, key)
            if x is not None and y is not None:
                rows.append({"x": x, "y": y * scale, "series": label, "point": pid,
                             "valid": value_at(led, f"p.{pid}.valid") is not False})
                keys.append(key)
    return rows, keys


def line_chart(rows, t: dict, axis: str, y_title: str, title: str = "", log_y: bool = False,
               log_x: bool = True, zero_rule: bool = False, full: float | None = None) -> dict:
    """Lines of ROWS' series against the sweep axis, joining valid points (a failed one a cross);
    FULL, where given, is the value at which the quantity is full (a pool's 100 %): a dashed
    line where the axis reaches it, else a note that it lies above the axis."""
    if log_y:
        rows = [r for r in rows if r["y"] > 0]  # a log axis cannot show zero
    df = pd.DataFrame(rows)
    xs = alt.Scale(type="log", base=2) if log_x else alt.Scale(zero=False)
    # A log axis spans the data (left to itself it runs to the next decade).
    top = max(r["y"] for r in rows) * 1.25 if rows else 0.0
    ys = (alt.Scale(type="log", domain=[min(r["y"] for r in rows) / 1.25, top],
                    nice=False) if log_y and rows else alt.Scale(zero=True))
    ticks = sorted({r["x"] for r in rows})
    # Series keep the order they were given in, so a quantity has one colour in every chart.
    domain = list(dict.fromkeys(r["series"] for r in rows))
    x = alt.X("x:Q", title=t[axis], scale=xs, axis=alt.Axis(values=ticks, format="d" if all(float(x).is_integer() for x in ticks) else "~s"))
    y = alt.Y("y:Q", title=y_title, scale=ys)
    color = alt.Color("series:N", title=t["series"], sort=domain,
                      scale=alt.Scale(domain=domain, range=PALETTE[:len(domain)]),
                      legend=alt.Legend(orient="bottom"))
    tip = [alt.Tooltip("point:N", title=t["point"]), alt.Tooltip("series:N", title=t["series"]),
           alt.Tooltip("y:Q", title=y_title, format=",.2f")]
    good = df[df["valid"]] if "valid" in df else df
    bad = df[~df["valid"]] if "valid" in df else df.iloc[0:0]
    # Lines join valid points only; a point that failed its checks is a cross on its own.
    layers = []
    if len(good):
        layers.append(alt.Chart(good).mark_line(point=True).encode(x=x, y=y, color=color, tooltip=tip))
    if len(bad):
        layers.append(alt.Chart(bad).mark_point(shape="cross", size=90, filled=True).encode(
            x=x, y=y, color=color, tooltip=tip + [alt.Tooltip("valid:N", title=t["valid"])]))
    if zero_rule:   # the line a margin must stay above
        layers.append(alt.Chart(pd.DataFrame({"y": [0.0]})).mark_rule(color="#444", strokeDash=[4, 3])
                      .encode(y="y:Q"))
    if full is not None and full <= top:    # the axis reaches it: the line, named at its left end
        at = pd.DataFrame({"y": [full], "x": [min(r["x"] for r in rows)], "label": [t["full"]]})
        layers.append(alt.Chart(at).mark_rule(color="#444", strokeDash=[4, 3]).encode(y=alt.Y("y:Q", scale=ys)))
        layers.append(alt.Chart(at).mark_text(align="left", baseline="bottom", dy=-3, fontSize=9, color="#444")
                      .encode(x=alt.X("x:Q", scale=xs), y=alt.Y("y:Q", scale=ys), text="label:N"))
    elif full is not None:                  # out of the domain, said in words in the plot's corner
        layers.append(alt.Chart(pd.DataFrame({"label": [t["full_above"]]})).mark_text(
            align="left", baseline="top", fontSize=9, color="#444").encode(
            x=alt.value(4), y=alt.value(4), text="label:N"))
    ch = alt.layer(*layers).properties(width=WIDTH, height=HEIGHT)
    if len(bad):
        ch = ch.properties(title=alt.TitleParams(text=t["invalid_note"], fontSize=10,
                                                 fontWeight="normal", anchor="start"))
    return ch.to_dict()


def noted_chart(ch, t: dict, left_out: bool):
    """CH with the note that points which failed their checks are left out, where any was."""
    if not left_out:
        return ch
    return ch.properties(title=alt.TitleParams(text=t["invalid_left_out"], fontSize=10,
                                               fontWeight="normal", anchor="start"))


def per_lang(make: Callable[[dict], dict]) -> dict[str, dict]:
    # the figure's words in LANG, and the language itself (for names such as a point's, a Named)
    return {lang: make(dict(TEXT[lang], lang=lang)) for lang in LANGS}


# A hollow square (a frame: its inner square wound the other way), the legend's symbol of a
# bar drawn hollow.
FRAME = "M-1,-1H1V1H-1Z M-0.6,-0.6V0.6H0.6V-0.6Z"


HOLLOW = 0.08     # the fill opacity of a hollow bar: its outline in the part's colour carries it


def check_rows(rows: list[dict], t: dict) -> list[dict]:
    """ROWS with each point's checks in words (`valid`: the figures' yes or no), for the legend."""
    return [dict(r, checks=t["yes"] if r["valid"] else t["no"]) for r in rows]


def stacked_bars(df: pd.DataFrame, t: dict, order: list[str], y: alt.Y, unit: str, height: int,
                 x_title: str | None, width: int = WIDTH) -> alt.LayerChart:
    """Bars of DF's parts stacked per point, filled where the point passed its checks and hollow
    (outlined in the part's colour) where it failed them, each said in a legend."""
    colours = alt.Scale(domain=order, range=PALETTE[:len(order)])
    checks = [t["yes"], t["no"]]
    x = alt.X("x:O", title=x_title)
    bars = alt.Chart(df).mark_bar(strokeWidth=1.5).encode(
        x=x, y=y,
        color=alt.Color("series:N", title=t["part"], sort=order, scale=colours, legend=titled_legend(t["part"])),
        stroke=alt.Stroke("series:N", sort=order, scale=colours, legend=None),
        fillOpacity=alt.condition(alt.datum.checks == t["no"], alt.value(HOLLOW), alt.value(1.0)),
        order=alt.Order("order:Q"),
        tooltip=[alt.Tooltip("point:N", title=t["point"]), alt.Tooltip("series:N", title=t["part"]),
                 alt.Tooltip("y:Q", title=unit, format=",.1f"), alt.Tooltip("checks:N", title=t["valid"])])
    # The legend of filled and hollow: a layer of marks of no size, whose shapes are the two squares.
    key = alt.Chart(df).mark_point(filled=True, size=0, color="#666").encode(
        x=x, shape=alt.Shape("checks:N", title=t["valid"], sort=checks,
                             scale=alt.Scale(domain=checks, range=["square", FRAME]),
                             legend=alt.Legend(title=t["valid"], orient="bottom", symbolSize=120,
                                               symbolFillColor="#666", symbolStrokeWidth=0)))
    return alt.layer(bars, key).properties(width=width, height=height)


# A stack under this share of the tallest is drawn in a panel of its own, on its own scale (in a
# panel of HEIGHT pixels it would be a few pixels tall).
SMALL_STACK = 0.05


def small_stacks(totals: dict[str, float]) -> set[str]:
    """The points whose stack is under SMALL_STACK of the tallest; empty unless both groups are."""
    top = max(totals.values(), default=0.0)
    small = {pid for pid, y in totals.items() if y < SMALL_STACK * top}
    return small if 0 < len(small) < len(totals) else set()
