"""The pool of keep-alive connections a client posts its streamed requests through."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl as ssl_module
import sys
import time
from typing import Any, Callable
from urllib.parse import urlsplit

from bench.httpstream import sockets
from bench.httpstream.framing import Conn, Response, Sink, StreamError
from bench.httpstream.sockets import (
    SO_TIMESTAMPNS,
    KernelStampedSocket,
    PolledReader,
    PolledSocket,
    ReadStats,
)

IDLE_REUSE_S = 4.0              # servers (uvicorn: 5 s) close idle keep-alive connections


class StreamPool:
    """Keep-alive connections per (scheme, host, port); any number open at once."""

    def __init__(self, headers: dict[str, str] | None = None, ssl: ssl_module.SSLContext | None = None,
                 kernel_timestamps: bool = True, compiled: bool | None = None,
                 packet_stamps: bool = True):
        self.headers = dict(headers or {})
        # the compiled reader times segments by their arrival where it may (PACKET_STAMPS)
        self.packet_stamps = packet_stamps
        self.ssl = ssl
        # Plain-HTTP connections read with kernel receive stamps where the OS offers them,
        # in the compiled reader where it is built (COMPILED=None) or asked for (True).
        self.kernel_timestamps = kernel_timestamps and sys.platform == "linux"
        if compiled and sockets._streamread is None:
            raise RuntimeError("bench._streamread is not built (pip install -e . with a C compiler)")
        self.compiled = self.kernel_timestamps and sockets._streamread is not None and compiled is not False
        self.stats = ReadStats()
        self._idle: dict[tuple, list[Conn]] = {}
        self._open: set[Conn] = set()
        self._addrs: dict[tuple[str, int], list] = {}
        self.closed = False

    async def _connect(self, key: tuple, now: Callable[[], float]) -> Conn:
        scheme, host, port = key
        loop = asyncio.get_running_loop()
        ctx = None
        if scheme == "https":
            ctx = self.ssl or ssl_module.create_default_context()
        try:
            if ctx is None and self.kernel_timestamps:
                conn = await self._connect_stamped(loop, host, port, now)
            else:
                _, conn = await loop.create_connection(lambda: Conn(now), host, port, ssl=ctx)
        except OSError as e:
            raise StreamError("ClientConnectorError",
                              f"Cannot connect to host {host}:{port} ssl:{bool(ctx)} [{e.strerror or e}]") from None
        self._open.add(conn)
        return conn

    async def prepare(self, url: str) -> None:
        """Set up, before a schedule starts, what the first connection to URL's host would
        otherwise set up on the event loop while requests wait: the address lookup (and the
        thread it runs on) and, for the compiled reader, its epoll set and packet ring (a few
        hundred ms to open). Nothing is sent to the server."""
        u = urlsplit(url)
        if u.scheme != "http" or not u.hostname or not self.kernel_timestamps:
            return
        loop = asyncio.get_running_loop()
        port = u.port or 80
        try:
            await self._addresses(loop, u.hostname, port)
        except OSError:
            return      # the first request reports it, as ClientConnectorError
        if self.compiled:
            self._reader(loop).watch(port)

    async def _addresses(self, loop: asyncio.AbstractEventLoop, host: str, port: int) -> list:
        """HOST:PORT's stream addresses, looked up once per pool (each lookup is a thread hop)."""
        infos = self._addrs.get((host, port))
        if infos is None:
            infos = self._addrs[(host, port)] = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return infos

    def _reader(self, loop: asyncio.AbstractEventLoop) -> PolledReader:
        """The compiled reader of this pool on LOOP, made on first use."""
        reader = self.stats.compiled
        if reader is None or reader.closed or reader.loop is not loop:
            if reader is not None:
                reader.close()
            reader = self.stats.compiled = PolledReader(loop, self.packet_stamps)
        return reader

    async def _connect_stamped(self, loop: asyncio.AbstractEventLoop, host: str, port: int,
                               now: Callable[[], float]) -> Conn:
        infos = await self._addresses(loop, host, port)
        err: OSError | None = None
        reader = None
        if self.compiled:
            reader = self._reader(loop)
            reader.watch(port)        # before connecting: the ring must see the SYN-ACK
        for family, type_, proto, _name, addr in infos:
            sock = socket.socket(family, type_, proto)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
                await loop.sock_connect(sock, addr)
            except OSError as e:
                sock.close()
                err = e
                continue
            conn = Conn(now)
            if reader is not None:
                PolledSocket(reader, sock, conn)
            else:
                KernelStampedSocket(loop, sock, conn, self.stats)
            return conn
        raise err or OSError(f"no address for {host}")

    def _take_idle(self, key: tuple, now: Callable[[], float]) -> Conn | None:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if conn.reusable() and time.monotonic() - conn.last_used < IDLE_REUSE_S:
                conn.now = now
                return conn
            self._drop(conn)
        return None

    def _drop(self, conn: Conn) -> None:
        self._open.discard(conn)
        if conn.transport is not None and not conn.transport.is_closing():
            conn.transport.close()

    async def post(self, url: str, body: bytes, sink: Sink, now: Callable[[], float], *,
                   headers: dict[str, str] | None = None,
                   on_head: Callable[[int, float], None] | None = None) -> Response:
        """POST BODY (JSON) to URL; a 200 body goes to SINK as it arrives, another is returned.

        Raises StreamError on transport and framing failures; the caller applies timeouts.
        """
        if self.closed:
            raise StreamError("ClientConnectionError", "the stream pool is closed")
        u = urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise StreamError("ClientConnectionError", f"unsupported URL {url!r}")
        port = u.port or (443 if u.scheme == "https" else 80)
        key = (u.scheme, u.hostname, port)
        path = (u.path or "/") + (f"?{u.query}" if u.query else "")
        hdrs = {**self.headers, **(headers or {})}
        host = u.netloc.rpartition("@")[2]     # as written: [v6] brackets and any port kept
        head = [f"POST {path} HTTP/1.1", f"Host: {host}", "Content-Type: application/json",
                "Accept: text/event-stream, application/json", f"Content-Length: {len(body)}"]
        head += [f"{k}: {v}" for k, v in hdrs.items()]
        request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        loop = asyncio.get_running_loop()
        for attempt in (0, 1):
            conn = self._take_idle(key, now)
            reused = conn is not None
            if conn is None:
                conn = await self._connect(key, now)
            fut = conn.start(request, sink, on_head, loop)
            try:
                resp = await fut
            except StreamError as e:
                self._drop(conn)
                # A reused connection the server had closed before reading the request
                # (nothing came back): the request never reached it; send it once more.
                if reused and attempt == 0 and conn.received == 0 and e.kind == "ServerDisconnectedError":
                    continue
                raise
            except BaseException:
                self._drop(conn)      # timeout or cancellation mid-response: never reuse it
                raise
            conn.last_used = time.monotonic()
            if conn.reusable():
                conn.sink = None
                self._idle.setdefault(key, []).append(conn)
            else:
                self._drop(conn)
            return resp
        raise AssertionError("unreachable")

    async def close(self) -> None:
        self.closed = True
        for conn in list(self._open):
            self._drop(conn)
        self._idle.clear()
        await asyncio.sleep(0)    # let the transports run their close callbacks
        reader = self.stats.compiled
        if reader is not None and not reader.closed:
            self.stats._add_compiled(reader.take())      # kept for a last take()
            reader.close()


def dumps(body: Any) -> bytes:
    """A request body as compact JSON bytes."""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
