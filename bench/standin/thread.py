"""The stand-in on its own event loop in a daemon thread, for tests and tools in one process."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from bench.standin.server import StandIn


class StandInThread:
    """The stand-in on its own event loop in a daemon thread: `with StandInThread() as url:`."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, **kwargs: Any):
        self.server = StandIn(**kwargs)
        self.host, self.port = host, port
        self.url: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def start(self, timeout_s: float = 10.0) -> str:
        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                self.url = loop.run_until_complete(self.server.start(self.host, self.port))
            except BaseException as e:  # noqa: BLE001 - reported to the starting thread
                self._error = e
                self._ready.set()
                return
            self._ready.set()
            loop.run_forever()
            loop.run_until_complete(self.server.stop())
            loop.close()

        self._thread = threading.Thread(target=run, name="standin", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise RuntimeError("the stand-in did not start in time")
        if self._error is not None:
            raise self._error
        return self.url

    def stop(self, timeout_s: float = 10.0) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout_s)

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
