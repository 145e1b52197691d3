"""A point's warm-up is sized to the point: an open loop's by its rate and its window (never one
request per slot of a large cap at a slow rate), ended by its first reply unless the plan sizes
it; a plan's warmup_s bounds it in time; the progress line shows the warm-up apart, with its
own ETA."""

from __future__ import annotations

import asyncio

import pytest

from bench.plan.budget import warmup_count, warmup_ends_at_first_reply
from bench.plan.parse import plan_from_dict
from bench.plan.spec import SweepSpec
from bench.point_driver import (
    LocalSlots,
    Phase,
    PointRun,
    drive_open,
    point_shape,
    progress_line,
    warm_until,
)
from bench.prompts import PlanError
from serving_ledger.cli import main


def test_the_issue_case_warms_up_for_its_window_not_one_request_per_slot():
    # concurrency = [2048] is an open loop's cap; at 4 req/s one request per slot would be
    # 2,048 requests, 512 s of warm-up before a 25 s window.
    sweep = SweepSpec(concurrency=[2048], request_rate=[4.0], arrival="poisson", duration_s=25.0)
    assert warmup_count(sweep, 2048, 4.0) == 100          # 4 req/s × 25 s
    assert warmup_count(sweep, 2048, 4.0) / 4.0 <= sweep.duration_s


def test_an_open_loop_warm_up_is_capped_by_its_slots_and_sized_by_a_request_count():
    by_count = SweepSpec(concurrency=[8], request_rate=[50.0], arrival="poisson", requests_per_point=40)
    assert warmup_count(by_count, 8, 50.0) == 8            # 40 arrivals' worth, at most the 8 slots
    assert warmup_count(by_count, None, 50.0) == 40        # no cap: the window's 40 arrivals
    assert warmup_count(by_count, None, 0.5) == 40         # 80 s of arrivals, the window's own


def test_warmup_s_bounds_the_open_loop_warm_up_in_time_and_may_pass_the_window():
    sweep = SweepSpec(concurrency=[2048], request_rate=[4.0], arrival="poisson", duration_s=25.0,
                      warmup_s=5.0)
    assert warmup_count(sweep, 2048, 4.0) == 20
    sweep.warmup_s = 60.0                                  # the plan says so: past the window
    assert warmup_count(sweep, 2048, 4.0) == 240
    assert not warmup_ends_at_first_reply(sweep, 4.0)      # the plan sized it: it runs its time


def test_a_closed_loop_keeps_one_warm_up_request_per_stream_and_a_plan_count_wins():
    sweep = SweepSpec(concurrency=[64], duration_s=25.0)
    assert warmup_count(sweep, 64) == 64
    assert not warmup_ends_at_first_reply(sweep, None)
    sweep.warmup_requests = 3
    assert warmup_count(sweep, 64, 4.0) == 3
    assert not warmup_ends_at_first_reply(sweep, 4.0)


def test_a_closed_loop_warmup_s_makes_every_send_before_it_warm_up():
    assert warm_until({"concurrency": 4, "ramp_s": 2.0}, 100.0, 5.0) == 105.0
    assert warm_until({"concurrency": 4, "ramp_s": 7.0}, 100.0, 5.0) == 107.0
    assert warm_until({"concurrency": 4, "request_rate": 2.0}, 100.0, 5.0) == 100.0


def test_point_shape_reads_the_open_loop_cap_and_rate():
    plan = plan_from_dict({"sweep": {"concurrency": [2048], "request_rate": [4.0], "arrival": "poisson",
                                     "duration_s": 25.0}})
    point = plan.points()[0]
    C, warmup, total, by_duration, _, pool = point_shape(plan, point, 0)
    assert (C, warmup, by_duration) == (2048, 100, True)
    assert pool <= total


@pytest.mark.parametrize("sweep, words", [
    ({"warmup_s": -1.0}, "[sweep].warmup_s: -1.0 is out of range"),
    ({"warmup_s": "5"}, "[sweep].warmup_s: expected a number"),
    ({"warmup_s": 5.0, "warmup_requests": 10}, "[sweep].warmup_s: the warm-up is given as 10 requests"),
])
def test_a_bad_warmup_s_is_refused_in_one_line(sweep, words):
    with pytest.raises(PlanError) as e:
        plan_from_dict({"sweep": {"concurrency": [4], **sweep}}, "p.toml")
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_bad_warmup_s_flag_exits_2(tmp_path, capsys):
    assert main(["run", "--endpoint", "http://127.0.0.1:9", "--concurrency", "4",
                 "--warmup-s", "-3", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "--warmup-s" in err and "warmup_s" in err and err.count("\n") == 1


def test_the_progress_line_shows_the_warm_up_apart_with_its_own_eta():
    # 2,048 warm-up requests at 4 req/s: 40 ended after 10 s, so about 502 s are left.
    warming = progress_line("[1/1] r4", 40, 10**9, 4000, 0, 10.0, Phase(40, 2048, window_s=25.0))
    assert "warm-up 40/2048 requests" in warming and "warm-up ETA 502 s" in warming
    # In the window of a point bound by duration the ETA is the time the window has left.
    window = progress_line("[1/1] r4", 150, 10**9, 4000, 0, 40.0, Phase(100, 100, measured_at=30.0,
                                                                        window_s=25.0))
    assert "window 50 requests" in window and "window ETA 15 s" in window
    counted = progress_line("[1/1] c4", 12, 24, 4000, 0, 20.0, Phase(4, 4, measured_at=10.0))
    assert "window 8/20 requests" in counted and "window ETA 15 s" in counted
    assert "nan" not in progress_line("[1/1] c4", 0, 20, 0, 0, 0.1, Phase(0, 0))


def test_an_open_loop_sized_by_the_point_measures_once_its_first_warm_up_reply_came():
    # HAND-BUILT: 10 arrivals 10 ms apart, each answered 25 ms after its send; 6 planned warm-up.
    sent: list[tuple[int, bool]] = []
    loop_t0 = []

    def now() -> float:
        return asyncio.get_running_loop().time() - loop_t0[0]

    async def send(prompt, i, warm, t_slot, t_sched):
        sent.append((i, warm))
        await asyncio.sleep(0.025)
        return {"i": i}

    async def record(rec):
        return None

    async def go(ends: bool) -> list[tuple[int, bool]]:
        sent.clear()
        loop_t0[:] = [asyncio.get_running_loop().time()]
        run = PointRun(pool=[None], warmup=6, ramp_end=0.0, by_duration=False, duration_s=0.0,
                       slots=LocalSlots(total=10, by_duration=False), now=now, send=send,
                       on_measure=lambda t: None, on_record=record, ends_at_first_reply=ends)
        await drive_open(run, [(i, 0.01 * i) for i in range(10)], None)
        return sorted(sent)

    fixed = asyncio.run(go(False))
    assert [w for _, w in fixed] == [True] * 6 + [False] * 4
    early = asyncio.run(go(True))
    warm = [i for i, w in early if w]
    # Request 0's reply comes at ~25 ms: requests from ~30 ms on are measured, well before 6.
    assert warm and warm == list(range(len(warm))) and len(warm) < 6
