"""The stand-in's decode loop: one global step timer, one token event per active stream a step."""

from __future__ import annotations

import asyncio
import time

from bench.standin.faults import STEP_FAULTS, TOKEN_TEXT


class Stream:
    """One active request in the decode loop."""

    __slots__ = ("rid", "transport", "head", "plain", "prompt_tokens", "target", "sent", "pending",
                 "per_event", "usage_each", "usage_final", "token_ids", "mode", "n", "end_at",
                 "done", "times", "finish_reason", "ok", "held")

    def __init__(self, rid, transport, head, p_tokens, target, per_event, usage_each,
                 usage_final, token_ids, mode, n, end_at, done, times, burst=False):
        self.rid, self.transport, self.head = rid, transport, head
        self.prompt_tokens, self.target, self.per_event = p_tokens, target, per_event
        self.usage_each, self.usage_final, self.token_ids = usage_each, usage_final, token_ids
        self.mode, self.n, self.end_at, self.done, self.times = mode, n, end_at, done, times
        self.sent = 0        # tokens sent so far
        self.pending = 0     # tokens generated but not yet sent (multi mode)
        self.finish_reason = None
        self.ok = False
        self.held: list[str] | None = [] if burst else None   # burst: events held to the end
        # The prefix of an ordinary one-token event (None: every event goes through _emit).
        self.plain = (head + '"' + TOKEN_TEXT + '","logprobs":null,"finish_reason":null,'
                      '"stop_reason":null}],') \
            if per_event == 1 and not token_ids and mode not in STEP_FAULTS and not burst else None


class DecodeLoop:
    """The decode loop of a StandIn, over the streams of `active` (set up by StandIn)."""

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        step = self.step_s
        t0 = loop.time()
        next_t = t0
        while True:
            if not self.active:
                self._wake.clear()
                await self._wake.wait()
                now = loop.time()
                # Join the global grid at its next step.
                next_t = t0 + ((now - t0) // step + 1) * step
            delay = next_t - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            t_tick = loop.time()
            self._tick()
            self.counters["step_busy_s"] += loop.time() - t_tick
            next_t += step
            now = loop.time()
            if next_t < now:   # the step took longer than step_ms: it stretches, no burst
                self.counters["stretched_steps"] += 1
                next_t = now
                await asyncio.sleep(0)   # let the handlers run between stretched steps

    def _tick(self) -> None:
        """One decode step: every active stream gets its token(s)."""
        c = self.counters
        c["steps"] += 1
        mono = time.monotonic
        n_plain = 0
        for s in list(self.active.values()):
            tr = s.transport
            if tr is None or tr.is_closing():
                self._finish(s, "abort", ok=False)
                continue
            s.pending += 1
            now = mono()
            sent = s.sent + s.pending
            last = sent >= s.target or (s.end_at is not None and now >= s.end_at)
            if s.plain is not None and not last:
                # The common event (one token, no fault at this step): one f-string, one write.
                # Every part is ASCII (ids and names went through json.dumps), so the chunk
                # size is the string's length.
                s.sent, s.pending = sent, 0
                if s.usage_each:
                    text = (f'{s.plain}"usage":{{"prompt_tokens":{s.prompt_tokens},"total_tokens":'
                            f'{s.prompt_tokens + sent},"completion_tokens":{sent}}},'
                            f'"server_time":{now!r}}}\n\n')
                else:
                    text = f'{s.plain}"server_time":{now!r}}}\n\n'
                tr.write(f"{len(text):x}\r\n{text}\r\n".encode())
                if s.times is not None:
                    s.times.append(now)
                n_plain += 1
                continue
            if s.pending < s.per_event and not last:
                continue
            self._emit(s, tr, now, last)
        c["generation_tokens"] += n_plain
        c["events"] += n_plain

    def _emit(self, s: Stream, tr, now: float, last: bool) -> None:
        k = s.pending
        s.pending = 0
        s.sent += k
        self.counters["generation_tokens"] += k
        self.counters["events"] += 1
        parts = [s.head, '"', TOKEN_TEXT * k, '","logprobs":null,"finish_reason":',
                 '"length"' if last else "null", ',"stop_reason":null']
        if s.token_ids:
            parts.append(',"token_ids":[' + ",".join(str(1000 + s.sent - k + i) for i in range(k))
                         + "]")
        parts.append("}]")
        if s.usage_each:
            parts.append(f',"usage":{{"prompt_tokens":{s.prompt_tokens},'
                         f'"total_tokens":{s.prompt_tokens + s.sent},'
                         f'"completion_tokens":{s.sent}}}')
        parts.append(f',"server_time":{now!r}}}\n\n')
        if s.times is not None:
            s.times.append(now)
        mode = s.mode
        if mode != "none" and s.sent == (s.n if s.n is not None else
                                         (2 if mode in ("malformed", "badshape", "error_event") else 3)):
            if mode == "malformed":
                parts.append('data: {"id": "broken", "choices": [{"text": \n\n')
            elif mode == "badshape":
                parts.append('data: {"choices":[{"text":" x","finish_reason":null}],'
                             '"usage":{"completion_tokens":null}}\n\n'
                             'data: {"choices":[7]}\n\n')
            elif mode == "error_event":
                parts.append('data: {"error":{"message":"stand-in fault: error inside the stream",'
                             '"type":"InternalServerError","param":null,"code":500}}\n\n'
                             "data: [DONE]\n\n")
                self._send(s, tr, "".join(parts), final=True)
                self._finish(s, "error", ok=True)
                return
            elif mode == "cut":
                self._send(s, tr, "".join(parts), final=True)
                tr.close()   # no [DONE], no end of the chunked body
                self._finish(s, "abort", ok=False)
                return
        if mode in ("stall", "huge") and s.sent == 2:
            if mode == "huge":
                parts.append("data: " + "x" * ((s.n or 16) << 20))
            self._send(s, tr, "".join(parts), final=True)
            self.active.pop(id(s), None)     # no more steps: silence, the connection open
            quiet = (s.n or 30) if mode == "stall" else 30
            asyncio.get_running_loop().call_later(quiet, self._hang_up, s, tr)
            return
        if last:
            if s.usage_final:
                parts.append(s.head[:s.head.index('"choices"')]
                             + f'"choices":[],"usage":{{"prompt_tokens":{s.prompt_tokens},'
                               f'"total_tokens":{s.prompt_tokens + s.sent},'
                               f'"completion_tokens":{s.sent}}},"server_time":{now!r}}}\n\n')
            if mode != "nodone":
                parts.append("data: [DONE]\n\n")
            self._send(s, tr, "".join(parts), final=True)
            self._finish(s, "length", ok=True)
            return
        self._send(s, tr, "".join(parts), final=False)

    def _send(self, s: Stream, tr, text: str, final: bool) -> None:
        """Write TEXT now, or (burst) hold it until the stream's FINAL write."""
        if s.held is None:
            self._write(tr, text)
            return
        s.held.append(text)
        if final:
            self._write(tr, "".join(s.held))
            s.held = []

    @staticmethod
    def _write(tr, text: str) -> None:
        """One HTTP/1.1 chunk straight to the transport (the response is chunked and prepared)."""
        data = text.encode()
        tr.write(b"%x\r\n%b\r\n" % (len(data), data))

    def _hang_up(self, s: Stream, tr) -> None:
        """End a silent stream: close its connection (no end of the body) and release its handler."""
        tr.close()
        s.finish_reason, s.ok = "abort", False
        if not s.done.done():
            s.done.set_result(None)

    def _finish(self, s: Stream, reason: str, ok: bool) -> None:
        if self.active.pop(id(s), None) is None:
            return
        s.finish_reason, s.ok = reason, ok
        if reason in ("length", "stop"):
            self.finished[reason] = self.finished.get(reason, 0) + 1
        if s.times is not None:
            self.traces[s.rid] = s.times
        if not s.done.done():
            s.done.set_result(None)
