"""Other tools' results beside ours: which of our points each one ran, their numbers as they
state them, and ours counted their way (docs/peers.md).

Resolved only in a round that has results of other tools (its external/ folder, or `build
--compare-with`). Each result a point matches is an item of that point (per="peer": keys
`p.<point>.<peer>.peer_*`), citing its file; the point's own quantities here count our samples
the way the other tools count theirs: throughput over the whole run, ramp and drain included,
and TPOT per request.
"""

from __future__ import annotations

import math

import numpy as np

from bundle.peers import PeerResult
from bundle.request_table.table import RequestTable, as_request_table
from report.derive.stats import samples as ST
from report.ledger import Absent
from report.registry import Given, bound_quantity, point_quantity, round_quantity

# A result runs our point when its prompt and output lengths are within this share of the
# point's: a tool that reports the mean it sent (vLLM's totals over completed requests) lands
# a few tokens off the requested length after its tokenizer's round trip.
LENGTH_TOLERANCE = 0.05
# A p99 leaves out the slowest hundredth of the gaps: steps that carry a prefill set it only
# when more than this share of the gaps are such steps.
P99_LEFT_OUT = 0.01
# The events one engine step sends reach the client within this spread of each other: a first
# token this soon after a gap's end came out of the step that ended it.
STEP_SPREAD_S = 0.0005


def peer_matches(peer: PeerResult, settings: dict) -> bool:
    """Whether PEER ran the point whose SETTINGS are given: the same load (closed loop: the same
    concurrency; open loop: the same rate) and lengths within LENGTH_TOLERANCE."""
    rate = settings.get("request_rate")
    if rate:
        if peer.request_rate is None or not math.isclose(peer.request_rate, float(rate), rel_tol=1e-6):
            return False
        cap = settings.get("concurrency")
        if peer.concurrency is not None and cap and peer.concurrency != cap:
            return False
    elif peer.request_rate is not None or peer.concurrency != settings.get("concurrency"):
        return False
    for mine, theirs in ((settings.get("input_len"), peer.input_len), (settings.get("output_len"), peer.output_len)):
        if not mine or theirs is None or abs(theirs - mine) > LENGTH_TOLERANCE * mine:
            return False
    return True


def peer_stated(peer: PeerResult, metric: str) -> float:
    """A metric as the other tool's result file states it, by the tool's own definitions (its output throughput: its output tokens over its whole run, ramp and drain included)."""
    if metric not in peer.values:
        raise Absent("reason.peer_not_stated", tool=peer.tool, metric=metric)
    return peer.values[metric]


# Ours, counted the way the other tools count theirs.

@point_quantity(unit="tok/s")
def whole_run_output_tok_s(measured: RequestTable) -> float:
    """Output tokens of the measured requests over the span from the first one's send to the last one's last chunk (a whole-run count)."""
    lat = ST.request_latencies_ms(measured)
    send = as_request_table(measured).col("t_send")
    tokens = ST.output_token_counts(measured)
    done = ~np.isnan(lat["e2e_ms"]) & ~np.isnan(tokens)
    if not done.any():
        raise Absent("reason.no_samples")
    span = float(np.max(send[done] + lat["e2e_ms"][done] / 1e3) - np.min(send[done]))
    if span <= 0:
        raise Absent("reason.window_empty")
    return float(np.sum(tokens[done])) / span


@point_quantity(unit="ms")
def tpot_ms_p50(measured: RequestTable) -> float:
    """Median over the measured requests of each one's (E2E − TTFT)/(tokens − 1): vLLM's TPOT, one sample per request."""
    return ST.percentile(ST.tpots_ms(measured), 50)


@point_quantity(unit="ms")
def tpot_ms_p99(measured: RequestTable) -> float:
    """p99 over the measured requests of each one's (E2E − TTFT)/(tokens − 1)."""
    return ST.percentile(ST.tpots_ms(measured), 99)


def _tpot_with_first_ms(measured: RequestTable) -> np.ndarray:
    lat = ST.request_latencies_ms(measured)
    tokens = ST.output_token_counts(measured)
    ok = ~np.isnan(lat["e2e_ms"]) & ~np.isnan(tokens) & (tokens > 0)
    return lat["e2e_ms"][ok] / tokens[ok]


@point_quantity(unit="ms")
def tpot_with_first_ms_p50(measured: RequestTable) -> float:
    """Median over the measured requests of each one's E2E/tokens, the first token included: GuideLLM's TPOT."""
    return ST.percentile(_tpot_with_first_ms(measured), 50)


@point_quantity(unit="ms")
def tpot_with_first_ms_p99(measured: RequestTable) -> float:
    """p99 over the measured requests of each one's E2E/tokens, the first token included."""
    return ST.percentile(_tpot_with_first_ms(measured), 99)


@point_quantity(unit="fraction")
def prefill_gap_share_staggered(closed_loop_concurrency: int, modelled_output_len: float) -> float:
    """Share of a stream's token gaps that carry another stream's prefill when C streams start spread: (C − 1)/(output tokens − 1)."""
    if not modelled_output_len or modelled_output_len <= 1:
        raise Absent("reason.no_samples")
    return (closed_loop_concurrency - 1) / (modelled_output_len - 1)


@point_quantity(unit="ms")
def chunk_itl_ms_p99_no_prefill(measured: RequestTable, all_requests: RequestTable) -> float:
    """p99 of the measured requests' gaps between consecutive events in which no other request's first token arrived: the tail of streams whose prefills stay out of one another's decode steps."""
    t, _, off = as_request_table(measured).chunks()
    firsts = as_request_table(all_requests).col("t_first")
    firsts = np.sort(firsts[~np.isnan(firsts)])
    gaps = []
    for i in range(len(off) - 1):
        ct = t[off[i]:off[i + 1]]
        if len(ct) < 2:
            continue
        a, b = ct[:-1], ct[1:]
        # another stream's first token that came out of the step ending this gap (or with it)
        carried = (np.searchsorted(firsts, b + STEP_SPREAD_S, "right")
                   - np.searchsorted(firsts, a, "right")) > 0
        gaps.append((b - a)[~carried])
    kept = np.concatenate(gaps) if gaps else np.zeros(0)
    return ST.percentile(kept * 1e3, 99)


@round_quantity(unit="fraction")
def rule_p99_left_out() -> float:
    """The share of the slowest gaps a p99 leaves out; steps carrying a prefill set it above this share."""
    return P99_LEFT_OUT


# Theirs, as their file states it (each matched result an item of the point).

# Each metric the other tool's file states, as a quantity of each matched result (`peer_<metric>`).
PEER_METRICS = (("output_tok_s", "tok/s"), ("ttft_ms_p50", "ms"), ("ttft_ms_p99", "ms"), ("itl_ms_p50", "ms"),
                ("itl_ms_p99", "ms"), ("tpot_ms_p50", "ms"), ("tpot_ms_p99", "ms"))
for _metric, _unit in PEER_METRICS:
    bound_quantity("point", f"peer_{_metric}", peer_stated, unit=_unit, per="peer", metric=Given(_metric))


@point_quantity(unit="s", per="peer")
def peer_duration_s(peer: PeerResult) -> float:
    """The other tool's run duration, from its first send to its last response."""
    if peer.duration_s is None:
        raise Absent("reason.peer_not_stated", tool=peer.tool, metric="duration")
    return peer.duration_s


@point_quantity(unit="×", per="peer")
def peer_tok_s_over_window(peer_output_tok_s: float, output_tok_s: float) -> float:
    """The other tool's output throughput over ours in the steady window."""
    if output_tok_s <= 0:
        raise Absent("reason.window_empty")
    return peer_output_tok_s / output_tok_s


@point_quantity(unit="×", per="peer")
def peer_tok_s_over_whole_run(peer_output_tok_s: float, whole_run_output_tok_s: float) -> float:
    """The other tool's output throughput over ours counted over our whole run, as it counts its own."""
    if whole_run_output_tok_s <= 0:
        raise Absent("reason.window_empty")
    return peer_output_tok_s / whole_run_output_tok_s
