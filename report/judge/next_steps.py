"""The next experiments the evidence calls for, each with the numbers that size it.

Each step is a sentence per language with `[[ledger.key]]` numbers, as findings are; the
sentences are `label.next_*` in the catalogue. A step that a plan can run carries `plan`: the
changes to the round's own plan, sized from the ledger (sections -> keys -> values; a server
flag set is a list of flags), and `expect`, the catalogue's `label.next_expect_*` sentence of
the outcome that would confirm it. report/publish/plans.py writes them as plan files.

A step decides nothing: the verdicts and thresholds it acts on are policy
(report/derive/validity.py, report/judge/diagnosis.py's CHECKS, report/judge/rules.py). The named
constants below only shape the plans it writes, where they sample and how far: the step budgets of
the exchange curve and of a smaller budget (multiples of the round's own), the headroom a grown
pool is given over what the theory says it needs, how many concurrencies split the span between
two points, how far past the last point a sweep goes, how much of a prompt a shared-prefix
workload shares and among how many prefixes, and how far an SLO search may look. None is
compared with a measurement.
"""

from __future__ import annotations

import math

from report.architecture.theory import GIB
from report.derive import validity as V
from report.derive.validity import SATURATION_GROWTH
from report.ledger import Ledger
from report.words import LANGS, word


def step(sid: str, code: str, labels: dict[str, str] | None = None, **fields) -> dict:
    """One step as the templates and the JSON read it: its id and its sentence per language, each
    point (pid, a, b) named as the page names it (`pid_at`: C=128) and cited by its id."""
    for name in ("pid", "a", "b"):
        if name in fields:
            fields[f"{name}_at"] = (labels or {}).get(fields[name], fields[name])
    return {"id": sid, **{lang: word(f"label.next_{code}", lang, **{
        k: v[lang] if isinstance(v, dict) else v for k, v in fields.items()}) for lang in LANGS}}


def with_effect(st: dict, led: Ledger, pid: str, key: str, code: str) -> dict:
    """STEP with the effect the step model predicts for it (`label.next_effect_<code>`, citing
    `p.<pid>.<key>`), where the ledger has that prediction."""
    if led.value_of(f"p.{pid}.{key}") is not None:
        for lang in LANGS:
            st[lang] = f"{st[lang]} {word(f'label.next_effect_{code}', lang, pid=pid)}"
        st["effect"] = code   # page 1 leads with the first step that predicts its effect
    return st


def with_reason(st: dict) -> dict:
    """STEP, where it predicts no effect, with what it will measure and why the model predicts no
    number for it (`label.next_unpredicted_<kind>`, the kind its id names)."""
    if "effect" not in st:
        kind = st["id"].split("_")[0] if st["id"].startswith(("rerun_", "longer_")) else st["id"]
        for lang in LANGS:
            st[lang] = f"{st[lang]} {word(f'label.next_unpredicted_{kind}', lang)}"
        st["unpredicted"] = kind
    return st


def with_plan(st: dict, code: str, plan: dict) -> dict:
    """STEP with the plan changes that run it and the outcome they are expected to show."""
    st["plan"] = plan
    st["expect"] = {lang: word(f"label.next_expect_{code}", lang) for lang in LANGS}
    return st


def _between(a: int, b: int) -> list[int]:
    """Whole concurrencies that split [a, b] in BETWEEN_PARTS log steps (up to BETWEEN_PARTS - 1)."""
    out = sorted({round(math.exp(math.log(a) + (math.log(b) - math.log(a)) * k / BETWEEN_PARTS))
                  for k in range(1, BETWEEN_PARTS)})
    return [c for c in out if a < c < b] or ([a + (b - a) // 2] if b - a > 1 else [])


def _point_setting(rd, pid: str, key: str):
    return next((p.settings.get(key) for p in rd.points if p.pid == pid), None)


# The step budgets of the exchange curve (TTFT against ITL), as multiples of the round's own.
BATCHED_TOKENS_SWEEP = (0.5, 1, 2, 4)
# A compute-bound point whose ITL tail is one step of prefill: the budget down to a quarter.
SMALLER_BUDGET_SWEEP = (1, 0.5, 0.25)


# Headroom above the KV memory (or blocks) the theory says C requests need at their peak.
POOL_HEADROOM = 1.05
# The span between two points is split into this many log steps.
BETWEEN_PARTS = 4
# Past a last point that stressed nothing: these multiples of its concurrency.
BEYOND_MULTIPLES = (2, 4)
# A shared-prefix workload: about this fraction of each prompt (numerator, denominator) shared by
# SHARED_PREFIXES prefixes.
SHARED_PREFIX_PARTS = (3, 4)
SHARED_PREFIXES = 4
# An SLO met at every point is searched for up to this multiple of the last load.
SEARCH_SPAN = 8
OVERRIDE = "--num-gpu-blocks-override"


def pool_flags(led: Ledger, rd, pid: str) -> list[str] | None:
    """The server flags that give point PID's C requests the pool they need: a larger block
    override where the round forced its pool with one (a later flag wins), else the KV memory."""
    plan = (rd.bundle.manifest.get("plan") or {}).get("engine") or {}
    forced = OVERRIDE in (plan.get("flags") or []) or OVERRIDE in str(plan.get("command") or "")
    tokens, block = led.value_of(f"p.{pid}.kv_tokens_theory"), led.value_of("r.block_size")
    if forced and tokens is not None and block:
        # One more block than the requests use: vLLM keeps a null block out of the pool.
        return [OVERRIDE, str(math.ceil(tokens * POOL_HEADROOM / block) + 1)]
    need = led.value_of(f"p.{pid}.kv_memory_needed_gib")
    return None if need is None else ["--kv-cache-memory", str(math.ceil(need * GIB * POOL_HEADROOM))]


def next_steps(led: Ledger, rd, facts: dict) -> list[dict]:
    """The steps of one round, most telling first."""
    out = []
    labels = facts.get("point_labels") or {}
    valid = facts.get("valid_points") or []
    attribution, validity = rd.verdicts.attribution, rd.verdicts.validity
    by_kind: dict[str, list[str]] = {}
    # Only a valid point's limit calls for a change of the server: a point that failed its checks
    # measured its own artefact (waves, drift), and its step is to be measured again (below).
    for pid in [p for p in facts.get("ok_points") or [] if p in valid]:
        by_kind.setdefault(attribution[pid].bottleneck, []).append(pid)
    for pid, v in validity.items():
        k = f"p.{pid}."
        e2e_s = led.value_of(k + "e2e_ms_p50")
        one = {"sweep": {"concurrency": [_point_setting(rd, pid, "concurrency")],
                         "input_len": [_point_setting(rd, pid, "input_len")]}}
        if "lockstep" in v.reasons and e2e_s is not None:
            # Streams spread over one request lifetime cannot start a wave together.
            one["sweep"]["ramp_s"] = math.ceil(e2e_s / 1e3)
            out.append(with_plan(step(f"rerun_{pid}", "rerun", labels, pid=pid), "rerun", one))
        elif "not_steady" in v.reasons and e2e_s is not None:
            # A window as long as the lifetimes a steady one covers.
            one["sweep"]["duration_s"] = math.ceil(V.LIFETIMES_MIN * e2e_s / 1e3)
            out.append(with_plan(step(f"longer_{pid}", "longer", labels, pid=pid), "longer", one))
    at = {kind: {"sweep": {"concurrency": [_point_setting(rd, pids[0], "concurrency")],
                           "input_len": [_point_setting(rd, pids[0], "input_len")]}}
          for kind, pids in by_kind.items()}
    if "frontend" in by_kind:
        out.append(with_plan(step("api_servers", "api_servers", labels, pid=by_kind["frontend"][0]),
                             "api_servers", {"sweep": {**at["frontend"]["sweep"], "server_flags": [
                                 [], ["--api-server-count", "2"]]}}))
    budget = led.value_of("r.max_num_batched_tokens")
    if "scheduler_budget" in by_kind:
        st = step("batched_tokens", "batched_tokens", labels, pid=by_kind["scheduler_budget"][0])
        out.append(with_plan(st, "batched_tokens", {"sweep": {**at["scheduler_budget"]["sweep"], "server_flags": [
            ["--max-num-batched-tokens", str(int(budget * m))] for m in BATCHED_TOKENS_SWEEP]}})
            if budget else st)
    tol = led.value_of("r.rule_prediction_tol")
    if "gpu_compute" in by_kind and budget and tol is not None:
        pid = by_kind["gpu_compute"][-1]
        tail = led.value_of(f"p.{pid}.itl_p99_over_tail")
        if tail is not None and abs(tail - 1) <= tol:
            out.append(with_plan(step("smaller_budget", "smaller_budget", labels, pid=pid), "smaller_budget", {
                "sweep": {**at["gpu_compute"]["sweep"], "concurrency": [_point_setting(rd, pid, "concurrency")],
                          "server_flags": [["--max-num-batched-tokens", str(int(budget * m))]
                                           for m in SMALLER_BUDGET_SWEEP]}}))
    eager = [pid for pid in by_kind.get("engine_host", [])
             if attribution[pid].mechanism == "step_host_side" and led.value_of(f"p.{pid}.eager_engine")]
    if eager:
        # A GPU engine without CUDA graphs whose step the roofs explain only in part: the launches
        # graphs remove are host time; the step can fall at most to the roofs' (step_ms_model).
        pid = eager[0]
        st = step("cuda_graphs", "cuda_graphs", labels, pid=pid)
        out.append(with_plan(st, "cuda_graphs", {"sweep": {**at["engine_host"]["sweep"], "server_flags": [
            [], ["--no-enforce-eager"]]}}))
    if "sequence_cap" in by_kind:
        pid = by_kind["sequence_cap"][0]
        C = _point_setting(rd, pid, "concurrency")
        st = with_effect(step("raise_seqcap", "raise_seqcap", labels, pid=pid), led, pid,
                         "all_running_output_tok_s_model", "all_running")
        out.append(with_plan(st, "raise_seqcap", {"sweep": {**at["sequence_cap"]["sweep"], "server_flags": [
            [], ["--max-num-seqs", str(C)]]}}) if C else st)
    if "kv_pool" in by_kind:
        pid = by_kind["kv_pool"][0]
        # Sized by the KV model where it could be computed, else said without a size; the knob
        # named is the one the plan turns (a forced override, or the KV memory of a GPU or CPU engine).
        flags = pool_flags(led, rd, pid)
        on_cpu = rd.log is not None and rd.log.kv_pool_device == "CPU"
        code = ("grow_pool_unsized" if led.value_of(f"p.{pid}.kv_memory_needed_gib") is None
                else "grow_pool_forced" if flags and flags[0] == OVERRIDE
                else "grow_pool_cpu" if on_cpu else "grow_pool")
        st = with_effect(step("grow_pool", code, labels, pid=pid), led, pid, "all_running_output_tok_s_model",
                         "all_running")
        out.append(with_plan(st, "grow_pool", {"sweep": {**at["kv_pool"]["sweep"], "server_flags": [[], flags]}})
                   if flags else st)
    if led.value_of("r.kv_cache_memory_suggested_gib") is not None:
        out.append(with_plan(step("kv_cache_memory", "kv_cache_memory"), "kv_cache_memory", {"sweep": {
            "server_flags": [[], ["--kv-cache-memory", str(int(led.value_of("r.kv_cache_memory_suggested_bytes")))]]}}))
    if rd.axis == "concurrency" and len(valid) >= 2:
        a, b = valid[-2], valid[-1]
        growth = led.value_of(f"p.{b}.output_tok_s"), led.value_of(f"p.{a}.output_tok_s")
        ca, cb = _point_setting(rd, a, "concurrency"), _point_setting(rd, b, "concurrency")
        if None not in growth and growth[1] and growth[0] / growth[1] - 1 < SATURATION_GROWTH:
            st = step("between", "between", labels, a=a, b=b)
            out.append(with_plan(st, "between", {"sweep": {"concurrency": _between(ca, cb)}})
                       if ca and cb and _between(ca, cb) else st)
        elif attribution.get(b) is not None and attribution[b].bottleneck in ("gpu_bandwidth", "under_driven"):
            st = step("beyond", "beyond", labels, b=b, bottleneck={
                lang: word(f"label.bottleneck_{attribution[b].bottleneck}", lang) for lang in LANGS})
            out.append(with_plan(st, "beyond", {"sweep": {"concurrency": [cb * m for m in BEYOND_MULTIPLES]}}) if cb else st)
    if not facts.get("mfu_enabled"):
        out.append(with_plan(step("enable_mfu", "enable_mfu"), "enable_mfu",
                             {"engine": {"flags": ["--enable-mfu-metrics"]}}))
    if not rd.gpus:
        out.append(step("gpu_round", "gpu_round"))
    if rd.axis == "input_len" and "x.prefill_c1_ms" not in led:
        out.append(with_plan(step("c1_length_sweep", "c1_length_sweep"), "c1_length_sweep",
                             {"sweep": {"concurrency": [1]}}))
    if facts.get("prefix_caching_off"):
        top = (valid or facts.get("ok_points") or [None])[-1]
        L, C = _point_setting(rd, top, "input_len"), _point_setting(rd, top, "concurrency")
        st = step("prefix_caching", "prefix_caching")
        if L and C:
            # SHARED_PREFIX_PARTS of each prompt shared by SHARED_PREFIXES prefixes, in whole KV blocks
            # (vLLM caches whole blocks only), served with caching off, then on, at the highest
            # valid point's load: one point per set.
            block, (part, parts) = led.value_of("r.block_size"), SHARED_PREFIX_PARTS
            shared = (part * L // parts) // block * block if block and block < L else part * L // parts
            out.append(with_plan(st, "prefix_caching", {
                "workload": {"kind": "shared-prefix", "prefix_len": shared or part * L // parts,
                             "num_prefixes": SHARED_PREFIXES},
                "sweep": {"concurrency": [C], "input_len": [L],
                          "server_flags": [["--no-enable-prefix-caching"], ["--enable-prefix-caching"]]}}))
        else:
            out.append(st)
    out += slo_search_steps(led, rd, labels)
    # A round against servers started elsewhere (endpoint mode) cannot apply a flag: its steps
    # that change one are said without a plan (the collector refuses flags there).
    mode = ((rd.bundle.manifest.get("plan") or {}).get("engine") or {}).get("mode")
    # Every step the page prints states its predicted effect, or what it measures and why none.
    return [with_reason(st) if mode != "endpoint" or not _sets_flags(st.get("plan")) else
            with_reason({k: v for k, v in st.items() if k not in ("plan", "expect")}) for st in out]


def _sets_flags(plan: dict | None) -> bool:
    """Whether a step's PLAN changes the server's flags (a flag set, or the engine's flags)."""
    plan = plan or {}
    return any((plan.get("sweep") or {}).get("server_flags") or []) or bool(
        (plan.get("engine") or {}).get("flags"))


def slo_search_steps(led: Ledger, rd, labels: dict[str, str]) -> list[dict]:
    """Where the SLO's capacity lies beyond the sweep, or between two measured points: a search
    sweep that finds it (bench/search.py), from the last load known to meet the SLO."""
    cap = led.get("r.slo_capacity")
    if cap is None or rd.axis != "concurrency" or rd.slo is None or not hasattr(rd.slo, "to_dict"):
        return []
    if cap.present:
        lo, hi = led.value_of("r.slo_capacity_low"), led.value_of("r.slo_capacity_high")
        if lo is None or hi is None or hi - lo <= 1:
            return []
        return [with_plan(step("slo_search", "slo_search_between", labels), "slo_search", {
            "sweep": {"search": "slo", "concurrency": [int(lo)], "search_max": int(hi)},
            "slo": rd.slo.to_dict()})]
    root = cap.missing.chain()[1] if cap.missing else None
    if root is not None and root.code == "reason.slo_met_at_every_point":
        top = int(root.param("load"))
        return [with_plan(step("slo_search", "slo_search_beyond", labels), "slo_search", {
            "sweep": {"search": "slo", "concurrency": [top], "search_max": top * SEARCH_SPAN},
            "slo": rd.slo.to_dict()})]
    return []
