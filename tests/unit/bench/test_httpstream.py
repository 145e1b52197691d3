"""The streaming HTTP/1.1 client against a raw socket server that writes scripted bytes:
framing split at every byte boundary, keep-alive reuse, and the faults a real server
seldom produces (a head cut short, a bad chunk size, a stale keep-alive connection)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from bench.httpstream import sockets
from bench.httpstream.framing import StreamError
from bench.httpstream.pool import StreamPool


@pytest.fixture(autouse=True, params=["compiled", "python"])
def reader(request, monkeypatch):
    """Every test runs with the compiled reader (where built) and with the loop's own reads."""
    if request.param == "python":
        monkeypatch.setattr(sockets, "_streamread", None)
    elif sockets._streamread is None:
        pytest.skip("bench._streamread is not built here")
    return request.param


class Collect:
    def __init__(self):
        self.parts: list[tuple[bytes, float]] = []

    def feed(self, data: bytes, t: float) -> None:
        self.parts.append((data, t))

    @property
    def body(self) -> bytes:
        return b"".join(d for d, _ in self.parts)


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


HEAD_CHUNKED = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


class Script:
    """A server that answers each request on a connection with the next scripted reply.

    A reply is a list of byte strings written one by one with a pause between them, or the
    string "close" (close the connection without answering); a None in a reply closes the
    connection after what came before it."""

    def __init__(self, replies: list, pause_s: float = 0.0):
        self.replies = list(replies)
        self.pause_s = pause_s
        self.requests: list[bytes] = []
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.replies:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(next(ln.split(b":")[1] for ln in head.split(b"\r\n")
                                  if ln.lower().startswith(b"content-length")))
                body = await reader.readexactly(length)
                self.requests.append(head + body)
                reply = self.replies.pop(0)
                if reply == "close":
                    break
                for piece in reply:
                    if piece is None:        # close right after this reply
                        return
                    writer.write(piece)
                    await writer.drain()
                    if self.pause_s:
                        await asyncio.sleep(self.pause_s)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1/completions"

    async def __aexit__(self, *exc) -> None:
        self.server.close()


def run(coro):
    return asyncio.run(coro)


def test_chunked_body_split_at_every_boundary_arrives_whole():
    payload = b"data: {\"a\": 1}\n\ndata: [DONE]\n\n"
    wire = HEAD_CHUNKED + chunked(payload[:7], payload[7:])

    async def main():
        for cut in range(1, len(wire)):
            async with Script([[wire[:cut], wire[cut:]]], pause_s=0.002) as url:
                pool = StreamPool()
                sink = Collect()
                resp = await pool.post(url, b"{}", sink, time.monotonic)
                await pool.close()
                assert resp.status == 200, cut
                assert sink.body == payload, cut
    run(main())


def test_each_read_gets_its_own_timestamp_and_head_time_is_reported():
    async def main():
        async with Script([[HEAD_CHUNKED, b"3\r\none\r\n", b"3\r\ntwo\r\n", b"0\r\n\r\n"]],
                          pause_s=0.03) as url:
            pool = StreamPool()
            sink = Collect()
            heads = []
            await pool.post(url, b"{}", sink, time.monotonic, on_head=lambda s, t: heads.append((s, t)))
            await pool.close()
            assert sink.body == b"onetwo"
            assert heads and heads[0][0] == 200
            ts = [t for _, t in sink.parts]
            assert len(ts) == 2 and ts[1] - ts[0] >= 0.02, "reads 30 ms apart keep their own times"
            assert heads[0][1] < ts[0]
    run(main())


def test_keep_alive_connection_is_reused_and_the_request_carries_headers():
    reply = [HEAD_CHUNKED + chunked(b"x")]

    async def main():
        script = Script([reply, reply, reply])
        async with script as url:
            pool = StreamPool(headers={"Authorization": "Bearer k123"})
            for _ in range(3):
                await pool.post(url, b'{"q":1}', Collect(), time.monotonic, headers={"x-request-id": "r"})
            await pool.close()
        assert script.connections == 1
        req = script.requests[0]
        assert req.startswith(b"POST /v1/completions HTTP/1.1\r\n")
        assert b"\r\nAuthorization: Bearer k123\r\n" in req and b"\r\nx-request-id: r\r\n" in req
        assert req.endswith(b'\r\n\r\n{"q":1}') and b"Content-Length: 7\r\n" in req
    run(main())


def test_error_status_body_is_returned_not_streamed():
    body = b'{"error": {"message": "bad"}}'
    wire = b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)

    async def main():
        async with Script([[wire]]) as url:
            pool = StreamPool()
            sink = Collect()
            resp = await pool.post(url, b"{}", sink, time.monotonic)
            await pool.close()
            assert resp.status == 400 and resp.body == body and sink.parts == []
    run(main())


def test_body_until_close_without_length():
    wire = b"HTTP/1.0 200 OK\r\n\r\ndata: 1\n\n"

    async def main():
        async with Script([[wire, None]]) as url:
            pool = StreamPool()
            sink = Collect()
            resp = await pool.post(url, b"{}", sink, time.monotonic)
            await pool.close()
            assert resp.status == 200 and sink.body == b"data: 1\n\n"
    run(main())


@pytest.mark.parametrize("wire,kind", [
    (b"HTTP/1.1 200 OK\r\nTransfer-", "ServerDisconnectedError"),
    (HEAD_CHUNKED + b"5\r\nab", "ClientPayloadError"),
    (HEAD_CHUNKED + b"zz\r\nab\r\n", "ClientPayloadError"),
    (b"SPDY/9 200 OK\r\n\r\n", "ClientResponseError"),
    (HEAD_CHUNKED + chunked(b"abc")[:-2], "ClientPayloadError"),
])
def test_broken_responses_raise_a_named_error(wire, kind):
    async def main():
        async with Script([[wire, None]]) as url:
            pool = StreamPool()
            with pytest.raises(StreamError) as e:
                await pool.post(url, b"{}", Collect(), time.monotonic)
            await pool.close()
            assert e.value.kind == kind
    run(main())


def test_refused_connection_is_a_connector_error():
    async def main():
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        pool = StreamPool()
        with pytest.raises(StreamError) as e:
            await pool.post(f"http://127.0.0.1:{port}/x", b"{}", Collect(), time.monotonic)
        assert e.value.kind == "ClientConnectorError"
        await pool.close()
    run(main())


def test_prepare_sets_up_the_reader_and_ring_without_connecting(reader):
    async def main():
        script = Script([[HEAD_CHUNKED, chunked(b"data: 1\n\n")]])
        async with script as url:
            pool = StreamPool()
            await pool.prepare(url)
            await asyncio.sleep(0.05)
            assert script.connections == 0          # nothing reached the server
            port = int(url.split(":")[2].split("/")[0])
            assert list(pool._addrs) == [("127.0.0.1", port)]
            if reader == "compiled":
                ring = pool.stats.compiled
                assert ring is not None and not ring.closed
                # The ring watches the port already, or says why it cannot.
                assert port in ring.watched or ring.packet_stamps_off
            else:
                assert pool.stats.compiled is None
            # The first request then finds the reader made, not a second one.
            made = pool.stats.compiled
            sink = Collect()
            resp = await pool.post(url, b"{}", sink, time.monotonic)
            assert resp.status == 200 and sink.body == b"data: 1\n\n"
            assert pool.stats.compiled is made and script.connections == 1
            await pool.close()
    run(main())


def test_a_keep_alive_connection_closed_by_the_server_is_replaced_once():
    ok = [HEAD_CHUNKED + chunked(b"x")]

    async def main():
        # First connection: one answer, then the server closes it without answering the second
        # request; the pool sends that request again on a new connection.
        script = Script([ok, "close", ok])
        async with script as url:
            pool = StreamPool()
            await pool.post(url, b"{}", Collect(), time.monotonic)
            sink = Collect()
            resp = await pool.post(url, b"{}", sink, time.monotonic)
            await pool.close()
        assert resp.status == 200 and sink.body == b"x"
        assert script.connections == 2 and len(script.requests) == 3
    run(main())


def test_a_sink_failure_fails_its_request_and_not_the_loop():
    class Broken:
        def feed(self, data, t):
            raise KeyError("boom")

    async def main():
        async with Script([[HEAD_CHUNKED + chunked(b"x")]]) as url:
            pool = StreamPool()
            with pytest.raises(StreamError) as e:
                await pool.post(url, b"{}", Broken(), time.monotonic)
            await pool.close()
            assert e.value.kind == "KeyError"
    run(main())


def test_cancelled_request_drops_its_connection():
    async def main():
        script = Script([[HEAD_CHUNKED, chunked(b"x")]], pause_s=5)
        async with script as url:
            pool = StreamPool()
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(pool.post(url, b"{}", Collect(), time.monotonic), 0.2)
            assert not pool._idle.get(("http", "127.0.0.1", int(url.split(":")[2].split("/")[0])))
            await pool.close()
    run(main())


def _threaded_server(pieces: list[bytes], pauses_s: list[float], host: str = "127.0.0.1",
                     nodelay: bool = False, requests: int = 1) -> tuple[str, threading.Thread]:
    """A server of REQUESTS requests on one connection, on its own thread (so it keeps sending
    while the client's loop is blocked): reads a request head, then writes each of PIECES
    after its pause."""
    srv = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        srv.bind((host, 0))
    except OSError:
        srv.close()
        raise
    srv.listen()
    netloc = f"[{host}]" if ":" in host else host

    def serve() -> None:
        conn, _ = srv.accept()
        if nodelay:        # one segment per piece, as an engine's server sends its events
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            for _ in range(requests):
                buf = b""
                while b"\r\n\r\n" not in buf:
                    buf += conn.recv(65536)
                for piece, pause in zip(pieces, pauses_s):
                    time.sleep(pause)
                    conn.sendall(piece)
        srv.close()

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    return f"http://{netloc}:{srv.getsockname()[1]}/v1/completions", th


@pytest.mark.parametrize("stamped", [True, False])
def test_kernel_receive_stamps_take_out_the_time_the_client_was_busy(stamped):
    # The last piece comes after the client is free again: a read holding several segments
    # carries the newest one's stamp, so the first must be read alone to be judged here.
    url, th = _threaded_server([HEAD_CHUNKED + b"3\r\none\r\n", b"0\r\n\r\n"], [0.1, 0.5])

    async def main():
        # Reads timed by their own stamp here (the packet ring is tested below).
        pool = StreamPool(kernel_timestamps=stamped, packet_stamps=False)
        sink = Collect()
        task = asyncio.create_task(pool.post(url, b"{}", sink, time.monotonic))
        await asyncio.sleep(0.02)     # the request is out; the answer comes 0.1 s after it
        t_busy = time.monotonic()
        time.sleep(0.3)               # the client is busy: its loop reads nothing
        await task
        stats = pool.stats.take()
        again = pool.stats.take()
        await pool.close()
        return sink.parts[0][1] - t_busy, stats, again

    first, stats, again = run(main())
    th.join(5)
    if not stamped:
        assert first >= 0.3 and stats["reads"] == 0   # timed when the busy loop got to it
        return
    if stats["reads_kernel_stamped"] == 0:
        pytest.skip("this kernel gives TCP sockets no receive timestamps")
    # Sent ~0.08 s into the 0.3 s block; read by the loop only after it (>= 0.3 s).
    assert first < 0.25, "timed when the kernel received it, not when the busy loop read it"
    assert stats["read_wait_max_s"] >= 0.15
    assert stats["reads"] >= 2 and again["reads"] == 0   # take() zeroes the counters


def _ring_or_skip(pool: StreamPool) -> None:
    reader = pool.stats.compiled
    if reader is None:
        pytest.skip("read through the event loop: no packet ring")
    if reader.packet_stamps_off:
        pytest.skip(f"packet stamps unavailable here ({reader.packet_stamps_off})")


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_segments_merged_in_one_read_keep_their_own_arrival_times(host):
    # Three pieces 0.1 s apart reach the socket while the client is busy, and one read takes
    # them all: its kernel stamp is the last one's, but the packet ring timed each segment.
    pieces = [HEAD_CHUNKED + b"3\r\none\r\n", b"3\r\ntwo\r\n", b"5\r\nthree\r\n",
              b"0\r\n\r\n"]
    try:
        url, th = _threaded_server(pieces, [0.05, 0.1, 0.1, 1.0], host=host)
    except OSError:
        pytest.skip(f"no {host} here")

    async def main():
        pool = StreamPool()
        sink = Collect()
        task = asyncio.create_task(pool.post(url, b"{}", sink, time.monotonic))
        await asyncio.sleep(0.02)
        t_busy = time.monotonic()
        time.sleep(1.0)               # all three pieces arrive meanwhile (at about 0.25 s)
        await task
        _ring_or_skip(pool)
        stats = pool.stats.take()
        await pool.close()
        return [(body, t - t_busy) for body, t in sink.parts], stats

    parts, stats = run(main())
    th.join(5)
    assert b"".join(b for b, _ in parts) == b"onetwothree"
    assert [b for b, _ in parts] == [b"one", b"two", b"three"]
    ts = [t for _, t in parts]
    # Read only after the 1 s block, all at once; timed as sent, 0.1 s apart (a busy host
    # may stretch the server thread's sleeps; the block leaves it 0.75 s of slack).
    assert ts[2] < 1.0 and 0.07 < ts[1] - ts[0] < 0.25 and 0.07 < ts[2] - ts[1] < 0.25, ts
    assert stats["reads_packet_stamped"] == stats["reads"] >= 2
    assert stats["read_wait_max_s"] == 0.0       # no byte was timed by its read
    assert stats["segments_dropped"] == 0 and stats["segments_captured"] >= 4


def test_a_whole_response_in_one_read_of_many_segments_completes_and_the_next_follows():
    # Head, 40 chunks and the end, all waiting when the client reads: one read of more
    # segments than a batch holds, parsed whole before any framing is handed to the compiled
    # reader; the message ends inside it, so the next response on the connection is read
    # from its head.
    pieces = [HEAD_CHUNKED] + [b"4\r\ne%03d\r\n" % i for i in range(40)] + [b"0\r\n\r\n"]
    url, th = _threaded_server(pieces, [0.01] + [0.002] * 41, nodelay=True, requests=2)

    async def main():
        pool = StreamPool()
        out = []
        for _ in range(2):
            sink = Collect()
            task = asyncio.create_task(pool.post(url, b"{}", sink, time.monotonic))
            await asyncio.sleep(0.005)
            time.sleep(0.4)           # everything arrives meanwhile
            out.append((await asyncio.wait_for(task, 5), sink))
        opened = len(pool._open)
        await pool.close()
        return out, opened

    out, opened = run(main())
    th.join(5)
    assert opened == 1                # the second request went on the same connection
    for resp, sink in out:
        assert resp.status == 200
        assert sink.body == b"".join(b"e%03d" % i for i in range(40))
        ts = [t for _, t in sink.parts]
        assert ts == sorted(ts)


def test_without_a_packet_ring_the_merged_read_shares_one_stamp():
    # The same stream with packet stamps off: the reference behaviour the ring improves on.
    pieces = [HEAD_CHUNKED + b"3\r\none\r\n", b"3\r\ntwo\r\n", b"0\r\n\r\n"]
    url, th = _threaded_server(pieces, [0.05, 0.1, 0.3])

    async def main():
        pool = StreamPool(packet_stamps=False)
        sink = Collect()
        task = asyncio.create_task(pool.post(url, b"{}", sink, time.monotonic))
        await asyncio.sleep(0.02)
        time.sleep(0.3)
        await task
        stats = pool.stats.take()
        await pool.close()
        return sink.parts, stats

    parts, stats = run(main())
    th.join(5)
    assert "reads_packet_stamped" not in stats
    if not stats["reads_kernel_stamped"]:
        pytest.skip("this kernel gives TCP sockets no receive timestamps")
    assert b"".join(b for b, _ in parts) == b"onetwo"
    assert len({t for _, t in parts}) == 1       # one read, one stamp: the newest segment's


def test_an_ipv6_endpoint_gets_a_bracketed_host_header():
    async def main():
        try:
            server = await asyncio.start_server(lambda r, w: None, "::1", 0)
        except OSError:
            pytest.skip("no IPv6 loopback here")
        server.close()
        script = Script([[HEAD_CHUNKED + chunked(b"x")]])
        script.server = await asyncio.start_server(script.handle, "::1", 0)
        port = script.server.sockets[0].getsockname()[1]
        pool = StreamPool()
        sink = Collect()
        await pool.post(f"http://[::1]:{port}/v1/completions", b"{}", sink, time.monotonic)
        await pool.close()
        script.server.close()
        assert sink.body == b"x"
        assert f"\r\nHost: [::1]:{port}\r\n".encode() in script.requests[0]
    run(main())


def test_every_read_of_a_long_body_keeps_its_own_time_across_batches(reader):
    # More reads than the compiled reader hands over at once (it batches a streamed body).
    n = 80
    pieces = [HEAD_CHUNKED] + [b"%x\r\n%s\r\n" % (len(b"e%03d" % i), b"e%03d" % i) for i in range(n)]
    pieces.append(b"0\r\n\r\n")
    url, th = _threaded_server(pieces, [0.0] + [0.004] * (n + 1))

    async def main():
        pool = StreamPool()
        sink = Collect()
        resp = await pool.post(url, b"{}", sink, time.monotonic)
        stats = pool.stats.take()
        await pool.close()
        return resp, sink, stats

    resp, sink, stats = run(main())
    th.join(5)
    assert resp.status == 200
    assert sink.body == b"".join(b"e%03d" % i for i in range(n))
    ts = [t for _, t in sink.parts]
    assert ts == sorted(ts)
    # Pieces 4 ms apart are read one by one: nearly every read has a time of its own.
    assert len(sink.parts) >= n * 0.9 and len(set(ts)) == len(ts)
    assert stats["reads"] >= len(sink.parts)
    if reader == "compiled" and stats["reads_kernel_stamped"]:
        assert stats["reads_kernel_stamped"] == stats["reads"]


def test_bodies_read_before_a_timeout_stay_with_the_request():
    # Three events, then the server stalls: the request times out, and what came before the
    # timeout still reaches its sink (the compiled reader holds a batch until it is full).
    url, th = _threaded_server([HEAD_CHUNKED, b"3\r\none\r\n", b"3\r\ntwo\r\n", b"5\r\nthree\r\n",
                                b"0\r\n\r\n"], [0.0, 0.01, 0.01, 0.01, 1.0])

    async def main():
        pool = StreamPool()
        sink = Collect()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(pool.post(url, b"{}", sink, time.monotonic), 0.4)
        await pool.close()
        return sink

    sink = run(main())
    th.join(5)
    assert sink.body == b"onetwothree"


@pytest.mark.parametrize("size_line", [b"3;name=value", b" 3 ", b"3\t"])
def test_chunk_size_lines_with_extensions_and_blanks_are_read(size_line):
    wire = HEAD_CHUNKED + b"2\r\nab\r\n" + size_line + b"\r\ncde\r\n0\r\nX-Trailer: 1\r\n\r\n"

    async def main():
        async with Script([[HEAD_CHUNKED, wire[len(HEAD_CHUNKED):]]], pause_s=0.01) as url:
            pool = StreamPool()
            sink = Collect()
            resp = await pool.post(url, b"{}", sink, time.monotonic)
            await pool.close()
            return resp, sink

    resp, sink = run(main())
    assert resp.status == 200 and sink.body == b"abcde"


@pytest.mark.parametrize("body,message,before", [
    (b"2\r\nab\r\nzz\r\nxy\r\n", "bad chunk size b'zz'", b"ab"),
    (b"2\r\nab\r\n5\r\ncd", "", b"abcd"),       # the connection cut inside a chunk
])
def test_a_broken_body_after_the_head_is_a_payload_error_and_keeps_what_came(body, message,
                                                                              before):
    # The head arrives alone, so the compiled reader de-frames the body itself.
    async def main():
        async with Script([[HEAD_CHUNKED, body, None]], pause_s=0.02) as url:
            pool = StreamPool()
            sink = Collect()
            with pytest.raises(StreamError) as e:
                await pool.post(url, b"{}", sink, time.monotonic)
            await pool.close()
            return e.value, sink

    err, sink = run(main())
    assert err.kind == "ClientPayloadError" and message in str(err)
    assert sink.body == before
