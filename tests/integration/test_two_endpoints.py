"""Two endpoints against the real embedded vLLM. Only one engine runs in this session, so two
URLs of it (127.0.0.1 and localhost) are THE SAME SERVER: counted as two engines, its requests
and throughput would be summed twice, so the collector refuses it before anything is written.
Rounds against two real servers (runs/round-12) and the stand-in's two-endpoint tests keep the
engines apart by their `endpoint` label."""

from __future__ import annotations

import pytest

from tests.conftest import run_bench

pytestmark = pytest.mark.engine


def test_one_engine_named_twice_is_refused_before_anything_is_written(engine, tmp_path):
    one, two = engine.endpoint, engine.endpoint.replace("127.0.0.1", "localhost")
    out = tmp_path / "bundle"
    proc = run_bench("run", "--endpoint", one, "--endpoint", two, "--concurrency", "2",
                     "--requests-per-point", "4", "--input-len", "16", "--output-len", "8",
                     "--out", str(out), timeout=120, check=False)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and one in lines[0] and two in lines[0] and "named twice" in lines[0]
    assert not out.exists()
