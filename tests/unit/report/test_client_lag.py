"""The client's account of its own lag: read counters in client.jsonl, and the ledger's bound
on how late it may have timed a chunk."""

from __future__ import annotations

import pytest

from report.derive.timing import client as A
from report.ledger import Absent


def sample(t, lag=0.001, reads=None, stamped=None, wait=0.0, **extra):
    s = {"t": t, "loop_lag_s": lag, "tasks": 3, **extra}
    if reads is not None:
        s.update(reads=reads, reads_kernel_stamped=reads if stamped is None else stamped,
                 read_wait_max_s=wait)
    return s


def test_stamped_reads_bound_the_error_by_the_socket_wait_not_the_loop_delay():
    # A stalled loop (200 ms) while every read is kernel-stamped and bytes waited 1-3 ms.
    rows = [sample(t / 2, lag=0.2 if t == 5 else 0.001, reads=100, wait=0.001 + (t % 3) * 0.001)
            for t in range(20)]
    assert A.kernel_stamped_read_share(rows, 0, 10) == 1.0
    assert A.socket_wait_p99_ms(rows, 0, 10) == pytest.approx(3.0, abs=1e-9)
    assert A.client_timing_error_bound_ms(rows, 0, 10) == pytest.approx(3.0, abs=1e-9)
    assert A.loop_lag_p99_ms(rows, 0, 10) > 100


def test_unstamped_or_partly_stamped_reads_fall_back_to_the_loop_delay():
    part = [sample(t / 2, lag=0.004, reads=10, stamped=9, wait=0.002) for t in range(10)]
    assert A.kernel_stamped_read_share(part, 0, 5) == pytest.approx(0.9)
    assert A.client_timing_error_bound_ms(part, 0, 5) == pytest.approx(4.0)
    none = [sample(t / 2, lag=0.004, reads=10, stamped=0) for t in range(10)]
    with pytest.raises(Absent, match="no read carried a kernel receive stamp"):
        A.socket_wait_p99_ms(none, 0, 5)
    assert A.client_timing_error_bound_ms(none, 0, 5) == pytest.approx(4.0)


def test_reads_timed_by_their_segments_add_no_wait_and_their_share_is_on_record():
    ring = dict(segments_captured=300, segments_of_no_stream=0, segments_dropped=0)
    every = [sample(t / 2, lag=0.2, reads=100, reads_packet_stamped=100, **ring) for t in range(10)]
    assert A.packet_stamped_read_share(every, 0, 5) == 1.0
    assert A.client_timing_error_bound_ms(every, 0, 5) == 0.0     # the stalled loop is not in it
    mixed = [sample(t / 2, reads=100, reads_packet_stamped=90, wait=0.004, **ring) for t in range(10)]
    assert A.packet_stamped_read_share(mixed, 0, 5) == pytest.approx(0.9)
    assert A.client_timing_error_bound_ms(mixed, 0, 5) == pytest.approx(4.0)
    no_ring = [sample(t / 2, reads=100, wait=0.004) for t in range(10)]
    with pytest.raises(Absent, match="no packet ring"):
        A.packet_stamped_read_share(no_ring, 0, 5)


def test_bundles_from_before_the_read_counters_say_so():
    old = [sample(t / 2, lag=0.003) for t in range(10)]
    with pytest.raises(Absent, match="no read counters"):
        A.kernel_stamped_read_share(old, 0, 5)
    assert A.client_timing_error_bound_ms(old, 0, 5) == pytest.approx(3.0)
    idle = [sample(t / 2, reads=0) for t in range(10)]
    with pytest.raises(Absent, match="no stream reads"):
        A.kernel_stamped_read_share(idle, 0, 5)
