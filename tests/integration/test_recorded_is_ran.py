"""What a bundle records is what ran: a resumed round keeps its plan, an endpoint that is not
an OpenAI server is refused before any point, and the engine module stops its server when a
service manager sends SIGTERM (no orphan holding the port and the memory)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from bench.engine import free_port, http_get
from bench.standin.thread import StandInThread
from tests.conftest import ROOT, run_bench
from tests.standin_round import STANDIN_ROUND_PLAN


def test_resume_refuses_a_changed_workload_and_leaves_the_bundle_as_it_was(tmp_path):
    plan = tmp_path / "p.toml"
    plan.write_text(STANDIN_ROUND_PLAN)
    out = tmp_path / "b"
    with StandInThread(step_ms=2) as url:
        run_bench("run", "--plan", str(plan), "--endpoint", url, "--out", str(out), timeout=120)
        before = {p.name: p.read_bytes() for p in out.iterdir()}
        proc = run_bench("run", "--plan", str(plan), "--endpoint", url, "--out", str(out),
                         "--resume", "--output-len", "16", check=False, timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert ("--resume: [workload].output_len was 8 when the bundle was recorded and is 16 "
                "now") in proc.stderr
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before
        # The same plan resumes (nothing is left to run).
        proc = run_bench("run", "--plan", str(plan), "--endpoint", url, "--out", str(out),
                         "--resume", check=False, timeout=120)
        assert proc.returncode == 0, proc.stderr


class _Html(BaseHTTPRequestHandler):
    def do_GET(self):   # noqa: N802 - the handler's name is http.server's
        body = b"<html><body>It works!</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_an_endpoint_answering_html_is_refused_before_any_point(tmp_path):
    server = HTTPServer(("127.0.0.1", 0), _Html)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        proc = run_bench("run", "--endpoint", url, "--concurrency", "1", "--requests-per-point", "2",
                         "--out", str(tmp_path / "b"), check=False, timeout=120)
    finally:
        server.shutdown()
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"{url}/v1/models answered 200 with b'<html>" in proc.stderr
    assert "not an OpenAI model list" in proc.stderr
    points = (tmp_path / "b" / "points.jsonl").read_text() if (tmp_path / "b" / "points.jsonl").exists() else ""
    assert '"event":"start"' not in points


@pytest.mark.engine
def test_the_engine_module_stops_its_server_on_sigterm(tmp_path):
    port = free_port()
    log = tmp_path / "engine.log"
    proc = subprocess.Popen([sys.executable, "-m", "bench.engine", "--port", str(port),
                             "--log", str(log)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()      # "serving at ..." once the server is healthy
        assert "serving at" in line, line
        status, _ = http_get(f"http://127.0.0.1:{port}/health")
        assert status == 200
        server_pids = [int(p) for p in os.listdir("/proc") if p.isdigit() and _listens_for(int(p), port)]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and http_get(f"http://127.0.0.1:{port}/health")[0]:
            time.sleep(0.5)
        assert http_get(f"http://127.0.0.1:{port}/health")[0] == 0, "the server still answers"
        assert not [p for p in server_pids if Path(f"/proc/{p}").exists()], "server processes left"
    finally:
        if proc.poll() is None:
            proc.kill()


def _listens_for(pid: int, port: int) -> bool:
    """Whether process PID is the engine serving PORT (its command line names it)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"--port" in cmd and str(port).encode() in cmd
