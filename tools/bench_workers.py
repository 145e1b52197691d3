"""How the client's throughput scales with client worker processes (`bench run --workers N`).

For each N it runs a real one-point round, `python -m serving_ledger run --workers N` at concurrency C
for `--seconds` of measured time, against K stand-in servers sharing one port (SO_REUSEPORT,
`python -m bench.standin --reuse-port`), and prints per N:

- tok/s: output tokens whose chunk arrived inside [measure, measure + seconds], over seconds
  (read from the bundle's request files, the shards included);
- ideal: C streams x one token per stand-in step (1000 / step_ms tok/s each), what a client
  that keeps up would receive (a little less in practice: a stream idles about one step
  between its requests);
- client CPU: CPU seconds of the round's process and its children (the workers) over the same
  window, in cores; server CPU likewise for the K stand-ins (near K: the servers are the limit);
- scale: tok/s(N) / tok/s(1), against the target 0.8 x N.

With a fixed C (the default) one process is far behind at N = 1, so each of its socket reads
carries many events and costs less per token than a worker that keeps up: the ratio then
understates what the workers add. `--streams-per-worker S` (C = S x N) instead gives every
worker the same load at every N, which isolates the cost of coordination.

The windows of tokens and CPU agree to within the polling interval (0.1 s). Clients and
servers should not share cores: on a 16-core host
    .venv/bin/python tools/bench_workers.py --client-cpus 0-7 --server-cpus 8-15
pins worker k to client CPU k (the round's coordinator may use any client CPU) and stand-in j
to server CPU j. `--quick` is a small configuration that proves the tool works on 2 cores;
its numbers say nothing about scaling. Stand-in numbers are never a published result.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POLL_S = 0.1


def cpu_list(text: str) -> list[int]:
    """CPU numbers from "0-7", "0,2,4" or "0-3,8-11"."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            out.extend(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected CPU numbers like 0-7 or 0,2,4, got {text!r}") from None
    return out


def int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def prepare(cpus: list[int] | None):
    """A preexec_fn: pin to CPUS (if given) and allow as many sockets as the hard limit."""
    def fn() -> None:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        if cpus:
            os.sched_setaffinity(0, set(cpus))
    return fn


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of PID so far (0 when gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def runq_wait_seconds(pid: int) -> float:
    """Seconds PID's threads have spent runnable but waiting for a CPU so far (schedstat; 0
    when gone): what the host's other work took from it."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            total += int((task / "schedstat").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        pass
    return total / 1e9


def children_of(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d.name))
            except (OSError, ValueError, IndexError):
                pass
    return out


def tree_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of PID and each of its children, by pid."""
    return {p: cpu_seconds(p) for p in [pid] + children_of(pid)}


def used(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds spent between two samples by the processes alive at both."""
    return sum(after[p] - before.get(p, 0.0) for p in after if p in before)


def free_port() -> int:
    sys.path.insert(0, str(ROOT))
    from bench.engine import free_port as fp
    return fp()


def start_servers(k: int, cpus: list[int], step_ms: float) -> tuple[list[subprocess.Popen], str]:
    """K stand-ins on one port (SO_REUSEPORT), stand-in j pinned to cpus[j % len] if given."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    procs = []
    for j in range(k):
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "bench.standin", "--port", str(port), "--step-ms", str(step_ms),
             "--reuse-port"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            preexec_fn=prepare([cpus[j % len(cpus)]] if cpus else None)))
    for p in procs:
        line = p.stdout.readline()
        if "listening" not in line:
            stop_servers(procs)
            raise SystemExit(f"a stand-in did not start: {line}{p.stdout.read()[-2000:]}")
    with urllib.request.urlopen(url + "/health", timeout=5) as r:
        assert r.status == 200
    return procs, url


def stop_servers(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def point_events(out: Path) -> dict[str, float]:
    p = out / "points.jsonl"
    if not p.exists():
        return {}
    ev = {}
    for line in p.read_text().splitlines():
        if line.endswith("}"):
            e = json.loads(line)
            if e.get("point"):
                ev[e["event"]] = e["t"]
    return ev


def request_files(out: Path) -> list[Path]:
    """The bundle's request files: requests.jsonl and the workers' shards, plain or gzip."""
    return sorted(p for p in out.iterdir() if p.name.startswith("requests")
                  and (p.name.endswith(".jsonl") or p.name.endswith(".jsonl.gz")))


def window_tokens(out: Path, t_from: float, t_to: float) -> tuple[int, int, int]:
    """(tokens in chunks arriving in [t_from, t_to], requests, failed requests) of a bundle."""
    tokens = n = errors = 0
    for path in request_files(out):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            for line in f:
                if not line.endswith("\n"):
                    continue
                r = json.loads(line)
                n += 1
                errors += r["status"] != "ok"
                tokens += sum(k or 0 for t, k in r["chunks"] if t_from <= t <= t_to)
    return tokens, n, errors


def ray_pids(out: Path) -> list[int]:
    """The processes of a Ray round's workers (its manifest lists them), none for a local one."""
    try:
        m = json.loads((out / "manifest.json").read_text())
    except (OSError, ValueError):
        return []
    return [w["pid"] for w in (m.get("ray") or {}).get("workers", [])]


def client_cpu(pid: int, out: Path) -> dict[int, float]:
    """CPU seconds of the round's process, its children and its Ray workers, by pid."""
    return {**tree_cpu(pid), **{p: cpu_seconds(p) for p in ray_pids(out)}}


def run_one(n: int, args, url: str, servers: list[subprocess.Popen], work: Path,
            client: str | None = None, tag: str = "") -> dict:
    """One round at N workers; its throughput and CPU over the measured window. CLIENT: the
    plan's [client] table (default: N local worker processes); TAG names its files."""
    streams = args.streams_per_worker * n if args.streams_per_worker else args.streams
    name = tag or str(n)
    if client is None:
        client = f"workers = {n}\ncpu_affinity = {json.dumps(args.client_cpus or [])}"
    plan = work / f"plan-{name}.toml"
    plan.write_text(f"""
[workload]
input_len = 16
output_len = {args.output_len}
[sweep]
concurrency = [{streams}]
duration_s = {args.seconds}
cooldown_s = 0
[sampler]
metrics = false
gpu = false
[client]
{client}
""")
    out = work / f"bundle-{name}"
    log = open(work / f"round-{name}.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "serving_ledger", "run", "--plan", str(plan),
                             "--endpoint", url, "--out", str(out)], cwd=ROOT, stdout=log,
                            stderr=subprocess.STDOUT, preexec_fn=prepare(args.client_cpus))
    c0 = s0 = w0 = t0 = seen = None
    c1 = s1 = w1 = t1 = None
    try:
        limit = time.monotonic() + args.seconds + 300
        while proc.poll() is None:
            if time.monotonic() > limit:
                proc.kill()
                raise SystemExit(f"the round at N={n} ran past its time; see {work}/round-{name}.log")
            ev = point_events(out)
            # A Ray round writes its measure event when the point ends: its CPU window starts
            # when the workers start, half a second (RAY_LEAD_S) after the start event.
            ray_started = "start" in ev and ray_pids(out)
            if ray_started and seen is None:
                seen = time.monotonic()
            if c0 is None and ("measure" in ev or ray_started and time.monotonic() - seen >= 0.5):
                t0, c0 = time.monotonic(), client_cpu(proc.pid, out)
                s0 = {p.pid: cpu_seconds(p.pid) for p in servers}
                w0 = {p.pid: runq_wait_seconds(p.pid) for p in servers}
            if c0 is not None and c1 is None and time.monotonic() - t0 >= args.seconds:
                t1, c1 = time.monotonic(), client_cpu(proc.pid, out)
                s1 = {p.pid: cpu_seconds(p.pid) for p in servers}
                w1 = {p.pid: runq_wait_seconds(p.pid) for p in servers}
            time.sleep(POLL_S)
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    if proc.returncode != 0 or c1 is None:
        raise SystemExit(f"the round at N={n} failed (exit {proc.returncode}): "
                         + (work / f"round-{name}.log").read_text()[-2000:])
    ev = point_events(out)
    tokens, requests, errors = window_tokens(out, ev["measure"], ev["measure"] + args.seconds)
    return {"workers": n, "streams": streams, "ideal": streams * 1000.0 / args.step_ms,
            "tok_s": tokens / args.seconds, "requests": requests, "errors": errors,
            "client_cores": used(c0, c1) / (t1 - t0),
            "coordinator_cores": (c1[proc.pid] - c0[proc.pid]) / (t1 - t0) if n > 1 else None,
            "server_cores": used(s0, s1) / (t1 - t0),
            # Per server: the share of the window it was runnable and got no CPU.
            "server_wait": max(w1[p] - w0[p] for p in w1) / (t1 - t0)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="a small run that proves the tool works (N = 1, 2; 64 streams; 3 s)")
    ap.add_argument("--workers", type=int_list, default=None, help="client worker counts (1,2,4,8)")
    ap.add_argument("--streams", type=int, default=None, help="concurrent streams C (4000)")
    ap.add_argument("--streams-per-worker", type=int, default=None,
                    help="instead of --streams: C = this x N (the same load per worker)")
    ap.add_argument("--servers", type=int, default=None,
                    help="stand-in processes K (default: one per --server-cpus CPU, else 1)")
    ap.add_argument("--client-cpus", type=cpu_list, default=None, help="e.g. 0-7")
    ap.add_argument("--server-cpus", type=cpu_list, default=None, help="e.g. 8-15")
    ap.add_argument("--step-ms", type=float, default=None, help="stand-in decode step (5 ms)")
    ap.add_argument("--output-len", type=int, default=None, help="tokens per request (400)")
    ap.add_argument("--seconds", type=float, default=None, help="measured seconds per round (20)")
    ap.add_argument("--json", help="also write the rows as JSON to this path")
    ap.add_argument("--keep", action="store_true", help="keep the bundles (printed path)")
    args = ap.parse_args(argv)
    quick = {"workers": [1, 2], "streams": 64, "step_ms": 10.0, "output_len": 50, "seconds": 3.0}
    full = {"workers": [1, 2, 4, 8], "streams": 4000, "step_ms": 5.0, "output_len": 400,
            "seconds": 20.0}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    k = args.servers or (len(args.server_cpus) if args.server_cpus else 1)
    work = Path(tempfile.mkdtemp(prefix="bench-workers-"))
    load = (f"C = {args.streams_per_worker} x N streams" if args.streams_per_worker
            else f"C = {args.streams} streams")
    print(f"{load}, {k} stand-in process(es), step {args.step_ms:g} ms, "
          f"output {args.output_len} tokens, {args.seconds:g} s measured; client CPUs "
          f"{args.client_cpus or 'any'}, server CPUs {args.server_cpus or 'any'}", flush=True)
    servers, url = start_servers(k, args.server_cpus or [], args.step_ms)
    rows = []
    try:
        for n in args.workers:
            rows.append(run_one(n, args, url, servers, work))
            r = rows[-1]
            coord = (f" (coordinator {r['coordinator_cores']:.2f})"
                     if r["coordinator_cores"] is not None else "")
            print(f"  N={n}: {r['tok_s']:,.0f} tok/s, client {r['client_cores']:.2f} cores{coord}, "
                  f"server {r['server_cores']:.2f} cores, {r['errors']} errors", flush=True)
    finally:
        stop_servers(servers)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    base = next((r["tok_s"] for r in rows if r["workers"] == 1), None)
    print()
    print(f"{'N':>3} {'C':>6} {'tok/s':>11} {'ideal':>11} {'of ideal':>8} {'client CPU':>11} "
          f"{'server CPU':>11} {'scale':>6} {'target':>7}  verdict")
    for r in rows:
        n, ideal = r["workers"], r["ideal"]
        scale = r["tok_s"] / base if base else float("nan")
        target = 0.8 * n
        r.update(scale=scale, target=target)
        if n == 1 or base is None:
            verdict = "baseline"
        elif scale >= target:
            verdict = "meets"
        elif 0.8 * n * base > 0.9 * ideal:
            verdict = "ideal-limited (raise --streams or lower --step-ms)"
        elif r["server_cores"] > 0.9 * k:
            verdict = "server-limited (more --server-cpus)"
        else:
            verdict = "below target"
        r["verdict"] = verdict
        print(f"{n:>3} {r['streams']:>6} {r['tok_s']:>11,.0f} {ideal:>11,.0f} {r['tok_s'] / ideal:>8.0%} "
              f"{r['client_cores']:>7.2f} cores {r['server_cores']:>5.2f} cores "
              f"{scale:>6.2f} {target:>7.1f}  {verdict}")
    if args.keep:
        print(f"\nbundles and round logs: {work}")
    if args.json:
        Path(args.json).write_text(json.dumps({"streams": args.streams,
                                               "streams_per_worker": args.streams_per_worker,
                                               "servers": k,
                                               "step_ms": args.step_ms, "rows": rows}, indent=1))
    if args.quick:
        print("\n(--quick: proves the tool works; its numbers say nothing about scaling)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
