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


FULL_COLLECTION_NEVER = 1 << 30    # generation-2 threshold while MAIN runs


def run(main: Coroutine[Any, Any, Any], use_uvloop: bool = True) -> Any:
    """asyncio.run(MAIN), on uvloop when it is installed and USE_UVLOOP.

    A full collection pauses every stream at once (10-40 ms with a thousand streams open),
    and an event read after the next one landed shares its stamp. So: everything alive before
    MAIN starts (modules, the plan, the tokenizer) is frozen out of the collector's reach, and
    while MAIN runs the collector never starts a full collection by itself; the young
    generations are still collected, and MAIN calls `collect_between_points()` where a pause
    measures nothing. Cyclic garbage meanwhile waits for that call (reference counting frees
    the rest at once).
    """
    gc.collect()
    gc.freeze()
    thresholds = gc.get_threshold()
    gc.set_threshold(thresholds[0], thresholds[1], FULL_COLLECTION_NEVER)
    try:
        if use_uvloop:
            try:
                import uvloop
            except ImportError:
                uvloop = None
            if uvloop is not None:
                with asyncio.Runner(loop_factory=uvloop.new_event_loop) as r:
                    return r.run(main)
        return asyncio.run(main)
    finally:
        gc.set_threshold(*thresholds)


def collect_between_points() -> None:
    """The full collection `run` holds back, at a moment when no point is being measured."""
    gc.collect()


async def sleep_until(t: float, now: Callable[[], float]) -> None:
    """Return once NOW() >= T. Timers may fire early (uvloop's are whole milliseconds), so the
    last stretch is waited out in short sleeps: an arrival is never sent before its time."""
    while (delay := t - now()) > 0:
        await asyncio.sleep(delay if delay > 0.002 else 0)
