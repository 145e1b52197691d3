"""The host's CPU over a point's window, from host.jsonl's cumulative counters: the engine's, the client's, the host's.

Shares are of the host's cores (1.0: every core busy the whole window); the engine's is its
process group's user + system time, so it counts every process the launcher started.
"""

from __future__ import annotations

from report.ledger import Absent
from report.registry import point_quantity, round_quantity


def _ends(host_samples: list, t_start: float, t_end: float, field: str) -> tuple[dict, dict]:
    rows = [s for s in host_samples if t_start <= s["t"] <= t_end and field in s]
    if len(rows) < 2:
        raise Absent("reason.no_host_samples")
    return rows[0], rows[-1]


def _cores_used(host_samples: list, t_start: float, t_end: float, field: str) -> tuple[float, int]:
    """(CPU seconds of FIELD per wall second over the window, the host's cores)."""
    a, b = _ends(host_samples, t_start, t_end, field)
    wall = b["t"] - a["t"]
    if wall <= 0:
        raise Absent("reason.window_empty")
    return (b[field] - a[field]) / wall, b["cores"]


@point_quantity(unit="fraction")
def engine_cpu_share(host_samples: list, t_measure: float, t_end: float) -> float:
    """CPU time of the engine's processes over the window's wall time × the host's cores, at most 1.

    /proc counts each process's CPU time in whole clock ticks, so over a window of a few
    seconds the sum over the engine's processes can pass the wall time by a tick or so each:
    a share past 1 is that rounding, and reads as every core busy.
    """
    used, cores = _cores_used(host_samples, t_measure, t_end, "engine_cpu_s")
    return min(1.0, used / cores)


@point_quantity(unit="")
def client_cpu_cores(host_samples: list, t_measure: float, t_end: float) -> float:
    """CPU time of the client process over the window's wall time (1.0: one core busy throughout)."""
    return _cores_used(host_samples, t_measure, t_end, "client_cpu_s")[0]


@point_quantity(unit="fraction")
def client_wait_share(host_samples: list, t_measure: float, t_end: float) -> float:
    """Share of the window the client's event loop was runnable but waiting for a core (its run-queue wait over wall time)."""
    return _cores_used(host_samples, t_measure, t_end, "client_wait_s")[0]


@point_quantity(unit="fraction")
def host_cpu_busy_share(host_samples: list, t_measure: float, t_end: float) -> float:
    """Share of the host's CPU time that was busy (not idle or waiting for I/O) over the window."""
    a, b = _ends(host_samples, t_measure, t_end, "cpu_busy_s")
    total = b["cpu_total_s"] - a["cpu_total_s"]
    if total <= 0:
        raise Absent("reason.window_empty")
    return (b["cpu_busy_s"] - a["cpu_busy_s"]) / total


@round_quantity(unit="")
def cpu_count(host: dict) -> int:
    """Logical CPU cores of the client host"""
    if host.get("cpu_count") is None:
        raise Absent("reason.not_recorded")
    return host["cpu_count"]
