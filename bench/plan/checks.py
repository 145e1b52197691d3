"""What a plan must hold before a round starts: bounds, endpoints, flags, lengths, CPUs."""

from __future__ import annotations

import math
import os
import re
from typing import Any

from bench import replay, sessions
from bench.lengths import check_dist, longest
from bench.plan.budget import check_capacity
from bench.plan.spec import ClientSpec, EngineSpec, Plan
from bench.prompts import (
    MAX_TOKENS,
    PlanError,
    read_prompt_file,
)
from bench.urls import check_endpoint, check_endpoints_differ

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
def _bounded(value, bounds: tuple[float, float, bool], where: str) -> None:
    low, high, closed = bounds
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PlanError(f"{where}: expected a finite number, got {value!r}")
    if value > high or value < low or (value == low and not closed):
        lo = f"from {low:,}" if closed else f"above {low:,}"
        raise PlanError(f"{where}: {value!r} is out of range ({lo} up to {high:,})")


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


def check_prompt_file(path: str, where: str) -> None:
    """Refuse a JSONL prompt file that is missing, not UTF-8 or too large, before the round."""
    if not path:
        raise PlanError(f"{where}: required for kind = \"jsonl\"")
    read_prompt_file(path, 1, where)


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
