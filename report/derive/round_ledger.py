"""Compose a round's ledger from its bundle: every number the report prints is derived here.

Keys: `p.<point>.<quantity>` per point, `r.<quantity>` per round, `x.<quantity>` for
comparisons with other rounds. Values come only from `Ledger.derive` (a pure function over
raw samples or other values) or `Ledger.record` (a setting or count read from a bundle).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from bundle.cost import Cost, CostError, cost_from_dict, cost_of_file
from bundle.files import run_dir
from bundle.peers import PeerResult, external_dir, read_peer_files, round_peer_files
from bundle.request_table import RequestTable
from bundle.slo import Slo, SloError, slo_from_dict, slo_of_file
from bundle.store import Bundle
from report.derive import delivery as DL
from report.derive import host as HO  # noqa: F401 (registers what the phases resolve)
from report.derive import peers as PR
from report.derive import prefilltail as PT
from report.derive import serverlog as SL  # noqa: F401 (registers what the phases resolve)
from report.derive import sizes as SZ  # noqa: F401 (registers what the phases resolve)
from report.derive import step as SP  # noqa: F401 (registers what the phases resolve)
from report.derive import validity as V  # noqa: F401 (registers what the phases resolve)
from report.derive.clienterror import itl as CE  # noqa: F401 (registers what the phases resolve)
from report.derive.clienterror import nodes as CN
from report.derive.gpu import across as GA  # noqa: F401 (registers what the phases resolve)
from report.derive.gpu import ceiling as GC  # noqa: F401 (registers what the phases resolve)
from report.derive.gpu import datasheet as DS
from report.derive.gpu import dcgm as DC
from report.derive.gpu import energy as EN  # noqa: F401 (registers what the phases resolve)
from report.derive.gpu import gpm as GM  # noqa: F401 (registers what the phases resolve)
from report.derive.gpu import parallel as GP  # noqa: F401 (registers what the phases resolve)
from report.derive.gpu import per_gpu as PG
from report.derive.gpu import power as PW
from report.derive.load import admission as LA  # noqa: F401 (registers what the phases resolve)
from report.derive.load import engines as LE
from report.derive.load import inflight as LI
from report.derive.phases import PHASES, Phase, module_order
from report.derive.reconcile import model as R  # noqa: F401 (registers what the phases resolve)
from report.derive.series import cache_config as CC  # noqa: F401 (registers what the phases resolve)
from report.derive.series import sampler as SM  # noqa: F401 (registers what the phases resolve)
from report.derive.series import scrapes as S
from report.derive.series import server as SV  # noqa: F401 (registers what the phases resolve)
from report.derive.serverlog import ServerLogFacts, server_log_facts
from report.derive.stats import point as STP  # noqa: F401 (registers what the phases resolve)
from report.derive.stats import requests as ST
from report.derive.stats import sessions as SES  # noqa: F401 (registers what the phases resolve)
from report.derive.sweep import concurrency as SC  # noqa: F401 (registers what the phases resolve)
from report.derive.sweep import lengths as SLN  # noqa: F401 (registers what the phases resolve)
from report.derive.timing import client as TC  # noqa: F401 (registers what the phases resolve)
from report.derive.timing import server as TS  # noqa: F401 (registers what the phases resolve)
from report.ledger import Absent, Ledger, Reason, Source, Value
from report.registry import DOES_NOT_APPLY, RawSources, resolve_across, resolve_point, resolve_round

# The steady part of a point's window used for gauge statistics (KV usage, running, waiting):
# its middle fraction, leaving out the ramp-up after the first measured request and the
# ramp-down while the last requests drain.
STEADY_FRACTION = 0.6


# Workloads whose every request brings lengths of its own (beside drawn distributions).
OWN_LENGTH_KINDS = ("sessions", "trace", "sharegpt")

@dataclass
class PointData:
    """One point's raw inputs, as read from the bundle."""

    window: ST.Window
    requests: RequestTable      # every request of the point (warm-up and failed included)
    measured: RequestTable      # non-warm-up, ok
    failed: RequestTable        # non-warm-up, error
    steady: tuple[float, float]

    @property
    def pid(self) -> str:
        return self.window.point

    @property
    def settings(self) -> dict:
        return self.window.settings


@dataclass
class RoundData:
    """A bundle read for the report: points in run order, the log's facts, the model config."""

    bundle: Bundle
    points: list[PointData]
    log: ServerLogFacts | None
    config: dict | None
    axis: str                   # "concurrency", "input_len", "server" or "single"
    # The SLO the round is judged against and where it was stated (None: no SLO, or the Reason).
    slo: Slo | Reason | None = None
    slo_source: str = ""
    # The round's id in a series of rounds ("round-4"; empty for a lone bundle).
    round_id: str = ""
    # The logs of servers 1, 2, … by file name, where several servers were launched (server 0's is `log`).
    other_logs: tuple[tuple[str, ServerLogFacts], ...] = ()
    # Each point's validity and bottleneck and the set comparisons (report.judge.verdicts.Verdicts,
    # a frozen object): None until build_ledger has judged the round, set once there.
    verdicts: Any = None
    # The GPU the server ran on as the user names it (`--gpu`), for a bundle whose client sampled
    # none (a server on another host); the bundle's own GPUs win where it has them.
    gpu_name: str = ""
    # The price per GPU-hour and target load the round is costed at and where they were stated
    # (None: none given, or the Reason its [cost] could not be read).
    cost: Cost | Reason | None = None
    cost_source: str = ""
    # Other tools' results read beside the round (bundle.peers): its external/ folder's, then
    # those `build --compare-with` named; empty where there are none.
    peers: tuple[PeerResult, ...] = ()
    # The GPU rows once read (gpu_samples): read on first use, every quantity then shares them.
    _gpu_rows: Any = field(default=None, repr=False, compare=False)
    # Each point's raw inputs once built (point_raw), by point id: every phase then shares them.
    _point_raws: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.bundle.name

    @property
    def lengths_vary(self) -> bool:
        """Whether each request has lengths of its own: drawn from distributions, read from a
        dataset or trace, or grown by a sessions workload's resent history."""
        work = (self.bundle.manifest.get("plan") or {}).get("workload") or {}
        return bool(work.get("input_dist") or work.get("output_dist")
                    or work.get("kind") in OWN_LENGTH_KINDS)

    @property
    def replayed_trace(self) -> bool:
        """Whether the round replayed a trace (an open loop whatever concurrency its settings carry)."""
        return (self.bundle.manifest.get("workload_source") or {}).get("kind") == "trace"

    @property
    def gpu_samples(self) -> list[dict]:
        """The GPU rows: NVML's on the client's host, else a DCGM exporter's (remote GPUs); read
        once, indexed by GPU (power.GpuRows)."""
        if self._gpu_rows is None:
            self._gpu_rows = PW.GpuRows(
                DC.plausible_gpu_rows(self.bundle.gpu, self.bundle.manifest.get("gpus"))
                or DC.dcgm_gpu_rows(self.bundle.dcgm))
        return self._gpu_rows

    @property
    def gpu_file(self) -> str:
        """The bundle file the GPU rows come from."""
        return self.bundle.file_for("gpu") if self.bundle.gpu or not self.bundle.dcgm else self.bundle.file_for("dcgm")

    @property
    def gpus(self) -> list[dict]:
        """The GPUs described: NVML's on the client's host, else the exporter's labels, else the one `--gpu` names."""
        return (self.bundle.manifest.get("gpus") or DC.dcgm_gpus(self.bundle.dcgm)
                or ([{"name": self.gpu_name}] if self.gpu_name else []))


def sweep_axis(points: list[PointData]) -> str:
    """Which setting varies across the points."""
    def varies(k: str) -> bool:
        return len({str(p.settings.get(k)) for p in points}) > 1
    if varies("server_set"):
        return "server"
    if varies("input_len") and not varies("concurrency"):
        return "input_len"
    if varies("concurrency") or varies("request_rate"):
        return "concurrency"
    return "single"


def read_round(bundle: Bundle, slo: tuple[Slo, str] | None = None, round_id: str = "",
               gpu_name: str = "", cost: tuple[Cost, str] | None = None,
               compare_with: tuple[str, ...] = ()) -> RoundData:
    """Split a bundle into points with their windows and requests; SLO (the Slo and where it
    was stated) overrides the round's own (round_slo); ROUND_ID names it in a series of rounds;
    COST (a Cost and where stated) overrides the keys it gives of the round's own (round_cost);
    other tools' results are read from its external/ folder and COMPARE_WITH (PeerFileError
    for one that cannot be read)."""
    reads_slo = slo is not NO_SLO
    wins = ST.point_windows(bundle.points)
    pts = []
    for w in wins.values():
        reqs = ST.requests_of_point(bundle.request_table, w)
        if w.status == ST.INTERRUPTED:
            w = ST.interrupted_window(w, reqs)
        pts.append(PointData(window=w, requests=reqs, measured=ST.measured(reqs),
                             failed=ST.failed_requests(reqs),
                             steady=S.steady_window(w.t_measure, w.t_end, STEADY_FRACTION)
                             if w.t_end > w.t_measure else (w.t_measure, w.t_end)))
    log_text = bundle.server_log()
    log = server_log_facts(log_text) if log_text else None
    config = (bundle.manifest.get("model") or {}).get("config")
    slo, slo_source = slo if slo is not None else round_slo(bundle)
    others = tuple((name, server_log_facts(text)) for name, text in bundle.other_server_logs())
    # A reader that uses no SLO (`summary`) uses no cost either: the round's slo.toml stays unread.
    own, own_source = round_cost(bundle) if reads_slo else (None, "")
    if cost is not None and not isinstance(own, Reason):
        own, own_source = cost[0].over(own), ", ".join(x for x in (cost[1], own_source) if x)
    peers = tuple(read_peer_files(round_peer_files(bundle.path, tuple(compare_with))))
    return RoundData(bundle=bundle, points=pts, log=log, config=config, axis=sweep_axis(pts),
                     slo=slo, slo_source=slo_source, round_id=round_id, other_logs=others,
                     gpu_name=gpu_name, cost=own, cost_source=own_source, peers=peers)


# read_round's SLO for a reader that uses none (`summary`): the round's own is not read, so a
# slo.toml it cannot read does not stop it.
NO_SLO = (None, "")


def slo_file_of(bundle_dir: Path) -> Path:
    """Where a round states the SLO it is judged against: slo.toml beside its bundle/."""
    return run_dir(bundle_dir) / "slo.toml"


def round_slo(bundle: Bundle) -> tuple[Slo | Reason | None, str]:
    """The round's SLO and where it is stated: its slo.toml, else its plan's [slo]; None when
    neither states one. A slo.toml that cannot be read raises SloError naming the file and field."""
    path = slo_file_of(bundle.path)
    if os.path.lexists(path):
        # Any slo.toml, a symlink, a pipe or a directory too, is read by the one reader: a
        # round judged against an SLO it states but cannot read is refused (SloError), not
        # judged against none.
        return slo_of_file(path), str(path.name)
    table = (bundle.manifest.get("plan") or {}).get("slo")
    where = f"{bundle.name}/manifest.json: plan.slo"
    if not table:
        return None, ""
    try:
        return slo_from_dict(table, where), where
    except SloError as e:
        return Reason.of("reason.slo_unreadable", problem=str(e)), where


def round_cost(bundle: Bundle) -> tuple[Cost | Reason | None, str]:
    """The round's price and target load and where stated: its slo.toml's [cost], else its
    plan's [cost]; None when neither gives one. A [cost] in slo.toml that cannot be read raises
    CostError (as its [slo] would); the plan's is a Reason."""
    path = slo_file_of(bundle.path)
    if os.path.lexists(path):
        found = cost_of_file(path)
        if found is not None:
            return found, str(path.name)
    table = (bundle.manifest.get("plan") or {}).get("cost")
    if not table:
        return None, ""
    where = f"{bundle.name}/manifest.json: plan.cost"
    try:
        return cost_from_dict(table, where), where
    except CostError as e:
        return Reason.of("reason.cost_unreadable", problem=str(e)), where


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


def _model_config_raw(rd: RoundData) -> tuple[dict | Reason, tuple[str, ...]]:
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
    raw.add("model_config", *_model_config_raw(rd))
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


def load_of(p: PointData) -> float | None:
    """The load a point was run at: its arrival rate in an open loop, else its concurrency."""
    return p.settings.get("request_rate") or p.settings.get("concurrency")


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
    raw.add("model_config", *_model_config_raw(rd))
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


def server_sets(rd: RoundData) -> dict[int, tuple[float, float]]:
    """Each server set's span on the bundle's clock: its first point's start to its last point's end."""
    out: dict[int, tuple[float, float]] = {}
    for p in rd.points:
        s = p.settings.get("server_set") or 0
        a, b = out.get(s, (p.window.t_start, p.window.t_end))
        out[s] = (min(a, p.window.t_start), max(b, p.window.t_end))
    return out


def _plan_metrics(rd: RoundData) -> bool:
    """Whether the round's plan had the /metrics sampler on."""
    return bool(((rd.bundle.manifest.get("plan") or {}).get("sampler") or {}).get("metrics", True))


def peer_id(rd: RoundData, peer: PeerResult) -> str:
    """A result's item name in every point's keys (`peer1`, `peer2`, …: its place among the round's results)."""
    return f"peer{rd.peers.index(peer) + 1}"


def peer_file(rd: RoundData, peer: PeerResult) -> str:
    """The result's file as a value cites it: under the round's external/ folder, else as it was named."""
    path = Path(peer.path)
    ext = external_dir(rd.bundle.path)
    try:
        return f"{rd.name}/external/{path.resolve().relative_to(ext.resolve())}"
    except ValueError:
        return peer.path


def peer_matches(rd: RoundData, p: PointData) -> list[PeerResult]:
    """The other tools' results that ran point P (same load and lengths: peers.peer_matches); none
    where each request brings its own lengths (a trace, a dataset, sessions, drawn lengths), whose
    settings name no one load and length another tool could have run."""
    if rd.lengths_vary:
        return []
    return [r for r in rd.peers if PR.peer_matches(r, p.settings)]


def peer_raw(rd: RoundData, p: PointData, raw: RawSources) -> None:
    """The results of other tools that ran point P into RAW: `peer_items` (item -> its result),
    each citing its own file (`peer_item_sources`)."""
    matched = peer_matches(rd, p)
    raw.add("peer_items", {peer_id(rd, r): {"peer": r} for r in matched})
    raw.add("peer_item_sources", {peer_id(rd, r): (Source.of(peer_file(rd, r), "source.peer_result",
                                                             tool=r.tool, index=r.index),)
                                  for r in matched})


def modelled_lengths(led: Ledger, rd: RoundData, p: PointData) -> tuple[Any, Any]:
    """The prompt and output lengths the KV, theory and MFU sections model at point P: the
    means of its requests' own (as their usage reports them) where the workload varies them,
    else the plan's for the point."""
    if not rd.lengths_vary:
        return p.settings.get("input_len"), p.settings.get("output_len")
    k = f"p.{p.pid}."
    return led[k + "prompt_tokens_sent_mean"], led[k + "output_tokens_sent_mean"]


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


def ok_points(rd: RoundData) -> list[PointData]:
    """The round's points measured to the end (status `ok`), in run order."""
    return [p for p in rd.points if p.window.status == "ok"]


def valid_points(rd: RoundData, validity: Mapping[str, Any]) -> list[PointData]:
    """Points measured to the end whose validity checks all passed (VALIDITY: each point's, see
    report.judge.diagnosis; a point it does not hold counts as valid)."""
    return [p for p in ok_points(rd) if p.pid not in validity or validity[p.pid].valid]


def settings_raw(p: PointData) -> RawSources:
    """The settings of point P the quantities across points read: its concurrency and whether it
    ran in a closed loop (no arrival rate)."""
    raw = RawSources()
    raw.add("concurrency", p.settings.get("concurrency"))
    raw.add("closed_loop", not p.settings.get("request_rate"))
    return raw


def prefill_reference(pts: list[PointData], replayed_trace: bool = False) -> PointData | None:
    """The point the round's prefill rate is measured at: its first valid closed-loop C=1 point of PTS (None where none)."""
    # A replayed trace is an open loop whatever concurrency its settings carry: no prompt ran alone.
    return next((p for p in pts if not LI.open_loop(p.settings, replayed_trace)
                 and p.settings.get("concurrency") == 1), None)


def prefill_tail_raw(led: Ledger, rd: RoundData, p: PointData, rate: Value, reference_clock: Value) -> RawSources:
    """Point P's inputs of the engine step its fullest prefill makes at the prefill RATE measured
    alone (at the SM clock REFERENCE_CLOCK)."""
    raw = RawSources()
    raw.add("model_config", *_model_config_raw(rd))
    raw.add("modelled_input_len", modelled_lengths(led, rd, p)[0])
    raw.add("prefill_flop_rate", rate)
    raw.add("reference_clock_mhz", reference_clock)
    return raw


def prefill_tail_points(led: Ledger, rd: RoundData, rate: Value, reference_clock: Value) -> None:
    """At each point, the engine step its fullest prefill makes at the prefill RATE measured alone
    (at the SM clock REFERENCE_CLOCK), against the measured ITL p99."""
    for p in ok_points(rd):
        resolve_point(led, PT.__name__, p.pid, prefill_tail_raw(led, rd, p, rate, reference_clock))


def _prefill_rate_raw(led: Ledger, rd: RoundData, pts: list[PointData]) -> RawSources:
    """The round's inputs of the prefill FLOP rate measured alone: its reference point's (prefill_reference) prompt and prefill."""
    ref = prefill_reference(pts, rd.replayed_trace)
    raw = RawSources()
    raw.add("model_config", *_model_config_raw(rd))
    no_ref = Reason.of("reason.no_c1_point")
    raw.add("reference_input_len", no_ref if ref is None else modelled_lengths(led, rd, ref)[0])
    raw.add("reference_prefill_ms", no_ref if ref is None else led[f"p.{ref.pid}.prefill_ms_mean"])
    return raw


# The ledger, phase by phase (report/derive/phases.py): what each phase's `points`, `when` and
# `raw` name.


@dataclass
class _Stage:
    """What the phases of one stage read: the round, its points' validity, the valid points."""

    rd: RoundData
    validity: Mapping[str, Any]
    valid: list[PointData]

    def points(self, which: str) -> list[PointData]:
        """The points a phase runs over, in load order where it says so."""
        return {"all": self.rd.points, "ok": ok_points(self.rd), "valid": self.valid,
                "valid_by_load": sorted(self.valid, key=lambda p: load_of(p) or 0)}[which]

    def holds(self, when: str) -> bool:
        """Whether a phase's condition holds for the round."""
        rd, n = self.rd, len(self.valid)
        return {"": True, "peers": bool(rd.peers), "valid_points": n > 0,
                "prefill_reference": n > 0 and rd.config is not None
                and prefill_reference(self.valid, rd.replayed_trace) is not None,
                "concurrency_axis": n > 0 and rd.axis == "concurrency",
                "concurrency_fits": n >= 2 and rd.axis == "concurrency",
                "length_fits": n >= 2 and rd.axis == "input_len"}[when]


def _point_raw_once(rd: RoundData, p: PointData) -> RawSources:
    """Point P's raw inputs (point_raw), built once per round and shared by every phase that reads them."""
    if p.pid not in rd._point_raws:
        rd._point_raws[p.pid] = point_raw(rd, p)
    return rd._point_raws[p.pid]


def _with(raw: RawSources) -> RawSources:
    return RawSources(dict(raw.values), dict(raw.sources))


def _point_phase_raw(led: Ledger, st: _Stage, kind: str, p: PointData, made: dict[str, RawSources]) -> RawSources:
    """Point P's raw inputs of KIND, each built once for the point (MADE): its point_raw; with the
    lengths the models read (`modelled`); with the other tools' results too (`peers`); its failed
    checks (`checks`); the inputs of its prefill tail (`prefill_tail_point`)."""
    if kind in made:
        return made[kind]
    rd = st.rd
    if kind == "point":
        raw = _point_raw_once(rd, p)
    elif kind == "modelled":        # the lengths the point's own quantities measured
        raw = _with(_point_raw_once(rd, p))
        modelled_raw(led, rd, p, raw)
    elif kind == "peers":
        raw = _with(_point_phase_raw(led, st, "modelled", p, made))
        peer_raw(rd, p, raw)
    elif kind == "checks":
        v, raw = st.validity[p.pid], RawSources()
        raw.add("failed_checks", tuple(v.reasons), tuple(v.evidence))
    elif kind == "prefill_tail_point":
        ref = prefill_reference(st.valid, rd.replayed_trace)
        raw = prefill_tail_raw(led, rd, p, led["r.prefill_flop_rate"], led[f"p.{ref.pid}.sm_clock_load_mhz"])
    else:
        raise ValueError(f"no point phase reads raw inputs {kind!r}")
    made[kind] = raw
    return raw


def _round_phase(led: Ledger, st: _Stage, ph: Phase, order: list[str]) -> None:
    """One phase of round quantities, or of point quantities across points, over its points; ORDER: its modules'."""
    pts = st.points(ph.points)
    pids = [p.pid for p in pts]
    if ph.raw == "settings":        # across points: each point's settings, the others' values
        raws = {p.pid: settings_raw(p) for p in ok_points(st.rd)}
        for module in order:
            resolve_across(led, module, pids, [p.pid for p in st.valid], raws)
        return
    if ph.raw == "round":           # before the points' validity: over no point
        raw, pids = round_raw(st.rd, []), []
    elif ph.raw == "valid":
        raw = round_raw(st.rd, pts)
    elif ph.raw == "prefill_tail":
        raw = _prefill_rate_raw(led, st.rd, pts)
    else:
        raise ValueError(f"no round phase reads raw inputs {ph.raw!r}")
    for module in order:
        resolve_round(led, module, pids, raw, ph.over_points)


def resolve_stage(led: Ledger, rd: RoundData, stage: str, validity: Mapping[str, Any] | None = None) -> None:
    """Every phase of STAGE (report/derive/phases.py) into LED, in the table's order, each where its
    condition holds; consecutive point phases over the same points run point after point.
    VALIDITY: each point's (report.judge.diagnosis), once the judge has found it."""
    st = _Stage(rd, validity or {}, valid_points(rd, validity or {}))
    todo = [ph for ph in PHASES if ph.stage == stage]
    order = {ph: module_order(ph) for ph in todo}
    while todo:
        ph = todo.pop(0)
        if ph.scope != "point":
            if st.holds(ph.when):
                _round_phase(led, st, ph, order[ph])
            continue
        run = [ph]
        while todo and todo[0].scope == "point" and todo[0].points == ph.points:
            run.append(todo.pop(0))
        run = [q for q in run if st.holds(q.when)]
        for p in st.points(ph.points) if run else ():
            made: dict[str, RawSources] = {}
            for q in run:
                for module in order[q]:
                    resolve_point(led, module, p.pid, _point_phase_raw(led, st, q.raw, p, made), q.after_valid_points)
