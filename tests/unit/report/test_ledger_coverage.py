"""Every public function of a quantity module reaches a ledger of the committed bundles.

The ledgers: each committed bundle (runs/round-1, 2, 3, 5, 6 and the bundles in tests/fixtures,
whose h200-round-4 is runs/round-4 trimmed to three points: the whole round takes ~40 s to
build and reaches no other function), each round compared with its predecessor as the site
does, and the capacity planner's ledger of every model config in tests/fixtures/models. A
public function none of them names as a `Value.func` is dead code or a helper; a helper is
listed in NON_LEDGER_HELPERS with the reason, and the test fails on any other, and on a
listed helper that reaches a ledger after all (remove it from the list then).
"""

from __future__ import annotations

import importlib
import inspect
import json

import pytest

from bundle.slo import slo_from_text
from bundle.store import read_bundle
from report.derive.round_ledger import read_round
from report.judge.compare import cross_round_ledger
from report.judge.verdicts import build_ledger
from report.ledger import quantity_name
from report.planner.explain import plan
from tests.conftest import FIXTURES, ROOT
from tests.unit.report.test_ledger_contract import QUANTITY_MODULES

COVERAGE_SLO = "ttft:1000,tpot:50,itl:60,e2e:60000,p:99"

# Rounds in comparison order (each is compared with the one before it) and lone bundles.
ROUND_CHAINS = ([ROOT / "runs" / f"round-{n}" / "bundle" for n in (1, 2, 3)],
                [FIXTURES / "h200-round-4", FIXTURES / "h200-lockstep"],
                [ROOT / "runs" / "round-5" / "bundle"],
                [ROOT / "runs" / "round-6" / "bundle"],
                [FIXTURES / "cpu-demo"])

_SELECTION = "a step of a value's selection or reduction, called by the function the ledger names"
_ENGINE_ORACLE = ("the prediction the engine tests (tests/integration/test_reconcile.py, "
                  "test_kv_real.py) check the real engine's counters against; no report shows it")
_CLOSED_FORM = "a closed form the tests check a general function of the tool against"

# Public functions that never reach a ledger, by module, each with the reason it exists.
NON_LEDGER_HELPERS: dict[str, str] = {
    # report.derive.analyses
    "analyses.bracketing_window": "the window of the counter reads behind a value; build.py cites it as sources",
    "analyses.counter_rate_series": "a counter's rate over time for the figures (report/publish/figures.py), not one number",
    "analyses.doc_of": "the one-line description of a function, for derive's doc",
    "analyses.span": "a window's bounds as build.py passes them on; not a quantity",
    # report.derive.stats: per-request columns and selections that the ledger's statistics read
    **{f"stats.{n}": _SELECTION for n in (
        "e2es_ms", "failed", "interrupted_window", "itl_gaps_ms", "measured", "output_token_counts",
        "output_tokens", "point_windows", "requests_of_point", "slot_waits_ms", "tpots_ms",
        "ttfts_from_schedule_ms", "e2es_from_schedule_ms",
        "ttfts_ms", "request_latencies_ms")},
    # report.derive.series: reading scrapes
    **{f"series.{n}": _SELECTION for n in (
        "cache_config_info", "counter_moved", "counter_rate", "gauge_series", "gauge_values",
        "histogram_increase", "histogram_mean", "histogram_window_mean",
        "kv_pool_tokens_from_cache_config", "matching_samples", "names_for", "scrape_gaps",
        "scrape_value", "scrapes_in_window", "steady_window")},
    # report.derive.power
    "power.window_samples": _SELECTION,
    "power.window_rows": _SELECTION,
    "power.dcgm_gpu_rows": "reads a DCGM exporter's scrapes as the GPU rows the ledger's power and GPM "
                           "functions take (tests/integration/test_remote_gpus.py; no committed round has one)",
    "power.dcgm_gpus": "names a remote server's GPUs from its exporter's labels, for the peaks "
                       "(tests/integration/test_remote_gpus.py)",
    "power.time_weighted_mean": "the mean every GPM share and rate the ledger names is taken by",
    "power.gpm_absent_reason": "reads the manifest's reason text back as a code (tests/unit/report/test_gpucounters.py)",
    # report.derive.goodput: the steps of the capacity functions (tests/unit/report/test_goodput.py)
    "goodput.isotonic_non_increasing": "the fit behind every capacity function the ledger names",
    "goodput.objective_crossing": "the crossing behind every capacity function the ledger names",
    "goodput.point_meets_slo": "a search sweep's verdict on a point while it runs (bench/search.py)",
    # report.architecture.theory: the terms the ledger's theory functions are made of
    **{f"theory.{n}": "a term of a theory function the ledger names (or of the planner's)" for n in (
        "attention_params_per_layer", "embedding_params", "flops_per_token", "kv_bytes_per_token",
        "kv_pool_tokens_from_memory", "max_concurrency", "mbu", "mfu", "mha_kv_bytes_per_token",
        "mla_attention_params_per_layer", "mla_kv_bytes_per_token", "params_non_embedding",
        "vllm_estimated_flops_terms", "vllm_estimated_read_bytes_terms",
        "vllm_estimated_write_bytes_terms", "vllm_step_requests", "weight_bytes",
        "weight_bytes_read_per_step")},
    "theory.max_input_len_at_concurrency_whole_blocks": _CLOSED_FORM,
    "theory.vllm_estimated_read_bytes_by_kind": _CLOSED_FORM,
    # report.derive.reconcile
    **{f"reconcile.{n}": _SELECTION for n in (
        "counter_window", "effective_concurrency", "estimated_counter_increase", "lifecycle_window",
        "quiet_bracketing_window", "requests_inside_window", "requests_straddling_window",
        "usable_pool_tokens", "predicted_flops", "predicted_flops_terms", "flops_reconciliation",
        "engine_busy_periods", "idle_steps_implied", "steps_with_outputs", "request_token_counts")},
    **{f"reconcile.{n}": _ENGINE_ORACLE for n in (
        "expected_kv_usage_mean_fraction", "expected_kv_usage_median_fraction", "kv_usage_error_pp",
        "kv_blocks_at_progress", "kv_blocks_distribution", "kv_blocks_in_use_distribution",
        "kv_mean_blocks_per_request", "pool_tokens_from_cache_config",
        "usable_pool_tokens_from_cache_config", "predicted_read_bytes", "predicted_read_bytes_terms",
        "predicted_read_bytes_per_request_terms", "predicted_write_bytes",
        "predicted_write_bytes_terms", "read_bytes_reconciliation", "write_bytes_reconciliation",
        "request_lifecycle_steps", "weight_read_bytes_per_step", "weight_read_bytes_per_step_terms")},
}


def public_functions(module: str) -> list[str]:
    """"module.name" of each public function defined in MODULE (report.architecture.theory → theory.x)."""
    mod = importlib.import_module(module)
    short = module.rsplit(".", 1)[1]
    return [f"{short}.{name}" for name, f in inspect.getmembers(mod, inspect.isfunction)
            if f.__module__ == module and not name.startswith("_")]


@pytest.fixture(scope="module")
def reached() -> set[str]:
    """Every Value.func of the ledgers described in the module docstring."""
    funcs: set[str] = set()
    for chain in ROUND_CHAINS:
        prev = None
        for path in chain:
            rd = read_round(read_bundle(path))
            led = build_ledger(rd)
            if prev is not None:
                cross_round_ledger(led, rd, prev[1], prev[0])
            funcs |= {v.func for v in led.values.values()}
            prev = rd, led
    # An SLO that the trimmed H200 round meets at C=1 and misses at C=64 (ITL p99 72 ms): the
    # capacity functions reach a crossing.
    rd = read_round(read_bundle(FIXTURES / "h200-round-4"), (slo_from_text(COVERAGE_SLO), "--slo"))
    funcs |= {v.func for v in build_ledger(rd).values.values()}
    for config in sorted((FIXTURES / "models").glob("*.config.json")):
        p = plan(json.loads(config.read_text()), "H200", concurrency=16, input_len=1024,
                 output_len=256)
        funcs |= {v.func for v in p.ledger.values.values()}
    return {quantity_name(f) for f in funcs}


@pytest.mark.parametrize("module", QUANTITY_MODULES)
def test_every_public_function_reaches_a_ledger_or_is_a_listed_helper(module, reached):
    public = public_functions(module)
    assert public
    unlisted = [f for f in public if f not in reached and f not in NON_LEDGER_HELPERS]
    assert not unlisted, (f"{module}: public functions that reach no ledger of the committed "
                          f"bundles: {unlisted}. Wire them through a ledger, make them private, "
                          "or list them in NON_LEDGER_HELPERS with the reason")
    listed_but_reached = [f for f in public if f in reached and f in NON_LEDGER_HELPERS]
    assert not listed_but_reached, f"these reach a ledger: remove them from NON_LEDGER_HELPERS: {listed_but_reached}"


def test_every_listed_helper_exists():
    public = {f for m in QUANTITY_MODULES for f in public_functions(m)}
    assert not set(NON_LEDGER_HELPERS) - public, sorted(set(NON_LEDGER_HELPERS) - public)
