"""Round plans: what a round runs, read strictly from TOML (or built from ad-hoc flags).

A plan names the engine, the workload, the sweep, the samplers and the client processes
([client]: how many worker processes drive a point; docs/scale.md). Points are the cross
product of the server-flag sets, input lengths, and concurrencies (or request rates), in that
nesting order, so that the server restarts only when its flags change.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import resource
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from bench import replay, sessions
from bench.lengths import check_dist, longest
from bench.prompts import (  # noqa: F401 - PlanError re-exported
    MAX_TOKENS,
    PlanError,
    read_prompt_file,
)
from bench.urls import check_endpoint, check_endpoints_differ
from bundle.cost import CostError, cost_from_dict
from bundle.expect import MAX_PLAN_FILE_BYTES, ExpectError, expect_from_dict
from bundle.slo import SloError, slo_from_dict
from bundle.textfile import read_toml_file


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
    title: str = ""
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


def _build(cls, data: dict[str, Any], where: str):
    names = {f.name: f for f in fields(cls)}
    unknown = set(data) - set(names)
    if unknown:
        raise PlanError(f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(names)}")
    obj = cls()
    for k, v in data.items():
        default = getattr(obj, k)
        if isinstance(default, bool) and not isinstance(v, bool):
            raise PlanError(f"{where}.{k}: expected true/false, got {v!r}")
        if isinstance(default, (int, float)) and not isinstance(default, bool):
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise PlanError(f"{where}.{k}: expected a number, got {v!r}")
            if not math.isfinite(v):
                raise PlanError(f"{where}.{k}: expected a finite number, got {v!r}")
            if isinstance(default, int) and not isinstance(v, int):
                raise PlanError(f"{where}.{k}: expected a whole number, got {v!r}")
        if isinstance(default, list) and not isinstance(v, list):
            raise PlanError(f"{where}.{k}: expected a list, got {v!r}")
        setattr(obj, k, v)
    return obj


# The element types of a plan's list and table keys; _build checks scalars and that a list is
# a list, check_plan_types the rest, so a wrong element ("input_len = ['a']") fails here.
ELEMENT_TYPES: dict[tuple[str, str], tuple[type, ...]] = {
    ("engine", "flags"): (str,), ("engine", "env"): (str,),
    ("engine", "endpoints"): (str,), ("engine", "commands"): (str,),
    ("sweep", "concurrency"): (int,), ("sweep", "input_len"): (int,),
    ("sweep", "request_rate"): (int, float), ("sweep", "server_flags"): (list,),
    ("client", "cpu_affinity"): (int,),
}
TOP_TYPES: dict[str, tuple[type, ...]] = {"id": (str,), "title": (str,), "seed": (int,)}


def _what(types: tuple[type, ...]) -> str:
    return {int: "an integer", float: "a number", str: "a string", list: "a list"}[types[-1]]


def _is(value, types: tuple[type, ...]) -> bool:
    return isinstance(value, types) and not (isinstance(value, bool) and bool not in types)


def check_plan_types(data: dict[str, Any], path: str) -> None:
    """Refuse a plan value of the wrong type, naming the file and key."""
    for key, types in TOP_TYPES.items():
        if key in data and not _is(data[key], types):
            raise PlanError(f"{path}: {key} must be {_what(types)}, got {data[key]!r}")
    for section, cls in SECTIONS.items():
        table = data.get(section)
        if not isinstance(table, dict):
            continue  # load_plan says it must be a table
        defaults = cls()
        for key, value in table.items():
            if not hasattr(defaults, key):
                continue  # load_plan names unknown keys
            default, where = getattr(defaults, key), f"{path} [{section}].{key}"
            if isinstance(default, str) and not isinstance(value, str):
                raise PlanError(f"{where}: expected a string, got {value!r}")
            if isinstance(default, dict):
                if not isinstance(value, dict):
                    raise PlanError(f"{where}: expected a table, got {value!r}")
                value = list(value.values())
            types = ELEMENT_TYPES.get((section, key))
            if types and isinstance(value, list):
                for x in value:
                    if not _is(x, types):
                        raise PlanError(f"{where}: {x!r} is not {_what(types)}")
                    if key == "server_flags" and not all(isinstance(f, str) for f in x):
                        raise PlanError(f"{where}: every flag must be a string, got {x!r}")


def plan_from_dict(data: dict[str, Any], source: str = "plan") -> Plan:
    """Validate a parsed plan strictly: a typo'd key is an error naming the file and key."""
    unknown = set(data) - TOP_KEYS - set(SECTIONS) - {"expect", "slo", "cost"}
    if unknown:
        raise PlanError(f"{source}: unknown key(s) {sorted(unknown)}; known: "
                        f"{sorted(TOP_KEYS | set(SECTIONS) | {'expect', 'slo', 'cost'})}")
    check_plan_types(data, source)
    plan = Plan(source=source)
    for k in TOP_KEYS & set(data):
        setattr(plan, k, data[k])
    for name, cls in SECTIONS.items():
        if name in data:
            if not isinstance(data[name], dict):
                raise PlanError(f"{source}: [{name}] must be a table")
            setattr(plan, name, _build(cls, data[name], f"{source} [{name}]"))
    replay.resolve_paths(plan.workload, source)
    if plan.sweep.request_rate and "concurrency" not in (data.get("sweep") or {}):
        plan.sweep.concurrency = []      # an open loop without a cap: nothing waits for a slot
    if "expect" in data:
        try:
            plan.expect = expect_from_dict(data["expect"], source)
        except ExpectError as e:
            raise PlanError(str(e)) from None
    if "slo" in data:
        try:
            plan.slo = slo_from_dict(data["slo"], source).to_dict()
        except SloError as e:
            raise PlanError(str(e)) from None
    if "cost" in data:
        try:
            plan.cost = cost_from_dict(data["cost"], source).to_dict()
        except CostError as e:
            raise PlanError(str(e)) from None
    check_plan(plan)
    return plan


# Bounds of the numeric keys: (section, key) -> (lowest, highest, lowest allowed itself).
BOUNDS: dict[tuple[str, str], tuple[float, float, bool]] = {
    ("engine", "startup_timeout_s"): (0, 7 * 86400, False),
    ("engine", "port"): (0, 65535, True),
    ("workload", "input_len"): (1, MAX_TOKENS, True),
    ("workload", "output_len"): (1, MAX_TOKENS, True),
    ("workload", "prefix_len"): (0, MAX_TOKENS, True),
    ("workload", "num_prefixes"): (1, 1 << 20, True),
    ("workload", "turns"): (1, 1 << 10, True),
    ("workload", "think_ms"): (0, sessions.MAX_THINK_MS, True),
    ("workload", "token_id_low"): (0, MAX_TOKENS, True),
    ("workload", "time_scale"): (0, 10**6, False),
    ("workload", "max_requests"): (0, 10**9, True),
    ("workload", "max_duration_s"): (0, 10**9, True),
    ("workload", "num_prompts"): (0, 10**9, True),
    ("workload", "token_id_high"): (1, MAX_TOKENS, True),
    ("sweep", "burstiness"): (0, 1000, False),
    ("sweep", "search_max"): (1, MAX_TOKENS, True),
    ("sweep", "requests_per_point"): (0, 10**9, True),
    ("sweep", "duration_s"): (0, 7 * 86400, True),
    ("sweep", "warmup_requests"): (-1, 10**9, True),
    ("sweep", "warmup_s"): (0, 7 * 86400, True),
    ("sweep", "cooldown_s"): (0, 3600, True),
    ("sweep", "ramp_s"): (0, 3600, True),
    # a scrape takes ~10 ms of the server's time; below 0.1 s the sampler would load the server
    ("sampler", "metrics_interval_s"): (0.1, 3600, True),
    ("sampler", "gpu_interval_s"): (0.1, 3600, True),
    ("client", "workers"): (1, 1024, True),
    ("client", "nodes"): (0, 4096, True),
    ("client", "workers_per_node"): (1, 1024, True),
    ("client", "first_byte_timeout_s"): (0, 7 * 86400, False),
    ("client", "idle_timeout_s"): (0, 7 * 86400, False),
    ("client", "request_timeout_s"): (0, 7 * 86400, False),
}
LIST_BOUNDS: dict[tuple[str, str], tuple[float, float, bool]] = {
    ("sweep", "concurrency"): (1, MAX_TOKENS, True),   # bounded by check_capacity
    ("sweep", "input_len"): (1, MAX_TOKENS, True),
    ("sweep", "request_rate"): (0, 10**6, False),
    ("client", "cpu_affinity"): (0, 1 << 16, True),
}
WHOLE_LISTS = {("sweep", "concurrency"), ("sweep", "input_len"), ("client", "cpu_affinity")}
# Client memory per prompt token held in a point's prompt pool (a Python int in a list, and
# its share of the request's JSON), and per open-loop arrival time.
PROMPT_TOKEN_BYTES = 48
ARRIVAL_BYTES = 32
# Client memory per byte of a prompt file or dataset a point reads whole: the bytes read, their
# text (up to 4 bytes a character once one character needs them) and what is parsed from it (a
# token id written in 6 bytes of JSON is a 36-byte Python int and pointer).
FILE_BYTE_BYTES = 8
OPEN_FILES_RESERVED = 64   # log, bundle streams, pipes: file descriptors besides connections


def _bounded(value, bounds: tuple[float, float, bool], where: str) -> None:
    low, high, closed = bounds
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PlanError(f"{where}: expected a finite number, got {value!r}")
    if value > high or value < low or (value == low and not closed):
        lo = f"from {low:,}" if closed else f"above {low:,}"
        raise PlanError(f"{where}: {value!r} is out of range ({lo} up to {high:,})")


def warmup_seconds(sweep: SweepSpec, rate: float) -> float:
    """How long an open loop at RATE req/s may warm up: the plan's warmup_s, else the point's
    own window (its duration, or its requests' worth of arrivals)."""
    if sweep.warmup_s > 0:
        return sweep.warmup_s
    return sweep.duration_s if sweep.duration_s > 0 else max(sweep.requests_per_point, 1) / rate


def warmup_count(sweep: SweepSpec, concurrency: int | None, rate: float | None = None) -> int:
    """Warm-up requests of a point: the plan's count; else in a closed loop one per stream (a
    request lifetime each); in an open loop the arrivals of warmup_seconds, at most one per
    slot of its cap (sized by load and by time: never the cap's worth at a slow rate)."""
    if sweep.warmup_requests >= 0:
        return sweep.warmup_requests
    if not rate:
        return concurrency or 1
    n = max(1, math.ceil(rate * warmup_seconds(sweep, rate) - 1e-9))
    return min(n, concurrency) if concurrency else n


def warmup_ends_at_first_reply(sweep: SweepSpec, rate: float | None) -> bool:
    """Whether a point's warm-up also ends when its first warm-up request ends (a request's
    lifetime): an open loop whose plan sets neither warmup_requests nor warmup_s."""
    return bool(rate) and sweep.warmup_requests < 0 and sweep.warmup_s <= 0


def prompt_pool_size(sweep: SweepSpec, concurrency: int, rate: float | None = None) -> int:
    """Prompts a point draws before it starts (each load process holds them all)."""
    warmup = warmup_count(sweep, concurrency, rate)
    if sweep.duration_s > 0:
        return min(warmup + 10**9, 4096)
    return warmup + max(sweep.requests_per_point, 1)


def host_memory_bytes() -> int:
    """Physical memory of this host."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def available_memory_bytes() -> int | None:
    """Memory this host can give a new process without swapping (/proc/meminfo's MemAvailable),
    None where the kernel does not say."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f.read(1 << 16).decode("ascii", "replace").splitlines():
                if line.startswith("MemAvailable:"):
                    kib = line.split()[1]
                    return int(kib) * 1024 if kib.isdigit() else None
    except OSError:
        return None
    return None


def _size(n: float) -> str:
    """N bytes in GiB, or in MiB under a tenth of one."""
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 / 10 else f"{n / 2**20:,.1f} MiB"


def client_memory_budget() -> tuple[int, str]:
    """The client memory a point may need before it sends, and that bound in words: half of this
    host's memory, or what it has available now where that is less."""
    half = host_memory_bytes() // 2
    avail = available_memory_bytes()
    if avail is not None and avail < half:
        return avail, f"the {_size(avail)} this host has available (MemAvailable)"
    return half, f"half of this host's {_size(2 * half)}"


def open_files_limit() -> int:
    """The most files (sockets included) this process may raise its limit to."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return hard if hard != resource.RLIM_INFINITY else 1 << 20


def _file_bytes(path: str) -> int:
    """The size of the file at PATH, 0 when it cannot be read (its reader refuses it in words)."""
    try:
        return os.stat(path).st_size
    except (OSError, ValueError):
        return 0


def client_memory_parts(plan: Plan, point: dict[str, Any]) -> list[tuple[int, str]]:
    """What a point's client holds before its first request, each part (bytes, in words): its
    prompt pool (a trace's every kept prompt, a drawn length at its longest), a shared-prefix
    workload's prefixes, a sessions workload's histories, a prompt file or dataset read whole
    and an open loop's arrival schedule; once per load process."""
    s, w = plan.sweep, plan.workload
    C = point.get("concurrency") or 1
    procs = plan.client.workers
    parts: list[tuple[int, str]] = []
    if w.kind == replay.TRACE:
        tokens = sum(r.input_len for r in replay.load_trace(w).requests)
        parts.append((tokens * PROMPT_TOKEN_BYTES * procs, f"a trace's {tokens:,} prompt tokens"))
    elif w.kind in ("jsonl", replay.SHAREGPT):
        path = w.jsonl if w.kind == "jsonl" else w.dataset
        size = _file_bytes(path)
        parts.append((size * FILE_BYTE_BYTES * procs,
                      f"its {'prompt file' if w.kind == 'jsonl' else 'dataset'} of {size / 2**20:,.1f} MiB "
                      f"read whole, about {FILE_BYTE_BYTES} bytes held a byte"))
    else:
        n, each = prompt_pool_size(s, point.get("concurrency") if point.get("request_rate") else C,
                                   point.get("request_rate")), longest(w.input_dist, point["input_len"])
        if w.kind == "shared-prefix":
            # every prefix is drawn, however few prompts use it; a prompt keeps one token of its own
            prefixes = max(1, w.num_prefixes) * w.prefix_len
            parts.append((prefixes * PROMPT_TOKEN_BYTES * procs,
                          f"{max(1, w.num_prefixes):,} shared prefixes of {w.prefix_len:,} tokens"))
            each = max(each, w.prefix_len + 1)
        parts.append((n * each * PROMPT_TOKEN_BYTES * procs,
                      f"a pool of {n:,} prompts of up to {each:,} tokens"))
        if w.kind == sessions.KIND:
            longest_in, _ = sessions.longest_prompt(w, point["input_len"], w.output_len)
            parts.append((C * longest_in * PROMPT_TOKEN_BYTES * procs,
                          f"{C:,} users' histories of up to {longest_in:,} tokens"))
    rate = point.get("request_rate")
    if rate:
        n = (int(rate * s.duration_s) if s.duration_s > 0 else s.requests_per_point)
        parts.append(((n + warmup_count(s, point.get("concurrency"), rate)) * ARRIVAL_BYTES, f"{n:,} scheduled arrivals"))
    return parts


def client_memory_bytes(plan: Plan, point: dict[str, Any]) -> int:
    """Client memory a point needs before its first request (client_memory_parts, summed)."""
    return sum(b for b, _ in client_memory_parts(plan, point))


def check_capacity(plan: Plan, points: list[dict[str, Any]]) -> None:
    """Refuse points this host cannot hold: client memory over half of RAM (or over what it has
    available), too many sockets."""
    src = plan.source or "plan"
    budget, bound = client_memory_budget()
    for p in points:
        parts = client_memory_parts(plan, p)
        need = sum(b for b, _ in parts)
        if need > budget:
            what = ", ".join(f"{words} ({_size(b)})"
                             for b, words in sorted(parts, key=lambda x: -x[0]) if b)
            per = f" (each of {plan.client.workers} load processes holds its own)" if plan.client.workers > 1 else ""
            raise PlanError(
                f"{src}: point {p['id']} needs about {_size(need)} of client memory "
                f"before it sends a request: {what}{per}; over {bound}; lower input_len, "
                "concurrency, requests_per_point, prefix_len or num_prefixes, or use a smaller file")
    streams = max((p.get("concurrency") or 1) for p in points)
    per_process = -(-streams // plan.client.workers)
    limit = open_files_limit() - OPEN_FILES_RESERVED
    if per_process > limit:
        raise PlanError(f"{src} [sweep].concurrency: {streams} requests in flight need "
                        f"{per_process} connections per client process, over the {limit} this "
                        "host allows a process (ulimit -Hn, less files of its own); raise the "
                        "limit or use more [client].workers")


def check_search(plan: Plan) -> None:
    """Refuse a search sweep the search cannot run: it needs an SLO, one length, one server
    set and a closed loop to search over."""
    src, s = plan.source or "plan", plan.sweep
    if not s.search:
        return
    if s.search != "slo":
        raise PlanError(f"{src} [sweep].search: {s.search!r} is not \"slo\" (or empty)")
    if not plan.slo:
        raise PlanError(f"{src} [sweep].search: \"slo\" searches for the load that meets the "
                        "plan's [slo]; the plan has none")
    for key, n in (("input_len", len(s.input_len)), ("server_flags", len(s.server_flags)),
                   ("concurrency", len(s.concurrency))):
        if n > 1:
            raise PlanError(f"{src} [sweep].{key}: a search sweep runs one value (the "
                            f"concurrency it starts from); this plan gives {n}")
    if s.request_rate:
        raise PlanError(f"{src} [sweep].request_rate: a search sweep searches concurrency in a "
                        "closed loop; drop request_rate")
    if s.search_max < s.concurrency[0]:
        raise PlanError(f"{src} [sweep].search_max: {s.search_max} is below the concurrency the "
                        f"search starts from ({s.concurrency[0]})")
    if not 0 < s.search_tolerance < 1:
        raise PlanError(f"{src} [sweep].search_tolerance: {s.search_tolerance:g} is not between "
                        "0 and 1")


def check_endpoints(e: EngineSpec, src: str) -> None:
    """Refuse an engine table whose endpoints and commands do not name one server each."""
    if e.endpoints and e.endpoint:
        raise PlanError(f"{src} [engine].endpoints: give `endpoint` (one server) or `endpoints` "
                        "(several), not both")
    if e.commands and e.command:
        raise PlanError(f"{src} [engine].commands: give `command` (one server) or `commands` "
                        "(several), not both")
    if e.endpoints and len(e.endpoints) < 2:
        raise PlanError(f"{src} [engine].endpoints: {len(e.endpoints)} given; one server is "
                        "`endpoint`, `endpoints` names two or more")
    key = "endpoints" if e.endpoints else "endpoint"
    if e.mode != "embedded":
        for url in e.all_endpoints():
            check_endpoint(url, f"{src} [engine].{key}")
    check_endpoints_differ(e.endpoints, f"{src} [engine].endpoints")
    if e.endpoints and e.mode == "embedded":
        raise PlanError(f"{src} [engine].endpoints: the embedded engine is one server; several "
                        "endpoints need launch or endpoint mode")
    if e.mode in ("launch", "endpoint") and not e.all_endpoints():
        raise PlanError(f"{src} [engine].endpoint: required in {e.mode} mode")
    if e.mode == "launch" and not e.all_commands():
        raise PlanError(f"{src} [engine].command: required in launch mode")
    if e.commands and e.mode != "launch":
        raise PlanError(f"{src} [engine].commands: read only in launch mode")
    if e.mode == "launch" and len(e.all_commands()) != len(e.all_endpoints()):
        raise PlanError(f"{src} [engine].commands: {len(e.all_commands())} command line(s) for "
                        f"{len(e.all_endpoints())} endpoints; launch mode starts one server per endpoint")


def flags_problem(plan: Plan, where: str) -> str | None:
    """Why PLAN's server flags cannot reach a server (in endpoint mode the server already runs,
    started elsewhere), led by WHERE, None when they can or it has none: flags recorded but not
    applied would make the bundle say what did not run."""
    e, sets = plan.engine, [f for f in plan.sweep.server_flags if f]
    if e.mode != "endpoint" or not (sets or e.flags):
        return None
    key, what = (("[sweep].server_flags", f"{len(plan.sweep.server_flags)} server-flag sets") if sets
                 else ("[engine].flags", f"the flags {e.flags!r:.60}"))
    return (f"{where} {key}: {what} in endpoint mode, where the server already runs and no flag "
            "reaches it; start each set with launch mode, or drop them")


def check_plan(plan: Plan) -> None:
    """Refuse settings no run could honour, naming the key: before anything starts."""
    src = plan.source or "plan"
    e, w, s = plan.engine, plan.workload, plan.sweep
    sections = {"engine": e, "workload": w, "sweep": s, "sampler": plan.sampler,
                "client": plan.client}
    if not isinstance(plan.seed, int) or isinstance(plan.seed, bool):
        raise PlanError(f"{src}: seed must be an integer, got {plan.seed!r}")
    for (section, key), bounds in BOUNDS.items():
        _bounded(getattr(sections[section], key), bounds, f"{src} [{section}].{key}")
    for (section, key), bounds in LIST_BOUNDS.items():
        values = getattr(sections[section], key)
        if not isinstance(values, list):
            raise PlanError(f"{src} [{section}].{key}: expected a list, got {values!r}")
        for v in values:
            if (section, key) in WHOLE_LISTS and not isinstance(v, int):
                raise PlanError(f"{src} [{section}].{key}: {v!r} is not a whole number")
            _bounded(v, bounds, f"{src} [{section}].{key}")
    if e.mode not in ("embedded", "launch", "endpoint"):
        raise PlanError(f"{src} [engine].mode: {e.mode!r} is not embedded, launch or endpoint")
    check_endpoints(e, src)
    if w.kind not in ("random", "shared-prefix", "jsonl", sessions.KIND, *replay.KINDS):
        raise PlanError(f"{src} [workload].kind: {w.kind!r} is not random, shared-prefix, jsonl, "
                        "sessions, trace or sharegpt")
    if w.kind == sessions.KIND:
        sessions.check_sessions(w, src, plan.client.workers, s.duration_s)
    check_ray(plan.client, src, w.kind == sessions.KIND)
    if w.kind in replay.KINDS:
        replay.check_replay(w, s, src)
    elif w.trace or w.dataset:
        raise PlanError(f"{src} [workload].{'trace' if w.trace else 'dataset'}: read only by "
                        "kind = \"trace\" or \"sharegpt\"")
    if w.api not in ("completions", "chat"):
        raise PlanError(f"{src} [workload].api: {w.api!r} is not completions or chat")
    if w.kind == "jsonl":
        check_prompt_file(w.jsonl, f"{src} [workload].jsonl")
    if w.kind == "shared-prefix":
        for L in s.input_len or [w.input_len]:
            if not 0 < w.prefix_len < L:
                raise PlanError(f"{src} [workload].prefix_len: {w.prefix_len} is not between 1 "
                                f"and input_len - 1 (input_len {L})")
    gm = plan.sampler.gpu_metrics
    if gm and not re.match(r"https?://[^/\s]+", gm):
        raise PlanError(f"{src} [sampler].gpu_metrics: {gm!r} is not an http(s) URL of an exporter's page")
    for key in ("input_dist", "output_dist"):
        if getattr(w, key):
            check_dist(getattr(w, key), f"{src} [workload.{key}]")
    for key in ("input_dist", "output_dist"):
        if getattr(w, key) and w.kind == "jsonl":
            raise PlanError(f"{src} [workload.{key}]: a jsonl workload's prompts have their own lengths")
    if w.token_id_low >= w.token_id_high:
        raise PlanError(f"{src} [workload].token_id_low: {w.token_id_low} is not below "
                        f"token_id_high {w.token_id_high} (ids are drawn from [low, high))")
    if w.chunk_token_counts not in ("usage", "token_ids", "none"):
        raise PlanError(f"{src} [workload].chunk_token_counts: usage, token_ids or none")
    if s.arrival not in ("closed", "poisson", "gamma"):
        raise PlanError(f"{src} [sweep].arrival: {s.arrival!r} is not closed, poisson or gamma")
    if s.arrival != "closed" and not s.request_rate:
        raise PlanError(f"{src} [sweep].request_rate: required for open-loop arrival")
    if not s.concurrency and not s.request_rate:
        raise PlanError(f"{src} [sweep].concurrency: at least one value")
    # Settings the points would not honour are refused, not recorded as if they ran.
    if s.request_rate and s.arrival == "closed":
        raise PlanError(f"{src} [sweep].arrival: \"closed\" contradicts request_rate (an open loop "
                        "sends at its arrival times); give arrival poisson or gamma, or drop "
                        "request_rate")
    if s.burstiness != 1.0 and s.arrival != "gamma":
        raise PlanError(f"{src} [sweep].burstiness: {s.burstiness:g} shapes gamma arrivals only; "
                        f"with arrival {s.arrival!r} it would be recorded and not used")
    if s.ramp_s and s.request_rate:
        raise PlanError(f"{src} [sweep].ramp_s: spreads a closed loop's streams; an open loop "
                        "sends at its arrival times, so it would be recorded and not used")
    if s.warmup_s > 0 and s.warmup_requests >= 0:
        raise PlanError(f"{src} [sweep].warmup_s: the warm-up is given as {s.warmup_requests} requests "
                        "(warmup_requests) and as a time; give one of them")
    if s.warmup_s > 0 and w.kind == replay.TRACE:
        raise PlanError(f"{src} [sweep].warmup_s: a trace warms up with warmup_requests of its own "
                        "requests, so it would be recorded and not used")
    if s.requests_per_point < 1 and s.duration_s <= 0:
        raise PlanError(f"{src} [sweep].requests_per_point: {s.requests_per_point} requests; "
                        "a point needs at least 1 (or a positive duration_s)")
    if not s.server_flags or not all(isinstance(f, list) for f in s.server_flags):
        raise PlanError(f"{src} [sweep].server_flags: a list of flag lists, e.g. [[], [\"--x\"]]")
    twice = next(((i, j) for j, b in enumerate(s.server_flags) for i, a in enumerate(s.server_flags[:j])
                  if a == b), None)
    if twice:
        raise PlanError(f"{src} [sweep].server_flags: sets {twice[0]} and {twice[1]} are the same "
                        f"flags ({s.server_flags[twice[1]]!r:.80}); their points would be compared as "
                        "if the server differed")
    problem = flags_problem(plan, src)
    if problem:
        raise PlanError(problem)
    check_search(plan)
    points = plan.points()
    stray = sorted(set(plan.expect) - {p["id"] for p in points})
    if stray:
        raise PlanError(f"{src} [expect]: no point has the id(s) {stray}; the plan's points: "
                        f"{[p['id'] for p in points]}")
    check_capacity(plan, points)


MAX_PLAN_BYTES = MAX_PLAN_FILE_BYTES


def check_prompt_file(path: str, where: str) -> None:
    """Refuse a JSONL prompt file that is missing, not UTF-8 or too large, before the round."""
    if not path:
        raise PlanError(f"{where}: required for kind = \"jsonl\"")
    read_prompt_file(path, 1, where)


def load_plan(path: str | Path) -> Plan:
    """Read a plan.toml; raise PlanError naming the file (and line) on any problem."""
    path = Path(path)
    if not path.exists():
        raise PlanError(f"{path}: no such plan file")
    data = read_toml_file(path, str(path), MAX_PLAN_BYTES, PlanError)
    return plan_from_dict(data, source=str(path))


def context_problem(plan: Plan, points: list[dict[str, Any]], max_model_len: Any,
                    tokenizer_dir: str | None = None) -> str | None:
    """Why POINTS cannot run on a server whose context holds MAX_MODEL_LEN tokens (what its
    /v1/models says), None when they can or the length is not known: a request's prompt and
    the tokens it asks for must fit (a dataset's lengths by the tokenizer in TOKENIZER_DIR)."""
    if not isinstance(max_model_len, int) or isinstance(max_model_len, bool) or max_model_len < 1:
        return None
    wl = plan.workload
    if wl.kind in replay.KINDS:
        n_in, n_out = replay.longest_request(wl, tokenizer_dir)
        need = n_in + n_out
        what = f"a request of {n_in:,} prompt tokens and {n_out:,} output tokens"
        where = f"[workload].{'trace' if wl.kind == replay.TRACE else 'dataset'} {wl.trace or wl.dataset}"
    elif wl.kind == "jsonl":
        prompts = read_prompt_file(wl.jsonl, wl.output_len)
        worst = max(prompts, key=lambda p: (p.input_len or 0) + p.max_tokens)
        need = (worst.input_len or 0) + worst.max_tokens
        what = (f"a prompt of {worst.input_len:,} tokens asking for {worst.max_tokens:,}"
                if worst.input_len else f"a prompt asking for {worst.max_tokens:,} tokens")
        where = f"[workload].jsonl {wl.jsonl}"
    else:
        if not points:
            return None
        # The longest each length distribution can draw (the nominal lengths where none is given).
        def longest_of(p):
            if wl.kind == sessions.KIND:
                return sessions.longest_prompt(wl, p["input_len"], p["output_len"])
            return longest(wl.input_dist, p["input_len"]), longest(wl.output_dist, p["output_len"])
        worst = max(points, key=lambda p: sum(longest_of(p)))
        n_in, n_out = longest_of(worst)
        need = n_in + n_out
        what = f"point {worst['id']}: {n_in:,} prompt tokens and {n_out:,} output tokens"
        where = plan.source or "plan"
    if need <= max_model_len:
        return None
    return (f"{where}: {what} make {need:,}, over the served model's max_model_len of "
            f"{max_model_len:,} (its /v1/models); shorten them or serve a longer context. "
            "No point of this server was run")


def usable_cpus() -> set[int]:
    """The CPUs this process may run on."""
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:      # not Linux
        return set(range(os.cpu_count() or 1))


def check_ray(c: ClientSpec, src: str, sessions_workload: bool) -> None:
    """Refuse [client] Ray keys no run could honour, naming the key."""
    if not c.ray:
        for key, default in (("nodes", 0), ("workers_per_node", 1)):
            if getattr(c, key) != default:
                raise PlanError(f"{src} [client].{key}: needs [client].ray (a Ray cluster's "
                                "address, or \"auto\")")
        return
    if not re.fullmatch(r"auto|(ray://)?[A-Za-z0-9.\-\[\]:]+:[0-9]{1,5}", c.ray):
        raise PlanError(f"{src} [client].ray: {c.ray!r} is not \"auto\", host:port or "
                        "ray://host:port")
    if c.workers != 1:
        raise PlanError(f"{src} [client].workers: with [client].ray the load is spread over "
                        "nodes × workers_per_node; leave workers at 1")
    if c.cpu_affinity:
        raise PlanError(f"{src} [client].cpu_affinity: pins this host's worker processes; with "
                        "[client].ray the workers run on the cluster's nodes")
    if sessions_workload:
        raise PlanError(f"{src} [client].ray: a sessions workload runs in one client process")


def affinity_problem(plan: Plan) -> str | None:
    """Why the plan's worker CPUs cannot be used on this host, None when they can: checked
    before a round starts (a plan may come from a larger host)."""
    bad = sorted(set(plan.client.cpu_affinity) - usable_cpus())
    if not bad:
        return None
    return (f"{plan.source or 'plan'} [client].cpu_affinity: CPU {', '.join(map(str, bad))} is not "
            f"one this process may use here ({', '.join(map(str, sorted(usable_cpus())))})")


# Plan keys that may differ when a round is resumed: where the plan file lies, its title and
# expectations, and where the engine listens; anything else changes what the points measure.
RESUME_FREE = {("source",), ("title",), ("expect",), ("slo",), ("cost",), ("engine", "endpoint"), ("engine", "port"),
               ("engine", "endpoints")}
# Plan keys a later version added, with the value that means what a plan without them ran.
ADDED_KEYS = {("engine", "endpoints"): [], ("engine", "commands"): [], ("client", "ray"): "",
              ("client", "nodes"): 0, ("client", "workers_per_node"): 1, ("sweep", "warmup_s"): 0.0}


def resume_problem(recorded: dict[str, Any], now: dict[str, Any]) -> str | None:
    """Why the plan NOW (as the manifest would record it) cannot continue a bundle recorded
    with the plan RECORDED, None when it can: every point of one bundle runs one workload, on as
    many servers, and a search sweep's points were chosen by one SLO."""
    def servers(plan: dict[str, Any]) -> int:
        return len((plan.get("engine") or {}).get("endpoints") or []) or 1
    if servers(recorded) != servers(now):
        return (f"--resume: the bundle was recorded against {servers(recorded)} server(s) and is given "
                f"{servers(now)} now; its engines' samples would not add up (record a new round)")
    if (recorded.get("sweep") or {}).get("search") and recorded.get("slo") != now.get("slo"):
        return (f"--resume: [slo] was {recorded.get('slo')!r:.80} when the search chose its points "
                f"and is {now.get('slo')!r:.80} now; a search continues under the SLO it started with")
    for section in sorted(set(recorded) | set(now)):
        a, b = recorded.get(section), now.get(section)
        if (section,) in RESUME_FREE or a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b)):
                was = a.get(key, ADDED_KEYS.get((section, key)))
                if (section, key) not in RESUME_FREE and was != b.get(key):
                    return (f"--resume: [{section}].{key} was {a.get(key)!r:.80} when the bundle "
                            f"was recorded and is {b.get(key)!r:.80} now; a resumed round runs "
                            "the plan it started with (record the change as a new round)")
            continue
        return (f"--resume: {section} was {a!r:.80} when the bundle was recorded and is "
                f"{b!r:.80} now; a resumed round runs the plan it started with")
    return None
