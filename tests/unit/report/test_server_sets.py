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
