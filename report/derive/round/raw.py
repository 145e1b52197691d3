"""A round's raw inputs by the names quantities give their parameters: a point's, the round's, and those of the phases that read more."""

from __future__ import annotations

from typing import Any

from report.derive import delivery as DL
from report.derive.clienterror import nodes as CN
from report.derive.gpu import datasheet as DS
from report.derive.gpu import per_gpu as PG
from report.derive.load import engines as LE
from report.derive.load import inflight as LI
from report.derive.round.read import (
    STEADY_FRACTION,
    PointData,
    RoundData,
    load_of,
    modelled_lengths,
    ok_points,
    peer_file,
    peer_id,
    peer_matches,
    server_sets,
)
from report.derive.series import scrapes as S
from report.derive.timing import server as TS
from report.ledger import Absent, Ledger, Reason, Source, Value
from report.registry import DOES_NOT_APPLY, RawSources


def cost_raw(rd: RoundData) -> tuple[Any, tuple[str, ...]]:
    """The round's cost as a raw input: the Cost and where stated, or the Reason there is none."""
    if rd.cost is None:
        return Reason.of("reason.no_gpu_hour_price"), ()
    return rd.cost, (rd.cost_source,) if rd.cost_source else ()


def slo_raw(rd: RoundData) -> tuple[Any, tuple[str, ...]]:
    """The round's SLO as a raw input: the Slo and its source, or the Reason there is none."""
    if rd.slo is None:
        return Reason.of("reason.no_slo"), ()
    return rd.slo, (rd.slo_source,)


def model_config_raw(rd: RoundData) -> tuple[dict | Reason, tuple[str, ...]]:
    """The raw input `model_config`: the bundle's model config (or why there is none) and the file it cites."""
    return (rd.config if rd.config is not None else Reason.of("reason.no_model_config"),
            (f"{rd.name}/manifest.json: model.config",))


# A point's raw inputs (`point_raw`, with `loop_raw` and `set_raw`): name -> what it is, and
# where it is read from. tests/unit/report/test_point_raw_names.py holds it equal to the names
# point_raw adds. Times are on the bundle's clock (s); "scrapes" are the round's /metrics
# scrapes, each name citing the scrapes of its own window.
POINT_RAW_INPUTS: dict[str, str] = {
    "measured": "the point's measured requests (warm-up left out); requests file",
    "all_requests": "every request of the point, warm-up and failed ones included; requests file",
    "failed": "the point's failed requests; requests file",
    "t_measure": "the measurement start (the end of the warm-up); points.jsonl",
    "t_end": "the point's end; points.jsonl",
    "window_start": "the point's window start, warm-up included; points.jsonl",
    "gpu_samples": "the round's GPU rows (NVML or DCGM), or why there are none; gpu file",
    "gpu_items": "each sampled GPU as an item of per-GPU quantities; gpu file",
    "gpm_absent_texts": "each GPU's reason it has no GPM counters; manifest gpus[]",
    "slo": "the SLO the round is judged against, or why there is none; slo.toml",
    "cost": "the GPU-hour price and target load, or why there is none; slo.toml [cost]",
    "point_shards": "a Ray round's workers at this point; shards.jsonl",
    "worker_items": "each Ray worker as an item; shards.jsonl",
    "node_items": "each Ray client node as an item; shards.jsonl",
    "engine_command": "the engine's launch command; manifest engine.command",
    "log_args": "the non-default arguments the server log states; server.log",
    "model_config": "the model's config.json; manifest model.config",
    "scrapes": "scrapes, cited over the bracketing window; metrics file",
    "bracket_start": "the last scrape at or before the measurement start; metrics file",
    "bracket_end": "the first scrape at or after the point's end; metrics file",
    "shared_prefix_len": "a shared-prefix workload's prefix length; manifest plan.workload",
    "workload_kind": "the workload's kind; manifest plan.workload",
    "shared_prefixes": "a shared-prefix workload's number of prefixes; manifest plan.workload",
    "trace_requests": "a trace replay's requests, with their shared blocks; requests file",
    "steady_scrapes": "scrapes, cited over the steady window; metrics file",
    "steady_start": "the steady window's start",
    "steady_end": "the steady window's end",
    "engine_items": "each engine (endpoint, engine label) seen in the steady window; metrics file",
    "steady_waiting": "the waiting-requests gauge in the steady window; metrics file",
    "steady_running": "the running-requests gauge in the steady window; metrics file",
    "steady_kv_usage": "the KV cache usage gauge in the steady window, averaged over engines; metrics file",
    "steady_waiting_capacity": "requests waiting for capacity in the steady window; metrics file",
    "point_scrapes": "scrapes, cited over the measurement window; metrics file",
    "concurrency": "the point's concurrency setting; points.jsonl",
    "endpoints": "the servers the plan names; manifest plan.engine",
    "quiet_scrapes": "scrapes, cited over the window with its warm-up; metrics file",
    "client_samples": "the client's own samples (loop lag, reads); client file",
    "host_samples": "the host's CPU samples; host file",
    "population_scrapes": "scrapes, cited over the population window; metrics file",
    "population_start": "the population window's start: the first scrape after the warm-up ended",
    "population_end": "the population window's end",
    "population": "the requests that ended in the population window; requests file",
    "first_in_population": "the measured requests whose first token came in the population window; requests file",
    "population_after_warmup": "whether the population window leaves the warm-up out",
    "warmup_requests": "the point's warm-up requests; requests file",
    "bracket_window": "(bracket_start, bracket_end), citing nothing",
    "measure_window": "(t_measure, t_end), citing nothing",
    "settings": "the point's settings; points.jsonl",
    "replayed_trace": "whether the round replayed a trace; manifest workload_source",
    "open_loop_requests": "an open loop's measured requests, else does not apply; requests file",
    "capped_concurrency": "an open loop's concurrency cap, else does not apply",
    "closed_loop_concurrency": "a closed loop's concurrency, else does not apply",
    "open_loop": "whether the point sent in an open loop; points.jsonl",
    "send_span_start": "when the first measured request was sent; requests file",
    "send_span_end": "when the last measured request was sent; requests file",
    "span_scrapes": "scrapes, cited over the send span's bracket; metrics file",
    "span_bracket_start": "the last scrape at or before the send span",
    "span_bracket_end": "the first scrape at or after the send span",
    "stats_lines": "the server log's stats lines; server.log",
    "log_year": "the year the bundle was made, for the log's dateless stamps; manifest created_utc",
    "t0_wall_unix": "the bundle clock's zero as Unix time; manifest clock",
    "set_scrapes": "scrapes of the point's server set, else does not apply (one set); metrics file",
    "set_start": "the point's server set's first start",
    "set_end": "the point's server set's last end",
    "lengths_vary": "whether the requests' lengths vary (own lengths, not the plan's)",
}


def point_raw(rd: RoundData, p: PointData) -> RawSources:
    """A point's raw inputs by the names registered quantities give their parameters (POINT_RAW_INPUTS says each)."""
    raw = RawSources()
    src, win = _src_requests(rd, p), _src_window(rd, p)
    raw.add("measured", p.measured, src)
    raw.add("all_requests", p.requests, src)
    raw.add("failed", p.failed, src)
    raw.add("t_measure", p.window.t_measure, win)
    raw.add("t_end", p.window.t_end, win)
    gpu_why = DS.gpu_absent_reason(rd.bundle.manifest.get("gpu_absent_reason")) or Reason.of("reason.no_gpu_telemetry")
    n_gpu = sum(1 for s in rd.gpu_samples if p.window.t_measure <= s["t"] <= p.window.t_end)
    raw.add("gpu_samples", rd.gpu_samples or gpu_why,
            (Source.of(f"{rd.name}/{rd.gpu_file}", "source.gpu_samples_of_point", n=n_gpu, point=p.pid),))
    raw.add("gpu_items", PG.gpu_items(rd.gpu_samples), (f"{rd.name}/{rd.gpu_file}",))
    raw.add("gpm_absent_texts", {g.get("index", i): g.get("gpm_absent_reason")
                                 for i, g in enumerate(rd.bundle.manifest.get("gpus") or ())},
            (f"{rd.name}/manifest.json: gpus[].gpm_absent_reason",))
    raw.add("slo", *slo_raw(rd))
    raw.add("cost", *cost_raw(rd))
    # A Ray round's workers at this point (shards.jsonl): each one an item of clienterror/nodes.py.
    shards = [s for s in rd.bundle.shards if s["point"] == p.pid]
    shards_src = (f"{rd.name}/{rd.bundle.file_for('shards')}",)
    raw.add("point_shards", shards, shards_src)
    raw.add("worker_items", CN.worker_items(shards), shards_src)
    raw.add("node_items", CN.node_items(shards), shards_src)
    engine = rd.bundle.manifest.get("engine") or {}
    raw.add("engine_command", engine.get("command") or Reason.of("reason.no_engine_command"),
            (f"{rd.name}/manifest.json: engine.command",))
    raw.add("log_args", rd.log.non_default_args if rd.log is not None and rd.log.non_default_args is not None
            else Reason.of("reason.no_server_log"), (f"{rd.name}/server.log",))
    raw.add("model_config", *model_config_raw(rd))
    a, b = TS.bracketing_window(rd.bundle.metrics, p.window.t_measure, p.window.t_end)
    ms = _src_metrics(rd, a, b, _what("source.what_bracketing", point=p.pid))
    raw.add("scrapes", rd.bundle.metrics, ms)
    raw.add("bracket_start", a, ms)
    raw.add("bracket_end", b, ms)
    work = (rd.bundle.manifest.get("plan") or {}).get("workload") or {}
    raw.add("shared_prefix_len", work.get("prefix_len") if work.get("kind") == "shared-prefix"
            else Reason.of("reason.no_shared_prefix", kind=work.get("kind") or "?"),
            (f"{rd.name}/manifest.json: plan.workload",))
    raw.add("workload_kind", work.get("kind") or "?", (f"{rd.name}/manifest.json: plan.workload",))
    raw.add("shared_prefixes", work.get("num_prefixes") if work.get("kind") == "shared-prefix"
            else Reason.of("reason.no_shared_prefix", kind=work.get("kind") or "?"),
            (f"{rd.name}/manifest.json: plan.workload",))
    raw.add("trace_requests", p.requests if work.get("kind") == "trace"
            else Reason.of("reason.not_a_trace", kind=work.get("kind") or "?"), src)
    sa, sb = p.steady
    ss = _src_metrics(rd, sa, sb, _what("source.what_steady", share=STEADY_FRACTION, point=p.pid))
    raw.add("steady_scrapes", rd.bundle.metrics, ss)
    raw.add("steady_start", sa)
    raw.add("steady_end", sb)
    raw.add("engine_items", LE.engine_items(rd.bundle.metrics, sa, sb), ss)
    raw.add("steady_waiting", _gauge_or_empty(rd.bundle.metrics, sa, sb, "vllm:num_requests_waiting"), ss)
    raw.add("steady_running", _gauge_or_empty(rd.bundle.metrics, sa, sb, "vllm:num_requests_running"), ss)
    # Each engine's usage is a share of its own pool: several engines' are averaged, never added.
    raw.add("steady_kv_usage", _gauge_or_empty(rd.bundle.metrics, sa, sb, "vllm:kv_cache_usage_perc", agg="mean"), ss)
    raw.add("steady_waiting_capacity", _gauge_or_empty(rd.bundle.metrics, sa, sb, "vllm:num_requests_waiting_by_reason",
                                                       {"reason": "capacity"}), ss)
    raw.add("point_scrapes", rd.bundle.metrics,
            _src_metrics(rd, p.window.t_measure, p.window.t_end, _what("source.what_point", point=p.pid)))
    raw.add("concurrency", p.settings.get("concurrency"), win)
    raw.add("endpoints", LE.plan_endpoints(rd.bundle.manifest), (f"{rd.name}/manifest.json: plan.engine",))
    raw.add("window_start", p.window.t_start, win)
    raw.add("quiet_scrapes", rd.bundle.metrics,
            _src_metrics(rd, p.window.t_start, p.window.t_end, _what("source.what_quiet_bracketing", point=p.pid)))
    raw.add("client_samples", rd.bundle.client, (f"{rd.name}/{rd.bundle.file_for('client')}",))
    raw.add("host_samples", rd.bundle.host, (f"{rd.name}/{rd.bundle.file_for('host')}",))
    # One population: queue and prefill are observed when a request finishes, so they are
    # differenced from the first scrape after the last warm-up request ended: every finish
    # they count is a measured request, and the client's TTFT is taken over the same ones.
    # Without a scrape after the warm-up's end, both sides take every answered request of
    # the point's window, warm-up included, so they still describe one population.
    pa, pb, pop_what, excludes_warmup = _population_window(rd.bundle.metrics, p, a, b)
    raw.add("population_scrapes", rd.bundle.metrics, _src_metrics(rd, pa, pb, _what(pop_what, point=p.pid)))
    raw.add("population_start", pa)
    raw.add("population_end", pb)
    pop = DL.requests_ended_between(
        p.measured if excludes_warmup else p.requests.take(p.requests.col("ok").astype(bool)), pa, pb)
    raw.add("population", pop, _src_requests(rd, p, "source.requests_ended_in", k=len(pop), a=pa, b=pb))
    first = DL.requests_first_token_between(p.measured, pa, pb)
    raw.add("first_in_population", first,
            _src_requests(rd, p, "source.requests_first_token_in", k=len(first), a=pa, b=pb))
    raw.add("population_after_warmup", excludes_warmup)
    raw.add("warmup_requests", p.requests.take(p.requests.col("warmup").astype(bool)), src)
    # Windows given as bounds that cite nothing: the values over them cite their samples only.
    raw.add("bracket_window", (a, b))
    raw.add("measure_window", (p.window.t_measure, p.window.t_end))
    loop_raw(rd, p, raw)
    # The span the measured requests were sent in, and the scrapes that bracket it.
    span = LI.send_span(p.measured, p.window.t_measure, p.window.t_end)
    raw.add("send_span_start", span[0], src)
    raw.add("send_span_end", span[1], src)
    sp_a, sp_b = TS.bracketing_window(rd.bundle.metrics, *span)
    raw.add("span_scrapes", rd.bundle.metrics, _src_metrics(rd, sp_a, sp_b, _what("source.what_bracketing", point=p.pid)))
    raw.add("span_bracket_start", sp_a)
    raw.add("span_bracket_end", sp_b)
    # The server log's stats lines: the gauges of a round recorded without /metrics.
    raw.add("stats_lines", list(rd.log.stats_lines) if rd.log else [],
            (Source.of(f"{rd.name}/server.log", "source.stats_lines_of_point", point=p.pid),))
    raw.add("log_year", int(str(rd.bundle.manifest.get("created_utc") or "1970")[:4]))
    raw.add("t0_wall_unix", rd.bundle.manifest["clock"]["t0_wall_unix"])
    set_raw(rd, p, raw)
    raw.add("lengths_vary", rd.lengths_vary)
    return raw


def loop_raw(rd: RoundData, p: PointData, raw: RawSources) -> None:
    """The point's settings and how it sent, into RAW: the inputs of an open loop's quantities
    (`open_loop_requests`, `capped_concurrency`) and a closed loop's (`closed_loop_concurrency`),
    each DOES_NOT_APPLY at the other kind's points."""
    raw.add("settings", p.settings, _src_window(rd, p))
    trace = (rd.bundle.manifest.get("workload_source") or {}).get("kind") == "trace"
    raw.add("replayed_trace", trace)
    is_open, C = LI.open_loop(p.settings, trace), p.settings.get("concurrency")
    raw.add("open_loop_requests", p.measured if is_open else DOES_NOT_APPLY, _src_requests(rd, p))
    raw.add("capped_concurrency", C if is_open and C and not trace else DOES_NOT_APPLY)
    raw.add("closed_loop_concurrency", DOES_NOT_APPLY if is_open else C)
    raw.add("open_loop", is_open, _src_window(rd, p))


def set_raw(rd: RoundData, p: PointData, raw: RawSources) -> None:
    """The scrapes of the server set the point ran on (`set_scrapes`, `set_start`, `set_end`),
    into RAW; DOES_NOT_APPLY in a round of one set."""
    sets = server_sets(rd)
    s = p.settings.get("server_set") or 0
    a, b = sets[s]
    raw.add("set_scrapes", rd.bundle.metrics if len(sets) > 1 else DOES_NOT_APPLY,
            _src_metrics(rd, a, b, _what("source.what_cache_config_set", set=s)))
    raw.add("set_start", a)
    raw.add("set_end", b)


def round_raw(rd: RoundData, pts: list[PointData]) -> RawSources:
    """The round's raw inputs over the points PTS (valid, in load order)."""
    raw = RawSources()
    raw.add("slo", *slo_raw(rd))
    raw.add("cost", *cost_raw(rd))
    raw.add("scrapes", rd.bundle.metrics, _src_metrics(rd, float("-inf"), float("inf")))
    # Whether the plan had the sampler on says why there is no scrape; the values cite the scrapes.
    raw.add("metrics_sampler_on", _plan_metrics(rd))
    raw.add("cache_config_scrapes", rd.bundle.metrics,
            _src_metrics(rd, float("-inf"), float("inf"), _what("source.what_cache_config")))
    # Each server set's span, whose cache_config_info is the set's (its scrapes are cited above).
    raw.add("server_set_spans", server_sets(rd))
    table = rd.bundle.request_table
    rsrc = (Source.of(f"{rd.name}/{rd.bundle.file_for('requests')}", "source.requests_all", n=len(table)),)
    raw.add("measured_requests", table.take([]).concat(*(p.measured for p in rd.points)), rsrc)
    raw.add("failed_requests", table.take([]).concat(*(p.failed for p in rd.points)), rsrc)
    ws = rd.bundle.manifest.get("workload_source")
    raw.add("workload_source", ws if isinstance(ws, dict) else None, (f"{rd.name}/manifest.json: workload_source",))
    raw.add("gpus", rd.gpus, (f"{rd.name}/manifest.json: gpus",))
    raw.add("spec_gpus", rd.gpus, (f"{rd.name}/manifest.json: gpus; report/data/gpus.toml",))
    raw.add("gpu_absent_text", rd.bundle.manifest.get("gpu_absent_reason"))
    raw.add("host", rd.bundle.manifest.get("host") or {}, (f"{rd.name}/manifest.json: host",))
    points_file = (f"{rd.name}/points.jsonl",)
    raw.add("measured_points", [p.pid for p in ok_points(rd)], points_file)
    raw.add("valid_point_ids", [p.pid for p in pts], points_file)
    raw.add("log", rd.log if rd.log is not None else Reason.of("reason.no_server_log"), (f"{rd.name}/server.log",))
    if rd.other_logs:
        raw.add("other_logs", dict(rd.other_logs), tuple(f"{rd.name}/{name}" for name, _ in rd.other_logs))
    else:
        raw.add("other_logs", Reason.of("reason.one_server_log"))
    raw.add("model_config", *model_config_raw(rd))
    engine = rd.bundle.manifest.get("engine") or {}
    raw.add("engine_command", engine.get("command") or Reason.of("reason.no_engine_command"),
            (f"{rd.name}/manifest.json: engine.command",))
    # A Ray round's workers per point: their clock offsets to the driver's (shards.jsonl).
    raw.add("shard_clocks", rd.bundle.shards or Reason.of("reason.one_client_host"),
            (f"{rd.name}/{rd.bundle.file_for('shards')}",))
    if rd.axis not in ("concurrency", "single"):
        raw.add("loads", Reason.of("reason.slo_axis_not_load", axis=rd.axis))
    else:
        raw.add("loads", [load_of(p) for p in pts],
                (Source.of(f"{rd.name}/{rd.bundle.file_for('points')}", "source.valid_point_loads",
                           n=len(pts)),))
    return raw


def _src_requests(rd: RoundData, p: PointData, code: str = "source.requests_of_point",
                  **more) -> tuple[Source, ...]:
    return (Source.of(f"{rd.name}/{rd.bundle.file_for('requests')}", code, n=len(p.requests),
                      point=p.pid, measured=len(p.measured), **more),)


def _src_metrics(rd: RoundData, a: float, b: float, what: Source | None = None) -> tuple[Source, ...]:
    n = sum(1 for s in rd.bundle.metrics if a <= s["t"] <= b)
    file = f"{rd.name}/{rd.bundle.file_for('metrics')}"
    if a == float("-inf") and b == float("inf"):
        if what is None:
            return (Source.of(file, "source.scrapes_whole", n=n),)
        return (Source.of(file, "source.scrapes_whole_of", n=n, what=what),)
    if what is None:
        return (Source.of(file, "source.scrapes_span_only", n=n, a=a, b=b),)
    return (Source.of(file, "source.scrapes_span", n=n, a=a, b=b, what=what),)


def _what(code: str, **params) -> Source:
    """A phrase saying which scrapes of the metrics file a value used."""
    return Source.of("", code, **params)


def _src_window(rd: RoundData, p: PointData) -> tuple[Source, ...]:
    return (Source.of(f"{rd.name}/{rd.bundle.file_for('points')}", "source.point_window",
                      point=p.pid, a=p.window.t_measure, b=p.window.t_end),)


def _population_window(sc: list, p: PointData, a: float,
                       b: float) -> tuple[float, float, str, bool]:
    """The histogram window of one population (see point_raw) and whether it leaves the
    warm-up out; the point's bracketing window when no scrape follows the warm-up's end."""
    try:
        t_warm = DL.last_warmup_end(p.requests)
        pa, pb = DL.population_window(sc, max(t_warm, a), p.window.t_end)
        return pa, pb, "source.what_after_warmup", True
    except Absent:
        return a, b, "source.what_warmup_included", False


def _gauge_or_empty(sc: list, a: float, b: float, name: str, where=None, agg: str = "sum") -> list[float]:
    try:
        return S.gauge_values(sc, a, b, name, where, agg)
    except Absent:
        return []


def _plan_metrics(rd: RoundData) -> bool:
    """Whether the round's plan had the /metrics sampler on."""
    return bool(((rd.bundle.manifest.get("plan") or {}).get("sampler") or {}).get("metrics", True))


def peer_raw(rd: RoundData, p: PointData, raw: RawSources) -> None:
    """The results of other tools that ran point P into RAW: `peer_items` (item -> its result),
    each citing its own file (`peer_item_sources`)."""
    matched = peer_matches(rd, p)
    raw.add("peer_items", {peer_id(rd, r): {"peer": r} for r in matched})
    raw.add("peer_item_sources", {peer_id(rd, r): (Source.of(peer_file(rd, r), "source.peer_result",
                                                             tool=r.tool, index=r.index),)
                                  for r in matched})


def modelled_raw(led: Ledger, rd: RoundData, p: PointData, raw: RawSources) -> None:
    """The point's lengths the KV, theory and MFU sections model (modelled_lengths), into RAW:
    values of the ledger where the requests bring their own, else the plan's; and
    `own_lengths`, the measured requests whose own lengths replace the closed forms (reconcile/kvpool.py)."""
    L, out = modelled_lengths(led, rd, p)
    win = () if rd.lengths_vary else _src_window(rd, p)
    raw.add("modelled_input_len", L, win)
    raw.add("modelled_output_len", out, win)
    raw.add("own_lengths", p.measured if rd.lengths_vary else Reason.of("reason.lengths_from_plan"),
            _src_requests(rd, p) if rd.lengths_vary else ())


def prefill_tail_raw(led: Ledger, rd: RoundData, p: PointData, rate: Value, reference_clock: Value) -> RawSources:
    """Point P's inputs of the engine step its fullest prefill makes at the prefill RATE measured
    alone (at the SM clock REFERENCE_CLOCK)."""
    raw = RawSources()
    raw.add("model_config", *model_config_raw(rd))
    raw.add("modelled_input_len", modelled_lengths(led, rd, p)[0])
    raw.add("prefill_flop_rate", rate)
    raw.add("reference_clock_mhz", reference_clock)
    return raw
