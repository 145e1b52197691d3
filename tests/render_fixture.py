"""A HAND-BUILT RoundReport for rendering tests. Its numbers are typed here, not measured.

It exercises what the renderer must handle: headline cards, two figures per language, a
table with a missing cell, an absent value with a reason, a flagged value, an observed
value, a notice, and facts that may be hostile. Never published: tests render it into
temporary directories (and screenshots into artifacts/).
"""

from __future__ import annotations

import statistics

import altair as alt
import pandas as pd

from report.ledger import Absent, Ledger, Reason
from report.publish.document import Column, Figure, RoundFacts, RoundReport, Table

ROUND_ID = "fixture-hand-built"
POINTS = (1, 4, 16, 64)
# Per point: client TTFT samples (s), server mean queue (ms), mean prefill (ms),
# output tokens, window seconds, KV usage samples (fraction). Hand-typed test data.
RAW = {
    1: ([0.103, 0.105, 0.104, 0.108], 0.0, 92.0, 25_600, 120.0, [0.0147]),
    4: ([0.118, 0.121, 0.119, 0.125], 1.0, 99.5, 98_304, 121.0, [0.0589]),
    16: ([0.215, 0.236, 0.228, 0.241], 24.6, 188.2, 371_712, 119.0, [0.2357]),
    64: ([0.951, 0.988, 0.967, 0.998], 379.0, 461.0, 1_204_224, 122.5, []),
}


def mean_ms(samples_s: list[float]) -> float:
    """Mean of the client-side samples, in milliseconds."""
    return 1000.0 * statistics.fmean(samples_s)


def frontend_ms(ttft_ms: float, queue_ms: float, prefill_ms: float) -> float:
    """Client TTFT not explained by server queue and prefill: API server and IPC."""
    return ttft_ms - queue_ms - prefill_ms


def queue_share(queue_ms: float, ttft_ms: float) -> float:
    """Share of the mean TTFT spent waiting in the scheduler queue."""
    return queue_ms / ttft_ms


def output_throughput(tokens: int, seconds: float) -> float:
    """Output tokens per second over the point's window."""
    return tokens / seconds


def kv_usage(kv: list[float]) -> float:
    """Median KV-cache usage over the steady part of the window."""
    if not kv:
        raise Absent("reason.no_gauge_samples", what=Reason.of("reason.stat_median"))
    return statistics.median(kv)


def arithmetic_intensity(flops: float, bytes_read: float) -> float:
    """Arithmetic intensity measured from the MFU counters (FLOP per byte)."""
    if flops == 0 or bytes_read == 0:
        raise Absent("reason.mfu_counters_still")
    return flops / bytes_read


def relative_change(new: float, old: float) -> float:
    """Relative change from the earlier round to this one."""
    return (new - old) / old


def _ledger() -> Ledger:
    led = Ledger()
    led.record("load.requests", 1332, unit="req", doc="Requests sent over the whole round",
               sources=("fixture/requests.jsonl[0:1332]",))
    led.record("load.failed", 0, unit="req", doc="Requests that ended with an error",
               sources=("fixture/requests.jsonl[0:1332]",))
    for c in POINTS:
        samples, queue, prefill, tokens, secs, kv = RAW[c]
        src = (f"fixture/requests.jsonl[point=C{c}]",)
        msrc = (f"fixture/metrics.jsonl[point=C{c}]",)
        p = f"point.c{c}"
        led.record(f"{p}.concurrency", c, doc="Concurrent requests held in flight",
                   sources=("fixture/plan.json",))
        ttft = led.derive(f"{p}.ttft_mean", mean_ms, unit="ms", sources=src, samples_s=samples)
        q = led.record(f"{p}.queue_ms", queue, unit="ms", sources=msrc,
                       doc="Mean server queue time (histogram sum/count delta)")
        pf = led.record(f"{p}.prefill_ms", prefill, unit="ms", sources=msrc,
                        doc="Mean server prefill time (histogram sum/count delta)")
        led.derive(f"{p}.frontend_ms", frontend_ms, unit="ms", ttft_ms=ttft, queue_ms=q,
                   prefill_ms=pf)
        led.derive(f"{p}.queue_share", queue_share, queue_ms=q, ttft_ms=ttft)
        led.derive(f"{p}.tput", output_throughput, unit="tok/s", sources=src,
                   flags=("window shorter than two minutes",) if secs < 120 else (),
                   tokens=tokens, seconds=secs)
        led.derive(f"{p}.kv", kv_usage, sources=msrc, kv=kv)
    led.derive("mfu.intensity", arithmetic_intensity, unit="FLOP/B",
               sources=("fixture/metrics.jsonl",), flops=0.0, bytes_read=0.0)
    led.derive("repro.tput_diff", relative_change, new=led["point.c64.tput"], old=9_790.0)
    return led


LABELS = {
    "zh": {"c": "并发数", "ms": "毫秒", "part": "分段", "queue": "排队", "prefill": "prefill",
           "frontend": "前端 + IPC", "fig1": "TTFT 三段分解(平均值,堆叠)",
           "fig2": "排队 vs prefill:谁在推高 TTFT"},
    "en": {"c": "Concurrency", "ms": "ms", "part": "Part", "queue": "Queue", "prefill": "Prefill",
           "frontend": "Frontend + IPC", "fig1": "TTFT in three parts (means, stacked)",
           "fig2": "Queue vs prefill: which one drives TTFT"},
}


def _breakdown(led: Ledger, lang: str) -> dict:
    L = LABELS[lang]
    rows = []
    for c in POINTS:
        for part, key in (("queue", "queue_ms"), ("prefill", "prefill_ms"),
                          ("frontend", "frontend_ms")):
            rows.append({"C": str(c), "part": L[part], "ms": led[f"point.c{c}.{key}"].value,
                         "order": ("queue", "prefill", "frontend").index(part)})
    df = pd.DataFrame(rows)
    chart = alt.Chart(df).mark_bar().encode(
        x=alt.X("C:N", title=L["c"], sort=[str(c) for c in POINTS], axis=alt.Axis(labelAngle=0)),
        y=alt.Y("ms:Q", title=L["ms"], stack="zero"),
        color=alt.Color("part:N", title=L["part"], sort=[L["queue"], L["prefill"], L["frontend"]]),
        order=alt.Order("order:Q"),
        tooltip=["C", "part", alt.Tooltip("ms:Q", format=",.1f")],
    ).properties(width=560, height=260)
    return chart.to_dict()


def _queue_vs_prefill(led: Ledger, lang: str) -> dict:
    L = LABELS[lang]
    rows = [{"C": c, "series": L[part], "ms": led[f"point.c{c}.{part}_ms"].value}
            for c in POINTS for part in ("queue", "prefill")
            if led[f"point.c{c}.{part}_ms"].value]  # log scale: the zero queue at C=1 is left out
    chart = alt.Chart(pd.DataFrame(rows)).mark_line(point=True).encode(
        x=alt.X("C:Q", title=L["c"], scale=alt.Scale(type="log", base=2)),
        y=alt.Y("ms:Q", title=L["ms"], scale=alt.Scale(type="log")),
        color=alt.Color("series:N", title=""),
    ).properties(width=560, height=240)
    return chart.to_dict()


def hand_built_report(model: str = "Qwen2.5-7B-Instruct", notices: bool = True) -> RoundReport:
    """The hand-built fixture round (not measured data), both languages."""
    led = _ledger()
    figures = {
        "ttft_breakdown": Figure(
            id="ttft_breakdown",
            specs={lang: _breakdown(led, lang) for lang in ("zh", "en")},
            title={lang: LABELS[lang]["fig1"] for lang in ("zh", "en")},
            caption={
                "zh": "前端一段由客户端 TTFT 减去服务端两段得出;最高并发时为 "
                      "[[point.c64.frontend_ms]]。",
                "en": "The frontend part is client TTFT minus the two server parts; "
                      "[[point.c64.frontend_ms]] at the highest concurrency.",
            },
            keys=tuple(f"point.c{c}.{k}" for c in POINTS
                       for k in ("queue_ms", "prefill_ms", "frontend_ms")),
        ),
        "queue_vs_prefill": Figure(
            id="queue_vs_prefill",
            specs={lang: _queue_vs_prefill(led, lang) for lang in ("zh", "en")},
            title={lang: LABELS[lang]["fig2"] for lang in ("zh", "en")},
            caption={"zh": "纵轴对数;最低并发的排队为零,画不到对数轴上。",
                     "en": "Log axis; the zero queue at the lowest concurrency cannot be drawn."},
            keys=tuple(f"point.c{c}.{k}" for c in POINTS for k in ("queue_ms", "prefill_ms")),
        ),
    }
    columns = [
        Column("c", {"zh": "并发", "en": "Concurrency"}),
        Column("tput", {"zh": "输出吞吐", "en": "Output"}, unit="tok/s", digits=0),
        Column("queue", {"zh": "排队", "en": "Queue"}, unit="ms", digits=1),
        Column("prefill", {"zh": "prefill", "en": "Prefill"}, unit="ms", digits=1),
        Column("frontend", {"zh": "前端", "en": "Frontend"}, unit="ms", digits=1),
        Column("ttft", {"zh": "TTFT 均值", "en": "TTFT mean"}, unit="ms", digits=1),
        Column("kv", {"zh": "KV 占用", "en": "KV usage"}, unit="%", digits=1),
    ]
    rows = [[f"point.c{c}.concurrency", f"point.c{c}.tput", f"point.c{c}.queue_ms",
             f"point.c{c}.prefill_ms", f"point.c{c}.frontend_ms", f"point.c{c}.ttft_mean",
             f"point.c{c}.kv"] for c in POINTS]
    rows[0][4] = None  # an empty cell: no key at all
    tables = {"points": Table(
        id="points", title={"zh": "各并发点测量结果", "en": "Results per concurrency point"},
        columns=columns, rows=rows,
        row_labels=[{"zh": f"C={c}", "en": f"C={c}"} for c in POINTS],
    )}
    return RoundReport(
        round_id=ROUND_ID,
        title={"zh": "手工样例 · 渲染测试(非测量数据)",
               "en": "Hand-built fixture · rendering test (not measured data)"},
        ledger=led,
        sections=["_demo"],
        figures=figures,
        tables=tables,
        facts=RoundFacts(model=model, gpu="RTX 4090 · 24 GB", engine="vLLM 0.27.1", holds={
            "queue_under_prefill": led.value_of("point.c64.queue_ms") < led.value_of("point.c64.prefill_ms")}),
        notices=[{"zh": "手工构造的测试样例:下面的数字是手写的,不是测量结果。",
                  "en": "Hand-built test fixture: the numbers below are typed, not measured."}]
        if notices else [],
        bundles=["fixture/hand-built (no bundle)"],
    )


def templates_with(tmp_path, name: str, source: str):
    """A copy of the templates in TMP_PATH with section NAME's template set to SOURCE."""
    import shutil

    from report.publish.render.templating import TEMPLATES_DIR
    tdir = tmp_path / "templates"
    shutil.copytree(TEMPLATES_DIR, tdir)
    (tdir / f"{name}.md.j2").write_text(source, encoding="utf-8")
    return tdir


def render_section(tmp_path, source: str, **report_changes) -> str:
    """The zh HTML of the hand-built report with one section whose template is SOURCE."""
    from dataclasses import replace

    from report.publish.render.page import Page
    tdir = templates_with(tmp_path, "_t", source)
    report = replace(hand_built_report(), sections=["_t"], **report_changes)
    return Page(report, "zh", tdir).assemble("html")

