"""Figures along the sweep axis from ledger values: throughput, latency, the TTFT breakdown, engine steps, KV, MFU, the SLO and repeatability."""

from __future__ import annotations

import altair as alt
import pandas as pd

from report.ledger import Ledger
from report.publish.document import Figure
from report.publish.figures.chart import (
    HEIGHT,
    PALETTE,
    TEXT,
    WIDTH,
    check_rows,
    line_chart,
    log_share_axis,
    per_lang,
    point_rows,
    small_stacks,
    stacked_bars,
    value_at,
)
from report.publish.numbers import format_number
from report.words import LANGS


def fig_throughput(led: Ledger, pids: list[str], axis: str) -> Figure | None:
    """Output and total token throughput against the sweep axis (docs/analyses.md item 19)."""
    rows_any, keys = point_rows(led, pids, axis, {"o": "output_tok_s", "t": "total_tok_s"})
    if not rows_any:
        return None

    def make(t):
        rows, _ = point_rows(led, pids, axis, {t["output"]: "output_tok_s", t["total"]: "total_tok_s"})
        return line_chart(rows, t, axis, t["tok_s"], t[f"throughput_title_{axis}"])
    return Figure("throughput", per_lang(make),
                  {lang: TEXT[lang][f"throughput_title_{axis}"] for lang in LANGS},
                  keys=tuple(keys))


def fig_latency(led: Ledger, pids: list[str], axis: str) -> Figure | None:
    """TTFT and ITL percentiles against the sweep axis (log y)."""
    qs = {"ttft_p50": "ttft_ms_p50", "ttft_p99": "ttft_ms_p99", "itl_p50": "itl_ms_p50", "itl_p99": "itl_ms_p99"}
    rows_any, keys = point_rows(led, pids, axis, qs)
    if not rows_any:
        return None

    def make(t):
        rows, _ = point_rows(led, pids, axis, {t[k]: q for k, q in qs.items()})
        return line_chart(rows, t, axis, t["ms"], t["latency_title"], log_y=True)
    return Figure("latency", per_lang(make), {lang: TEXT[lang]["latency_title"] for lang in LANGS},
                  keys=tuple(keys))


def fig_ttft_breakdown(led: Ledger, pids: list[str], axis: str) -> Figure | None:
    """Mean queue, prefill and frontend per point (docs/analyses.md item 1): stacked in ms, and
    below as each point's shares of its mean TTFT, so the small loads read beside the large;
    a point that failed its checks is drawn hollow."""
    parts = {"queue": "queue_ms_mean", "prefill": "prefill_ms_mean", "frontend": "frontend_ms_mean"}
    rows_any, keys = point_rows(led, pids, axis, parts)
    if len(rows_any) < 3:
        return None
    # The top of each stack: the client's mean TTFT the three parts add up to, printed above it.
    totals = [(pid, value_at(led, f"p.{pid}.{axis}"), value_at(led, f"p.{pid}.ttft_ms_mean_population"))
              for pid in dict.fromkeys(r["point"] for r in rows_any)]
    totals = [(pid, x, y) for pid, x, y in totals if x is not None and y is not None]
    keys += [f"p.{pid}.ttft_ms_mean_population" for pid, _, _ in totals]

    def make(t):
        rows, _ = point_rows(led, pids, axis, {t[k]: q for k, q in parts.items()})
        order = [t["queue"], t["prefill"], t["frontend"]]
        rows = [dict(r, order=order.index(r["series"])) for r in check_rows(rows, t)]
        df = pd.DataFrame(rows)

        def in_ms(pts: set[str], width: int) -> alt.LayerChart:
            bars = stacked_bars(df[df["point"].isin(pts)], t, order, alt.Y("y:Q", title=t["ms"], stack="zero"),
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
        shares = stacked_bars(df, t, order, alt.Y("y:Q", title=t["ttft_share"], stack="normalize",
                                                   axis=alt.Axis(format="%")), t["ms"], HEIGHT // 2, t[axis])
        return alt.vconcat(top, shares, spacing=6).resolve_legend(
            color="shared", shape="shared").to_dict()
    return Figure("ttft_breakdown", per_lang(make), {lang: TEXT[lang]["ttft_title"] for lang in LANGS},
                  keys=tuple(keys))


def fig_queue_vs_prefill(led: Ledger, pids: list[str], axis: str) -> Figure | None:
    """Queue and prefill means against concurrency on a log scale (docs/analyses.md item 2)."""
    parts = {"queue": "queue_ms_mean", "prefill": "prefill_ms_mean", "ttft_mean": "ttft_ms_mean"}
    rows_any, keys = point_rows(led, pids, axis, parts)
    rows_any = [r for r in rows_any if r["y"] > 0 and r["series"] in ("queue", "prefill")]
    if len(rows_any) < 3:
        return None

    def make(t):
        rows, _ = point_rows(led, pids, axis, {t[k]: q for k, q in parts.items()})
        rows = [r for r in rows if r["y"] > 0]  # a log axis cannot show zero
        return line_chart(rows, t, axis, t["ms"], t["qvp_title"], log_y=True)
    return Figure("queue_vs_prefill", per_lang(make), {lang: TEXT[lang]["qvp_title"] for lang in LANGS},
                  keys=tuple(keys))


def fig_iteration(led: Ledger, pids: list[str], axis: str) -> Figure | None:
    """Decode and prefill tokens per engine step (docs/analyses.md item 4); a point that failed
    its checks is drawn hollow."""
    parts = {"decode": "server_running_median", "prefill_chunk": "prefill_tokens_per_iteration"}
    rows_any, keys = point_rows(led, pids, axis, parts)
    if len(rows_any) < 2:
        return None

    def make(t):
        rows, _ = point_rows(led, pids, axis, {t[k]: q for k, q in parts.items()})
        order = [t["decode"], t["prefill_chunk"]]
        df = pd.DataFrame([dict(r, order=order.index(r["series"])) for r in check_rows(rows, t)])
        return stacked_bars(df, t, order, alt.Y("y:Q", title=t["tokens"], stack="zero"), t["tokens"], HEIGHT,
                            t[axis]).to_dict()
    return Figure("iteration", per_lang(make), {lang: TEXT[lang]["iter_title"] for lang in LANGS},
                  keys=tuple(keys))


def fig_kv(led: Ledger, pids: list[str], axis: str) -> Figure | None:
    """Measured KV usage against the block-rounded expectation (docs/analyses.md item 7), on an
    axis sized to the data."""
    parts = {"measured_p50": "kv_usage_p50", "measured_peak": "kv_usage_peak",
             "expected_peak": "kv_expected_peak", "expected_median": "kv_expected_median"}
    rows_any, keys = point_rows(led, pids, axis, parts, scale=100)
    if len(rows_any) < 2:
        return None

    def make(t):
        rows, _ = point_rows(led, pids, axis, {t[k]: q for k, q in parts.items()}, scale=100)
        # Sized to the data: log where the shares span more than the length axes' factor; the
        # pool's 100 % is a line only where the axis reaches it.
        return line_chart(rows, dict(t, full=t["pool_full"], full_above=t["pool_full_above"]), axis,
                          t["fraction"], t["kv_title"], log_y=log_share_axis(rows), full=100.0)
    return Figure("kv", per_lang(make), {lang: TEXT[lang]["kv_title"] for lang in LANGS}, keys=tuple(keys))


def fig_mfu(led: Ledger, pids: list[str], axis: str) -> Figure | None:
    """MFU and MBU against the sweep axis (docs/analyses.md item 15)."""
    parts = {"mfu": "mfu", "mbu": "mbu"}
    rows_any, keys = point_rows(led, pids, axis, parts, scale=100)
    if len(rows_any) < 2:
        return None

    def make(t):
        rows, _ = point_rows(led, pids, axis, {t[k]: q for k, q in parts.items()}, scale=100)
        return line_chart(rows, t, axis, t["pct"], t[f"mfu_title_{axis}"])
    return Figure("mfu", per_lang(make),
                  {lang: TEXT[lang][f"mfu_title_{axis}"] for lang in LANGS},
                  keys=tuple(keys))


def fig_slo(led: Ledger, pids: list[str], axis: str) -> Figure | None:
    """Each SLO objective's margin at the valid points, against the load: above zero it is met."""
    qs = {k: f"slo_margin_{k}" for k in ("ttft", "tpot", "e2e", "itl")}
    if axis != "concurrency":
        return None
    rows_any, keys = point_rows(led, pids, "concurrency", qs, scale=100.0)
    if len(rows_any) < 2:
        return None

    def make(t):
        rows, _ = point_rows(led, pids, "concurrency", {t[f"slo_{k}"]: q for k, q in qs.items()}, scale=100.0)
        return line_chart(rows, t, axis, t["slo_margin"], t["slo_title"], zero_rule=True)
    return Figure("slo", per_lang(make), {lang: TEXT[lang]["slo_title"] for lang in LANGS}, keys=tuple(keys))


def fig_repro(led: Ledger, pids: list[str], axis: str) -> Figure | None:
    """Output throughput difference against the previous round at each common point (item 9)."""
    keys = tuple(f"x.{pid}.output_tok_s_diff" for pid in pids if f"x.{pid}.output_tok_s_diff" in led
                 and led[f"x.{pid}.output_tok_s_diff"].present)
    pts = [(pid, value_at(led, f"p.{pid}.{axis}"), value_at(led, f"x.{pid}.output_tok_s_diff")) for pid in pids]
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
