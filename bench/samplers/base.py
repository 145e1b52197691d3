"""The sampler interface: the collector of one sample stream, started by the round and stopped
with it, appending raw records on the bundle's clock."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable

# When the round starts a sampler: with the round, or once its first server answers.
AT_ROUND, AT_SERVER = "round", "server"


def no_engine() -> None:
    """The engine's process groups where none is ours: none."""
    return None


@dataclass(frozen=True)
class Context:
    """What a round gives its samplers."""

    writer: Any       # the bundle (bundle.store.writer.BundleWriter): `now()` its clock, `append()`
    session: Any = None     # the side requests' HTTP pool, kept off the client's streams
    # The server's base URL now, or each server's of a data-parallel round.
    endpoint: Callable[[], str | list[str]] | None = None
    # The engine's process group, or each server's; None while no engine of ours runs.
    engine_groups: Callable[[], int | list[int] | None] = no_engine
    streams: Any = None     # the client's stream pool, whose reads the lag sample counts


class Sampler(ABC):
    """Appends the records of one stream that bundle/schema.py declares (STREAMS) from when the
    round starts it (`starts`) until the round stops it."""

    stream: str
    starts: str = AT_ROUND

    @abstractmethod
    async def sample(self, ctx: Context, stop: asyncio.Event) -> None:
        """Append records to `stream` until STOP is set (or the task is cancelled)."""


@dataclass(frozen=True)
class Signal:
    """A sampled signal, declared once beside its sampler (a module's `SIGNALS`): the stream it
    appends, as bundle/schema.py's STREAMS names it, and its sampler for a round."""

    stream: str
    # (the plan's [sampler] table, whether the manifest describes a GPU) -> the sampler, or
    # None where the plan (or a round without GPUs) leaves the signal off.
    sampler: Callable[[Any, bool], Sampler | None]
