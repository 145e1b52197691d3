"""Trace replay and a ShareGPT dataset against the real embedded vLLM: the hand-built Mooncake
fixture sent at its scheduled times (scaled), each request at its own lengths and shared
blocks; the hand-built ShareGPT fixture's kept conversation sent with its reply's length."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.datasets import model_token_counter
from bench.engine import TINY_MODEL_DIR
from bundle.store.reader import read_bundle
from report.judge.verdicts import read_bundle_ledger
from tests.conftest import run_bench

pytestmark = pytest.mark.engine

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traffic"
# The trace at its own pace: the client opens its packet ring before the schedule starts, so
# the first gap (250 ms) is kept too.
TIME_SCALE = 1.0

TRACE_PLAN = f"""
id = "trace-test"
seed = 5
[engine]
mode = "embedded"
[workload]
kind = "trace"
trace = "mooncake-tiny.jsonl"
format = "mooncake"
time_scale = {TIME_SCALE}
[sweep]
warmup_requests = 0
cooldown_s = 0
"""

SHAREGPT_PLAN = f"""
id = "sharegpt-test"
seed = 5
[engine]
mode = "embedded"
model_config = "{TINY_MODEL_DIR}/config.json"
[workload]
kind = "sharegpt"
dataset = "sharegpt-cut.json"
[sweep]
concurrency = [1]
requests_per_point = 3
warmup_requests = 0
cooldown_s = 0
"""


def _run(plan: str, tmp: Path, engine) -> Path:
    # The plan lies beside the fixtures' copies: its paths are relative to the plan file.
    for name in ("mooncake-tiny.jsonl", "sharegpt-cut.json"):
        (tmp / name).write_bytes((FIXTURES / name).read_bytes())
    (tmp / "plan.toml").write_text(plan)
    run_bench("run", "--plan", str(tmp / "plan.toml"), "--endpoint", engine.endpoint,
              "--out", str(tmp / "bundle"))
    return tmp / "bundle"


@pytest.fixture(scope="module")
def trace_bundle(engine, tmp_path_factory):
    return _run(TRACE_PLAN, tmp_path_factory.mktemp("trace"), engine)


@pytest.fixture(scope="module")
def sharegpt_bundle(engine, tmp_path_factory):
    return _run(SHAREGPT_PLAN, tmp_path_factory.mktemp("sharegpt"), engine)


def test_each_trace_request_goes_at_its_scheduled_time_with_its_lengths(trace_bundle):
    rows = [json.loads(line) for line in (FIXTURES / "mooncake-tiny.jsonl").read_text().splitlines()]
    b = read_bundle(trace_bundle)
    reqs = sorted(b.requests, key=lambda r: r["i"])
    assert len(reqs) == len(rows) and all(r["status"] == "ok" for r in reqs)
    t0 = reqs[0]["t_sched"]
    for r, row in zip(reqs, rows):
        # Scheduled at the trace's own offset, scaled, and never sent before it.
        assert r["t_sched"] - t0 == pytest.approx((row["timestamp"] - rows[0]["timestamp"]) / 1e3 * TIME_SCALE, abs=1e-6)
        assert r["t_send"] >= r["t_sched"] - 1e-3
        assert r["input_len"] == row["input_length"] == r["usage"]["prompt_tokens"]
        assert r["max_tokens"] == row["output_length"] == r["usage"]["completion_tokens"]
    # Sent on schedule: the median, not the tail (a stall of the shared host, not of the
    # client, delays every send queued behind it; sweeps' open-loop test reads it so too).
    late = sorted(r["t_send"] - r["t_sched"] for r in reqs)
    assert late[len(late) // 2] < 0.01
    # Open loop with no cap: requests 2 and 3 (one time) were in flight together, though the
    # point's nominal concurrency is one.
    assert abs(reqs[2]["t_send"] - reqs[3]["t_send"]) < 0.01
    assert max(reqs[2]["t_send"], reqs[3]["t_send"]) < min(reqs[2]["t_end"], reqs[3]["t_end"])
    # Requests 1, 2 and 4 share blocks 0 and 1; request 2 adds one new block, 3 and 5 share none.
    assert [r["shared_blocks"] for r in reqs] == [0, 2, 0, 2, 0]
    src = b.manifest["workload_source"]
    assert (src["kind"], src["format"], src["read"], src["kept"], src["dropped"]) == \
        ("trace", "mooncake", 5, 5, {})
    assert src["path"].endswith("mooncake-tiny.jsonl") and src["time_scale"] == TIME_SCALE


def test_the_report_reads_a_trace_point_as_an_open_loop(trace_bundle):
    rd, led = read_bundle_ledger(trace_bundle)
    pid = rd.points[0].pid
    # Latencies from the schedule apply: never shorter than those from the send.
    late = led.value_of(f"p.{pid}.late_send_share")
    assert 0 <= late <= 0.2     # a stall of the shared host may hold one send of five
    assert led.value_of(f"p.{pid}.ttft_sched_ms_p50") >= led.value_of(f"p.{pid}.ttft_ms_p50") > 0


def test_a_sharegpt_point_sends_the_kept_conversation_with_its_reply_length(sharegpt_bundle):
    b = read_bundle(sharegpt_bundle)
    src = b.manifest["workload_source"]
    # Of the fixture's three records: one kept, one too short, the cut third not read.
    assert (src["kind"], src["read"], src["kept"]) == ("sharegpt", 2, 1)
    assert src["dropped"] == {"too_short": 1, "cut_tail": 1} and src["cut_bytes"] > 0
    count = model_token_counter(str(TINY_MODEL_DIR))
    reply = count("six seven eight nine ten eleven")
    reqs = b.requests
    assert len(reqs) == 3 and all(r["status"] == "ok" for r in reqs)
    for r in reqs:
        assert r["max_tokens"] == reply == r["usage"]["completion_tokens"]
        assert r["input_len"] == count("one two three four five")


def _method_text(bundle: Path, lang: str) -> str:
    from dataclasses import replace

    from report.publish.compose import compose_round
    from report.publish.render.page import Page
    report = replace(compose_round(bundle, "replay"), sections=["method"])
    return Page(report, lang).assemble("html")


@pytest.mark.parametrize("lang, says", [
    ("en", ["mooncake trace", "mooncake-tiny.jsonl", "whatever was in flight"]),
    ("zh", ["mooncake 轨迹", "mooncake-tiny.jsonl", "不等待在途请求"]),
])
def test_the_method_section_says_which_trace_was_sent(trace_bundle, lang, says):
    text = _method_text(trace_bundle, lang)
    for s in says:
        assert s in text, s
    # The counts and the scale are ledger values, cited with their provenance.
    for key in ("r.source_kept", "r.source_read", "r.source_time_scale"):
        assert f'data-key="{key}"' in text
    # The trace dropped nothing, so no reason is listed.
    assert "left out:" not in text and "剔除的请求" not in text


@pytest.mark.parametrize("lang, says", [
    ("en", ["ShareGPT dataset", "sharegpt-cut.json", "requests left out: a record cut off at the "
            "file&#39;s end, prompt or reply too short"]),
    ("zh", ["ShareGPT 数据集", "sharegpt-cut.json", "剔除的请求：文件末尾被截断的记录、提示或回复过短"]),
])
def test_the_method_section_says_which_dataset_was_sent_and_why_some_were_left_out(
        sharegpt_bundle, lang, says):
    text = _method_text(sharegpt_bundle, lang)
    for s in says:
        assert s in text, s
    assert "trace" not in text.split("ShareGPT")[1][:200]
