"""Turn a bundle (plus reference rounds) into the typed RoundReport the renderers read."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from serving_ledger.bundle.store import read_bundle
from serving_ledger.report import figures as F
from serving_ledger.report.build import RoundData, build_ledger, gpu_absent_reason, read_round
from serving_ledger.report.compare import cross_round_ledger
from serving_ledger.report.findings import round_findings
from serving_ledger.report.ledger import Ledger
from serving_ledger.report.model import LANGS, Column, RoundReport, Table
from serving_ledger.report.next_steps import next_steps
from serving_ledger.report.stats import INTERRUPTED

AXIS_WORD = {"zh": {"concurrency": "并发扫描", "input_len": "长度扫描", "server": "服务端参数扫描",
                    "single": "单点测量"},
             "en": {"concurrency": "Concurrency sweep", "input_len": "Length sweep",
                    "server": "Server-flag sweep", "single": "Single point"}}

CLIENT_LAG_SHARE_LIMIT = 0.1      # the templates say "a tenth" of the ITL median
# vLLM's FLOPs counter "closes" against its own formulas within this relative difference.
FLOPS_CLOSE = 0.01
# The KV account "balances" when measured and expected usage differ by at most this many points.
KV_CLOSE_PP = 1.0

KV_COLUMNS = [
    ("concurrency", {"zh": "C", "en": "C"}, "", 0),
    ("input_len", {"zh": "输入", "en": "In"}, "tok", 0),
    ("effective_concurrency", {"zh": "实际并发", "en": "Running"}, "", 1),
    ("kv_expected_median", {"zh": "理论中位数", "en": "Expected median"}, "%", 1),
    ("kv_usage_p50", {"zh": "实测 p50", "en": "Measured p50"}, "%", 1),
    ("kv_error_pp", {"zh": "误差", "en": "Error"}, "pp", 2),
    ("kv_expected_peak", {"zh": "理论峰值", "en": "Expected peak"}, "%", 1),
    ("kv_usage_peak", {"zh": "实测峰值", "en": "Measured peak"}, "%", 1),
]

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
    ("kv_usage_p50", {"zh": "KV p50", "en": "KV p50"}, "%", 1),
]


DETAIL_COLUMNS = [
    ("concurrency", {"zh": "C", "en": "C"}, "", 0),
    ("input_len", {"zh": "输入", "en": "In"}, "tok", 0),
    ("ttft_ms_mean", {"zh": "TTFT 均值", "en": "TTFT mean"}, "ms", 1),
    ("queue_ms_mean", {"zh": "排队", "en": "Queue"}, "ms", 1),
    ("prefill_ms_mean", {"zh": "prefill", "en": "Prefill"}, "ms", 1),
    ("frontend_ms_mean", {"zh": "前端", "en": "Frontend"}, "ms", 1),
    ("itl_ms_p90", {"zh": "ITL p90", "en": "ITL p90"}, "ms", 2),
    ("tpot_ms_mean", {"zh": "TPOT", "en": "TPOT"}, "ms", 2),
    ("e2e_ms_p50", {"zh": "E2E p50", "en": "E2E p50"}, "ms", 0),
    ("e2e_ms_p99", {"zh": "E2E p99", "en": "E2E p99"}, "ms", 0),
    ("server_running_median", {"zh": "运行中", "en": "Running"}, "", 1),
    ("waiting_peak", {"zh": "等待峰值", "en": "Waiting peak"}, "", 0),
]


# Bundles recorded before the manifest had `model.load_format` named the embedded model
# with this English note; it states the load format, so it is read as that fact.
_EMBEDDED_NOTE = " (embedded, random weights via --load-format dummy)"


def model_name(model: dict) -> str | None:
    """The served model's name as the manifest gives it, without the old embedded note."""
    name = model.get("name")
    if isinstance(name, str) and name.endswith(_EMBEDDED_NOTE):
        return name[: -len(_EMBEDDED_NOTE)]
    return name


def model_load_format(model: dict) -> str | None:
    """The engine's --load-format for the model ("dummy": random weights), where recorded."""
    name = model.get("name")
    if isinstance(name, str) and name.endswith(_EMBEDDED_NOTE):
        return "dummy"
    return model.get("load_format")


def point_table(led: Ledger, pids: list[str], table_id: str, title: dict[str, str],
                columns: list) -> Table:
    """A table with one row per point; each cell a ledger key."""
    cols = [Column(id=c, header=h, unit=u, digits=d) for c, h, u, d in columns]
    rows = [[f"p.{pid}.{c.id}" if f"p.{pid}.{c.id}" in led else None for c in cols] for pid in pids]
    return Table(id=table_id, title=title, columns=cols, rows=rows,
                 row_labels=[{lang: pid for lang in LANGS} for pid in pids])


def results_table(led: Ledger, pids: list[str]) -> Table:
    """Every point's main figures."""
    return point_table(led, pids, "results", {"zh": "全部结果", "en": "Full results"}, RESULT_COLUMNS)


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
        "model_desc": model_name(model),
        "random_weights": model_load_format(model) == "dummy",
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
        "failed_points": [p.pid for p in rd.points if p.window.status not in ("ok", INTERRUPTED)],
        "interrupted_points": [p.pid for p in rd.points if p.window.status == INTERRUPTED],
        "warnings": list(rd.bundle.warnings),
    }


def compose_rounds(pairs: list[tuple[str | Path, str]]) -> list[RoundReport]:
    """Compose every round; each is compared with the round before it (by round id order)."""
    rounds = []
    for path, rid in pairs:
        rd = read_round(read_bundle(path))
        rd.extras["round_id"] = rid
        rounds.append((path, rid, rd, build_ledger(rd)))
    by_id = {rid: (rd, led) for _, rid, rd, led in rounds}
    out = []
    for path, rid, rd, led in rounds:
        prev = by_id.get(previous_round_id(rid))
        out.append(compose_from(path, rid, rd, led, prev))
    return out


def client_may_distort(led: Ledger, pid: str) -> bool:
    """Whether the client's own timing error at point PID is a sizeable share of its ITL."""
    v = led.get(f"p.{pid}.client_lag_share_of_itl")
    return v is not None and v.present and v.value > CLIENT_LAG_SHARE_LIMIT


def previous_round_id(rid: str) -> str | None:
    """`round-3` -> `round-2`; other ids have no previous round."""
    head, _, num = rid.rpartition("-")
    return f"{head}-{int(num) - 1}" if head and num.isdigit() and int(num) > 1 else None


def compose_round(bundle_path: str | Path, round_id: str) -> RoundReport:
    """Read one bundle and compose its report object, with no previous round."""
    return compose_rounds([(bundle_path, round_id)])[0]


def compose_from(bundle_path, round_id: str, rd: RoundData, led: Ledger,
                 prev: tuple[RoundData, Ledger] | None) -> RoundReport:
    """The report object of one round, given its ledger and (optionally) the previous round's."""
    bundle = rd.bundle
    pids = [p.pid for p in rd.points if p.window.status == "ok"]
    axis = rd.axis if rd.axis in ("concurrency", "input_len") else "concurrency"
    facts = facts_of(rd)
    facts["ok_points"] = pids
    facts["sweep_axis"] = rd.axis
    validity = rd.extras["validity"]
    if len([pid for pid in pids if validity[pid].valid]) < 2:
        # Fewer than two valid points (a round cut short, points that failed their checks):
        # no sweep to narrate; the diagnosis says why.
        facts["axis"] = "single"
    # The client's lag counts as distortion above this share of the ITL median (a policy).
    facts["lag_share_limit"] = CLIENT_LAG_SHARE_LIMIT
    facts["client_distorted_points"] = [pid for pid in pids if client_may_distort(led, pid)]
    facts["kv_close_pp"] = KV_CLOSE_PP
    facts["flops_close"] = FLOPS_CLOSE
    facts["peak_label"] = rd.extras.get("peak_label")
    peak_missing = rd.extras.get("peak_missing")
    facts["peak_missing"] = peak_missing.text("en") if peak_missing else None
    facts["peak_missing_zh"] = peak_missing.text("zh") if peak_missing else None
    gpu_absent = gpu_absent_reason(facts.get("gpu_absent_reason"))
    facts["gpu_absent_reason_zh"] = gpu_absent.text("zh") if gpu_absent else None
    # Cross-round facts default to "not available"; cross_round_ledger fills what applies.
    facts.update(prev_round=None, prev_differs=[], common_points=[], comparable=False,
                 repro_points=0, prefill_ref_point=None, occupancy_point=None)
    prev_led, prev_pids = None, []
    if prev is not None:
        prev_rd, prev_led = prev
        prev_pids = [p.pid for p in prev_rd.points if p.window.status == "ok"]
        cross_round_ledger(led, rd, prev_led, prev_rd, facts)
    facts["has_prev"] = prev is not None
    attribution = rd.extras["attribution"]
    valid = [pid for pid in pids if validity[pid].valid]
    facts["valid_points"] = valid
    facts["invalid_points"] = {pid: validity[pid].reasons for pid in pids if not validity[pid].valid}
    facts["bottlenecks"] = {pid: attribution[pid].bottleneck for pid in pids}
    facts["findings"] = [asdict(f) for f in round_findings(led, validity, attribution, valid, facts)]
    facts["next_steps"] = next_steps(led, rd, facts)
    figs = {}
    makers = [F.fig_throughput, F.fig_latency, F.fig_ttft_breakdown, F.fig_queue_vs_prefill,
              F.fig_iteration, F.fig_kv, F.fig_mfu]
    for make in makers:
        fig = make(led, pids, axis)
        if fig is not None:
            figs[fig.id] = fig
    if rd.axis == "input_len":
        for make in (F.fig_kv_linearity, F.fig_itl_vs_len):
            fig = make(led, pids)
            if fig is not None:
                figs[fig.id] = fig
    windows = [(p.pid, p.window.t_measure, p.window.t_end) for p in rd.points]
    for fig in (F.fig_timeline(bundle.metrics, windows), F.fig_power(bundle.gpu, windows),
                F.fig_tflops_timeline(bundle.metrics, windows), F.fig_roofline(led, pids),
                F.fig_repro(led, pids, axis),
                F.fig_occupancy(led, pids, prev_led if facts.get("comparable") else None, prev_pids)):
        if fig is not None:
            figs[fig.id] = fig
    facts["figures"] = sorted(figs)
    notices = []
    if facts["status"] != "complete":
        notices.append({"zh": f"本轮未完整结束(状态:{facts['status']})。{facts['status_reason'] or ''}",
                        "en": f"This round did not complete (status: {facts['status']}). "
                              f"{facts['status_reason'] or ''}"})
    if facts["interrupted_points"]:
        notices.append(interrupted_notice(facts["interrupted_points"]))
    if facts["failed_points"]:
        notices.append({"zh": "以下测量点失败,已从分析中排除:" + "、".join(facts["failed_points"]),
                        "en": "These points failed and are left out of the analyses: "
                              + ", ".join(facts["failed_points"])})
    model = bundle.manifest.get("model") or {}
    vocab, model_vocab = model.get("tokenizer_vocab_size"), ((model.get("config") or {}).get("vocab_size"))
    if isinstance(vocab, int) and isinstance(model_vocab, int) and vocab < model_vocab:
        notices.append({"zh": f"服务端的分词器只认识 {vocab:,} 个 id,而模型会输出最大到 {model_vocab:,} 的 id:"
                              "随机权重下,API 服务的反分词可能成为瓶颈,下发环节的数字因此偏慢。",
                        "en": f"The served tokenizer knows {vocab:,} ids but the model emits ids up to "
                              f"{model_vocab:,}: with random weights the API server's detokeniser can "
                              "become the bottleneck, so delivery figures may be slow for that reason."})
    if facts["origin"] != "recorded":
        notices.append({"zh": "此数据为手工构造的测试夹具,不是实测。",
                        "en": "This data is a hand-built test fixture, not a measurement."})
    title = round_title(bundle.manifest, rd.axis, round_id)
    sections = ["summary", "diagnosis", "client", "decomposition", "kv", "mfu", "timeline", "power", "compare",
                "results", "next", "method"]
    if not pids:
        # No point was measured to the end: the notices say why; only what was recorded applies.
        sections = (["results"] if facts["interrupted_points"] else []) + ["method"]
    results = results_table(led, pids + facts["interrupted_points"])
    results.row_labels[len(pids):] = [interrupted_label(pid) for pid in facts["interrupted_points"]]
    detail = point_table(led, pids, "results_detail", {"zh": "延迟与服务端细节", "en": "Latency and server detail"},
                         DETAIL_COLUMNS)
    return RoundReport(round_id=round_id, title=title, ledger=led, sections=sections, figures=figs,
                       tables={"results": results, "results_detail": detail,
                               "kv_table": point_table(led, pids, "kv_table", {"zh": "KV 对账", "en": "KV reconciliation"},
                                                 KV_COLUMNS)}, facts=facts, notices=notices,
                       bundles=[str(bundle_path)])


def interrupted_label(pid: str) -> dict[str, str]:
    """A results-table row label that says the point was interrupted, in each language."""
    return {"zh": f"{pid}(中断)", "en": f"{pid} (interrupted)"}


def interrupted_notice(pids: list[str]) -> dict[str, str]:
    """The notice for points cut short by an interruption, in each language."""
    return {"zh": "以下测量点被中断(有开始、没有结束):" + "、".join(pids) + "。它们的窗口止于最后一个"
                  "已记录请求的结束时刻;中断时仍在进行的请求没有被记录,因此其吞吐量是下限。"
                  "这些点在全部结果表中标为“中断”,不参与扫描分析。",
            "en": "These points were interrupted (a start and no end): " + ", ".join(pids)
                  + ". Their window ends when the last of their recorded requests ended; requests "
                  "still in flight at the interruption were not recorded, so their throughput is a "
                  "lower bound. They are marked \"interrupted\" in the full results table and left "
                  "out of the sweep analyses."}


def round_title(manifest: dict, axis: str, round_id: str) -> dict[str, str]:
    """The round's title in each language, from the sweep axis and the round id."""
    return {lang: f"{AXIS_WORD[lang][axis]} · {round_id}" for lang in LANGS}
