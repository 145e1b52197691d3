"""Data parallel: engines kept apart by vLLM's `engine` label and their load balance (report/derive/load/engines.py).

The two-engine scrapes of the first tests are HAND-BUILT in the format our collector writes
(metrics.jsonl: label-keyed samples per scrape), not measured; round 6 is a real one-engine
round, and round 12 a real one of two servers (two endpoints) on one H200."""

from __future__ import annotations

import pytest

from bundle.metric_keys import sample_key
from report.derive.load import engines as OC
from report.ledger import Absent
from tests.conftest import ROOT


def scrape(t: float, **finished: float) -> dict:
    """One answered scrape whose engines (by label) have finished so many requests (hand-built)."""
    return {"t": t, "dt": 0.01, "ok": True,
            "samples": {sample_key(OC.FINISHED, {"engine": e, "finished_reason": "length",
                                                 "model_name": "m"}): n for e, n in finished.items()}}


def test_two_engines_are_kept_apart_and_their_balance_is_max_over_mean():
    # Engine 0 finishes 30 requests in 10 s, engine 1 10: rates 3 and 1 req/s, mean 2, balance 1.5.
    scrapes = [scrape(0.0, **{"0": 0, "1": 0}), scrape(10.0, **{"0": 30, "1": 10})]
    assert OC.engines_seen(scrapes, 0.0, 10.0) == 2
    assert OC.engine_load_balance(scrapes, 0.0, 10.0) == pytest.approx(1.5)
    even = [scrape(0.0, **{"0": 0, "1": 0}), scrape(10.0, **{"0": 20, "1": 20})]
    assert OC.engine_load_balance(even, 0.0, 10.0) == pytest.approx(1.0)


def test_one_engine_has_no_balance_and_no_counter_says_so():
    scrapes = [scrape(0.0, **{"0": 0}), scrape(10.0, **{"0": 30})]
    assert OC.engines_seen(scrapes, 0.0, 10.0) == 1
    with pytest.raises(Absent) as e:
        OC.engine_load_balance(scrapes, 0.0, 10.0)
    assert e.value.reason.code == "reason.one_engine"
    with pytest.raises(Absent) as e:
        OC.engines_seen([{"t": 0.0, "dt": 0.01, "ok": True, "samples": {}}], 0.0, 1.0)
    assert e.value.reason.code == "reason.no_finished_counter"
    idle = [scrape(0.0, **{"0": 5, "1": 5}), scrape(10.0, **{"0": 5, "1": 5})]
    with pytest.raises(Absent) as e:
        OC.engine_load_balance(idle, 0.0, 10.0)
    assert e.value.reason.code == "reason.no_request_finished_in_window"


def test_round6_is_one_engine_in_its_ledger():
    from bundle.store.reader import read_bundle
    from report.derive.round.read import read_round
    from report.judge.verdicts import build_ledger
    path = ROOT / "runs" / "round-6" / "bundle"
    if not path.is_dir():
        pytest.skip("runs/round-6 is not in this checkout")
    led = build_ledger(read_round(read_bundle(path)))
    assert led.value_of("p.L1024-c64.engines_seen") == 1
    assert led["p.L1024-c64.engine_load_balance"].missing.code == "reason.one_engine"


@pytest.fixture(scope="module")
def round12():
    from bundle.store.reader import read_bundle
    from report.derive.round.read import read_round
    from report.judge.verdicts import build_ledger
    path = ROOT / "runs" / "round-12" / "bundle"
    if not path.is_dir():
        pytest.skip("runs/round-12 is not in this checkout")
    return build_ledger(read_round(read_bundle(path)))


def _points(led) -> list[str]:
    return sorted({k.split(".")[1] for k in led.values if k.startswith("p.") and k.endswith(".engine_count")})


def test_round12_pool_is_each_engines_own_and_no_restart(round12):
    # Two servers state their own cache_config_info (labels differing by `endpoint` alone):
    # that is two engines, not a server restarted with other settings.
    led = round12
    restarted = [k for k, v in led.values.items()
                 if v.missing is not None and v.missing.chain()[1].code == "reason.cache_config_changed"]
    assert not restarted
    assert led.value_of("r.block_size") is not None
    pool = led.value_of("r.pool_tokens_metrics")
    for pid in _points(led):
        assert led.value_of(f"p.{pid}.engine_count") == 2
        pools = [led.value_of(f"p.{pid}.engine{k}.engine_pool_tokens") for k in (0, 1)]
        assert pools == [pool, pool]      # each engine's own pool, never their sum
    assert led.value_of("r.pool_agreement") is not None


def test_round12_kv_usage_is_a_share_of_one_engines_pool(round12):
    led = round12
    usage = {k: v.value for k, v in led.values.items()
             if k.endswith(("kv_usage_p50", "kv_usage_peak", "kv_usage_mean")) and v.value is not None}
    assert usage and all(0 <= u <= 1 for u in usage.values())
    tol = led.value_of("r.rule_prediction_tol")
    for pid in _points(led):
        each = [led.value_of(f"p.{pid}.engine{k}.engine_kv_usage_p50") for k in (0, 1)]
        p50 = led.value_of(f"p.{pid}.kv_usage_p50")
        assert min(each) - 1e-9 <= p50 <= max(each) + 1e-9     # the engines' mean, not their sum
        # Each engine holds C / 2 requests in its own pool: the model agrees with the gauge.
        expected = led.value_of(f"p.{pid}.kv_expected_median")
        assert abs(p50 / expected - 1) <= tol


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_round12_page_one_says_several_engines_shared_one_gpu(lang):
    import re
    from html import unescape

    from report.publish.compose import compose_round
    from report.publish.render.page import Page
    from report.words import section
    path = ROOT / "runs" / "round-12" / "bundle"
    if not path.is_dir():
        pytest.skip("runs/round-12 is not in this checkout")
    html = Page(compose_round(path, "round-12"), lang).assemble("html")
    text = unescape(re.sub(r"<[^>]+>", "", html))
    # The sentence's lead (its bold words, before the first number) is on the page, in the
    # conclusion (before the diagnosis heading): the predicate engine_count > 1 and one GPU held.
    lead = section("prose", lang)["summary_engines"].split("{{")[0].split("**")[1]
    conclusion = text[:text.index(section("prose", lang)["diagnosis_01"].lstrip("# ").strip())]
    assert lead in conclusion
    # The KV section says its usage is a share of one engine's pool.
    assert section("prose", lang)["kv_engines"].split("{{")[0] in text


def test_two_endpoints_are_never_compared_as_a_repeat_of_one():
    import json

    from report.judge.compare import differing_keys
    paths = [ROOT / "runs" / r / "bundle" / "manifest.json" for r in ("round-12", "round-6")]
    if not all(p.is_file() for p in paths):
        pytest.skip("runs/round-12 or runs/round-6 is not in this checkout")
    two, one = (json.loads(p.read_text()) for p in paths)
    assert "endpoints" in differing_keys(two, one)
    assert "endpoints" not in differing_keys(one, one)


def test_each_engine_admits_prompts_against_its_own_running_decodes_and_drains_its_own_waiting():
    from report.derive.load.admission import prompts_per_step, queue_ms_wave
    # HAND-BUILT: two engines with 115 decodes each (230 summed), 8,192-token budgets, 1,024-token prompts
    assert prompts_per_step(8192, 230.0, 1024, engine_count=2) == (8192 - 115) / 1024
    assert prompts_per_step(8192, 230.0, 1024) == (8192 - 230) / 1024     # one engine ran them all
    # 64 waiting summed over two engines: each drains 32, half the steps on average
    assert queue_ms_wave(64.0, 8.0, 180.0, engine_count=2) == 32 / 8 * 180.0 / 2
    assert queue_ms_wave(64.0, 8.0, 180.0, engine_count=None) == 64 / 8 * 180.0 / 2


def test_every_servers_log_is_read_and_a_log_that_states_another_pool_is_said(tmp_path):
    import shutil

    from bundle.store.reader import read_bundle
    from report.derive.round.read import read_round
    from report.judge.verdicts import build_ledger
    real = ROOT / "runs" / "round-12" / "bundle"
    rd = read_round(read_bundle(real))
    assert [name for name, _ in rd.other_logs] == ["server.1.log"]
    led = build_ledger(rd)
    assert led.value_of("r.server_logs_read") == 2 and led.value_of("r.server_logs_agree") is True
    # HAND-BUILT: round 12's bundle with server 1's log stating another KV pool size
    copy = tmp_path / "bundle"
    shutil.copytree(real, copy)
    log = (copy / "server.1.log").read_text()
    pool = rd.other_logs[0][1].kv_cache_size_tokens
    assert f"{pool:,}" in log
    (copy / "server.1.log").write_text(log.replace(f"{pool:,}", f"{pool // 2:,}"))
    led = build_ledger(read_round(read_bundle(copy)))
    assert led.value_of("r.server_logs_agree") is False
    assert led.value_of("r.pool_tokens_log") == pool        # server 0's, as the page says


def test_two_engines_sharing_one_gpu_each_step_at_half_their_summed_rate_and_share_its_peak():
    from bundle.store.reader import read_bundle
    from report.derive.gpu.ceiling import step_ms_at_compute_ceiling, step_ms_mean
    from report.derive.round.read import read_round
    from report.judge.verdicts import build_ledger
    # HAND-BUILT: 50 steps a second summed over two engines; a 1,000 GFLOP step at 500 TFLOP/s
    assert step_ms_mean(50.0, engines_stepping=2) == 40.0 and step_ms_mean(50.0) == 20.0
    assert step_ms_at_compute_ceiling(1000.0, 500.0, engines_stepping=2, gpus_sampled=1) == 4.0
    assert step_ms_at_compute_ceiling(1000.0, 500.0, engines_stepping=2, gpus_sampled=2) == 2.0
    assert step_ms_at_compute_ceiling(1000.0, 500.0) == 2.0
    # round 12: both servers' step histograms are in the scrapes; each engine's step is about its ITL
    led = build_ledger(read_round(read_bundle(ROOT / "runs" / "round-12" / "bundle")))
    k = "p.L1024-c256."
    assert led.value_of(k + "engines_stepping") == 2
    assert led.value_of(k + "step_ms_mean") == pytest.approx(2e3 / led.value_of(k + "engine_steps_per_s"))
    # (34.6 ms against 38.7 ms; read as one stream of steps it would be 19.3 ms, under the ITL)
    assert 0.8 < led.value_of(k + "engine_itl_ms_mean") / led.value_of(k + "step_ms_mean") < 1.0
