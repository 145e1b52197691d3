"""Property-based, with real processes: two `serving-ledger run` on one bundle (a second terminal,
a Ctrl-C that did not land), started in either order a moment apart, fresh or with `--resume`,
on no bundle or on one a Ctrl-C interrupted. Exactly the writers that can write it run (one at
most); every other exits 2 with one line, naming the holder's pid when it was the lock that
stopped it; the bundle reads, each point's requests recorded once by one run, and every byte
that was there before is still there. Each example costs two rounds' start-up (seconds), so
the examples are few (tests/fuzzbudget.py)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bench.standin.thread import StandInThread
from bundle.lock import LOCK_NAME
from bundle.store.reader import read_bundle
from tests.conftest import ROOT
from tests.standin_round import STANDIN_ENGINE

# Two points of four requests of 30 tokens at 25 ms a token: a round holds its lock for a few
# seconds, longer than the start-up of the second writer and the widest gap drawn below.
PLAN = STANDIN_ENGINE + """
[workload]
input_len = 16
output_len = 30
[sweep]
concurrency = [1, 2]
requests_per_point = 4
cooldown_s = 0.2
[sampler]
metrics_interval_s = 0.25
"""
STEP_MS = 25
GAP_S = 0.6


def writer(plan: Path, url: str, out: Path, resume: bool) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "serving_ledger", "run", "--plan", str(plan),
                             "--endpoint", url, "--out", str(out), *(["--resume"] if resume else [])],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def ended(points: Path) -> bool:
    """Whether a point has ended in POINTS (whole lines only: the writer may be mid-line)."""
    if not points.exists():
        return False
    return any(json.loads(line).get("event") == "end"
               for line in points.read_text().splitlines(keepends=True) if line.endswith("\n"))


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    """(the plan, the stand-in's URL, a bundle a Ctrl-C interrupted after its first point)."""
    root = tmp_path_factory.mktemp("writers")
    plan = root / "p.toml"
    plan.write_text(PLAN)
    with StandInThread(step_ms=STEP_MS) as url:
        cut = root / "interrupted"
        p = writer(plan, url, cut, False)
        deadline = time.monotonic() + 120
        while not ended(cut / "points.jsonl"):
            assert time.monotonic() < deadline and p.poll() is None, p.communicate()
            time.sleep(0.05)
        p.send_signal(signal.SIGINT)
        assert p.wait(60) == 130, p.communicate()
        assert read_bundle(cut).manifest["status"] == "interrupted"
        yield plan, url, cut


def files_of(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()} if d.exists() else {}


@settings(max_examples=4, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(start=st.sampled_from(["none", "interrupted"]), resume=st.tuples(st.booleans(), st.booleans()),
       gap=st.floats(0, GAP_S))
@example(start="interrupted", resume=(False, True), gap=0.2)     # refused as a bundle, then resumed
@example(start="interrupted", resume=(True, True), gap=0.0)
def test_two_writers_on_one_bundle_one_runs_the_other_is_refused_and_nothing_is_lost(
        setting, tmp_path_factory, start, resume, gap):
    plan, url, cut = setting
    out = tmp_path_factory.mktemp("case") / "b"
    if start == "interrupted":
        shutil.copytree(cut, out)
    before = files_of(out)
    first = writer(plan, url, out, resume[0])
    time.sleep(gap)
    second = writer(plan, url, out, resume[1])
    done = [(p, *p.communicate(timeout=180)) for p in (first, second)]
    codes = sorted(p.returncode for p, _, _ in done)
    # Who may write: anyone on no bundle; on an interrupted one, only a writer told --resume.
    may = 1 if start == "none" or any(resume) else 0
    assert codes == [0] * may + [2] * (2 - may), [(p.returncode, err) for p, _, err in done]
    won = [p for p, _, _ in done if p.returncode == 0]
    for p, _, err in done:
        if p.returncode != 2:
            continue
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), err
        if "is writing this bundle" in lines[0]:
            holder = won[0].pid if won else (first.pid if p is second else second.pid)
            assert f"process {holder} is writing this bundle" in lines[0], (lines, holder)
        else:
            assert "a bundle already exists here" in lines[0], lines
    after = files_of(out)
    assert after.get(LOCK_NAME, b"") == b""       # no writer left holding it
    for name, data in before.items():             # nothing rewritten: what was there is kept
        if name not in ("manifest.json", LOCK_NAME):
            assert after[name].startswith(data), name
    if not (won or before):
        return
    b = read_bundle(out)
    assert b.manifest["status"] == ("complete" if won else "interrupted")
    ends = Counter(e["point"] for e in b.points if e["event"] == "end" and e.get("status") == "ok")
    assert all(n == 1 for n in ends.values())
    if won:
        assert set(ends) == {"L16-c1", "L16-c2"}
    # One run's requests per point: the last start's, each request index once.
    last_start = {e["point"]: e["t"] for e in b.points if e["event"] == "start"}
    sent = Counter((r["point"], r["i"]) for r in b.requests if r["t_send"] >= last_start[r["point"]])
    assert sent and all(n == 1 for n in sent.values()), sent
    assert json.loads((out / "manifest.json").read_text())["kind"] == "serving-ledger/bundle"
