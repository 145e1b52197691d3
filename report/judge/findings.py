"""The report's conclusions: each a mechanism stated with its evidence, in every language.

A finding's sentence is the catalogue's (`report/data/words/finding.<lang>.toml`); it holds
its numbers as `[[ledger.key]]` or `[[ledger.key|pct]]`, which the page prints through the
ledger (traced) and the JSON through the same formatter. A finding is
made only from valid points, and only when every key it cites is present.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from report.derive import validity as V
from report.derive.prefilltail import rate_reference_point
from report.judge.diagnosis import BOTTLENECKS, Attribution, Validity, val
from report.ledger import Ledger
from report.registry import REGISTRY
from report.words import LANGS, PLACEHOLDER, in_lang, listed, round_name, word

# Each bottleneck's mechanism (diagnosis.Attribution.mechanism): its sentence is the catalogue's
# `finding.mechanism_<code>`; a point that fails a check is worded by `finding.invalid_<code>`.
# The one list of codes: the rules (rules.RULES) and the diagnosis name these and no other, and
# the catalogue words each (tests/unit/report/test_mechanism_codes.py reads all three).
MECHANISMS = (
    "step_bandwidth", "step_compute", "step_compute_power_capped", "step_both_roofs", "step_host_side",
    "running_at_sequence_cap", "step_budget_full", "client_shares_engine_host",
    "delivery_slower_than_engine", "delivery_slower_than_engine_scrapes_failing", "pool_full_and_waiting",
    "client_starved", "client_node_starved", "pool_full_and_waiting_log", "cpu_engine_busy", "cpu_engine_mostly_idle",
    "cpu_engine_busy_queued", "engine_mostly_idle", "no_signal_agrees", "no_gpu_signals",
    "host_counters_disagree",
)
# What the GPU's own counters said of a GPU verdict (diagnosis.Attribution.counters): worded by
# `finding.counters_<code>` after the mechanism's sentence.
COUNTER_CODES = ("shown", "bandwidth_agrees", "compute_agrees", "flops_agree", "model_only", "nvml_waits")


@dataclass
class Finding:
    """One conclusion: its kind, its sentence in each language, the ledger keys it rests on."""

    id: str
    kind: str
    texts: dict[str, str]       # language -> sentence, from the catalogue's `finding.*` texts
    evidence: list[str] = field(default_factory=list)

    def keys(self) -> list[str]:
        """The ledger keys its sentences print."""
        return list(dict.fromkeys(m.group(1) for t in self.texts.values()
                                  for m in PLACEHOLDER.finditer(t)))


def _texts(code: str, **fill: Any) -> dict[str, str]:
    """The catalogue's `finding.CODE` in every language, its fields filled (a dict value is
    per language)."""
    return {lang: word(f"finding.{code}", lang,
                       **{k: v[lang] if isinstance(v, dict) else v for k, v in fill.items()})
            for lang in LANGS}


def _at(labels: dict[str, str] | None, pid: str) -> str:
    """A point as the page names it (C=128, L=8192), its id where no label is given."""
    return (labels or {}).get(pid, pid)


class UnresolvedPlaceholder(KeyError):
    """A finding's sentence cites a key no quantity of the ledger can have: a fault of the
    catalogue or of the code, never a finding to drop in silence."""


def _known(led: Ledger, key: str) -> bool:
    """Whether KEY names a quantity the ledger could hold (registered, or recorded in it),
    whether or not this round has it."""
    name = key.rsplit(".", 1)[-1]
    return (any(d.name == name for d in REGISTRY.values())
            or any(k.rsplit(".", 1)[-1] == name for k in led.values))


def _make(led: Ledger, fid: str, kind: str, texts: dict[str, str],
          evidence: list[str]) -> Finding | None:
    """A finding whose cited keys are all present, or None when one is absent or not in this
    round's ledger; UnresolvedPlaceholder when one names no quantity at all."""
    f = Finding(fid, kind, texts, evidence)
    keys = f.keys()
    unknown = next((k for k in keys if k not in led and not _known(led, k)), None)
    if unknown is not None:
        raise UnresolvedPlaceholder(f"finding {fid}: [[{unknown}]] names no quantity of the ledger")
    if not all(k in led and led[k].present for k in keys):
        return None
    f.evidence = list(dict.fromkeys(evidence + keys))
    return f


def _joined(parts: list[dict[str, str]], sep: str) -> dict[str, str]:
    """Per-language texts joined by the catalogue's separator `finding.SEP`."""
    return {lang: word(f"finding.{sep}", lang).join(x[lang] for x in parts) for lang in LANGS}


def _invalid_code(led: Ledger, pid: str, reason: str) -> str:
    """The sentence of one failed check; a lockstep point's says how long its waves queue, where
    the draining-wave prediction lies within the rule's tolerance of the measured queue."""
    ratio, tol = val(led, f"p.{pid}.queue_over_wave"), val(led, "r.rule_prediction_tol")
    if reason == "lockstep" and ratio is not None and tol is not None and abs(ratio - 1) <= tol:
        return "invalid_lockstep_wave"
    return f"invalid_{reason}"


def invalid_points_finding(led: Ledger, validity: dict[str, Validity],
                           labels: dict[str, str] | None = None) -> Finding | None:
    """Which points are left out of fits and verdicts, and why."""
    bad = [v for v in validity.values() if not v.valid]
    if not bad:
        return None
    items = [_texts("invalid_point", p=v.point, at=_at(labels, v.point),
                    reasons=_joined([_texts(_invalid_code(led, v.point, r), p=v.point, at=_at(labels, v.point))
                                     for r in v.reasons],
                                    "invalid_reason_sep")) for v in bad]
    return Finding("invalid_points", "validity",
                   _texts("invalid_points", items=_joined(items, "invalid_point_sep")),
                   [f"p.{v.point}.{k}" for v in bad for k in ("held_concurrency_fraction", "send_synchrony",
                                                             "lifetimes_in_window", "failed_scrape_share")])


def disagreement_finding(led: Ledger, validity: dict[str, Validity],
                         labels: dict[str, str] | None = None,
                         attributions: dict[str, Attribution] | None = None) -> Finding | None:
    """Which signals disagreed with a check's or a bottleneck's verdict, point by point."""
    parts, keys = [], []
    said = [(v.point, v.disagreed) for v in validity.values()] + \
        [(a.point, a.disagreed) for a in (attributions or {}).values()]
    for point, codes in said:
        for code in dict.fromkeys(codes):
            one = _make(led, "x", "validity", _texts(f"disagree_{code}", p=point, at=_at(labels, point)), [])
            if one is not None:
                parts.append(one.texts)
                keys += one.keys()
    if not parts:
        return None
    return Finding("disagreements", "validity",
                   _texts("disagreements", items=_joined(parts, "disagreement_sep")),
                   list(dict.fromkeys(keys)))


def client_suspects(led: Ledger, pids: list[str], attributions: dict[str, Attribution] | None = None) -> list[str]:
    """The points of PIDS whose client loop lagged past the lag rule at its tail (the rule the
    diagnosis reads at the median, read tail against tail), where the verdict is not the client."""
    floor, share = val(led, "r.rule_lag_min_ms"), val(led, "r.rule_lag_share_of_itl")
    if floor is None or share is None:
        return []
    out = []
    for pid in pids:
        if attributions and pid in attributions and attributions[pid].bottleneck == "client":
            continue    # its verdict names the client already
        lag, itl = val(led, f"p.{pid}.client_lag_ms_p99"), val(led, f"p.{pid}.itl_ms_p99")
        if lag is not None and itl is not None and lag > max(floor, share * itl):
            out.append(pid)
    return out


def client_suspect_finding(led: Ledger, pids: list[str], labels: dict[str, str] | None = None,
                           attributions: dict[str, Attribution] | None = None) -> Finding | None:
    """The points whose client loop lagged past the lag rule at its tail: the client named as a
    suspect for their tails, with its lag beside the ITL p99 it measured."""
    items = [one.texts for pid in client_suspects(led, pids, attributions)
             if (one := _make(led, "x", "validity",
                              _texts("client_suspect_item", p=pid, at=_at(labels, pid)), [])) is not None]
    if not items:
        return None
    return _make(led, "client_suspect", "validity",
                 _texts("client_suspect", items=_joined(items, "invalid_reason_sep")), [])


def caveat_findings(led: Ledger, validity: dict[str, Validity], valid_pids: list[str],
                    labels: dict[str, str] | None = None,
                    attributions: dict[str, Attribution] | None = None) -> list[Finding | None]:
    """What page 1 must say beside its answer: the measured points left out of it (failed their
    checks) and the points whose tails the client may have made."""
    def names(pids: list[str]) -> dict[str, str]:
        return {lang: listed([str(in_lang(_at(labels, p), lang)) for p in pids], lang)
                for lang in LANGS}
    left = [v.point for v in validity.values() if not v.valid]
    suspects = client_suspects(led, valid_pids, attributions)
    return [Finding("caveat_left_out", "caveat", _texts("caveat_left_out", points=names(left)), []) if left else None,
            Finding("caveat_client", "caveat", _texts("caveat_client", points=names(suspects)), []) if suspects else None]


# Mechanisms also said by phase (`finding.mechanism_<code>_by_phase`): where the model's config
# gives the decode step's and the prefill's intensities, the sentence judges each phase.
BY_PHASE: tuple[str, ...] = ()


# The compute-bound mechanisms: their sentence is followed by the step they predict.
COMPUTE_BOUND = ("step_compute", "step_compute_power_capped")


def _followed(f: Finding, more: Finding | None) -> Finding:
    """F with MORE's sentences after its own (separated by the catalogue's sentence break)."""
    if more is None:
        return f
    return Finding(f.id, f.kind, {lang: f.texts[lang] + word("finding.counters_sep", lang) + more.texts[lang]
                                  for lang in LANGS}, list(dict.fromkeys(f.evidence + more.evidence)))


def compute_step_finding(led: Ledger, pid: str, labels: dict[str, str] | None = None,
                         prev_round: str | None = None, prev_clock: str | None = None) -> Finding | None:
    """What a compute-bound verdict predicts at PID: its mean step at the compute ceiling of the
    sampled clock beside the step measured, and whether the ceiling explains the step (within
    the prediction tolerance) or the steps took longer."""
    return _compute_step_said(led, pid, labels, prev_round, prev_clock, "")


def _step_fit(ratio: float, tol: float) -> str:
    """How a measured step compares with its prediction (measured over predicted, RATIO): within
    the prediction tolerance it is `explained`, else `longer` or `shorter`."""
    return "explained" if 1 / (1 + tol) <= ratio <= 1 + tol else "longer" if ratio > 1 + tol else "shorter"


def _compute_step_said(led: Ledger, pid: str, labels: dict[str, str] | None, prev_round: str | None,
                       prev_clock: str | None, prefix: str) -> Finding | None:
    """The compute-step prediction at PID in the catalogue's PREFIX-ed words (the diagnosis's
    own, or page 1's shorter `thesis_` ones): the step at the clock's compute ceiling beside the
    step measured, then, where measured, the step at the prefill rate of a prompt alone."""
    tol = val(led, "r.rule_prediction_tol")
    ratio = val(led, f"p.{pid}.step_over_compute_ceiling")
    if ratio is None or tol is None:
        return None
    f = _make(led, "compute_step", "bottleneck",
              _texts(f"{prefix}compute_step_predicted", p=pid, at=_at(labels, pid),
                     verdict=_texts(f"{prefix}compute_step_{_step_fit(ratio, tol)}", p=pid)),
              ["r.rule_prediction_tol"])
    # The attainable rate this engine measured on a prompt alone, scaled to this point's clock.
    alone = val(led, f"p.{pid}.step_over_prefill_rate")
    if f is None or alone is None:
        return f
    rate, ref, ref_clock = _prefill_rate_of(led, labels, prev_round, prev_clock)
    return _followed(f, _make(led, "compute_step", "bottleneck", _texts(
        f"{prefix}compute_step_at_prefill_rate", p=pid, ref=ref, rate=rate, ref_clock=ref_clock,
        verdict=_texts(f"{prefix}compute_rate_{_step_fit(alone, tol)}", p=pid)), []))


def bottleneck_finding(led: Ledger, att: Attribution, fid: str = "bottleneck",
                       labels: dict[str, str] | None = None, prev_round: str | None = None,
                       prev_clock: str | None = None) -> Finding | None:
    """The mechanism sentence of one point's bottleneck, by phase where the phases are known,
    followed by what the GPU's own counters said of it."""
    f = None
    if att.mechanism in BY_PHASE:
        f = _make(led, fid, "bottleneck", _texts(f"mechanism_{att.mechanism}_by_phase", p=att.point,
                                                        at=_at(labels, att.point)),
                  list(att.evidence))
    f = f or _make(led, fid, "bottleneck", _texts(f"mechanism_{att.mechanism}", p=att.point, at=_at(labels, att.point)),
                   list(att.evidence))
    if f is not None and att.mechanism in COMPUTE_BOUND:
        f = _followed(f, compute_step_finding(led, att.point, labels, prev_round, prev_clock))
    if f is None:
        return f
    if att.counters:
        said = _make(led, fid, "bottleneck", _texts(f"counters_{att.counters}", p=att.point, at=_at(labels, att.point)), [])
        if said is not None:
            f = Finding(f.id, f.kind, {lang: f.texts[lang] + word("finding.counters_sep", lang) + said.texts[lang]
                                       for lang in LANGS}, list(dict.fromkeys(f.evidence + said.evidence)))
    if not att.knob:
        return f
    return Finding(f.id, f.kind, {lang: f.texts[lang] + word("finding.counters_sep", lang)
                                  + word("finding.knob", lang, knob=word(f"label.knob_{att.knob}", lang))
                                  for lang in LANGS}, f.evidence)


def _prefill_rate_of(led: Ledger, labels: dict[str, str] | None, prev_round: str | None,
                     prev_clock: str | None):
    """The prefill rate's key, the point it was measured at (named per language) and that
    point's clock key: the round's own C=1 point, else the previous round's, whose clock key
    PREV_CLOCK the cross-round ledger names (compare.py)."""
    if led.value_of("r.prefill_tflops_s") is None and led.value_of("x.prefill_tflops_s") is not None:
        return ("x.prefill_tflops_s", {lang: word("label.prefill_ref_of_round", lang,
                                                  round=round_name(prev_round or "", lang))
                                       for lang in LANGS}, prev_clock)
    ref = rate_reference_point(led["r.prefill_flop_rate"])
    return "r.prefill_tflops_s", _at(labels, ref), f"p.{ref}.sm_clock_load_mhz"


def step_mix_finding(led: Ledger, pid: str, labels: dict[str, str] | None = None,
                     prev_round: str | None = None, prev_clock: str | None = None) -> Finding | None:
    """Prefill chunks riding in decode steps, and what they do to ITL p99."""
    # The tokens per running request rest on the running gauge: nothing is said where it read stale values.
    if val(led, f"p.{pid}.running_gauges_stale"):
        return None
    ratio = val(led, f"p.{pid}.step_tokens_per_running")
    p50, p99 = val(led, f"p.{pid}.itl_ms_p50"), val(led, f"p.{pid}.itl_ms_p99")
    if ratio is None or ratio < V.STEP_MIX_MIN or p50 is None or p99 is None or p99 < V.STEP_MIX_MIN * p50:
        return None
    # The prediction is at the clock the point ran at (the reference's where the clock did not
    # fall), and it is said to explain the tail only within the rule's tolerance; otherwise the
    # sentence says it does not, with both numbers.
    miss, tol = val(led, f"p.{pid}.itl_p99_over_tail"), val(led, "r.rule_prediction_tol")
    miss_slow = val(led, f"p.{pid}.itl_p99_over_tail_at_clock")
    slower = (miss is not None and miss_slow is not None and miss_slow < miss / (1 + V.CLOCK_SLOWER))
    rate, ref, ref_clock = _prefill_rate_of(led, labels, prev_round, prev_clock)
    at_clock = miss_slow if slower else miss
    if at_clock is not None and tol is not None:
        held = 1 / (1 + tol) <= at_clock <= 1 + tol
        fill = dict(p=pid, at=_at(labels, pid), ref=ref, rate=rate, ref_clock=ref_clock)
        if slower:
            unscaled = (_texts("step_mix_unscaled_fits", p=pid) if not held and 1 / (1 + tol) <= miss <= 1 + tol
                        else {lang: "" for lang in LANGS})
            code = "step_mix_predicted_clocks" if held else "step_mix_predicted_clocks_not"
            f = _make(led, "step_mix", "mechanism", _texts(code, unscaled=unscaled, **fill), ["r.rule_prediction_tol"])
        else:
            f = _make(led, "step_mix", "mechanism",
                      _texts("step_mix_predicted" if held else "step_mix_predicted_not", **fill),
                      ["r.rule_prediction_tol"])
        if f is not None:
            return f
    # No prefill rate measured alone: the step model's fullest prefill step, where it has one.
    model = val(led, f"p.{pid}.itl_p99_over_tail_model")
    if model is not None and tol is not None:
        code = "step_mix_model" if 1 / (1 + tol) <= model <= 1 + tol else "step_mix_model_not"
        f = _make(led, "step_mix", "mechanism", _texts(code, p=pid, at=_at(labels, pid)), ["r.rule_prediction_tol"])
        if f is not None:
            return f
    return _make(led, "step_mix", "mechanism", _texts("step_mix", p=pid, at=_at(labels, pid)), [])


def first_step_finding(led: Ledger, pids: list[str], labels: dict[str, str] | None = None) -> Finding | None:
    """The first step up from a single stream: what one request's prefill landing in the other's
    decode step predicts for ITL p99 and TTFT p99 beside what was measured, and whether it
    explains each (within the prediction tolerance) or not."""
    if len(pids) < 2:
        return None
    a, b = pids[0], pids[1]
    tol = val(led, "r.rule_prediction_tol")
    itl, ttft = val(led, f"p.{b}.itl_p99_over_first_step"), val(led, f"p.{b}.ttft_p99_over_behind_step")
    share, gaps = val(led, f"p.{b}.prefill_gap_share"), val(led, f"p.{b}.itl_prefill_gaps_over_step")
    if tol is None or itl is None or ttft is None or share is None:
        return None

    def held(ratio: float) -> bool:
        return 1 / (1 + tol) <= ratio <= 1 + tol
    # How often the other stream's prefill lands in a decode gap decides what p99 reads: where
    # those gaps are fewer than the top share p99 reads, ITL p99 is a decode step and the prefill
    # steps sit further up the tail, at the percentile the page names.
    rare = share < 1.0 - V.TAIL_PERCENTILE / 100.0
    # A tail already as long with one stream fits the prediction without showing the second made it.
    before, after = val(led, f"p.{a}.itl_ms_p99"), val(led, f"p.{b}.itl_ms_p99")
    grew = before is not None and after is not None and after > before * (1 + tol)
    if rare:
        itl_code = "first_step_itl_rare_explained" if held(itl) else "first_step_itl_rare_not"
    else:
        itl_code = (("first_step_itl_explained" if grew else "first_step_itl_already") if held(itl)
                    else "first_step_itl_not")
    gaps_code = (None if gaps is None else "first_step_gaps_explained" if held(gaps)
                 else "first_step_gaps_short" if gaps < 1 else "first_step_gaps_long")
    empty = {lang: "" for lang in LANGS}
    # The TTFT bound is an upper one: a tail under it is within the mechanism too.
    return _make(led, "first_step", "mechanism", _texts(
        "first_step", a=a, b=b, a_at=_at(labels, a), b_at=_at(labels, b),
        itl=_texts(itl_code, a=a, b=b, a_at=_at(labels, a)),
        gaps=({lang: word("finding.counters_sep", lang) + t for lang, t in _texts(gaps_code, a=a, b=b).items()}
              if gaps_code else empty),
        ttft=_texts("first_step_ttft_explained" if ttft <= 1 else "first_step_ttft_near" if ttft <= 1 + tol
                    else "first_step_ttft_not", a=a, b=b)),
        ["r.rule_prediction_tol"])


def population_finding(led: Ledger, pid: str, labels: dict[str, str] | None = None) -> Finding | None:
    """Which requests the server's queue and prefill means describe."""
    k = f"p.{pid}."
    if val(led, k + "population_excludes_warmup") is False:
        return _make(led, "population", "method", _texts("population_with_warmup", p=pid, at=_at(labels, pid)),
                     [k + "population_excludes_warmup"])
    return _make(led, "population", "method", _texts("population", p=pid, at=_at(labels, pid)), [])


def block_rounding_finding(led: Ledger, pids: list[str], labels: dict[str, str] | None = None) -> Finding | None:
    """Measured KV peaks that equal C requests of whole blocks: a line fitted through them
    deviates from slope C by block rounding alone."""
    diffs = [val(led, f"p.{p}.kv_peak_vs_blocks") for p in pids]
    if len(pids) < 2 or any(d is None or abs(d) > V.KV_BLOCKS_MATCH for d in diffs):
        return None
    return _make(led, "kv_block_rounding", "mechanism",
                 _texts("kv_block_rounding", first=pids[0], last=pids[-1], first_at=_at(labels, pids[0]),
                        last_at=_at(labels, pids[-1])),
                 [f"p.{p}.kv_peak_vs_blocks" for p in pids])


def reproducibility_finding(led: Ledger, facts: dict) -> Finding | None:
    """Whether the points shared with the previous round reproduce, throughput and tail latency
    each against its stated tolerance: "reproduced" only when both hold."""
    lo, hi = val(led, "x.repro_tput_min"), val(led, "x.repro_tput_max")
    if lo is None or hi is None:
        return None
    tput_ok = max(abs(lo), abs(hi)) <= val(led, "r.rule_repro_tput_tol")
    tlo, thi = val(led, "x.repro_ttft_p99_min"), val(led, "x.repro_ttft_p99_max")
    ttft_ok = None if tlo is None or thi is None else max(abs(tlo), abs(thi)) <= val(led, "r.rule_repro_ttft_tol")

    def by(name: str, lo_v: float, hi_v: float) -> dict[str, str]:
        # a single common point: one difference, not a range
        return _texts("repro_by_one" if lo_v == hi_v else "repro_by_range", name=name)
    tput = _texts("repro_tput", by=by("repro_tput", lo, hi))
    ttft = _texts("repro_ttft", by=by("repro_ttft_p99", tlo, thi)) if ttft_ok is not None else ""
    code = ("reproduced" if tput_ok and ttft_ok else "reproduced_tput_not_ttft" if tput_ok and ttft_ok is False
            else "reproduced_tput_only" if tput_ok else "not_reproduced")
    return _make(led, "reproducibility", "comparison",
                 _texts(code, prev=facts.get("prev_round"), tput=tput, ttft=ttft,
                        shared=_texts("repro_shared_one" if facts.get("repro_points") == 1 else "repro_shared_many")), [])


def comparison_findings(facts: dict, labels: dict[str, str]) -> list[Finding | None]:
    """What this round confirms, corrects and finds new against the previous round's verdicts."""
    prev = facts.get("prev_round")
    limit = {b: {lang: word(f"label.bottleneck_{b}", lang) for lang in LANGS}
             for b in BOTTLENECKS}
    out: list[Finding | None] = []
    for pid, b in facts.get("verdicts_confirmed") or []:
        out.append(Finding(f"confirmed_{pid}", "comparison",
                           _texts("verdict_confirmed", at=_at(labels, pid), prev=prev, limit=limit[b]), []))
    for pid, old, new in facts.get("verdicts_corrected") or []:
        out.append(Finding(f"corrected_{pid}", "comparison",
                           _texts("verdict_corrected", at=_at(labels, pid), prev=prev, old=limit[old],
                                  new=limit[new]), []))
    for b in facts.get("verdicts_new") or []:
        out.append(Finding(f"new_{b}", "comparison", _texts("verdict_new", prev=prev, limit=limit[b]), []))
    return out


def knee(led: Ledger, valid_pids: list[str]) -> tuple[str, str] | None:
    """(knee, next): the valid point from which every step up in concurrency cost more in TTFT
    p99 than it bought in throughput, and the point after it; None when the last step still
    bought more than it cost (no knee in the measured range)."""
    # TTFT p99 through its monotone envelope: a dip at one point neither hides a knee below it
    # nor makes the next point's return to the earlier level look like a step that cost more.
    steps = [(a, b, val(led, f"p.{b}.tput_growth_from_prev"), val(led, f"p.{b}.ttft_p99_envelope_growth_from_prev"))
             for a, b in zip(valid_pids, valid_pids[1:])]
    found = None
    for a, b, tput, tail in reversed(steps):
        if tput is None or tail is None or tail <= tput:
            break
        found = (a, b)
    return found


def limits_by_point_finding(attributions: dict[str, Attribution], valid_pids: list[str],
                            at: dict[str, str]) -> Finding | None:
    """Where the limit moves along the sweep: each run of valid points with one verdict, in load
    order (none where every valid point has the same one: the thesis says it)."""
    runs: list[list[str]] = []
    for pid in valid_pids:
        if runs and attributions[runs[-1][-1]].bottleneck == attributions[pid].bottleneck:
            runs[-1].append(pid)
        else:
            runs.append([pid])
    if len(runs) < 2:
        return None
    parts = [_texts("limits_run_one" if len(r) == 1 else "limits_run", at=at[r[0]], to=at[r[-1]],
                    limit={lang: word(f"label.bottleneck_{attributions[r[0]].bottleneck}", lang) for lang in LANGS})
             for r in runs]
    return Finding("thesis_limits", "thesis", _texts("limits_by_point", runs=_joined(parts, "limits_sep")), [])


def thesis_findings(led: Ledger, attributions: dict[str, Attribution], valid_pids: list[str],
                    labels: dict[str, str], prev_round: str | None = None,
                    prev_clock: str | None = None) -> list[Finding | None]:
    """Page 1's answer: what limits the server and from which load on, what it delivers there
    (where that is compute, the step it predicts beside the step measured), the knee, and what
    to change. "From X on" holds by construction: every valid point from X to the highest has
    the same bottleneck."""
    top = valid_pids[-1]
    limit = attributions[top].bottleneck
    since = top
    for pid in reversed(valid_pids):
        if attributions[pid].bottleneck != limit:
            break
        since = pid
    at = {p: _at(labels, p) for p in valid_pids}
    code = {"unknown": "thesis_unknown", "under_driven": "thesis_under_driven"}.get(
        limit, "thesis_every_point" if since == valid_pids[0] and len(valid_pids) > 1
        else "thesis_top" if since == top else "thesis")
    # At the power cap the compute ceiling is the capped clock's, not the datasheet's: said so.
    said = limit + ("_power_capped" if attributions[top].mechanism == "step_compute_power_capped" else "")
    # A pool the round forced small itself (--num-gpu-blocks-override): the flag is the limit.
    if said == "kv_pool" and val(led, "r.blocks_before_override") is not None:
        said = "kv_pool_forced"
    # An open loop that kept up (a valid open-loop point did: its in-flight requests did not
    # grow while the engine fell behind) delivered what it was sent: its throughput is the
    # load's, and what set each step's pace is not a limit the server reached.
    kept_up = val(led, f"p.{top}.open_loop") is True and limit not in ("unknown", "under_driven", "client")
    if kept_up:
        code = "thesis_kept_up"
    head = _make(led, "thesis", "thesis", _texts(code, p=top, at=at[top], since=at[since],
                                                 first=at[valid_pids[0]],
                                                 limit=_texts(f"thesis_limit_{said}")),
                 list(attributions[top].evidence))
    if head is not None and attributions[top].mechanism in COMPUTE_BOUND:
        head = _followed(head, _compute_step_said(led, top, labels, prev_round, prev_clock, "thesis_"))
    out = [head, limits_by_point_finding(attributions, valid_pids, at)]
    bend = knee(led, valid_pids)
    if bend is not None:
        out.append(_make(led, "thesis_knee", "thesis",
                         _texts("thesis_knee", n=bend[1], knee=at[bend[0]], next=at[bend[1]]), []))
    elif len(valid_pids) > 1:
        out.append(_make(led, "thesis_knee", "thesis", _texts("thesis_no_knee", n=top, at=at[top],
                                                               prev=at[valid_pids[-2]]), []))
    advice = "thesis_advice_kept_up" if kept_up else f"thesis_advice_{said}"
    # Advice checked against the bundle: CUDA graphs only for a GPU engine that ran without them.
    if said == "engine_host":
        advice += ("_cpu" if attributions[top].mechanism.startswith("cpu_engine")
                   else "" if val(led, f"p.{top}.eager_engine") is True else "_graphs")
    limit_w, rated = val(led, f"p.{top}.power_limit_w"), val(led, "r.rated_power_w")
    if said == "gpu_compute_power_capped" and limit_w is not None and rated is not None and limit_w >= rated:
        advice += "_at_rated"       # no higher limit to set: the board is at its rated maximum
    out.append(_make(led, "thesis_advice", "thesis", _texts(advice, p=top, at=at[top]), []))
    return out


# The SLO's objectives as findings name them, in the order bundle/slo.py lists them.
SLO_OBJECTIVES = (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2e", "E2E"), ("itl", "ITL"))


def _pid_at_load(led: Ledger, pids: list[str], load) -> str | None:
    """The valid point run at LOAD (its concurrency, or its rate in an open loop)."""
    for pid in pids:
        if load in (val(led, f"p.{pid}.request_rate") or val(led, f"p.{pid}.concurrency"),):
            return pid
    return None


def slo_findings(led: Ledger, valid_pids: list[str], labels: dict[str, str]) -> list[Finding | None]:
    """The capacity answer under the SLO: the largest load meeting every objective, the points
    that bound it and the objective that binds first; else where the capacity lies (beyond or
    below the sweep); and the best point that meets the SLO."""
    if "r.slo_capacity" not in led or not valid_pids:
        return []
    objectives = _joined([_texts("slo_objective", name=name, k=k) for k, name in SLO_OBJECTIVES
                          if val(led, f"r.slo_{k}_threshold_ms") is not None], "slo_objective_sep")
    if not objectives["en"]:
        return []
    rate = val(led, f"p.{valid_pids[-1]}.request_rate") is not None
    cap = led["r.slo_capacity"]
    out: list[Finding | None] = []
    if cap.present:
        b = led["r.slo_binding_objective"].value
        low = _pid_at_load(led, valid_pids, led.value_of("r.slo_capacity_low"))
        high = _pid_at_load(led, valid_pids, led.value_of("r.slo_capacity_high"))
        if low is not None and high is not None:
            # "LOW meets it and HIGH does not" is said of the measurements only where they
            # agree with the fit; where the margins wobble, the fit's bracket is said as such.
            said = val(led, f"p.{low}.slo_met") is True and (val(led, f"p.{high}.slo_margin_{b}") or 0) < 0
            out.append(_make(led, "thesis_slo", "thesis", _texts(
                "slo_capacity" if said else "slo_capacity_fitted", objectives=objectives, h=high, b=b, name=dict(SLO_OBJECTIVES)[b],
                low=_at(labels, low), high=_at(labels, high),
                cap=_texts("slo_cap_rate" if rate else "slo_cap_concurrency")), []))
    else:
        root = cap.missing.chain()[1].code if cap.missing else ""
        code = {"reason.slo_met_at_every_point": ("slo_capacity_beyond", valid_pids[-1]),
                "reason.slo_met_at_no_point": ("slo_capacity_below", valid_pids[0])}.get(root)
        if code is not None:
            out.append(_make(led, "thesis_slo", "thesis", _texts(code[0], objectives=objectives,
                                                                 at=_at(labels, code[1])), []))
    best = _pid_at_load(led, valid_pids, led.value_of("r.slo_best_load"))
    if best is not None:
        f = _make(led, "thesis_slo_best", "thesis", _texts("slo_best", p=best, at=_at(labels, best)), [])
        out.append(f or _make(led, "thesis_slo_best", "thesis",
                              _texts("slo_best_plain", p=best, at=_at(labels, best)), []))
    return out


def set_findings(led: Ledger, comparisons: list, labels: dict[str, str]) -> list[Finding | None]:
    """Each server set against the base set: its question's two signals, and whether they moved
    the way its flags were expected to move them."""
    out = []
    for c in comparisons:
        verdict = _texts(f"set_verdict_{c.verdict}", disagreed=_joined(
            [_texts(f"set_signal_{q}") for q in c.disagreed()], "invalid_reason_sep"))
        texts = _texts(f"set_{c.question}", p=c.point, base=c.base, at=_at(labels, c.point),
                       flags=" ".join(c.flags), base_at=_at(labels, c.base), verdict=verdict)
        if c.question == "prefix_caching" and _left_room(led, c.point, c.base):
            # The shared blocks also freed pool: more requests ran, fewer were preempted.
            room = _texts("set_prefix_room", p=c.point, base=c.base)
            texts = {lang: texts[lang] + word("finding.sentence_sep", lang) + room[lang] for lang in LANGS}
        f = _make(led, f"set_{c.point}", "sets", texts, [])
        if f is not None and c.question == "step_budget":
            # The step model's prediction of each set's ITL tail: its fullest prefill step.
            f = _followed(f, _make(led, f"set_{c.point}", "sets", _texts("set_step_budget_model", p=c.point,
                                                                           base=c.base), []))
        out.append(f)
    return out


def sets_thesis(comparisons: list, labels: dict[str, str]) -> Finding | None:
    """Page 1's answer for a round of server sets: each set's verdict against the base set."""
    if not comparisons:
        return None
    items = [_texts("thesis_set_item", at=_at(labels, c.point), base_at=_at(labels, c.base),
                    flags=" ".join(c.flags), verdict=_texts(f"set_verdict_short_{c.verdict}"))
             for c in comparisons]
    return Finding("thesis_sets", "thesis", _texts("thesis_sets", items=_joined(items, "invalid_reason_sep")),
                   [])


def _left_room(led: Ledger, pid: str, base: str) -> bool:
    """Whether more requests ran and fewer were preempted at PID than at BASE."""
    run, run0 = val(led, f"p.{pid}.server_running_median"), val(led, f"p.{base}.server_running_median")
    pre, pre0 = val(led, f"p.{pid}.preemptions"), val(led, f"p.{base}.preemptions")
    return None not in (run, run0, pre, pre0) and run > run0 and pre < pre0


def round_findings(led: Ledger, validity: dict[str, Validity], attributions: dict[str, Attribution],
                   valid_pids: list[str], facts: dict) -> list[Finding]:
    """Every finding of one round, most important first."""
    out: list[Finding | None] = []
    labels = facts.get("point_labels") or {}
    if valid_pids:
        out.append(sets_thesis(facts.get("set_comparisons") or [], labels))
        out += thesis_findings(led, attributions, valid_pids, labels, facts.get("prev_round"),
                               facts.get("prefill_ref_clock"))
        out += slo_findings(led, valid_pids, labels)
        last = valid_pids[-1]
        out.append(bottleneck_finding(led, attributions[last], labels=labels, prev_round=facts.get("prev_round"),
                                      prev_clock=facts.get("prefill_ref_clock")))
        kinds = {}
        for p in valid_pids:
            kinds.setdefault(attributions[p].bottleneck, p)
        for kind, first in kinds.items():
            if first != last and kind != attributions[last].bottleneck:
                out.append(bottleneck_finding(led, attributions[first], f"bottleneck_{kind}", labels,
                                              facts.get("prev_round"), facts.get("prefill_ref_clock")))
        out.append(step_mix_finding(led, last, labels, facts.get("prev_round"), facts.get("prefill_ref_clock")))
        if "concurrency" in (facts.get("axis"), facts.get("sweep_axis")):
            out.append(first_step_finding(led, valid_pids, labels))
        out.append(population_finding(led, last, labels))
    out.append(invalid_points_finding(led, validity, labels))
    out.append(disagreement_finding(led, validity, labels,
                                    {p: attributions[p] for p in valid_pids if p in attributions}))
    out.append(client_suspect_finding(led, valid_pids, labels, attributions))
    out += caveat_findings(led, validity, valid_pids, labels, attributions)
    if facts.get("sweep_axis") == "input_len":
        out.append(block_rounding_finding(led, facts.get("ok_points") or [], labels))
    out += set_findings(led, facts.get("set_comparisons") or [], labels)
    out.append(reproducibility_finding(led, facts))
    out += comparison_findings(facts, labels)
    return [f for f in out if f is not None]
