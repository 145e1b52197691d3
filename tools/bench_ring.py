"""What the packet ring costs the client when it is behind: CPU per token event, ring on vs off.

A client that falls behind reads many events per read; without the ring a read is one
`recvmsg`, one de-framing and one parse loop for all its events, with the ring it also drains
one ring frame per segment and splits the read where the segments end. This measures that
difference where it matters for saturated ingest, without a server in the way: N loopback
connections (TCP_NODELAY, one `send` per event, so one segment per event, as an engine's
server sends) each get K usual completions events while nothing reads them; then the
compiled reader (`bench._streamread.Poller`, in stream mode with the fast parser, as a round
reads a 200 body) polls until every event is taken, and the process's CPU time over those
polls is divided by N x K. The sends, and the ring's capture of them (the kernel's work on
the sending core), fall before the timed part. Each configuration runs REPEAT times,
alternating; the medians are printed.

    .venv/bin/python tools/bench_ring.py [--conns 200] [--events 200] [--repeat 5] [--cpu 0]

Needs Linux, the compiled reader, and (for the ring) root or CAP_NET_RAW.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.httpstream import sockets  # noqa: E402


def event(n: int) -> bytes:
    """The usual completions event with cumulative usage, chunk-framed."""
    data = (b'data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m",'
            b'"choices":[{"index":0,"text":" tok","logprobs":null,"finish_reason":null}],'
            b'"usage":{"prompt_tokens":16,"completion_tokens":%d,"total_tokens":%d}}\n\n'
            % (n, n + 16))
    return b"%x\r\n%s\r\n" % (len(data), data)


def one_run(conns: int, events: int, ring: bool) -> dict:
    """Fill CONNS sockets with EVENTS events each, then time the reads: CPU µs per event."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(conns)
    port = srv.getsockname()[1]
    poller = sockets._streamread.Poller(sockets._loads)
    if ring:
        poller.capture(port)          # before connecting: the ring must see each SYN-ACK
    clients, servers = [], []
    try:
        for _ in range(conns):
            c = socket.create_connection(("127.0.0.1", port))
            c.setsockopt(socket.SOL_SOCKET, sockets.SO_TIMESTAMPNS, 1)
            c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            c.setblocking(False)
            s, _ = srv.accept()
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            clients.append(c)
            servers.append(s)
            poller.register(c.fileno(), c)
            poller.stream(c.fileno(), 0, b"", False, True, 0)   # a 200 chunked body, fast mode
        payload = [event(i + 1) for i in range(events)]
        for k in range(events):       # event k of every stream, then event k+1: as a server's steps
            for s in servers:
                s.send(payload[k])
        time.sleep(0.2)               # let loopback deliver everything
        taken = 0
        poller.take_stats()
        counts = {"reads": 0, "packet_stamped": 0, "dropped": 0}

        def take() -> int:
            """Add the poller's counters since the last call; the reads among them."""
            reads, _stamped, _wait, pstamped, _segments, _orphans, dropped = poller.take_stats()
            counts["reads"] += reads
            counts["packet_stamped"] += pstamped
            counts["dropped"] += max(dropped, 0)
            return reads

        cpu0 = time.process_time()
        while True:                   # level-triggered: a poll that reads nothing means all is read
            items = poller.poll()
            if take() == 0 and not items:
                break
            for _conn, _stamps, bodies, _end, fast in items:
                if fast is not None:
                    taken += len(fast[0])
                if bodies:
                    raise RuntimeError(f"a body went to the slow path: {bodies[0][:80]!r}")
        for c in clients:             # the batches not yet handed over
            _stamps, _bodies, fast = poller.unregister(c.fileno())
            taken += len(fast[0]) if fast else 0
        cpu = time.process_time() - cpu0
        if taken != conns * events:
            raise RuntimeError(f"took {taken} events of {conns * events}")
    finally:
        poller.close()
        for x in clients + servers + [srv]:
            x.close()
    return {"us_per_event": cpu / (conns * events) * 1e6,
            "events_per_read": conns * events / max(counts["reads"], 1), **counts}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conns", type=int, default=200)
    ap.add_argument("--events", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cpu", type=int, help="pin to this CPU")
    args = ap.parse_args(argv)
    if sockets._streamread is None:
        print("the compiled reader is not built here", file=sys.stderr)
        return 2
    if not sockets.packet_ring_allowed():
        print("no packet ring here (AF_PACKET not permitted): nothing to compare", file=sys.stderr)
        return 2
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    runs: dict[bool, list[dict]] = {False: [], True: []}
    for _ in range(args.repeat):
        for ring in (False, True):
            runs[ring].append(one_run(args.conns, args.events, ring))
    print(f"bench_ring: {args.conns} streams x {args.events} events, one segment per event, "
          f"read only after all were sent; {args.repeat} runs each, medians")
    print("  ring | CPU us/event | events/read | reads timed by segments | segments dropped")
    med = {}
    for ring in (False, True):
        r = runs[ring]
        med[ring] = statistics.median(x["us_per_event"] for x in r)
        print(f"  {'on ' if ring else 'off'}  | {med[ring]:12.3f} | "
              f"{statistics.median(x['events_per_read'] for x in r):11.1f} | "
              f"{(str(r[-1]['packet_stamped']) + ' of ' + str(r[-1]['reads'])) if ring else '—':>23} | "
              f"{r[-1]['dropped'] if ring else '—':>16}")
    print(f"  the ring costs {med[True] - med[False]:+.3f} us per event "
          f"({med[True] / med[False]:.2f}x the reads without it)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
