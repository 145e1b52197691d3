"""Fixtures of the whole suite: one real embedded vLLM per test session (integration tests
marked `engine` only), the checkout's paths, and the SIGINT disposition every test inherits.

Layout: tests/unit/{bundle,bench,report} mirror the packages and need neither the engine nor
anything outside the checkout (`make unit`); tests/integration holds the engine tests, the
browser test, PDF rendering, rounds run as subprocesses and load tests (`make test` runs both).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fuzzbudget import pytest_configure  # noqa: F401 - the fuzz tests' time budget

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"


def output_tokens(r: dict) -> int | None:
    """Output tokens of one request record: the server's usage count, else the sum over its
    chunks (the oracle the RequestTable's output column and the fault tests are held against)."""
    u = r.get("usage") or {}
    if "completion_tokens" in u:
        return int(u["completion_tokens"])
    ns = [n for _, n in r.get("chunks") or []]
    return sum(ns) if ns and all(n is not None for n in ns) else None

# Tests interrupt rounds with SIGINT and expect Python's KeyboardInterrupt in the child. A
# suite started from a process that ignores SIGINT (a background job, some CI runners) would
# pass SIG_IGN on through exec; a handler here is reset to the default in every child instead.
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)

# The session engine: a shrunken KV pool (24 blocks of 128 tokens) so that requests wait
# and KV usage reaches 1.0 under load, the MFU counters on, prefix caching on (default).
SESSION_ENGINE_FLAGS = ["--enable-mfu-metrics", "--num-gpu-blocks-override", "24",
                        "--enable-prompt-tokens-details"]   # usage reports cached prompt tokens


@pytest.fixture(scope="session")
def engine(tmp_path_factory):
    """A real embedded vLLM server, started once per test session and always stopped."""
    from bench.engine import ENGINE_PYTHON, TINY_MODEL_DIR, Engine
    if not ENGINE_PYTHON.exists() or not (TINY_MODEL_DIR / "config.json").exists():
        pytest.fail("the embedded engine is not set up: run `make setup` (make test does)")
    eng = Engine.embedded(flags=SESSION_ENGINE_FLAGS)
    log = tmp_path_factory.mktemp("engine") / "server.log"
    eng.start(log, timeout_s=300)
    eng.session_log = log
    try:
        yield eng
    finally:
        eng.stop()


def run_bench(*args: str, timeout: float = 600, env: dict | None = None,
              check: bool = True) -> subprocess.CompletedProcess:
    """Run `python -m serving_ledger ARGS` as a user would, returning the completed process."""
    proc = subprocess.run([sys.executable, "-m", "serving_ledger", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})
    if check and proc.returncode != 0:
        raise AssertionError(f"bench {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc
