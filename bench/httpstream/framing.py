"""One connection's HTTP/1.1 protocol: the response head, its chunked body, the sink it feeds."""

from __future__ import annotations

import asyncio
import time
from typing import Callable, Protocol

MAX_HEAD = 64 * 1024            # status line + headers
MAX_ERROR_BODY_READ = 1 << 20   # a non-200 body is read up to this, then the connection dropped


class StreamError(Exception):
    """A transport or framing failure; `kind` is the aiohttp-style error name."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def bad_chunk_size(line: bytes) -> StreamError:
    return StreamError("ClientPayloadError", f"bad chunk size {line!r}")


def long_size_line() -> StreamError:
    return StreamError("ClientPayloadError", "chunk size line too long")


class Sink(Protocol):
    def feed(self, data: bytes, t: float) -> None: ...


class Response:
    """What a request's head said; the body went to the sink (200) or is held here (other)."""

    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: dict[str, str], body: bytes):
        self.status, self.headers, self.body = status, headers, body


class Conn(asyncio.Protocol):
    """One keep-alive connection; parses one response at a time."""

    def __init__(self, now: Callable[[], float]):
        self.now = now
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.last_used = time.monotonic()
        self._reset(None, None)

    def _reset(self, sink: Sink | None, done: asyncio.Future | None) -> None:
        self.sink = sink
        self.done = done
        self.on_head: Callable[[int, float], None] | None = None
        self.head = b""
        self.status = 0
        self.headers: dict[str, str] = {}
        self.mode = "head"       # head | chunked | length | eof | done
        self.left = 0            # chunked: bytes left in this chunk (+2 for its CRLF); length: body left
        self.pending = b""       # chunked: an incomplete size line
        self.received = 0        # response bytes seen for this request
        self.body: list[bytes] = []
        self.body_len = 0
        self.keep_alive = True
        self.framing_error: StreamError | None = None

    # -- asyncio.Protocol --------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        if self.closed:
            return
        self.closed = True
        if self.done is None or self.done.done():
            return
        if self.mode == "eof":
            self._finish()
        elif self.mode == "head":
            why = f": {exc}" if exc else ""
            self._fail(StreamError("ServerDisconnectedError",
                                   f"Server disconnected before the response head{why}"))
        else:
            why = f": {exc}" if exc else ""
            self._fail(StreamError("ClientPayloadError",
                                   f"Response payload is not completed (connection closed "
                                   f"inside the body{why})"))

    def data_received(self, data: bytes) -> None:
        self.on_data(data, self.now())

    def on_data(self, data: bytes, t: float) -> None:
        """Bytes of one read, received at T (the bundle's clock)."""
        if self.done is None or self.done.done():
            return      # bytes after the response (or unsolicited): the connection is not reused
        self.received += len(data)
        try:
            if self.mode == "head":
                data = self._parse_head(data, t)
                if data is None:
                    return
            if self.mode in ("chunked", "trailer"):
                body = self._dechunk(data)
            elif self.mode == "length":
                body = data[:self.left]
                self.left -= len(body)
                if self.left == 0:
                    self.mode = "done"
            elif self.mode == "eof":
                body = data
            else:
                body = b""
            if body:
                if self.status == 200:
                    self.sink.feed(body, t)
                elif self.body_len < MAX_ERROR_BODY_READ:
                    self.body.append(body)
                    self.body_len += len(body)
                else:
                    self.keep_alive = False
                    self.mode = "done"
            if self.framing_error is not None:     # after the body bytes that came before it
                raise self.framing_error
            if self.mode == "done":
                self._finish()
            elif (self.status == 200 and self.mode in ("chunked", "trailer")
                  and getattr(self.transport, "hand_over", None) is not None):
                # The rest of this body is read and de-framed in C (see on_bodies), and its
                # usual events parsed there too when the sink takes them so (on_events).
                state = getattr(self.sink, "fast_events_state", None)
                fast, cum = state() if state is not None else (False, None)
                self.transport.hand_over(self.left, self.pending, self.mode == "trailer",
                                         fast, cum)
                self.pending = b""
        except StreamError as e:
            self._fail(e)
        except Exception as e:  # noqa: BLE001 - a sink's failure ends this request, not the loop
            self._fail(StreamError(type(e).__name__, str(e)))

    def on_bodies(self, stamps: list[float], bodies: list[bytes], off: float) -> None:
        """Body bytes of reads of a 200 chunked response, framing already removed; read i
        came at STAMPS[i] + OFF on the bundle's clock."""
        if self.done is None or self.done.done():
            return
        try:
            feed_reads = getattr(self.sink, "feed_reads", None)
            if feed_reads is not None:
                feed_reads(stamps, bodies, off)
            else:
                for stamp, body in zip(stamps, bodies):
                    self.sink.feed(body, stamp + off)
        except Exception as e:  # noqa: BLE001 - as in on_data
            self._fail(StreamError(type(e).__name__, str(e)))

    def on_events(self, fast: tuple, off: float) -> None:
        """Usual events parsed by the compiled reader: (stamps, tokens, cumulative tokens,
        finish_reason, [DONE] seen), stamps on the wall clock (+ OFF: the bundle's)."""
        if self.done is None or self.done.done():
            return
        try:
            self.sink.feed_events(*fast, off)
        except Exception as e:  # noqa: BLE001 - as in on_data
            self._fail(StreamError(type(e).__name__, str(e)))

    def body_done(self, extra: int) -> None:
        """The compiled reader saw the end of the chunked message (EXTRA bytes after it)."""
        self.mode = "done"
        if extra:
            self.keep_alive = False    # bytes nobody asked for: the connection is not reused
        self._finish()

    def late_bodies(self, parts: list[tuple], off: float) -> None:
        """What was read before the connection was dropped (a timeout, a cancellation), as
        (stamps, bodies, fast) parts in order: the sink gets it even though the request is
        over, so its record keeps every arrival."""
        if self.sink is None or self.status != 200:
            return
        try:
            for stamps, bodies, fast in parts:
                if fast is not None:
                    self.sink.feed_events(*fast, off)
                for stamp, body in zip(stamps, bodies):
                    self.sink.feed(body, stamp + off)
        except Exception:  # noqa: BLE001 - the request has already ended
            pass

    # -- parsing -----------------------------------------------------------------------
    def _parse_head(self, data: bytes, t: float) -> bytes | None:
        self.head += data
        end = self.head.find(b"\r\n\r\n")
        if end < 0:
            if len(self.head) > MAX_HEAD:
                raise StreamError("ClientResponseError", f"response head over {MAX_HEAD} bytes")
            return None
        head, rest = self.head[:end], self.head[end + 4:]
        self.head = b""
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise StreamError("ClientResponseError", f"bad status line {lines[0][:100]!r}")
        self.status = int(parts[1])
        if 100 <= self.status < 200:
            # An interim response (100 Continue): the real head follows.
            self.status = 0
            return self._parse_head(rest, t) if rest else None
        for ln in lines[1:]:
            k, sep, v = ln.partition(":")
            if not sep:
                raise StreamError("ClientResponseError", f"bad header line {ln[:100]!r}")
            self.headers[k.strip().lower()] = v.strip()
        conn = self.headers.get("connection", "").lower()
        self.keep_alive = parts[0] == "HTTP/1.1" and "close" not in conn or "keep-alive" in conn
        te = self.headers.get("transfer-encoding", "").lower()
        if "chunked" in te:
            self.mode = "chunked"
        elif "content-length" in self.headers:
            try:
                self.left = int(self.headers["content-length"])
            except ValueError:
                raise StreamError("ClientResponseError", "bad Content-Length") from None
            self.mode = "length" if self.left > 0 else "done"
        elif self.status in (204, 304):
            self.mode = "done"
        else:
            self.mode = "eof"
            self.keep_alive = False
        if self.on_head is not None:
            self.on_head(self.status, t)
        return rest

    def _dechunk(self, data: bytes) -> bytes:
        """The payload bytes of DATA under chunked framing; advances the framing state.

        One loop turn per chunk whose size line, data and CRLF are all in DATA (the usual
        case: servers send one event per chunk); partial chunks carry over in `left` and
        `pending`.
        """
        if self.pending:            # an incomplete size line (or trailer line) from the last read
            data = self.pending + data
            self.pending = b""
        out = []
        pos, n = 0, len(data)
        left = self.left
        if left > 2:                # the rest of a chunk's data
            take = min(left - 2, n)
            out.append(data[:take])
            pos = take
            left -= take
        if 0 < left <= 2 and pos < n:   # the CRLF after a chunk's data
            take = min(left, n - pos)
            pos += take
            left -= take
        find = data.find
        while pos < n and left == 0:
            eol = find(b"\r\n", pos)
            if eol < 0:
                self.pending = data[pos:]
                if len(self.pending) > 1024:
                    self.framing_error = long_size_line()
                    self.pending = b""
                break
            line = data[pos:eol]
            pos = eol + 2
            if self.mode == "trailer":
                if not line:                        # the blank line that ends the message
                    self.mode = "done"
                    break
                continue
            try:
                size = int(line, 16)
            except ValueError:
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)   # chunk extensions
                except ValueError:
                    self.framing_error = bad_chunk_size(line[:40])
                    break
            if size == 0:
                self.mode = "trailer"
                continue
            end = pos + size
            if end + 2 <= n:                        # the whole chunk is here
                out.append(data[pos:end])
                pos = end + 2
            else:
                out.append(data[pos:end])
                left = end + 2 - n if end <= n else size + 2 - (n - pos)
                pos = n
        self.left = left
        return out[0] if len(out) == 1 else b"".join(out)

    def _finish(self) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(Response(self.status, self.headers, b"".join(self.body)))

    def _fail(self, exc: BaseException) -> None:
        self.keep_alive = False
        if self.done is not None and not self.done.done():
            self.done.set_exception(exc)
        if self.transport is not None:
            self.transport.close()

    # -- request -----------------------------------------------------------------------
    def start(self, request: bytes, sink: Sink, on_head: Callable[[int, float], None] | None,
              loop: asyncio.AbstractEventLoop) -> asyncio.Future:
        self._reset(sink, loop.create_future())
        self.on_head = on_head
        self.transport.write(request)
        return self.done

    def reusable(self) -> bool:
        return (not self.closed and self.keep_alive and self.mode == "done"
                and not self.transport.is_closing())
