"""A whole `python -m serving_ledger run` round over every fault of the stand-in stays
readable (the client's handling of each fault: tests/unit/bench/test_stream_faults.py)."""

from __future__ import annotations

from bench.standin.thread import StandInThread
from bundle.store.reader import read_bundle
from tests.conftest import output_tokens, run_bench

STEP_MS = 10.0
MAX_TOKENS = 6


def test_a_round_over_every_fault_completes_and_stays_readable(tmp_path):
    """`python -m serving_ledger run` against /fault/mix: each request meets the next fault in turn."""
    out = tmp_path / "bundle"
    with StandInThread(step_ms=STEP_MS) as url:
        proc = run_bench("run", "--endpoint", url + "/fault/mix", "--concurrency", "2",
                         "--requests-per-point", "12", "--input-len", "8", "--output-len",
                         str(MAX_TOKENS), "--metrics-interval", "0.5", "--out", str(out),
                         timeout=120)
    assert "(complete)" in proc.stdout
    b = read_bundle(out)
    assert b.manifest["status"] == "complete" and not b.warnings
    assert len(b.requests) == 12 + 2
    errors = [r["error"] for r in b.requests if r["status"] == "error"]
    kinds = {
        "http": sum(e.startswith("HTTP ") for e in errors),
        "malformed": sum(e.startswith("malformed SSE event") for e in errors),
        "error_event": sum(e.startswith("error event in stream") for e in errors),
        "no_done": sum(e.startswith("stream ended without [DONE]") for e in errors),
    }
    assert kinds["http"] >= 3 and kinds["malformed"] >= 2 and kinds["error_event"] >= 1
    assert kinds["no_done"] >= 1
    assert len(errors) >= 8, errors   # 8 of the 12 modes fail; cut fails one way or another
    for r in b.requests:
        assert r["status"] in ("ok", "error") and r["t_end"] is not None
        if r["http_status"] and r["http_status"] != 200:
            assert r["chunks"] == []
    ok = [r for r in b.requests if r["status"] == "ok"]
    assert any(output_tokens(r) == MAX_TOKENS // 2 for r in ok), "the short request"
    assert any(any(n == 3 for _, n in r["chunks"]) for r in ok), "the multi-token request"
    ends = [e for e in b.points if e.get("event") == "end"]
    assert ends and all(e["status"] == "ok" for e in ends)
    assert sum(1 for m in b.metrics if m["ok"]) >= 2
