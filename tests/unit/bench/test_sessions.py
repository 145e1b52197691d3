"""Multi-turn sessions (bench/sessions.py): seeded draws, a history that grows by the reply and
the new text with the previous prompt as its exact prefix, the users' loop, the plan checks."""

from __future__ import annotations

import asyncio

import pytest

from bench.plan.parse import plan_from_dict
from bench.point_driver import LocalSlots, warm_or_measure
from bench.prompts import PlanError
from bench.sessions import SessionDraws, drive_sessions, longest_prompt, next_prompt

WORKLOAD = {"kind": "sessions", "api": "completions", "chunk_token_counts": "token_ids",
            "input_len": 16, "output_len": 8, "turns": 3, "think_ms": 100,
            "turns_dist": {"kind": "uniform", "range_ratio": 0.5},
            "input_dist": {"kind": "uniform", "range_ratio": 0.5},
            "think_dist": {"kind": "lognormal", "mean": 100, "sd": 50, "min": 10, "max": 500}}


def workload(**over):
    return plan_from_dict({"workload": {**WORKLOAD, **over}}).workload


def conversation(seed: int, replies: list[list[int]]):
    """The prompts and think times of one conversation, each turn fed the given reply."""
    d = SessionDraws(workload(), 16, 8, seed)
    c = d.conversation()
    out, reply = [], []
    for k in range(c.turns):
        p, think = d.turn(c, reply)
        out.append((p, think))
        reply = replies[k]
    return c, out


def test_the_same_seed_draws_the_same_conversation_and_another_seed_another():
    replies = [[7, 8, 9]] * 8
    a, b, c = conversation(5, replies)[1], conversation(5, replies)[1], conversation(6, replies)[1]
    assert [(p.prompt, p.max_tokens, t) for p, t in a] == [(p.prompt, p.max_tokens, t) for p, t in b]
    assert [p.prompt for p, _ in a] != [p.prompt for p, _ in c]


def test_each_turn_resends_the_previous_prompt_and_its_reply_as_an_exact_prefix():
    replies = [[1001, 1002], [2001, 2002, 2003], [3001], [4001], [5001], [6001]]
    c, turns = conversation(3, replies)
    assert c.turns >= 2
    for k in range(1, len(turns)):
        prev, cur = turns[k - 1][0].prompt, turns[k][0].prompt
        assert cur[: len(prev)] == prev                              # token-exact prefix
        assert cur[len(prev): len(prev) + len(replies[k - 1])] == replies[k - 1]
        assert len(cur) > len(prev) + len(replies[k - 1])            # and new user text
        assert turns[k][0].input_len == len(cur)


def test_think_time_follows_each_turn_but_the_last():
    _, turns = conversation(4, [[1]] * 8)
    thinks = [t for _, t in turns]
    assert thinks[-1] is None
    assert all(0.010 <= t <= 0.500 for t in thinks[:-1])


def test_next_prompt_concatenates_in_order():
    assert next_prompt([1, 2], [3], [4, 5]) == [1, 2, 3, 4, 5]


def test_longest_prompt_is_the_last_turn_of_the_longest_conversation():
    w = workload()
    # turns up to ⌈3·1.5⌉ = 5, new text up to 24, replies fixed at 8
    assert longest_prompt(w, 16, 8) == (5 * 24 + 4 * 8, 8)


class FakeRun:
    """The parts of a PointRun the users' loop reads."""

    def __init__(self, total: int):
        self.slots = LocalSlots(total=total, by_duration=False)
        self.warmup, self.ramp_end, self.by_duration, self.duration_s = 0, 0.0, False, 0.0
        self.records, self.measured = [], []
        self.on_issue = lambda: None
        self.on_measure = self.measured.append

    def now(self) -> float:
        return 0.0

    async def on_record(self, rec):
        self.records.append(rec)


def test_users_send_their_turns_in_order_and_new_conversations_after_the_last():
    run, sent, slept = FakeRun(total=20), [], []
    d = SessionDraws(workload(), 16, 8, 9)

    async def send(p, i, warm, t_slot, session, turn, think, reply):
        reply.extend([3000 + turn, 3100 + turn])
        sent.append((session, turn, p.prompt))
        return {"status": "ok", "session": session, "turn": turn}

    async def sleep(s):
        slept.append(s)
        await asyncio.sleep(0)

    asyncio.run(drive_sessions(run, d, [0.0, 0.0], send, warm_or_measure, sleep))
    assert len(sent) == 20 and len(run.measured) == 1
    by_session: dict[int, list] = {}
    for s, k, prompt in sent:
        by_session.setdefault(s, []).append((k, prompt))
    assert len(by_session) >= 4                        # two users, conversations of 2 to 5 turns
    for turns in by_session.values():
        assert [k for k, _ in turns] == list(range(len(turns)))
        for (k, a), (_, b) in zip(turns, turns[1:]):
            assert b[: len(a) + 2] == a + [3000 + k, 3100 + k]
    assert slept and all(s is not None for s in slept)


def test_a_failed_turn_ends_its_conversation():
    run, sent = FakeRun(total=4), []
    d = SessionDraws(workload(turns_dist={}, turns=3), 16, 8, 2)

    async def send(p, i, warm, t_slot, session, turn, think, reply):
        sent.append((session, turn))
        return {"status": "error" if turn == 1 else "ok"}

    asyncio.run(drive_sessions(run, d, [0.0], send, warm_or_measure, lambda s: asyncio.sleep(0)))
    assert sent == [(0, 0), (0, 1), (1, 0), (1, 1)]


@pytest.mark.parametrize("over, key", [
    ({"api": "chat"}, "[workload].api"),
    ({"chunk_token_counts": "usage"}, "[workload].chunk_token_counts"),
    ({"think_dist": {"kind": "lognormal", "sd": 5}}, "[workload.think_dist].max"),
    ({"turns": 0}, "turns"),
])
def test_a_plan_no_user_could_hold_is_refused_naming_its_key(over, key):
    with pytest.raises(PlanError, match=key.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        workload(**over)


def test_sessions_refuse_several_client_processes():
    with pytest.raises(PlanError, match=r"\[client\]\.workers"):
        plan_from_dict({"workload": WORKLOAD, "client": {"workers": 2}})
