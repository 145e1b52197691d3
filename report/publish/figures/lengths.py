"""Figures of lengths: ITL and peak KV against the prompt length, the requests' measured lengths, and a session's turns."""

from __future__ import annotations

from typing import Any

import altair as alt
import numpy as np
import pandas as pd

from report.ledger import Ledger
from report.publish.document import Figure
from report.publish.figures.chart import (
    HEIGHT,
    PALETTE,
    TEXT,
    WIDTH,
    line_chart,
    per_lang,
    point_rows,
    value_at,
    wide_span,
)
from report.words import LANGS, in_lang


def fig_itl_vs_len(led: Ledger, pids: list[str]) -> Figure | None:
    """ITL p50 against input length (docs/analyses.md item 18)."""
    rows_any, keys = point_rows(led, pids, "input_len", {"p": "itl_ms_p50"})
    if len(rows_any) < 2:
        return None

    # The slope the page quotes, drawn: the fit (its intercept and slope) and, from the same
    # intercept, the slope the KV reads at peak bandwidth predict.
    a, b, theory = (value_at(led, k) for k in ("r.itl_intercept", "r.itl_slope", "r.itl_slope_theory"))
    ends = sorted({r["x"] for r in rows_any})   # at each length, so a log axis draws the curve
    lines = [(name, slope) for name, slope in (("itl_fit_line", b), ("itl_theory_line", theory))
             if a is not None and slope is not None]
    keys += [k for k in ("r.itl_intercept", "r.itl_slope", "r.itl_slope_theory")
             if lines and value_at(led, k) is not None]

    def make(t):
        rows, _ = point_rows(led, pids, "input_len", {t["itl_p50"]: "itl_ms_p50"})
        rows += [{"x": x, "y": a + slope * x, "series": t[name], "point": "", "valid": True}
                 for name, slope in lines for x in ends]
        return line_chart(rows, t, "input_len", t["ms"], t["itl_fit_title"], log_x=wide_span(rows))
    return Figure("itl_vs_len", per_lang(make), {lang: TEXT[lang]["itl_fit_title"] for lang in LANGS},
                  keys=tuple(keys))


def fig_kv_linearity(led: Ledger, pids: list[str]) -> Figure | None:
    """Peak KV tokens against input length, with the theory line and the least-squares fit whose
    slope the page quotes (docs/analyses.md item 12)."""
    rows_any, keys = point_rows(led, pids, "input_len", {"m": "kv_tokens_peak", "t": "kv_tokens_theory"})
    if len(rows_any) < 2:
        return None
    a, b = value_at(led, "r.kv_lin_intercept"), value_at(led, "r.kv_lin_slope")
    ends = sorted({r["x"] for r in rows_any})   # at each length, so a log axis draws the line
    fitted = a is not None and b is not None
    keys += ["r.kv_lin_intercept", "r.kv_lin_slope"] if fitted else []

    def make(t):
        rows, _ = point_rows(led, pids, "input_len", {t["measured_peak"]: "kv_tokens_peak",
                                                  t["theory"]: "kv_tokens_theory"})
        rows += [{"x": x, "y": a + b * x, "series": t["kv_fit_line"], "point": "", "valid": True}
                 for x in ends] if fitted else []
        return line_chart(rows, t, "input_len", t["kv_tokens"], t["kvlin_title"], log_x=wide_span(rows))
    return Figure("kv_linearity", per_lang(make), {lang: TEXT[lang]["kvlin_title"] for lang in LANGS},
                  keys=tuple(keys))


def _turn_rows(led: Ledger, pids: list[str], series: dict[str, str], labels: dict[str, str],
               scale: float = 1.0, lang: str = "en") -> tuple[list[dict[str, Any]], list[str]]:
    """One row per point, series and turn (the first turn is turn one) of the per-turn tuples."""
    rows, keys = [], []
    for pid in pids:
        for name, q in series.items():
            key = f"p.{pid}.{q}"
            values = led.value_of(key)
            if not values:
                continue
            keys.append(key)
            for k, y in enumerate(values):
                if y is not None:
                    rows.append({"x": k + 1, "y": y * scale, "series": f"{in_lang(labels.get(pid, pid), lang)} {name}",
                                 "point": pid, "valid": value_at(led, f"p.{pid}.valid") is not False})
    return rows, keys


def fig_session_turns(led: Ledger, pids: list[str], labels: dict[str, str]) -> list[Figure]:
    """A sessions workload's TTFT p50 / p99 and prefix-cache hit rate against the turn, per point."""
    figs = []
    for fid, qs, scale, y_key, title in (
            ("session_ttft", {"ttft_p50": "session_turn_ttft_ms_p50", "ttft_p99": "session_turn_ttft_ms_p99"},
             1.0, "ms", "session_ttft_title"),
            ("session_hits", {"hit_rate": "session_turn_prefix_hit_rate"}, 100.0, "hit_rate",
             "session_hits_title")):
        rows_any, keys = _turn_rows(led, pids, qs, labels)
        if not rows_any:
            continue

        def make(t, qs=qs, scale=scale, y_key=y_key, title=title):
            rows, _ = _turn_rows(led, pids, {t[k]: q for k, q in qs.items()}, labels, scale, t["lang"])
            return line_chart(rows, t, "turn", t[y_key], t[title], log_x=False)
        figs.append(Figure(fid, per_lang(make), {lang: TEXT[lang][title] for lang in LANGS},
                           keys=tuple(keys)))
    return figs


def lengths_vary(measured: dict[str, Any]) -> bool:
    """Whether the requests of MEASURED (point -> its measured RequestTable) were sent with
    more than one prompt length or more than one output length."""
    for table in measured.values():
        for col in ("input_len", "max_tokens"):
            xs = table.col(col)
            xs = xs[~pd.isna(xs)]
            if len(xs) and xs.min() != xs.max():
                return True
    return False


def fig_lengths(measured: dict[str, Any], labels: dict[str, str]) -> Figure | None:
    """Histograms of the prompt and output lengths each point's measured requests were sent
    with (raw per-request records), shown only when the lengths vary."""
    if not measured or not lengths_vary(measured):
        return None

    # Counted here, not by Vega: a point of thousands of requests is a few dozen bars, and
    # every point and both series share one set of bin edges (so bars line up across rows).
    cols = {(pid, col): np.asarray([x for x in table.col(col) if not pd.isna(x)], dtype=float)
            for pid, table in measured.items() for col in ("input_len", "max_tokens")}
    edges = np.histogram_bin_edges(np.concatenate(list(cols.values())), bins=40)

    def make(t):
        rows = []
        for (pid, col), xs in cols.items():
            counts, _ = np.histogram(xs, bins=edges)
            name = t["input_lengths"] if col == "input_len" else t["output_lengths"]
            rows += [{"lo": float(lo), "hi": float(hi), "n": int(n), "series": name,
                      "point": in_lang(labels.get(pid, pid), t["lang"])}
                     for lo, hi, n in zip(edges[:-1], edges[1:], counts) if n]
        df = pd.DataFrame(rows)
        base = alt.Chart(df).mark_bar(opacity=0.65).encode(
            x=alt.X("lo:Q", title=t["length_tokens"]), x2="hi:Q",
            y=alt.Y("n:Q", title=t["requests"], stack=None),
            color=alt.Color("series:N", title=t["series"],
                            scale=alt.Scale(range=PALETTE[:2]), legend=alt.Legend(orient="bottom")))
        return base.properties(width=WIDTH, height=HEIGHT // 2).facet(
            row=alt.Row("point:N", title=t["point"])).to_dict()
    return Figure("lengths", per_lang(make), {lang: TEXT[lang]["lengths_title"] for lang in LANGS})
