"""Streaming client: one OpenAI-compatible request, every arrival time kept raw.

Invariants:
- timestamps come from the caller's clock (`now()`, seconds since the bundle's t0);
  one read of the socket gives one timestamp, shared by every SSE event it completed;
- a chunk's token count is taken from the server (cumulative `usage.completion_tokens`
  with continuous usage stats, or the length of `token_ids`), never guessed; when the
  server gives neither, the count is recorded as null and the report flags it;
- a request never raises: every failure is recorded with its error text.
"""

from __future__ import annotations

import asyncio
import math
from array import array
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from bench.httpstream.framing import StreamError
from bench.httpstream.pool import StreamPool, dumps
from bundle.schema import MAX_COUNT

try:
    from orjson import loads  # 5-10x faster on small events; same results on valid JSON
except ImportError:            # pragma: no cover - orjson is a dependency
    from json import loads

MAX_ERROR_BODY = 2000
# The longest SSE event a stream may send: a token chunk is under 1 KB, one with top-20
# logprobs a few KB; past this the request fails and the point goes on.
MAX_EVENT_BYTES = 8 << 20
UNKNOWN = -(1 << 63)    # a chunk whose token count the server did not give (null in the record)


def open_stream_session(headers: dict | None = None, kernel_timestamps: bool = True,
                        compiled: bool | None = None, packet_stamps: bool = True) -> StreamPool:
    """The connection pool streaming requests go through (closed with `await s.close()`);
    COMPILED: the compiled reader where built (None), never (False) or required (True);
    PACKET_STAMPS: its segments timed from a packet ring where the process may open one."""
    return StreamPool(headers=headers, kernel_timestamps=kernel_timestamps, compiled=compiled,
                      packet_stamps=packet_stamps)


def completion_payload(model: str, prompt: Any, max_tokens: int, *, api: str = "completions",
                       ignore_eos: bool = True, chunk_token_counts: str = "usage",
                       seed: int | None = None) -> dict[str, Any]:
    """The JSON body of one streaming request."""
    stream_options: dict[str, Any] = {"include_usage": True}
    if chunk_token_counts == "usage":
        stream_options["continuous_usage_stats"] = True
    body: dict[str, Any] = {"model": model, "stream": True, "stream_options": stream_options,
                            "ignore_eos": ignore_eos, "temperature": 0.0}
    if api == "chat":
        body["messages"] = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        body["max_completion_tokens"] = max_tokens
    else:
        body["prompt"] = prompt
        body["max_tokens"] = max_tokens
    if chunk_token_counts == "token_ids":
        body["return_token_ids"] = True
    if seed is not None:
        body["seed"] = seed
    return body


# The most token ids one streamed event may carry: vLLM sends one, or a few per speculative
# decoding step; an event of thousands is no streamed reply.
MAX_IDS_PER_EVENT = 1024


class BadTokenIds(ValueError):
    """An event's `token_ids` that are no reply of the served model, in words."""


def token_ids_problem(ids: list, vocab: int | None) -> str | None:
    """Why IDS (one event's token ids) are no reply of a model of VOCAB ids, or None: each an
    integer in [0, VOCAB) (below 2**31 when the vocabulary is not known), at most MAX_IDS_PER_EVENT."""
    if len(ids) > MAX_IDS_PER_EVENT:
        return f"{len(ids):,} token ids in one event, over {MAX_IDS_PER_EVENT:,}"
    top = vocab or MAX_COUNT + 1
    for x in ids:
        if type(x) is not int or not 0 <= x < top:
            return (f"token id {x!r:.40} is not an integer from 0 to {top - 1:,}"
                    + (" (the served vocabulary)" if vocab else ""))
    return None


def _chunk_tokens(event: dict, prev_cum: int | None, mode: str,
                  vocab: int | None = None) -> tuple[int | None, int | None]:
    """Tokens carried by one content chunk and the new cumulative count; BadTokenIds when its
    token ids are none a model of VOCAB ids sends."""
    usage = event.get("usage")
    if mode == "usage" and isinstance(usage, dict) and "completion_tokens" in usage:
        cum = int(usage["completion_tokens"])
        # A cumulative count that went down carries no count for this chunk (null), and the
        # running total stays at its highest: a bundle never holds a negative count.
        n = cum - (prev_cum or 0)
        return (n if n >= 0 else None), max(cum, prev_cum or 0)
    choices = event.get("choices") or []
    ids = choices[0].get("token_ids") if choices else None
    if isinstance(ids, list):
        problem = token_ids_problem(ids, vocab)
        if problem:
            raise BadTokenIds(problem)
        return len(ids), (prev_cum or 0) + len(ids)
    return None, prev_cum


def _has_content(event: dict, api: str) -> bool:
    """Whether an event carries generated output (not the role-only or usage-only chunk)."""
    choices = event.get("choices") or []
    if not choices:
        return False
    c = choices[0]
    if api == "chat":
        d = c.get("delta") or {}
        return bool(d.get("content") or d.get("reasoning") or d.get("reasoning_content")
                    or d.get("tool_calls")) or (d.get("content") == "" and "role" not in d
                                                and c.get("finish_reason") is None)
    return "text" in c or "token_ids" in c


class EventSink:
    """Turns the body bytes of one streamed response into REC's chunks, as they arrive.

    Called inside the connection's read callback with the read's timestamp (see
    `bench.httpstream`), so it must stay cheap: one split per read, one JSON parse per event,
    and for the usual event (a completions chunk with cumulative usage) a handful of type
    checks. Arrival times and token counts go to two typed arrays, which the garbage collector
    never walks (a full collection walking every stream's lists of floats pauses every stream
    at once); `close()` puts them into REC["chunks"] as (t, n) pairs.
    """

    __slots__ = ("rec", "api", "mode", "buf", "cum", "done", "ts", "ns", "fast", "last", "reply",
                 "vocab")

    def __init__(self, rec: dict[str, Any], api: str, mode: str, reply: list[int] | None = None):
        self.rec, self.api, self.mode = rec, api, mode
        self.reply = reply                # where the reply's token ids go (token_ids mode), if kept
        self.vocab = getattr(reply, "vocab", None)   # the served vocabulary's size, when known
        self.buf = b""
        self.cum: int | None = None
        self.done = False
        self.ts = array("d")              # arrival times
        self.ns = array("q")              # tokens per chunk; UNKNOWN where the server gave none
        self.fast = api == "completions" and mode == "usage"
        self.last = -math.inf           # when the last body bytes came (the idle timeout's clock)

    def on_head(self, status: int, t: float) -> None:
        self.rec["t_headers"] = t
        self.rec["http_status"] = status

    def close(self) -> None:
        """Put the chunks seen so far into REC (idempotent), their times to the microsecond:
        finer digits are below what any stamp resolves and add 60 % to the compressed bundle."""
        self.rec["chunks"] = [(round(t, 6), None if n == UNKNOWN else n)
                              for t, n in zip(self.ts, self.ns)]
        if self.ts:
            self.rec["t_first"] = self.rec["chunks"][0][0]

    def payloads(self, data: bytes) -> list[bytes]:
        """The `data:` payloads of the SSE events DATA completes (with what earlier reads left).

        Linear in the bytes: a client far behind reads thousands of events at once, so they
        are split in one pass (`bytes.split`), never by repeated find-and-slice; an event that
        spans many reads is gathered in a growing buffer and split once it ends. An event over
        MAX_EVENT_BYTES fails the request (StreamError). Comments and other fields are
        skipped; multi-line data is joined with newlines.
        """
        if self.buf:
            # Only the new bytes (and the three before them) can complete the pending event.
            edge = bytes(self.buf[-3:]) + data
            if b"\n\n" not in edge and b"\n\r\n" not in edge:
                if not isinstance(self.buf, bytearray):
                    self.buf = bytearray(self.buf)
                self.buf += data
                self._check_pending()
                return []
            buf = bytes(self.buf) + data
        else:
            buf = data
        if b"\r" in buf:
            # Events end with a blank line; accept \r\n line ends as \n (a \r split from its
            # \n by a read boundary stays in the remainder and is joined on the next feed).
            buf = buf.replace(b"\r\n", b"\n")
        events = buf.split(b"\n\n")
        self.buf = events.pop()
        self._check_pending()
        out = []
        for ev in events:
            if ev[:6] == b"data: " and b"\n" not in ev:   # the usual one-line event
                out.append(ev[6:])
                continue
            lines = [ln for ln in ev.split(b"\n") if ln.startswith(b"data:")]
            if lines:
                out.append(b"\n".join(ln[5:].lstrip(b" ") for ln in lines))
        return out

    def _check_pending(self) -> None:
        """Fail the request (StreamError) when the unfinished event passed MAX_EVENT_BYTES."""
        if len(self.buf) > MAX_EVENT_BYTES:
            self.buf = b""
            raise StreamError("ClientPayloadError", f"an SSE event over {MAX_EVENT_BYTES >> 20} "
                              "MiB without its end; not a stream of token events")

    def feed(self, data: bytes, t: float) -> None:
        """Body bytes of one read, received at T."""
        self.last = t
        for payload in self.payloads(data):
            self._payload(payload, t)

    def feed_reads(self, stamps: list[float], bodies: list[bytes], off: float) -> None:
        """Several reads at once: read i's bytes BODIES[i] came at STAMPS[i] + OFF."""
        if stamps:
            self.last = stamps[-1] + off
        for stamp, body in zip(stamps, bodies):
            # The usual read holds exactly one one-line event: no split needed.
            if (not self.buf and body[:6] == b"data: " and body[-2:] == b"\n\n"
                    and body.find(b"\n", 6) == len(body) - 2):
                self._payload(body[6:-2], stamp + off)
            else:
                for payload in self.payloads(body):
                    self._payload(payload, stamp + off)

    def fast_events_state(self) -> tuple[bool, int | None]:
        """(whether the compiled reader may parse this stream's usual events itself, handing
        them over through `feed_events`: a completions stream with cumulative usage, at an
        event boundary; the cumulative token count so far, which its counts continue from)."""
        return self.fast and not self.buf, self.cum

    def feed_events(self, stamps: list[float], tokens: list[int], cum: int | None,
                    finish_reason: Any, done: bool, off: float) -> None:
        """Usual events the compiled reader parsed and checked as `_payload` would: event i
        came at STAMPS[i] + OFF and carried TOKENS[i]; CUM is the cumulative count after them,
        FINISH_REASON the last one given, DONE whether [DONE] came."""
        if stamps:
            self.last = stamps[-1] + off
            if not self.ts:
                self.rec["t_first"] = stamps[0] + off
            self.ts.extend([s + off for s in stamps])
            self.ns.extend(tokens)
        if cum is not None:
            self.cum = cum
        if finish_reason is not None:
            self.rec["finish_reason"] = finish_reason
        if done:
            self.done = True

    def _payload(self, payload: bytes, t: float) -> None:
        """One event's data, received at T."""
        if not payload or payload[0] != 123:        # not "{": [DONE], or not an object
            if payload.strip() == b"[DONE]":
                self.done = True
                return
        try:
            event = loads(payload)
        except ValueError:
            self.rec["error"] = f"malformed SSE event: {_text(payload)[:200]!r}"
            return
        if self.fast and type(event) is dict and "error" not in event:
            # The usual completions chunk: one choice with text, cumulative usage.
            choices = event.get("choices")
            if type(choices) is list and choices:
                c = choices[0]
                usage = event.get("usage")
                if (type(c) is dict and "text" in c and type(usage) is dict
                        and type(usage.get("completion_tokens")) is int):
                    cum = usage["completion_tokens"]
                    n = cum - (self.cum or 0)
                    if n > MAX_COUNT:                     # not a count a bundle holds
                        self.rec["error"] = f"malformed SSE event: {_text(payload)[:200]!r}"
                        return
                    self.ns.append(n if n >= 0 else UNKNOWN)   # a count that went down: null
                    if not self.ts:
                        self.rec["t_first"] = t
                    self.ts.append(t)
                    self.cum = max(cum, self.cum or 0)
                    fr = c.get("finish_reason")
                    if fr:
                        self.rec["finish_reason"] = fr
                    return
        self._event(event, payload, t)

    def _event(self, event: Any, payload: bytes, t: float) -> None:
        """Any event the fast path did not take, checked in full."""
        rec = self.rec
        if not isinstance(event, dict):
            rec["error"] = f"malformed SSE event: {_text(payload)[:200]!r}"
            return
        if "error" in event:
            err = event["error"]
            msg = err.get("message") if isinstance(err, dict) else err
            rec["error"] = f"error event in stream: {str(msg)[:MAX_ERROR_BODY]}"
            return
        try:
            if _has_content(event, self.api):
                n, new_cum = _chunk_tokens(event, self.cum, self.mode, self.vocab)
                fr = event["choices"][0].get("finish_reason")
                if n is not None and n > MAX_COUNT:
                    raise OverflowError(n)
                if self.reply is not None and n and len(self.reply) + n > (rec.get("max_tokens") or MAX_COUNT):
                    raise BadTokenIds(f"{len(self.reply) + n:,} token ids in the reply, over the "
                                      f"{rec.get('max_tokens') or MAX_COUNT:,} asked for")
                self.ns.append(UNKNOWN if n is None else n)
                self.cum = new_cum
                if self.reply is not None and n:
                    self.reply.extend(event["choices"][0]["token_ids"])
                if not self.ts:
                    rec["t_first"] = t
                self.ts.append(t)
                if fr:
                    rec["finish_reason"] = fr
            elif isinstance(event.get("usage"), dict) and not event.get("choices"):
                rec["usage"] = event["usage"]
                if isinstance(event.get("metrics"), dict):
                    rec["server_metrics"] = event["metrics"]
        except BadTokenIds as e:
            rec["error"] = f"token_ids of a streamed event: {e}"
        except (TypeError, ValueError, AttributeError, KeyError, IndexError, OverflowError):
            # Valid JSON of an unexpected shape (e.g. a null token count).
            rec["error"] = f"malformed SSE event: {_text(payload)[:200]!r}"


def _text(payload: bytes) -> str:
    return payload.decode("utf-8", "replace")


@dataclass(frozen=True)
class Timeouts:
    """When a request is given up (the plan's [client] keys): no response head FIRST_BYTE_S
    after the send, no byte IDLE_S after the last one, or TOTAL_S in all."""

    first_byte_s: float = 600.0
    idle_s: float = 300.0
    total_s: float = 3600.0

    @classmethod
    def of(cls, client: Any) -> Timeouts:
        """The timeouts of a plan's ClientSpec."""
        return cls(client.first_byte_timeout_s, client.idle_timeout_s, client.request_timeout_s)


async def stream_request(session: StreamPool, url: str, body: dict[str, Any],
                         rec: dict[str, Any], now: Callable[[], float], *, api: str = "completions",
                         chunk_token_counts: str = "usage", headers: dict | None = None,
                         timeouts: Timeouts | None = None,
                         reply: list[int] | None = None) -> dict[str, Any]:
    """Send one streaming request through SESSION (a StreamPool) and fill REC with raw timings;
    never raises (except CancelledError, after recording it). With REPLY (token_ids mode), the
    reply's token ids are appended to it as they arrive."""
    rec.update(t_send=None, t_headers=None, t_first=None, t_end=None, chunks=[], status="error",
               http_status=None, error=None, finish_reason=None, usage=None, server_metrics=None)
    sink = EventSink(rec, api, chunk_token_counts, reply)
    data = dumps(body)
    try:
        return await _send(session, url, data, sink, rec, now, headers, timeouts or Timeouts())
    finally:
        sink.close()


async def _watched(post: Awaitable, sink: EventSink, rec: dict[str, Any], now: Callable[[], float],
                   limits: Timeouts):
    """POST's result, or TimeoutError naming the limit it passed: no head within first_byte_s,
    no byte within idle_s of the last, nothing whole within total_s. Checked a few times per
    the shortest limit, so a request wakes rarely."""
    task = asyncio.ensure_future(post)
    step = max(0.05, min(limits.first_byte_s, limits.idle_s, limits.total_s) / 4)
    t0 = rec["t_send"]
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=step)
            if done:
                return task.result()
            t = now()
            if rec["t_headers"] is None and t - t0 > limits.first_byte_s:
                why = f"no response head within {limits.first_byte_s:g} s of the send"
            elif rec["t_headers"] is not None and t - max(sink.last, rec["t_headers"]) > limits.idle_s:
                why = f"no byte for {limits.idle_s:g} s inside the stream"
            elif t - t0 > limits.total_s:
                why = f"no complete response within {limits.total_s:g} s"
            else:
                continue
            raise asyncio.TimeoutError(why)
    finally:
        if not task.done():
            task.cancel()
            try:
                await task
            except BaseException:   # noqa: BLE001 - the request is over; only its cleanup is awaited
                pass


async def _send(session: StreamPool, url: str, data: bytes, sink: EventSink, rec: dict[str, Any],
                now: Callable[[], float], headers: dict | None, limits: Timeouts) -> dict[str, Any]:
    try:
        rec["t_send"] = now()
        resp = await _watched(session.post(url, data, sink, now, headers=headers,
                                           on_head=sink.on_head), sink, rec, now, limits)
        rec["t_end"] = now()
        if resp.status != 200:
            text = resp.body.decode("utf-8", "replace")[:MAX_ERROR_BODY]
            rec["error"] = f"HTTP {resp.status}: {text}"
            return rec
    except asyncio.CancelledError:
        rec["t_end"] = now()
        rec["error"] = "cancelled (round interrupted)"
        raise
    except StreamError as e:
        rec["t_end"] = now()
        rec["error"] = f"{e.kind}: {e}"[:MAX_ERROR_BODY]
        return rec
    except asyncio.TimeoutError as e:
        rec["t_end"] = now()
        rec["error"] = f"TimeoutError: {e}"
        return rec
    except OSError as e:
        rec["t_end"] = now()
        rec["error"] = f"{type(e).__name__}: {e}"[:MAX_ERROR_BODY]
        return rec
    if rec["error"] is None and not sink.done:
        rec["error"] = "stream ended without [DONE] (connection cut mid-stream)"
    if rec["error"] is None and rec["t_first"] is None:
        rec["error"] = "no output token arrived"
    if rec["error"] is None:
        rec["status"] = "ok"
    return rec
