"""Turn a judged round (report.judge.result.RoundResult) into the typed RoundReport the renderers read."""

from __future__ import annotations

import re
from dataclasses import asdict
from pathlib import Path

from bundle.schema import plan_titles
from report.derive import validity as V
from report.derive.gpu.datasheet import PEAK_DTYPE, gpu_absent_reason
from report.derive.round.read import OWN_LENGTH_KINDS, ok_points
from report.judge.result import RoundResult, judge_rounds, refusal_text
from report.ledger import Ledger
from report.publish.captions import captions
from report.publish.document import RoundFacts, RoundReport
from report.publish.figures import against as FA
from report.publish.figures import lengths as FL
from report.publish.figures import sweep as FS
from report.publish.figures import timeline as FT
from report.publish.plans import step_name
from report.publish.predicates import page_holds
from report.publish.tables import in_langs, round_tables, runs_in_parallel
from report.words import LANGS, has, listed, round_name, word

# Workloads the title names, since their requests are not the plan's own drawn lengths.
TITLED_WORKLOADS = ("trace", "sharegpt", "jsonl", "sessions", "shared-prefix")

def compose_rounds(pairs: list[tuple[str | Path, str]],
                   refused: list[str] | None = None, slo=None, cost=None,
                   compare_with: dict[str, tuple[str, ...]] | None = None) -> list[RoundReport]:
    """The report object of every round of PAIRS, each judged against the round before it
    (report.judge.result.judge_rounds: REFUSED, SLO, COST and COMPARE_WITH as there)."""
    out = []
    for res in judge_rounds(pairs, refused, slo, cost=cost, compare_with=compare_with):
        try:
            out.append(compose_from(res))
        except Exception as e:  # noqa: BLE001 - with REFUSED, one round stops no other
            if refused is None:
                raise
            refused.append(f"{res.round_id}: {refusal_text(e)}")
    return out


def compose_round(bundle_path: str | Path, round_id: str) -> RoundReport:
    """Read one bundle and compose its report object, with no previous round."""
    return compose_rounds([(bundle_path, round_id)])[0]


def compose_from(res: RoundResult) -> RoundReport:
    """The report object of one judged round: its figures, tables, notices and sections."""
    bundle_path, round_id, rd, led = res.bundle_path, res.round_id, res.rd, res.led
    bundle = rd.bundle
    facts = dict(res.facts)
    pids = facts["ok_points"]
    axis = rd.axis if rd.axis in ("concurrency", "input_len") else "concurrency"
    validity = rd.verdicts.validity
    facts["client_distorted_points"] = [pid for pid in pids if "client_distorted" in validity[pid].reasons]
    # The relations the sections' words choose by, decided from the ledger and policy.
    facts["holds"] = page_holds(led, facts)
    # The GPU's spec (and so its peak) is known exactly when r.peak_flops has no reason it is absent.
    peak_missing = led["r.peak_flops"].missing
    facts["peak_label"] = in_langs("label.peak_dense", dtype=PEAK_DTYPE) if peak_missing is None else None
    facts["peak_missing"] = peak_missing.text("en") if peak_missing else None
    facts["peak_missing_zh"] = peak_missing.text("zh") if peak_missing else None
    gpu_absent = gpu_absent_reason(facts.get("gpu_absent_reason"))
    facts["gpu_absent_reason_zh"] = gpu_absent.text("zh") if gpu_absent else None
    prev_led, prev_pids = None, []
    if res.prev is not None:
        prev_rd, prev_led = res.prev
        prev_pids = [p.pid for p in ok_points(prev_rd)]
        facts["prev_differs"] = {lang: [word(f"label.differs_{k}", lang) for k in facts["prev_differs"]]
                                 for lang in LANGS}
    valid = facts["valid_points"]
    comparisons = list(rd.verdicts.set_comparisons)
    facts["findings"] = [asdict(f) for f in res.findings]
    figs = {}
    line_axis = sets_axis(led, pids) if rd.axis == "server" else axis
    makers = [FS.fig_throughput, FS.fig_latency, FS.fig_ttft_breakdown, FS.fig_queue_vs_prefill,
              FS.fig_iteration, FS.fig_kv, FS.fig_mfu]
    for make in makers if line_axis else ():
        fig = make(led, pids, line_axis)
        if fig is not None:
            figs[fig.id] = fig
    if rd.axis == "input_len":
        for make in (FL.fig_kv_linearity, FL.fig_itl_vs_len):
            fig = make(led, pids)
            if fig is not None:
                figs[fig.id] = fig
    windows = [(p.pid, p.window.t_measure, p.window.t_end) for p in rd.points]
    for fig in (FT.fig_timeline(bundle.metrics, windows), FT.fig_power(rd.gpu_samples, windows),
                FT.fig_tflops_timeline(bundle.metrics, windows, led), FA.fig_roofline(led, pids, facts["point_labels"]),
                FS.fig_repro(led, pids, axis), FS.fig_slo(led, valid, axis),
                FA.fig_occupancy(led, pids, prev_led if facts.get("comparable") else None, prev_pids)):
        if fig is not None:
            figs[fig.id] = fig
    from report.judge.sets import SIGNALS
    if any(c.question == "step_budget" for c in comparisons):
        fig = FA.fig_budget_curve(led, [p.pid for p in rd.points if p.pid in valid])
        if fig is not None:
            figs[fig.id] = fig
    for question in dict.fromkeys(c.question for c in comparisons):
        # A step budget's ITL tail beside the one the step model predicts for each set.
        modelled = ("itl_tail_ms_model",) if question == "step_budget" else ()
        fig = FA.fig_sets(led, question, [(c.base, c.point) for c in comparisons if c.question == question],
                          tuple(q for q, _, _ in SIGNALS[question]) + modelled, facts["point_labels"],
                          line_axis if rd.axis == "server" else None)
        if fig is not None:
            figs[fig.id] = fig
    for fig in [*FL.fig_session_turns(led, pids, facts["point_labels"]),
                FL.fig_lengths({p.pid: p.measured for p in rd.points if p.pid in pids}, facts["point_labels"])]:
        if fig is not None:
            figs[fig.id] = fig
    captions(led, figs, pids, facts["first_point"], facts["headline_point"], facts["point_labels"], comparisons)
    facts["figures"] = sorted(figs)
    notices = []
    if pids and not valid:
        # The cards and the "at C=…" sentences then speak of a point that failed its checks.
        notices.append(in_langs("label.notice_no_valid_point", point=facts["point_labels"].get(pids[-1], pids[-1])))
    if facts["status"] != "complete":
        notices.append(in_langs("label.notice_incomplete", status=facts["status"],
                                reason=facts["status_reason"] or ""))
    if facts["interrupted_points"]:
        notices.append(interrupted_notice(facts["interrupted_points"]))
    if facts["failed_points"]:
        notices.append({lang: word("label.notice_failed", lang, points=listed(facts["failed_points"], lang))
                        for lang in LANGS})
    model = bundle.manifest.get("model") or {}
    vocab, model_vocab = model.get("tokenizer_vocab_size"), ((model.get("config") or {}).get("vocab_size"))
    if isinstance(vocab, int) and isinstance(model_vocab, int) and vocab < model_vocab:
        notices.append(in_langs("label.notice_vocab", vocab=vocab, model_vocab=model_vocab))
    if facts["origin"] != "recorded":
        notices.append(in_langs("label.notice_fixture"))
    facts["lengths_vary"] = bool(rd.lengths_vary)
    if rd.lengths_vary:
        # Each request had lengths of its own: the sections that model the architecture read
        # them (round.read.modelled_lengths), and the percentiles mix them; said here.
        work = (bundle.manifest.get("plan") or {}).get("workload") or {}
        source = work.get("kind") if work.get("kind") in OWN_LENGTH_KINDS else "drawn"
        lead, rest = in_langs(f"label.notice_lengths_{source}"), in_langs("label.notice_length_dist")
        notices.append({lang: lead[lang] + word("label.sentence_sep", lang) + rest[lang] for lang in LANGS})
    title = round_title(bundle.manifest, rd.axis, round_id, [c.question for c in comparisons])
    subtitle = plan_subtitle(bundle.manifest)
    facts["plan_title_written"] = plan_title_written(bundle.manifest, subtitle)
    facts["headline"] = headline(facts["findings"])
    facts["capacity_card"] = all(k in led and led[k].present
                                 for k in ("r.slo_capacity", "r.slo_capacity_low", "r.slo_capacity_high"))
    facts["not_measured"] = not_measured(led, facts, axis)
    left_out = {NOT_MEASURED_SECTION[code] for code in facts["not_measured"]}
    sections = ["summary", "diagnosis"] + (["sets"] if comparisons else []) + ["slo", "client", "decomposition", "kv", "mfu", "timeline", "power"] \
        + (["parallel"] if runs_in_parallel(led, facts["headline_point"]) else []) \
        + (["peers"] if rd.peers else []) + ["compare", "results", "next"]
    # A section with nothing to report is one line of "not measured here"; the reading notes
    # and the method close the page, once.
    sections = [s for s in sections if s not in left_out] + (["notmeasured"] if left_out else []) \
        + ["reading", "method"]
    if not pids:
        # No point was measured to the end: the notices say why; only what was recorded applies.
        facts["not_measured"] = []
        sections = (["results"] if facts["interrupted_points"] else []) + ["method"]
    tables = round_tables(led, facts, pids, comparisons)
    facts["node_table"] = bool(tables["node_table"].rows)
    # The facts are a builder dict until here; the report holds them typed and frozen.
    return RoundReport(round_id=round_id, title=title, subtitle=subtitle, ledger=led, sections=sections, figures=figs,
                       tables=tables, facts=RoundFacts(**facts), notices=notices,
                       bundles=[str(bundle_path)])


def headline(findings: list[dict]) -> dict[str, list[str]]:
    """Page 1's first sentence and the rest of the thesis (the finding "thesis": what limits the
    server, from which load, then the prediction that confirms it), per language; {} without one.
    A sentence ends at the catalogue's separator of a finding's sentences, which no [[key]] holds."""
    thesis = next((f for f in findings if f["id"] == "thesis"), None)
    if thesis is None:
        return {}
    out = {}
    for lang in LANGS:
        text, sep = thesis["texts"][lang], word("finding.sentence_sep", lang)
        i = text.find(sep)
        out[lang] = [text[:i + len(sep.rstrip())], text[i + len(sep):]] if 0 <= i < len(text) - len(sep) else [text, ""]
    return out


# The server flag a round of sets may sweep, as the point quantity that holds its value there.
SET_AXES = ("step_token_budget",)


def sets_axis(led: Ledger, pids: list[str]) -> str | None:
    """The axis the sweep's line figures draw a round of server sets on: the value of the flag
    the sets sweep, each set at its own (SET_AXES); None where no flag gives every set a value of
    its own, since the sets' one load would lay their marks over each other (fig_sets draws them)."""
    for key in SET_AXES:
        xs = [led.value_of(f"p.{pid}.{key}") if f"p.{pid}.{key}" in led else None for pid in pids]
        if len(pids) > 1 and None not in xs and len(set(xs)) == len(xs):
            return key
    return None


# The section each line of "not measured here" stands in for (templates/notmeasured.md.j2).
NOT_MEASURED_SECTION = {"slo": "slo", "compare_first": "compare", "compare_differs": "compare",
                        "kv_small": "kv", "kv_unsampled": "kv"}


def not_measured(led: Ledger, facts: dict, axis: str) -> list[str]:
    """What the round cannot answer, as the codes of "not measured here": no SLO given; no
    previous round, or one that does not compare; a KV account at a sliver of the pool or
    not sampled (a length sweep keeps its section: its linearity is the answer). Below
    KV_ACCOUNT_MIN_SHARE of the pool (report/derive/validity.py) the requests' blocks are too few
    for the account of PagedAttention to test anything: the KV section is one line instead."""
    out = []
    if not led["r.slo_percentile"].present:
        out.append("slo")
    if not facts.get("has_prev"):
        out.append("compare_first")
    elif not facts.get("comparable"):
        out.append("compare_differs")
    head = facts.get("headline_point")
    if head is not None and axis != "input_len":
        usage, peak = led.get(f"p.{head}.kv_usage_p50"), led.get(f"p.{head}.kv_usage_peak")
        if usage is not None and not usage.present:
            out.append("kv_unsampled")
        elif peak is not None and peak.present and peak.value < V.KV_ACCOUNT_MIN_SHARE:
            out.append("kv_small")
    return out


def interrupted_notice(pids: list[str]) -> dict[str, str]:
    """The notice for points cut short by an interruption, in each language."""
    return {lang: word("label.notice_interrupted", lang, points=listed(pids, lang)) for lang in LANGS}


def round_title(manifest: dict, axis: str, round_id: str, questions: list[str] = ()) -> dict[str, str]:
    """The round's title in each language: the round in words, then what it measured (the
    workload where it is a trace, a dataset, sessions or shared prefixes; the sweep axis; the
    sets' questions)."""
    work = ((manifest.get("plan") or {}).get("workload") or {}).get("kind")
    named = [q for q in dict.fromkeys(questions) if has(f"label.title_sets_{q}", "en")]
    out = {}
    for lang in LANGS:
        name = round_name(round_id, lang)
        if work in TITLED_WORKLOADS:
            sweep = (listed([word(f"label.title_sets_{q}", lang) for q in named], lang)
                     if axis == "server" and named else word(f"label.title_sweep_{axis}", lang))
            kind = word(f"label.title_workload_{work}", lang, sweep=sweep)
        else:
            kind = word(f"label.axis_{axis}", lang)
        out[lang] = word("label.round_title", lang, round=name, kind=kind)
    return out


# The title `serving-ledger next` writes into a plan (label.plan_title in English): the round it
# continues and the step's id (`rerun_<point>` for a step of one point).
def _next_title() -> re.Pattern:
    """label.plan_title's English form as a pattern: (round number, or the id's), step id."""
    rnd = re.escape(word("label.round_name", "en", n="NUMX")).replace("NUMX", r"(?P<n>\d+)")
    form = re.escape(word("label.plan_title", "en", round="ROUNDX", step="STEPX"))
    return re.compile(form.replace("ROUNDX", rf"(?:{rnd}|round-(?P<id>\d+))").replace("STEPX", r"(?P<step>\S+)"))


NEXT_TITLE = _next_title()


def _next_said(title: str) -> dict[str, str]:
    """An English title `serving-ledger next` wrote, said in each language (the round and the
    step by name); {} for any other title."""
    m = NEXT_TITLE.fullmatch(title)
    if not m or step_name(m["step"], "en") is None:
        return {}
    rid = f"round-{m['n'] or m['id']}"
    return {lang: word("label.plan_subtitle_next", lang, round=round_name(rid, lang),
                       step=step_name(m["step"], lang)) for lang in LANGS}


def plan_subtitle(manifest: dict) -> dict[str, str]:
    """The page's subtitle in each language: the plan's own title in that language, quoted (a
    plain string is the English title; an English title `next` wrote is said in every
    language); no language has another's title as its subtitle."""
    titles = plan_titles((manifest.get("plan") or {}).get("title"))
    said = _next_said(titles.get("en", ""))
    return {lang: word("label.plan_subtitle", lang, title=titles[lang])
            if lang in titles and not (lang == "en" and said) else said[lang]
            for lang in LANGS if lang in titles or said}


def plan_title_written(manifest: dict, subtitle: dict[str, str]) -> dict[str, str]:
    """The plan's own title as written (its English, else its first), for each language whose
    page has no SUBTITLE: "How to read this" quotes it once, labelled as the plan's title."""
    titles = plan_titles((manifest.get("plan") or {}).get("title"))
    written = titles.get("en") or next(iter(titles.values()), "")
    return {lang: written for lang in LANGS if written and lang not in subtitle}
