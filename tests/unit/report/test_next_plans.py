"""`serving-ledger next`: each step's plan, sized from the ledger, written as a new plan file
that the collector reads back unchanged (report/judge/next_steps.py, report/publish/plans.py)."""

from __future__ import annotations

import tomllib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.plan.parse import load_plan
from report.publish.plans import applied, plan_toml
from tests.conftest import ROOT, run_bench

scalars = st.one_of(st.booleans(), st.integers(-10**9, 10**9), st.floats(allow_nan=False, allow_infinity=False),
                    st.text(max_size=20))
tables = st.dictionaries(st.text("abcdefghij_", min_size=1, max_size=8),
                         st.one_of(scalars, st.lists(scalars, max_size=4),
                                   st.lists(st.lists(st.text(max_size=8), max_size=3), max_size=3)), max_size=6)


# Generating nested tables is slow on a loaded host: a slow draw is not a failure of the round trip.
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables, tables)
def test_a_plan_file_parses_back_to_the_plan_it_was_written_from(engine, sweep):
    plan = {"id": "round-9", "title": "t", "seed": 3, "engine": engine, "sweep": sweep}
    back = tomllib.loads(plan_toml(plan, ["a comment", "with two lines"]))
    assert back == {k: v for k, v in plan.items() if v != {}}


def test_changes_replace_keys_and_add_engine_flags():
    recorded = {"id": "round-2", "source": "x", "expect": {}, "engine": {"flags": ["--a"], "mode": "embedded"},
                "sweep": {"concurrency": [1, 2]}}
    plan = applied(recorded, {"engine": {"flags": ["--a", "--b"]}, "sweep": {"concurrency": [4]}}, "round-7", "t")
    assert plan["engine"]["flags"] == ["--a", "--b"] and plan["sweep"]["concurrency"] == [4]
    assert "source" not in plan and "expect" not in plan and plan["id"] == "round-7"
    assert recorded["engine"]["flags"] == ["--a"]          # what was read is never changed


def test_round_4s_budget_step_writes_a_plan_the_collector_loads(tmp_path):
    target = tmp_path / "round-7" / "plan.toml"
    target.parent.mkdir()
    run_bench("next", str(ROOT / "runs" / "round-4"), "--write", str(target), "--step", "smaller_budget")
    text = target.read_text()
    assert text.startswith("# Next step of Round 4")
    assert "Expected outcome: ITL p99 falls about in step with the budget" in text
    plan = load_plan(target)
    assert plan.id == "round-7"
    # the title in both languages, each read back on its own page
    assert plan.title == {"en": "Next step of Round 4: smaller_budget", "zh": "第 4 轮的下一步：缩小每步预算"}
    # C=128, the highest valid point, bound by compute with its ITL p99 one prefill step (180 ms
    # against 181 ms): the round's own budget (8,192 tokens, from its server log) down to a quarter.
    assert plan.sweep.server_flags == [["--max-num-batched-tokens", str(n)] for n in (8192, 4096, 2048)]
    assert plan.sweep.concurrency == [128] and plan.workload.output_len == 256
    assert plan.engine.command.startswith("/opt/torch/.venv/bin/python -m vllm")


def test_no_step_changes_the_server_for_a_point_that_failed_its_checks():
    from report.publish.compose import compose_rounds
    rep = compose_rounds([(ROOT / "runs" / "round-4" / "bundle", "round-4")])[0]
    invalid = set(rep.facts.ok_points) - set(rep.facts.valid_points)
    assert invalid == {"L1024-c256", "L1024-c512"}
    for one in rep.facts.next_steps:
        flags = (one.get("plan") or {}).get("sweep", {}).get("server_flags")
        at = (one.get("plan") or {}).get("sweep", {}).get("concurrency") or []
        # the waves of C=256 and C=512 are measured again, never answered with a server flag
        assert not (flags and {f"L1024-c{c}" for c in at} & invalid), one["id"]


def test_the_pool_step_raises_a_forced_block_override_to_what_the_requests_need(tmp_path):
    target = tmp_path / "grow.toml"
    run_bench("next", str(ROOT / "runs" / "round-2"), "--write", str(target), "--step", "grow_pool")
    plan = load_plan(target)
    # 64 requests of 256 + 128 tokens at their peak in 128-token blocks: 24,576 tokens, 5 % more, plus the null block.
    assert plan.sweep.server_flags == [[], ["--num-gpu-blocks-override", "203"]]
    assert plan.engine.flags[-2:] == ["--num-gpu-blocks-override", "160"]   # a later flag wins


def test_the_search_step_carries_the_slo_and_the_bracket(tmp_path):
    target = tmp_path / "search.toml"
    run_bench("next", str(ROOT / "runs" / "round-4"), "--write", str(target), "--step", "slo_search")
    plan = load_plan(target)
    assert (plan.sweep.search, plan.sweep.concurrency, plan.sweep.search_max) == ("slo", [64], 128)
    assert plan.slo == {"ttft_ms": 1000.0, "tpot_ms": 50.0, "itl_ms": 100.0, "percentile": 99.0}


@pytest.mark.parametrize("args,message", [(["--step", "no_such_step"], "no step of round-4"),
                                          ([], "the file exists")])
def test_an_existing_file_or_an_unknown_step_is_refused_and_nothing_is_written(tmp_path, args, message):
    target = tmp_path / "plan.toml"
    target.write_text("keep me\n")
    proc = run_bench("next", str(ROOT / "runs" / "round-4"), "--write", str(target), *args, check=False)
    assert proc.returncode == 2 and message in proc.stderr and proc.stderr.count("\n") == 1
    assert target.read_text() == "keep me\n"
    assert [p.name for p in tmp_path.iterdir()] == ["plan.toml"]


def test_the_smaller_budget_step_stays_silent_where_the_itl_tail_is_not_one_prefill_step():
    import dataclasses

    from bundle.store.reader import read_bundle
    from report.derive.round.read import read_round
    from report.judge.next_steps import next_steps
    from report.judge.result import point_labels
    from report.judge.verdicts import build_ledger
    rd = read_round(read_bundle(ROOT / "runs" / "round-4" / "bundle"), round_id="round-4")
    led = build_ledger(rd)
    valid = [p for p, v in rd.verdicts.validity.items() if v.valid]
    facts = {"valid_points": valid, "ok_points": [p.pid for p in rd.points], "point_labels": point_labels(rd.points),
             "mfu_enabled": True}
    assert "smaller_budget" in [s["id"] for s in next_steps(led, rd, facts)]
    # Forced: C=128's ITL p99 twice the prefill step, so the step is not behind the tail
    key = "p.L1024-c128.itl_p99_over_tail"
    off = dataclasses.replace(led, values=dict(led.values))
    off.values[key] = dataclasses.replace(led[key], value=2.0)
    assert "smaller_budget" not in [s["id"] for s in next_steps(off, rd, facts)]


def test_a_title_written_by_next_is_said_in_each_pages_language():
    from report.publish.compose import plan_subtitle
    said = plan_subtitle({"plan": {"title": "Next step of Round 4: smaller_budget"}})
    assert "第 4 轮" in said["zh"] and said["zh"].endswith("的下一步，缩小每步预算")
    assert "smaller_budget" not in said["en"]
    assert "rerun_" not in plan_subtitle({"plan": {"title": "Next step of round-2: rerun_L256-c4"}})["zh"]
    own = plan_subtitle({"plan": {"title": "Concurrency sweep"}})
    assert own == {"en": "Plan: “Concurrency sweep”"}    # a title its author wrote, in its language only
    both = plan_subtitle({"plan": {"title": {"en": "Next step of Round 4: smaller_budget",
                                             "zh": "第 4 轮的下一步：缩小每步预算"}}})
    assert both == {"en": said["en"], "zh": "计划标题：「第 4 轮的下一步：缩小每步预算」"}


def test_every_step_has_a_name_in_both_languages():
    import re as _re

    from report.words import has
    src = (ROOT / "report/judge/next_steps.py").read_text(encoding="utf-8")
    sids = set(_re.findall(r'step\(f?"([a-z_]+?)(?:_\{[a-z]+\})?"', src))
    assert {"smaller_budget", "prefix_caching", "rerun", "longer"} <= sids
    for sid in sids:
        assert has(f"label.step_name_{sid}", "en") and has(f"label.step_name_{sid}", "zh"), sid
