"""The event loop the collectors run on: uvloop where installed, else asyncio's own."""

from __future__ import annotations

import asyncio
import gc
from typing import Any, Callable, Coroutine


def loop_name(use_uvloop: bool = True) -> str:
    """What `run` will run on, for provenance (e.g. "uvloop 0.23.0" or "asyncio")."""
    if use_uvloop:
        try:
            import uvloop
            return f"uvloop {uvloop.__version__}"
        except ImportError:
            pass
    return "asyncio"


def run(main: Coroutine[Any, Any, Any], use_uvloop: bool = True) -> Any:
    """asyncio.run(MAIN), on uvloop when it is installed and USE_UVLOOP.

    Everything alive before MAIN starts (modules, the plan, the tokenizer) is frozen out of
    the garbage collector's reach: a full collection during the round, which pauses every
    stream at once, then scans only what the round itself keeps alive.
    """
    gc.collect()
    gc.freeze()
    if use_uvloop:
        try:
            import uvloop
        except ImportError:
            uvloop = None
        if uvloop is not None:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as r:
                return r.run(main)
    return asyncio.run(main)


async def sleep_until(t: float, now: Callable[[], float]) -> None:
    """Return once NOW() >= T. Timers may fire early (uvloop's are whole milliseconds), so the
    last stretch is waited out in short sleeps: an arrival is never sent before its time."""
    while (delay := t - now()) > 0:
        await asyncio.sleep(delay if delay > 0.002 else 0)
