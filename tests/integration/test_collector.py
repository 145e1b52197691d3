"""Collectors against a real embedded vLLM: bundle contents agree with the server's counters."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from bench.exposition import split_key
from bundle.store.manifest import SCHEMA_VERSION
from bundle.store.reader import read_bundle
from tests.conftest import ROOT, run_bench

pytestmark = pytest.mark.engine


def counter(scrape: dict, name: str) -> float:
    """Sum of a counter's samples over all label sets in one scrape (test helper)."""
    return sum(v for k, v in scrape["samples"].items() if split_key(k)[0] == name)


def vllm_processes(engine) -> list[str]:
    """vLLM server processes other than the session's own engine."""
    out = subprocess.run(["pgrep", "-af", "vllm.entrypoints.openai.api_server"],
                         capture_output=True, text=True).stdout
    own = f"--port {engine.endpoint.rsplit(':', 1)[1]} "
    return [ln for ln in out.splitlines() if "pgrep" not in ln and own not in ln]


@pytest.fixture(scope="module")
def adhoc_bundle(engine, tmp_path_factory):
    out = tmp_path_factory.mktemp("adhoc") / "bundle"
    run_bench("run", "--endpoint", engine.endpoint, "--concurrency", "1,4", "--input-len", "96",
              "--output-len", "24", "--requests-per-point", "8", "--out", str(out))
    return read_bundle(out)


def test_bundle_has_every_request_with_raw_timings(adhoc_bundle):
    b = adhoc_bundle
    assert b.manifest["status"] == "complete"
    # 8 measured + C warm-up requests per point.
    assert len(b.requests) == (8 + 1) + (8 + 4)
    for r in b.requests:
        assert r["status"] == "ok", r["error"]
        assert r["t_send"] < r["t_first"] <= r["chunks"][-1][0] <= r["t_end"]
        assert r["usage"]["prompt_tokens"] == 96
        assert r["usage"]["completion_tokens"] == 24
        # Per-chunk token counts come from the server and add up to its usage count.
        assert sum(n for _, n in r["chunks"]) == 24
        assert r["server_metrics"] and "queue_time_ms" in r["server_metrics"]
    for rec in b.requests:
        assert not any(k in rec for k in ("ttft", "itl", "mean", "p50")), "bundles hold raw samples only"


def test_token_counts_match_the_servers_counters(adhoc_bundle):
    b = adhoc_bundle
    ok = [s for s in b.metrics if s["ok"]]
    assert len(ok) >= 2
    first, last = ok[0], ok[-1]
    assert first["t"] < b.requests[0]["t_send"] and last["t"] > b.requests[-1]["t_end"]
    d_prompt = counter(last, "vllm:prompt_tokens_total") - counter(first, "vllm:prompt_tokens_total")
    d_gen = counter(last, "vllm:generation_tokens_total") - counter(first, "vllm:generation_tokens_total")
    d_ok = (counter(last, "vllm:request_success_total")
            - counter(first, "vllm:request_success_total"))
    assert d_prompt == sum(r["usage"]["prompt_tokens"] for r in b.requests)
    assert d_gen == sum(r["usage"]["completion_tokens"] for r in b.requests)
    assert d_ok == len(b.requests)


def test_metrics_sampled_about_every_second(adhoc_bundle):
    ts = [s["t"] for s in adhoc_bundle.metrics]
    gaps = sorted(b - a for a, b in zip(ts, ts[1:]))
    assert gaps, "at least two scrapes"
    assert 0.8 < gaps[len(gaps) // 2] < 1.3
    assert any("vllm:kv_cache_usage_perc" in k for k in adhoc_bundle.metrics[0]["samples"])


def test_manifest_provenance(adhoc_bundle):
    m = adhoc_bundle.manifest
    assert m["schema_version"] == SCHEMA_VERSION and m["origin"] == "recorded"
    assert m["engine"]["vllm_version"] == "0.32.0"
    assert m["engine"]["mode"] == "endpoint"
    assert m["tool"]["version"] and m["tool"]["git_revision"]
    assert m["host"]["cpu_count"] >= 1
    assert m["gpus"] == [] and m["gpu_absent_reason"]
    assert m["model"]["served_name"] == "tiny"
    assert m["plan"]["sweep"]["concurrency"] == [1, 4]


def test_failed_launch_leaves_no_process_and_a_failed_bundle(engine, tmp_path):
    out = tmp_path / "b"
    proc = run_bench("run", "--server-flags", "--max-model-len 999999999", "--concurrency", "1",
                     "--input-len", "8", "--output-len", "4", "--requests-per-point", "1",
                     "--out", str(out), check=False, timeout=400)
    assert proc.returncode != 0
    assert "engine" in proc.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "failed" and m["status_reason"]
    assert (out / "server.log").exists()
    assert not vllm_processes(engine)


def test_ctrl_c_keeps_the_bundle_and_leaves_no_process(engine, tmp_path):
    out = tmp_path / "b"
    proc = subprocess.Popen([sys.executable, "-m", "serving_ledger", "run", "--concurrency", "2",
                             "--input-len", "32", "--output-len", "64", "--requests-per-point", "400",
                             "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    deadline = time.monotonic() + 300
    # Wait until requests are flowing, then interrupt as a user would.
    while time.monotonic() < deadline:
        p = out / "requests.jsonl"
        if p.exists() and p.stat().st_size > 0:
            break
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    b = read_bundle(out)
    assert b.manifest["status"] == "interrupted"
    assert len(b.requests) >= 1
    assert not vllm_processes(engine)
