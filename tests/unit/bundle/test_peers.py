"""Other tools' result files: each format found by its own fields, read as its code defines
them, and anything else refused in one line naming the file, never waited on or written."""

from __future__ import annotations

import json
import os

import pytest

from bundle.peers import (
    AIPERF,
    GUIDELLM,
    VLLM,
    PeerFileError,
    detect,
    read_peer_file,
    round_peer_files,
)
from tests.conftest import ROOT

ROUND14 = ROOT / "runs" / "round-14"
FIX = ROOT / "tests" / "fixtures" / "peers"


def test_vllm_bench_serve_result_of_round_14_is_read_by_its_fields():
    path = ROUND14 / "external" / "vllm-bench-serve-c4.json"
    raw = json.loads(path.read_text())
    [r] = read_peer_file(path)
    assert r.tool == VLLM and r.concurrency == 4 and r.request_rate is None
    # "inf" with a cap: every stream started together
    assert raw["request_rate"] == "inf" and r.starts_together is True
    assert r.values["output_tok_s"] == raw["output_throughput"]
    assert r.values["itl_ms_p50"] == raw["median_itl_ms"] and r.values["itl_ms_p99"] == raw["p99_itl_ms"]
    assert r.values["tpot_ms_p99"] == raw["p99_tpot_ms"] and r.values["ttft_ms_p50"] == raw["median_ttft_ms"]
    # lengths: the mean sent over completed requests (its tokenizer's round trip lands near 128)
    assert r.input_len == raw["total_input_tokens"] / raw["completed"]
    assert r.output_len == 32.0
    # the file is only read
    assert json.loads(path.read_text()) == raw


def test_guidellm_report_gives_one_result_per_benchmark():
    a, b = read_peer_file(FIX / "guidellm-concurrent.json")
    assert (a.tool, a.concurrency, a.request_rate, a.input_len, a.output_len) == (GUIDELLM, 4, None, 128, 32)
    assert a.values == {"output_tok_s": 1000.0, "ttft_ms_p50": 22.0, "ttft_ms_p99": 40.0, "itl_ms_p50": 2.5,
                        "itl_ms_p99": 3.5, "tpot_ms_p50": 3.1, "tpot_ms_p99": 4.2}
    assert a.completed == 500 and a.starts_together is True and a.name.endswith("#0")
    assert (b.concurrency, b.request_rate, b.index) == (None, 2.0, 1)
    assert "itl_ms_p50" not in b.values


def test_aiperf_export_read_with_its_units(tmp_path):
    [r] = read_peer_file(FIX / "aiperf-profile-export.json")
    assert (r.tool, r.concurrency, r.input_len, r.output_len, r.completed) == (AIPERF, 4, 128.0, 32.0, 200)
    assert r.values["itl_ms_p99"] == 3.6 and r.values["output_tok_s"] == 1100.0
    # AIPerf's ITL is per request; it states no TPOT of its own
    assert "tpot_ms_p50" not in r.values
    data = json.loads((FIX / "aiperf-profile-export.json").read_text())
    data["time_to_first_token"] = {"unit": "s", "avg": 0.02, "p50": 0.019, "p99": 0.035}
    data["inter_token_latency"] = {"unit": "furlongs", "avg": 1, "p50": 1, "p99": 1}
    assert detect(data) == AIPERF
    f = tmp_path / "p.json"
    f.write_text(json.dumps(data))
    [r] = read_peer_file(f)
    assert r.values["ttft_ms_p50"] == pytest.approx(19.0) and "itl_ms_p50" not in r.values


@pytest.mark.parametrize("text,said", [
    ('{"a": 1}', "not a result file of vllm-bench-serve, guidellm, aiperf"),
    ("not json", "not JSON"),
    ("[1, 2]", "not a result file"),
    ('{"output_throughput": 1.0, "duration": 2.0, "completed": "many"}', "`completed` is not a count"),
    ('{"output_throughput": 1.0, "duration": 2.0, "completed": 3, "request_rate": -1}', "`request_rate` is -1"),
    ('{"output_throughput": null, "duration": 2.0, "completed": 3}', "without any of throughput"),
    ("[" * 5000 + "]" * 5000, "nested deeper than"),
])
def test_anything_else_is_refused_in_one_line_naming_the_file(tmp_path, text, said):
    f = tmp_path / "x.json"
    f.write_text(text)
    with pytest.raises(PeerFileError) as e:
        read_peer_file(f)
    assert said in str(e.value) and str(f) in str(e.value) and "\n" not in str(e.value)
    assert f.read_text() == text


def test_a_fifo_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "r.json"
    os.mkfifo(fifo)
    with pytest.raises(PeerFileError, match="not a regular file"):
        read_peer_file(fifo)


def test_a_round_reads_its_external_folder_then_the_files_named(tmp_path):
    (tmp_path / "bundle").mkdir()
    assert round_peer_files(tmp_path / "bundle") == []
    (tmp_path / "external").mkdir()
    for name in ("b.json", "a.json", "notes.txt"):
        (tmp_path / "external" / name).write_text("{}")
    got = round_peer_files(tmp_path / "bundle", ("/elsewhere/c.json",))
    assert [os.path.basename(g) for g in got] == ["a.json", "b.json", "c.json"]
