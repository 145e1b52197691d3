"""Figures that set points against a reference: the roofline, the base server set, the step budget's sets, the previous round at the same KV occupancy."""

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
    noted_chart,
    per_lang,
    titled_legend,
    value_at,
)
from report.publish.numbers import format_number
from report.words import LANGS, in_lang


def fig_roofline(led: Ledger, pids: list[str], labels: dict[str, str] | None = None) -> Figure | None:
    """Each point at its measured arithmetic intensity and FLOP rate, under the roof when peaks are
    known, and under the ceiling of the capped clock where a power cap held one (item 17)."""
    pts = [(pid, value_at(led, f"p.{pid}.intensity"), value_at(led, f"p.{pid}.tflops_s")) for pid in pids]
    pts = [(pid, x, y) for pid, x, y in pts if x and y]
    if len(pts) < 2:
        return None
    peak, bw = value_at(led, "r.peak_flops"), value_at(led, "r.peak_bandwidth")
    capped = [c for c in (value_at(led, f"p.{pid}.peak_tflops_at_clock") for pid, _, _ in pts) if c]
    keys = tuple(f"p.{pid}.{q}" for pid, _, _ in pts for q in ("intensity", "tflops_s"))
    name = labels or {}

    def make(t):
        valid = [value_at(led, f"p.{pid}.valid") is not False for pid, _, _ in pts]
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
                            legend=titled_legend(t["valid"])),
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
                                legend=titled_legend(t["roofs"]))))
        return alt.layer(*layers).properties(width=WIDTH, height=HEIGHT).to_dict()
    title = "roof_title" if peak and bw else "noroof_title"
    return Figure("roofline", per_lang(make), {lang: TEXT[lang][title] for lang in LANGS}, keys=keys)


def fig_sets(led: Ledger, question: str, pairs: list[tuple[str, str]], signals: tuple[str, ...],
             labels: dict[str, str], axis: str | None = None) -> Figure | None:
    """One question of a round of server sets: its signals at the base set's point and at each
    set's, the sets on one axis (in the order they ran), one panel per signal. Where the sets
    sweep one flag (AXIS, a point quantity every set has a value of its own of), each set is
    named by that value under the flag's axis title, not by its whole flag string."""
    order = list(dict.fromkeys(pid for pair in pairs for pid in pair))
    keys = [f"p.{pid}.{q}" for pid in order for q in signals if value_at(led, f"p.{pid}.{q}") is not None]
    if len(order) < 2 or not keys:
        return None
    values = [value_at(led, f"p.{pid}.{axis}") for pid in order] if axis else []
    by_value = bool(values) and None not in values and len(set(values)) == len(values)
    keys += [f"p.{pid}.{axis}" for pid in order] if by_value else []

    def make(t):
        name = {pid: format_number(v) for pid, v in zip(order, values)} if by_value else \
            {pid: in_lang(labels.get(pid, pid), t["lang"]) for pid in order}
        rows = [{"set": name[pid], "series": t.get(f"set_{q}", q), "y": value_at(led, f"p.{pid}.{q}"),
                 "point": pid} for pid in order for q in signals if value_at(led, f"p.{pid}.{q}") is not None]
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
    budgets = {pid: value_at(led, f"p.{pid}.step_token_budget") for pid in pids}
    pts = [pid for pid in pids if budgets[pid] is not None]
    if len({budgets[pid] for pid in pts}) < 3:
        return None
    keys = [f"p.{pid}.{q}" for pid in pts for panel in BUDGET_CURVES for q in panel
            if value_at(led, f"p.{pid}.{q}") is not None] + [f"p.{pid}.step_token_budget" for pid in pts]

    def make(t):
        rows = [{"budget": budgets[pid], "panel": t[f"set_{panel[0]}"], "series": t[f"budget_series_{q}"],
                 "y": value_at(led, f"p.{pid}.{q}"), "point": pid}
                for pid in pts for panel in BUDGET_CURVES for q in panel if value_at(led, f"p.{pid}.{q}") is not None]
        df = pd.DataFrame(rows)
        series = list(dict.fromkeys(r["series"] for r in rows))
        ch = alt.Chart(df).mark_line(point=True).encode(
            x=alt.X("budget:Q", title=t["budget_axis"], scale=alt.Scale(type="log", base=2),
                    axis=alt.Axis(values=sorted({budgets[p] for p in pts}), format=",d")),
            y=alt.Y("y:Q", title=None),
            color=alt.Color("series:N", sort=series, legend=titled_legend(""),
                            scale=alt.Scale(domain=series, range=PALETTE[:len(series)])),
            strokeDash=alt.StrokeDash("series:N", sort=series, legend=None),
            tooltip=[alt.Tooltip("point:N", title=t["point"]), alt.Tooltip("y:Q", format=",.2f")])
        return ch.properties(width=WIDTH // len(BUDGET_CURVES) - 20, height=HEIGHT).facet(
            column=alt.Column("panel:N", title=None, sort=[t[f"set_{p[0]}"] for p in BUDGET_CURVES])
        ).resolve_scale(y="independent").to_dict()
    return Figure("budget_curve", per_lang(make), {lang: TEXT[lang]["budget_title"] for lang in LANGS},
                  keys=tuple(keys))


def fig_occupancy(led: Ledger, pids: list[str], prev_led: Ledger | None, prev_pids: list[str]) -> Figure | None:
    """Output throughput against theoretical KV occupancy, this round and the previous one (item 20)."""
    if prev_led is None:
        return None
    def valid_pairs(ld: Ledger, ps: list[str]) -> tuple[list[tuple[float, float]], list[str], bool]:
        """(occupancy, throughput) at the points of PS that passed their checks, those points,
        and whether a point that failed them was left out: a line joins only valid points."""
        got = [(p, value_at(ld, f"p.{p}.kv_occupancy"), value_at(ld, f"p.{p}.output_tok_s")) for p in ps]
        got = [(p, x, y) for p, x, y in got if x is not None and y is not None]
        kept = [(p, x, y) for p, x, y in got if value_at(ld, f"p.{p}.valid") is not False]
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
        return noted_chart(ch, t, mine_out or theirs_out).to_dict()
    return Figure("occupancy", per_lang(make), {lang: TEXT[lang]["occ_title"] for lang in LANGS}, keys=keys)
