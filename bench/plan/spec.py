"""A plan's tables as dataclasses, and the points a plan runs."""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.prompts import (
    PlanError,
)


@dataclass
class EngineSpec:
    mode: str = "embedded"                 # embedded | launch | endpoint
    endpoint: str = ""                     # for launch and endpoint modes
    command: str = ""                      # for launch mode: the server command line
    flags: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    startup_timeout_s: float = 300.0
    restart_on_failure: bool = True        # launch/embedded: restart after the server dies
    model_config: str = ""                 # config.json of the served model (launch/endpoint)
    port: int = 0                          # embedded: 0 picks a free port once per round
    # Data parallel over several servers: their URLs (instead of `endpoint`), and in launch mode
    # the command line of each (instead of `command`), in the same order. Requests go to them
    # in turn; each one's /metrics is scraped on the same tick (docs/bundle.md, version 3).
    endpoints: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)

    def all_endpoints(self) -> list[str]:
        """Every endpoint the round talks to, in plan order (one, or `endpoints`)."""
        return list(self.endpoints) if self.endpoints else ([self.endpoint] if self.endpoint else [])

    def all_commands(self) -> list[str]:
        """The launch command line of each endpoint, in the same order."""
        return list(self.commands) if self.commands else ([self.command] if self.command else [])


@dataclass
class WorkloadSpec:
    kind: str = "random"                   # random | shared-prefix | jsonl | sessions | trace | sharegpt
    api: str = "completions"               # completions | chat
    input_len: int = 128
    output_len: int = 32
    ignore_eos: bool = True
    prefix_len: int = 0                    # shared-prefix: tokens shared by requests of a group
    num_prefixes: int = 1                  # shared-prefix: distinct prefixes
    jsonl: str = ""                        # jsonl: path of {"prompt": ..., "max_tokens": ...} lines
    token_id_low: int = 16                 # random token ids are drawn from [low, high)
    token_id_high: int = 4000
    per_request_metrics: bool = True       # ask for the server's own timings in the usage chunk
    chunk_token_counts: str = "usage"      # usage (continuous_usage_stats) | token_ids | none
    # Length distributions, drawn per request (bench/lengths.py); empty: the fixed lengths.
    input_dist: dict[str, Any] = field(default_factory=dict)
    output_dist: dict[str, Any] = field(default_factory=dict)
    # sessions (bench/sessions.py): turns per conversation and the think time between turns.
    turns: int = 3
    turns_dist: dict[str, Any] = field(default_factory=dict)
    think_ms: int = 0
    think_dist: dict[str, Any] = field(default_factory=dict)
    # trace (bench/replay.py): a request trace sent at its own times, scaled by time_scale.
    trace: str = ""                        # path, relative to the plan file
    format: str = ""                       # mooncake | azure
    time_scale: float = 1.0
    max_requests: int = 0                  # 0: every request of the trace
    max_duration_s: float = 0.0            # 0: the whole trace
    # sharegpt (bench/replay.py): a ShareGPT-format dataset's conversations.
    dataset: str = ""                      # path, relative to the plan file
    num_prompts: int = 0                   # 0: every conversation kept by the filters


@dataclass
class SweepSpec:
    concurrency: list[int] = field(default_factory=lambda: [1])
    input_len: list[int] = field(default_factory=list)     # empty: the workload's input_len
    request_rate: list[float] = field(default_factory=list)  # open loop (req/s); empty: closed
    # In an open loop, concurrency caps the requests in flight (its largest value); a plan that
    # gives none sets no cap.
    arrival: str = "closed"                # closed | poisson | gamma
    burstiness: float = 1.0                # gamma shape; 1.0 is Poisson
    requests_per_point: int = 16
    duration_s: float = 0.0                # >0: a point runs for this long instead of a count
    warmup_requests: int = -1              # -1: sized to the point (warmup_count)
    # The warm-up's time bound (s): an open loop warms up with at most this long's arrivals,
    # even past the point's own window; 0: at most the point's window's worth (warmup_count).
    # A closed loop also counts every request sent before it ends as warm-up.
    warmup_s: float = 0.0
    server_flags: list[list[str]] = field(default_factory=lambda: [[]])
    cooldown_s: float = 2.0                # idle gap between points: a scrape falls between them
    # closed loop: the C streams start at seeded random times over ramp_s seconds, so they do
    # not start, and then run, in lockstep waves; every request sent before the ramp ends is
    # warm-up
    ramp_s: float = 0.0
    # search = "slo": the concurrencies are chosen as the round runs (bench/search.py): from
    # the first of `concurrency`, doubled while each point meets the plan's [slo], up to
    # search_max; then bisected between the last that met it and the first that did not,
    # until they are within search_tolerance of the lower (and 1 apart at least).
    search: str = ""
    search_max: int = 1024
    search_tolerance: float = 0.1


@dataclass
class SamplerSpec:
    metrics_interval_s: float = 1.0
    gpu_interval_s: float = 1.0
    metrics: bool = True
    gpu: bool = True
    # An NVIDIA DCGM exporter's page (http://gpu-host:9400/metrics): the GPUs of a server on
    # another host, scraped on the /metrics clock into dcgm.jsonl. Empty: none.
    gpu_metrics: str = ""


@dataclass
class ClientSpec:
    workers: int = 1                       # load-generating processes per point (1: in-process)
    cpu_affinity: list[int] = field(default_factory=list)  # worker k runs on cpu_affinity[k % len]
    # Load from a Ray cluster (bench/ray_cluster.py): "auto", "host:port" or "ray://host:port";
    # empty: this host only. `nodes` client nodes (0: every node alive), each running
    # `workers_per_node` workers.
    ray: str = ""
    nodes: int = 0
    workers_per_node: int = 1
    # one load process: time each event by its own TCP segment's arrival (a packet ring) where
    # permitted; on loopback the kernel fills the ring on the server's core (~0.6 us a segment)
    packet_stamps: bool = True
    # A request fails (and its point goes on) when no response head came this long after its
    # send, when no byte came this long between two events, or when it ran this long in all:
    # generous, so a loaded server's queue and a long prefill stay inside them.
    first_byte_timeout_s: float = 600.0
    idle_timeout_s: float = 300.0
    request_timeout_s: float = 3600.0


@dataclass
class Plan:
    id: str = "adhoc"
    # The plan's own title: a string (in English), or a table by language ({en = ..., zh = ...};
    # bundle/schema.py TITLE_LANGS); each page quotes the one in its language.
    title: str | dict[str, str] = ""
    seed: int = 0
    engine: EngineSpec = field(default_factory=EngineSpec)
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    sweep: SweepSpec = field(default_factory=SweepSpec)
    sampler: SamplerSpec = field(default_factory=SamplerSpec)
    client: ClientSpec = field(default_factory=ClientSpec)
    # What a point must be judged, where the plan forces its cause (point id -> EXPECT_KEYS):
    # the truth the diagnosis conformance check holds the verdicts against.
    expect: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The service-level objective the round is judged against ([slo]; bundle/slo.py), or empty.
    slo: dict[str, float] = field(default_factory=dict)
    # The price per GPU-hour and the target load the report costs the round at ([cost];
    # bundle/cost.py), or empty (then the manifest holds no `cost`).
    cost: dict[str, float] = field(default_factory=dict)
    source: str = ""

    def search_point(self, concurrency: int) -> dict[str, Any]:
        """The settings of a search sweep's point at CONCURRENCY (its one length and server set)."""
        return self._point(0, (self.sweep.server_flags or [[]])[0],
                           (self.sweep.input_len or [self.workload.input_len])[0], concurrency, False)

    def _point(self, s: int, flags: list[str], L: int, load, open_loop: bool) -> dict[str, Any]:
        p = {"server_flags": list(flags), "server_set": s, "input_len": L,
             "output_len": self.workload.output_len, "arrival": self.sweep.arrival}
        if open_loop:
            p["request_rate"] = load
            p["concurrency"] = max(self.sweep.concurrency) if self.sweep.concurrency else None
        else:
            p["concurrency"] = load
            p["arrival"] = "closed"
            p["ramp_s"] = self.sweep.ramp_s
            p["ramp"] = "random"
        tag = f"r{load:g}" if open_loop else f"c{load}"
        p["id"] = (f"s{s}-" if len(self.sweep.server_flags) > 1 else "") + f"L{L}-{tag}"
        return p

    def points(self) -> list[dict[str, Any]]:
        """Every point's settings, in run order (a search sweep's first point only: the rest
        are chosen as it runs)."""
        if self.sweep.search:
            return [self.search_point(self.sweep.concurrency[0])] if self.sweep.concurrency else []
        lens = self.sweep.input_len or [self.workload.input_len]
        open_loop = bool(self.sweep.request_rate)
        loads = self.sweep.request_rate if open_loop else self.sweep.concurrency
        out = []
        for s, flags in enumerate(self.sweep.server_flags or [[]]):
            for L, load in itertools.product(lens, loads):
                out.append(self._point(s, flags, L, load, open_loop))
        ids = [p["id"] for p in out]
        if len(set(ids)) != len(ids):
            raise PlanError(f"{self.source or 'plan'}: two points share an id; remove duplicates")
        return out

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if not d["cost"]:
            d.pop("cost")
        return d


SECTIONS = {"engine": EngineSpec, "workload": WorkloadSpec, "sweep": SweepSpec,
            "sampler": SamplerSpec, "client": ClientSpec}
TOP_KEYS = {"id", "title", "seed"}
