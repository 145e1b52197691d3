"""A sessions workload against the real embedded vLLM: two users, conversations of three turns,
each turn resending the whole history; the server's own cached-token counts show the resent
prefix was token-exact, and the report's per-turn quantities read them."""

from __future__ import annotations

import pytest

from bundle.store.reader import read_bundle
from report.judge.verdicts import read_bundle_ledger
from tests.conftest import run_bench

pytestmark = pytest.mark.engine

PLAN = """
id = "sessions-test"
seed = 23
[engine]
mode = "embedded"
[workload]
kind = "sessions"
api = "completions"
chunk_token_counts = "token_ids"
input_len = 100
output_len = 16
turns = 3
think_ms = 50
[sweep]
concurrency = [2]
requests_per_point = 6
warmup_requests = 0
cooldown_s = 0
"""


@pytest.fixture(scope="module")
def sessions_bundle(engine, tmp_path_factory):
    d = tmp_path_factory.mktemp("sessions")
    (d / "plan.toml").write_text(PLAN)
    run_bench("run", "--plan", str(d / "plan.toml"), "--endpoint", engine.endpoint,
              "--out", str(d / "bundle"))
    return d / "bundle"


def test_each_user_resends_its_history_and_the_server_serves_it_from_the_cache(sessions_bundle):
    reqs = read_bundle(sessions_bundle).requests
    assert len(reqs) == 6 and all(r["status"] == "ok" for r in reqs)
    by_session: dict[int, list[dict]] = {}
    for r in sorted(reqs, key=lambda r: r["i"]):
        by_session.setdefault(r["session"], []).append(r)
    assert max(len(t) for t in by_session.values()) == 3
    for turns in by_session.values():
        assert [r["turn"] for r in turns] == list(range(len(turns)))
        assert [r["think_s"] is None for r in turns] == [k == 2 for k in range(len(turns))]
        for prev, cur in zip(turns, turns[1:]):
            # The server counted the previous prompt, its reply and new text of 100 tokens.
            assert cur["usage"]["prompt_tokens"] == cur["input_len"]
            assert cur["input_len"] == prev["input_len"] + prev["usage"]["completion_tokens"] + 100
        for r in turns[2:]:
            # The cache served whole blocks of the resent history, never more than it.
            cached = r["usage"]["prompt_tokens_details"]["cached_tokens"]
            assert 0 < cached <= turns[1]["input_len"] + turns[1]["usage"]["completion_tokens"]


def test_the_report_derives_the_turns_from_the_bundle(sessions_bundle):
    rd, led = read_bundle_ledger(sessions_bundle)
    pid = rd.points[0].pid
    counts = led.value_of(f"p.{pid}.session_turn_requests")
    assert sum(counts) == 6 and counts[0] >= 2 and len(counts) >= 3
    hits = led.value_of(f"p.{pid}.session_turn_prefix_hit_rate")
    assert hits[0] == 0 and hits[2] > 0
    assert led.value_of(f"p.{pid}.session_cache_serves_history") is True
    ttft = led.value_of(f"p.{pid}.session_turn_ttft_ms_p50")
    assert all(t is not None and t > 0 for t in ttft)
