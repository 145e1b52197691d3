"""The KV cache as vLLM 0.32's hybrid allocator lays it out, and what one request holds in it.

vLLM groups the layers that store KV per token by kind (full attention, sliding window),
splits each kind into groups of equal size (padding the last one), and gives all groups one
shared pool of blocks; a block holds `block_size` tokens for every layer slot of a group. A
request holds, per group, the blocks of its whole context (full attention) or at most the
window's blocks plus one, because the window need not start on a block boundary (sliding
window; `SlidingWindowSpec.max_admission_blocks_per_request` with one token in flight).
Capacity is computed from that per-request curve, not from one bytes-per-token figure.
Cross-attention layers hold no KV per text token and are not in the pool.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from report.architecture.modelconfig import FULL, SLIDING
from report.architecture.theory import _non_negative, _positive
from report.ledger import Absent, Reason

# vLLM uses the larger kind's count as the group size when the kinds are this close.
_CLOSE_COUNTS = 1.5


@dataclass(frozen=True)
class KVGroup:
    """One KV cache group: a layer kind, its real layer count and its window (None for full attention)."""

    kind: str
    layers: int
    window: int | None = None
    sink_tokens: int = 0        # StreamingLLM-style sinks kept besides the window (0: none)


@dataclass(frozen=True)
class KVLayout:
    """The groups sharing one block pool, the layer slots per group and the per-layer page geometry."""

    groups: tuple[KVGroup, ...]
    group_size: int             # layer slots per group; groups with fewer layers are padded
    layer_bytes_per_token: int  # one layer's K+V (or MLA latent) bytes per token on one GPU
    block_size: int

    @property
    def windowed(self) -> bool:
        """Whether every group is a sliding window, so a request's KV stops growing."""
        return all(g.window is not None for g in self.groups)

    @property
    def padding_layers(self) -> int:
        """Empty layer slots vLLM adds so that every group has group_size layers."""
        return sum(self.group_size - g.layers for g in self.groups)


def kv_layout(layer_kinds: Sequence[str], sliding_window: int | None, layer_bytes_per_token: int,
              block_size: int, sink_tokens: int = 0) -> KVLayout:
    """vLLM's KV cache groups for these layer kinds: each kind split into groups of equal size, padded."""
    _positive("layer_bytes_per_token", layer_bytes_per_token)
    _positive("block_size", block_size)
    counts = {k: sum(1 for x in layer_kinds if x == k) for k in (FULL, SLIDING)}
    counts = {k: n for k, n in counts.items() if n}
    if not counts:
        raise Absent("reason.no_kv_layer")
    if SLIDING in counts:
        _positive("sliding_window", sliding_window)
    smallest, largest = min(counts.values()), max(counts.values())
    # The "1" of an n:1 pattern sets the group size (vLLM's FIXME: 20 full + 30 sliding would
    # pad); kinds of nearly equal size use the larger count instead.
    group_size = largest if largest < smallest * _CLOSE_COUNTS else smallest
    groups = []
    for kind, n in counts.items():
        parts = math.ceil(n / group_size)
        window = sliding_window if kind == SLIDING else None
        sinks = sink_tokens if kind == SLIDING else 0
        # vLLM deals layers round-robin (layers[i::parts]), so part sizes differ by at most one.
        groups += [KVGroup(kind, n // parts + (1 if i < n % parts else 0), window, sinks) for i in range(parts)]
    return KVLayout(tuple(groups), group_size, layer_bytes_per_token, block_size)


def kv_block_bytes(layout: KVLayout) -> int:
    """Bytes of one pool block: block_size tokens for each of the group's layer slots."""
    return layout.block_size * layout.layer_bytes_per_token * layout.group_size


def kv_pool_blocks(kv_memory_bytes: float, block_bytes: int) -> int:
    """Blocks the KV memory holds (whole blocks, as vLLM sizes its pool)."""
    _positive("kv_memory_bytes", kv_memory_bytes)
    _positive("block_bytes", block_bytes)
    return int(kv_memory_bytes // block_bytes)


def kv_pool_blocks_from_tokens(pool_tokens: int, layout: KVLayout) -> int:
    """Pool blocks from a pool in tokens per group (the log's "KV cache size" for one group): tokens × groups ÷ block."""
    _positive("pool_tokens", pool_tokens)
    return pool_tokens * len(layout.groups) // layout.block_size


def kv_pool_tokens(pool_blocks: int, layout: KVLayout) -> int:
    """Tokens the pool holds per group: blocks ÷ groups × block size (for one group, the whole pool)."""
    _positive("pool_blocks", pool_blocks)
    return pool_blocks // len(layout.groups) * layout.block_size


def group_blocks_held(group: KVGroup, context_tokens: int, block_size: int) -> int:
    """Blocks one request holds in one group at this context: all of them, or the window's (+1 for alignment) plus sinks."""
    _non_negative("context_tokens", context_tokens)
    whole = math.ceil(context_tokens / block_size)
    if group.window is None:
        return whole
    cap = math.ceil(group.window / block_size) + 1 + math.ceil(group.sink_tokens / block_size)
    return min(whole, cap)


def request_kv_blocks(layout: KVLayout, context_tokens: int) -> int:
    """Pool blocks one request holds at this context, summed over the groups."""
    return sum(group_blocks_held(g, context_tokens, layout.block_size) for g in layout.groups)


def request_kv_bytes(layout: KVLayout, context_tokens: int) -> int:
    """KV bytes one request holds in the pool at this context (whole blocks, padding slots included)."""
    return request_kv_blocks(layout, context_tokens) * kv_block_bytes(layout)


def _attended(group: KVGroup, context_tokens: float) -> float:
    """Tokens of context one layer of the group attends to: all of it, or the window and sinks."""
    if group.window is None:
        return context_tokens
    return min(context_tokens, group.window + group.sink_tokens)


def kv_bytes_read_per_request(layout: KVLayout, context_tokens: float) -> float:
    """KV bytes one decode step reads for one request: each real layer's K/V over the tokens it attends to."""
    _non_negative("context_tokens", context_tokens)
    return sum(g.layers * _attended(g, context_tokens) for g in layout.groups) * layout.layer_bytes_per_token


def attended_layer_tokens(layout: KVLayout, context_tokens: float) -> float:
    """Σ over KV layers of the context each attends to (window-limited): what attention FLOPs scale with."""
    _non_negative("context_tokens", context_tokens)
    return sum(g.layers * _attended(g, context_tokens) for g in layout.groups)


def kv_bytes_per_token_at_context(layout: KVLayout, context_tokens: float) -> int:
    """KV bytes one more token of context adds at this context: the layers whose window it still falls in."""
    _non_negative("context_tokens", context_tokens)
    growing = sum(g.layers for g in layout.groups if g.window is None or context_tokens < g.window + g.sink_tokens)
    return growing * layout.layer_bytes_per_token


def max_concurrency_in_pool(pool_blocks: int, layout: KVLayout, input_len: int, output_len: int) -> int:
    """How many requests of in + out tokens the pool holds at once, each at its final context."""
    _positive("pool_blocks", pool_blocks)
    _non_negative("input_len", input_len)
    _non_negative("output_len", output_len)
    need = request_kv_blocks(layout, input_len + output_len)
    _positive("blocks per request", need)
    return pool_blocks // need


def _largest_context(fits, unbounded_why: Reason, start: int) -> int:
    """The largest context n ≥ 0 with fits(n); Absent with UNBOUNDED_WHY when every length fits."""
    if not fits(0):
        return -1
    lo, hi = 0, max(1, start)
    while fits(hi):
        if hi > 2**48:
            raise Absent.because(unbounded_why)
        lo, hi = hi, hi * 2
    while lo + 1 < hi:   # fits(lo), not fits(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def _unbounded(layout: KVLayout) -> Reason:
    """Why no prompt is too long: every layer is windowed."""
    return Reason.of("reason.all_layers_windowed")


def max_input_len_in_blocks(pool_blocks: int, layout: KVLayout, concurrency: int, output_len: int) -> int:
    """Longest prompt that lets C requests of it plus out tokens hold their whole blocks in the pool together."""
    _positive("pool_blocks", pool_blocks)
    _positive("concurrency", concurrency)
    _non_negative("output_len", output_len)
    n = _largest_context(lambda c: concurrency * request_kv_blocks(layout, c) <= pool_blocks,
                         _unbounded(layout), pool_blocks * layout.block_size // concurrency)
    longest = n - output_len
    if longest < 1:
        raise Absent("reason.pool_blocks_too_small",
                     pool_blocks=pool_blocks, concurrency=concurrency, output_len=output_len,
                     block_size=layout.block_size)
    return longest


def max_input_len_in_tokens(pool_tokens: float, layout: KVLayout, concurrency: int, output_len: int) -> int:
    """Longest prompt that lets C requests fit, counting tokens rather than blocks (pool ÷ C − out for full attention)."""
    _positive("pool_tokens", pool_tokens)
    _positive("concurrency", concurrency)
    _non_negative("output_len", output_len)
    # Every group has the same slots per token, so a group's tokens count alike: the pool
    # holds pool_tokens per group, and a request takes min(context, window) in each.
    budget = pool_tokens * len(layout.groups) / concurrency
    n = _largest_context(lambda c: sum(_attended(g, c) for g in layout.groups) <= budget,
                         _unbounded(layout), int(pool_tokens))
    longest = n - output_len
    if longest < 1:
        raise Absent("reason.pool_tokens_too_small",
                     pool_tokens=pool_tokens, concurrency=concurrency, output_len=output_len)
    return longest


def vllm_max_concurrency_logged(pool_blocks: int, layout: KVLayout, max_model_len: int,
                                max_in_flight_tokens: int) -> float:
    """vLLM's logged "Maximum concurrency" at max_model_len: blocks ÷ Σ groups' admission blocks (windows reserve a prefill chunk)."""
    _positive("pool_blocks", pool_blocks)
    _positive("max_model_len", max_model_len)
    _positive("max_in_flight_tokens", max_in_flight_tokens)
    b = layout.block_size
    need = 0
    for g in layout.groups:
        if g.window is None:
            need += math.ceil(max_model_len / b)
        else:
            need += math.ceil(min(g.window - 1 + max_in_flight_tokens, max_model_len) / b) + 1
    return pool_blocks / need


def vllm_kv_cache_tokens_logged(pool_blocks: int, layout: KVLayout, max_model_len: int,
                                max_in_flight_tokens: int) -> int:
    """vLLM 0.32's logged "KV cache size: N tokens": its maximum concurrency × max_model_len, truncated."""
    return int(vllm_max_concurrency_logged(pool_blocks, layout, max_model_len, max_in_flight_tokens)
               * max_model_len)


def kv_bytes_per_token_beyond_windows(layout: KVLayout) -> int:
    """KV bytes each token adds once the context is past every window: the full-attention layers only."""
    return sum(g.layers for g in layout.groups if g.window is None) * layout.layer_bytes_per_token
