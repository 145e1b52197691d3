"""Turn a bundle (plus reference rounds) into the typed RoundReport the renderers read."""

from __future__ import annotations

from pathlib import Path

from bench.bundle import read_bundle
from report import figures as F
from report.build import RoundData, build_ledger, read_round
from report.ledger import Ledger
from report.model import LANGS, Column, RoundReport, Table

AXIS_WORD = {"zh": {"concurrency": "并发扫描", "input_len": "长度扫描", "server": "服务端参数扫描",
                    "single": "单点测量"},
             "en": {"concurrency": "Concurrency sweep", "input_len": "Length sweep",
                    "server": "Server-flag sweep", "single": "Single point"}}

CLIENT_LAG_SHARE_LIMIT = 0.1

RESULT_COLUMNS = [
    ("concurrency", {"zh": "C", "en": "C"}, "", 0),
    ("input_len", {"zh": "输入", "en": "In"}, "tok", 0),
    ("requests", {"zh": "请求", "en": "Req"}, "", 0),
    ("failed", {"zh": "失败", "en": "Failed"}, "", 0),
    ("output_tok_s", {"zh": "输出 tok/s", "en": "Out tok/s"}, "tok/s", 1),
    ("total_tok_s", {"zh": "总 tok/s", "en": "Total tok/s"}, "tok/s", 0),
    ("ttft_ms_p50", {"zh": "TTFT p50", "en": "TTFT p50"}, "ms", 1),
    ("ttft_ms_p99", {"zh": "TTFT p99", "en": "TTFT p99"}, "ms", 1),
    ("itl_ms_p50", {"zh": "ITL p50", "en": "ITL p50"}, "ms", 2),
    ("itl_ms_p99", {"zh": "ITL p99", "en": "ITL p99"}, "ms", 2),
    ("queue_ms_mean", {"zh": "排队", "en": "Queue"}, "ms", 1),
    ("prefill_ms_mean", {"zh": "prefill", "en": "Prefill"}, "ms", 1),
    ("kv_usage_p50", {"zh": "KV p50", "en": "KV p50"}, "fraction", 1),
]


def results_table(led: Ledger, pids: list[str]) -> Table:
    """Every point's main figures; each cell a ledger key."""
    cols = [Column(id=c, header=h, unit=u, digits=d) for c, h, u, d in RESULT_COLUMNS]
    rows = [[f"p.{pid}.{c.id}" if f"p.{pid}.{c.id}" in led else None for c in cols] for pid in pids]
    return Table(id="results", title={"zh": "全部结果", "en": "Full results"}, columns=cols, rows=rows,
                 row_labels=[{lang: pid for lang in LANGS} for pid in pids])


def facts_of(rd: RoundData) -> dict:
    """Non-numeric facts for the narrative: engine, model, hardware, status (escaped on render)."""
    m = rd.bundle.manifest
    eng, host, model = m.get("engine") or {}, m.get("host") or {}, m.get("model") or {}
    gpus = m.get("gpus") or []
    return {
        "bundle": rd.name,
        "status": m.get("status"),
        "status_reason": m.get("status_reason"),
        "origin": m.get("origin"),
        "engine_mode": eng.get("mode"),
        "vllm_version": eng.get("vllm_version"),
        "model": model.get("served_name") or model.get("name"),
        "model_desc": model.get("name"),
        "cpu": host.get("cpu_model"),
        "gpu": ", ".join(g.get("name", "?") for g in gpus) if gpus else None,
        "gpu_absent_reason": m.get("gpu_absent_reason"),
        "axis": rd.axis,
        "created": m.get("created_utc"),
        "tool_version": (m.get("tool") or {}).get("version"),
        "git_revision": (m.get("tool") or {}).get("git_revision"),
        "server_flags": " ".join((eng.get("command") or [])[3:]) if eng.get("command") else None,
        "prefix_caching_off": any("--no-enable-prefix-caching" in " ".join(c or [])
                                  for c in (eng.get("server_sets") or {}).values()),
        "mfu_enabled": any("--enable-mfu-metrics" in " ".join(c or [])
                           for c in (eng.get("server_sets") or {}).values()),
        "points": [p.pid for p in rd.points],
        "failed_points": [p.pid for p in rd.points if p.window.status != "ok"],
        "warnings": list(rd.bundle.warnings),
    }


def compose_round(bundle_path: str | Path, round_id: str, title: dict[str, str] | None = None) -> RoundReport:
    """Read one bundle and compose its report object."""
    bundle = read_bundle(bundle_path)
    rd = read_round(bundle)
    led = build_ledger(rd)
    pids = [p.pid for p in rd.points if p.window.status == "ok"]
    axis = rd.axis if rd.axis in ("concurrency", "input_len") else "concurrency"
    figs = {}
    for make in (F.fig_throughput, F.fig_latency, F.fig_ttft_breakdown, F.fig_queue_vs_prefill,
                 F.fig_iteration):
        fig = make(led, pids, axis)
        if fig is not None:
            figs[fig.id] = fig
    tl = F.fig_timeline(bundle.metrics, [(p.pid, p.window.t_measure, p.window.t_end) for p in rd.points])
    if tl is not None:
        figs[tl.id] = tl
    facts = facts_of(rd)
    facts["ok_points"] = pids
    facts["figures"] = sorted(figs)
    # The client's lag counts as distortion above this share of the ITL median (a policy).
    facts["lag_share_limit"] = CLIENT_LAG_SHARE_LIMIT
    notices = []
    if facts["status"] != "complete":
        notices.append({"zh": f"本轮未完整结束(状态:{facts['status']})。{facts['status_reason'] or ''}",
                        "en": f"This round did not complete (status: {facts['status']}). "
                              f"{facts['status_reason'] or ''}"})
    if facts["failed_points"]:
        notices.append({"zh": "以下测量点失败,已从分析中排除:" + "、".join(facts["failed_points"]),
                        "en": "These points failed and are left out of the analyses: "
                              + ", ".join(facts["failed_points"])})
    if facts["origin"] != "recorded":
        notices.append({"zh": "此数据为手工构造的测试夹具,不是实测。",
                        "en": "This data is a hand-built test fixture, not a measurement."})
    title = title or {lang: f"{AXIS_WORD[lang][rd.axis]} · {round_id}" for lang in LANGS}
    sections = ["summary", "client", "decomposition", "timeline", "results", "method"]
    return RoundReport(round_id=round_id, title=title, ledger=led, sections=sections, figures=figs,
                       tables={"results": results_table(led, pids)}, facts=facts, notices=notices,
                       bundles=[str(bundle_path)])
