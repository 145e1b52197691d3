"""A lean HTTP/1.1 client for streamed responses, built on asyncio protocols.

A benchmark client must read token events as they arrive, at tens of thousands per second,
without its own queueing showing up as the server's latency. General-purpose clients hand
every socket read to a coroutine through a stream reader (a future, a task wake-up, a buffer
copy per read); here the bytes of a read are decoded and handed to the request's sink inside
the read callback itself.

Invariants:
- one read takes one timestamp; every body byte of that read is passed to the sink with it
  (`sink.feed(bytes, t)`), in order, once. On Linux, plain-HTTP connections are read with
  `recvmsg` and the kernel's receive stamp (SO_TIMESTAMPNS): the timestamp is when the bytes
  reached the host, not when a busy event loop got round to them (a read holding several
  segments carries the newest one's stamp). Where the compiled reader (`bench._streamread`)
  is built, those sockets sit in one epoll set read in C, which also removes the chunked
  framing of a 200 body and hands the bodies over in batches, each read with its own stamp.
  Where that process may also open a packet ring (AF_PACKET: root or CAP_NET_RAW), a read
  is split where the server's TCP segments end and each part is timed by its own segment's
  arrival, so events read together keep their own times (see bench/_streamread.c).
  Elsewhere, and for TLS, it is the time the read is delivered to the protocol callback;
- a connection carries one request at a time and goes back to its pool only after a
  complete response (framing fully read, no `Connection: close`);
- every failure surfaces as `StreamError` (or `asyncio.TimeoutError` / `CancelledError`),
  named like aiohttp's so records stay comparable: `ClientConnectorError` (could not
  connect), `ServerDisconnectedError` (closed before the headers), `ClientPayloadError`
  (closed or malformed inside the body), `ClientResponseError` (malformed status/headers).
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import socket
import ssl as ssl_module
import struct
import sys
import time
from typing import Any, Callable, Protocol
from urllib.parse import urlsplit

try:
    from orjson import loads as _loads  # the parser bench.client's EventSink uses
except ImportError:                      # pragma: no cover - orjson is a dependency
    from json import loads as _loads

try:
    from bench import _streamread
except ImportError:     # not built (no C compiler at install, or not Linux): the loop reads
    _streamread = None

MAX_HEAD = 64 * 1024            # status line + headers
MAX_ERROR_BODY_READ = 1 << 20   # a non-200 body is read up to this, then the connection dropped
IDLE_REUSE_S = 4.0              # servers (uvicorn: 5 s) close idle keep-alive connections
READ_SIZE = 1 << 16             # bytes per read of a kernel-stamped socket (a larger buffer
                                # is allocated by mmap on every read: 4x the cost per read)
ANC_SIZE = 64                   # room for one SCM_TIMESTAMPNS control message
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)   # Linux; Python does not name it
_TIMESPEC = struct.Struct("@qq")                         # struct timespec, 64-bit Linux


def packet_ring_allowed() -> bool:
    """Whether this process may open the AF_PACKET socket the packet ring needs."""
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, 0).close()
    except (OSError, AttributeError):
        return False
    return True


def reader_name(compiled: bool | None = None) -> str:
    """How a StreamPool(compiled=COMPILED) reads plain-HTTP streams here, for provenance."""
    if sys.platform != "linux":
        return "event-loop reads"
    if _streamread is not None and compiled is not False:
        return ("compiled epoll reader (bench._streamread), kernel receive stamps"
                + (", packet-ring segment stamps (one load process)" if packet_ring_allowed()
                   else ", no packet ring (AF_PACKET not permitted)"))
    return "event-loop reads, kernel receive stamps"


class StreamError(Exception):
    """A transport or framing failure; `kind` is the aiohttp-style error name."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def _bad_chunk_size(line: bytes) -> StreamError:
    return StreamError("ClientPayloadError", f"bad chunk size {line!r}")


def _long_size_line() -> StreamError:
    return StreamError("ClientPayloadError", "chunk size line too long")


class Sink(Protocol):
    def feed(self, data: bytes, t: float) -> None: ...


class Response:
    """What a request's head said; the body went to the sink (200) or is held here (other)."""

    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: dict[str, str], body: bytes):
        self.status, self.headers, self.body = status, headers, body


class _Conn(asyncio.Protocol):
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
                    self.framing_error = _long_size_line()
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
                    self.framing_error = _bad_chunk_size(line[:40])
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


class _SocketTransport:
    """The part of an asyncio transport `_Conn` uses, over a plain non-blocking TCP socket;
    subclasses say how it is read (`_stop_reading` undoes that on close)."""

    hand_over = None     # by default the body stays with the Python framing

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, conn: _Conn):
        self.loop, self.sock, self.conn = loop, sock, conn
        self.fd = sock.fileno()
        self.closing = False
        self.out = b""
        conn.connection_made(self)

    def _writable(self) -> None:
        try:
            n = self.sock.send(self.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._lost(e)
            return
        self.out = self.out[n:]
        if not self.out:
            self.loop.remove_writer(self.fd)

    def write(self, data: bytes) -> None:
        if self.closing:
            return
        if self.out:
            self.out += data
            return
        try:
            n = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError as e:
            self._lost(e)
            return
        if n < len(data):
            self.out = data[n:]
            self.loop.add_writer(self.fd, self._writable)

    def is_closing(self) -> bool:
        return self.closing

    def _lost(self, exc: BaseException | None) -> None:
        if not self.closing:
            self.close()
        self.conn.connection_lost(exc)

    def _stop_reading(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        if self.closing:
            return
        self.closing = True
        self._stop_reading()
        if self.out:
            self.loop.remove_writer(self.fd)
        self.sock.close()
        self.loop.call_soon(self.conn.connection_lost, None)


class _KernelStampedSocket(_SocketTransport):
    """A plain TCP socket read by the event loop with recvmsg, so that each read carries the
    kernel's receive time (SO_TIMESTAMPNS).

    A read's time is the client clock now, less how long the bytes waited in the socket
    buffer (wall clock now − the kernel's stamp of the newest segment read): time the client
    spent busy elsewhere is not charged to the server. When the kernel gives no stamp (some
    sandboxes), the read is timed on arrival in the callback, as by the protocol path.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, conn: _Conn,
                 stats: ReadStats):
        super().__init__(loop, sock, conn)
        self.stats = stats
        loop.add_reader(self.fd, self._readable)

    def _readable(self) -> None:
        try:
            data, anc, _flags, _addr = self.sock.recvmsg(READ_SIZE, ANC_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._lost(e)
            return
        if not data:
            self._lost(None)
            return
        conn = self.conn
        t = conn.now()
        stats = self.stats
        stats.reads += 1
        for level, kind, raw in anc:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(raw) >= 16:
                sec, nsec = _TIMESPEC.unpack_from(raw)
                age = time.time() - (sec + nsec * 1e-9)
                if age > 0:
                    t -= age
                    if age > stats.age_max:
                        stats.age_max = age
                stats.stamped += 1
                break
        conn.on_data(data, t)

    def _stop_reading(self) -> None:
        self.loop.remove_reader(self.fd)


class _PolledSocket(_SocketTransport):
    """A plain TCP socket in the compiled reader's epoll set (`bench._streamread.Poller`):
    same stamps as `_KernelStampedSocket`, read in C; once `_Conn` has parsed a 200 chunked
    head it hands the framing over, and the body comes back de-framed, one (stamp, bytes)
    per read, in batches."""

    def __init__(self, reader: _PolledReader, sock: socket.socket, conn: _Conn):
        super().__init__(reader.loop, sock, conn)
        self.reader = reader
        self.streaming = False
        self.backlogged = 0      # deliveries of this socket waiting in the reader's backlog
        self.handover: tuple | None = None   # framing state _Conn reached in a raw read
        reader.poller.register(self.fd, self)

    def hand_over(self, left: int, line: bytes, trailer: bool, fast: bool,
                  cum: int | None) -> None:
        """_Conn parsed a 200 chunked head in a raw read (always inside `deliver`): the framing
        state after the bytes parsed so far, applied once the whole read is parsed."""
        self.handover = (left, line, trailer, fast, cum)

    def deliver(self, stamps: list[float], bodies: list[bytes], end: tuple | None,
                fast: tuple | None) -> None:
        """What the poller read for this socket; stamps are wall-clock, made the bundle's here.
        FAST (events parsed in C) came before BODIES in the stream."""
        conn = self.conn
        off = conn.now() - time.time()
        if self.streaming:
            if fast is not None:
                conn.on_events(fast, off)
            if stamps:
                conn.on_bodies(stamps, bodies, off)
        else:
            # Raw mode: one read, in parts where the packet ring split it. The framing goes
            # to C only after the whole read is parsed, from the state after its last byte,
            # and only if the message goes on (C reads on from where this read ended).
            for stamp, data in zip(stamps, bodies):
                conn.on_data(data, stamp + off)
            handover, self.handover = self.handover, None
            if (handover is not None and conn.mode in ("chunked", "trailer") and not self.closing
                    and conn.done is not None and not conn.done.done()):
                self.reader.poller.stream(self.fd, *handover)
                self.streaming = True
        if end is None or self.closing:
            return
        what = end[0]
        if what == "done":
            self.streaming = False
            conn.body_done(end[1])
        elif what == "eof":
            self._lost(None)
        elif what == "oserror":
            self._lost(OSError(end[1], os.strerror(end[1])))
        else:
            self.streaming = False
            conn._fail(_bad_chunk_size(end[1]) if what == "badsize" else _long_size_line())

    def _stop_reading(self) -> None:
        parts = self.reader.take_backlog(self)
        parts.append(self.reader.poller.unregister(self.fd))
        if self.streaming:
            self.conn.late_bodies(parts, self.conn.now() - time.time())


def _reads_in(item: tuple) -> int:
    """Reads (or fast events) in one (sock, stamps, bodies, end, fast) delivery."""
    return len(item[1]) + (len(item[4][0]) if item[4] else 0)


class _PolledReader:
    """One compiled epoll set per pool and event loop, itself watched by the loop.

    Reading comes first: every turn polls (all ready sockets read and stamped in C), then
    hands bodies to their sinks for at most SLICE_S before yielding to the loop, and comes
    back at once while bodies wait. Streams that started together fill their batches
    together; handing them all over in one turn would leave every socket unread meanwhile,
    and an event read after the next one landed shares its stamp.

    Invariant: a socket's deliveries happen in the order it was read. A raw read (a head, or
    anything not a streamed body) is delivered at once only when nothing of that socket waits
    in the backlog, so a hand-over to C always starts from the framing state of every byte
    read so far.
    """

    SLICE_S = 0.001
    SUSTAINED_S = 0.1       # reads have waited for their sinks without a break this long: the
    OVERLOADED_POLL_S = 0.05  # client is overloaded, and polls only this often until it catches
                            # up. A later read takes several events at once, far cheaper per
                            # event, so an overloaded client still takes in all the server
                            # sends (their stamps are then shared, and the diagnosis says so);
                            # a burst worked off sooner does not slow the reading.
    QUEUED_MAX = 200_000    # reads waiting, whatever else (a bound on memory)

    def __init__(self, loop: asyncio.AbstractEventLoop, packet_stamps: bool = True):
        self.loop = loop
        self.poller = _streamread.Poller(_loads)
        self.closed = False
        # None: segments of watched ports are timed from a packet ring; else why not
        self.packet_stamps_off: str | None = None if packet_stamps else "not asked for"
        self.watched: set[int] = set()
        self.backlog: collections.deque = collections.deque()
        self.queued = 0          # reads in the backlog
        self.behind_since: float | None = None   # when the backlog last became non-empty
        self.last_poll = 0.0
        self.scheduled = False
        loop.add_reader(self.poller.fileno(), self._drain)

    def _drain(self) -> None:
        self.scheduled = False
        if self.closed:
            return
        backlog = self.backlog
        now = time.perf_counter()
        if (not backlog or now - self.behind_since < self.SUSTAINED_S
                or now - self.last_poll >= self.OVERLOADED_POLL_S) and self.queued < self.QUEUED_MAX:
            self.last_poll = now
            for item in self.poller.poll():
                sock = item[0]
                if sock.closing:
                    continue
                if not sock.streaming and not sock.backlogged:
                    sock.deliver(item[1], item[2], item[3], item[4])
                else:
                    sock.backlogged += 1
                    self.queued += _reads_in(item)
                    backlog.append(item)
        if not backlog:
            self.behind_since = None
            return
        if self.behind_since is None:
            self.behind_since = now
        deadline = now + self.SLICE_S
        while backlog:
            item = backlog.popleft()
            sock, stamps, bodies, end, fast = item
            sock.backlogged -= 1
            self.queued -= _reads_in(item)
            if not sock.closing:      # an earlier delivery may have closed it
                sock.deliver(stamps, bodies, end, fast)
            if time.perf_counter() > deadline:
                break
        if not backlog:
            self.behind_since = None
        elif not self.scheduled:
            self.scheduled = True
            self.loop.call_soon(self._drain)

    def take_backlog(self, sock: _PolledSocket) -> list[tuple]:
        """(stamps, bodies, fast) parts of SOCK still waiting in the backlog, in order (it is
        being closed)."""
        parts = []
        if sock.backlogged:
            for it in self.backlog:
                if it[0] is sock:
                    parts.append((it[1], it[2], it[4]))
                    self.queued -= _reads_in(it)
            self.backlog = collections.deque(it for it in self.backlog if it[0] is not sock)
            sock.backlogged = 0
        return parts

    def watch(self, port: int) -> None:
        """Time segments from PORT by their arrival (before connecting to it): the packet
        ring, where this process may open one; otherwise reads keep their own stamps."""
        if self.packet_stamps_off is not None or port in self.watched:
            return
        try:
            self.poller.capture(port)
        except OSError as e:
            self.packet_stamps_off = f"no packet ring: {e.strerror or e}"
            return
        except ValueError as e:        # more ports than the ring's filter holds
            self.packet_stamps_off = str(e)
            return
        self.watched.add(port)

    def take(self) -> tuple:
        return self.poller.take_stats()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.loop.remove_reader(self.poller.fileno())
            self.poller.close()


class ReadStats:
    """Counters of a pool's reads since the last `take()`: for the client's self-diagnosis."""

    __slots__ = ("reads", "stamped", "age_max", "packet_stamped", "segments", "orphans",
                 "dropped", "compiled")

    def __init__(self) -> None:
        self._zero()
        self.compiled: _PolledReader | None = None   # counts its own reads in C

    def _zero(self) -> None:
        self.reads = self.stamped = 0
        self.age_max = 0.0
        # the compiled reader's packet ring: reads timed by it in every byte, segments it
        # captured, segments of no socket held, segments dropped (-1: no packet ring)
        self.packet_stamped = self.segments = self.orphans = 0
        self.dropped = -1

    def _add_compiled(self, counts: tuple) -> None:
        reads, stamped, age_max, pstamped, segments, orphans, dropped = counts
        self.reads += reads
        self.stamped += stamped
        self.age_max = max(self.age_max, age_max)
        self.packet_stamped += pstamped
        self.segments += segments
        self.orphans += orphans
        if dropped >= 0:
            self.dropped = max(self.dropped, 0) + dropped

    def take(self) -> dict[str, Any]:
        """The counters so far, then zero them: reads; of them kernel-stamped, and timed by
        their packets' arrival in every byte; the longest wait of bytes timed by their read in
        a socket buffer (s); and, with a packet ring, its segments and drops."""
        if self.compiled is not None and not self.compiled.closed:
            self._add_compiled(self.compiled.take())
        out: dict[str, Any] = {"reads": self.reads, "reads_kernel_stamped": self.stamped,
                               "read_wait_max_s": self.age_max}
        if self.dropped >= 0:
            out.update(reads_packet_stamped=self.packet_stamped, segments_captured=self.segments,
                       segments_of_no_stream=self.orphans, segments_dropped=self.dropped)
        self._zero()
        return out


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
        if compiled and _streamread is None:
            raise RuntimeError("bench._streamread is not built (pip install -e . with a C compiler)")
        self.compiled = self.kernel_timestamps and _streamread is not None and compiled is not False
        self.stats = ReadStats()
        self._idle: dict[tuple, list[_Conn]] = {}
        self._open: set[_Conn] = set()
        self._addrs: dict[tuple[str, int], list] = {}
        self.closed = False

    async def _connect(self, key: tuple, now: Callable[[], float]) -> _Conn:
        scheme, host, port = key
        loop = asyncio.get_running_loop()
        ctx = None
        if scheme == "https":
            ctx = self.ssl or ssl_module.create_default_context()
        try:
            if ctx is None and self.kernel_timestamps:
                conn = await self._connect_stamped(loop, host, port, now)
            else:
                _, conn = await loop.create_connection(lambda: _Conn(now), host, port, ssl=ctx)
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

    def _reader(self, loop: asyncio.AbstractEventLoop) -> _PolledReader:
        """The compiled reader of this pool on LOOP, made on first use."""
        reader = self.stats.compiled
        if reader is None or reader.closed or reader.loop is not loop:
            if reader is not None:
                reader.close()
            reader = self.stats.compiled = _PolledReader(loop, self.packet_stamps)
        return reader

    async def _connect_stamped(self, loop: asyncio.AbstractEventLoop, host: str, port: int,
                               now: Callable[[], float]) -> _Conn:
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
            conn = _Conn(now)
            if reader is not None:
                _PolledSocket(reader, sock, conn)
            else:
                _KernelStampedSocket(loop, sock, conn, self.stats)
            return conn
        raise err or OSError(f"no address for {host}")

    def _take_idle(self, key: tuple, now: Callable[[], float]) -> _Conn | None:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if conn.reusable() and time.monotonic() - conn.last_used < IDLE_REUSE_S:
                conn.now = now
                return conn
            self._drop(conn)
        return None

    def _drop(self, conn: _Conn) -> None:
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
