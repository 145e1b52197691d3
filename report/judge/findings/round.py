"""Findings of the round: the thesis over its valid points and the knee, the SLO, server sets, repeatability, the previous round, and every finding of a round in order."""

from __future__ import annotations

from report.judge.diagnosis import BOTTLENECKS, Attribution, Validity
from report.judge.findings.finding import (
    Finding,
    catalogue_texts,
    joined_texts,
    make_finding,
    point_label,
)
from report.judge.findings.points import (
    COMPUTE_BOUND,
    block_rounding_finding,
    bottleneck_finding,
    caveat_findings,
    client_suspect_finding,
    compute_step_said,
    disagreement_finding,
    first_step_finding,
    followed_by,
    invalid_points_finding,
    population_finding,
    step_mix_finding,
)
from report.judge.rules import signals_disagree
from report.ledger import Ledger
from report.words import LANGS, in_lang, listed, word


def reproducibility_finding(led: Ledger, facts: dict) -> Finding | None:
    """Whether the points shared with the previous round reproduce, throughput and tail latency
    each against its stated tolerance: "reproduced" only when both hold."""
    lo, hi = led.value_of("x.repro_tput_min"), led.value_of("x.repro_tput_max")
    if lo is None or hi is None:
        return None
    tput_ok = max(abs(lo), abs(hi)) <= led.value_of("r.rule_repro_tput_tol")
    tlo, thi = led.value_of("x.repro_ttft_p99_min"), led.value_of("x.repro_ttft_p99_max")
    ttft_ok = None if tlo is None or thi is None else max(abs(tlo), abs(thi)) <= led.value_of("r.rule_repro_ttft_tol")

    def by(name: str, lo_v: float, hi_v: float) -> dict[str, str]:
        # a single common point: one difference, not a range
        return catalogue_texts("repro_by_one" if lo_v == hi_v else "repro_by_range", name=name)
    tput = catalogue_texts("repro_tput", by=by("repro_tput", lo, hi))
    ttft = catalogue_texts("repro_ttft", by=by("repro_ttft_p99", tlo, thi)) if ttft_ok is not None else ""
    code = ("reproduced" if tput_ok and ttft_ok else "reproduced_tput_not_ttft" if tput_ok and ttft_ok is False
            else "reproduced_tput_only" if tput_ok else "not_reproduced")
    return make_finding(led, "reproducibility", "comparison",
                        catalogue_texts(code, prev=facts.get("prev_round"), tput=tput, ttft=ttft,
                        shared=catalogue_texts("repro_shared_one" if facts.get("repro_points") == 1 else "repro_shared_many")), [])


def comparison_findings(facts: dict, labels: dict[str, str]) -> list[Finding | None]:
    """What this round confirms, corrects and finds new against the previous round's verdicts."""
    prev = facts.get("prev_round")
    limit = {b: {lang: word(f"label.bottleneck_{b}", lang) for lang in LANGS}
             for b in BOTTLENECKS}
    out: list[Finding | None] = []
    # One sentence per limit confirmed, naming its points, not one per point.
    confirmed: dict[str, list[str]] = {}
    for pid, b in facts.get("verdicts_confirmed") or []:
        confirmed.setdefault(b, []).append(pid)
    for b, pids in confirmed.items():
        at = {lang: listed([str(in_lang(point_label(labels, pid), lang)) for pid in pids], lang) for lang in LANGS}
        out.append(Finding(f"confirmed_{b}", "comparison",
                           catalogue_texts("verdict_confirmed", at=at, prev=prev, limit=limit[b]), []))
    for pid, old, new in facts.get("verdicts_corrected") or []:
        out.append(Finding(f"corrected_{pid}", "comparison",
                           catalogue_texts("verdict_corrected" + ("_unknown" if new == "unknown" else ""),
                                           at=point_label(labels, pid), prev=prev, old=limit[old],
                                           new=limit[new]), []))
    for b in facts.get("verdicts_new") or []:
        out.append(Finding(f"new_{b}", "comparison", catalogue_texts("verdict_new", prev=prev, limit=limit[b]), []))
    return out


def knee(led: Ledger, valid_pids: list[str]) -> tuple[str, str] | None:
    """(knee, next): the valid point from which every step up in concurrency cost more in TTFT
    p99 than it bought in throughput, and the point after it; None when the last step still
    bought more than it cost (no knee in the measured range)."""
    # TTFT p99 through its monotone envelope: a dip at one point neither hides a knee below it
    # nor makes the next point's return to the earlier level look like a step that cost more.
    steps = [(a, b, led.value_of(f"p.{b}.tput_growth_from_prev"), led.value_of(f"p.{b}.ttft_p99_envelope_growth_from_prev"))
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
    # A run with no limit named says so in words a reader can act on (the diagnosis says why).
    parts = [catalogue_texts(("limits_run_one" if len(r) == 1 else "limits_run")
                             + ("_unknown" if attributions[r[0]].bottleneck == "unknown" else ""), at=at[r[0]], to=at[r[-1]],
                             limit={lang: word(f"label.bottleneck_{attributions[r[0]].bottleneck}", lang) for lang in LANGS})
             for r in runs]
    return Finding("thesis_limits", "thesis", catalogue_texts("limits_by_point", runs=joined_texts(parts, "limits_sep")), [])


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
    at = {p: point_label(labels, p) for p in valid_pids}
    code = {"unknown": "thesis_unknown", "under_driven": "thesis_under_driven"}.get(
        limit, "thesis_every_point" if since == valid_pids[0] and len(valid_pids) > 1
        else "thesis_top" if since == top else "thesis")
    # At the power cap the compute ceiling is the capped clock's, not the datasheet's: said so.
    said = limit + ("_power_capped" if attributions[top].mechanism == "step_compute_power_capped" else "")
    # A pool the round forced small itself (--num-gpu-blocks-override): the flag is the limit.
    if said == "kv_pool" and led.value_of("r.blocks_before_override") is not None:
        said = "kv_pool_forced"
    # An open loop that kept up (a valid open-loop point did: its in-flight requests did not
    # grow while the engine fell behind) delivered what it was sent: its throughput is the
    # load's, and what set each step's pace is not a limit the server reached.
    kept_up = led.value_of(f"p.{top}.open_loop") is True and limit not in ("unknown", "under_driven", "client")
    if kept_up:
        code = "thesis_kept_up"
    # No limit named: because the signals contradict one another, or because those that would
    # name one were not measured; the diagnosis's sentence for the point says the same.
    unsignalled = limit == "unknown" and not signals_disagree(attributions[top])
    if unsignalled:
        code = "thesis_unknown_unmeasured"
    head = make_finding(led, "thesis", "thesis", catalogue_texts(code, p=top, at=at[top], since=at[since],
                                                 first=at[valid_pids[0]],
                                                 limit=catalogue_texts(f"thesis_limit_{said}")),
                        list(attributions[top].evidence))
    if head is not None and attributions[top].mechanism in COMPUTE_BOUND:
        head = followed_by(head, compute_step_said(led, top, labels, prev_round, prev_clock, "thesis_"))
    out = [head, limits_by_point_finding(attributions, valid_pids, at)]
    bend = knee(led, valid_pids)
    if bend is not None:
        out.append(make_finding(led, "thesis_knee", "thesis",
                                catalogue_texts("thesis_knee", n=bend[1], knee=at[bend[0]], next=at[bend[1]]), []))
    elif len(valid_pids) > 1:
        out.append(make_finding(led, "thesis_knee", "thesis", catalogue_texts("thesis_no_knee", n=top, at=at[top],
                                                               prev=at[valid_pids[-2]]), []))
    advice = "thesis_advice_kept_up" if kept_up else f"thesis_advice_{said}" + ("_unmeasured" if unsignalled else "")
    # Advice checked against the bundle: CUDA graphs only for a GPU engine that ran without them.
    if said == "engine_host":
        advice += ("_cpu" if attributions[top].mechanism.startswith("cpu_engine")
                   else "" if led.value_of(f"p.{top}.eager_engine") is True else "_graphs")
    limit_w, rated = led.value_of(f"p.{top}.power_limit_w"), led.value_of("r.rated_power_w")
    if said == "gpu_compute_power_capped" and limit_w is not None and rated is not None and limit_w >= rated:
        advice += "_at_rated"       # no higher limit to set: the board is at its rated maximum
    out.append(make_finding(led, "thesis_advice", "thesis", catalogue_texts(advice, p=top, at=at[top]), []))
    return out


# The SLO's objectives as findings name them, in the order bundle/slo.py lists them.
SLO_OBJECTIVES = (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2e", "E2E"), ("itl", "ITL"))


def _pid_at_load(led: Ledger, pids: list[str], load) -> str | None:
    """The valid point run at LOAD (its concurrency, or its rate in an open loop)."""
    for pid in pids:
        if load in (led.value_of(f"p.{pid}.request_rate") or led.value_of(f"p.{pid}.concurrency"),):
            return pid
    return None


def slo_findings(led: Ledger, valid_pids: list[str], labels: dict[str, str]) -> list[Finding | None]:
    """The capacity answer under the SLO: the largest load meeting every objective, the points
    that bound it and the objective that binds first; else where the capacity lies (beyond or
    below the sweep); and the best point that meets the SLO."""
    if "r.slo_capacity" not in led or not valid_pids:
        return []
    objectives = joined_texts([catalogue_texts("slo_objective", name=name, k=k) for k, name in SLO_OBJECTIVES
                          if led.value_of(f"r.slo_{k}_threshold_ms") is not None], "slo_objective_sep")
    if not objectives["en"]:
        return []
    rate = led.value_of(f"p.{valid_pids[-1]}.request_rate") is not None
    cap = led["r.slo_capacity"]
    out: list[Finding | None] = []
    if cap.present:
        b = led["r.slo_binding_objective"].value
        low = _pid_at_load(led, valid_pids, led.value_of("r.slo_capacity_low"))
        high = _pid_at_load(led, valid_pids, led.value_of("r.slo_capacity_high"))
        if low is not None and high is not None:
            # "LOW meets it and HIGH does not" is said of the measurements only where they
            # agree with the fit; where the margins wobble, the fit's bracket is said as such.
            said = led.value_of(f"p.{low}.slo_met") is True and (led.value_of(f"p.{high}.slo_margin_{b}") or 0) < 0
            out.append(make_finding(led, "thesis_slo", "thesis", catalogue_texts(
                "slo_capacity" if said else "slo_capacity_fitted", objectives=objectives, h=high, b=b, name=dict(SLO_OBJECTIVES)[b],
                low=point_label(labels, low), high=point_label(labels, high),
                cap=catalogue_texts("slo_cap_rate" if rate else "slo_cap_concurrency")), []))
    else:
        root = cap.missing.chain()[1].code if cap.missing else ""
        code = {"reason.slo_met_at_every_point": ("slo_capacity_beyond", valid_pids[-1]),
                "reason.slo_met_at_no_point": ("slo_capacity_below", valid_pids[0])}.get(root)
        if code is not None:
            out.append(make_finding(led, "thesis_slo", "thesis", catalogue_texts(code[0], objectives=objectives,
                                                                 at=point_label(labels, code[1])), []))
    best = _pid_at_load(led, valid_pids, led.value_of("r.slo_best_load"))
    if best is not None:
        f = make_finding(led, "thesis_slo_best", "thesis", catalogue_texts("slo_best", p=best, at=point_label(labels, best)), [])
        out.append(f or make_finding(led, "thesis_slo_best", "thesis",
                                     catalogue_texts("slo_best_plain", p=best, at=point_label(labels, best)), []))
    return out


def set_findings(led: Ledger, comparisons: list, labels: dict[str, str]) -> list[Finding | None]:
    """Each server set against the base set: its question's two signals, and whether they moved
    the way its flags were expected to move them."""
    out = []
    for c in comparisons:
        verdict = catalogue_texts(f"set_verdict_{c.verdict}", disagreed=joined_texts(
            [catalogue_texts(f"set_signal_{q}") for q in c.disagreed()], "invalid_reason_sep"))
        texts = catalogue_texts(f"set_{c.question}", p=c.point, base=c.base, at=point_label(labels, c.point),
                                flags=" ".join(c.flags), base_at=point_label(labels, c.base), verdict=verdict)
        if c.question == "prefix_caching" and _left_room(led, c.point, c.base):
            # The shared blocks also freed pool: more requests ran, fewer were preempted.
            room = catalogue_texts("set_prefix_room", p=c.point, base=c.base)
            texts = {lang: texts[lang] + word("finding.sentence_sep", lang) + room[lang] for lang in LANGS}
        f = make_finding(led, f"set_{c.point}", "sets", texts, [])
        if f is not None and c.question == "step_budget":
            # The step model's prediction of each set's ITL tail: its fullest prefill step.
            f = followed_by(f, make_finding(led, f"set_{c.point}", "sets", catalogue_texts("set_step_budget_model", p=c.point,
                                                                           base=c.base), []))
        out.append(f)
    return out


def sets_thesis(comparisons: list, labels: dict[str, str]) -> Finding | None:
    """Page 1's answer for a round of server sets: each set's verdict against the base set."""
    if not comparisons:
        return None
    items = [catalogue_texts("thesis_set_item", at=point_label(labels, c.point), base_at=point_label(labels, c.base),
                             flags=" ".join(c.flags), verdict=catalogue_texts(f"set_verdict_short_{c.verdict}"))
             for c in comparisons]
    return Finding("thesis_sets", "thesis", catalogue_texts("thesis_sets", items=joined_texts(items, "invalid_reason_sep")),
                   [])


def _left_room(led: Ledger, pid: str, base: str) -> bool:
    """Whether more requests ran and fewer were preempted at PID than at BASE."""
    run, run0 = led.value_of(f"p.{pid}.server_running_median"), led.value_of(f"p.{base}.server_running_median")
    pre, pre0 = led.value_of(f"p.{pid}.preemptions"), led.value_of(f"p.{base}.preemptions")
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
        # The compute step the headline point's verdict predicts is said once, on page 1.
        said = any(f is not None and f.kind == "thesis" and f"p.{last}.step_over_compute_ceiling" in f.keys()
                   for f in out)
        out.append(bottleneck_finding(led, attributions[last], labels=labels, prev_round=facts.get("prev_round"),
                                      prev_clock=facts.get("prefill_ref_clock"), predicted=not said))
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
