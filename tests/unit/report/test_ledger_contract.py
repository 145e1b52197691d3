"""The ledger's contract, checked on a ledger built from a HAND-BUILT fixture bundle (no engine).

The fixture is written here with BundleWriter (origin "hand-built-fixture", never published):
two points of a concurrency sweep, a few requests with raw timings and usage, and no /metrics
scrape at all (as when the sampler never reached the server) and no server log. Its numbers
are typed here, not measured.

Contract:
- every derivation (`Value.func`) resolves to a function with a one-line summary docstring;
- every Value has provenance: the function (or "observed"), a description, and sources or inputs;
- every server-side value (read from metrics.jsonl or server.log, or derived from one) is
  absent with a reason in words; no value is 0 where its input was missing;
- every public function of the quantity modules has a docstring.

Known gaps of report/derive/round/, listed by key pattern below so that each test still fails on
any other violation and on a listed one that has been fixed (remove it from the list then).
"""

from __future__ import annotations

import fnmatch
import importlib
import inspect
import json
import math
import re

import pytest

from bench.plan.spec import Plan, SweepSpec, WorkloadSpec
from bundle.store.reader import read_bundle
from bundle.store.writer import BundleWriter
from report.derive.round import read as B
from report.judge.verdicts import build_ledger
from report.ledger import Ledger, Value
from tests.standin_round import TINY_CONFIG

QUANTITY_MODULES = ("report.architecture.theory", "report.derive.arith", "report.derive.sizes",
                    "report.derive.timing.server", "report.derive.timing.client", "report.derive.sweep.concurrency",
                    "report.derive.stats.requests", "report.derive.stats.samples", "report.derive.stats.point",
                    "report.derive.stats.sessions", "report.derive.clienterror.itl", "report.derive.clienterror.nodes",
                    "report.derive.series.scrapes", "report.derive.series.sampler",
                    "report.derive.series.cache_config", "report.derive.series.server", "report.derive.host",
                    "report.derive.gpu.datasheet", "report.derive.gpu.power", "report.derive.gpu.gpm",
                    "report.derive.gpu.dcgm", "report.derive.gpu.parallel", "report.derive.gpu.across",
                    "report.derive.gpu.per_gpu", "report.derive.gpu.ceiling", "report.derive.reconcile.model",
                    "report.derive.reconcile.estimator", "report.derive.reconcile.kvpool", "report.derive.serverlog",
                    "report.judge.goodput")
SERVER_FILES = ("metrics.jsonl", "server.log")

# Keys whose value may be 0 in this fixture, and why 0 is the observation, not a stand-in.
LEGITIMATE_ZEROS = {
    "warmup_ended_in_point_window": "no warm-up request ended inside the point's window",
    "r.scrapes": "counts the records of metrics.jsonl itself: none were written",
    "r.scrape_gaps": "counts failed scrapes among those records: none were written",
    "r.failed": "no request of the fixture failed",
    "failed": "no request of the point failed",
    "multi_token_chunks": "every chunk of the fixture carries one token",
    "slot_wait_ms_p99": "closed loop: every request was sent the instant its slot was free",
    "inflight_growth": "closed loop: as many requests in flight at the last send as at the first",
    "zero_gap_chunks": "every chunk of the fixture is 10 ms after the one before it",
    "zero_gap_share": "no chunk shares its stamp with the one before it",
    "mistimed_events": "no event shared a stamp, so none can carry another's",
    "mistimed_share": "no event is mistimed",
    "itl_error_ms_p50": "no event is mistimed, so no percentile can move",
    "itl_error_ms_p99": "no event is mistimed, so no percentile can move",
    "itl_error_share_p50": "no event is mistimed, so no percentile can move",
    "itl_error_share_p99": "no event is mistimed, so no percentile can move",
}


# Known gaps in report/derive/round/, as key patterns: absent values that name no source, absent
# values whose reason names the wrong cause, and reasons without words. None at present; a
# pattern listed here must match a real violation (check_known fails once it is fixed).
KNOWN_NO_PROVENANCE: tuple[str, ...] = ()
KNOWN_WRONG_CAUSE: tuple[str, ...] = ()
KNOWN_WORDLESS_REASONS: tuple[str, ...] = ()
# Server-side keys per point that must be absent in this fixture (some lack a source, above).
SERVER_POINT_KEYS = ("queue_ms_mean", "prefill_ms_mean", "frontend_ms_mean", "queue_share",
                     "iteration_tokens_mean", "server_running_median", "waiting_peak", "kv_usage_p50",
                     "kv_usage_peak", "preemptions", "prefix_cache_hits", "generation_tokens_server",
                     "tflops_s", "read_gb_s", "kv_error_pp")
SERVER_ROUND_KEYS = ("r.pool_tokens_log", "r.pool_tokens_metrics", "r.pool_tokens", "r.block_size",
                     "r.scrape_interval_p50")


def check_known(violations: set[str], known: tuple[str, ...], what: str) -> None:
    """Fail on any violation outside the KNOWN patterns, and on a pattern no longer violated."""
    unexpected = {k for k in violations if not any(fnmatch.fnmatchcase(k, pat) for pat in known)}
    assert not unexpected, f"{what}: {sorted(unexpected)}"
    fixed = [pat for pat in known if not any(fnmatch.fnmatchcase(k, pat) for k in violations)]
    assert not fixed, f"{what} no longer happens for {fixed}: remove them from the known gaps"


def _request(pid: str, i: int, warm: bool, t0: float, n_in: int, n_out: int) -> dict:
    """One hand-built request record: send, then n_out one-token chunks 10 ms apart."""
    first = t0 + 0.050
    chunks = [[round(first + 0.010 * k, 6), 1] for k in range(n_out)]
    return {"point": pid, "i": i, "warmup": warm, "t_slot": t0, "t_sched": None,
            "input_len": n_in, "max_tokens": n_out, "group": None, "t_send": t0,
            "t_headers": t0 + 0.002, "t_first": first, "t_end": chunks[-1][0] + 0.001,
            "chunks": chunks, "status": "ok", "http_status": 200, "error": None,
            "finish_reason": "length",
            "usage": {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out},
            "server_metrics": {"queue_time_ms": 0.05, "time_to_first_token_ms": 40.0,
                               "generation_time_ms": 10.0 * (n_out - 1)}}


def write_fixture_bundle(path) -> None:
    """A two-point concurrency round without a single /metrics scrape, written as the runner would."""
    plan = Plan(id="fixture", seed=1, workload=WorkloadSpec(input_len=64, output_len=8),
                sweep=SweepSpec(concurrency=[1, 2], requests_per_point=2))
    config = json.loads(TINY_CONFIG.read_text())
    w = BundleWriter(path, {
        "origin": "hand-built-fixture",
        "tool": {"name": "serving-ledger", "version": "fixture"},
        "host": {"cpu_count": 2},
        "gpus": [], "gpu_absent_reason": "hand-built fixture: no GPU",
        "engine": {"mode": "endpoint", "endpoint": "http://127.0.0.1:1"},
        "model": {"config": config, "config_source": "fixture", "name": "tiny-qwen2",
                  "served_name": "tiny"},
        "plan": plan.to_dict(),
    })
    t = 1.0
    for p in plan.points():
        pid, c = p["id"], p["concurrency"]
        w.append("points", {"point": pid, "event": "start", "t": t, "settings": p, "seed": 1})
        i = 0
        for s in range(c):  # one warm-up per slot; the streams a millisecond apart
            w.append("requests", _request(pid, i, True, t + 0.001 * s, 64, 8))
            i += 1
        t += 0.2
        w.append("points", {"point": pid, "event": "measure", "t": t})
        for k in range(2):
            for s in range(c):
                w.append("requests", _request(pid, i, False, t + 0.2 * k + 0.001 * s, 64, 8))
                i += 1
        t += 0.5
        w.append("points", {"point": pid, "event": "end", "t": t, "status": "ok", "reason": None})
        t += 1.0
    w.append("client", {"t": 1.5, "loop_lag_s": 0.0004, "tasks": 3})
    w.close("complete")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    path = tmp_path_factory.mktemp("contract") / "fixture-no-metrics"
    write_fixture_bundle(path)
    bundle = read_bundle(path)
    assert bundle.manifest["origin"] == "hand-built-fixture"
    assert bundle.metrics == [] and bundle.server_log() is None
    rd = B.read_round(bundle)
    return rd, build_ledger(rd)


def resolve(qualified: str):
    """The function a Value.func names ("module.qualname")."""
    parts = qualified.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise LookupError(qualified)


def one_line_summary(func) -> str | None:
    """The docstring's summary line when it is complete on one line (PEP 257), else None."""
    doc = inspect.getdoc(func) or ""
    lines = doc.split("\n")
    if not lines[0].strip() or (len(lines) > 1 and lines[1].strip()):
        return None
    return lines[0].strip()


def server_side_keys(led: Ledger) -> set[str]:
    """Keys read from metrics.jsonl or server.log (by source or by the lists above), or derived from one."""
    server = {k for k, v in led.values.items() if any(f in str(s) for s in v.sources for f in SERVER_FILES)}
    server |= {k for k in led.values if k in SERVER_ROUND_KEYS or k.rsplit(".", 1)[-1] in SERVER_POINT_KEYS}
    changed = True
    while changed:
        changed = False
        for k, v in led.values.items():
            # An optional input left absent is passed as None: the value does not rest on it.
            optional = _optional_inputs(v.func)
            if k not in server and any(desc in server and (n not in optional or led[desc].present)
                                       for n, desc in v.inputs):
                server.add(k)
                changed = True
    return server


def test_every_derivation_has_a_one_line_docstring(built):
    _, led = built
    funcs = {v.func for v in led.values.values() if v.func != "observed"}
    assert len(funcs) > 20
    for name in sorted(funcs):
        f = resolve(name)
        assert callable(f), name
        assert one_line_summary(f), f"{name} has no one-line summary docstring"


def test_every_value_has_provenance(built):
    _, led = built
    for k, v in led.values.items():
        assert isinstance(v, Value) and v.key == k
        assert v.func, k
        assert v.doc and v.doc.strip(), f"{k} has no description"
        if not (v.sources or v.inputs):
            # Only absences may lack a source, and only the known ones; a present value never.
            assert not v.present and v.missing, f"{k} = {v.value!r} names no source and no inputs"
    bare = {k for k, v in led.values.items() if not (v.sources or v.inputs)}
    check_known(bare, KNOWN_NO_PROVENANCE, "values that name neither sources nor inputs")


def test_server_side_values_are_absent_with_a_reason(built):
    rd, led = built
    server = server_side_keys(led)
    for pid in (p.pid for p in rd.points):
        for q in SERVER_POINT_KEYS:
            assert f"p.{pid}.{q}" in led, f"the ledger has no p.{pid}.{q}"
    # Derived keys reach the server-side set through their inputs, not through the lists.
    for pid in (p.pid for p in rd.points):
        assert f"p.{pid}.prefill_tokens_per_iteration" in server
        assert f"p.{pid}.request_peak_tokens" in server  # needs the block size from /metrics
    wordless = set()
    for k in sorted(server):
        v = led[k]
        if k in LEGITIMATE_ZEROS:
            assert v.value == 0, f"{k}: {LEGITIMATE_ZEROS[k]}"
            continue
        assert not v.present, f"{k} = {v.value!r} although metrics.jsonl and server.log are empty"
        assert v.missing, f"{k} is absent without a reason"
        if len(re.findall(r"[A-Za-z]{2,}", str(v.missing))) < 3:
            wordless.add(k)
    check_known(wordless, KNOWN_WORDLESS_REASONS, "absent values whose reason is not in words")
    # Nothing was scraped: a reason may not claim what the server did or did not run with.
    # (Derived values inherit the reason of their inputs; the observed ones state it first.)
    blamed = {k for k in server if not led[k].present and led[k].func == "observed"
              and re.search(r"without --[a-z]", str(led[k].missing or ""))}
    check_known(blamed, KNOWN_WRONG_CAUSE, "absences blamed on a server flag though nothing was scraped")


def _optional_inputs(func: str) -> frozenset[str]:
    """The parameters a registered quantity declares optional (a default): it may stand without them."""
    from report.registry import REGISTRY
    return next((d.optional for d in REGISTRY.values()
                 if f"{d.func.__module__}.{d.func.__qualname__}" == func), frozenset())


def test_no_value_is_a_number_when_an_input_is_absent(built):
    _, led = built
    for k, v in led.values.items():
        optional = _optional_inputs(v.func)
        absent_inputs = [d for n, d in v.inputs if n not in optional and d in led.values and not led[d].present]
        if absent_inputs:
            assert not v.present, f"{k} = {v.value!r} though {absent_inputs} are absent"
            assert v.missing


def test_no_zero_stands_in_for_a_missing_value(built):
    _, led = built
    client_side = {k for k in led.values if k not in server_side_keys(led)}
    for k, v in led.values.items():
        if not v.present or isinstance(v.value, bool) or not isinstance(v.value, (int, float)):
            continue
        assert math.isfinite(v.value), k
        if v.value == 0:
            leaf = k if k in LEGITIMATE_ZEROS else k.rsplit(".", 1)[-1]
            assert leaf in LEGITIMATE_ZEROS, f"{k} is 0: a real zero must be listed with its reason"
            assert k in client_side or k in LEGITIMATE_ZEROS


def test_client_side_values_are_present(built):
    rd, led = built
    for p in rd.points:
        for q in ("requests", "ttft_ms_mean", "itl_ms_p50", "output_tok_s", "e2e_ms_p50"):
            assert led[f"p.{p.pid}.{q}"].present, led[f"p.{p.pid}.{q}"].missing
    assert led["r.kv_bytes_per_token"].value == 2 * 2 * 2 * 64 * 2


@pytest.mark.parametrize("module", QUANTITY_MODULES)
def test_public_functions_have_docstrings(module):
    mod = importlib.import_module(module)
    missing = [name for name, f in inspect.getmembers(mod, inspect.isfunction)
               if f.__module__ == module and not name.startswith("_")
               and not (inspect.getdoc(f) or "").strip()]
    assert not missing, f"{module}: public functions without a docstring: {missing}"
