"""Load from a Ray cluster: rounds through a real two-node cluster on this host's loopback.

The cluster (bench/ray_local.py: two `ray start` nodes of two logical CPUs each) is started
once for the module; rounds run as a user runs them (`python -m serving_ledger run --ray ...`)
against the stand-in server in a thread of the test process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.standin.thread import StandInThread
from bundle.store.reader import read_bundle
from tests.conftest import ROOT, run_bench

STEP_MS = 5.0


@pytest.fixture(scope="module")
def cluster():
    """Two Ray nodes on 127.0.0.1, stopped (their process groups) after the module."""
    from bench.ray_cluster import ray_installed
    from bench.ray_local import LocalCluster
    if not ray_installed():
        pytest.fail("Ray is not installed: run `make setup` (it installs the [ray] extra)")
    with LocalCluster(nodes=2, cpus=2) as c:
        yield c


def lines(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []


def plan_file(tmp_path: Path, address: str, sweep: str, output_len: int = 8) -> Path:
    p = tmp_path / "plan.toml"
    p.write_text(f"""
[workload]
input_len = 16
output_len = {output_len}
[sweep]
{sweep}
cooldown_s = 0.1
[sampler]
gpu = false
metrics_interval_s = 0.25
[client]
ray = "{address}"
nodes = 2
""")
    return p


def by_worker(out: Path) -> dict[int, list[dict]]:
    return {int(p.name.split(".")[1][1:]): lines(p) for p in sorted(out.glob("requests.w*.jsonl"))}


def test_a_round_over_two_nodes_sends_every_request_once_on_one_clock(tmp_path, cluster):
    n = 16
    st = StandInThread(step_ms=STEP_MS)
    with st as url:
        plan = plan_file(tmp_path, cluster.address, f"concurrency = [2, 4]\nrequests_per_point = {n}")
        out = tmp_path / "b"
        run_bench("run", "--plan", str(plan), "--endpoint", url, "--out", str(out), timeout=120)
    b = read_bundle(out)
    assert b.manifest["status"] == "complete"
    ray = b.manifest["ray"]
    workers = {w["worker"]: w for w in ray["workers"]}
    # One worker per node, each node a different Ray node, each shard listed with its node.
    assert sorted(workers) == [0, 1] and ray["nodes"] == 2
    assert len({w["node"] for w in workers.values()}) == 2
    assert {w["shard"] for w in workers.values()} == {"requests.w0.jsonl", "requests.w1.jsonl"}
    assert {"requests.w0", "requests.w1"} <= set(b.manifest["files"])
    shards = by_worker(out)
    reqs = [r for recs in shards.values() for r in recs]
    for pid, C in (("L16-c2", 2), ("L16-c4", 4)):
        mine = [r for r in reqs if r["point"] == pid]
        # Every request exactly once, worker k sending indices k, k+2, ...
        assert sorted(r["i"] for r in mine) == list(range(C + n))
        assert all(r["i"] % 2 == r["worker"] for r in mine)
        assert sorted(r["i"] for r in mine if r["warmup"]) == list(range(C))
    assert all(r["status"] == "ok" for r in reqs)
    # The stand-in saw exactly what the bundle holds.
    assert len(reqs) == st.server.counters["requests"] == len(b.requests)
    # Offsets measured before every point, per worker, and the delivered counts.
    recs = {(s["point"], s["worker"]): s for s in b.shards}
    assert set(recs) == {(p, k) for p in ("L16-c2", "L16-c4") for k in (0, 1)}
    for (pid, k), s in recs.items():
        assert s["status"] == "ok" and s["node"] == workers[k]["node"]
        assert s["planned"] == s["sent"] == s["done"] == len(range(k, n + int(pid[-1]), 2))
        assert s["clock_probes"] > 0 and 0 < s["clock_uncertainty_s"] < 0.01
        assert isinstance(s["clock_offset_s"], float)
    # Every timestamp is on the driver's clock: inside its point's window.
    ev = {(e["point"], e["event"]): e["t"] for e in b.points if e.get("point")}
    for r in reqs:
        assert ev[(r["point"], "start")] <= r["t_slot"] <= r["t_send"] <= r["t_end"] <= ev[(r["point"], "end")]
    for pid in ("L16-c2", "L16-c4"):
        first = min(r["t_send"] for r in reqs if r["point"] == pid and not r["warmup"])
        assert ev[(pid, "measure")] <= first
    # The workers' loop lag reached client.jsonl, each sample naming its worker and that
    # worker's node (the round's own samples name neither).
    assert {0, 1} <= {c.get("worker") for c in b.client}
    for c in b.client:
        if "worker" in c:
            assert c["node"] == workers[c["worker"]]["node"]
        else:
            assert "node" not in c
    # The report reads the merged round and states the largest clock uncertainty.
    vals = json.loads(run_bench("ledger", str(out), "--json").stdout)["values"]
    worst = max(s["clock_uncertainty_s"] for s in b.shards) * 1e3
    assert abs(vals["r.clock_uncertainty_max_ms"]["value"] - worst) < 1e-9
    for (pid, k), s in recs.items():
        assert vals[f"p.{pid}.w{k}.worker_sent_requests"]["value"] == s["sent"]
        assert vals[f"p.{pid}.w{k}.worker_sent_share"]["value"] == 1.0
    # Per node: its id, the load it delivered and its own loop lag.
    for pid in ("L16-c2", "L16-c4"):
        nodes = {vals[f"p.{pid}.n{i}.node_id"]["value"]: f"p.{pid}.n{i}." for i in (0, 1)}
        assert set(nodes) == {w["node"] for w in workers.values()}
        for node, key in nodes.items():
            mine = [s for s in b.shards if s["point"] == pid and s["node"] == node]
            assert vals[key + "node_sent_requests"]["value"] == sum(s["sent"] for s in mine)
            # Points this short may hold no 0.5 s sample: then the reason names the node.
            lag = vals[key + "node_client_lag_ms_p50"]
            assert lag["value"] is not None or node in lag["missing"]



def test_two_workers_per_node_send_every_request_once_each_naming_its_node(tmp_path, cluster):
    n = 24
    st = StandInThread(step_ms=STEP_MS)
    with st as url:
        plan = plan_file(tmp_path, cluster.address, f"concurrency = [4]\nrequests_per_point = {n}",
                         output_len=40)
        out = tmp_path / "b"
        run_bench("run", "--plan", str(plan), "--endpoint", url, "--out", str(out),
                  "--workers-per-node", "2", timeout=120)
    b = read_bundle(out)
    assert b.manifest["status"] == "complete"
    ray = b.manifest["ray"]
    assert ray["nodes"] == 2 and ray["workers_per_node"] == 2
    workers = {w["worker"]: w for w in ray["workers"]}
    assert sorted(workers) == [0, 1, 2, 3]
    # Each node lists its two workers, worker k on the node of bundle k mod 2, each its shard.
    on_node: dict[str, set[int]] = {}
    for k, w in workers.items():
        on_node.setdefault(w["node"], set()).add(k)
        assert w["shard"] == f"requests.w{k}.jsonl"
    assert sorted(on_node.values(), key=min) == [{0, 2}, {1, 3}]
    assert {f"requests.w{k}" for k in workers} <= set(b.manifest["files"])
    # Every request exactly once, worker k sending indices k, k+4, ..., each naming its worker.
    shards = by_worker(out)
    reqs = [r for recs in shards.values() for r in recs]
    assert sorted(r["i"] for r in reqs) == list(range(4 + n))
    for k, recs in shards.items():
        assert recs and all(r["worker"] == k and r["i"] % 4 == k for r in recs)
    assert all(r["status"] == "ok" for r in reqs)
    assert len(reqs) == st.server.counters["requests"] == len(b.requests)
    # One shards.jsonl record per worker, on its node, with its own clock measurement.
    recs = {s["worker"]: s for s in b.shards}
    assert sorted(recs) == [0, 1, 2, 3]
    for k, s in recs.items():
        assert s["status"] == "ok" and s["node"] == workers[k]["node"]
        assert s["planned"] == s["sent"] == s["done"] == len(range(k, n + 4, 4))
        assert s["clock_probes"] > 0
    # Every worker's loop lag reached client.jsonl, each sample naming its worker and node.
    lag = [c for c in b.client if "worker" in c]
    assert {c["worker"] for c in lag} == {0, 1, 2, 3}
    assert all(c["node"] == workers[c["worker"]]["node"] for c in lag)
    # The report keeps the two nodes apart, each with the requests its two workers sent.
    vals = json.loads(run_bench("ledger", str(out), "--json").stdout)["values"]
    for i in (0, 1):
        node = vals[f"p.L16-c4.n{i}.node_id"]["value"]
        assert vals[f"p.L16-c4.n{i}.node_sent_requests"]["value"] == \
            sum(recs[k]["sent"] for k in on_node[node])

def test_a_killed_worker_fails_its_point_named_and_the_round_goes_on(tmp_path, cluster):
    with StandInThread(step_ms=STEP_MS) as url:
        plan = plan_file(tmp_path, cluster.address, "request_rate = [20.0, 40.0]\n"
                         "arrival = \"poisson\"\nrequests_per_point = 60\nwarmup_requests = 0",
                         output_len=20)
        out = tmp_path / "b"
        proc = subprocess.Popen([sys.executable, "-m", "serving_ledger", "run", "--plan", str(plan),
                                 "--endpoint", url, "--out", str(out)], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            victim = None
            while time.monotonic() < deadline and proc.poll() is None:
                # Once worker 1 has sent a few requests of the first point, kill it.
                m = json.loads((out / "manifest.json").read_text()) \
                    if (out / "manifest.json").exists() else {}
                if m.get("ray") and any(e["event"] == "start" for e in lines(out / "points.jsonl")):
                    victim = next(w for w in m["ray"]["workers"] if w["worker"] == 1)
                    time.sleep(1.0)
                    os.kill(victim["pid"], signal.SIGKILL)
                    break
                time.sleep(0.1)
            assert victim is not None, "the round never started its first point"
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert proc.returncode == 0, err[-3000:]
    b = read_bundle(out)
    assert b.manifest["status"] == "complete"
    ends = {e["point"]: e for e in b.points if e["event"] == "end"}
    first, second = "L16-r20", "L16-r40"
    assert ends[first]["status"] == "failed"
    assert victim["node"] in ends[first]["reason"] and "worker 1" in ends[first]["reason"]
    died = [s for s in b.shards if s["point"] == first and s["worker"] == 1]
    assert died and died[0]["status"] == "died" and died[0]["sent"] is None
    # The next point ran on a restarted worker: every request once, both workers.
    assert ends[second]["status"] == "ok"
    mine = [r for recs in by_worker(out).values() for r in recs if r["point"] == second]
    assert sorted(r["i"] for r in mine) == list(range(60))
    assert {s["status"] for s in b.shards if s["point"] == second} == {"ok"}
    # The report judges the point invalid (failed) and keeps the workers apart: the dead one's
    # counts are absent with its node named, the other's delivered what it was planned.
    findings = json.loads(run_bench("findings", str(out), "--json").stdout)
    judged = {p["point"]: p for p in findings["points"]}
    assert not judged[first]["valid"] and "failed" in judged[first]["invalid_reasons"]
    assert judged[second]["invalid_reasons"] == [] or "failed" not in judged[second]["invalid_reasons"]
    vals = json.loads(run_bench("ledger", str(out), "--json").stdout)["values"]
    assert victim["node"] in vals[f"p.{first}.w1.worker_sent_requests"]["missing"]
    assert vals[f"p.{first}.w0.worker_sent_share"]["value"] == 1.0
    # The node whose worker died is named where the point fails its check; the next kept its part.
    assert "node_behind" in judged[first]["invalid_reasons"]
    assert vals[f"p.{first}.client_nodes_behind"]["value"] == f"{victim['node']} (w1)"
    assert vals[f"p.{second}.client_nodes_behind"]["value"] == ""
    assert vals[f"p.{second}.w1.worker_sent_share"]["value"] == 1.0


def test_a_round_whose_driver_was_killed_resumes_on_the_cluster(tmp_path, cluster):
    with StandInThread(step_ms=STEP_MS) as url:
        plan = plan_file(tmp_path, cluster.address, "concurrency = [2, 4]\nrequests_per_point = 60",
                         output_len=30)
        out = tmp_path / "b"
        proc = subprocess.Popen([sys.executable, "-m", "serving_ledger", "run", "--plan", str(plan),
                                 "--endpoint", url, "--out", str(out)], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and proc.poll() is None:
                if any(e["event"] == "start" and e["point"] == "L16-c4"
                       for e in lines(out / "points.jsonl")):
                    time.sleep(0.5)
                    break
                time.sleep(0.05)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)     # the driver cannot close anything
            proc.wait()
        killed = {e["point"]: e["event"] for e in lines(out / "points.jsonl") if e.get("point")}
        assert killed == {"L16-c2": "end", "L16-c4": "start"}, killed
        run_bench("run", "--plan", str(plan), "--endpoint", url, "--out", str(out), "--resume",
                  timeout=120)
    b = read_bundle(out)
    assert b.manifest["status"] == "complete"
    reqs = [r for recs in by_worker(out).values() for r in recs]
    for pid, C in (("L16-c2", 2), ("L16-c4", 4)):
        # The finished point was kept, the cut one run again: every request once.
        assert sorted(r["i"] for r in reqs if r["point"] == pid) == list(range(C + 60))
        assert sorted(s["worker"] for s in b.shards if s["point"] == pid) == [0, 1]
    starts = [e for e in b.points if e["event"] == "start" and e["point"] == "L16-c4"]
    assert len(starts) == 2 and all(e["workers"] == 2 for e in starts)
