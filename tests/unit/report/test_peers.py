"""Other tools' results beside ours: each set beside the point that ran its load and lengths,
their numbers ledger values citing their file, and each reason they differ said only where the
ledger holds it (round 14: vllm bench serve against our collector on one CPU engine)."""

from __future__ import annotations

import json

import pytest

from bundle.peers import VLLM, PeerResult
from bundle.store import read_bundle
from report.derive.peers import peer_matches
from report.derive.round_ledger import read_round
from report.judge.peer_gaps import matches, round_peer_findings, same_definition, unmatched
from report.judge.verdicts import build_ledger
from serving_ledger.cli import main
from tests.conftest import ROOT

ROUND14 = ROOT / "runs" / "round-14"
C4 = ROUND14 / "external" / "vllm-bench-serve-c4.json"


def _round(*compare_with):
    rd = read_round(read_bundle(ROUND14 / "bundle"), round_id="round-14", compare_with=tuple(map(str, compare_with)))
    return rd, build_ledger(rd)


@pytest.fixture(scope="module")
def round14():
    return _round()


def test_a_result_matches_the_point_of_its_load_and_lengths():
    closed = {"concurrency": 4, "input_len": 128, "output_len": 32}
    peer = PeerResult(path="x.json", tool=VLLM, concurrency=4, input_len=128.1, output_len=32.0, values={"x": 1})
    assert peer_matches(peer, closed)
    assert not peer_matches(peer, {**closed, "concurrency": 8})
    assert not peer_matches(peer, {**closed, "input_len": 256})
    # lengths within 5 %: a mean 5 tokens off a 64-token prompt is another workload
    assert not peer_matches(PeerResult(path="x", tool=VLLM, concurrency=4, input_len=69, output_len=32), {**closed, "input_len": 64})
    # an open loop matches its rate, not a closed loop of the same concurrency
    opened = {"request_rate": 2.0, "concurrency": 64, "input_len": 128, "output_len": 32}
    assert not peer_matches(peer, opened)
    assert peer_matches(PeerResult(path="x", tool=VLLM, request_rate=2.0, input_len=128, output_len=32), opened)


def test_round_14_sets_each_vllm_result_beside_its_point_citing_its_file(round14):
    rd, led = round14
    assert [(m.point, m.item) for m in matches(rd)] == [("L128-c1", "peer1"), ("L128-c4", "peer2")]
    assert unmatched(rd) == []
    raw = json.loads(C4.read_text())
    v = led["p.L128-c4.peer2.peer_itl_ms_p99"]
    assert v.value == raw["p99_itl_ms"]
    assert [s.file for s in v.sources] == ["round-14/external/vllm-bench-serve-c4.json"]
    assert led["p.L128-c4.peer2.peer_output_tok_s"].value == raw["output_throughput"]
    # ours counted their way sits beside ours: a whole-run count and per-request TPOT
    for key in ("whole_run_output_tok_s", "tpot_ms_p50", "tpot_ms_p99", "chunk_itl_ms_p50"):
        assert led[f"p.L128-c4.{key}"].present
    ratio = led["p.L128-c4.peer2.peer_tok_s_over_whole_run"].value
    assert ratio == pytest.approx(raw["output_throughput"] / led["p.L128-c4.whole_run_output_tok_s"].value)
    assert same_definition(VLLM)["itl_ms_p99"] == "chunk_itl_ms_p99"


def test_a_round_without_results_has_no_peer_value():
    rd = read_round(read_bundle(ROOT / "runs" / "round-1" / "bundle"), round_id="round-1")
    led = build_ledger(rd)
    assert rd.peers == () and not any(".peer" in k or "whole_run" in k for k in led.values)


def test_a_client_that_read_events_together_is_named_where_its_itl_collapsed(round14):
    rd, led = round14
    ids = [f.id for f in round_peer_findings(led, rd, {})]
    # round 14's vllm bench serve stamped events at the read: ITL p50 about 3 µs
    assert "peer_read_L128-c4_peer2" in ids and "peer_read_L128-c1_peer1" in ids
    # its throughput at C=4 is not the whole-run count of ours: said so, not explained away
    assert "peer_tok_s_L128-c4_peer2" in ids
    f = next(f for f in round_peer_findings(led, rd, {}) if f.id == "peer_tok_s_L128-c4_peer2")
    assert "does not explain" in f.texts["en"]


def _variant(tmp_path, **changes):
    data = json.loads(C4.read_text())
    data.update(changes)
    f = tmp_path / "variant.json"
    f.write_text(json.dumps(data))
    return f


def test_started_together_keeps_the_itl_tail_low_only_where_the_ledger_holds_it(tmp_path):
    # HAND-BUILT variants of round 14's C=4 result (the tool's ITL per event as ours, p99 set)
    low = _variant(tmp_path, median_itl_ms=2.3, p99_itl_ms=4.0)
    rd, led = _round(low)
    said = {f.id: f for f in round_peer_findings(led, rd, {})}
    item = next(m.item for m in matches(rd) if m.result.path == str(low))
    f = said[f"peer_starts_L128-c4_{item}"]
    assert "stays near a decode step" in f.texts["en"]
    assert f"p.L128-c4.{item}.peer_itl_ms_p99" in f.evidence and "p.L128-c4.prefill_gap_share_staggered" in f.evidence
    # no collapse of its ITL: no read-together finding for this one
    assert f"peer_read_L128-c4_{item}" not in said
    # a tail above ours: the prediction does not hold, so it is not said
    high = _variant(tmp_path, median_itl_ms=2.3, p99_itl_ms=40.0)
    rd, led = _round(high)
    item = next(m.item for m in matches(rd) if m.result.path == str(high))
    f = {f.id: f for f in round_peer_findings(led, rd, {})}[f"peer_starts_L128-c4_{item}"]
    assert "stays near a decode step" not in f.texts["en"]


def test_a_throughput_the_whole_run_count_explains_is_said_so(tmp_path):
    rd, led = _round()
    whole = led["p.L128-c4.whole_run_output_tok_s"].value
    window = led["p.L128-c4.output_tok_s"].value
    # HAND-BUILT: a result 3 % under our whole-run count and 30 % under our window
    f = _variant(tmp_path, output_throughput=whole * 0.97)
    rd, led = _round(f)
    item = next(m.item for m in matches(rd) if m.result.path == str(f))
    text = {x.id: x for x in round_peer_findings(led, rd, {})}[f"peer_tok_s_L128-c4_{item}"].texts["en"]
    assert "does not explain" not in text
    assert ("the two runs agree" in text) == (abs(whole * 0.97 / window - 1) <= 0.05)


def test_a_result_no_point_ran_is_named_as_such(tmp_path):
    f = _variant(tmp_path, max_concurrency=8)
    rd, led = _round(f)
    assert [r.path for r in unmatched(rd)] == [str(f)]


def test_build_compare_with_refuses_a_bad_file_or_several_rounds_in_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    assert main(["build", "--round", "round-14", "--out", str(tmp_path / "site"), "--compare-with", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err and not (tmp_path / "site").exists()
    assert main(["build", "--out", str(tmp_path / "site"), "--compare-with", str(C4)]) == 2
    assert "one round" in capsys.readouterr().err
