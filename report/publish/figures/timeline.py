"""Figures of samples over time: the gauges over the round, the GPU's power and clocks, and vLLM's FLOP counter against the peak."""

from __future__ import annotations

import altair as alt
import pandas as pd

from report.derive.series import scrapes as S
from report.ledger import Absent, Ledger
from report.publish.document import Figure
from report.publish.figures.chart import (
    HEIGHT,
    PALETTE,
    TEXT,
    WIDTH,
    per_lang,
    titled_legend,
    value_at,
)
from report.words import LANGS


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
                            legend=titled_legend(t["left_axis"])))
        # The KV axis spans the data (a pool used to 6 % is not drawn against 0-100 %), capped at 100.
        top = min(100.0, max([v * 100 for _, v in kv] + [1.0]) * 1.15)
        kvl = alt.Chart(kvd).mark_line(strokeWidth=1.2).encode(
            x=base_x, y=alt.Y("y:Q", title=t["kv"], scale=alt.Scale(domain=[0, top])),
            color=alt.Color("series:N", scale=alt.Scale(domain=[t["kv"]], range=[PALETTE[2]]),
                            legend=titled_legend(t["right_axis"])))
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
                            legend=titled_legend(t["left_axis"])),
            strokeDash=alt.StrokeDash("series:N", legend=None,
                                      scale=alt.Scale(domain=[t["power"], t["limit"]], range=[[1, 0], [4, 3]])))
        layers = [bands, p] if windows else [p]
        if len(tp):
            tp["series"] = t["temp"]
            layers.append(alt.Chart(tp).mark_line(strokeWidth=1).encode(
                x="t:Q", y=alt.Y("y:Q", title=t["temp"]),
                color=alt.Color("series:N", scale=alt.Scale(domain=[t["temp"]], range=[PALETTE[2]]),
                                legend=titled_legend(t["right_axis"]))))
        return alt.layer(*layers).resolve_scale(y="independent", color="independent").properties(
            width=WIDTH, height=HEIGHT).to_dict()
    return Figure("power", per_lang(make), {lang: TEXT[lang]["power_title"] for lang in LANGS})


def fig_tflops_timeline(scrapes: list, windows: list[tuple[str, float, float]],
                        led: Ledger | None = None) -> Figure | None:
    """Per-interval TFLOP/s from vLLM's estimated FLOPs counter over the round, with the dense peak
    and, over each point's window, the peak at that point's sampled SM clock (item 15)."""
    from report.derive import sizes
    try:
        rates = sizes.counter_rate_series(scrapes, "vllm:estimated_flops_per_gpu_total")
    except Absent:
        return None
    if not any(r > 0 for _, r in rates):
        return None
    peak_tflops = value_at(led, "r.peak_tflops") if led is not None else None
    # (point, window start, window end, ceiling): where a power cap lowers the clock, so the roof
    ceilings = [(pid, a, b, c) for pid, a, b in windows
                if led is not None and (c := value_at(led, f"p.{pid}.peak_tflops_at_clock"))]
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
