"""Per-point client statistics, pure functions over raw request records.

Definitions (documented in the report's glossary through these docstrings):
- a point's window runs from its `measure` event (first measured request sent) to its
  `end` event; warm-up requests are excluded from latency statistics;
- TTFT is first token-bearing chunk minus send; E2E is last chunk minus send;
- ITL is per token: a chunk carrying k tokens after a gap g contributes k gaps of g/k;
- throughput counts the output tokens whose chunks arrived inside the window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from report.ledger import Absent


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
            out[pid] = Window(pid, s["t"], measures.get(pid, s["t"]), s["t"], "incomplete",
                              "the round stopped before this point ended", s.get("settings", {}))
    return out


def requests_of_point(requests: list[dict], window: Window) -> list[dict]:
    """The point's requests from its last run (records sent inside its start..end span)."""
    return [r for r in requests if r.get("point") == window.point
            and (r.get("t_send") is None or window.t_start <= r["t_send"] <= window.t_end)]


def measured(requests: list[dict]) -> list[dict]:
    """Requests that count: not warm-up, finished without error."""
    return [r for r in requests if not r.get("warmup") and r.get("status") == "ok"]


def failed(requests: list[dict]) -> list[dict]:
    """Non-warm-up requests that ended with an error."""
    return [r for r in requests if not r.get("warmup") and r.get("status") != "ok"]


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation, as numpy's default."""
    if not values:
        raise Absent("no samples")
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def mean(values: list[float]) -> float:
    """Arithmetic mean."""
    if not values:
        raise Absent("no samples")
    return sum(values) / len(values)


def ttfts_ms(requests: list[dict]) -> list[float]:
    """Time to first token per request: first token-bearing chunk minus send, in ms."""
    return [(r["t_first"] - r["t_send"]) * 1e3 for r in requests if r.get("t_first") is not None]


def e2es_ms(requests: list[dict]) -> list[float]:
    """End-to-end latency per request: last token-bearing chunk minus send, in ms."""
    return [(r["chunks"][-1][0] - r["t_send"]) * 1e3 for r in requests if r.get("chunks")]


def slot_waits_ms(requests: list[dict]) -> list[float]:
    """Time a request waited for a client-side concurrency slot (kept apart from latency), ms."""
    return [(r["t_send"] - r["t_slot"]) * 1e3 for r in requests
            if r.get("t_slot") is not None and r.get("t_send") is not None]


def output_tokens(r: dict) -> int | None:
    """Output tokens of a request: the server's usage count, else the sum over its chunks."""
    u = r.get("usage") or {}
    if "completion_tokens" in u:
        return int(u["completion_tokens"])
    ns = [n for _, n in r.get("chunks") or []]
    return sum(ns) if ns and all(n is not None for n in ns) else None


def itl_gaps_ms(requests: list[dict]) -> list[float]:
    """Inter-token latency per token, ms: a chunk of k tokens after gap g gives k gaps of g/k."""
    out: list[float] = []
    for r in requests:
        ch = r.get("chunks") or []
        for (t0, _), (t1, n) in zip(ch, ch[1:]):
            k = n if isinstance(n, int) and n > 0 else 1
            out.extend([(t1 - t0) * 1e3 / k] * k)
    return out


def chunks_without_token_counts(requests: list[dict]) -> int:
    """Chunks whose token count the server did not state (their ITL assumes one token)."""
    return sum(1 for r in requests for _, n in r.get("chunks") or [] if n is None)


def multi_token_chunks(requests: list[dict]) -> int:
    """Chunks that carried more than one token (split evenly in the per-token ITL)."""
    return sum(1 for r in requests for _, n in r.get("chunks") or [] if isinstance(n, int) and n > 1)


def tpots_ms(requests: list[dict]) -> list[float]:
    """Time per output token after the first, per request: (E2E − TTFT)/(tokens − 1), ms."""
    out = []
    for r in requests:
        n = output_tokens(r)
        if r.get("chunks") and n and n > 1:
            out.append((r["chunks"][-1][0] - r["t_first"]) * 1e3 / (n - 1))
    return out


def output_tokens_per_s(all_requests: list[dict], t_measure: float, t_end: float) -> float:
    """Output tokens whose chunks arrived inside the window, per second of window."""
    if t_end <= t_measure:
        raise Absent("the window is empty")
    tokens = sum((n or 1) for r in all_requests if r.get("status") == "ok"
                 for t, n in r.get("chunks") or [] if t_measure <= t <= t_end)
    return tokens / (t_end - t_measure)


def output_tokens_in_window(all_requests: list[dict], t_measure: float, t_end: float) -> int:
    """Output tokens whose chunks arrived inside the window (all requests, warm-up included)."""
    return sum((n or 1) for r in all_requests if r.get("status") == "ok"
               for t, n in r.get("chunks") or [] if t_measure <= t <= t_end)


def total_tokens_per_s(all_requests: list[dict], t_measure: float, t_end: float) -> float:
    """Prompt tokens (credited at first token) plus output tokens inside the window, per second."""
    if t_end <= t_measure:
        raise Absent("the window is empty")
    out_tok = sum((n or 1) for r in all_requests if r.get("status") == "ok"
                  for t, n in r.get("chunks") or [] if t_measure <= t <= t_end)
    prompt = sum((r.get("usage") or {}).get("prompt_tokens", r.get("input_len") or 0)
                 for r in all_requests if r.get("status") == "ok" and r.get("t_first") is not None
                 and t_measure <= r["t_first"] <= t_end)
    return (out_tok + prompt) / (t_end - t_measure)


def requests_per_s(requests: list[dict], t_measure: float, t_end: float) -> float:
    """Measured requests completed inside the window, per second."""
    if t_end <= t_measure:
        raise Absent("the window is empty")
    return sum(1 for r in requests if t_measure <= (r.get("t_end") or -1) <= t_end) / (t_end - t_measure)


def scaling_efficiency(throughput: float, concurrency: int, throughput_at_1: float) -> float:
    """Throughput at C relative to C times the throughput at C=1."""
    if throughput_at_1 <= 0:
        raise Absent("throughput at C=1 is zero")
    return throughput / (concurrency * throughput_at_1)


def token_count_agreement(client_tokens: int, server_tokens: float) -> float:
    """Client-counted tokens minus the server's counter increase (0 means they agree)."""
    return client_tokens - server_tokens
