"""`report build` keeps the pages of rounds whose inputs did not change, and only those."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"


def build(runs: Path, out: Path, *extra: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "serving_ledger", "build", "--runs", str(runs),
                           "--out", str(out), "--formats", "html", *extra], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stderr


def test_unchanged_rounds_are_skipped_and_changed_ones_rebuilt(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "site"
    for n in (1, 2):
        shutil.copytree(FIX / "h200-lockstep", runs / f"round-{n}" / "bundle")
    first = build(runs, out)
    assert "up to date" not in first
    page = out / "round-1" / "index.en.html"
    stamp = page.stat().st_mtime_ns
    key = json.loads((out / "round-1" / "round.json").read_text())["build_key"]
    assert len(key) == 64

    second = build(runs, out)
    assert "round-1: up to date" in second and "round-2: up to date" in second
    assert page.stat().st_mtime_ns == stamp

    # Round 1's bundle changes: round 1 is rebuilt, and so is round 2, which compares with it.
    with open(runs / "round-1" / "bundle" / "server.log", "a") as f:
        f.write("INFO one more line\n")
    third = build(runs, out)
    assert "up to date" not in third
    assert json.loads((out / "round-1" / "round.json").read_text())["build_key"] != key

    # --force rebuilds everything; a missing page is rebuilt too.
    assert "up to date" not in build(runs, out, "--force")
    (out / "round-2" / "index.zh.html").unlink()
    fourth = build(runs, out)
    assert "round-1: up to date" in fourth and "round-2: up to date" not in fourth
    assert (out / "round-2" / "index.zh.html").exists()
