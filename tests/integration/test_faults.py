"""Faults during a round: a killed server, Ctrl-C and resume, a misbehaving /metrics.

The server kill with restart and Ctrl-C use the real vLLM (its own embedded engine, and the
session engine); endpoint-mode death and /metrics faults use the stand-in
(bench/standin/), which can misbehave on cue and dies in milliseconds.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.engine import http_get
from bench.standin.thread import StandInThread
from bundle.store.reader import read_bundle
from report.derive.round.read import read_round
from report.derive.stats import requests as ST
from report.judge.verdicts import build_ledger
from report.publish.compose import compose_round
from tests.conftest import ROOT, run_bench
from tests.standin_round import STANDIN_ENGINE as FAKE_ENGINE

# Rounds against the stand-in name a model config (FAKE_ENGINE), as a real endpoint round
# should: the report's KV section needs the architecture
# (test_report_of_an_endpoint_round_without_...).


def write_plan(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def wait_for(cond, timeout: float, proc: subprocess.Popen | None = None, what: str = "") -> None:
    """Poll COND until true; fail early if PROC exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode} while waiting for {what}:\n"
                                 + proc.communicate()[1][-3000:])
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.endswith("}")]


def point_running(out: Path, pid: str) -> bool:
    """Point PID has started and at least one of its requests is recorded."""
    return point_event(out, pid, "start") and any(r["point"] == pid
                                                  for r in lines(out / "requests.jsonl"))


def point_event(out: Path, pid: str, event: str) -> bool:
    """Point PID's EVENT (start, measure, end) is in points.jsonl."""
    return any(e.get("point") == pid and e["event"] == event for e in lines(out / "points.jsonl"))


def bench_popen(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "serving_ledger", "run", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


def build_html(bundle: Path, out: Path, round_id: str = "x") -> str:
    """`python -m serving_ledger build` on BUNDLE; the English page."""
    proc = subprocess.run([sys.executable, "-m", "serving_ledger", "build", "--bundle", str(bundle),
                           "--round", round_id, "--out", str(out), "--formats", "html"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    return (out / round_id / "index.en.html").read_text()


def page_text(html: str) -> str:
    """The page's text: number popups and tags removed, blanks collapsed."""
    html = re.sub(r'<span class="pop" role="tooltip">.*?<span class="pop-see">[^<]*</span></span>',
                  "", html, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))


def shown_value(html: str, key: str) -> str:
    """The text a page shows for ledger KEY (the number right before its popup)."""
    m = re.search(r'<span class="num-v">([^<]*)</span><span class="pop" role="tooltip">'
                  r'<span class="pop-head"><span class="pop-id">N\d+</span>'
                  r'<code class="pop-key">' + re.escape(key) + "</code>", html)
    assert m, f"{key} is not shown on the page"
    return m.group(1)


def pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie still answers kill(0); it is dead for our purpose.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


# ------------------------------------------------------------------ server killed mid-point

@pytest.mark.engine
def test_killed_embedded_server_fails_the_point_restarts_and_continues(tmp_path):
    # One request at a time: the client is not starved of CPU next to the engine on 2 cores.
    # Points run for a fixed time, not a count: the kill must land inside point 2 however fast
    # the engine answers (12 requests once took less time than the test needed to react).
    plan = write_plan(tmp_path / "p.toml", """
[engine]
mode = "embedded"
[workload]
output_len = 32
[sweep]
concurrency = [1]
input_len = [32, 48, 64]
duration_s = 10
cooldown_s = 0.5
[sampler]
metrics_interval_s = 0.5
""")
    out = tmp_path / "b"
    proc = bench_popen("--plan", str(plan), "--out", str(out))
    try:
        # The victim is known before point 2 starts, and point 2's start event alone triggers
        # the kill: a starved test process once reacted only after point 2 had ended.
        wait_for(lambda: point_event(out, "L32-c1", "start"), 300, proc, "point 1")
        victim = int(re.findall(r"\(APIServer pid=(\d+)\)", (out / "server.log").read_text())[-1])
        wait_for(lambda: point_event(out, "L48-c1", "start"), 300, proc, "point 2")
        os.killpg(victim, signal.SIGKILL)  # the engine runs in its own session: pgid == pid
        assert not point_event(out, "L48-c1", "end"), "the kill came after point 2 had ended"
        _, err = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert "server died" in err and "restarting" in err
    b = read_bundle(out)
    assert b.manifest["status"] == "complete"
    wins = ST.point_windows(b.points)
    assert [w.status for w in wins.values()] == ["ok", "failed", "ok"]
    assert wins["L48-c1"].reason.startswith("server stopped answering")
    # The point before the kill is intact: every request answered in full.
    first = ST.requests_of_point(b.requests, wins["L32-c1"])
    assert len(first) > 1 + 1 and all(r["status"] == "ok" for r in first)
    events = [e["event"] for e in b.points if e["point"] is None]
    assert events == ["server_start", "server_ready", "server_stop"] * 2
    assert [e["exit_status"] for e in b.points if e["event"] == "server_stop"][0] == -signal.SIGKILL
    log_pids = [int(p) for p in re.findall(r"\(APIServer pid=(\d+)\)", (out / "server.log").read_text())]
    assert len(set(log_pids)) == 2 and all(pid_gone(p) for p in set(log_pids))

    # The restarted server's counters began again at zero; point 3's server-side token
    # count is still that point's own (reset handled), not a negative or a round total.
    rd = read_round(b)
    led = build_ledger(rd)
    p3 = next(p for p in rd.points if p.pid == "L64-c1")
    gen = led["p.L64-c1.generation_tokens_server"].value
    measured = sum(r["usage"]["completion_tokens"] for r in p3.measured)
    assert measured <= gen <= sum(r["usage"]["completion_tokens"] for r in p3.requests)

    # The page's notices (rendering itself is checked on the stand-in's rounds below:
    # after the restart the starved client may read whole streams at once, which the
    # client section does not survive yet; see test_report_of_a_round_whose_streams_...).
    report = compose_round(out, "x")
    assert "These points failed and are left out of the analyses: L48-c1" in [
        n["en"] for n in report.notices]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_killed_endpoint_server_stops_the_round_cleanly(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "bench.standin",
                               "--port", str(port), "--step-ms", "5"], cwd=ROOT, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: http_get(url + "/health", timeout=1)[0] == 200, 30, server, "stand-in")
        plan = write_plan(tmp_path / "p.toml", FAKE_ENGINE + """
[workload]
input_len = 16
output_len = 16
[sweep]
concurrency = [1, 2, 4, 8]
duration_s = 2
cooldown_s = 0.2
[sampler]
metrics_interval_s = 0.25
""")
        out = tmp_path / "b"
        proc = bench_popen("--plan", str(plan), "--endpoint", url, "--out", str(out))
        try:
            wait_for(lambda: point_running(out, "L16-c4"), 120, proc, "point 3")
            os.killpg(server.pid, signal.SIGKILL)  # the stand-in runs in its own session
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
    assert b.manifest["status"] == "failed"
    assert "L16-c4" in b.manifest["status_reason"]
    wins = ST.point_windows(b.points)
    # The round stopped: the point after the failed one never started.
    assert [(p, w.status) for p, w in wins.items()] == [
        ("L16-c1", "ok"), ("L16-c2", "ok"), ("L16-c4", "failed")]
    assert wins["L16-c4"].reason.startswith("server stopped answering")
    for pid in ("L16-c1", "L16-c2"):
        reqs = ST.requests_of_point(b.requests, wins[pid])
        assert len(reqs) > 2 * wins[pid].settings["concurrency"]
        assert all(r["status"] == "ok" for r in reqs)
    text = page_text(build_html(out, tmp_path / "site"))
    assert "This round did not complete (status: failed)" in text
    assert "These points failed and are left out of the analyses: L16-c4" in text


# ------------------------------------------------------------------ Ctrl-C and resume

@pytest.mark.engine
def test_ctrl_c_then_resume_runs_only_the_missing_points(engine, tmp_path):
    plan = write_plan(tmp_path / "p.toml", """
[workload]
input_len = 32
output_len = 16
[sweep]
concurrency = [1, 2, 3]
duration_s = 3
cooldown_s = 0.5
""")
    out = tmp_path / "b"
    args = ("--plan", str(plan), "--endpoint", engine.endpoint, "--out", str(out))
    proc = bench_popen(*args)
    try:
        wait_for(lambda: point_running(out, "L32-c2"), 120, proc, "point 2")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "--resume" in err
    before = read_bundle(out)
    assert before.manifest["status"] == "interrupted"
    wins = ST.point_windows(before.points)
    assert [(p, w.status) for p, w in wins.items()] == [("L32-c1", "ok"), ("L32-c2", "interrupted")]
    n_requests_before = len(before.requests)
    t_last = max([e["t"] for e in before.points] + [r["t_end"] for r in before.requests])

    # `make run ROUND=N RESUME=1` passes --resume.
    dry = subprocess.run(["make", "-n", "run", "ROUND=9", "RESUME=1"], cwd=ROOT,
                         capture_output=True, text=True)
    assert "--resume" in dry.stdout

    done = run_bench("run", *args, "--resume")
    assert "(complete)" in done.stdout
    b = read_bundle(out)
    assert b.manifest["status"] == "complete" and b.manifest["status_reason"] is None
    assert b.manifest["clock"] == before.manifest["clock"]
    assert b.manifest["created_utc"] == before.manifest["created_utc"]
    starts = [e["point"] for e in b.points if e["event"] == "start"]
    assert starts == ["L32-c1", "L32-c2", "L32-c2", "L32-c3"]
    # Appended, on the same clock: everything new comes after everything old.
    assert b.requests[:n_requests_before] == before.requests
    assert min(r["t_send"] for r in b.requests[n_requests_before:]) > t_last
    wins = ST.point_windows(b.points)
    assert all(w.status == "ok" for w in wins.values())
    n_measured = {}
    for pid, c in (("L32-c1", 1), ("L32-c2", 2), ("L32-c3", 3)):
        reqs = ST.requests_of_point(b.requests, wins[pid])
        assert len(reqs) > 2 * c and all(r["status"] == "ok" for r in reqs)
        n_measured[pid] = len(ST.measured(reqs))
    summary = subprocess.run([sys.executable, "-m", "serving_ledger", "summary", str(out), "--json"],
                             cwd=ROOT, capture_output=True, text=True, check=True)
    rows = json.loads(summary.stdout)["points"]
    assert [(r["point"], r["status"], r["requests"]) for r in rows] == [
        (pid, "ok", n) for pid, n in n_measured.items()]


# ------------------------------------------------------------------ /metrics faults

def test_metrics_faults_are_gaps_and_the_round_goes_on(tmp_path):
    script = ["ok", "500", "ok", "malformed", "ok", "timeout"]
    plan = write_plan(tmp_path / "p.toml", FAKE_ENGINE + """
[workload]
input_len = 16
output_len = 16
[sweep]
concurrency = [1, 2]
requests_per_point = 40
cooldown_s = 0.3
[sampler]
metrics_interval_s = 0.25
""")
    out = tmp_path / "b"
    with StandInThread(metrics_script=script, step_ms=5) as url:
        run_bench("run", "--plan", str(plan), "--endpoint", url, "--out", str(out), timeout=120)
    b = read_bundle(out)
    assert b.manifest["status"] == "complete"
    gaps = [s for s in b.metrics if not s["ok"]]
    assert [g["error"].split(":")[0] for g in gaps] == ["ValueError", "ValueError", "TimeoutError"]
    assert "HTTP 500" in gaps[0]["error"] and "malformed" in gaps[1]["error"]
    assert "no answer within" in gaps[2]["error"]
    assert all("samples" not in g for g in gaps)
    assert sum(1 for s in b.metrics if s["ok"]) >= 6  # scraping went on after the faults
    assert all(r["status"] == "ok" for r in b.requests)

    led = build_ledger(read_round(b))
    assert led["r.scrape_gaps"].value == 3
    assert led["r.scrapes"].value == len(b.metrics)
    # Gaps never count as zeros: the server's token counts over each window stay exact.
    for p in read_round(b).points:
        k = f"p.{p.pid}.generation_tokens_server"
        measured = sum(r["usage"]["completion_tokens"] for r in p.measured)
        assert measured <= led[k].value <= sum(r["usage"]["completion_tokens"] for r in p.requests)

    html = build_html(out, tmp_path / "site")
    assert shown_value(html, "r.scrape_gaps") == "3"
    assert re.search(r"failed scrapes: 3, left out of every analysis", page_text(html))


# ------------------------------------------------------------------ reports of rounds cut short

def record_fake_round(out: Path, plan_dir: Path, requests: int = 6, **fake) -> Path:
    """A 2-point round against the stand-in (fast, no engine)."""
    plan = write_plan(plan_dir / "fake.toml", FAKE_ENGINE + f"""
[workload]
input_len = 16
output_len = 8
[sweep]
concurrency = [1, 2]
requests_per_point = {requests}
cooldown_s = 0.2
[sampler]
metrics_interval_s = 0.25
""")
    with StandInThread(**fake) as url:
        run_bench("run", "--plan", str(plan), "--endpoint", url, "--out", str(out), timeout=120)
    return out


@pytest.fixture(scope="module")
def fake_bundle(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fake-round")
    return record_fake_round(root / "b", root)


def fail_last_points(bundle: Path, n: int) -> None:
    """Rewrite BUNDLE as if the server had died in its last N points."""
    p = bundle / "points.jsonl"
    events = [json.loads(ln) for ln in p.read_text().splitlines()]
    for e in [e for e in events if e["event"] == "end"][-n:]:
        e.update(status="failed", reason="server stopped answering: ServerDisconnectedError")
    p.write_text("".join(json.dumps(e) + "\n" for e in events))
    m = json.loads((bundle / "manifest.json").read_text())
    m.update(status="failed", status_reason="the server stopped answering")
    (bundle / "manifest.json").write_text(json.dumps(m))


@pytest.mark.parametrize("n_failed", [1, 2], ids=["one-point-left", "no-point-left"])
def test_report_of_a_round_cut_short(fake_bundle, tmp_path, n_failed):
    """The server died in point 1 or 2 of 2: the page still renders, with the notices."""
    import shutil
    b = Path(shutil.copytree(fake_bundle, tmp_path / "b"))
    fail_last_points(b, n_failed)
    text = page_text(build_html(b, tmp_path / "site"))
    assert "This round did not complete (status: failed)" in text
    failed = ["L16-c1", "L16-c2"][-n_failed:]
    assert "These points failed and are left out of the analyses: " + ", ".join(failed) in text
    assert "Method and data quality" in text


def test_report_of_an_endpoint_round_without_a_model_config(fake_bundle, tmp_path):
    import shutil
    b = Path(shutil.copytree(fake_bundle, tmp_path / "b"))
    m = json.loads((b / "manifest.json").read_text())
    m["model"].update(config=None, config_source=None)
    (b / "manifest.json").write_text(json.dumps(m))
    build_html(b, tmp_path / "site")


def test_report_of_a_round_whose_streams_arrive_in_one_read(tmp_path):
    """A client starved of CPU (or a buffering proxy) reads a whole stream at once: every
    ITL gap is 0. Seen on the 2-core machine after the engine restart above."""
    # Long enough a window (~1.6 s) for the client's lag monitor (every 0.5 s) to sample it.
    b = record_fake_round(tmp_path / "b", tmp_path, requests=20, burst=True, step_ms=20)
    led = build_ledger(read_round(read_bundle(b)))
    assert led["p.L16-c2.itl_ms_p50"].value == 0
    assert led["p.L16-c2.client_lag_ms_p99"].present
    build_html(b, tmp_path / "site")
