"""The KV pool a point's requests hold, modelled block by block: the blocks at each step of a request, their distribution over C requests, the expected usage (docs/analyses.md items 7, 15, 16).

vLLM's `kv_cache_usage_perc` is `1 − free/(num_gpu_blocks − 1)`: the null
block is excluded, so the usable pool is (num_gpu_blocks − 1) × block_size, while the log's
"KV cache size: N tokens" and `cache_config_info` count num_gpu_blocks × block_size.
A request holds whole blocks. The gauge is published after every step, and a request that
finishes in a step is freed before the gauge is set, so a request is seen at progress
j = 0 … out − 2 (j = decode steps done), holding ceil((in + j)/block) blocks. With steps of
equal length a request spends one step at each progress, so the blocks one request holds
at a random instant follow the distribution of ceil((in + j)/block) over j = 0 … out − 2.
C requests at independent phases hold the sum of C draws; C requests in lockstep (closed
loop, equal lengths, started together) hold C times one draw. The expected steady-state
median is the median of that sum; the expected mean is C × the mean draw. The seeds'
ceil((in + out/2)/block) rounds the mean *tokens* up to blocks, which is not the mean of
the blocks: at in = 1024, out = 256, block 16 it gives 72 blocks against a mean draw of
72.41; at in = 100, out = 300, block 128 it gives 2 blocks against 2.42 (a request spends
29 steps at 1 block, 128 at 2, 128 at 3 and 14 at 4).
Not modelled: steps that take longer than others (a step with a prefill lengthens the
state before it), and the turnaround of a closed-loop slot (after a request's last step
and before its successor's first, the slot holds nothing). Both move the mean usage (the
turnaround lowers it); they move the median only once they cover half the samples. When
turnaround keeps the median running count below C, use the effective concurrency.

Each is a pure function; none returns 0 for a missing input.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from bundle.request_table.table import RequestTable
from report.architecture import theory as T
from report.derive.stats.point import lengths_sent
from report.ledger import Absent


def kv_blocks_at_progress(input_len: int, progress: int, block_size: int) -> int:
    """Blocks one request holds after PROGRESS decode steps: ceil((in + progress) / block)."""
    T._positive("input_len", input_len)
    T._non_negative("progress", progress)
    T._positive("block_size", block_size)
    return math.ceil((input_len + progress) / block_size)


def kv_blocks_distribution(input_len: int, output_len: int, block_size: int) -> dict[int, float]:
    """Share of a request's visible steps (progress 0 … out − 2) at which it holds each block count."""
    T._positive("output_len", output_len)
    if output_len == 1:
        # The prefill step finishes the request; it is freed before the gauge is published.
        return {0: 1.0}
    counts: dict[int, int] = {}
    # ceil((in + j)/B) is a step function of j: count the j in each block level at once.
    j = 0
    last = output_len - 2
    while j <= last:
        b = kv_blocks_at_progress(input_len, j, block_size)
        j_end = min(last, b * block_size - input_len)  # the last progress still at b blocks
        counts[b] = counts.get(b, 0) + (j_end - j + 1)
        j = j_end + 1
    n = output_len - 1
    return {b: c / n for b, c in sorted(counts.items())}


def _convolve(a: Mapping[int, float], b: Mapping[int, float]) -> dict[int, float]:
    out: dict[int, float] = {}
    for x, p in a.items():
        for y, q in b.items():
            out[x + y] = out.get(x + y, 0.0) + p * q
    return out


def _median_of(dist: Mapping[int, float]) -> float:
    """The median of a discrete distribution (the midpoint when the CDF sits exactly at one half)."""
    acc = 0.0
    items = sorted(dist.items())
    for i, (x, p) in enumerate(items):
        acc += p
        if math.isclose(acc, 0.5, abs_tol=1e-12) and i + 1 < len(items):
            return (x + items[i + 1][0]) / 2
        if acc > 0.5:
            return float(x)
    return float(items[-1][0])


def kv_blocks_in_use_distribution(concurrency: int, input_len: int, output_len: int, block_size: int,
                                  lockstep: bool = False) -> dict[int, float]:
    """Distribution of the blocks C requests hold at a random instant: C independent draws, or C times one draw in lockstep."""
    T._positive("concurrency", concurrency)
    if concurrency != int(concurrency):
        raise Absent("reason.block_distribution_whole", concurrency=concurrency)
    one = kv_blocks_distribution(input_len, output_len, block_size)
    if lockstep:
        return {b * int(concurrency): p for b, p in one.items()}
    total: dict[int, float] = {0: 1.0}
    for _ in range(int(concurrency)):
        total = _convolve(total, one)
    return total


def expected_kv_usage_median_fraction(concurrency: int, input_len: int, output_len: int, block_size: int,
                                      usable_pool_tokens: int, lockstep: bool = False) -> float:
    """Expected steady-state median KV usage: the median of the blocks C requests hold (sum of block-rounded draws) × block ÷ usable pool."""
    T._positive("usable_pool_tokens", usable_pool_tokens)
    dist = kv_blocks_in_use_distribution(concurrency, input_len, output_len, block_size, lockstep)
    return _median_of(dist) * block_size / usable_pool_tokens


def effective_concurrency(concurrency: float, server_running_median: float) -> float:
    """Requests that actually hold KV: the median running count when the pool (or anything else) caps it below C, else C."""
    T._positive("concurrency", concurrency)
    T._non_negative("server_running_median", server_running_median)
    return min(concurrency, server_running_median)


def expected_kv_usage_median_fraction_effective(concurrency: int, server_running_median: float, input_len: int,
                                                output_len: int, block_size: int, usable_pool_tokens: int,
                                                lockstep: bool = False) -> float:
    """Expected median KV usage at the effective concurrency min(C, median running); a fractional one interpolates its neighbours."""
    c = effective_concurrency(concurrency, server_running_median)
    lo, hi = math.floor(c), math.ceil(c)

    def at(n: int) -> float:
        if n == 0:
            return 0.0
        return expected_kv_usage_median_fraction(n, input_len, output_len, block_size,
                                                 usable_pool_tokens, lockstep)
    if lo == hi:
        return at(lo)
    return at(lo) + (at(hi) - at(lo)) * (c - lo)


# The KV pool for requests of their own lengths (distributions, datasets, traces, sessions):
# the same models over each request's prompt and output tokens as its usage reports them.
# Invariant: over requests that all share one (in, out) each value equals the nominal one.

def request_peak_tokens_sent_mean(requests: RequestTable, block_size: int) -> float:
    """Mean over the answered requests of the block-rounded KV tokens each holds when it finishes."""
    prompt, out = lengths_sent(requests)
    return float(np.mean([T.request_peak_tokens(int(i), int(o), block_size) for i, o in zip(prompt, out)]))


def request_mean_tokens_sent_mean(requests: RequestTable, block_size: int) -> float:
    """Block-rounded KV tokens a request holds on average while decoding, averaged over the
    answered requests weighted by their output tokens (a request holds its KV for as many steps)."""
    prompt, out = lengths_sent(requests)
    each = [T.request_mean_tokens(int(i), int(o), block_size) for i, o in zip(prompt, out)]
    return float(np.average(each, weights=out))


def block_alignment_waste_tokens_sent(requests: RequestTable, block_size: int, concurrency: int) -> float:
    """KV tokens lost to block rounding at a request's end, mean over the answered requests, times C."""
    prompt, out = lengths_sent(requests)
    return float(np.mean([T.block_alignment_waste_tokens(int(i), int(o), block_size) for i, o in zip(prompt, out)])
                 * concurrency)


def kv_blocks_distribution_sent(requests: RequestTable, block_size: int) -> dict[int, float]:
    """Share of all the answered requests' visible steps (each request's progress 0 … out − 2)
    at which one of them holds each block count: one slot at a random instant."""
    prompt, out = lengths_sent(requests)
    steps: dict[int, float] = {}
    for i, o in zip(prompt.tolist(), out.tolist()):
        for b, share in kv_blocks_distribution(i, o, block_size).items():
            steps[b] = steps.get(b, 0.0) + share * max(o - 1, 0)
    total = sum(steps.values())
    if total == 0:
        return {0: 1.0}         # every request finished in its prefill step
    return {b: n / total for b, n in sorted(steps.items())}


def expected_kv_usage_median_fraction_sent(concurrency: int, server_running_median: float,
                                           requests: RequestTable, block_size: int,
                                           usable_pool_tokens: int) -> float:
    """Expected median KV usage at the effective concurrency min(C, median running), each slot
    drawing from the answered requests' own block counts; a fractional one interpolates."""
    T._positive("usable_pool_tokens", usable_pool_tokens)
    one = kv_blocks_distribution_sent(requests, block_size)
    c = effective_concurrency(concurrency, server_running_median)
    lo, hi = math.floor(c), math.ceil(c)

    probs = np.zeros(max(one) + 1)          # index: blocks one slot holds
    for b, share in one.items():
        probs[b] = share

    def at(n: int) -> float:
        total = np.ones(1)
        for _ in range(n):
            total = np.convolve(total, probs)
        return _median_of({b: float(q) for b, q in enumerate(total) if q > 0}) * block_size / usable_pool_tokens
    if lo == hi:
        return at(lo)
    return at(lo) + (at(hi) - at(lo)) * (c - lo)
