"""Client workers: rounds whose points are driven by several processes (`--workers N`).

Rounds run as a user runs them (`python -m serving_ledger run`) against the stand-in server, in a
thread of the test process (its counters are read directly) or, where it must die, as its own
process. Request records are read from the shards (`requests.w{k}.jsonl`) directly.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.engine import free_port, http_get
from bench.plan.parse import plan_from_dict
from bench.prompts import PlanError
from bench.shard_writer import ShardWriter
from bench.standin.thread import StandInThread
from bench.workers import split
from bench.workload import arrival_offsets, point_seed
from bundle.store.reader import read_bundle
from bundle.store.writer import BundleWriter
from tests.conftest import ROOT, run_bench

STEP_MS = 5.0


def shard_requests(out: Path) -> dict[int, list[dict]]:
    """Each worker's request records, by worker number, read from its shard."""
    shards = {}
    for p in sorted(out.glob("requests.w*.jsonl")):
        k = int(p.name.split(".")[1][1:])
        shards[k] = [json.loads(ln) for ln in p.read_text().splitlines()]
    return shards


def all_requests(out: Path) -> list[dict]:
    return [r for recs in shard_requests(out).values() for r in recs]


def lines(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []


def plan_file(tmp_path: Path, sweep: str, workers: int = 2, output_len: int = 12) -> Path:
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
workers = {workers}
""")
    return p


def children_of(pid: int) -> set[int]:
    """Processes whose parent is PID."""
    out = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.add(int(d.name))
            except (OSError, ValueError, IndexError):
                pass
    return out


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def left_behind(pids: set[int], grace_s: float = 5.0) -> list[str]:
    """The command lines of PIDS still running after GRACE_S (a process may take a moment to
    notice its parent exited: multiprocessing's resource tracker does)."""
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and not all(gone(p) for p in pids):
        time.sleep(0.05)
    out = []
    for p in pids:
        if not gone(p):
            try:
                out.append(Path(f"/proc/{p}/cmdline").read_text().replace("\0", " "))
            except OSError:
                pass
    return out


def wait_for(cond, timeout: float, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode} while waiting for {what}:\n"
                                 + proc.communicate()[1][-3000:])
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def bench_popen(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "serving_ledger", "run", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


# ------------------------------------------------------------------ closed loop

def test_closed_loop_over_two_workers_records_every_request_once(tmp_path):
    C, n = 5, 37
    with StandInThread(step_ms=STEP_MS) as url:
        plan = plan_file(tmp_path, f"concurrency = [{C}]\nrequests_per_point = {n}")
        out = tmp_path / "b"
        run_bench("run", "--plan", str(plan), "--endpoint", url, "--out", str(out), timeout=120)
    shards = shard_requests(out)
    assert sorted(shards) == [0, 1] and all(shards.values()), "both workers sent requests"
    assert not (out / "requests.jsonl").exists()
    reqs = all_requests(out)
    # Exactly the asked number, each index once; warm-up is the first C indices.
    assert sorted(r["i"] for r in reqs) == list(range(C + n))
    assert all(r["status"] == "ok" and r["error"] is None for r in reqs)
    assert sorted(r["i"] for r in reqs if r["warmup"]) == list(range(C))
    assert all(r["point"] == "L16-c5" and r["t_sched"] is None for r in reqs)
    tokens = sum(n for r in reqs for _, n in r["chunks"])
    assert tokens == sum(r["usage"]["completion_tokens"] for r in reqs) == (C + n) * 12
    b = read_bundle(out)
    assert b.manifest["status"] == "complete"
    assert b.manifest["plan"]["client"]["workers"] == 2
    # The reader returns the requests of every shard.
    assert sorted(r["i"] for r in b.requests) == list(range(C + n))
    ev = {e["event"]: e for e in b.points if e.get("point") == "L16-c5"}
    assert ev["start"]["workers"] == 2 and ev["end"]["status"] == "ok"
    # measure: the send time of the first non-warm-up request, on the bundle's clock.
    first = min(r["t_send"] for r in reqs if not r["warmup"])
    assert ev["start"]["t"] <= ev["measure"]["t"] <= first
    assert first - ev["measure"]["t"] < 0.05
    assert all(ev["start"]["t"] <= r["t_send"] <= r["t_end"] <= ev["end"]["t"] for r in reqs)
    # Each worker's loop lag reaches client.jsonl with its number; the coordinator's has none.
    workers = {c.get("worker") for c in b.client}
    assert {0, 1, None} <= workers


def test_closed_loop_tokens_equal_the_servers_count(tmp_path):
    C, n = 6, 30
    st = StandInThread(step_ms=STEP_MS)
    with st as url:
        plan = plan_file(tmp_path, f"concurrency = [{C}]\nrequests_per_point = {n}\n"
                                   "warmup_requests = 0", workers=3, output_len=9)
        out = tmp_path / "b"
        run_bench("run", "--plan", str(plan), "--endpoint", url, "--out", str(out), timeout=120)
    c = st.server.counters
    reqs = all_requests(out)
    assert len(shard_requests(out)) == 3
    assert sorted(r["i"] for r in reqs) == list(range(n))
    assert not any(r["warmup"] for r in reqs)
    assert len(reqs) == c["requests"]
    assert sum(n for r in reqs for _, n in r["chunks"]) == c["generation_tokens"] == n * 9


def test_duration_mode_workers_share_one_deadline(tmp_path):
    with StandInThread(step_ms=STEP_MS) as url:
        plan = plan_file(tmp_path, "concurrency = [4]\nduration_s = 1.0", output_len=8)
        out = tmp_path / "b"
        run_bench("run", "--plan", str(plan), "--endpoint", url, "--out", str(out), timeout=120)
    reqs = all_requests(out)
    ev = {e["event"]: e for e in lines(out / "points.jsonl") if e.get("point")}
    assert sorted(r["i"] for r in reqs) == list(range(len(reqs)))
    measured = [r for r in reqs if not r["warmup"]]
    assert len(measured) > 8 and all(r["status"] == "ok" for r in reqs)
    # No request became ready after the deadline (measure + duration), in either worker.
    assert max(r["t_slot"] for r in measured) < ev["measure"]["t"] + 1.0
    assert ev["end"]["t"] >= ev["measure"]["t"] + 1.0


def test_more_workers_than_streams_uses_one_per_stream(tmp_path):
    with StandInThread(step_ms=STEP_MS) as url:
        plan = plan_file(tmp_path, "concurrency = [1, 2]\nrequests_per_point = 6", workers=3,
                         output_len=4)
        out = tmp_path / "b"
        run_bench("run", "--plan", str(plan), "--endpoint", url, "--out", str(out), timeout=120)
    starts = {e["point"]: e["workers"] for e in lines(out / "points.jsonl") if e["event"] == "start"}
    assert starts == {"L16-c1": 1, "L16-c2": 2}
    reqs = all_requests(out)
    for pid, c in (("L16-c1", 1), ("L16-c2", 2)):
        assert sorted(r["i"] for r in reqs if r["point"] == pid) == list(range(6 + c))


# ------------------------------------------------------------------ open loop

def test_open_loop_over_two_workers_keeps_the_schedule(tmp_path):
    rate, n = 40.0, 40
    with StandInThread(step_ms=STEP_MS) as url:
        plan = plan_file(tmp_path, f"request_rate = [{rate}]\narrival = \"poisson\"\n"
                                   f"concurrency = [6]\nrequests_per_point = {n}\n"
                                   "warmup_requests = 0", output_len=6)
        out = tmp_path / "b"
        run_bench("run", "--plan", str(plan), "--endpoint", url, "--out", str(out), timeout=120)
    shards = shard_requests(out)
    # Worker k sent arrivals k, k+2, ...
    assert {k: sorted(r["i"] for r in recs) for k, recs in shards.items()} == {
        0: list(range(0, n, 2)), 1: list(range(1, n, 2))}
    reqs = sorted(all_requests(out), key=lambda r: r["i"])
    assert all(r["status"] == "ok" for r in reqs)
    # The recorded schedule is the seeded one, drawn once: offsets from the first arrival.
    offs = arrival_offsets(n, rate, 1.0, point_seed(0, 0))
    sched = [r["t_sched"] for r in reqs]
    assert all(abs((s - sched[0]) - o) < 1e-6 for s, o in zip(sched, offs))
    assert all(r["t_slot"] == r["t_sched"] for r in reqs)
    start = next(e for e in lines(out / "points.jsonl") if e["event"] == "start")
    assert 0 < sched[0] - start["t"] < 0.5
    # Sent on time: lateness (send - schedule) is small for the median request.
    late = [r["t_send"] - r["t_sched"] for r in reqs]
    assert min(late) >= 0 and statistics.median(late) < 0.05, late


TRAFFIC = ROOT / "tests" / "fixtures" / "traffic"


def replay_plan(tmp_path: Path, workload: str, sweep: str = "") -> Path:
    """A plan beside copies of the traffic fixtures (its paths are relative to it), two workers."""
    for name in ("mooncake-tiny.jsonl", "sharegpt-cut.json"):
        (tmp_path / name).write_bytes((TRAFFIC / name).read_bytes())
    p = tmp_path / "plan.toml"
    p.write_text(f"""
[workload]
{workload}
[sweep]
warmup_requests = 0
cooldown_s = 0.1
{sweep}
[sampler]
gpu = false
metrics_interval_s = 0.25
[client]
workers = 2
""")
    return p


def test_a_trace_over_two_workers_sends_each_request_once_at_its_time(tmp_path):
    rows = [json.loads(ln) for ln in (TRAFFIC / "mooncake-tiny.jsonl").read_text().splitlines()]
    with StandInThread(step_ms=STEP_MS) as url:
        plan = replay_plan(tmp_path, 'kind = "trace"\ntrace = "mooncake-tiny.jsonl"\n'
                                     'format = "mooncake"\ntime_scale = 1.0')
        out = tmp_path / "b"
        run_bench("run", "--plan", str(plan), "--endpoint", url, "--out", str(out), timeout=120)
    shards = shard_requests(out)
    # The trace's requests split in their order: worker k sends requests k, k+2, ...
    assert {k: sorted(r["i"] for r in recs) for k, recs in shards.items()} == {0: [0, 2, 4], 1: [1, 3]}
    reqs = sorted(all_requests(out), key=lambda r: r["i"])
    assert all(r["status"] == "ok" for r in reqs)
    t0 = reqs[0]["t_sched"]
    for r, row in zip(reqs, rows):
        assert r["t_sched"] - t0 == pytest.approx((row["timestamp"] - rows[0]["timestamp"]) / 1e3, abs=1e-6)
        assert r["input_len"] == row["input_length"] == r["usage"]["prompt_tokens"]
        assert r["max_tokens"] == row["output_length"]
    assert [r["shared_blocks"] for r in reqs] == [0, 2, 0, 2, 0]
    # Each at its scheduled time, whichever worker sent it (the median: a stall of the shared
    # host delays every send queued behind it).
    late = [r["t_send"] - r["t_sched"] for r in reqs]
    assert min(late) > -1e-3 and statistics.median(late) < 0.05, late
    # Requests 2 and 3 share one time and went from different workers, together.
    assert abs(reqs[2]["t_send"] - reqs[3]["t_send"]) < 0.05
    b = read_bundle(out)
    assert b.manifest["workload_source"]["kept"] == 5 and len(b.requests) == 5


def test_a_sharegpt_dataset_over_two_workers_sends_its_kept_prompts(tmp_path):
    from bench.engine import TINY_MODEL_DIR
    with StandInThread(step_ms=STEP_MS) as url:
        plan = replay_plan(tmp_path, f'kind = "sharegpt"\ndataset = "sharegpt-cut.json"\n'
                                     f'[engine]\nmodel_config = "{TINY_MODEL_DIR}/config.json"',
                           "concurrency = [2]\nrequests_per_point = 4")
        out = tmp_path / "b"
        run_bench("run", "--plan", str(plan), "--endpoint", url, "--out", str(out), timeout=120)
    shards = shard_requests(out)
    assert set(shards) == {0, 1}
    reqs = sorted(all_requests(out), key=lambda r: r["i"])
    # Indices unique across the workers; each the one kept conversation, with its reply's length.
    assert [r["i"] for r in reqs] == [0, 1, 2, 3] and all(r["status"] == "ok" for r in reqs)
    assert len({r["max_tokens"] for r in reqs}) == 1
    assert read_bundle(out).manifest["workload_source"]["kept"] == 1


# ------------------------------------------------------------------ faults

def test_server_death_seen_by_a_worker_ends_the_point(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "bench.standin", "--port", str(port),
                               "--step-ms", "10"], cwd=ROOT, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kids: set[int] = set()
    try:
        deadline = time.monotonic() + 30
        while http_get(url + "/health", timeout=1)[0] != 200:
            assert time.monotonic() < deadline and server.poll() is None, "stand-in did not start"
            time.sleep(0.1)
        plan = plan_file(tmp_path, "concurrency = [1, 4]\nrequests_per_point = 400",
                         output_len=40)
        out = tmp_path / "b"
        proc = bench_popen("--plan", str(plan), "--endpoint", url, "--out", str(out))
        try:
            wait_for(lambda: any(r["point"] == "L16-c1" for r in all_requests(out)), 60, proc,
                     "requests of the first point")
            kids = children_of(proc.pid)
            os.killpg(server.pid, signal.SIGKILL)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    assert proc.returncode == 1, err[-3000:]
    assert "Traceback" not in err
    assert "stopped answering" in err and "earlier points are kept" in err
    b = read_bundle(out)
    assert b.manifest["status"] == "failed" and "L16-c1" in b.manifest["status_reason"]
    ends = [e for e in b.points if e["event"] == "end"]
    assert [(e["point"], e["status"]) for e in ends] == [("L16-c1", "failed")]
    assert ends[0]["reason"].startswith("server stopped answering")
    # The point stopped issuing: far fewer than the asked 401 requests, the cut ones failed.
    reqs = all_requests(out)
    assert len(reqs) < 401 and any(r["status"] == "error" for r in reqs)
    assert kids and not left_behind(kids), f"left behind: {left_behind(kids, 0)}"


def test_ctrl_c_leaves_a_readable_bundle_and_no_worker_then_resume(tmp_path):
    with StandInThread(step_ms=STEP_MS) as url:
        plan = plan_file(tmp_path, "concurrency = [2, 4]\nrequests_per_point = 40",
                         output_len=30)
        out = tmp_path / "b"
        args = ("--plan", str(plan), "--endpoint", url, "--out", str(out))
        proc = bench_popen(*args)
        try:
            wait_for(lambda: len(all_requests(out)) >= 8, 60, proc, "requests")
            kids = children_of(proc.pid)
            # A terminal's Ctrl-C reaches the whole foreground process group.
            os.killpg(proc.pid, signal.SIGINT)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 130, err[-3000:]
        assert "--resume" in err and "Traceback" not in err
        assert kids and not left_behind(kids), f"left behind: {left_behind(kids, 0)}"
        b = read_bundle(out)
        assert b.manifest["status"] == "interrupted"
        assert not [e for e in b.points if e["event"] == "end"], "the cut point has no end"
        before = all_requests(out)   # every shard line is whole JSON
        assert len(before) >= 8 and len({r["i"] for r in before}) == len(before)
        assert all(r["point"] == "L16-c2" for r in before)

        done = run_bench("run", *args, "--resume", timeout=120)
    assert "(complete)" in done.stdout
    b = read_bundle(out)
    assert b.manifest["status"] == "complete"
    assert [e["point"] for e in b.points if e["event"] == "start"] == ["L16-c2", "L16-c2", "L16-c4"]
    reqs = all_requests(out)
    t_old = max(r["t_end"] for r in before)
    for pid, c in (("L16-c2", 2), ("L16-c4", 4)):
        start = [e["t"] for e in b.points if e["event"] == "start" and e["point"] == pid][-1]
        run = [r for r in reqs if r["point"] == pid and r["t_send"] >= start]
        assert start > t_old   # the resumed round continues the bundle's clock
        assert sorted(r["i"] for r in run) == list(range(40 + c))
        assert all(r["status"] == "ok" for r in run)


def test_workers_exit_when_their_coordinator_is_killed(tmp_path):
    with StandInThread(step_ms=STEP_MS) as url:
        plan = plan_file(tmp_path, "concurrency = [4]\nrequests_per_point = 2000",
                         output_len=30)
        out = tmp_path / "b"
        proc = bench_popen("--plan", str(plan), "--endpoint", url, "--out", str(out))
        kids: set[int] = set()
        try:
            wait_for(lambda: len(all_requests(out)) >= 8, 60, proc, "requests")
            kids = children_of(proc.pid)
            proc.kill()   # SIGKILL: the coordinator cannot clean up
            proc.wait()
            deadline = time.monotonic() + 10
            while not all(gone(p) for p in kids) and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            if proc.poll() is None:
                proc.kill()
    left = [p for p in kids if not gone(p)]
    for p in kids:
        if not gone(p):
            os.kill(p, signal.SIGKILL)   # never leave one behind, even when the test fails
    assert len(kids) >= 2 and not left, "orphaned workers exit by themselves"
    all_requests(out)   # what they wrote stays whole JSON lines


def test_a_plan_error_a_worker_would_hit_is_refused_before_the_round(tmp_path):
    """A prefix longer than the prompt once failed inside the workers, mid-round; the plan
    check now refuses it before a bundle exists."""
    plan = plan_file(tmp_path, "concurrency = [2]\nrequests_per_point = 4")
    text = plan.read_text().replace('[workload]\n', '[workload]\nkind = "shared-prefix"\n'
                                                   'prefix_len = 99\n')
    plan.write_text(text)
    with StandInThread(step_ms=STEP_MS) as url:
        out = tmp_path / "b"
        proc = run_bench("run", "--plan", str(plan), "--endpoint", url, "--out", str(out),
                         check=False, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "[workload].prefix_len: 99 is not between 1 and input_len - 1" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not out.exists()


# ------------------------------------------------------------------ plan and shard writer

@pytest.mark.parametrize("client, needle", [
    ({"workers": 0}, "[client].workers"),
    ({"workers": 1.5}, "[client].workers"),
    ({"workers": True}, "[client].workers"),
    ({"workers": "2"}, "[client].workers"),
    ({"cpu_affinity": ["a"]}, "[client].cpu_affinity"),
    ({"cpu_affinity": [-1]}, "[client].cpu_affinity"),
    ({"cpu_affinity": 3}, "[client].cpu_affinity"),
    ({"worker": 2}, "unknown key"),
])
def test_bad_client_section_is_refused(client, needle):
    with pytest.raises(PlanError) as e:
        plan_from_dict({"client": client}, "p.toml")
    assert needle in str(e.value) and "p.toml" in str(e.value)


def test_client_section_defaults_to_one_process():
    p = plan_from_dict({}, "p.toml")
    assert p.client.workers == 1 and p.client.cpu_affinity == []
    p = plan_from_dict({"client": {"workers": 4, "cpu_affinity": [2, 3]}}, "p.toml")
    assert p.client.workers == 4 and p.to_dict()["client"]["cpu_affinity"] == [2, 3]


def test_cli_workers_flag(tmp_path):
    proc = run_bench("run", "--workers", "0", "--endpoint", "http://127.0.0.1:9",
                     "--out", str(tmp_path / "b"), check=False)
    assert proc.returncode == 2 and "[client].workers" in proc.stderr
    from bench.cli import plan_from_args
    from serving_ledger.cli import build_parser
    args = build_parser().parse_args(["run", "--workers", "3", "--worker-cpus", "4,5",
                                      "--endpoint", "http://127.0.0.1:9", "--out", "x"])
    p = plan_from_args(args)
    assert p.client.workers == 3 and p.client.cpu_affinity == [4, 5]


def test_split_spreads_the_remainder():
    assert split(5, 2) == [3, 2]
    assert split(7, 4) == [2, 2, 2, 1]
    assert sum(split(1001, 8)) == 1001


def test_shard_writer_redacts_like_the_bundle_writer_and_reopens_safely(tmp_path):
    secret = "sk-verysecret-123"
    w = BundleWriter(tmp_path, {"engine": {}, "plan": {}, "tool": {}}, secrets=[secret])
    s = ShardWriter(tmp_path, 3, w.t0, w.secrets)
    assert abs(s.now() - w.now()) < 0.01
    s.append({"point": "p", "error": f"HTTP 401: bad key {secret}"})
    s.close()
    p = tmp_path / "requests.w3.jsonl"
    assert secret not in p.read_text() and "[redacted]" in p.read_text()
    # A crash mid-line, then a resume: the partial line is cut before new lines follow.
    with open(p, "a") as f:
        f.write('{"point": "p", "i"')
    s = ShardWriter(tmp_path, 3, w.t0, w.secrets)
    s.append({"point": "p", "i": 2})
    s.close()
    assert [json.loads(ln)["point"] for ln in p.read_text().splitlines()] == ["p", "p"]
    # A shard compressed at close goes back to plain .jsonl when appended to again.
    data = p.read_bytes()
    with gzip.open(p.with_name(p.name + ".gz"), "wb") as f:
        f.write(data)
    p.unlink()
    s = ShardWriter(tmp_path, 3, w.t0, w.secrets)
    s.append({"point": "q"})
    s.close()
    assert not p.with_name(p.name + ".gz").exists()
    assert [json.loads(ln)["point"] for ln in p.read_text().splitlines()] == ["p", "p", "q"]
    w.close("complete")
