"""The client's own lag inside a point's window: its event-loop delay, how its stream reads were timed, and the timing error they bound."""

from __future__ import annotations

from report.derive.arith import ratio
from report.ledger import Absent
from report.registry import point_quantity


def loop_lag_p99_ms(client_samples: list, t_measure: float, t_end: float) -> float:
    """p99 of the client's own event-loop delay inside the window, ms (the client's lag)."""
    return loop_lag_ms_quantile(client_samples, t_measure, t_end, 99)


@point_quantity(unit="ms")
def client_lag_ms_p50(client_samples: list, measure_window: tuple[float, float]) -> float:
    """Median of the client's own event-loop delay inside the point's window, ms."""
    return loop_lag_ms_quantile(client_samples, *measure_window, 50)


def loop_lag_ms_quantile(client_samples: list, t_measure: float, t_end: float, q: float) -> float:
    """The q-th percentile of the client's event-loop delay inside the window, ms."""
    from report.derive.stats.samples import percentile
    vals = [s["loop_lag_s"] * 1e3 for s in client_samples if t_measure <= s["t"] <= t_end]
    if not vals:
        raise Absent("reason.no_client_lag")
    return percentile(vals, q)


def _read_samples(client_samples: list, t_measure: float, t_end: float) -> list:
    rows = [s for s in client_samples if t_measure <= s["t"] <= t_end and "reads" in s]
    if not rows:
        raise Absent("reason.no_read_counters")
    return rows


@point_quantity(unit="fraction")
def kernel_stamped_read_share(client_samples: list, t_measure: float, t_end: float) -> float:
    """Share of the client's stream reads in the window timed by the kernel's receive stamp."""
    rows = _read_samples(client_samples, t_measure, t_end)
    reads = sum(s["reads"] for s in rows)
    if not reads:
        raise Absent("reason.no_stream_reads")
    return sum(s["reads_kernel_stamped"] for s in rows) / reads


@point_quantity(unit="fraction")
def packet_stamped_read_share(client_samples: list, t_measure: float, t_end: float) -> float:
    """Share of the client's stream reads in the window whose every byte was timed by its own TCP segment's arrival (packet ring)."""
    rows = _read_samples(client_samples, t_measure, t_end)
    if not any("reads_packet_stamped" in s for s in rows):
        raise Absent("reason.no_packet_ring")
    reads = sum(s["reads"] for s in rows)
    if not reads:
        raise Absent("reason.no_stream_reads")
    return sum(s.get("reads_packet_stamped", 0) for s in rows) / reads


def socket_wait_p99_ms(client_samples: list, t_measure: float, t_end: float) -> float:
    """p99 over the window's lag samples of the longest socket-buffer wait of stream bytes timed by their read, ms.

    Each 0.5 s sample holds the longest time bytes waited before the client read them, known
    from kernel-stamped reads only; a p99, not the max: one stall of the host is not the rule.
    Reads whose bytes were all timed by their segments' arrival (packet ring) add no wait:
    their times do not depend on when they were read.
    """
    from report.derive.stats.samples import percentile
    rows = [s for s in _read_samples(client_samples, t_measure, t_end) if s["reads_kernel_stamped"]]
    if not rows:
        raise Absent("reason.no_kernel_stamp")
    return percentile([s["read_wait_max_s"] * 1e3 for s in rows], 99)


def client_timing_error_bound_ms(client_samples: list, t_measure: float, t_end: float) -> float:
    """How late the client may have timed a chunk in the window, ms.

    Every read kernel-stamped: the p99 socket-buffer wait of bytes timed by their read (a
    read that holds several events gives the older ones the newest one's stamp; a lone event
    is timed exactly; bytes timed by their own segment's arrival wait for nothing, so with
    every read segment-stamped the bound is 0). Otherwise: the p99 of the event-loop delay
    (a chunk is timed when the loop reads it).
    """
    try:
        if kernel_stamped_read_share(client_samples, t_measure, t_end) == 1.0:
            return socket_wait_p99_ms(client_samples, t_measure, t_end)
    except Absent:
        pass
    return loop_lag_p99_ms(client_samples, t_measure, t_end)


# The point's client lag, each key one function.
@point_quantity(unit="ms")
def client_lag_ms_p99(client_samples: list, t_measure: float, t_end: float) -> float:
    """p99 of the client's own event-loop delay inside the point's window, ms."""
    return loop_lag_p99_ms(client_samples, t_measure, t_end)


@point_quantity(unit="ms")
def socket_wait_ms_p99(client_samples: list, t_measure: float, t_end: float) -> float:
    """p99 of the longest socket-buffer wait of stream bytes timed by their read, inside the point's window, ms."""
    return socket_wait_p99_ms(client_samples, t_measure, t_end)


@point_quantity(unit="ms")
def client_timing_error_ms(client_samples: list, t_measure: float, t_end: float) -> float:
    """How late the client may have timed a chunk inside the point's window, ms."""
    return client_timing_error_bound_ms(client_samples, t_measure, t_end)


@point_quantity(unit="fraction")
def client_lag_share_of_itl(client_timing_error_ms: float, itl_ms_p50: float) -> float:
    """The client's timing error bound as a share of the median ITL."""
    return ratio(client_timing_error_ms, itl_ms_p50)
