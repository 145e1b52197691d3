"""The second signals behind each verdict, on hand-built inputs (labelled so): the client's
measured timing error, requests in flight three ways, host CPU, the log's stats lines, and the
checks that combine them. Each rule is shown firing and staying silent."""

from __future__ import annotations

import datetime as dt

import pytest

from bench.exposition import parse_exposition
from bundle.request_table.table import RequestTable
from report.derive import host
from report.derive import serverlog as LS
from report.derive.clienterror import itl as CE
from report.derive.load import inflight as OC
from report.derive.serverlog import server_log_facts
from report.judge.diagnosis import distortion_check, held_check, saturation_check
from report.ledger import Absent


def request(t_send, chunks, t_end=None, point="p", warmup=False):
    """A hand-built request record: chunk times (s) with one token each."""
    return {"point": point, "i": 0, "warmup": warmup, "t_slot": t_send, "t_sched": None,
            "input_len": 16, "max_tokens": 16, "group": None, "t_send": t_send,
            "t_headers": t_send, "t_first": chunks[0] if chunks else None,
            "t_end": t_end if t_end is not None else (chunks[-1] if chunks else t_send),
            "chunks": [[t, 1] for t in chunks], "status": "ok", "http_status": 200,
            "error": None, "finish_reason": "length", "usage": None, "server_metrics": None}


def lag(t, reads=None, wait=0.0, packet=None, loop=0.001):
    s = {"t": t, "loop_lag_s": loop, "tasks": 3}
    if reads is not None:
        s.update(reads=reads, reads_kernel_stamped=reads, read_wait_max_s=wait)
        if packet is not None:
            s.update(reads_packet_stamped=packet, segments_captured=packet,
                     segments_of_no_stream=0, segments_dropped=0)
    return s


def test_zero_gaps_are_counted_within_a_request_never_across_two():
    # Request 2 starts at the very time request 1 ended: that is not a zero gap of either.
    t = RequestTable.from_records([request(0.0, [0.1, 0.2, 0.2, 0.3]),
                                   request(0.3, [0.3, 0.4])])
    assert CE.zero_gap_chunks(t) == 1
    assert CE.events_received(t) == 6
    assert list(CE.chunk_gaps_ms(t)) == pytest.approx([100, 0, 100, 100])


def test_events_read_alone_are_exact_however_long_they_waited():
    # The stand-in case: one read per event, bytes 80 ms in the socket on a busy host, no
    # packet ring. No event shared a stamp, so none is mistimed: the error is 0, not 80 ms.
    t = RequestTable.from_records([request(0.0, [0.01 * i for i in range(1, 101)])])
    samples = [lag(k * 0.5, reads=50, wait=0.080) for k in range(3)]
    assert CE.mistimed_events(t, samples, client_error_tolerance_ms=1.0) == 0
    gaps = CE.chunk_gaps_ms(t)
    assert CE.quantile_error_ms(gaps, 50, 0.0) == 0.0


def test_co_read_events_count_where_bytes_waited_and_not_where_a_packet_ring_timed_them():
    chunks = [0.1, 0.1, 0.1, 0.2, 0.6, 0.6, 0.6, 0.7]      # two reads of three events
    t = RequestTable.from_records([request(0.0, chunks)])
    waited = [lag(0.0, reads=2, wait=0.050), lag(0.5, reads=2, wait=0.050)]
    assert CE.mistimed_events(t, waited, client_error_tolerance_ms=1.0) == 4
    assert CE.mistimed_events(t, waited, client_error_tolerance_ms=60.0) == 0
    ring = [lag(0.0, reads=2, wait=0.050, packet=2), lag(0.5, reads=2, wait=0.050, packet=2)]
    assert CE.mistimed_events(t, ring, client_error_tolerance_ms=1.0) == 0
    # A client without read counters (an older bundle): its loop delay decides.
    old = [lag(0.0, loop=0.030), lag(0.5, loop=0.0001)]
    assert CE.mistimed_events(t, old, client_error_tolerance_ms=1.0) == 2
    assert CE.coread_share_by_counters(t, waited, 0.0, 1.0) == pytest.approx(4 / 8)


def test_a_quantile_moves_at_most_to_its_neighbours_by_twice_the_mistimed_share():
    gaps = list(range(1, 101))
    assert CE.quantile_error_ms(gaps, 50, 0.0) == 0.0
    # 5 % of events mistimed: at most 10 % of gaps wrong, so p50 lies within p40..p60.
    assert CE.quantile_error_ms(gaps, 50, 0.05) == pytest.approx(9.9)
    assert CE.quantile_error_ms(gaps, 99, 0.05) == pytest.approx(9.9)
    with pytest.raises(Absent):
        CE.quantile_error_ms([], 50, 0.1)


ITL_PAGE = """# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{le="0.01"} %d
vllm:inter_token_latency_seconds_bucket{le="0.025"} %d
vllm:inter_token_latency_seconds_bucket{le="0.05"} %d
vllm:inter_token_latency_seconds_bucket{le="+Inf"} %d
vllm:inter_token_latency_seconds_sum %f
vllm:inter_token_latency_seconds_count %d
"""


def test_the_engine_bucket_holding_a_percentile_and_whether_the_client_falls_inside():
    a = {"t": 0.0, "ok": True, "samples": parse_exposition(ITL_PAGE % (0, 0, 0, 0, 0.0, 0))}
    b = {"t": 10.0, "ok": True, "samples": parse_exposition(ITL_PAGE % (10, 80, 100, 100, 2.0, 100))}
    assert CE.engine_itl_bucket_ms([a, b], 0, 10, 50, "low") == pytest.approx(10.0)
    assert CE.engine_itl_bucket_ms([a, b], 0, 10, 50, "high") == pytest.approx(25.0)
    assert CE.engine_itl_bucket_ms([a, b], 0, 10, 99, "low") == pytest.approx(25.0)
    assert CE.outside_bucket(18.0, 10.0, 25.0) == 0.0
    assert CE.outside_bucket(5.0, 10.0, 25.0) == pytest.approx(0.5)


def test_requests_in_flight_by_the_client_and_the_share_of_life_inside_the_engine():
    reqs = RequestTable.from_records([request(0.0, [1.0], t_end=2.0), request(1.0, [2.0], t_end=4.0)])
    assert OC.client_inflight_mean(reqs, 0.0, 4.0) == pytest.approx((2 + 3) / 4)
    assert OC.client_lifetime_ms_mean(reqs) == pytest.approx(2500.0)
    assert OC.engine_life_share(1500.0, 2500.0, 20, 20) == pytest.approx(0.6)
    with pytest.raises(Absent, match="not describe the same requests"):
        OC.engine_life_share(145.0, 726.0, 5, 13)     # a short point's two sides: not one population
    assert OC.inflight_at(reqs, 1.5) == 2
    assert OC.inflight_growth(reqs, 0.5, 3.0) == pytest.approx((1 - 1) / 2.5)
    assert OC.send_span(reqs, 0.0, 4.0) == (0.0, 1.0)


def test_host_cpu_shares_from_cumulative_counters():
    samples = [{"t": 0.0, "cores": 2, "cpu_busy_s": 10.0, "cpu_total_s": 20.0, "client_cpu_s": 1.0,
                "engine_cpu_s": 5.0},
               {"t": 10.0, "cores": 2, "cpu_busy_s": 28.0, "cpu_total_s": 40.0, "client_cpu_s": 1.5,
                "engine_cpu_s": 20.0}]
    assert host.engine_cpu_share(samples, 0, 10) == pytest.approx(15 / 20)
    assert host.client_cpu_cores(samples, 0, 10) == pytest.approx(0.05)
    assert host.host_cpu_busy_share(samples, 0, 10) == pytest.approx(18 / 20)
    with pytest.raises(Absent):
        host.engine_cpu_share(samples[:1], 0, 10)


def test_stats_lines_land_on_the_bundle_clock():
    t0 = dt.datetime(2026, 11, 29, 15, 40, 0, tzinfo=dt.timezone.utc).timestamp()
    log = ("(APIServer pid=1) INFO 11-29 15:40:34 [loggers.py:335] Engine 000: Avg prompt "
           "throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 53 reqs, "
           "Waiting: 11 reqs, CPU KV cache usage: 100.0%\n")
    stats = list(server_log_facts(log).stats_lines)
    assert LS.stats_line_time(stats[0].timestamp, 2026, t0) == pytest.approx(34.0)
    assert LS.log_peak(stats, 2026, t0, 30, 40, "waiting") == 11
    assert LS.log_peak(stats, 2026, t0, 30, 40, "kv_cache_usage_pct") == 100.0
    with pytest.raises(Absent):
        LS.log_peak(stats, 2026, t0, 40, 50, "waiting")


def getter(**values):
    return lambda name: values.get(name)


def test_a_gauge_the_counter_contradicts_is_stale_not_a_point_not_held():
    held, notes = held_check(getter(client_held_fraction=1.0, held_concurrency_fraction=0.26,
                                    engine_little_held_fraction=0.97, engine_held_fraction=0.96), 3)
    assert held is True and notes == ["gauge_stale"]
    held, notes = held_check(getter(client_held_fraction=1.0, engine_little_held_fraction=0.55,
                                    engine_held_fraction=0.55), 3)
    assert held is True and notes == ["held_outside_engine"]
    # Gauges within a tenth of the counter are not called stale.
    held, notes = held_check(getter(client_held_fraction=1.0, held_concurrency_fraction=1.0,
                                    engine_little_held_fraction=0.95, engine_held_fraction=0.987), 3)
    assert held is True and notes == []
    held, _ = held_check(getter(client_held_fraction=0.6, held_concurrency_fraction=0.5,
                                engine_little_held_fraction=0.55), 8)
    assert held is False
    held, _ = held_check(getter(held_concurrency_fraction=0.5), 8)     # gauges alone (older bundle)
    assert held is False


def test_distortion_needs_the_measured_error_and_a_second_signal():
    big = dict(itl_error_share_p50=0.7, itl_error_share_p99=0.6, mistimed_share=0.9)
    assert distortion_check(getter(**big, coread_share_by_counters=0.9)) == (False, [])
    assert distortion_check(getter(**big, coread_share_by_counters=0.0)) == \
        (True, ["client_error_counters_disagree"])
    assert distortion_check(getter(**big)) == (None, ["client_error_unconfirmed"])
    # A resolving engine bucket overrides the counters, both ways.
    inside = dict(engine_itl_ms_p50_low=10.0, client_outside_engine_itl_p50=0.0)
    assert distortion_check(getter(**big, **inside, coread_share_by_counters=0.9)) == \
        (True, ["client_error_engine_agrees"])
    # The first bucket (from 0) resolves nothing.
    first = dict(engine_itl_ms_p50_low=0.0, client_outside_engine_itl_p50=0.0)
    assert distortion_check(getter(**big, **first, coread_share_by_counters=0.9)) == (False, [])
    assert distortion_check(getter(itl_error_share_p50=0.0, itl_error_share_p99=0.01)) == (True, [])
    # A small error whose client percentile lies outside a resolving bucket: the sentence names
    # that percentile (the demo's p99, 24 % outside, beside a p50 in the first bucket).
    small = dict(itl_error_share_p50=0.0, itl_error_share_p99=0.01)
    p99_out = dict(engine_itl_ms_p50_low=0.0, client_outside_engine_itl_p50=0.0,
                   engine_itl_ms_p99_low=10.0, client_outside_engine_itl_p99=0.244)
    assert distortion_check(getter(**small, **p99_out)) == (True, ["client_apart_error_small_p99"])
    p50_out = dict(engine_itl_ms_p50_low=5.0, client_outside_engine_itl_p50=0.73)
    assert distortion_check(getter(**small, **p50_out)) == (True, ["client_apart_error_small"])


def test_an_open_loop_over_capacity_is_over_saturated_and_one_below_is_not():
    over = getter(inflight_growth=20.0, send_span_s=15.0, send_rate=80.0, finish_over_send=0.4,
                  ttft_trend=5.0)
    assert saturation_check(over) == (False, [])
    under = getter(inflight_growth=0.0, send_span_s=15.0, send_rate=4.0, finish_over_send=1.0,
                   ttft_trend=1.0)
    assert saturation_check(under) == (True, [])
    # The queue grew but the engine kept finishing what was sent: said, not failed.
    grew = getter(inflight_growth=20.0, send_span_s=15.0, send_rate=80.0, finish_over_send=0.99,
                  ttft_trend=1.1)
    assert saturation_check(grew) == (True, ["queue_grew_engine_kept_up"])
