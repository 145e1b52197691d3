"""The metrics sampler's own record over a window: its scrapes, its gaps, their interval and latency."""

from __future__ import annotations

import statistics
from itertools import pairwise
from typing import Sequence

from report.derive.series.scrapes import (
    Scrape,
    check_window,
    in_window,
    scrape_gaps,
    scrapes_in_window,
    window_text,
)
from report.ledger import Absent
from report.registry import round_quantity


def _attempts(scrapes: Sequence[Scrape], t_start: float | None, t_end: float | None) -> list[Scrape]:
    check_window(t_start, t_end)
    return sorted((s for s in scrapes if in_window(s, t_start, t_end)), key=lambda s: s["t"])


# Over the whole round (no window) they are the round's r.scrapes and r.scrape_gaps.
@round_quantity(key="scrapes")
def scrape_count(scrapes: Sequence[Scrape], t_start: float | None = None,
                 t_end: float | None = None) -> int:
    """Number of scrape attempts (successful and failed) in the window."""
    return len(_attempts(scrapes, t_start, t_end))


@round_quantity(key="scrape_gaps")
def failed_scrape_count(scrapes: Sequence[Scrape], t_start: float | None = None,
                        t_end: float | None = None) -> int:
    """Number of failed scrapes (gaps) in the window."""
    return len(scrape_gaps(scrapes, t_start, t_end))


@round_quantity(unit="s")
def scrape_interval_p50(scrapes: Sequence[Scrape], t_start: float | None = None,
                        t_end: float | None = None) -> float:
    """Median time between consecutive scrape starts (attempts, gaps included) in the window."""
    ts = [s["t"] for s in _attempts(scrapes, t_start, t_end)]
    if len(ts) < 2:
        raise Absent("reason.interval_needs_two", n=len(ts), window=window_text(t_start, t_end))
    return float(statistics.median(b - a for a, b in pairwise(ts)))


def _latencies(scrapes: Sequence[Scrape], t_start: float | None, t_end: float | None) -> list[float]:
    lat = [s["dt"] for s in scrapes_in_window(scrapes, t_start, t_end) if s.get("dt") is not None]
    if not lat:
        raise Absent("reason.no_ok_scrape_latency", window=window_text(t_start, t_end))
    return lat


@round_quantity(unit="s")
def scrape_latency_p50(scrapes: Sequence[Scrape], t_start: float | None = None,
                       t_end: float | None = None) -> float:
    """Median duration of a successful /metrics scrape in the window."""
    return float(statistics.median(_latencies(scrapes, t_start, t_end)))
