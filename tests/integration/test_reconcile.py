"""vLLM's MFU counters against the lifecycle prediction, on a round recorded from the real engine.

The round (session engine: `--enable-mfu-metrics`, prefix caching on, 24 blocks of 128):
random token-id prompts of 200 tokens from a seed no other test uses, so no two prompts
share a first block and `prefix_cache_hits_total` stays at 0 (asserted); 40 output tokens;
points C = 2 (a primer, not reconciled: a round's first scrape can race its first request,
so the counters' value before it is not known), C = 1 and C = 4, two idle seconds between
points so that idle scrapes bracket each point even when the sampler falls behind. No prompt is chunked: the CPU API server's
step budget is 2048 tokens (vllm/engine/arg_utils.py, CPU default 2048 × world size) and
C × prompt ≤ 4 × 200 = 800. The pool holds C × 2 blocks at most, far below 23: no
preemption (asserted).

FLOPs. Tolerance: exact up to float rounding (relative 1e-9). vLLM's perf.py bills each step
int(term) of products that are whole numbers here (L = 2.0 layers, integer dimensions), and
every FLOPs term is linear in the step's tokens, Σ n·c or logits rows, so the sum over steps
equals the sum over request lifecycles, whatever the batching. Measured on this engine: the
FLOPs counter equals the prediction to the FLOP at C = 1 and C = 4 (10,658,611,200 for 12
requests of 200 + 40 at C = 4 while this test was written), and so does the write-bytes counter. A difference would come from
chunking (attn_qk/attn_av lower, unembed higher), prefix hits (every term lower) or
preemption (recompute): each is ruled out above.

Read bytes. vLLM bills the weight reads (5,046,272 B for this model) once per step, so the
prediction needs the step count: Δ `iteration_tokens_total_count` counts the steps that
returned outputs. The counter holds more: exactly one more step of weight reads for every
time the engine went idle. That step comes from `EngineCore.step`: `Scheduler.has_requests()`
is still true while finished ids wait to be sent to the worker, so one more step runs with
nothing scheduled, and `update_from_output` bills it in perf.py: T = 0 leaves only the
weight terms, and `PerfMetricsProm.observe` skips a step only when all three counters are 0.
That step returns no outputs, so the histogram never sees it. At C = 1 the engine idles after
every request, so the prediction with (steps with outputs + requests) steps is exact. At C = 4 the
number of idle moments depends on how finishing requests and their successors interleave
(here they run in lockstep waves), so the test checks that the residual is a whole number of
weight reads between the idle periods the client's records prove and the requests that finished.
"""

from __future__ import annotations

import pytest

from bench.engine import TINY_MODEL_DIR
from bundle.store.reader import read_bundle
from report.architecture import theory as T
from report.derive.reconcile import estimator as R
from report.derive.series import scrapes as S
from report.derive.stats import requests as ST
from report.ledger import Absent
from tests import oracles as O
from tests.conftest import run_bench

pytestmark = pytest.mark.engine

INPUT_LEN, OUTPUT_LEN = 200, 40
CPU_STEP_BUDGET = 2048  # --max-num-batched-tokens default of vLLM's API server on CPU
PLAN = f"""
seed = 7500173
[engine]
model_config = "{TINY_MODEL_DIR}"
[workload]
input_len = {INPUT_LEN}
output_len = {OUTPUT_LEN}
[sweep]
concurrency = [2, 1, 4]
requests_per_point = 4
cooldown_s = 2
[sampler]
metrics_interval_s = 0.2
"""


@pytest.fixture(scope="module")
def bundle(engine, tmp_path_factory):
    d = tmp_path_factory.mktemp("reconcile")
    (d / "plan.toml").write_text(PLAN)
    run_bench("run", "--plan", str(d / "plan.toml"), "--out", str(d / "b"), "--endpoint", engine.endpoint)
    return read_bundle(d / "b")


def point(bundle, pid: str):
    """The point's window, its requests (warm-ups included) and the quiet scrapes around it."""
    w = ST.point_windows(bundle.points)[pid]
    reqs = ST.requests_of_point(bundle.requests, w)
    a, b = R.quiet_bracketing_window(bundle.metrics, w.t_start, w.t_end)
    return w, reqs, a, b


@pytest.fixture(scope="module")
def config(bundle):
    return bundle.manifest["model"]["config"]


def test_round_is_free_of_hits_chunking_and_preemption(bundle):
    assert bundle.manifest["status"] == "complete"
    assert all(r["status"] == "ok" for r in bundle.requests)
    assert all(R.request_token_counts(r) == (INPUT_LEN, OUTPUT_LEN, 0) for r in bundle.requests)
    assert S.counter_increase(bundle.metrics, None, None, R.PREFIX_HITS) == 0
    assert S.counter_increase(bundle.metrics, None, None, R.PREEMPTIONS) == 0
    assert 4 * INPUT_LEN <= CPU_STEP_BUDGET


@pytest.mark.parametrize("pid, n_requests", [("L200-c1", 1 + 4), ("L200-c4", 4 + 4)])
def test_flops_counter_matches_the_term_by_term_prediction(bundle, config, pid, n_requests):
    w, reqs, a, b = point(bundle, pid)
    rec = O.flops_reconciliation(config, bundle.metrics, bundle.requests, a, b,
                                 concurrency=w.settings["concurrency"],
                                 max_num_batched_tokens=CPU_STEP_BUDGET)
    assert rec.requests_inside == len(reqs) == n_requests
    assert rec.requests_straddling == 0
    assert set(rec.predicted_terms) == set(R.FLOPS_TERMS)
    assert rec.ratio == pytest.approx(1.0, rel=1e-9), rec.explanation
    assert "No prompt can have been chunked" in rec.explanation["attn_qk"]
    assert "No prefix-cache hits" in rec.explanation["qkv_proj"]
    # The compact rows are exact: the same terms as every step of every request, one by one.
    shape = T.model_shape(config)
    by_step: dict[str, int] = {}
    for r in reqs:
        for step in O.request_lifecycle_steps(*R.request_token_counts(r)):
            for k, v in T.vllm_estimated_flops_terms(shape, [step]).items():
                name = R.FLOPS_TERM_NAMES[k]
                by_step[name] = by_step.get(name, 0) + v
    assert by_step == rec.predicted_terms
    # A term the formulas give directly: ffn = 2·D·3·DI·L per scheduled token.
    tokens = n_requests * (INPUT_LEN + OUTPUT_LEN - 1)
    assert rec.predicted_terms["ffn"] == 2 * 256 * 3 * 704 * 2 * tokens
    wr = O.write_bytes_reconciliation(config, bundle.metrics, bundle.requests, a, b)
    assert wr.ratio == pytest.approx(1.0, rel=1e-9)


def test_read_bytes_at_c1_need_one_idle_step_per_request(bundle, config):
    w, reqs, a, b = point(bundle, "L200-c1")
    rec = O.read_bytes_reconciliation(config, bundle.metrics, bundle.requests, a, b, concurrency=1,
                                      max_num_batched_tokens=CPU_STEP_BUDGET)
    iterations = O.steps_with_outputs(bundle.metrics, a, b)
    assert iterations == len(reqs) * OUTPUT_LEN  # one prefill step + 39 decode steps each
    # Closed loop at C = 1: the client's records show a gap after every request.
    assert rec.steps == iterations + len(reqs) == rec.steps_upper
    assert rec.idle_steps == pytest.approx(len(reqs), abs=1e-9)
    assert rec.ratio == pytest.approx(1.0, rel=1e-9), rec.explanation
    # Without the idle steps, the histogram's step count alone falls short by exactly them.
    short = O.predicted_read_bytes(config, reqs, iterations)
    assert rec.measured - short == len(reqs) * O.weight_read_bytes_per_step(config)


def test_read_bytes_at_c4_differ_only_by_whole_idle_steps(bundle, config):
    w, reqs, a, b = point(bundle, "L200-c4")
    rec = O.read_bytes_reconciliation(config, bundle.metrics, bundle.requests, a, b, concurrency=4,
                                      max_num_batched_tokens=CPU_STEP_BUDGET)
    idle = rec.idle_steps
    assert idle == pytest.approx(round(idle), abs=1e-6), rec.explanation["weights"]
    assert 1 <= round(idle) <= len(reqs)
    assert rec.predicted <= rec.measured <= rec.predicted_upper
    assert "a whole number" in rec.explanation["weights"]
    # The per-step weight reads are a small part at C = 4: even the bounds are within 10 %.
    assert rec.ratio == pytest.approx(1.0, rel=0.1)


def test_counters_left_at_zero_are_absent_not_zero(bundle, config):
    scrapes = [{**s, "samples": {k: (0.0 if k.startswith("vllm:estimated_") else v)
                                 for k, v in s["samples"].items()}} if s.get("ok") else s
               for s in bundle.metrics]
    w, reqs, a, b = point(bundle, "L200-c1")
    with pytest.raises(Absent, match="enable-mfu-metrics"):
        O.flops_reconciliation(config, scrapes, bundle.requests, a, b)
