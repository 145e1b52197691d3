"""Altair figures of a round, one Vega-Lite spec per language, plotting ledger values or raw samples.

A figure plots either ledger values (each key listed in `Figure.keys`, so its provenance is
the ledger's) or raw gauge samples straight from the bundle (the timeline). Nothing here
computes a number of its own.
"""

from __future__ import annotations

from typing import Any, Callable

import altair as alt
import numpy as np
import pandas as pd

from report.derive import series as S
from report.ledger import Absent, Ledger
from report.publish.document import Figure
from report.publish.numbers import format_number
from report.words import LANGS, group, in_lang

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


def _legend(title: str, orient: str = "bottom") -> alt.Legend:
    """A legend of its own: titled, so two legends of a figure never read as one."""
    return alt.Legend(orient=orient, title=title)


def _val(led: Ledger, key: str) -> float | None:
    return led.value_of(key)


def _rows(led: Ledger, pids: list[str], axis_key: str, series: dict[str, str],
          scale: float = 1.0) -> tuple[list[dict[str, Any]], list[str]]:
    rows, keys = [], []
    for pid in pids:
        x = _val(led, f"p.{pid}.{axis_key}")
        for label, q in series.items():
            key = f"p.{pid}.{q}"
            y = _val(led, key)
            if x is not None and y is not None:
                rows.append({"x": x, "y": y * scale, "series": label, "point": pid,
                             "valid": _val(led, f"p.{pid}.valid") is not False})
                keys.append(key)
    return rows, keys


def _line(rows, t: dict, axis: str, y_title: str, title: str = "", log_y: bool = False,
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


def _noted(ch, t: dict, left_out: bool):
    """CH with the note that points which failed their checks are left out, where any was."""
    if not left_out:
        return ch
    return ch.properties(title=alt.TitleParams(text=t["invalid_left_out"], fontSize=10,
                                               fontWeight="normal", anchor="start"))


def per_lang(make: Callable[[dict], dict]) -> dict[str, dict]:
    # the figure's words in LANG, and the language itself (for names such as a point's, a Named)
    return {lang: make(dict(TEXT[lang], lang=lang)) for lang in LANGS}


def fig_throughput(led: Ledger, pids: list[str], axis: str) -> Figure | None:
    """Output and total token throughput against the sweep axis (docs/analyses.md item 19)."""
    rows_any, keys = _rows(led, pids, axis, {"o": "output_tok_s", "t": "total_tok_s"})
    if not rows_any:
        return None

    def make(t):
        rows, _ = _rows(led, pids, axis, {t["output"]: "output_tok_s", t["total"]: "total_tok_s"})
        return _line(rows, t, axis, t["tok_s"], t[f"throughput_title_{axis}"])
    return Figure("throughput", per_lang(make),
                  {lang: TEXT[lang][f"throughput_title_{axis}"] for lang in LANGS},
                  keys=tuple(keys))


def fig_latency(led: Ledger, pids: list[str], axis: str) -> Figure | None:
    """TTFT and ITL percentiles against the sweep axis (log y)."""
    qs = {"ttft_p50": "ttft_ms_p50", "ttft_p99": "ttft_ms_p99", "itl_p50": "itl_ms_p50", "itl_p99": "itl_ms_p99"}
    rows_any, keys = _rows(led, pids, axis, qs)
    if not rows_any:
        return None

    def make(t):
        rows, _ = _rows(led, pids, axis, {t[k]: q for k, q in qs.items()})
        return _line(rows, t, axis, t["ms"], t["latency_title"], log_y=True)
    return Figure("latency", per_lang(make), {lang: TEXT[lang]["latency_title"] for lang in LANGS},
                  keys=tuple(keys))


# A hollow square (a frame: its inner square wound the other way), the legend's symbol of a
# bar drawn hollow.
FRAME = "M-1,-1H1V1H-1Z M-0.6,-0.6V0.6H0.6V-0.6Z"
HOLLOW = 0.08     # the fill opacity of a hollow bar: its outline in the part's colour carries it


def _checks(rows: list[dict], t: dict) -> list[dict]:
    """ROWS with each point's checks in words (`valid`: the figures' yes or no), for the legend."""
    return [dict(r, checks=t["yes"] if r["valid"] else t["no"]) for r in rows]


def _stacked_bars(df: pd.DataFrame, t: dict, order: list[str], y: alt.Y, unit: str, height: int,
                  x_title: str | None, width: int = WIDTH) -> alt.LayerChart:
    """Bars of DF's parts stacked per point, filled where the point passed its checks and hollow
    (outlined in the part's colour) where it failed them, each said in a legend."""
    colours = alt.Scale(domain=order, range=PALETTE[:len(order)])
    checks = [t["yes"], t["no"]]
    x = alt.X("x:O", title=x_title)
    bars = alt.Chart(df).mark_bar(strokeWidth=1.5).encode(
        x=x, y=y,
        color=alt.Color("series:N", title=t["part"], sort=order, scale=colours, legend=_legend(t["part"])),
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


def fig_ttft_breakdown(led: Ledger, pids: list[str], axis: str) -> Figure | None:
    """Mean queue, prefill and frontend per point (docs/analyses.md item 1): stacked in ms, and
    below as each point's shares of its mean TTFT, so the small loads read beside the large;
    a point that failed its checks is drawn hollow."""
    parts = {"queue": "queue_ms_mean", "prefill": "prefill_ms_mean", "frontend": "frontend_ms_mean"}
    rows_any, keys = _rows(led, pids, axis, parts)
    if len(rows_any) < 3:
        return None
    # The top of each stack: the client's mean TTFT the three parts add up to, printed above it.
    totals = [(pid, _val(led, f"p.{pid}.{axis}"), _val(led, f"p.{pid}.ttft_ms_mean_population"))
              for pid in dict.fromkeys(r["point"] for r in rows_any)]
    totals = [(pid, x, y) for pid, x, y in totals if x is not None and y is not None]
    keys += [f"p.{pid}.ttft_ms_mean_population" for pid, _, _ in totals]

    def make(t):
        rows, _ = _rows(led, pids, axis, {t[k]: q for k, q in parts.items()})
        order = [t["queue"], t["prefill"], t["frontend"]]
        rows = [dict(r, order=order.index(r["series"])) for r in _checks(rows, t)]
        df = pd.DataFrame(rows)

        def in_ms(pts: set[str], width: int) -> alt.LayerChart:
            bars = _stacked_bars(df[df["point"].isin(pts)], t, order, alt.Y("y:Q", title=t["ms"], stack="zero"),
                                 t["ms"], HEIGHT, None, width)
            tops = alt.Chart(pd.DataFrame([{"x": x, "y": y, "label": format_number(y)}
                                           for pid, x, y in totals if pid in pts])) \
                .mark_text(dy=-6, fontSize=9).encode(x=alt.X("x:O"), y=alt.Y("y:Q"), text="label:N")
            return alt.layer(bars, tops)
        # The small loads on a scale of their own beside the large, where one scale would flatten them.
        everyone = set(df["point"])
        small = small_stacks({pid: y for pid, _, y in totals if pid in everyone})
        if small:
            large = everyone - small
            share = len(small) / len(everyone)
            top = alt.hconcat(in_ms(small, max(int(WIDTH * share), 60)),
                              in_ms(large, max(int(WIDTH * (1 - share)), 60)), spacing=12) \
                .resolve_scale(y="independent", x="independent")
        else:
            top = in_ms(everyone, WIDTH)
        shares = _stacked_bars(df, t, order, alt.Y("y:Q", title=t["ttft_share"], stack="normalize",
                                                   axis=alt.Axis(format="%")), t["ms"], HEIGHT // 2, t[axis])
        return alt.vconcat(top, shares, spacing=6).resolve_legend(
            color="shared", shape="shared").to_dict()
    return Figure("ttft_breakdown", per_lang(make), {lang: TEXT[lang]["ttft_title"] for lang in LANGS},
                  keys=tuple(keys))


def fig_queue_vs_prefill(led: Ledger, pids: list[str], axis: str) -> Figure | None:
    """Queue and prefill means against concurrency on a log scale (docs/analyses.md item 2)."""
    parts = {"queue": "queue_ms_mean", "prefill": "prefill_ms_mean", "ttft_mean": "ttft_ms_mean"}
    rows_any, keys = _rows(led, pids, axis, parts)
    rows_any = [r for r in rows_any if r["y"] > 0 and r["series"] in ("queue", "prefill")]
    if len(rows_any) < 3:
        return None

    def make(t):
        rows, _ = _rows(led, pids, axis, {t[k]: q for k, q in parts.items()})
        rows = [r for r in rows if r["y"] > 0]  # a log axis cannot show zero
        return _line(rows, t, axis, t["ms"], t["qvp_title"], log_y=True)
    return Figure("queue_vs_prefill", per_lang(make), {lang: TEXT[lang]["qvp_title"] for lang in LANGS},
                  keys=tuple(keys))


def fig_iteration(led: Ledger, pids: list[str], axis: str) -> Figure | None:
    """Decode and prefill tokens per engine step (docs/analyses.md item 4); a point that failed
    its checks is drawn hollow."""
    parts = {"decode": "server_running_median", "prefill_chunk": "prefill_tokens_per_iteration"}
    rows_any, keys = _rows(led, pids, axis, parts)
    if len(rows_any) < 2:
        return None

    def make(t):
        rows, _ = _rows(led, pids, axis, {t[k]: q for k, q in parts.items()})
        order = [t["decode"], t["prefill_chunk"]]
        df = pd.DataFrame([dict(r, order=order.index(r["series"])) for r in _checks(rows, t)])
        return _stacked_bars(df, t, order, alt.Y("y:Q", title=t["tokens"], stack="zero"), t["tokens"], HEIGHT,
                             t[axis]).to_dict()
    return Figure("iteration", per_lang(make), {lang: TEXT[lang]["iter_title"] for lang in LANGS},
                  keys=tuple(keys))


def fig_kv(led: Ledger, pids: list[str], axis: str) -> Figure | None:
    """Measured KV usage against the block-rounded expectation (docs/analyses.md item 7), on an
    axis sized to the data."""
    parts = {"measured_p50": "kv_usage_p50", "measured_peak": "kv_usage_peak",
             "expected_peak": "kv_expected_peak", "expected_median": "kv_expected_median"}
    rows_any, keys = _rows(led, pids, axis, parts, scale=100)
    if len(rows_any) < 2:
        return None

    def make(t):
        rows, _ = _rows(led, pids, axis, {t[k]: q for k, q in parts.items()}, scale=100)
        # Sized to the data: log where the shares span more than the length axes' factor; the
        # pool's 100 % is a line only where the axis reaches it.
        return _line(rows, dict(t, full=t["pool_full"], full_above=t["pool_full_above"]), axis,
                     t["fraction"], t["kv_title"], log_y=log_share_axis(rows), full=100.0)
    return Figure("kv", per_lang(make), {lang: TEXT[lang]["kv_title"] for lang in LANGS}, keys=tuple(keys))


def fig_mfu(led: Ledger, pids: list[str], axis: str) -> Figure | None:
    """MFU and MBU against the sweep axis (docs/analyses.md item 15)."""
    parts = {"mfu": "mfu", "mbu": "mbu"}
    rows_any, keys = _rows(led, pids, axis, parts, scale=100)
    if len(rows_any) < 2:
        return None

    def make(t):
        rows, _ = _rows(led, pids, axis, {t[k]: q for k, q in parts.items()}, scale=100)
        return _line(rows, t, axis, t["pct"], t[f"mfu_title_{axis}"])
    return Figure("mfu", per_lang(make),
                  {lang: TEXT[lang][f"mfu_title_{axis}"] for lang in LANGS},
                  keys=tuple(keys))


def fig_itl_vs_len(led: Ledger, pids: list[str]) -> Figure | None:
    """ITL p50 against input length (docs/analyses.md item 18)."""
    rows_any, keys = _rows(led, pids, "input_len", {"p": "itl_ms_p50"})
    if len(rows_any) < 2:
        return None

    # The slope the page quotes, drawn: the fit (its intercept and slope) and, from the same
    # intercept, the slope the KV reads at peak bandwidth predict.
    a, b, theory = (_val(led, k) for k in ("r.itl_intercept", "r.itl_slope", "r.itl_slope_theory"))
    ends = sorted({r["x"] for r in rows_any})   # at each length, so a log axis draws the curve
    lines = [(name, slope) for name, slope in (("itl_fit_line", b), ("itl_theory_line", theory))
             if a is not None and slope is not None]
    keys += [k for k in ("r.itl_intercept", "r.itl_slope", "r.itl_slope_theory")
             if lines and _val(led, k) is not None]

    def make(t):
        rows, _ = _rows(led, pids, "input_len", {t["itl_p50"]: "itl_ms_p50"})
        rows += [{"x": x, "y": a + slope * x, "series": t[name], "point": "", "valid": True}
                 for name, slope in lines for x in ends]
        return _line(rows, t, "input_len", t["ms"], t["itl_fit_title"], log_x=wide_span(rows))
    return Figure("itl_vs_len", per_lang(make), {lang: TEXT[lang]["itl_fit_title"] for lang in LANGS},
                  keys=tuple(keys))


def fig_kv_linearity(led: Ledger, pids: list[str]) -> Figure | None:
    """Peak KV tokens against input length, with the theory line and the least-squares fit whose
    slope the page quotes (docs/analyses.md item 12)."""
    rows_any, keys = _rows(led, pids, "input_len", {"m": "kv_tokens_peak", "t": "kv_tokens_theory"})
    if len(rows_any) < 2:
        return None
    a, b = _val(led, "r.kv_lin_intercept"), _val(led, "r.kv_lin_slope")
    ends = sorted({r["x"] for r in rows_any})   # at each length, so a log axis draws the line
    fitted = a is not None and b is not None
    keys += ["r.kv_lin_intercept", "r.kv_lin_slope"] if fitted else []

    def make(t):
        rows, _ = _rows(led, pids, "input_len", {t["measured_peak"]: "kv_tokens_peak",
                                                  t["theory"]: "kv_tokens_theory"})
        rows += [{"x": x, "y": a + b * x, "series": t["kv_fit_line"], "point": "", "valid": True}
                 for x in ends] if fitted else []
        return _line(rows, t, "input_len", t["kv_tokens"], t["kvlin_title"], log_x=wide_span(rows))
    return Figure("kv_linearity", per_lang(make), {lang: TEXT[lang]["kvlin_title"] for lang in LANGS},
                  keys=tuple(keys))


def fig_timeline(scrapes: list, windows: list[tuple[str, float, float]]) -> Figure | None:
    """Running, waiting and KV usage over the whole round, point windows shaded (raw gauges)."""
    def series(name: str) -> list[tuple[float, float]]:
        try:
            return S.gauge_series(scrapes, None, None, name)
        except Absent:
            return []
    run, wait, kv = (series("vllm:num_requests_running"), series("vllm:num_requests_waiting"),
                     series("vllm:kv_cache_usage_perc"))
    if not run:
        return None

    def make(t):
        req = pd.DataFrame([{"t": a, "y": v, "series": t["running"]} for a, v in run]
                           + [{"t": a, "y": v, "series": t["waiting"]} for a, v in wait])
        kvd = pd.DataFrame([{"t": a, "y": v * 100, "series": t["kv"]} for a, v in kv])
        shade = pd.DataFrame([{"a": a, "b": b, "point": pid} for pid, a, b in windows])
        base_x = alt.X("t:Q", title=t["t"])
        bands = alt.Chart(shade).mark_rect(opacity=0.12, color="#888").encode(
            x="a:Q", x2="b:Q", tooltip=[alt.Tooltip("point:N", title=t["point"])])
        reqs = alt.Chart(req).mark_line(interpolate="step-after", strokeWidth=1.2).encode(
            x=base_x, y=alt.Y("y:Q", title=t["requests"]),
            color=alt.Color("series:N", scale=alt.Scale(domain=[t["running"], t["waiting"]], range=PALETTE[:2]),
                            legend=_legend(t["left_axis"])))
        # The KV axis spans the data (a pool used to 6 % is not drawn against 0-100 %), capped at 100.
        top = min(100.0, max([v * 100 for _, v in kv] + [1.0]) * 1.15)
        kvl = alt.Chart(kvd).mark_line(strokeWidth=1.2).encode(
            x=base_x, y=alt.Y("y:Q", title=t["kv"], scale=alt.Scale(domain=[0, top])),
            color=alt.Color("series:N", scale=alt.Scale(domain=[t["kv"]], range=[PALETTE[2]]),
                            legend=_legend(t["right_axis"])))
        ch = alt.layer(bands, reqs, kvl).resolve_scale(y="independent", color="independent").properties(
            width=WIDTH, height=HEIGHT)
        return ch.to_dict()
    return Figure("timeline", per_lang(make), {lang: TEXT[lang]["timeline_title"] for lang in LANGS})


def fig_power(gpu_samples: list, windows: list[tuple[str, float, float]]) -> Figure | None:
    """Power (with the limit) and temperature of GPU 0 over the round, point windows shaded (raw NVML)."""
    s0 = [s for s in gpu_samples if s.get("gpu", 0) == 0 and s.get("power_w") is not None]
    if not s0:
        return None

    def make(t):
        pw = pd.DataFrame([{"t": s["t"], "y": s["power_w"], "series": t["power"]} for s in s0]
                          + [{"t": s["t"], "y": s["power_limit_w"], "series": t["limit"]}
                             for s in s0 if s.get("power_limit_w") is not None])
        tp = pd.DataFrame([{"t": s["t"], "y": s["temperature_c"]} for s in s0
                           if s.get("temperature_c") is not None])
        shade = pd.DataFrame([{"a": a, "b": b, "point": pid} for pid, a, b in windows])
        bands = alt.Chart(shade).mark_rect(opacity=0.12, color="#888").encode(x="a:Q", x2="b:Q")
        p = alt.Chart(pw).mark_line(strokeWidth=1.2).encode(
            x=alt.X("t:Q", title=t["t"]), y=alt.Y("y:Q", title=t["power"]),
            # three series, three colours: the limit grey, the temperature (right axis) green
            color=alt.Color("series:N", scale=alt.Scale(domain=[t["power"], t["limit"]], range=[PALETTE[0], PALETTE[5]]),
                            legend=_legend(t["left_axis"])),
            strokeDash=alt.StrokeDash("series:N", legend=None,
                                      scale=alt.Scale(domain=[t["power"], t["limit"]], range=[[1, 0], [4, 3]])))
        layers = [bands, p] if windows else [p]
        if len(tp):
            tp["series"] = t["temp"]
            layers.append(alt.Chart(tp).mark_line(strokeWidth=1).encode(
                x="t:Q", y=alt.Y("y:Q", title=t["temp"]),
                color=alt.Color("series:N", scale=alt.Scale(domain=[t["temp"]], range=[PALETTE[2]]),
                                legend=_legend(t["right_axis"]))))
        return alt.layer(*layers).resolve_scale(y="independent", color="independent").properties(
            width=WIDTH, height=HEIGHT).to_dict()
    return Figure("power", per_lang(make), {lang: TEXT[lang]["power_title"] for lang in LANGS})


def fig_tflops_timeline(scrapes: list, windows: list[tuple[str, float, float]],
                        led: Ledger | None = None) -> Figure | None:
    """Per-interval TFLOP/s from vLLM's estimated FLOPs counter over the round, with the dense peak
    and, over each point's window, the peak at that point's sampled SM clock (item 15)."""
    from report.derive import analyses as A
    try:
        rates = A.counter_rate_series(scrapes, "vllm:estimated_flops_per_gpu_total")
    except Absent:
        return None
    if not any(r > 0 for _, r in rates):
        return None
    peak_tflops = _val(led, "r.peak_tflops") if led is not None else None
    # (point, window start, window end, ceiling): where a power cap lowers the clock, so the roof
    ceilings = [(pid, a, b, c) for pid, a, b in windows
                if led is not None and (c := _val(led, f"p.{pid}.peak_tflops_at_clock"))]
    keys = ((("r.peak_tflops",) if peak_tflops else ())
            + tuple(f"p.{pid}.peak_tflops_at_clock" for pid, _, _, _ in ceilings))

    def make(t):
        names = [t["tflops_measured"], t["tflops_peak"], t["roof_capped"]]
        df = pd.DataFrame([{"t": a, "y": r / 1e12, "series": names[0], "point": ""} for a, r in rates])
        shade = pd.DataFrame([{"a": a, "b": b, "point": pid} for pid, a, b in windows])
        bands = alt.Chart(shade).mark_rect(opacity=0.12, color="#888").encode(
            x="a:Q", x2="b:Q", tooltip=[alt.Tooltip("point:N", title=t["point"])])
        if peak_tflops:
            df = pd.concat([df, pd.DataFrame([{"t": a, "y": peak_tflops, "series": names[1], "point": ""}
                                              for a in (rates[0][0], rates[-1][0])])])
        # one segment per point window: the ceiling holds only while that point ran
        df = pd.concat([df, pd.DataFrame([{"t": x, "y": c, "series": names[2], "point": pid}
                                          for pid, a, b, c in ceilings for x in (a, b)])])
        domain = [n for n in names if n in set(df["series"])]
        line = alt.Chart(df).mark_line(strokeWidth=1.2).encode(
            x=alt.X("t:Q", title=t["t"]), y=alt.Y("y:Q", title=t["tflops"]), detail="point:N",
            color=alt.Color("series:N", title="", legend=alt.Legend(orient="bottom"),
                            scale=alt.Scale(domain=domain, range=[
                                {names[0]: PALETTE[0], names[1]: PALETTE[3], names[2]: PALETTE[1]}[n]
                                for n in domain])),
            strokeDash=alt.StrokeDash("series:N", legend=None, scale=alt.Scale(domain=domain, range=[
                {names[0]: [1, 0], names[1]: [4, 3], names[2]: [2, 2]}[n] for n in domain])),
            tooltip=[alt.Tooltip("series:N", title=t["series"]), alt.Tooltip("point:N", title=t["point"]),
                     alt.Tooltip("y:Q", title=t["tflops"], format=",.0f")])
        return alt.layer(bands, line).properties(width=WIDTH, height=HEIGHT).to_dict()
    return Figure("tflops_timeline", per_lang(make), {lang: TEXT[lang]["tflops_title"] for lang in LANGS},
                  keys=keys)


def fig_roofline(led: Ledger, pids: list[str], labels: dict[str, str] | None = None) -> Figure | None:
    """Each point at its measured arithmetic intensity and FLOP rate, under the roof when peaks are
    known, and under the ceiling of the capped clock where a power cap held one (item 17)."""
    pts = [(pid, _val(led, f"p.{pid}.intensity"), _val(led, f"p.{pid}.tflops_s")) for pid in pids]
    pts = [(pid, x, y) for pid, x, y in pts if x and y]
    if len(pts) < 2:
        return None
    peak, bw = _val(led, "r.peak_flops"), _val(led, "r.peak_bandwidth")
    capped = [c for c in (_val(led, f"p.{pid}.peak_tflops_at_clock") for pid, _, _ in pts) if c]
    keys = tuple(f"p.{pid}.{q}" for pid, _, _ in pts for q in ("intensity", "tflops_s"))
    name = labels or {}

    def make(t):
        valid = [_val(led, f"p.{pid}.valid") is not False for pid, _, _ in pts]
        df = pd.DataFrame([{"x": x, "y": y, "point": in_lang(name.get(pid, pid), t["lang"]), "shape": t["yes"] if ok else t["no"],
                            # labels alternate above and below, so neighbours do not print over each other
                            "dy": -8 if i % 2 else 8}
                           for i, ((pid, x, y), ok) in enumerate(zip(pts, valid))])
        xs_data = [x for _, x, _ in pts]
        lo = min(xs_data) / 2
        hi = max(max(xs_data) * 2, (peak / bw * 2) if peak and bw else 0)
        scale_x = alt.Scale(type="log", domain=[lo, hi], nice=False)
        scale_y = alt.Scale(type="log")
        dots = alt.Chart(df).mark_point(filled=True, size=60, color=PALETTE[0]).encode(
            shape=alt.Shape("shape:N", title=t["valid"], sort=[t["yes"], t["no"]],
                            scale=alt.Scale(domain=[t["yes"], t["no"]], range=["circle", "cross"]),
                            legend=_legend(t["valid"])),
            x=alt.X("x:Q", title=t["intensity"], scale=scale_x),
            y=alt.Y("y:Q", title=t["tflops"], scale=scale_y),
            tooltip=[alt.Tooltip("point:N", title=t["point"]), alt.Tooltip("x:Q", format=",.1f"),
                     alt.Tooltip("y:Q", format=",.1f")])
        # Every point is named, a point left out of the verdicts in grey beside its cross; the
        # labels alternate above and below their marks, so neighbours do not print over each other.
        def named(rows: pd.DataFrame, dy: int, colour: str) -> alt.Chart:
            return alt.Chart(rows).mark_text(align="left", dx=6, dy=dy, fontSize=9, color=colour).encode(
                x=alt.X("x:Q", scale=scale_x), y=alt.Y("y:Q", scale=scale_y), text="point:N")
        layers = [dots] + [named(df[(df["shape"] == shape) & (df["dy"] == dy)], dy, colour)
                           for shape, colour in ((t["yes"], "#222"), (t["no"], "#888")) for dy in (-8, 8)]
        if peak and bw:
            xs = [lo * (hi / lo) ** (i / 40) for i in range(41)]
            roofs = [{"x": x, "y": min(peak, x * bw) / 1e12, "roof": t["roof_datasheet"]} for x in xs]
            if capped:
                top = min(capped) * 1e12
                roofs += [{"x": x, "y": min(top, x * bw) / 1e12, "roof": t["roof_capped"]} for x in xs]
            domain = [t["roof_datasheet"]] + ([t["roof_capped"]] if capped else [])
            layers.insert(0, alt.Chart(pd.DataFrame(roofs)).mark_line(strokeDash=[4, 3]).encode(
                x=alt.X("x:Q", scale=scale_x), y=alt.Y("y:Q", scale=scale_y),
                color=alt.Color("roof:N", scale=alt.Scale(domain=domain, range=[PALETTE[3], PALETTE[1]]),
                                legend=_legend(t["roofs"]))))
        return alt.layer(*layers).properties(width=WIDTH, height=HEIGHT).to_dict()
    title = "roof_title" if peak and bw else "noroof_title"
    return Figure("roofline", per_lang(make), {lang: TEXT[lang][title] for lang in LANGS}, keys=keys)


def fig_slo(led: Ledger, pids: list[str], axis: str) -> Figure | None:
    """Each SLO objective's margin at the valid points, against the load: above zero it is met."""
    qs = {k: f"slo_margin_{k}" for k in ("ttft", "tpot", "e2e", "itl")}
    if axis != "concurrency":
        return None
    rows_any, keys = _rows(led, pids, "concurrency", qs, scale=100.0)
    if len(rows_any) < 2:
        return None

    def make(t):
        rows, _ = _rows(led, pids, "concurrency", {t[f"slo_{k}"]: q for k, q in qs.items()}, scale=100.0)
        return _line(rows, t, axis, t["slo_margin"], t["slo_title"], zero_rule=True)
    return Figure("slo", per_lang(make), {lang: TEXT[lang]["slo_title"] for lang in LANGS}, keys=tuple(keys))


def fig_sets(led: Ledger, question: str, pairs: list[tuple[str, str]], signals: tuple[str, ...],
             labels: dict[str, str], axis: str | None = None) -> Figure | None:
    """One question of a round of server sets: its signals at the base set's point and at each
    set's, the sets on one axis (in the order they ran), one panel per signal. Where the sets
    sweep one flag (AXIS, a point quantity every set has a value of its own of), each set is
    named by that value under the flag's axis title, not by its whole flag string."""
    order = list(dict.fromkeys(pid for pair in pairs for pid in pair))
    keys = [f"p.{pid}.{q}" for pid in order for q in signals if _val(led, f"p.{pid}.{q}") is not None]
    if len(order) < 2 or not keys:
        return None
    values = [_val(led, f"p.{pid}.{axis}") for pid in order] if axis else []
    by_value = bool(values) and None not in values and len(set(values)) == len(values)
    keys += [f"p.{pid}.{axis}" for pid in order] if by_value else []

    def make(t):
        name = {pid: format_number(v) for pid, v in zip(order, values)} if by_value else \
            {pid: in_lang(labels.get(pid, pid), t["lang"]) for pid in order}
        rows = [{"set": name[pid], "series": t.get(f"set_{q}", q), "y": _val(led, f"p.{pid}.{q}"),
                 "point": pid} for pid in order for q in signals if _val(led, f"p.{pid}.{q}") is not None]
        df = pd.DataFrame(rows)
        sets = list(dict.fromkeys(r["set"] for r in rows))
        ch = alt.Chart(df).mark_bar().encode(
            # a panel is narrow: the flag's short name (the figure's title says which flag)
            x=alt.X("set:N", title=t[f"set_value_{axis}"] if by_value else t["set_axis"], sort=sets,
                    axis=alt.Axis(labelAngle=0)),
            y=alt.Y("y:Q", title=None),
            color=alt.Color("set:N", sort=sets, legend=None,
                            scale=alt.Scale(domain=sets, range=PALETTE[:len(sets)])),
            tooltip=[alt.Tooltip("point:N", title=t["point"]), alt.Tooltip("y:Q", format=",.2f")])
        return ch.properties(width=WIDTH // max(1, len(signals)) - 20, height=HEIGHT).facet(
            column=alt.Column("series:N", title=None, sort=[t.get(f"set_{q}", q) for q in signals])
        ).resolve_scale(y="independent").to_dict()
    return Figure(f"sets_{question}", per_lang(make),
                  {lang: TEXT[lang][f"sets_title_{question}"] for lang in LANGS}, keys=tuple(keys))


# A sweep of the step budget over three or more sets: each measurement as a curve over the
# budget, the ITL tail the step model predicts beside the measured p99.
BUDGET_CURVES = (("itl_ms_p99", "itl_tail_ms_model"), ("ttft_ms_p99",), ("output_tok_s",))


def fig_budget_curve(led: Ledger, pids: list[str]) -> Figure | None:
    """ITL p99 (measured and predicted), TTFT p99 and output throughput over the step budget of each set."""
    budgets = {pid: _val(led, f"p.{pid}.step_token_budget") for pid in pids}
    pts = [pid for pid in pids if budgets[pid] is not None]
    if len({budgets[pid] for pid in pts}) < 3:
        return None
    keys = [f"p.{pid}.{q}" for pid in pts for panel in BUDGET_CURVES for q in panel
            if _val(led, f"p.{pid}.{q}") is not None] + [f"p.{pid}.step_token_budget" for pid in pts]

    def make(t):
        rows = [{"budget": budgets[pid], "panel": t[f"set_{panel[0]}"], "series": t[f"budget_series_{q}"],
                 "y": _val(led, f"p.{pid}.{q}"), "point": pid}
                for pid in pts for panel in BUDGET_CURVES for q in panel if _val(led, f"p.{pid}.{q}") is not None]
        df = pd.DataFrame(rows)
        series = list(dict.fromkeys(r["series"] for r in rows))
        ch = alt.Chart(df).mark_line(point=True).encode(
            x=alt.X("budget:Q", title=t["budget_axis"], scale=alt.Scale(type="log", base=2),
                    axis=alt.Axis(values=sorted({budgets[p] for p in pts}), format=",d")),
            y=alt.Y("y:Q", title=None),
            color=alt.Color("series:N", sort=series, legend=_legend(""),
                            scale=alt.Scale(domain=series, range=PALETTE[:len(series)])),
            strokeDash=alt.StrokeDash("series:N", sort=series, legend=None),
            tooltip=[alt.Tooltip("point:N", title=t["point"]), alt.Tooltip("y:Q", format=",.2f")])
        return ch.properties(width=WIDTH // len(BUDGET_CURVES) - 20, height=HEIGHT).facet(
            column=alt.Column("panel:N", title=None, sort=[t[f"set_{p[0]}"] for p in BUDGET_CURVES])
        ).resolve_scale(y="independent").to_dict()
    return Figure("budget_curve", per_lang(make), {lang: TEXT[lang]["budget_title"] for lang in LANGS},
                  keys=tuple(keys))


def fig_repro(led: Ledger, pids: list[str], axis: str) -> Figure | None:
    """Output throughput difference against the previous round at each common point (item 9)."""
    keys = tuple(f"x.{pid}.output_tok_s_diff" for pid in pids if f"x.{pid}.output_tok_s_diff" in led
                 and led[f"x.{pid}.output_tok_s_diff"].present)
    pts = [(pid, _val(led, f"p.{pid}.{axis}"), _val(led, f"x.{pid}.output_tok_s_diff")) for pid in pids]
    pts = [(pid, x, d) for pid, x, d in pts if x is not None and d is not None]
    if len(pts) < 2:
        return None

    def make(t):
        df = pd.DataFrame([{"x": x, "y": d * 100, "point": pid} for pid, x, d in pts])
        bars = alt.Chart(df).mark_bar(color=PALETTE[0]).encode(
            x=alt.X("x:O", title=t[axis]), y=alt.Y("y:Q", title=t["diff"]),
            tooltip=[alt.Tooltip("point:N", title=t["point"]), alt.Tooltip("y:Q", format="+.2f")])
        zero = alt.Chart(pd.DataFrame([{"y": 0}])).mark_rule(color="#444").encode(y="y:Q")
        return alt.layer(bars, zero).properties(width=WIDTH, height=HEIGHT * 0.7).to_dict()
    return Figure("repro", per_lang(make), {lang: TEXT[lang]["repro_title"] for lang in LANGS}, keys=keys)


def fig_occupancy(led: Ledger, pids: list[str], prev_led: Ledger | None, prev_pids: list[str]) -> Figure | None:
    """Output throughput against theoretical KV occupancy, this round and the previous one (item 20)."""
    if prev_led is None:
        return None
    def valid_pairs(ld: Ledger, ps: list[str]) -> tuple[list[tuple[float, float]], list[str], bool]:
        """(occupancy, throughput) at the points of PS that passed their checks, those points,
        and whether a point that failed them was left out: a line joins only valid points."""
        got = [(p, _val(ld, f"p.{p}.kv_occupancy"), _val(ld, f"p.{p}.output_tok_s")) for p in ps]
        got = [(p, x, y) for p, x, y in got if x is not None and y is not None]
        kept = [(p, x, y) for p, x, y in got if _val(ld, f"p.{p}.valid") is not False]
        return [(x, y) for _, x, y in kept], [p for p, _, _ in kept], len(kept) < len(got)
    mine, mine_pids, mine_out = valid_pairs(led, pids)
    theirs, _, theirs_out = valid_pairs(prev_led, prev_pids)
    if len(mine) < 2 or len(theirs) < 2:
        return None
    keys = tuple(f"p.{p}.{q}" for p in mine_pids for q in ("kv_occupancy", "output_tok_s"))

    def make(t):
        df = pd.DataFrame([{"x": x * 100, "y": y, "series": t["this_round"]} for x, y in mine]
                          + [{"x": x * 100, "y": y, "series": t["prev_round"]} for x, y in theirs])
        # The axis spans the data (a log axis left to itself runs to the next decade).
        lo, hi = float(df["x"].min()), float(df["x"].max())
        ch = alt.Chart(df).mark_line(point=True).encode(
            x=alt.X("x:Q", title=t["occupancy"],
                    scale=alt.Scale(type="log", domain=[lo * 0.9, hi * 1.1], nice=False)),
            y=alt.Y("y:Q", title=t["tok_s"]),
            color=alt.Color("series:N", title=t["series"], scale=alt.Scale(range=PALETTE[:2]),
                            legend=alt.Legend(orient="bottom")),
        ).properties(width=WIDTH, height=HEIGHT)
        return _noted(ch, t, mine_out or theirs_out).to_dict()
    return Figure("occupancy", per_lang(make), {lang: TEXT[lang]["occ_title"] for lang in LANGS}, keys=keys)


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
                                 "point": pid, "valid": _val(led, f"p.{pid}.valid") is not False})
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
            return _line(rows, t, "turn", t[y_key], t[title], log_x=False)
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
