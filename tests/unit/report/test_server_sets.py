"""A round of several server sets: each set's cache_config_info is read over its own span, the
round keeps what the sets agree on, and each point's KV account uses its own set's pool."""

from __future__ import annotations

from report.judge.verdicts import read_bundle_ledger
from tests.conftest import FIXTURES


def test_each_point_is_reconciled_against_the_pool_of_the_server_that_ran_it():
    # h200-causes: set 1 ran with --kv-cache-memory-bytes 1.5 GB, the other sets with vLLM's own pool.
    _, led = read_bundle_ledger(FIXTURES / "corpus" / "h200-causes" / "bundle")
    assert led.value_of("r.block_size") == 16                 # every set agrees on it
    pool = led["r.pool_tokens_metrics"]
    assert not pool.present and pool.missing.code == "reason.pool_differs_by_set"
    assert led.value_of("p.s1-L1024-c8.pool_tokens_set") == 26_144
    assert led.value_of("p.s0-L1024-c8.pool_tokens_set") == 2_085_456
    assert led.value_of("p.s1-L1024-c8.pool_tokens_usable") == 26_144 - 16    # less the null block
    # With its own pool, set 1's KV account is computed, and balances at C=8.
    assert abs(led.value_of("p.s1-L1024-c8.kv_error_pp")) < 1.0


def test_sets_that_agree_keep_one_pool_for_the_round():
    _, led = read_bundle_ledger(FIXTURES / "corpus" / "h200-tokenizer" / "bundle")
    assert led.value_of("r.pool_tokens_metrics") == 2_085_456
    assert led.value_of("p.s1-L4096-c16.pool_tokens_usable") == led.value_of("r.pool_tokens_usable")


def test_each_set_is_judged_on_its_questions_two_signals_against_the_base():
    from report.judge.verdicts import read_bundle_ledger as read
    rd, led = read(FIXTURES / "corpus" / "h200-causes" / "bundle")
    got = {c.point: (c.question, c.direction, c.verdict) for c in rd.verdicts.set_comparisons}
    # At C=8, 8 requests fit any pool and any cap of 8, so neither flag binds; eager mode slows
    # every step. At C=64 the small pool runs fewer and queues more, and eager mode still slows
    # every step; the capped set's C=64 failed its checks (it could not hold C), so it is not compared.
    assert got == {"s1-L1024-c8": ("pool", -1, "unchanged"), "s2-L1024-c8": ("seqs_cap", 1, "unchanged"),
                   "s3-L1024-c8": ("eager", 1, "held"), "s1-L1024-c64": ("pool", -1, "held"),
                   "s3-L1024-c64": ("eager", 1, "held")}
    assert led.value_of("p.s3-L1024-c8.itl_ms_p50_vs_base") > 1 > led.value_of("p.s3-L1024-c8.engine_steps_per_s_vs_base")


def test_a_sets_question_is_named_by_the_flag_it_adds():
    from report.judge.sets import SetComparison, question_of
    assert question_of(["--max-num-batched-tokens", "2048"], []) == ("step_budget", "--max-num-batched-tokens")
    assert question_of(["--enable-prefix-caching"], ["--no-enable-prefix-caching"])[0] == "prefix_caching"
    assert question_of([], ["--no-enable-prefix-caching"]) == ("prefix_caching", "--enable-prefix-caching")
    assert question_of(["--seed", "3"], []) is None
    # A smaller budget than the base's reverses what the signals must do.
    c = SetComparison("p", "b", "step_budget", "--max-num-batched-tokens", -1,
                      moved={"ttft_ms_p99": 1, "itl_ms_p99": -1})
    assert c.verdict == "held"
    c.moved = {"ttft_ms_p99": 1, "itl_ms_p99": 0}
    assert c.verdict == "mixed" and c.disagreed() == ["itl_ms_p99"]
