"""Plain TCP sockets read with kernel receive stamps: in the event loop, or polled in C."""

from __future__ import annotations

import asyncio
import collections
import os
import socket
import struct
import sys
import time
from typing import Any

try:
    from orjson import loads as _loads  # the parser bench.client's EventSink uses
except ImportError:                      # pragma: no cover - orjson is a dependency
    from json import loads as _loads

try:
    from bench import _streamread
except ImportError:     # not built (no C compiler at install, or not Linux): the loop reads
    _streamread = None

from bench.httpstream.framing import Conn, bad_chunk_size, long_size_line

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


class _SocketTransport:
    """The part of an asyncio transport `Conn` uses, over a plain non-blocking TCP socket;
    subclasses say how it is read (`_stop_reading` undoes that on close)."""

    hand_over = None     # by default the body stays with the Python framing

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, conn: Conn):
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


class KernelStampedSocket(_SocketTransport):
    """A plain TCP socket read by the event loop with recvmsg, so that each read carries the
    kernel's receive time (SO_TIMESTAMPNS).

    A read's time is the client clock now, less how long the bytes waited in the socket
    buffer (wall clock now − the kernel's stamp of the newest segment read): time the client
    spent busy elsewhere is not charged to the server. When the kernel gives no stamp (some
    sandboxes), the read is timed on arrival in the callback, as by the protocol path.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, conn: Conn,
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


class PolledSocket(_SocketTransport):
    """A plain TCP socket in the compiled reader's epoll set (`bench._streamread.Poller`):
    same stamps as `KernelStampedSocket`, read in C; once `Conn` has parsed a 200 chunked
    head it hands the framing over, and the body comes back de-framed, one (stamp, bytes)
    per read, in batches."""

    def __init__(self, reader: PolledReader, sock: socket.socket, conn: Conn):
        super().__init__(reader.loop, sock, conn)
        self.reader = reader
        self.streaming = False
        self.backlogged = 0      # deliveries of this socket waiting in the reader's backlog
        self.handover: tuple | None = None   # framing state Conn reached in a raw read
        reader.poller.register(self.fd, self)

    def hand_over(self, left: int, line: bytes, trailer: bool, fast: bool,
                  cum: int | None) -> None:
        """Conn parsed a 200 chunked head in a raw read (always inside `deliver`): the framing
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
            conn._fail(bad_chunk_size(end[1]) if what == "badsize" else long_size_line())

    def _stop_reading(self) -> None:
        parts = self.reader.take_backlog(self)
        parts.append(self.reader.poller.unregister(self.fd))
        if self.streaming:
            self.conn.late_bodies(parts, self.conn.now() - time.time())


def _reads_in(item: tuple) -> int:
    """Reads (or fast events) in one (sock, stamps, bodies, end, fast) delivery."""
    return len(item[1]) + (len(item[4][0]) if item[4] else 0)


class PolledReader:
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

    def take_backlog(self, sock: PolledSocket) -> list[tuple]:
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
        self.compiled: PolledReader | None = None   # counts its own reads in C

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
