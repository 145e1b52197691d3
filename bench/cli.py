"""`serving-ledger run` (`python -m bench run`): run a round from a plan file or from ad-hoc flags."""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import signal
import sys
from pathlib import Path

from bench.engine import EngineError
from bench.plan.budget import OPEN_FILES_RESERVED, open_files_limit
from bench.plan.checks import check_plan
from bench.plan.parse import load_plan
from bench.plan.spec import Plan, SamplerSpec, SweepSpec, WorkloadSpec
from bench.prompts import PlanError
from bench.urls import check_endpoint, check_endpoints_differ
from bundle.files import BundleError
from bundle.redact import API_KEY_ENV, SECRET_MIN_LEN
from bundle.textsafety import terminal_line


def int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError(f"expected at least one integer, got {text!r}")
    return values


def float_list(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError(f"expected at least one number, got {text!r}")
    return values


def add_run_arguments(r: argparse.ArgumentParser) -> None:
    """The flags of `serving-ledger run`."""
    r.add_argument("--plan", help="a round plan (TOML); ad-hoc flags below override its sweep")
    r.add_argument("--endpoint", action="append",
                   help="use a server already running at this URL; give it again for each "
                        "further server of a data-parallel round (requests go to them in turn)")
    r.add_argument("--launch", action="append",
                   help="start this server command line instead of the embedded engine (needs "
                        "--endpoint for where it will listen); once per --endpoint for several")
    r.add_argument("--server-flags", default="", help="extra engine flags, one string")
    r.add_argument("--model-config", help="the served model's config.json (or its directory), "
                                          "for a server started elsewhere")
    r.add_argument("--concurrency", type=int_list)
    r.add_argument("--request-rate", type=float_list, help="open loop: requests per second")
    r.add_argument("--arrival", choices=("closed", "poisson", "gamma"))
    r.add_argument("--burstiness", type=float)
    r.add_argument("--input-len", type=int_list, help="one length, or a comma list to sweep")
    r.add_argument("--output-len", type=int)
    r.add_argument("--requests-per-point", type=int)
    r.add_argument("--duration", type=float, help="seconds per point instead of a request count")
    r.add_argument("--warmup", type=int, help="warm-up requests per point (default: one per closed-loop "
                                              "stream; an open loop's sized to its rate and window)")
    r.add_argument("--warmup-s", type=float, help="warm-up time per point in seconds (default: at most "
                                                  "the point's window)")
    r.add_argument("--ramp", type=float, help="closed loop: start the C streams spread over this "
                                              "many seconds (requests sent before its end are warm-up)")
    r.add_argument("--metrics-interval", type=float)
    r.add_argument("--gpu-metrics", metavar="URL", help="an NVIDIA DCGM exporter's page "
                   "(http://gpu-host:9400/metrics): the server's GPUs when they are on another host")
    r.add_argument("--api", choices=("completions", "chat"))
    r.add_argument("--seed", type=int)
    r.add_argument("--workers", type=int, help="client processes that generate a point's load "
                                               "(default 1: one process)")
    r.add_argument("--worker-cpus", type=int_list,
                   help="pin client worker k to CPU N[k %% len]: comma-separated CPU numbers")
    r.add_argument("--ray", metavar="ADDRESS", help="generate the load from a Ray cluster's nodes: "
                   "\"auto\", host:port or ray://host:port (pip install 'serving-ledger[ray]')")
    r.add_argument("--nodes", type=int, help="with --ray: client nodes (default: every node alive)")
    r.add_argument("--workers-per-node", type=int, help="with --ray: workers per node (default 1)")
    r.add_argument("--out", required=True, help="bundle directory to create")
    r.add_argument("--resume", action="store_true", help="run only the points still missing")


def plan_from_args(args: argparse.Namespace) -> Plan:
    """The plan file (if any) with the ad-hoc flags applied on top."""
    plan = load_plan(args.plan) if args.plan else Plan(workload=WorkloadSpec(), sweep=SweepSpec(),
                                                      sampler=SamplerSpec())
    w, s = plan.workload, plan.sweep
    # Flags that contradict each other are refused before anything starts (what the bundle
    # records is what ran).
    if args.request_rate is not None and args.arrival == "closed":
        raise PlanError("--arrival closed contradicts --request-rate (an open loop); give "
                        "--arrival poisson or gamma, or drop --request-rate")
    if args.concurrency is not None and args.request_rate is None and args.arrival in ("poisson", "gamma") \
            and not s.request_rate:
        raise PlanError(f"--arrival {args.arrival}: an open loop needs --request-rate")
    if args.launch:
        if not args.endpoint:
            raise PlanError("--launch needs --endpoint (the URL the launched server listens on)")
        if len(args.launch) != len(args.endpoint):
            raise PlanError(f"--launch: {len(args.launch)} command line(s) for {len(args.endpoint)} "
                            "--endpoint(s); give one --launch per --endpoint, in the same order")
        e, several = plan.engine, len(args.launch) > 1
        e.mode = "launch"
        e.command, e.endpoint = ("", "") if several else (args.launch[0], args.endpoint[0])
        e.commands, e.endpoints = (list(args.launch), list(args.endpoint)) if several else ([], [])
    if args.model_config is not None:
        plan.engine.model_config = args.model_config
    if args.server_flags:
        try:
            plan.engine.flags = plan.engine.flags + shlex.split(args.server_flags)
        except ValueError as e:     # an unclosed quote, a lone escape
            raise PlanError(f"--server-flags: {args.server_flags!r:.80} is not a command line ({e})") from None
    if args.concurrency is not None:
        s.concurrency = args.concurrency
    if args.request_rate is not None:
        s.request_rate = args.request_rate
        s.arrival = args.arrival or "poisson"
        if args.concurrency is None and not args.plan:
            s.concurrency = []           # no cap on the requests in flight
    elif args.arrival:
        s.arrival = args.arrival
    if args.burstiness is not None:
        s.burstiness = args.burstiness
    if args.input_len is not None:
        if len(args.input_len) == 1:
            w.input_len, s.input_len = args.input_len[0], []
        else:
            s.input_len = args.input_len
    if args.output_len is not None:
        w.output_len = args.output_len
    if args.requests_per_point is not None:
        s.requests_per_point = args.requests_per_point
    if args.duration is not None:
        s.duration_s = args.duration
    if args.ramp is not None:
        s.ramp_s = args.ramp
    if args.warmup is not None:
        s.warmup_requests = args.warmup
    if args.warmup_s is not None:
        s.warmup_s = args.warmup_s
    if args.metrics_interval is not None:
        plan.sampler.metrics_interval_s = args.metrics_interval
    if args.gpu_metrics is not None:
        plan.sampler.gpu_metrics = args.gpu_metrics
    if args.api:
        w.api = args.api
    if args.seed is not None:
        plan.seed = args.seed
    if args.workers is not None:
        plan.client.workers = args.workers
    if args.worker_cpus is not None:
        plan.client.cpu_affinity = args.worker_cpus
    for flag in ("ray", "nodes", "workers_per_node"):
        if getattr(args, flag) is not None:
            setattr(plan.client, flag, getattr(args, flag))
    # Flags that change the points (a concurrency, an input length) leave expectations behind
    # that name points no longer run: they go with them.
    ids = {p["id"] for p in plan.points()}
    plan.expect = {pid: e for pid, e in plan.expect.items() if pid in ids}
    try:
        check_plan(plan)
    except PlanError as e:
        raise PlanError(name_the_flag(str(e), args)) from None
    if args.endpoint:
        for url in args.endpoint:
            check_endpoint(url, "--endpoint")
        check_endpoints_differ(args.endpoint, "--endpoint")
    return plan


# The plan key each ad-hoc flag sets (argparse dest -> key as check_plan names it).
FLAG_KEYS = {
    "concurrency": "[sweep].concurrency", "request_rate": "[sweep].request_rate",
    "burstiness": "[sweep].burstiness", "input_len": "].input_len",
    "output_len": "[workload].output_len", "requests_per_point": "[sweep].requests_per_point",
    "duration": "[sweep].duration_s", "ramp": "[sweep].ramp_s", "warmup": "[sweep].warmup_requests",
    "warmup_s": "[sweep].warmup_s",
    "metrics_interval": "[sampler].metrics_interval_s", "gpu_metrics": "[sampler].gpu_metrics",
    "seed": "seed",
    "workers": "[client].workers", "worker_cpus": "[client].cpu_affinity",
    "ray": "[client].ray", "nodes": "[client].nodes", "workers_per_node": "[client].workers_per_node",
}


def name_the_flag(message: str, args: argparse.Namespace) -> str:
    """MESSAGE about a plan key, led by the flag that set the key when a flag did."""
    for dest, key in FLAG_KEYS.items():
        if getattr(args, dest, None) is not None and key in message:
            return f"--{dest.replace('_', '-')}: {message}"
    return message


def raise_open_files_limit(plan: Plan) -> None:
    """Let this process open a connection per request in flight (check_plan bounds the need)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # An uncapped open loop holds as many connections as requests are in flight: all it may.
    need = (max(plan.sweep.concurrency) + OPEN_FILES_RESERVED if plan.sweep.concurrency
            else open_files_limit())
    if soft != resource.RLIM_INFINITY and soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard) if hard != resource.RLIM_INFINITY
                                                    else need, hard))


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def api_key_problem(key: str | None) -> str | None:
    """Why KEY cannot be sent as a bearer token and kept out of the bundle, or None."""
    if key is None:
        return None
    if any(ord(c) < 0x20 or ord(c) == 0x7f for c in key):
        return "contains a control character (CR, LF, tab...); an HTTP header cannot carry it"
    if not key.isascii():
        return "contains a character outside ASCII; an HTTP header cannot carry it"
    if len(key) < SECRET_MIN_LEN and (key.isalpha() or key.isdigit()):
        return (f"{key.isalpha() and 'a word' or 'a number'} of {len(key)} characters; a key under "
                f"{SECRET_MIN_LEN} characters is removed from the bundle wherever it stands as a whole "
                "token, and a plain word or number is also data there (a status \"ok\", a count); "
                "use a longer key or one that mixes letters with digits or symbols")
    return None


def run(args: argparse.Namespace, judge=None) -> int:
    """`serving-ledger run`: record a round; 0 when it ran, 2 for bad input, 1 when it failed.
    JUDGE (bench.runner.Judge) says whether a point met the SLO, for a search sweep."""
    from bench.runner import RoundFailed, run_round
    try:
        plan = plan_from_args(args)
    except PlanError as e:
        print(terminal_line(f"error: {e}"), file=sys.stderr)
        return 2
    key = os.environ.get(API_KEY_ENV)
    problem = api_key_problem(key)
    if problem:
        print(f"error: {API_KEY_ENV}: {problem}", file=sys.stderr)
        return 2
    from bench.plan.checks import affinity_problem
    problem = affinity_problem(plan)
    if problem:
        print(f"error: {name_the_flag(problem, args)}", file=sys.stderr)
        return 2
    if plan.client.ray:
        from bench.ray_cluster import INSTALL_HINT, ray_installed, reachable
        problem = INSTALL_HINT if not ray_installed() else reachable(plan.client.ray)
        if problem:
            # Refused before a bundle exists: Ray would retry an absent cluster for minutes.
            print(f"error: {name_the_flag('[client].ray: ' + problem, args)}", file=sys.stderr)
            return 2
    raise_open_files_limit(plan)
    # SIGTERM is handled like Ctrl-C: flush, mark the bundle interrupted, stop the engine.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    out = Path(args.out)
    try:
        override = None if args.launch or not args.endpoint else (
            args.endpoint[0] if len(args.endpoint) == 1 else args.endpoint)
        status = run_round(plan, out, endpoint_override=override,
                           resume=args.resume, api_key=key, judge=judge)
    except KeyboardInterrupt:
        print(f"\ninterrupted; what was recorded is kept in {out} "
              f"(continue with --resume)", file=sys.stderr)
        return 130
    except (PlanError, BundleError, EngineError, RoundFailed) as e:
        print(terminal_line(f"error: {e}"), file=sys.stderr)
        return 2 if isinstance(e, (PlanError, BundleError)) else 1
    except OSError as e:  # --out not writable, a launch command that does not exist
        where = f"{e.filename}: " if e.filename else ""
        print(f"error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    print(f"bundle: {out} ({status})")
    return 0
