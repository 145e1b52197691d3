"""Partial bundles are a first-class state: an interrupted point, no or one /metrics scrape, a
worker shard cut short. The ledger computes what the samples allow, the report says in words
what is missing, and every other round of the site still builds.

The bundles are the recorded round-2 bundle (runs/round-2, vLLM on the CPU), cut the way a
Ctrl-C, a dead sampler or a killed worker cuts a round; the cuts are made here, by hand.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bundle.store.reader import read_bundle
from report.derive.round.read import read_round
from report.judge.verdicts import build_ledger
from tests.conftest import ROOT

ROUND = ROOT / "runs" / "round-2"
LAST = "L256-c64"        # the last point of round 2


def _events_of_last() -> dict[str, float]:
    with open(ROUND / "bundle" / "points.jsonl", encoding="utf-8") as f:
        recs = [json.loads(x) for x in f if x.strip()]
    return {r["event"]: r["t"] for r in recs if r.get("point") == LAST}


EVENTS = _events_of_last()
CUT_T = (EVENTS["measure"] + EVENTS["end"]) / 2     # inside LAST's measured window


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "serving_ledger", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def lines_of(p: Path) -> list[str]:
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def write_lines(p: Path, lines: list[str]) -> None:
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "wt", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


def record_time(line: str) -> float:
    rec = json.loads(line)
    return rec["t"] if "t" in rec else rec["t_end"]


def interrupt_at(bundle: Path, t_cut: float) -> None:
    """Cut BUNDLE as a Ctrl-C at T_CUT does: no sample after it, the point's `end` missing."""
    for name in ("points.jsonl", "requests.jsonl.gz", "metrics.jsonl.gz", "client.jsonl"):
        p = bundle / name
        write_lines(p, [x for x in lines_of(p) if record_time(x) <= t_cut])
    m = json.loads((bundle / "manifest.json").read_text())
    m.update(status="interrupted", status_reason="interrupted (Ctrl-C or SIGTERM)")
    (bundle / "manifest.json").write_text(json.dumps(m, indent=2))


@pytest.fixture
def interrupted(tmp_path) -> Path:
    """Round 2 interrupted at CUT_T, inside its last point (cut here, by hand)."""
    b = Path(shutil.copytree(ROUND / "bundle", tmp_path / "round-9" / "bundle"))
    interrupt_at(b, CUT_T)
    return b


def test_interrupted_point_is_measured_up_to_its_last_recorded_request(interrupted):
    full = read_round(read_bundle(ROUND / "bundle"))
    rd = read_round(read_bundle(interrupted))
    p = next(p for p in rd.points if p.pid == LAST)
    assert p.window.status == "interrupted"
    ends = p.requests.col("t_end")
    assert len(p.requests) > 0 and p.window.t_end == pytest.approx(float(np.nanmax(ends)))
    assert p.window.t_measure < p.window.t_end <= CUT_T
    led, full_led = build_ledger(rd), build_ledger(full)
    # Requests that had ended are all there; those in flight at the cut are not.
    assert 0 < led[f"p.{LAST}.requests"].value < full_led[f"p.{LAST}.requests"].value
    got, whole = led[f"p.{LAST}.output_tok_s"].value, full_led[f"p.{LAST}.output_tok_s"].value
    assert 0.5 * whole < got < whole     # a lower bound: in-flight tokens are lost
    # Every point that ended is untouched.
    for q in rd.points[:-1]:
        assert q.window.status == "ok"
        assert led[f"p.{q.pid}.output_tok_s"].value == full_led[f"p.{q.pid}.output_tok_s"].value


def test_point_interrupted_before_any_request_ended_has_absent_statistics(tmp_path):
    b = Path(shutil.copytree(ROUND / "bundle", tmp_path / "b"))
    # After L256-c64 started, before its first request (a warm-up, ramped over 2 s) ended.
    interrupt_at(b, EVENTS["start"] + 0.05)
    rd = read_round(read_bundle(b))
    p = rd.points[-1]
    assert p.window.status == "interrupted" and len(p.requests) == 0
    assert "before any of its requests ended" in p.window.reason
    led = build_ledger(rd)
    assert not led[f"p.{LAST}.output_tok_s"].present
    assert led[f"p.{LAST}.requests"].value == 0


def test_summary_marks_the_interrupted_point(interrupted):
    proc = cli("summary", str(interrupted))
    assert proc.returncode == 0, proc.stderr
    rows = {r.split()[0]: r.split() for r in proc.stdout.splitlines()[1:]}
    assert rows[LAST][1] == "interrupted"
    assert all(r[1] == "ok" for pid, r in rows.items() if pid != LAST)


def test_site_of_runs_builds_with_an_interrupted_bundle_among_them(interrupted, tmp_path):
    runs = interrupted.parent.parent
    shutil.copytree(ROOT / "runs" / "round-1", runs / "round-1")
    out = tmp_path / "site"
    proc = cli("build", "--runs", str(runs), "--out", str(out), "--formats", "html")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    for rid in ("round-1", "round-9"):
        assert (out / rid / "index.en.html").exists() and (out / rid / "index.zh.html").exists()
    en = (out / "round-9" / "index.en.html").read_text()
    zh = (out / "round-9" / "index.zh.html").read_text()
    assert f"These points were interrupted (a start and no end): {LAST}" in en
    assert f"{LAST} (interrupted)" in en          # its row in the full results table
    assert f"以下测量点被中断（有开始、没有结束）：{LAST}" in zh
    assert f"{LAST}（中断）" in zh


@pytest.mark.parametrize("kept", [0, 1], ids=["no-scrape", "one-scrape"])
def test_bundle_with_no_or_one_scrape_builds(tmp_path, kept):
    b = Path(shutil.copytree(ROUND / "bundle", tmp_path / "b"))
    p = b / "metrics.jsonl.gz"
    write_lines(p, lines_of(p)[100:100 + kept])
    led = build_ledger(read_round(read_bundle(b)))
    v = led["r.preemptions"]
    assert not v.present
    assert ("is empty: its end is not after its start" if kept else
            "no /metrics scrape was recorded") in str(v.missing)
    assert led["p.L256-c1.output_tok_s"].present     # the client side does not need scrapes
    proc = cli("build", "--bundle", str(b), "--round", "x", "--out", str(tmp_path / "s"),
               "--formats", "html")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]


def test_worker_shard_cut_short_is_read_up_to_its_last_whole_line(tmp_path):
    """Round 2's requests split over two worker shards (by hand); worker 1 killed mid-line."""
    b = Path(shutil.copytree(ROUND / "bundle", tmp_path / "b"))
    recs = lines_of(b / "requests.jsonl.gz")
    (b / "requests.jsonl.gz").unlink()
    w0, w1 = recs[0::2], recs[1::2]
    write_lines(b / "requests.w0.jsonl", w0)
    # As a round with two workers closes: the manifest lists both shards, not requests.jsonl.
    m = json.loads((b / "manifest.json").read_text())
    m["files"].pop("requests")
    m["files"].update({"requests.w0": "requests.w0.jsonl", "requests.w1": "requests.w1.jsonl"})
    (b / "manifest.json").write_text(json.dumps(m, indent=2))
    keep = len(w1) // 2
    (b / "requests.w1.jsonl").write_text("".join(x + "\n" for x in w1[:keep]) + w1[keep][:70])
    bundle = read_bundle(b)
    assert len(bundle.request_table) == len(w0) + keep
    assert bundle.warnings == [f"requests.w1.jsonl line {keep + 1}: truncated last line skipped"]
    led = build_ledger(read_round(bundle))
    assert led["p.L256-c1.requests"].present and led["p.L256-c64.requests"].present
