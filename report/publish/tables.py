"""The tables of a round's page: their columns, and each table built from ledger keys."""

from __future__ import annotations

import itertools
import re

from report.ledger import Ledger
from report.publish import numbers as N
from report.publish.document import Column, Table
from report.words import LANGS, in_lang, word

# Columns: (point quantity, catalogue code of the header, unit, decimals).
KV_COLUMNS = [
    ("concurrency", "label.col_concurrency", "", 0),
    ("input_len", "label.col_input_len", "tok", 0),
    ("kv_running_requests", "label.col_effective_concurrency", "", None),   # a count, or a median of counts
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


# The plan's template settings a point did not hold, and what it measured in their place: the
# mean prompt where each request brought its own lengths, the mean requests in flight where an
# open loop (an arrival rate, a replayed trace) set no concurrency.
MEASURED_IN_PLACE = {
    "input_len": ("prompt_tokens_sent_mean", ("prompt_tokens_sent_mean", "label.col_prompt_tokens_mean", "tok", 0)),
    "concurrency": ("open_loop", ("client_inflight_mean", "label.col_inflight_mean", "", 1)),
}


def as_measured(led: Ledger, pids: list[str], columns: list) -> list:
    """COLUMNS with a setting the points did not hold replaced by what they measured (MEASURED_IN_PLACE)."""
    out = []
    for col in columns:
        marker, measured = MEASURED_IN_PLACE.get(col[0], (None, None))
        if marker and pids and all(led.value_of(f"p.{pid}.{marker}") not in (None, False) for pid in pids):
            col = measured
        out.append(col)
    return out


# The client-lag table: each suspect point's loop lag p99 beside the ITL p99 it measured.
CLIENT_LAG_COLUMNS = [("client_lag_ms_p99", "label.col_client_lag_ms_p99", "", None),
                      ("itl_ms_p99", "label.col_itl_ms_p99", "", None)]


def client_lag_table(led: Ledger, findings: list[dict], pids: list[str], labels: dict[str, str]) -> Table:
    """The points the client-suspect finding names (its evidence), one row each; no rows without it."""
    said = next((f for f in findings if f["id"] == "client_suspect"), None)
    shown = [pid for pid in pids if said and f"p.{pid}.client_lag_ms_p99" in said["evidence"]]
    return point_table(led, shown, "client_lag", in_langs("label.table_client_lag"), CLIENT_LAG_COLUMNS, labels)


# The held table: each point whose held-check disagreement is said once for several points.
HELD_COLUMNS = [("held_concurrency_fraction", "label.col_held_by_gauges", "%", 1),
                ("engine_held_fraction", "label.col_held_by_counter", "%", 1),
                ("client_held_fraction", "label.col_held_by_client", "%", 1),
                ("outside_engine_share", "label.col_outside_engine_share", "%", 1)]


def held_table(led: Ledger, findings: list[dict], labels: dict[str, str]) -> Table:
    """The points the disagreements finding shows in a table (its `shown`); no rows without it."""
    said = next((f for f in findings if f["id"] == "disagreements"), None)
    return point_table(led, list(said["shown"]) if said else [], "held_table", in_langs("label.table_held"),
                       HELD_COLUMNS, labels)


# The invalid points' table: the numbers of each check the finding says once for its points
# (findings.points.GROUPED_CHECKS); a lockstep point's wave, its prediction beside the queue measured.
INVALID_COLUMNS = {
    "lockstep": [("send_synchrony", "label.col_send_synchrony", "%", 1),
                 ("waiting_peak", "label.col_waiting_peak", "req", 0),
                 ("prompts_per_step", "label.col_prompts_per_step", "", None),
                 ("itl_tail_ms_predicted", "label.col_prefill_step_ms", "ms", None),
                 ("queue_ms_wave", "label.col_queue_ms_wave", "ms", None),
                 ("queue_ms_mean", "label.col_queue_ms_measured", "ms", None),
                 ("queue_over_wave", "label.col_measured_over_predicted", "", None)],
    "not_steady": [("lifetimes_in_window", "label.col_lifetimes", "", None)],
    "pace_drift": [("throughput_trend", "label.col_trend_client", "", None),
                   ("engine_throughput_trend", "label.col_trend_engine", "", None)],
}


def invalid_table(led: Ledger, findings: list[dict], reasons: dict[str, list[str]], labels: dict[str, str]) -> Table:
    """The points the invalid-points finding shows (its `shown`), with the numbers of the checks
    they failed; a column no point has a value of is left out."""
    said = next((f for f in findings if f["id"] == "invalid_points"), None)
    pids = list(said["shown"]) if said else []
    cols = [c for code in INVALID_COLUMNS if any(code in reasons.get(p, []) for p in pids)
            for c in INVALID_COLUMNS[code] if any(led.value_of(f"p.{p}.{c[0]}") is not None for p in pids)]
    return point_table(led, pids, "invalid_table", in_langs("label.table_invalid"), cols, labels)


# The first step's table: each prediction at the second point beside its measurement
# (findings.points.FIRST_STEP_ROWS), a row for each.
FIRST_STEP_COLUMNS = ("label.col_predicted", "label.col_measured", "label.col_measured_over_predicted")
FIRST_STEP_ROW_LABELS = ("label.row_first_step_itl", "label.row_first_step_gaps", "label.row_first_step_ttft")


def first_step_table(led: Ledger, findings: list[dict]) -> Table:
    """The first step's predictions beside their measurements; no rows without its finding."""
    from report.judge.findings.points import FIRST_STEP_ROWS
    said = next((f for f in findings if f["id"] == "first_step"), None)
    b = said["shown"][-1] if said and said["shown"] else None
    rows = [(code, row) for code, row in zip(FIRST_STEP_ROW_LABELS, FIRST_STEP_ROWS)
            if b and all(f"p.{b}.{q}" in led and led.value_of(f"p.{b}.{q}") is not None for q in row)]
    return Table(id="first_step", title=in_langs("label.table_first_step"),
                 columns=[Column(id=f"c{i}", header=in_langs(h), unit="", digits=None)
                          for i, h in enumerate(FIRST_STEP_COLUMNS)],
                 rows=[[f"p.{b}.{q}" for q in row] for _, row in rows],
                 row_labels=[in_langs(code) for code, _ in rows])


def point_table(led: Ledger, pids: list[str], table_id: str, title: dict[str, str],
                columns: list, labels: dict[str, str]) -> Table:
    """A table with one row per point, labelled by its name (LABELS: C=128); each cell a ledger key."""
    cols = [Column(id=c, header=in_langs(h), unit=u, digits=d) for c, h, u, d in as_measured(led, pids, columns)]
    rows = [[f"p.{pid}.{c.id}" if f"p.{pid}.{c.id}" in led else None for c in cols] for pid in pids]
    return Table(id=table_id, title=title, columns=cols, rows=rows,
                 row_labels=[{lang: in_lang(labels.get(pid, pid), lang) for lang in LANGS} for pid in pids])


# One row per GPU sampled (report/derive/gpu/per_gpu.py: the per-GPU quantities of a point).
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


# One row per engine (report/derive/load/engines.py: the per-engine quantities of a point).
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


# One row per client node and point of a Ray round (report/derive/clienterror/nodes.py: the per-node
# quantities): the load it was planned and delivered, and its own client's event-loop lag.
NODE_COLUMNS = [
    ("node_planned_requests", "label.col_node_planned", "", 0),
    ("node_sent_requests", "label.col_node_sent", "", 0),
    ("node_sent_share", "label.col_node_sent_share", "%", 1),
    ("node_client_lag_ms_p50", "label.col_node_lag_p50", "", 1),
    ("node_client_lag_ms_p99", "label.col_node_lag_p99", "", 1),
]


def node_table(led: Ledger, pids: list[str], labels: dict[str, str]) -> Table:
    """Each client node of a Ray round at each point (`p.<point>.n<i>.` keys), labelled by the
    point, the node's number and its id's leading digits; no rows in a round from one host."""
    cols = [Column(id=c, header=in_langs(h), unit=u, digits=d) for c, h, u, d in NODE_COLUMNS]
    rows, row_labels = [], []
    for pid in pids:
        for i in itertools.count():
            prefix = f"p.{pid}.n{i}."
            if prefix + "node_id" not in led:
                break
            rows.append([prefix + c.id if prefix + c.id in led else None for c in cols])
            node = str(led.value_of(prefix + "node_id") or "?")
            row_labels.append({lang: word("label.row_node", lang, point=in_lang(labels.get(pid, pid), lang),
                                          n=i, id=node[:N.NODE_ID_SHOWN]) for lang in LANGS})
    return Table(id="node_table", title=in_langs("label.table_nodes"), columns=cols, rows=rows,
                 row_labels=row_labels)


def results_table(led: Ledger, pids: list[str], labels: dict[str, str]) -> Table:
    """Every point's main figures (the settings it measured in place of those it did not hold: as_measured)."""
    return point_table(led, pids, "results", in_langs("label.table_results"), RESULT_COLUMNS, labels)


# Each other tool's number beside ours (report/judge/peer_gaps.py): (metric, row label).
PEER_ROWS = [("output_tok_s", "label.peer_row_output_tok_s"), ("ttft_ms_p50", "label.peer_row_ttft_ms_p50"),
             ("ttft_ms_p99", "label.peer_row_ttft_ms_p99"), ("itl_ms_p50", "label.peer_row_itl_ms_p50"),
             ("itl_ms_p99", "label.peer_row_itl_ms_p99"), ("tpot_ms_p50", "label.peer_row_tpot_ms_p50"),
             ("tpot_ms_p99", "label.peer_row_tpot_ms_p99")]


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


def interrupted_label(pid: str) -> dict[str, str]:
    """A results-table row label that says the point was interrupted, in each language."""
    return in_langs("label.row_interrupted", pid=pid)


def round_tables(led: Ledger, facts: dict, pids: list[str], comparisons: list) -> dict[str, Table]:
    """Every table of a round's page, by id, from its ledger and the facts composed so far (FACTS)."""
    labels = facts["point_labels"]
    results = results_table(led, pids + facts["interrupted_points"], labels)
    results.row_labels[len(pids):] = [interrupted_label(pid) for pid in facts["interrupted_points"]]
    detail = point_table(led, pids, "results_detail", in_langs("label.table_results_detail"),
                         DETAIL_COLUMNS, labels)
    nodes = node_table(led, facts["points"], labels)
    headline = facts["headline_point"]
    return {"results": results, "results_detail": detail,
            "slo_table": slo_table(led, facts["valid_points"], labels),
            "node_table": nodes,
            "client_lag": client_lag_table(led, facts["findings"], pids, labels),
            "held_table": held_table(led, facts["findings"], labels),
            "invalid_table": invalid_table(led, facts["findings"], facts["invalid_points"], labels),
            "first_step": first_step_table(led, facts["findings"]),
            **set_tables(led, comparisons, facts["point_labels"]),
            **peer_tables(led, facts["peer_matches"]),
            "gpm_table": point_table(led, pids, "gpm_table", in_langs("label.table_gpm"), GPM_COLUMNS, labels),
            "kv_table": point_table(led, pids, "kv_table", in_langs("label.table_kv"), KV_COLUMNS, labels),
            "engine_table": item_table(led, headline, "engine", "engine_table",
                                       {lang: word("label.table_engines", lang,
                                                   point=in_lang(labels.get(headline, ""), lang)) for lang in LANGS},
                                       ENGINE_COLUMNS, "label.row_engine", name="engine_name_of"),
            "gpu_table": item_table(led, headline, "gpu", "gpu_table",
                                    {lang: word("label.table_gpus", lang,
                                                point=in_lang(labels.get(headline, ""), lang)) for lang in LANGS},
                                    GPU_COLUMNS, "label.row_gpu")}
