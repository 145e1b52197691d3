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
