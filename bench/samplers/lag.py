"""The client's own lag (client.jsonl): how late a timer fires on its event loop, and its reads."""

from __future__ import annotations

import asyncio
from typing import Any

from bench.point_driver import lag_sample
from bench.samplers.base import AT_ROUND, Context, Sampler, Signal


class LagSampler(Sampler):
    """Records how late a timer of INTERVAL_S fires on the client's event loop and, from the
    stream pool, its reads since the last sample and the longest time bytes waited in a socket
    buffer before the client read them."""

    stream, starts = "client", AT_ROUND

    def __init__(self, interval_s: float = 0.5) -> None:
        self.interval_s = interval_s

    async def sample(self, ctx: Context, stop: asyncio.Event) -> None:
        """One sample per interval until STOP is set."""
        writer = ctx.writer
        while not stop.is_set():
            t = writer.now()
            await asyncio.sleep(self.interval_s)
            writer.append(self.stream, lag_sample(t, writer.now() - t - self.interval_s, ctx.streams))


def lag_sampler(sampler: Any, gpus: bool) -> LagSampler:
    """The client's own lag, in every round."""
    return LagSampler()


SIGNALS = (Signal("client", lag_sampler),)
