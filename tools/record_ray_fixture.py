"""Record the two-node Ray fixture (tests/fixtures/ray-two-nodes) the way a user runs a round.

    .venv/bin/python tools/record_ray_fixture.py OUT

Starts a two-node Ray cluster on 127.0.0.1 (bench/ray_local.py) and the stand-in server
(bench/standin/, 5 ms steps) in this process, then runs `serving_ledger run` through the
cluster: two open-loop Poisson points (6 and 10 req/s, 40 requests each, 16 tokens in and
out), several seconds each so that every node's 0.5 s loop-lag samples land in each point's
window. Once the first point has started and KILL_AFTER_S more have passed, worker 1's
process is killed (SIGKILL); Ray restarts it for the second point. The bundle is written to
OUT whole (its numbers describe the stand-in, never a server). OUT must not exist.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.ray_local import LocalCluster  # noqa: E402
from bench.standin.thread import StandInThread  # noqa: E402

KILL_AFTER_S = 3.0       # into the first point: worker 1 has sent part of its share
STEP_MS = 5.0
PLAN = """
[engine]
model_config = "{config}"
[workload]
input_len = 16
output_len = 16
[sweep]
request_rate = [6.0, 10.0]
arrival = "poisson"
requests_per_point = 40
warmup_requests = 0
cooldown_s = 0.2
[sampler]
gpu = false
metrics_interval_s = 0.5
[client]
ray = "{address}"
nodes = 2
"""


def lines(path: Path) -> list[dict]:
    """The JSON lines of PATH (none while it does not exist)."""
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def kill_worker_one(out: Path, proc: subprocess.Popen, deadline_s: float = 120.0) -> dict:
    """Kill worker 1 KILL_AFTER_S into the round's first point; its manifest record."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end and proc.poll() is None:
        m = json.loads((out / "manifest.json").read_text()) if (out / "manifest.json").exists() else {}
        if m.get("ray") and any(e["event"] == "start" for e in lines(out / "points.jsonl")):
            victim = next(w for w in m["ray"]["workers"] if w["worker"] == 1)
            time.sleep(KILL_AFTER_S)
            os.kill(victim["pid"], signal.SIGKILL)
            return victim
        time.sleep(0.1)
    raise SystemExit("the round never started its first point")


def main(argv: list[str]) -> int:
    if len(argv) != 1 or Path(argv[0]).exists():
        print("usage: record_ray_fixture.py OUT (a path that does not exist yet)", file=sys.stderr)
        return 2
    out = Path(argv[0]).resolve()
    config = ROOT / "tests" / "fixtures" / "models" / "tiny-qwen2.config.json"
    with LocalCluster(nodes=2, cpus=2) as cluster, StandInThread(step_ms=STEP_MS) as url, \
            tempfile.TemporaryDirectory(prefix="rayfix") as tmp:
        plan = Path(tmp) / "plan.toml"
        plan.write_text(PLAN.format(config=config, address=cluster.address))
        proc = subprocess.Popen([sys.executable, "-m", "serving_ledger", "run", "--plan", str(plan),
                                 "--endpoint", url, "--out", str(out)], cwd=ROOT, start_new_session=True)
        try:
            victim = kill_worker_one(out, proc)
            rc = proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    (out / "writer.lock").unlink(missing_ok=True)
    print(f"killed worker 1 on node {victim['node']}; round exited {rc}")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
