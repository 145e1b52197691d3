"""Other tools' results beside ours: each set beside the point that ran its load and lengths,
their numbers ledger values citing their file, and each reason they differ said only where the
ledger holds it (round 14: vllm bench serve against our collector on one CPU engine)."""

from __future__ import annotations

import json

import pytest

from bundle.peers import VLLM, PeerResult
from bundle.store.reader import read_bundle
from report.derive.peers import peer_matches
from report.derive.round.read import read_round
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
    assert "is near that" in f.texts["en"]
    assert {f"p.L128-c4.{item}.peer_itl_ms_p99", "p.L128-c4.prefill_gap_share_staggered",
            "p.L128-c4.chunk_itl_ms_p99_no_prefill"} <= set(f.evidence)
    # the prediction: our per-event tail without the gaps another stream's first token fell in
    assert led["p.L128-c4.chunk_itl_ms_p99_no_prefill"].value < led["p.L128-c4.chunk_itl_ms_p99"].value
    # no collapse of its ITL: no read-together finding for this one
    assert f"peer_read_L128-c4_{item}" not in said
    # a tail above ours: the prediction does not hold, so it is not said
    high = _variant(tmp_path, median_itl_ms=2.3, p99_itl_ms=40.0)
    rd, led = _round(high)
    item = next(m.item for m in matches(rd) if m.result.path == str(high))
    f = {f.id: f for f in round_peer_findings(led, rd, {})}[f"peer_starts_L128-c4_{item}"]
    assert "is not near that" in f.texts["en"] and "is near that" not in f.texts["en"]


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


def test_each_reason_cites_its_numbers_in_the_same_order_in_both_languages():
    # a number's id on the page is its order of appearance: both languages must agree
    import tomllib

    from report.words import PLACEHOLDER
    texts = {lang: tomllib.loads((ROOT / "report" / "data" / "words" / f"finding.{lang}.toml").read_text())
             for lang in ("en", "zh")}
    codes = [c for c in texts["en"] if c.startswith("peer_")]
    assert len(codes) >= 9
    for code in codes:
        en, zh = ([m.group(1) for m in PLACEHOLDER.finditer(texts[lang][code])] for lang in ("en", "zh"))
        assert en == zh, code


def test_guidellm_and_aiperf_results_are_set_beside_round_14_by_their_definitions():
    # HAND-BUILT result files (tests/fixtures/peers): C=4, 128/32, as round 14's second point
    from report.publish.compose import compose_rounds
    from report.publish.render.page import Page
    fix = ROOT / "tests" / "fixtures" / "peers"
    files = (str(fix / "guidellm-concurrent.json"), str(fix / "aiperf-profile-export.json"))
    [rep] = compose_rounds([(ROUND14 / "bundle", "round-14")], compare_with={"round-14": files})
    found = {(m["point"], m["format"]) for m in rep.facts.peer_matches}
    assert {("L128-c4", "guidellm"), ("L128-c4", "aiperf"), ("L128-c4", "vllm-bench-serve")} <= found
    # GuideLLM's second benchmark (2 req/s) ran no point of the round: named, nothing beside it
    assert [u["format"] for u in rep.facts.peers_unmatched] == ["guidellm"]
    # their ITL is per request: ours counted their way is our per-request TPOT, not per event
    g = next(m for m in rep.facts.peer_matches if m["format"] == "guidellm")
    table = rep.tables[f"peers_L128-c4_{g['item']}"]
    itl_row = table.rows[[r["en"] for r in table.row_labels].index("ITL p99")]
    assert itl_row == ["p.L128-c4.itl_ms_p99", f"p.L128-c4.{g['item']}.peer_itl_ms_p99", "p.L128-c4.tpot_ms_p99"]
    tpot_row = table.rows[[r["en"] for r in table.row_labels].index("TPOT p50")]
    assert tpot_row[2] == "p.L128-c4.tpot_with_first_ms_p50"
    said = [f for f in rep.facts.findings if f["id"] == f"peer_itl_L128-c4_{g['item']}"]
    assert said and "one sample per request" in said[0]["texts"]["en"]
    # no read-together claim for a per-request ITL
    assert not [f for f in rep.facts.findings if f["id"] == f"peer_read_L128-c4_{g['item']}"]
    html = Page(rep, "en").assemble("html")
    assert "guidellm-concurrent.json" in html and "no point of this round ran its load" in html


def test_the_prediction_leaves_out_exactly_the_gaps_another_first_token_fell_in():
    # HAND-BUILT table: stream A's events every 10 ms, one gap 30 ms long in which stream B's
    # first token arrived; B's own gaps 10 ms
    from bundle.request_table.table import as_request_table
    from report.derive.peers import chunk_itl_ms_p99_no_prefill

    def req(rid, send, times):
        return {"id": rid, "point": "x", "t_send": send, "t_first": times[0], "t_end": times[-1], "ok": True,
                "warmup": False, "chunks": [[t, 1] for t in times], "usage_completion": len(times)}
    a = req("a", 0.0, [0.010 * k for k in range(1, 10)] + [0.120, 0.130])     # 0.090 -> 0.120: 30 ms
    b = req("b", 0.100, [0.115, 0.125, 0.135])
    table = as_request_table([a, b])
    got = chunk_itl_ms_p99_no_prefill(table, table)
    assert got == pytest.approx(10.0)
    # without B's first token the 30 ms gap sets the tail
    assert chunk_itl_ms_p99_no_prefill(as_request_table([a]), as_request_table([a])) > 25


def test_a_bad_file_in_a_rounds_external_folder_refuses_that_round_in_one_line(tmp_path, capsys):
    import shutil
    runs = tmp_path / "runs"
    shutil.copytree(ROUND14 / "bundle", runs / "round-14" / "bundle")
    (runs / "round-14" / "external").mkdir()
    bad = runs / "round-14" / "external" / "notes.json"
    bad.write_text('{"benchmarks": "none"}')
    assert main(["build", "--runs", str(runs), "--out", str(tmp_path / "site"), "--formats", "html"]) == 2
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if x.startswith("error: round-14:"))
    assert "notes.json" in line and "not a result file" in line
    assert bad.read_text() == '{"benchmarks": "none"}' and not (tmp_path / "site" / "round-14").exists()
