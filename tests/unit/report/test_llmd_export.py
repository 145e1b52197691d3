"""`serving-ledger export --format llmd-benchmark-report`: each point of a committed round as
llm-d's benchmark report v0.2.1, valid against the schema's own definition (vendored under
tests/fixtures/llmd with its source), every number a ledger value of the point."""

from __future__ import annotations

import json

import jsonschema
import pytest

from report.judge.verdicts import read_bundle_ledger
from report.publish.llmd import BR_VERSION, benchmark_reports
from serving_ledger.cli import main
from tests.conftest import ROOT

SCHEMA = json.loads((ROOT / "tests" / "fixtures" / "llmd" / "br_v0_2_1_json_schema.json").read_text())


@pytest.fixture(scope="module")
def round14():
    return read_bundle_ledger(ROOT / "runs" / "round-14")


def test_the_vendored_schema_is_the_version_written():
    assert SCHEMA["title"] == f"Benchmark Report v{BR_VERSION}"
    assert SCHEMA["properties"]["version"]["default"] == BR_VERSION


@pytest.mark.parametrize("round_dir", ["round-14", "round-11"])
def test_each_point_of_a_committed_round_validates_against_the_schema(round_dir):
    rd, led = read_bundle_ledger(ROOT / "runs" / round_dir)
    reports = benchmark_reports(rd, led)
    assert [pid for pid, _ in reports] == [p.pid for p in rd.points if p.window.status == "ok"]
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for _, r in reports:
        errors = [f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(r)]
        assert errors == []


def test_the_schema_catches_what_it_must(round14):
    # a report the schema refuses, so the validation above can fail: a statistic without its mean
    rd, led = round14
    _, r = benchmark_reports(rd, led)[0]
    del r["results"]["request_performance"]["aggregate"]["latency"]["time_to_first_token"]["mean"]
    assert not jsonschema.Draft202012Validator(SCHEMA).is_valid(r)


def test_every_number_is_the_points_ledger_value(round14):
    rd, led = round14
    pid, r = benchmark_reports(rd, led)[1]
    agg = r["results"]["request_performance"]["aggregate"]
    k = f"p.{pid}."
    assert agg["latency"]["time_to_first_token"]["p99"] == led[k + "ttft_ms_p99"].value
    assert agg["latency"]["inter_token_latency"]["p50"] == led[k + "itl_ms_p50"].value
    assert agg["latency"]["inter_token_latency"]["mean"] == led[k + "client_itl_ms_mean"].value
    assert agg["latency"]["request_latency"]["mean"] == led[k + "e2e_ms_mean"].value
    assert agg["throughput"]["output_token_rate"] == {"units": "tokens/s", "mean": led[k + "output_tok_s"].value}
    assert agg["requests"] == {"total": led[k + "requests"].value + led[k + "failed"].value, "failures": 0}
    load = r["scenario"]["load"]["standardized"]
    assert (load["concurrency"], load["input_seq_len"]["value"], load["output_seq_len"]["value"]) == (4, 128, 32)
    assert r["run"]["uid"] == f"round-14.{pid}" and r["scenario"]["stack"][0]["standardized"]["tool_version"] == "0.32.0"


def test_export_writes_new_files_only(tmp_path, capsys):
    out = tmp_path / "br"
    out.mkdir()
    args = ["export", str(ROOT / "runs" / "round-14"), "--format", "llmd-benchmark-report", "--out", str(out)]
    assert main(args) == 0
    written = sorted(p.name for p in out.iterdir())
    assert written == ["L128-c1.json", "L128-c4.json"]
    before = (out / "L128-c1.json").read_text()
    assert main(args) == 2
    assert "exists" in capsys.readouterr().err and (out / "L128-c1.json").read_text() == before
    assert main(["export", str(ROOT / "runs" / "round-14"), "--format", "csv"]) == 2


def test_lengths_of_their_own_are_the_means_sent_not_the_plans():
    # round 11: sessions resend their history, so each request has a prompt of its own
    rd, led = read_bundle_ledger(ROOT / "runs" / "round-11")
    pid, r = benchmark_reports(rd, led)[0]
    isl = r["scenario"]["load"]["standardized"]["input_seq_len"]
    assert isl == {"distribution": "other", "value": led[f"p.{pid}.prompt_tokens_sent_mean"].value}
    assert isl["value"] != rd.points[0].settings["input_len"]
