"""The overhead of the Ray path: aggregate rate through N Ray nodes against N local workers.

For each N it starts a Ray cluster of N nodes on this host (bench/ray_local.py: N `ray start`
nodes on 127.0.0.1) and runs the same one-point round against the same stand-in server(s)
(tools/bench_workers.py's rounds, stand-ins and windows) in `--repeat` alternating pairs:
with N local worker processes (`[client] workers = N`; N = 1 is the single in-process
client), then through the cluster, one worker per node (`[client] ray = ..., nodes = N`).
It prints per N the medians of the tokens/s each received in its measured window and of the
client CPU (the round's process, its children and its Ray workers; not the Ray daemons), and
the median of the pairs' ratios Ray / local against the target 0.95. Alternating pairs share
whatever else the host is doing at the time; the load average before and after is printed,
and per round how long the stand-in was runnable but got no CPU (its threads' run-queue wait,
/proc/PID/task/*/schedstat): where that differs between the two rounds of a pair, the ratio
says how the host's other work fell on each, not what the Ray path costs.

Every round gives each worker the same load (`--streams-per-worker`), so the ratio isolates
what the Ray path costs: clock probes, orders and shards through the cluster, an actor's
thread instead of a process of its own. On a host with fewer cores than N workers plus the
stand-ins plus Ray's own daemons (gcs, raylets: about 0.1 core each when idle) both sides
share the cores and the ratio says how the two paths degrade together, not how they scale;
`--quick` proves the tool works. Stand-in numbers are never a published result.

    .venv/bin/python tools/bench_ray.py --nodes 1,2,4
    .venv/bin/python tools/bench_ray.py --quick
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench_workers as BW  # noqa: E402

from bench.ray_local import LocalCluster  # noqa: E402

TARGET = 0.95       # the Ray path within 5 % of the same number of local workers


def us_per_token(r: dict) -> float:
    """Client CPU microseconds per token received in a round's window."""
    return 1e6 * r["client_cores"] / r["tok_s"] if r["tok_s"] else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="N = 1, 2 and a short window")
    ap.add_argument("--nodes", type=BW.int_list, default=None, help="node counts (1,2,4)")
    ap.add_argument("--streams-per-worker", type=int, default=None, help="streams per worker (32)")
    ap.add_argument("--servers", type=int, default=1, help="stand-in processes sharing one port")
    ap.add_argument("--step-ms", type=float, default=None, help="stand-in decode step (10 ms)")
    ap.add_argument("--output-len", type=int, default=None, help="tokens per request (100)")
    ap.add_argument("--seconds", type=float, default=None, help="measured seconds per round (8)")
    ap.add_argument("--repeat", type=int, default=None, help="alternating local/Ray pairs per N (3)")
    ap.add_argument("--json", help="also write the rows as JSON to this path")
    ap.add_argument("--keep", action="store_true", help="keep the bundles (printed path)")
    args = ap.parse_args(argv)
    quick = {"nodes": [1, 2], "streams_per_worker": 16, "step_ms": 10.0, "output_len": 50,
             "seconds": 3.0, "repeat": 1}
    full = {"nodes": [1, 2, 4], "streams_per_worker": 32, "step_ms": 10.0, "output_len": 100,
            "seconds": 8.0, "repeat": 3}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    # What bench_workers.run_one reads of its arguments.
    args.streams, args.client_cpus = None, None
    work = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    print(f"C = {args.streams_per_worker} x N streams, {args.servers} stand-in(s), step "
          f"{args.step_ms:g} ms, output {args.output_len} tokens, {args.seconds:g} s measured",
          flush=True)
    servers, url = BW.start_servers(args.servers, [], args.step_ms)
    load = os.getloadavg()
    rows = []
    try:
        for n in args.nodes:
            # The cluster stays up through the local rounds too: its idle daemons cost both sides.
            with LocalCluster(nodes=n, cpus=1) as cluster:
                pairs = []
                for rep in range(args.repeat):
                    local = BW.run_one(n, args, url, servers, work, tag=f"local-{n}-{rep}")
                    ray = BW.run_one(n, args, url, servers, work, tag=f"ray-{n}-{rep}",
                                     client=f'ray = "{cluster.address}"\nnodes = {n}')
                    pairs.append({"local": local, "ray": ray, "ratio": ray["tok_s"] / local["tok_s"]})
                    print(f"  N={n} #{rep + 1}: local {local['tok_s']:,.0f} tok/s (client "
                          f"{local['client_cores']:.2f}, server {local['server_cores']:.2f} cores, "
                          f"server waited {local['server_wait']:.2f} s/s), Ray {ray['tok_s']:,.0f} "
                          f"tok/s (client {ray['client_cores']:.2f}, server {ray['server_cores']:.2f} "
                          f"cores, server waited {ray['server_wait']:.2f} s/s), errors "
                          f"{local['errors']}/{ray['errors']}", flush=True)
            rows.append({"n": n, "pairs": pairs,
                         "local": median([p["local"]["tok_s"] for p in pairs]),
                         "ray": median([p["ray"]["tok_s"] for p in pairs]),
                         "local_cores": median([p["local"]["client_cores"] for p in pairs]),
                         "ray_cores": median([p["ray"]["client_cores"] for p in pairs]),
                         "local_us": median([us_per_token(p["local"]) for p in pairs]),
                         "ray_us": median([us_per_token(p["ray"]) for p in pairs]),
                         "local_wait": median([p["local"]["server_wait"] for p in pairs]),
                         "ray_wait": median([p["ray"]["server_wait"] for p in pairs]),
                         "ratio": median([p["ratio"] for p in pairs]),
                         "streams": pairs[0]["local"]["streams"], "ideal": pairs[0]["local"]["ideal"]})
    finally:
        BW.stop_servers(servers)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print(f"{'N':>3} {'C':>5} {'ideal':>9} {'local tok/s':>12} {'Ray tok/s':>10} "
          f"{'local CPU':>10} {'Ray CPU':>8} {'us/tok':>11} {'server wait':>11} "
          f"{'Ray/local':>9}  target {TARGET}")
    for r in rows:
        r["meets"] = r["ratio"] >= TARGET
        print(f"{r['n']:>3} {r['streams']:>5} {r['ideal']:>9,.0f} {r['local']:>12,.0f} "
              f"{r['ray']:>10,.0f} {r['local_cores']:>10.2f} {r['ray_cores']:>8.2f} "
              f"{r['local_us']:>5.1f}/{r['ray_us']:<5.1f} {r['local_wait']:>5.2f}/{r['ray_wait']:<5.2f} "
              f"{r['ratio']:>9.3f}  {'meets' if r['meets'] else 'below'}")
    print(f"(medians of {args.repeat} alternating pairs; us/tok: client CPU per token, local/Ray; "
          f"server wait: seconds per second the stand-in was runnable without a CPU, local/Ray; "
          f"Ray/local is the median of the pairs' ratios; host load average {load[0]:.1f} before, {os.getloadavg()[0]:.1f} after, on "
          f"{os.cpu_count()} cores)")
    if args.keep:
        print(f"\nbundles and round logs: {work}")
    if args.json:
        Path(args.json).write_text(json.dumps({"streams_per_worker": args.streams_per_worker,
                                               "servers": args.servers, "step_ms": args.step_ms,
                                               "rows": rows}, indent=1))
    if args.quick:
        print("\n(--quick: proves the tool works; its numbers say nothing about overhead)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
