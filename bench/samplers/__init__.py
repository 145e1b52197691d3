"""The round's samplers, one per sample stream beside the requests and the point events: each a
`Sampler` (base) that appends one stream bundle/schema.py declares, started by the round with
its `Context` and stopped with it. A new signal is one module here declaring its `SIGNALS`
(its stream, and its sampler made from the plan's `[sampler]` table), its stream in
bundle/schema.py and the quantity that reads it; nothing lists it by hand.
"""

from __future__ import annotations

import importlib
import pkgutil

from bench.samplers.base import AT_ROUND, AT_SERVER, Context, Sampler, Signal
from bundle.schema import STREAMS

__all__ = ["AT_ROUND", "AT_SERVER", "Context", "Sampler", "round_samplers", "signals"]


def signals() -> tuple[Signal, ...]:
    """Every signal the modules of this package declare (their `SIGNALS`), in the order of
    bundle/schema.py's STREAMS."""
    found: list[Signal] = []
    for module in pkgutil.iter_modules(__path__):
        found += getattr(importlib.import_module(f"{__name__}.{module.name}"), "SIGNALS", ())
    order = [s.name for s in STREAMS]
    return tuple(sorted(found, key=lambda s: order.index(s.stream)))


def round_samplers(sampler, gpus: bool) -> list[Sampler]:
    """The samplers a round runs, from the plan's `[sampler]` table (bench/plan/spec.py): each
    declared signal's that the plan leaves on; GPUS: whether the manifest describes any GPU.
    The round starts those of one `starts` together, in this order."""
    return [s for signal in signals() if (s := signal.sampler(sampler, gpus)) is not None]
