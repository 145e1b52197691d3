"""Multi-turn sessions: each of a point's users holds a conversation of drawn turns, resending
its whole history every turn, with a drawn think time between turns.

A `sessions` workload (`[workload].kind = "sessions"`) makes the point's concurrency the number
of users (a user, not a request, is the unit of concurrency). Each user, from the point's seeded
generator, draws a conversation's number of turns (`turns`, `[workload.turns_dist]`, a length
distribution of bench/lengths.py), then per turn its new user text (`input_len`,
`[workload.input_dist]`, in token ids), the reply's length (`output_len`, `[workload.output_dist]`)
and, after the reply, the think time in milliseconds (`think_ms`, `[workload.think_dist]`)
before the next turn; when a conversation ends the user starts a new one at once.

Invariant: turn k + 1's prompt is turn k's prompt, then the token ids the server returned for
turn k's reply (`return_token_ids`), then the new user ids: the previous prompt is a token-exact
prefix of the next, so prefix caching can hit on the whole history. The completions API with
token-id prompts keeps it exact (a chat template or re-tokenised text would not).
Each request's record carries `session` (unique within the point), `turn` (0 first) and
`think_s` (the pause the user takes after this turn's reply; null after its last turn).
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any, Callable

from bench.lengths import check_dist, length_sampler, longest
from bench.loop import sleep_until
from bench.prompts import PlanError, Prompt

KIND = "sessions"


# The longest think time a user may take (ms): the bound of [workload].think_ms.
MAX_THINK_MS = 3_600_000


def check_sessions(w: Any, src: str, workers: int, duration_s: float = 0.0) -> None:
    """Refuse a sessions workload its users could not hold, naming the key: a think time longer
    than an hour, or than a point of DURATION_S seconds (its users would hold it past its end)."""
    if w.api != "completions":
        raise PlanError(f"{src} [workload].api: a sessions workload resends token ids, so it needs "
                        f"the completions API (got {w.api!r})")
    if w.chunk_token_counts != "token_ids":
        raise PlanError(f"{src} [workload].chunk_token_counts: a sessions workload resends each "
                        f"reply's token ids, so it needs \"token_ids\" (got {w.chunk_token_counts!r})")
    if workers > 1:
        raise PlanError(f"{src} [client].workers: a sessions workload runs in one client process "
                        f"(got {workers})")
    for key in ("turns_dist", "think_dist"):
        if getattr(w, key):
            check_dist(getattr(w, key), f"{src} [workload.{key}]")
    where = f"{src} [workload.think_dist].max" if w.think_dist else f"{src} [workload].think_ms"
    think_ms = longest(w.think_dist, w.think_ms) if w.think_dist else w.think_ms
    if think_ms > MAX_THINK_MS:
        raise PlanError(f"{where}: a think time of up to {think_ms / 1000:,.0f} s is over "
                        f"{MAX_THINK_MS // 1000:,} s")
    if duration_s > 0 and think_ms / 1000 >= duration_s:
        raise PlanError(f"{where}: a think time of up to {think_ms / 1000:,g} s is not shorter than "
                        f"a point ([sweep].duration_s = {duration_s:g}); its users would still be "
                        "thinking when it ends")


def longest_prompt(w: Any, input_len: int, output_len: int) -> tuple[int, int]:
    """(the longest prompt a user's last turn can send, its reply's longest length)."""
    n_in, n_out = longest(w.input_dist, input_len), longest(w.output_dist, output_len)
    turns = longest(w.turns_dist, w.turns)
    return turns * n_in + (turns - 1) * n_out, n_out


def next_prompt(previous: list[int], reply: list[int], new: list[int]) -> list[int]:
    """The next turn's prompt: the previous prompt, the reply the server gave, the new user ids."""
    return [*previous, *reply, *new]


@dataclass
class Conversation:
    """One user's conversation: its id, its drawn number of turns and the history so far."""

    session: int
    turns: int
    turn: int = 0
    history: list[int] = field(default_factory=list)


@dataclass
class SessionDraws:
    """Every draw of a point's users, from one seeded generator (a round is repeatable)."""

    w: Any
    input_len: int
    output_len: int
    seed: int

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.draw_turns = length_sampler(self.w.turns_dist, self.w.turns)
        self.draw_in = length_sampler(self.w.input_dist, self.input_len)
        self.draw_out = length_sampler(self.w.output_dist, self.output_len)
        self.draw_think = length_sampler(self.w.think_dist, self.w.think_ms)
        self.sessions = 0

    def conversation(self) -> Conversation:
        """A new conversation with its drawn number of turns."""
        self.sessions += 1
        return Conversation(self.sessions - 1, self.draw_turns(self.rng))

    def turn(self, c: Conversation, reply: list[int]) -> tuple[Prompt, float | None]:
        """Turn c.turn's prompt (after REPLY, the last turn's reply ids) and the think time (s)
        after it, None after the conversation's last turn; advances C."""
        new = [self.rng.randrange(self.w.token_id_low, self.w.token_id_high)
               for _ in range(self.draw_in(self.rng))]
        c.history = next_prompt(c.history, reply, new) if c.turn else new
        n_out = self.draw_out(self.rng)
        think = self.draw_think(self.rng) / 1000.0 if c.turn + 1 < c.turns else None
        c.turn += 1
        return Prompt(list(c.history), len(c.history), n_out), think


class ReplyIds(list):
    """Where a turn's reply token ids go as they stream in, with the size of the served
    vocabulary (None when not known) that each id must fall in (bench/client.py checks them)."""

    def __init__(self, vocab: int | None = None):
        super().__init__()
        self.vocab = vocab


# send(prompt, i, is_warm, t_slot, session, turn, think_s, reply_ids) -> the request's record
Send = Callable[..., Any]


async def drive_sessions(run: Any, draws: SessionDraws, starts: list[float], send: Send,
                         warm_or_measure: Callable[[Any, int, float], bool],
                         sleep: Callable[[float], Any] = asyncio.sleep,
                         vocab: int | None = None) -> None:
    """A closed loop of users (one per start time): each sends its conversation's turns, each
    after the last one's reply and think time, and starts a new conversation when one ends.
    WARM_OR_MEASURE is bench.point_driver's (which reads the plan, which reads this module);
    a reply's token ids are resent only when each is an id of VOCAB (the served vocabulary)."""
    async def user(start: float) -> None:
        await sleep_until(start, run.now)
        c, reply = draws.conversation(), []
        while not run.slots.stopped():
            t_slot = run.now()
            i = run.slots.next_index(t_slot)
            if i is None:
                return
            run.on_issue()
            turn = c.turn
            prompt, think = draws.turn(c, reply)
            is_warm = warm_or_measure(run, i, t_slot)
            reply = ReplyIds(vocab)
            rec = await send(prompt, i, is_warm, t_slot, c.session, turn, think, reply)
            await run.on_record(rec)
            if rec["status"] != "ok" or think is None:
                # A failed turn ends its conversation (its history has no reply to resend).
                c, reply = draws.conversation(), []
                continue
            await sleep(think)

    await asyncio.gather(*(user(t) for t in starts))
