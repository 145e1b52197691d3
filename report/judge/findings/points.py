"""Findings of the points: the checks they failed, the signals that disagreed, the client suspected, each bottleneck with its mechanism and the step it predicts."""

from __future__ import annotations

from report.derive import validity as V
from report.derive.prefilltail import rate_reference_point
from report.judge.diagnosis import Attribution, Validity
from report.judge.findings.finding import (
    Finding,
    catalogue_texts,
    joined_texts,
    make_finding,
    point_label,
)
from report.ledger import Ledger
from report.words import LANGS, in_lang, listed, round_name, word

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
    "no_gpu_signals_queued",
    "host_counters_disagree",
)


# What the GPU's own counters said of a GPU verdict (diagnosis.Attribution.counters): worded by
# `finding.counters_<code>` after the mechanism's sentence.
COUNTER_CODES = ("shown", "bandwidth_agrees", "compute_agrees", "flops_agree", "model_only", "nvml_waits")


def _invalid_code(led: Ledger, pid: str, reason: str) -> str:
    """The sentence of one failed check; a lockstep point's says how long its waves queue, where
    the draining-wave prediction lies within the rule's tolerance of the measured queue."""
    ratio, tol = led.value_of(f"p.{pid}.queue_over_wave"), led.value_of("r.rule_prediction_tol")
    if reason == "lockstep" and ratio is not None and tol is not None and abs(ratio - 1) <= tol:
        return "invalid_lockstep_wave"
    return f"invalid_{reason}"


# The checks said once for every point that failed them, their numbers in the table of the
# invalid points beside the sentence (compose: invalid_table, its columns per check); any other
# check is said point by point with its numbers.
GROUPED_CHECKS = ("lockstep_wave", "lockstep", "not_steady", "pace_drift")


def invalid_points_finding(led: Ledger, validity: dict[str, Validity],
                           labels: dict[str, str] | None = None) -> Finding | None:
    """Which points are left out of fits and verdicts, and why: one sentence per check, the
    points that failed it named and their numbers in a table."""
    bad = [v for v in validity.values() if not v.valid]
    if not bad:
        return None
    codes = [(v.point, _invalid_code(led, v.point, r).removeprefix("invalid_")) for v in bad for r in v.reasons]
    items = []
    for code in GROUPED_CHECKS:
        pids = list(dict.fromkeys(p for p, c in codes if c == code))
        if pids:
            items.append(catalogue_texts(f"invalid_group_{code}", points={
                lang: listed([str(in_lang(point_label(labels, p), lang)) for p in pids], lang) for lang in LANGS}))
    for v in bad:
        rest = [c for p, c in codes if p == v.point and c not in GROUPED_CHECKS]
        if rest:
            items.append(catalogue_texts("invalid_point", p=v.point, at=point_label(labels, v.point),
                                         reasons=joined_texts([catalogue_texts(f"invalid_{c}", p=v.point)
                                                               for c in rest], "invalid_reason_sep")))
    shown = list(dict.fromkeys(p for p, c in codes if c in GROUPED_CHECKS))
    return Finding("invalid_points", "validity",
                   catalogue_texts("invalid_points", items=joined_texts(items, "invalid_reason_sep")),
                   [f"p.{v.point}.{k}" for v in bad for k in ("held_concurrency_fraction", "send_synchrony",
                                                             "lifetimes_in_window", "failed_scrape_share")]
                   + [f"p.{p}.queue_over_wave" for p, c in codes if c == "lockstep_wave"],
                   shown)


def disagreement_finding(led: Ledger, validity: dict[str, Validity],
                         labels: dict[str, str] | None = None,
                         attributions: dict[str, Attribution] | None = None) -> Finding | None:
    """Which signals disagreed with a check's or a bottleneck's verdict: point by point, except a
    disagreement of the held check at two points or more, said once with its points named and
    each point's shares in the held table (HELD_SHOWN) beside it."""
    said = [(v.point, v.disagreed) for v in validity.values()] + \
        [(a.point, a.disagreed) for a in (attributions or {}).values()]
    made = [(point, code, one) for point, codes in said for code in dict.fromkeys(codes)
            if (one := make_finding(led, "x", "validity", catalogue_texts(f"disagree_{code}", p=point, at=point_label(labels, point)), []))
            is not None]
    grouped = {code for code in HELD_GROUPED
               if len([p for p, c, _ in made if c == code and _held_shown(led, p)]) > 1}
    parts, keys, shown = [], [], []
    for point, code, one in made:
        if code not in grouped or not _held_shown(led, point):
            parts.append(one.texts)
            keys += one.keys()
        elif point not in shown:
            shown.append(point)
    for code in sorted(grouped, key=HELD_GROUPED.index):
        pids = [p for p, c, _ in made if c == code and _held_shown(led, p)]
        parts.append(catalogue_texts(f"disagree_{code}_points",
                            points={lang: listed([str(in_lang(point_label(labels, p), lang)) for p in pids], lang)
                                    for lang in LANGS}))
    if not parts:
        return None
    keys += [f"p.{p}.{q}" for p in shown for q in HELD_SHOWN]
    return Finding("disagreements", "validity",
                   catalogue_texts("disagreements", items=joined_texts(parts, "disagreement_sep")),
                   list(dict.fromkeys(keys)), shown)


# The disagreements of the held check said once for all their points, and the shares the held
# table prints of each (compose's held table).
HELD_GROUPED = ("gauge_stale", "held_outside_engine")
HELD_SHOWN = ("held_concurrency_fraction", "engine_held_fraction", "client_held_fraction", "outside_engine_share")


def _held_shown(led: Ledger, pid: str) -> bool:
    """Whether the held table has every share of PID to print."""
    return all(led.value_of(f"p.{pid}.{q}") is not None for q in HELD_SHOWN)


def client_suspects(led: Ledger, pids: list[str], attributions: dict[str, Attribution] | None = None) -> list[str]:
    """The points of PIDS whose client loop lagged past the lag rule at its tail (the rule the
    diagnosis reads at the median, read tail against tail), over the merged samples or at one
    Ray node's own (`client_nodes_tail_lagging`), where the verdict is not the client."""
    floor, share = led.value_of("r.rule_lag_min_ms"), led.value_of("r.rule_lag_share_of_itl")
    if floor is None or share is None:
        return []
    out = []
    for pid in pids:
        if attributions and pid in attributions and attributions[pid].bottleneck == "client":
            continue    # its verdict names the client already
        lag, itl = led.value_of(f"p.{pid}.client_lag_ms_p99"), led.value_of(f"p.{pid}.itl_ms_p99")
        if (lag is not None and itl is not None and lag > max(floor, share * itl)) \
                or led.value_of(f"p.{pid}.client_nodes_tail_lagging"):
            out.append(pid)
    return out


# What the client-lag table shows of each suspect point.
CLIENT_LAG_SHOWN = ("client_lag_ms_p99", "itl_ms_p99")


def client_suspect_finding(led: Ledger, pids: list[str], labels: dict[str, str] | None = None,
                           attributions: dict[str, Attribution] | None = None) -> Finding | None:
    """The points whose client loop lagged past the lag rule at its tail: the client named as a
    suspect for their tails, with its lag beside the ITL p99 it measured."""
    # Each point's lag beside its ITL p99 is a row of the diagnosis's table (compose's client_lag
    # table reads the points from this finding's evidence), not a clause repeated point by point.
    shown = [pid for pid in client_suspects(led, pids, attributions)
             if all(led.value_of(f"p.{pid}.{q}") is not None for q in CLIENT_LAG_SHOWN)]
    if not shown:
        return None
    names = {lang: listed([str(in_lang(point_label(labels, pid), lang)) for pid in shown], lang) for lang in LANGS}
    said = make_finding(led, "client_suspect", "validity", catalogue_texts("client_suspect", points=names),
                        [f"p.{pid}.{q}" for pid in shown for q in CLIENT_LAG_SHOWN])
    # A point one Ray node's own tail made a suspect (the merged p99 hides it) names that node.
    for pid in shown:
        if said is not None and led.value_of(f"p.{pid}.client_nodes_tail_lagging"):
            said = followed_by(said, make_finding(led, "x", "validity", catalogue_texts(
                "client_suspect_node", p=pid, at=point_label(labels, pid)), []))
    return said


def caveat_findings(led: Ledger, validity: dict[str, Validity], valid_pids: list[str],
                    labels: dict[str, str] | None = None,
                    attributions: dict[str, Attribution] | None = None) -> list[Finding | None]:
    """What page 1 must say beside its answer: the measured points left out of it (failed their
    checks) and the points whose tails the client may have made."""
    def names(pids: list[str]) -> dict[str, str]:
        return {lang: listed([str(in_lang(point_label(labels, p), lang)) for p in pids], lang)
                for lang in LANGS}
    left = [v.point for v in validity.values() if not v.valid]
    suspects = client_suspects(led, valid_pids, attributions)
    return [Finding("caveat_left_out", "caveat", catalogue_texts("caveat_left_out", points=names(left)), []) if left else None,
            Finding("caveat_client", "caveat", catalogue_texts("caveat_client", points=names(suspects)), []) if suspects else None]


# Mechanisms also said by phase (`finding.mechanism_<code>_by_phase`): where the model's config
# gives the decode step's and the prefill's intensities, the sentence judges each phase.
BY_PHASE: tuple[str, ...] = ()


# The compute-bound mechanisms: their sentence is followed by the step they predict.
COMPUTE_BOUND = ("step_compute", "step_compute_power_capped")


def followed_by(f: Finding, more: Finding | None) -> Finding:
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
    return compute_step_said(led, pid, labels, prev_round, prev_clock, "")


def _step_fit(ratio: float, tol: float) -> str:
    """How a measured step compares with its prediction (measured over predicted, RATIO): within
    the prediction tolerance it is `explained`, else `longer` or `shorter`."""
    return "explained" if 1 / (1 + tol) <= ratio <= 1 + tol else "longer" if ratio > 1 + tol else "shorter"


def compute_step_said(led: Ledger, pid: str, labels: dict[str, str] | None, prev_round: str | None,
                      prev_clock: str | None, prefix: str) -> Finding | None:
    """The compute-step prediction at PID in the catalogue's PREFIX-ed words (the diagnosis's
    own, or page 1's shorter `thesis_` ones): the step at the clock's compute ceiling beside the
    step measured, then, where measured, the step at the prefill rate of a prompt alone."""
    tol = led.value_of("r.rule_prediction_tol")
    ratio = led.value_of(f"p.{pid}.step_over_compute_ceiling")
    if ratio is None or tol is None:
        return None
    f = make_finding(led, "compute_step", "bottleneck",
                     catalogue_texts(f"{prefix}compute_step_predicted", p=pid, at=point_label(labels, pid),
                     verdict=catalogue_texts(f"{prefix}compute_step_{_step_fit(ratio, tol)}", p=pid)),
                     ["r.rule_prediction_tol"])
    # The attainable rate this engine measured on a prompt alone, scaled to this point's clock.
    alone = led.value_of(f"p.{pid}.step_over_prefill_rate")
    if f is None or alone is None:
        return f
    rate, ref, ref_clock = _prefill_rate_of(led, labels, prev_round, prev_clock)
    return followed_by(f, make_finding(led, "compute_step", "bottleneck", catalogue_texts(
        f"{prefix}compute_step_at_prefill_rate", p=pid, ref=ref, rate=rate, ref_clock=ref_clock,
        verdict=catalogue_texts(f"{prefix}compute_rate_{_step_fit(alone, tol)}", p=pid)), []))


def bottleneck_finding(led: Ledger, att: Attribution, fid: str = "bottleneck",
                       labels: dict[str, str] | None = None, prev_round: str | None = None,
                       prev_clock: str | None = None, predicted: bool = True) -> Finding | None:
    """The mechanism sentence of one point's bottleneck, by phase where the phases are known,
    followed by the compute step it predicts (unless PREDICTED is false: page 1 says it) and
    what the GPU's own counters said of it."""
    f = None
    if att.mechanism in BY_PHASE:
        f = make_finding(led, fid, "bottleneck", catalogue_texts(f"mechanism_{att.mechanism}_by_phase", p=att.point,
                                                                 at=point_label(labels, att.point)),
                         list(att.evidence))
    f = f or make_finding(led, fid, "bottleneck", catalogue_texts(f"mechanism_{att.mechanism}", p=att.point, at=point_label(labels, att.point)),
                          list(att.evidence))
    if f is not None and att.mechanism in COMPUTE_BOUND and predicted:
        f = followed_by(f, compute_step_finding(led, att.point, labels, prev_round, prev_clock))
    if f is None:
        return f
    if att.counters:
        said = make_finding(led, fid, "bottleneck", catalogue_texts(f"counters_{att.counters}", p=att.point, at=point_label(labels, att.point)), [])
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
    return "r.prefill_tflops_s", point_label(labels, ref), f"p.{ref}.sm_clock_load_mhz"


def step_mix_finding(led: Ledger, pid: str, labels: dict[str, str] | None = None,
                     prev_round: str | None = None, prev_clock: str | None = None) -> Finding | None:
    """Prefill chunks riding in decode steps, and what they do to ITL p99."""
    # The tokens per running request rest on the running gauge: nothing is said where it read stale values.
    if led.value_of(f"p.{pid}.running_gauges_stale"):
        return None
    ratio = led.value_of(f"p.{pid}.step_tokens_per_running")
    p50, p99 = led.value_of(f"p.{pid}.itl_ms_p50"), led.value_of(f"p.{pid}.itl_ms_p99")
    if ratio is None or ratio < V.STEP_MIX_MIN or p50 is None or p99 is None or p99 < V.STEP_MIX_MIN * p50:
        return None
    # The prediction is at the clock the point ran at (the reference's where the clock did not
    # fall), and it is said to explain the tail only within the rule's tolerance; otherwise the
    # sentence says it does not, with both numbers.
    miss, tol = led.value_of(f"p.{pid}.itl_p99_over_tail"), led.value_of("r.rule_prediction_tol")
    miss_slow = led.value_of(f"p.{pid}.itl_p99_over_tail_at_clock")
    slower = (miss is not None and miss_slow is not None and miss_slow < miss / (1 + V.CLOCK_SLOWER))
    rate, ref, ref_clock = _prefill_rate_of(led, labels, prev_round, prev_clock)
    at_clock = miss_slow if slower else miss
    if at_clock is not None and tol is not None:
        held = 1 / (1 + tol) <= at_clock <= 1 + tol
        fill = dict(p=pid, at=point_label(labels, pid), ref=ref, rate=rate, ref_clock=ref_clock)
        if slower:
            unscaled = (catalogue_texts("step_mix_unscaled_fits", p=pid) if not held and 1 / (1 + tol) <= miss <= 1 + tol
                        else {lang: "" for lang in LANGS})
            code = "step_mix_predicted_clocks" if held else "step_mix_predicted_clocks_not"
            f = make_finding(led, "step_mix", "mechanism", catalogue_texts(code, unscaled=unscaled, **fill), ["r.rule_prediction_tol"])
        else:
            f = make_finding(led, "step_mix", "mechanism",
                             catalogue_texts("step_mix_predicted" if held else "step_mix_predicted_not", **fill),
                             ["r.rule_prediction_tol"])
        if f is not None:
            return f
    # No prefill rate measured alone: the step model's fullest prefill step, where it has one.
    model = led.value_of(f"p.{pid}.itl_p99_over_tail_model")
    if model is not None and tol is not None:
        code = "step_mix_model" if 1 / (1 + tol) <= model <= 1 + tol else "step_mix_model_not"
        f = make_finding(led, "step_mix", "mechanism", catalogue_texts(code, p=pid, at=point_label(labels, pid)), ["r.rule_prediction_tol"])
        if f is not None:
            return f
    return make_finding(led, "step_mix", "mechanism", catalogue_texts("step_mix", p=pid, at=point_label(labels, pid)), [])


def first_step_finding(led: Ledger, pids: list[str], labels: dict[str, str] | None = None) -> Finding | None:
    """The first step up from a single stream: what one request's prefill landing in the other's
    decode step predicts for ITL p99 and TTFT p99, and whether it explains each (within the
    prediction tolerance) or not; each prediction beside its measurement in the table of the two
    points (compose: first_step_table, its rows FIRST_STEP_ROWS)."""
    if len(pids) < 2:
        return None
    a, b = pids[0], pids[1]
    tol = led.value_of("r.rule_prediction_tol")
    itl, ttft = led.value_of(f"p.{b}.itl_p99_over_first_step"), led.value_of(f"p.{b}.ttft_p99_over_behind_step")
    share, gaps = led.value_of(f"p.{b}.prefill_gap_share"), led.value_of(f"p.{b}.itl_prefill_gaps_over_step")
    if tol is None or itl is None or ttft is None or share is None:
        return None

    def held(ratio: float) -> bool:
        return 1 / (1 + tol) <= ratio <= 1 + tol
    # How often the other stream's prefill lands in a decode gap decides what p99 reads: where
    # those gaps are fewer than the top share p99 reads, ITL p99 is a decode step and the prefill
    # steps sit further up the tail, at the percentile the page names.
    rare = share < 1.0 - V.TAIL_PERCENTILE / 100.0
    # A tail already as long with one stream fits the prediction without showing the second made it.
    before, after = led.value_of(f"p.{a}.itl_ms_p99"), led.value_of(f"p.{b}.itl_ms_p99")
    grew = before is not None and after is not None and after > before * (1 + tol)
    if rare:
        itl_code = "first_step_itl_rare_explained" if held(itl) else "first_step_itl_rare_not"
    else:
        itl_code = (("first_step_itl_explained" if grew else "first_step_itl_already") if held(itl)
                    else "first_step_itl_not")
    gaps_code = (None if gaps is None else "first_step_gaps_explained" if held(gaps)
                 else "first_step_gaps_short" if gaps < 1 else "first_step_gaps_long")
    empty = {lang: "" for lang in LANGS}
    if any(led.value_of(f"p.{b}.{q}") is None for row in FIRST_STEP_ROWS[:1] + FIRST_STEP_ROWS[2:] for q in row):
        return None     # the table would not give both sides of a prediction the sentence judges
    # The TTFT bound is an upper one: a tail under it is within the mechanism too.
    f = make_finding(led, "first_step", "mechanism", catalogue_texts(
        "first_step", a=a, b=b, a_at=point_label(labels, a), b_at=point_label(labels, b),
        itl=catalogue_texts(itl_code, a=a, b=b, a_at=point_label(labels, a)),
        gaps=({lang: word("finding.counters_sep", lang) + t for lang, t in catalogue_texts(gaps_code, a=a, b=b).items()}
              if gaps_code else empty),
        ttft=catalogue_texts("first_step_ttft_explained" if ttft <= 1 else "first_step_ttft_near" if ttft <= 1 + tol
                             else "first_step_ttft_not", a=a, b=b)),
        ["r.rule_prediction_tol"] + [f"p.{b}.{q}" for row in FIRST_STEP_ROWS for q in row])
    if f is not None:
        f.shown = [a, b]
    return f


# The first step's table, one row per prediction at the second point: (predicted, measured,
# measured over predicted); the gaps where a prefill lands are absent where no percentile reads them.
FIRST_STEP_ROWS = (("itl_p99_first_step_predicted", "itl_ms_p99", "itl_p99_over_first_step"),
                   ("itl_p99_with_prefill_predicted", "itl_ms_at_prefill_gaps", "itl_prefill_gaps_over_step"),
                   ("ttft_p99_behind_step_predicted", "ttft_ms_p99", "ttft_p99_over_behind_step"))


def population_finding(led: Ledger, pid: str, labels: dict[str, str] | None = None) -> Finding | None:
    """Which requests the server's queue and prefill means describe."""
    k = f"p.{pid}."
    if led.value_of(k + "population_excludes_warmup") is False:
        return make_finding(led, "population", "method", catalogue_texts("population_with_warmup", p=pid, at=point_label(labels, pid)),
                            [k + "population_excludes_warmup"])
    return make_finding(led, "population", "method", catalogue_texts("population", p=pid, at=point_label(labels, pid)), [])


def block_rounding_finding(led: Ledger, pids: list[str], labels: dict[str, str] | None = None) -> Finding | None:
    """Measured KV peaks that equal C requests of whole blocks: a line fitted through them
    deviates from slope C by block rounding alone."""
    diffs = [led.value_of(f"p.{p}.kv_peak_vs_blocks") for p in pids]
    if len(pids) < 2 or any(d is None or abs(d) > V.KV_BLOCKS_MATCH for d in diffs):
        return None
    return make_finding(led, "kv_block_rounding", "mechanism",
                        catalogue_texts("kv_block_rounding", first=pids[0], last=pids[-1], first_at=point_label(labels, pids[0]),
                        last_at=point_label(labels, pids[-1])),
                        [f"p.{p}.kv_peak_vs_blocks" for p in pids])
