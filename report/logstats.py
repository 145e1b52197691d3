"""The engine's periodic stats lines (running, waiting, KV usage) placed on the bundle's clock.

vLLM logs them every 10 s in the server host's local time (UTC on the hosts here) to the
second, without a year: the year is the bundle's, the clock offset the manifest's t0. They are
the server-side gauges of a round recorded without a /metrics sampler.
"""

from __future__ import annotations

import datetime as dt

from report.ledger import Absent
from report.serverlog import StatsLine


def stats_line_time(timestamp: str, year: int, t0_wall_unix: float) -> float:
    """A stats line's `MM-DD HH:MM:SS` stamp as seconds on the bundle's clock."""
    when = dt.datetime.strptime(f"{year}-{timestamp}", "%Y-%m-%d %H:%M:%S")
    return when.replace(tzinfo=dt.timezone.utc).timestamp() - t0_wall_unix


def _lines_in(stats: list[StatsLine], year: int, t0_wall_unix: float, t_start: float,
              t_end: float, field: str) -> list[float]:
    vals = [getattr(s, field) for s in stats
            if s.timestamp and getattr(s, field) is not None
            and t_start <= stats_line_time(s.timestamp, year, t0_wall_unix) <= t_end]
    if not vals:
        raise Absent("reason.no_stats_lines")
    return vals


def log_peak(stats: list[StatsLine], year: int, t0_wall_unix: float, t_start: float,
             t_end: float, field: str) -> float:
    """The largest value of one field (running, waiting, kv_cache_usage_pct) over the window's stats lines."""
    return float(max(_lines_in(stats, year, t0_wall_unix, t_start, t_end, field)))
