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
import json
from typing import Any, Callable

import aiohttp

# aiohttp's default 64 KiB read buffer throttles long streams (vllm #39963); keep it large.
READ_BUFSIZE = 1 << 20
MAX_ERROR_BODY = 2000


def open_stream_session(headers: dict | None = None) -> aiohttp.ClientSession:
    """The connection pool streaming requests go through (closed with `await s.close()`)."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60),
                                 read_bufsize=READ_BUFSIZE, headers=headers)


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


class SSEParser:
    """Splits a byte stream into SSE `data:` payloads; comments and other fields are skipped.

    Linear in the bytes fed: one read may hold thousands of events when the client is behind,
    so events are split in one pass (`bytes.split`), never by repeated find-and-slice.
    """

    def __init__(self) -> None:
        self.buf = b""

    def feed(self, data: bytes) -> list[str]:
        buf = self.buf + data if self.buf else data
        if b"\r" in buf:
            # Events end with a blank line; accept \r\n line ends as \n (a \r split from its
            # \n by a read boundary stays in the remainder and is joined on the next feed).
            buf = buf.replace(b"\r\n", b"\n")
        events = buf.split(b"\n\n")
        self.buf = events.pop()
        out = []
        for event in events:
            if event[:5] == b"data:" and b"\n" not in event:   # the usual one-line event
                out.append(event[5:].lstrip(b" ").decode("utf-8", "replace"))
                continue
            lines = [ln for ln in event.split(b"\n") if ln.startswith(b"data:")]
            if lines:
                out.append(b"\n".join(ln[5:].lstrip(b" ") for ln in lines).decode("utf-8", "replace"))
        return out


def _chunk_tokens(event: dict, prev_cum: int | None, mode: str) -> tuple[int | None, int | None]:
    """Tokens carried by one content chunk and the new cumulative count."""
    usage = event.get("usage")
    if mode == "usage" and isinstance(usage, dict) and "completion_tokens" in usage:
        cum = int(usage["completion_tokens"])
        return cum - (prev_cum or 0), cum
    choices = event.get("choices") or []
    ids = choices[0].get("token_ids") if choices else None
    if isinstance(ids, list):
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


async def stream_request(session: aiohttp.ClientSession, url: str, body: dict[str, Any],
                         rec: dict[str, Any], now: Callable[[], float], *, api: str = "completions",
                         chunk_token_counts: str = "usage", headers: dict | None = None,
                         timeout_s: float = 3600.0) -> dict[str, Any]:
    """Send one streaming request and fill REC with raw timings; never raises."""
    rec.update(t_send=None, t_headers=None, t_first=None, t_end=None, chunks=[], status="error",
               http_status=None, error=None, finish_reason=None, usage=None, server_metrics=None)
    cum: int | None = None
    parser = SSEParser()
    done = False
    try:
        rec["t_send"] = now()
        async with session.post(url, json=body, headers=headers,
                                timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            rec["t_headers"] = now()
            rec["http_status"] = resp.status
            if resp.status != 200:
                text = (await resp.read()).decode("utf-8", "replace")[:MAX_ERROR_BODY]
                rec["t_end"] = now()
                rec["error"] = f"HTTP {resp.status}: {text}"
                return rec
            async for data in resp.content.iter_any():
                t = now()
                for payload in parser.feed(data):
                    if payload.strip() == "[DONE]":
                        done = True
                        continue
                    try:
                        event = json.loads(payload)
                    except json.JSONDecodeError:
                        rec["error"] = f"malformed SSE event: {payload[:200]!r}"
                        continue
                    if not isinstance(event, dict):
                        rec["error"] = f"malformed SSE event: {payload[:200]!r}"
                        continue
                    if "error" in event:
                        err = event["error"]
                        msg = err.get("message") if isinstance(err, dict) else err
                        rec["error"] = f"error event in stream: {str(msg)[:MAX_ERROR_BODY]}"
                        continue
                    try:
                        if _has_content(event, api):
                            n, new_cum = _chunk_tokens(event, cum, chunk_token_counts)
                            fr = event["choices"][0].get("finish_reason")
                            cum = new_cum
                            rec["chunks"].append((t, n))   # a tuple: untracked by the GC
                            if rec["t_first"] is None:
                                rec["t_first"] = t
                            if fr:
                                rec["finish_reason"] = fr
                        elif isinstance(event.get("usage"), dict) and not event.get("choices"):
                            rec["usage"] = event["usage"]
                            if isinstance(event.get("metrics"), dict):
                                rec["server_metrics"] = event["metrics"]
                    except (TypeError, ValueError, AttributeError, KeyError, IndexError):
                        # Valid JSON of an unexpected shape (e.g. a null token count).
                        rec["error"] = f"malformed SSE event: {payload[:200]!r}"
            rec["t_end"] = now()
    except asyncio.CancelledError:
        rec["t_end"] = now()
        rec["error"] = "cancelled (round interrupted)"
        raise
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
        rec["t_end"] = now()
        rec["error"] = f"{type(e).__name__}: {e}"[:MAX_ERROR_BODY]
        return rec
    if rec["error"] is None and not done:
        rec["error"] = "stream ended without [DONE] (connection cut mid-stream)"
    if rec["error"] is None and rec["t_first"] is None:
        rec["error"] = "no output token arrived"
    if rec["error"] is None:
        rec["status"] = "ok"
    return rec
