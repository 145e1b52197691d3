"""A bundle read for the report: its points and windows, the server log's facts, the SLO and the cost, the points each phase selects."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from bundle.cost import Cost, CostError, cost_from_dict, cost_of_file
from bundle.files import run_dir
from bundle.peers import PeerResult, external_dir, read_peer_files, round_peer_files
from bundle.request_table.table import RequestTable
from bundle.slo import Slo, SloError, slo_from_dict, slo_of_file
from bundle.store.reader import Bundle
from report.derive import peers as PR
from report.derive.gpu import dcgm as DC
from report.derive.gpu import power as PW
from report.derive.load import inflight as LI
from report.derive.series import scrapes as S
from report.derive.serverlog import ServerLogFacts, server_log_facts
from report.derive.stats import requests as ST
from report.ledger import Ledger, Reason

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


def load_of(p: PointData) -> float | None:
    """The load a point was run at: its arrival rate in an open loop, else its concurrency."""
    return p.settings.get("request_rate") or p.settings.get("concurrency")


def server_sets(rd: RoundData) -> dict[int, tuple[float, float]]:
    """Each server set's span on the bundle's clock: its first point's start to its last point's end."""
    out: dict[int, tuple[float, float]] = {}
    for p in rd.points:
        s = p.settings.get("server_set") or 0
        a, b = out.get(s, (p.window.t_start, p.window.t_end))
        out[s] = (min(a, p.window.t_start), max(b, p.window.t_end))
    return out


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


def modelled_lengths(led: Ledger, rd: RoundData, p: PointData) -> tuple[Any, Any]:
    """The prompt and output lengths the KV, theory and MFU sections model at point P: the
    means of its requests' own (as their usage reports them) where the workload varies them,
    else the plan's for the point."""
    if not rd.lengths_vary:
        return p.settings.get("input_len"), p.settings.get("output_len")
    k = f"p.{p.pid}."
    return led[k + "prompt_tokens_sent_mean"], led[k + "output_tokens_sent_mean"]


def ok_points(rd: RoundData) -> list[PointData]:
    """The round's points measured to the end (status `ok`), in run order."""
    return [p for p in rd.points if p.window.status == "ok"]


def valid_points(rd: RoundData, validity: Mapping[str, Any]) -> list[PointData]:
    """Points measured to the end whose validity checks all passed (VALIDITY: each point's, see
    report.judge.diagnosis; a point it does not hold counts as valid)."""
    return [p for p in ok_points(rd) if p.pid not in validity or validity[p.pid].valid]


def prefill_reference(pts: list[PointData], replayed_trace: bool = False) -> PointData | None:
    """The point the round's prefill rate is measured at: its first valid closed-loop C=1 point of PTS (None where none)."""
    # A replayed trace is an open loop whatever concurrency its settings carry: no prompt ran alone.
    return next((p for p in pts if not LI.open_loop(p.settings, replayed_trace)
                 and p.settings.get("concurrency") == 1), None)
