"""The next experiments the evidence calls for, each with the numbers that size it.

Each step is a sentence per language with `[[ledger.key]]` numbers, as findings are; the
sentences are `label.next_*` in the catalogue.
"""

from __future__ import annotations

from report.derive.validity import SATURATION_GROWTH
from report.judge.diagnosis import val
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


def next_steps(led: Ledger, rd, facts: dict) -> list[dict]:
    """The steps of one round, most telling first."""
    out = []
    labels = facts.get("point_labels") or {}
    valid = facts.get("valid_points") or []
    attribution = rd.extras.get("attribution") or {}
    validity = rd.extras.get("validity") or {}
    by_kind: dict[str, list[str]] = {}
    # Valid points first: a step sized from a point that failed its checks only where no valid one calls for it.
    ok = facts.get("ok_points") or []
    for pid in [p for p in ok if p in valid] + [p for p in ok if p not in valid]:
        by_kind.setdefault(attribution[pid].bottleneck, []).append(pid)
    for pid, v in validity.items():
        k = f"p.{pid}."
        if "lockstep" in v.reasons and val(led, k + "e2e_ms_p50") is not None:
            out.append(step(f"rerun_{pid}", "rerun", labels, pid=pid))
        elif "not_steady" in v.reasons and val(led, k + "e2e_ms_p50") is not None:
            out.append(step(f"longer_{pid}", "longer", labels, pid=pid))
    if "frontend" in by_kind:
        out.append(step("api_servers", "api_servers", labels, pid=by_kind["frontend"][0]))
    if "scheduler_budget" in by_kind:
        out.append(step("batched_tokens", "batched_tokens", labels, pid=by_kind["scheduler_budget"][0]))
    if "kv_pool" in by_kind:
        out.append(step("grow_pool", "grow_pool", labels, pid=by_kind["kv_pool"][0]))
    if val(led, "r.kv_cache_memory_suggested_gib") is not None:
        out.append(step("kv_cache_memory", "kv_cache_memory"))
    if rd.axis == "concurrency" and len(valid) >= 2:
        a, b = valid[-2], valid[-1]
        growth = val(led, f"p.{b}.output_tok_s"), val(led, f"p.{a}.output_tok_s")
        if None not in growth and growth[1] and growth[0] / growth[1] - 1 < SATURATION_GROWTH:
            out.append(step("between", "between", labels, a=a, b=b))
        elif attribution.get(b) is not None and attribution[b].bottleneck in ("gpu_bandwidth", "under_driven"):
            out.append(step("beyond", "beyond", labels, b=b, bottleneck={
                lang: word(f"label.bottleneck_{attribution[b].bottleneck}", lang) for lang in LANGS}))
    if not facts.get("mfu_enabled"):
        out.append(step("enable_mfu", "enable_mfu"))
    if not rd.bundle.manifest.get("gpus"):
        out.append(step("gpu_round", "gpu_round"))
    if rd.axis == "input_len" and "x.prefill_c1_ms" not in led:
        out.append(step("c1_length_sweep", "c1_length_sweep"))
    if facts.get("prefix_caching_off"):
        out.append(step("prefix_caching", "prefix_caching"))
    return out
