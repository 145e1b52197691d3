"""A round's points: their windows, their measured and failed requests, and the round's request counts."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bundle.request_table.table import RequestTable, as_request_table
from report.ledger import Absent
from report.registry import round_quantity

# A point's status when it has a `start` and no `end` event (the round was stopped inside it).
INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class Window:
    """A point's measurement window and settings, read from its point events."""

    point: str
    t_start: float
    t_measure: float
    t_end: float
    status: str
    reason: str | None
    settings: dict

    @property
    def duration(self) -> float:
        return self.t_end - self.t_measure


def point_windows(events: list[dict]) -> dict[str, Window]:
    """Each point's window from its start/measure/end events, in run order (last run wins)."""
    starts, measures, out = {}, {}, {}
    for e in events:
        pid = e.get("point")
        if pid is None:
            continue
        if e["event"] == "start":
            starts[pid] = e
            measures.pop(pid, None)
        elif e["event"] == "measure":
            measures[pid] = e["t"]
        elif e["event"] == "end" and pid in starts:
            s = starts[pid]
            out.pop(pid, None)
            out[pid] = Window(pid, s["t"], measures.get(pid, s["t"]), e["t"], e.get("status", "ok"),
                              e.get("reason"), s.get("settings", {}))
    for pid, s in starts.items():
        if pid not in out:  # started, never ended: the round stopped inside it
            out[pid] = Window(pid, s["t"], measures.get(pid, s["t"]), math.inf, INTERRUPTED,
                              "the round stopped before this point ended", s.get("settings", {}))
    return out


def interrupted_window(window: Window, requests: RequestTable) -> Window:
    """An interrupted point's window, ending when the last of its recorded requests ended.

    Requests are recorded when they end, so those still in flight at the interruption are
    not in the bundle: the window stops where the raw samples stop (at its measure time
    when none was recorded, an empty window whose statistics are absent).
    """
    ends = as_request_table(requests).col("t_end")
    ends = ends[np.isfinite(ends) & (ends >= window.t_measure)]
    t_end = float(ends.max()) if len(ends) else window.t_measure
    reason = (f"the round stopped before this point ended; its window ends at {t_end:.3f} s, "
              "when the last of its recorded requests ended" if len(ends) else
              "the round stopped before this point ended, before any of its requests ended")
    return Window(window.point, window.t_start, window.t_measure, t_end, INTERRUPTED, reason,
                  window.settings)


def requests_of_point(requests: RequestTable, window: Window) -> RequestTable:
    """The point's requests from its last run (records sent inside its start..end span)."""
    requests = as_request_table(requests)
    t = requests.col("t_send")
    inside = np.isnan(t) | ((window.t_start <= t) & (t <= window.t_end))
    return requests.take(requests.point_is(window.point) & inside)


def measured(requests: RequestTable) -> RequestTable:
    """Requests that count: not warm-up, finished without error."""
    requests = as_request_table(requests)
    return requests.take(~requests.col("warmup") & requests.col("ok"))


def failed_requests(requests: RequestTable) -> RequestTable:
    """Non-warm-up requests that ended with an error."""
    requests = as_request_table(requests)
    return requests.take(~requests.col("warmup") & ~requests.col("ok"))


# The round's requests: each point's measured and failed ones (`measured_requests`,
# `failed_requests`), and what the loader of a replayed trace or dataset counted.
@round_quantity(unit="req", key="requests")
def round_requests(measured_requests: RequestTable, failed_requests: RequestTable) -> int:
    """Requests of the round's points that were not warm-up, answered or failed."""
    return len(measured_requests) + len(failed_requests)


@round_quantity(unit="req", key="failed")
def round_failed(failed_requests: RequestTable) -> int:
    """Requests of the round's points that were not warm-up and ended with an error."""
    return len(failed_requests)


def _loader_count(workload_source: dict | None, name: str) -> int:
    """The count NAME the loader recorded in the manifest's workload_source (Absent without one)."""
    if workload_source is None:
        raise Absent("reason.no_replayed_source")
    if workload_source.get(name) is None:
        raise Absent("reason.not_recorded")
    return workload_source[name]


@round_quantity(unit="")
def source_read(workload_source: dict | None = None) -> int:
    """Requests (trace lines or whole conversations) the loader read from the file"""
    return _loader_count(workload_source, "read")


@round_quantity(unit="")
def source_kept(workload_source: dict | None = None) -> int:
    """Requests the loader kept after its limits and filters"""
    return _loader_count(workload_source, "kept")


@round_quantity(unit="×")
def source_time_scale(workload_source: dict | None = None) -> float:
    """The factor a trace's send times were scaled by"""
    # A dataset replays without a clock of its own: only a trace's send times are scaled.
    if workload_source is not None and workload_source.get("kind") != "trace":
        raise Absent("reason.no_replayed_source")
    return _loader_count(workload_source, "time_scale")
