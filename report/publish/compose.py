"""Turn a bundle (plus reference rounds) into the typed RoundReport the renderers read."""

from __future__ import annotations

import re
from dataclasses import asdict
from pathlib import Path

from bundle.server_flags import command_words, set_names, switch_state
from bundle.slo import SloError
from bundle.store import BundleError, read_bundle
from report.derive import validity as V
from report.derive.power import PEAK_DTYPE, gpu_absent_reason
from report.derive.round_ledger import OWN_LENGTH_KINDS, RoundData, read_round
from report.derive.stats import INTERRUPTED
from report.judge.compare import cross_round_ledger
from report.judge.findings import round_findings
from report.judge.next_steps import next_steps
from report.judge.peer_gaps import round_peer_findings
from report.judge.verdicts import build_ledger
from report.ledger import Ledger
from report.publish import figures as F
from report.publish.document import Column, RoundFacts, RoundReport, Table
from report.words import LANGS, Named, has, in_lang, listed, round_name, word

CLIENT_LAG_SHARE_LIMIT = 0.1      # the templates say "a tenth" of the ITL median
# From this share of chunks stamped like the one before them, the page explains the zero gaps
# and prints per-chunk ITL beside per-token ITL.
ZERO_GAP_NOTE_SHARE = 0.1
# vLLM's FLOPs counter "closes" against its own formulas within this relative difference.
FLOPS_CLOSE = 0.01
# The KV account "balances" when measured and expected usage differ by at most this many points.
KV_CLOSE_PP = 1.0
# Workloads the title names, since their requests are not the plan's own drawn lengths.
TITLED_WORKLOADS = ("trace", "sharegpt", "jsonl", "sessions", "shared-prefix")

# Columns: (point quantity, catalogue code of the header, unit, decimals).
KV_COLUMNS = [
    ("concurrency", "label.col_concurrency", "", 0),
    ("input_len", "label.col_input_len", "tok", 0),
    ("effective_concurrency", "label.col_effective_concurrency", "", None),   # a count, or a median of counts
    ("kv_expected_median", "label.col_kv_expected_median", "%", 1),
    ("kv_usage_p50", "label.col_kv_measured_p50", "%", 1),
    ("kv_error_pp", "label.col_kv_error_pp", "pp", 2),
    ("kv_expected_peak", "label.col_kv_expected_peak", "%", 1),
    ("kv_usage_peak", "label.col_kv_usage_peak", "%", 1),
]

RESULT_COLUMNS = [
    ("concurrency", "label.col_concurrency", "", 0),
    ("input_len", "label.col_input_len", "tok", 0),
    ("requests", "label.col_requests", "req", 0),
    ("failed", "label.col_failed", "req", 0),
    ("output_tok_s", "label.col_output_tok_s", "tok/s", None),
    ("total_tok_s", "label.col_total_tok_s", "tok/s", None),
    ("ttft_ms_p50", "label.col_ttft_ms_p50", "ms", None),
    ("ttft_ms_p99", "label.col_ttft_ms_p99", "ms", None),
    ("itl_ms_p50", "label.col_itl_ms_p50", "ms", None),
    ("itl_ms_p99", "label.col_itl_ms_p99", "ms", None),
    ("queue_ms_mean", "label.col_queue_ms_mean", "ms", None),
    ("prefill_ms_mean", "label.col_prefill_ms_mean", "ms", None),
    ("kv_usage_p50", "label.col_kv_usage_p50", "%", 1),
]


DETAIL_COLUMNS = [
    ("concurrency", "label.col_concurrency", "", 0),
    ("input_len", "label.col_input_len", "tok", 0),
    # TTFT over the requests the server's queue and prefill means describe: the three add up to it
    ("ttft_ms_mean_population", "label.col_ttft_ms_mean", "ms", None),
    ("queue_ms_mean", "label.col_queue_ms_mean", "ms", None),
    ("prefill_ms_mean", "label.col_prefill_ms_mean", "ms", None),
    ("frontend_ms_mean", "label.col_frontend_ms_mean", "ms", None),
    ("itl_ms_p90", "label.col_itl_ms_p90", "ms", None),
    ("tpot_ms_mean", "label.col_tpot_ms_mean", "ms", None),
    ("e2e_ms_p50", "label.col_e2e_ms_p50", "ms", None),
    ("e2e_ms_p99", "label.col_e2e_ms_p99", "ms", None),
    ("server_running_median", "label.col_server_running_median", "req", None),
    ("waiting_peak", "label.col_waiting_peak", "req", 0),
]


# GPM's counters beside the model's shares, point by point.
GPM_COLUMNS = [
    ("concurrency", "label.col_concurrency", "", 0),
    ("input_len", "label.col_input_len", "tok", 0),
    ("mbu", "label.col_mbu", "%", 1),
    ("dram_bandwidth_share", "label.col_dram_bandwidth_share", "%", 1),
    ("mfu", "label.col_mfu", "%", 1),
    ("tensor_active_share", "label.col_tensor_active_share", "%", 1),
    ("sm_active_share", "label.col_sm_active_share", "%", 1),
    ("sm_occupancy_share", "label.col_sm_occupancy_share", "%", 1),
]

# The SLO table: a point's attainment and goodput, then each objective set at the SLO's percentile.
SLO_COLUMNS = [
    ("concurrency", "label.col_concurrency", "", 0),
    ("request_rate", "label.col_request_rate", "req/s", None),
    ("slo_attainment", "label.col_slo_attainment", "%", 1),
    ("goodput_req_s", "label.col_goodput_req_s", "req/s", None),
    ("goodput_tok_s", "label.col_goodput_tok_s", "tok/s", None),
]
SLO_OBJECTIVE_COLUMNS = [(k, f"slo_{k}_ms", f"label.col_slo_{k}_ms", "ms", None)
                         for k in ("ttft", "tpot", "e2e", "itl")]


def slo_table(led: Ledger, pids: list[str], labels: dict[str, str]) -> Table:
    """Each point against the SLO: attainment, goodput, and the objectives the SLO sets (their
    headers name the SLO's percentile)."""
    cols = [c for c in SLO_COLUMNS if any(led.value_of(f"p.{pid}.{c[0]}") is not None for pid in pids)]
    table = point_table(led, pids, "slo_table", in_langs("label.table_slo"),
                        cols + [("slo_met", "label.col_slo_met", "", None)], labels)
    pct = led.value_of("r.slo_percentile")
    objectives = [Column(id=q, header=in_langs(h, p=f"{pct:g}"), unit=u, digits=d)
                  for k, q, h, u, d in SLO_OBJECTIVE_COLUMNS
                  if pct is not None and led.value_of(f"r.slo_{k}_threshold_ms") is not None]
    rows = [r[:-1] + [f"p.{pid}.{c.id}" for c in objectives] + r[-1:] for pid, r in zip(pids, table.rows)]
    return Table(id=table.id, title=table.title, columns=table.columns[:-1] + objectives + table.columns[-1:],
                 rows=rows, row_labels=table.row_labels)


def set_tables(led: Ledger, comparisons: list, labels: dict[str, str]) -> dict[str, Table]:
    """One table per question a round of server sets asks: each set's point (its flags named)
    beside the base set's, the question's two signals and how they compare with the base's."""
    from report.judge.sets import SHOWN, SIGNALS
    out = {}
    for question in dict.fromkeys(c.question for c in comparisons):
        mine = [c for c in comparisons if c.question == question]
        cols = [Column(id=f"{q}{suffix}", header=in_langs(f"label.col_set_{q}{suffix}"), unit="", digits=None)
                for q, _, _ in SIGNALS[question] for suffix in ("", "_vs_base")]
        cols += [Column(id=q, header=in_langs(f"label.col_set_{q}"), unit="", digits=None) for q in SHOWN[question]]
        rows, row_labels = [], []
        for c in mine:
            for pid in (c.base, c.point):     # the sentence above the table names each set's flags
                rows.append([f"p.{pid}.{col.id}" if f"p.{pid}.{col.id}" in led else None for col in cols])
                row_labels.append({lang: in_lang(labels.get(pid, pid), lang) for lang in LANGS})
        out[f"sets_{question}"] = Table(id=f"sets_{question}", title=in_langs(f"label.table_sets_{question}"),
                                        columns=cols, rows=rows, row_labels=row_labels)
    return out


def in_langs(code: str, **fields) -> dict[str, str]:
    """The catalogue text of CODE in every language, fields filled."""
    return {lang: word(code, lang, **fields) for lang in LANGS}


def point_table(led: Ledger, pids: list[str], table_id: str, title: dict[str, str],
                columns: list, labels: dict[str, str]) -> Table:
    """A table with one row per point, labelled by its name (LABELS: C=128); each cell a ledger key."""
    cols = [Column(id=c, header=in_langs(h), unit=u, digits=d) for c, h, u, d in columns]
    rows = [[f"p.{pid}.{c.id}" if f"p.{pid}.{c.id}" in led else None for c in cols] for pid in pids]
    return Table(id=table_id, title=title, columns=cols, rows=rows,
                 row_labels=[{lang: in_lang(labels.get(pid, pid), lang) for lang in LANGS} for pid in pids])


# One row per GPU sampled (report/derive/power.py: the per-GPU quantities of a point).
GPU_COLUMNS = [
    ("gpu_row_power_median_w", "label.col_gpu_power", "", 0),
    ("gpu_row_sm_clock_load_mhz", "label.col_gpu_sm_clock", "", 0),
    ("gpu_row_util_median_pct", "label.col_gpu_util", "", 0),
    ("gpu_row_mem_used_bytes", "label.col_gpu_mem_used", "", None),
    ("gpu_row_temperature_max_c", "label.col_gpu_temperature", "", 0),
    ("gpu_row_dram_bandwidth_share", "label.col_dram_bandwidth_share", "%", 1),
    ("gpu_row_tensor_active_share", "label.col_tensor_active_share", "%", 1),
    ("gpu_row_sm_active_share", "label.col_sm_active_share", "%", 1),
]


# One row per engine (report/derive/occupancy.py: the per-engine quantities of a point).
ENGINE_COLUMNS = [
    ("engine_running_mean", "label.col_engine_running", "", 1),
    ("engine_waiting_mean", "label.col_engine_waiting", "", 1),
    ("engine_pool_tokens", "label.col_engine_pool", "", 0),
    ("engine_kv_usage_p50", "label.col_engine_kv_p50", "%", 1),
    ("engine_kv_usage_peak", "label.col_engine_kv_peak", "%", 1),
    ("engine_output_tok_s", "label.col_engine_output_tok_s", "", 0),
    ("engine_requests_finished", "label.col_engine_requests_finished", "", 0),
]


def runs_in_parallel(led: Ledger, pid: str | None) -> bool:
    """Whether point PID ran on more than one engine or with tensor parallel over more than one GPU."""
    return pid is not None and any((led.value_of(f"p.{pid}.{key}") or 0) > 1
                                   for key in ("engine_count", "tensor_parallel_size"))


def item_table(led: Ledger, pid: str | None, per: str, table_id: str, title: dict[str, str],
               columns: list, label_code: str, name: str = "") -> Table:
    """A table of one point with a row per item of kind PER (`p.<point>.<per><k>.` keys: GPUs,
    engines), labelled by LABEL_CODE with the item's number, or with its ledger value NAME (an
    engine's "1/0"); no rows without the point."""
    cols = [Column(id=c, header=in_langs(h), unit=u, digits=d) for c, h, u, d in columns]
    prefix = f"p.{pid}."
    item_of = re.compile(re.escape(prefix) + f"({re.escape(per)}[0-9]+)\\.[^.]+")
    found = {m.group(1) for k in (led.values if pid else ()) if (m := item_of.fullmatch(k))}
    items = sorted(found, key=lambda item: int(item[len(per):]))
    rows = [[f"{prefix}{item}.{c.id}" if f"{prefix}{item}.{c.id}" in led else None for c in cols]
            for item in items]
    return Table(id=table_id, title=title, columns=cols, rows=rows,
                 row_labels=[in_langs(label_code, n=led.value_of(f"{prefix}{item}.{name}") if name
                                      else item[len(per):]) for item in items])


def results_table(led: Ledger, pids: list[str], labels: dict[str, str]) -> Table:
    """Every point's main figures."""
    return point_table(led, pids, "results", in_langs("label.table_results"), RESULT_COLUMNS, labels)


def source_facts(ws) -> dict:
    """The facts of a replayed trace or dataset (the manifest's workload_source), none without."""
    if not isinstance(ws, dict) or ws.get("kind") not in ("trace", "sharegpt"):
        return {}
    dropped = ws.get("dropped") if isinstance(ws.get("dropped"), dict) else {}
    return {"source_kind": ws["kind"], "source_path": Path(str(ws.get("path") or "")).name or None,
            "source_format": str(ws.get("format") or ws["kind"]),
            # Reasons the catalogue names, in order (a reason of a later collector is left out).
            "source_drop_reasons": sorted(r for r, k in dropped.items()
                                          if k and all(has(f"label.replay_drop_{r}", lang) for lang in LANGS))}


def facts_of(rd: RoundData) -> dict:
    """Non-numeric facts for the narrative: engine, model, hardware, status (escaped on render)."""
    m = rd.bundle.manifest
    eng, host, model = m.get("engine") or {}, m.get("host") or {}, m.get("model") or {}
    gpus = rd.gpus
    return {
        "bundle": rd.name,
        "status": m.get("status"),
        "status_reason": m.get("status_reason"),
        "origin": m.get("origin"),
        "engine_mode": eng.get("mode"),
        "engine_mode_text": {lang: word(f"label.engine_mode_{eng.get('mode')}", lang)
                             if has(f"label.engine_mode_{eng.get('mode')}", lang) else str(eng.get("mode"))
                             for lang in LANGS},
        "vllm_version": eng.get("vllm_version"),
        "model": model.get("served_name") or model.get("name"),
        "model_desc": model.get("name"),
        "random_weights": model.get("load_format") == "dummy" or
        ((rd.log.non_default_args or {}).get("load_format") == "dummy" if rd.log else False),
        "cpu": host.get("cpu_model"),
        "gpu": ", ".join(g.get("name", "?") for g in gpus) if gpus else None,
        "gpu_absent_reason": m.get("gpu_absent_reason"),
        "kv_pool_device": rd.log.kv_pool_device if rd.log else None,
        "axis": rd.axis,
        "created": m.get("created_utc"),
        "tool_version": (m.get("tool") or {}).get("version"),
        "git_revision": (m.get("tool") or {}).get("git_revision"),
        "server_flags": " ".join((eng.get("command") or [])[3:]) if eng.get("command") else None,
        # What the server log's non-default arguments say of two switches: True, False, or
        # None where the log does not say (vLLM's default, which depends on its version).
        "prefix_caching": (rd.log.non_default_args or {}).get("enable_prefix_caching") if rd.log else None,
        "cuda_graphs": (False if (rd.log.non_default_args or {}).get("enforce_eager") else None) if rd.log else None,
        # Off only where every server set ran with it off (the last of its switches decides): a
        # round that also ran it on has tried it.
        "prefix_caching_off": bool(eng.get("server_sets")) and all(
            switch_state(command_words(c), "enable-prefix-caching") is False
            for c in (eng.get("server_sets") or {}).values()),
        "mfu_enabled": any("--enable-mfu-metrics" in " ".join(c or [])
                           for c in (eng.get("server_sets") or {}).values()),
        "points": [p.pid for p in rd.points],
        "failed_points": [p.pid for p in rd.points if p.window.status not in ("ok", INTERRUPTED)],
        "interrupted_points": [p.pid for p in rd.points if p.window.status == INTERRUPTED],
        "warnings": list(rd.bundle.warnings),
        **source_facts(rd.bundle.manifest.get("workload_source")),
    }


def compose_rounds(pairs: list[tuple[str | Path, str]],
                   refused: list[str] | None = None, slo=None,
                   compare_with: dict[str, tuple[str, ...]] | None = None) -> list[RoundReport]:
    """Compose every round; each is compared with the round before it (by round id order).
    With REFUSED, a bundle that cannot be read is left out and its error appended there (the
    other rounds go on); without it, the BundleError stops the composition. SLO, a (Slo,
    where stated) pair, overrides every round's own; COMPARE_WITH names other tools' result
    files to read beside a round (by round id), besides its external/ folder's."""
    rounds = []
    for path, rid in pairs:
        try:
            rd = read_round(read_bundle(path), slo, rid, compare_with=(compare_with or {}).get(rid, ()))
            rounds.append((path, rid, rd, build_ledger(rd)))
        except Exception as e:  # noqa: BLE001 - with REFUSED, one round stops no other
            if refused is None:
                raise
            refused.append(f"{rid}: {refusal_text(e)}")
    by_id = {rid: (rd, led) for _, rid, rd, led in rounds}
    out = []
    for path, rid, rd, led in rounds:
        prev = by_id.get(previous_round_id(rid))
        try:
            out.append(compose_from(path, rid, rd, led, prev))
        except Exception as e:  # noqa: BLE001
            if refused is None:
                raise
            refused.append(f"{rid}: {refusal_text(e)}")
    return out


def refusal_text(e: Exception) -> str:
    """Why a round was not built, in one line: a refusal's own message (BundleError, SloError),
    else the exception's type and message (a fault of this tool, named so it can be reported)."""
    text = str(e) if isinstance(e, (BundleError, SloError)) else f"{type(e).__name__}: {e}"
    return " ".join(text.split()) or type(e).__name__


# How a setting that varies across a round's points names a point: C=128, L=8192, 4 req/s,
# and a server set in words of the page's language (`label.point_set`: set 1, 配置 1).
LABEL_PARTS = (("server_set", None), ("input_len", "L={}"), ("concurrency", "C={}"),
               ("request_rate", "{} req/s"))


def point_labels(points) -> dict[str, str]:
    """Each point's name by the settings that vary across the round (its id where none does),
    a Named with its form in each language."""
    varying = [(k, fmt) for k, fmt in LABEL_PARTS
               if len({str(p.settings.get(k)) for p in points}) > 1]
    # A server set is named by the flag values that set it apart ("--max-num-seqs 8"), its
    # number only where its flags say nothing the others do not.
    sets = set_names({p.settings.get("server_set") or 0: p.settings.get("server_flags") or [] for p in points})

    def set_part(p, lang: str) -> str:
        n = p.settings.get("server_set") or 0
        if sets.get(n):
            return sets[n]
        # The one set that adds no flag is "no added flags"; sets whose flags name none apart, by number.
        alone = [m for m, name in sets.items() if not name] == [n] and not p.settings.get("server_flags")
        return word("label.point_set_defaults" if alone else "label.point_set", lang, n=n)

    def name(p, lang: str) -> str:
        vals = [f"{p.settings.get(k):g}" if isinstance(p.settings.get(k), float) else p.settings.get(k)
                for k, _ in varying]
        parts = [set_part(p, lang) if fmt is None else fmt.format(v)
                 for (_, fmt), v in zip(varying, vals)]
        return word("label.point_parts_sep", lang).join(parts) if parts else p.pid
    return {p.pid: Named({lang: name(p, lang) for lang in LANGS}) for p in points}


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
    # Points whose C requests at their peak would need more than the pool: the table's demand
    # column passes 100 % there, and the page says why.
    facts["demand_over_pool"] = [pid for pid in pids if (led.get(f"p.{pid}.kv_expected_peak") is not None
                                 and led[f"p.{pid}.kv_expected_peak"].present
                                 and led[f"p.{pid}.kv_expected_peak"].value > 1)]
    facts["sweep_axis"] = rd.axis
    validity = rd.verdicts.validity
    if len([pid for pid in pids if validity[pid].valid]) < 2:
        # Fewer than two valid points (a round cut short, points that failed their checks):
        # no sweep to narrate; the diagnosis says why.
        facts["axis"] = "single"
    # The client's lag counts as distortion above this share of the ITL median (a policy).
    facts["lag_share_limit"] = CLIENT_LAG_SHARE_LIMIT
    facts["zero_gap_note_share"] = ZERO_GAP_NOTE_SHARE
    facts["client_distorted_points"] = [pid for pid in pids if "client_distorted" in validity[pid].reasons]
    facts["kv_close_pp"] = KV_CLOSE_PP
    # At or above this peak the pool counts as near full: "not because of the pool" is not said.
    facts["pool_room_share"] = V.POOL_ROOM_SHARE
    facts["flops_close"] = FLOPS_CLOSE
    # The GPU's spec (and so its peak) is known exactly when r.peak_flops has no reason it is absent.
    peak_missing = led["r.peak_flops"].missing
    facts["peak_label"] = in_langs("label.peak_dense", dtype=PEAK_DTYPE) if peak_missing is None else None
    facts["peak_missing"] = peak_missing.text("en") if peak_missing else None
    facts["peak_missing_zh"] = peak_missing.text("zh") if peak_missing else None
    gpu_absent = gpu_absent_reason(facts.get("gpu_absent_reason"))
    facts["gpu_absent_reason_zh"] = gpu_absent.text("zh") if gpu_absent else None
    # Cross-round facts are "not available" (RoundFacts' defaults) unless a previous round compares.
    prev_led, prev_pids = None, []
    if prev is not None:
        prev_rd, prev_led = prev
        prev_pids = [p.pid for p in prev_rd.points if p.window.status == "ok"]
        facts.update(cross_round_ledger(led, rd, prev_led, prev_rd))
        facts["prev_differs"] = {lang: [word(f"label.differs_{k}", lang) for k in facts["prev_differs"]]
                                 for lang in LANGS}
    facts["has_prev"] = prev is not None
    attribution = rd.verdicts.attribution
    valid = [pid for pid in pids if validity[pid].valid]
    facts["valid_points"] = valid
    # The one point the narrative's "at C=…" sentences speak of, in every section: the last
    # valid point (else the last that ran), and the first likewise; each named by its settings.
    shown = valid or pids
    facts["headline_point"] = shown[-1] if shown else None
    facts["first_point"] = shown[0] if shown else None
    # The crossover's power laws run between the two highest valid points; its sentences name both.
    facts["crossover_from"] = valid[-2] if len(valid) > 1 else None
    facts["point_labels"] = point_labels(rd.points)
    facts["invalid_points"] = {pid: validity[pid].reasons for pid in pids if not validity[pid].valid}
    facts["bottlenecks"] = {pid: attribution[pid].bottleneck for pid in pids}
    comparisons = facts["set_comparisons"] = list(rd.verdicts.set_comparisons)
    facts["findings"] = [asdict(f) for f in round_findings(led, validity, attribution, valid, facts)]
    facts["set_comparisons"] = [{"point": c.point, "base": c.base, "question": c.question,
                                 "verdict": c.verdict} for c in comparisons]
    facts["slo_source"] = rd.slo_source
    facts["next_steps"] = next_steps(led, rd, facts)
    peer_facts(led, rd, facts)
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
    for fig in (F.fig_timeline(bundle.metrics, windows), F.fig_power(rd.gpu_samples, windows),
                F.fig_tflops_timeline(bundle.metrics, windows, led), F.fig_roofline(led, pids, facts["point_labels"]),
                F.fig_repro(led, pids, axis), F.fig_slo(led, valid, axis),
                F.fig_occupancy(led, pids, prev_led if facts.get("comparable") else None, prev_pids)):
        if fig is not None:
            figs[fig.id] = fig
    from report.judge.sets import SIGNALS
    if any(c.question == "step_budget" for c in comparisons):
        fig = F.fig_budget_curve(led, [p.pid for p in rd.points if p.pid in valid])
        if fig is not None:
            figs[fig.id] = fig
    for question in dict.fromkeys(c.question for c in comparisons):
        # A step budget's ITL tail beside the one the step model predicts for each set.
        modelled = ("itl_tail_ms_model",) if question == "step_budget" else ()
        fig = F.fig_sets(led, question, [(c.base, c.point) for c in comparisons if c.question == question],
                         tuple(q for q, _, _ in SIGNALS[question]) + modelled, facts["point_labels"])
        if fig is not None:
            figs[fig.id] = fig
    for fig in [*F.fig_session_turns(led, pids, facts["point_labels"]),
                F.fig_lengths({p.pid: p.measured for p in rd.points if p.pid in pids}, facts["point_labels"])]:
        if fig is not None:
            figs[fig.id] = fig
    facts["figures"] = sorted(figs)
    notices = []
    if pids and not valid:
        # The cards and the "at C=…" sentences then speak of a point that failed its checks.
        notices.append(in_langs("label.notice_no_valid_point", point=facts["point_labels"].get(pids[-1], pids[-1])))
    if facts["status"] != "complete":
        notices.append(in_langs("label.notice_incomplete", status=facts["status"],
                                reason=facts["status_reason"] or ""))
    if facts["interrupted_points"]:
        notices.append(interrupted_notice(facts["interrupted_points"]))
    if facts["failed_points"]:
        notices.append({lang: word("label.notice_failed", lang, points=listed(facts["failed_points"], lang))
                        for lang in LANGS})
    model = bundle.manifest.get("model") or {}
    vocab, model_vocab = model.get("tokenizer_vocab_size"), ((model.get("config") or {}).get("vocab_size"))
    if isinstance(vocab, int) and isinstance(model_vocab, int) and vocab < model_vocab:
        notices.append(in_langs("label.notice_vocab", vocab=vocab, model_vocab=model_vocab))
    if facts["origin"] != "recorded":
        notices.append(in_langs("label.notice_fixture"))
    if rd.lengths_vary:
        # Each request had lengths of its own: the sections that model the architecture read
        # them (round_ledger.modelled_lengths), and the percentiles mix them; said here.
        work = (bundle.manifest.get("plan") or {}).get("workload") or {}
        source = work.get("kind") if work.get("kind") in OWN_LENGTH_KINDS else "drawn"
        lead, rest = in_langs(f"label.notice_lengths_{source}"), in_langs("label.notice_length_dist")
        notices.append({lang: lead[lang] + word("label.sentence_sep", lang) + rest[lang] for lang in LANGS})
    title = round_title(bundle.manifest, rd.axis, round_id, [c.question for c in comparisons])
    sections = ["summary", "diagnosis"] + (["sets"] if comparisons else []) + ["slo", "client", "decomposition", "kv", "mfu", "timeline", "power"] \
        + (["parallel"] if runs_in_parallel(led, facts["headline_point"]) else []) \
        + (["peers"] if rd.peers else []) + ["compare", "results", "next", "method"]
    if not pids:
        # No point was measured to the end: the notices say why; only what was recorded applies.
        sections = (["results"] if facts["interrupted_points"] else []) + ["method"]
    labels = facts["point_labels"]
    results = results_table(led, pids + facts["interrupted_points"], labels)
    results.row_labels[len(pids):] = [interrupted_label(pid) for pid in facts["interrupted_points"]]
    detail = point_table(led, pids, "results_detail", in_langs("label.table_results_detail"),
                         DETAIL_COLUMNS, labels)
    # The facts are a builder dict until here; the report holds them typed and frozen.
    return RoundReport(round_id=round_id, title=title, subtitle=plan_subtitle(bundle.manifest), ledger=led, sections=sections, figures=figs,
                       tables={"results": results, "results_detail": detail,
                               "slo_table": slo_table(led, facts["valid_points"], labels),
                               **set_tables(led, comparisons, facts["point_labels"]),
                               **peer_tables(led, facts["peer_matches"]),
                               "gpm_table": point_table(led, pids, "gpm_table", in_langs("label.table_gpm"),
                                                        GPM_COLUMNS, labels),
                               "kv_table": point_table(led, pids, "kv_table", in_langs("label.table_kv"),
                                                 KV_COLUMNS, labels),
                               "engine_table": item_table(led, facts["headline_point"], "engine", "engine_table",
                                                          {lang: word("label.table_engines", lang, point=in_lang(
                                                              labels.get(facts["headline_point"], ""), lang))
                                                           for lang in LANGS},
                                                          ENGINE_COLUMNS, "label.row_engine", name="engine_name_of"),
                               "gpu_table": item_table(led, facts["headline_point"], "gpu", "gpu_table",
                                                       {lang: word("label.table_gpus", lang, point=in_lang(
                                                           labels.get(facts["headline_point"], ""), lang))
                                                        for lang in LANGS},
                                                       GPU_COLUMNS, "label.row_gpu")}, facts=RoundFacts(**facts), notices=notices,
                       bundles=[str(bundle_path)])


def interrupted_label(pid: str) -> dict[str, str]:
    """A results-table row label that says the point was interrupted, in each language."""
    return in_langs("label.row_interrupted", pid=pid)


def interrupted_notice(pids: list[str]) -> dict[str, str]:
    """The notice for points cut short by an interruption, in each language."""
    return {lang: word("label.notice_interrupted", lang, points=listed(pids, lang)) for lang in LANGS}


def round_title(manifest: dict, axis: str, round_id: str, questions: list[str] = ()) -> dict[str, str]:
    """The round's title in each language: the round in words, then what it measured (the
    workload where it is a trace, a dataset, sessions or shared prefixes; the sweep axis; the
    sets' questions)."""
    work = ((manifest.get("plan") or {}).get("workload") or {}).get("kind")
    named = [q for q in dict.fromkeys(questions) if has(f"label.title_sets_{q}", "en")]
    out = {}
    for lang in LANGS:
        name = round_name(round_id, lang)
        if work in TITLED_WORKLOADS:
            sweep = (listed([word(f"label.title_sets_{q}", lang) for q in named], lang)
                     if axis == "server" and named else word(f"label.title_sweep_{axis}", lang))
            kind = word(f"label.title_workload_{work}", lang, sweep=sweep)
        else:
            kind = word(f"label.axis_{axis}", lang)
        out[lang] = word("label.round_title", lang, round=name, kind=kind)
    return out


def plan_subtitle(manifest: dict) -> dict[str, str]:
    """The plan's own title (manifest plan.title) as the page's subtitle, quoted; {} where it has none."""
    title = ((manifest.get("plan") or {}).get("title") or "").strip()
    return in_langs("label.plan_subtitle", title=title) if title else {}


# Each other tool's number beside ours (report/judge/peer_gaps.py): (metric, row label).
PEER_ROWS = [("output_tok_s", "label.peer_row_output_tok_s"), ("ttft_ms_p50", "label.peer_row_ttft_ms_p50"),
             ("ttft_ms_p99", "label.peer_row_ttft_ms_p99"), ("itl_ms_p50", "label.peer_row_itl_ms_p50"),
             ("itl_ms_p99", "label.peer_row_itl_ms_p99"), ("tpot_ms_p50", "label.peer_row_tpot_ms_p50"),
             ("tpot_ms_p99", "label.peer_row_tpot_ms_p99")]


def peer_facts(led: Ledger, rd: RoundData, facts: dict) -> None:
    """Other tools' results into FACTS: each beside the point it ran, with the reasons they
    differ (findings of kind "peers"); those no point ran."""
    from report.derive.round_ledger import peer_file
    from report.judge.peer_gaps import matches, tool_name, unmatched
    labels = facts["point_labels"]
    found = matches(rd)
    facts["peer_matches"] = [{"point": m.point, "item": m.item, "tool": m.tool, "file": peer_file(rd, m.result),
                              "format": m.result.tool, "at": labels.get(m.point, m.point)} for m in found]
    facts["peers_unmatched"] = [{"tool": tool_name(r.tool), "format": r.tool, "file": peer_file(rd, r)}
                                for r in unmatched(rd)]
    facts["findings"] += [asdict(f) for f in round_peer_findings(led, rd, labels)]


def peer_tables(led: Ledger, found: list[dict]) -> dict[str, Table]:
    """One table per (point, other tool's result): each metric ours, theirs, and ours counted their way."""
    from report.judge.peer_gaps import OURS, same_definition
    out = {}
    for m in found:
        k, same = f"p.{m['point']}.", same_definition(m["format"])
        cols = [Column(id="ours", header=in_langs("label.peer_col_ours")),
                Column(id="theirs", header={lang: word("label.peer_col_theirs", lang, tool=m["tool"][lang])
                                            for lang in LANGS}),
                Column(id="ours_their_way", header={lang: word("label.peer_col_ours_their_way", lang,
                                                               tool=m["tool"][lang]) for lang in LANGS})]
        rows, row_labels = [], []
        for metric, label in PEER_ROWS:
            cells = [k + OURS[metric], f"{k}{m['item']}.peer_{metric}", k + same[metric] if metric in same else None]
            rows.append([c if c is not None and c in led else None for c in cells])
            row_labels.append(in_langs(label))
        tid = f"peers_{m['point']}_{m['item']}"
        out[tid] = Table(id=tid, title={lang: word("label.table_peer", lang, tool=m["tool"][lang], file=m["file"],
                                                   point=in_lang(m["at"], lang)) for lang in LANGS},
                         columns=cols, rows=rows, row_labels=row_labels)
    return out
