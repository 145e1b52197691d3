"""Each figure's caption: the finding the figure shows, its sentence picked by a predicate over
ledger values and its numbers cited as [[key]] (the page prints them traced, through `say`).

A caption whose predicate cannot be decided (a value absent) or whose sentence cites an absent
value is not given: the figure then carries none, rather than one that says nothing.
"""

from __future__ import annotations

from typing import Any

from report.derive import validity as V
from report.ledger import Ledger
from report.publish.document import Figure
from report.words import LANGS, PLACEHOLDER, in_lang, listed, word

# The parts of a mean TTFT the breakdown stacks, in the order a tie names them.
TTFT_PARTS = ("queue", "prefill", "frontend")


def _v(led: Ledger, key: str) -> Any:
    """KEY's value where the ledger holds it present, else None."""
    return led[key].value if key in led and led[key].present else None


def sentence(led: Ledger, code: str, **fill: Any) -> dict[str, str] | None:
    """`finding.figcap_CODE` in every language, its fields filled; None where a value it cites is absent."""
    texts = {lang: word(f"finding.figcap_{code}", lang, **fill) for lang in LANGS}
    keys = {m.group(1) for t in texts.values() for m in PLACEHOLDER.finditer(t)}
    return texts if all(_v(led, k) is not None for k in keys) else None


def joined(*parts: dict[str, str] | None) -> dict[str, str] | None:
    """The sentences one after another (the first must be there; a later one absent is left out)."""
    if not parts or parts[0] is None:
        return None
    return {lang: "".join(p[lang] for p in parts if p is not None) for lang in LANGS}


def largest_ttft_part(led: Ledger, pid: str) -> str | None:
    """The largest of the point's mean queue, prefill and frontend times (None where one is absent)."""
    vals = {part: _v(led, f"p.{pid}.{part}_ms_mean") for part in TTFT_PARTS}
    if any(v is None for v in vals.values()):
        return None
    return max(TTFT_PARTS, key=lambda part: vals[part])


def cap_ttft_breakdown(led: Ledger, first: str, last: str, labels: dict) -> dict[str, str] | None:
    """The part that dominates the mean TTFT at the headline point, and at the first where it differs."""
    top = largest_ttft_part(led, last)
    if top is None:
        return None
    head = sentence(led, f"ttft_{top}", p=last, at=labels.get(last, last))
    low = largest_ttft_part(led, first)
    if first == last or low is None or low == top:
        return joined(head, sentence(led, "end"))
    return joined(head, sentence(led, f"ttft_first_{low}", p=first, at=labels.get(first, first)),
                  sentence(led, "end"))


def cap_queue_vs_prefill(led: Ledger, last: str, labels: dict) -> dict[str, str] | None:
    """Whether the mean request waits longer in the queue than in prefill at the headline point."""
    queue, prefill = _v(led, f"p.{last}.queue_ms_mean"), _v(led, f"p.{last}.prefill_ms_mean")
    if queue is None or prefill is None:
        return None
    return sentence(led, "qvp_below" if queue < prefill else "qvp_above", p=last, at=labels.get(last, last))


def cap_iteration(led: Ledger, last: str, labels: dict) -> dict[str, str] | None:
    """Whether decode or prefill tokens fill most of a step at the headline point, against the budget."""
    decode = _v(led, f"p.{last}.server_running_median")
    prefill = _v(led, f"p.{last}.prefill_tokens_per_iteration")
    if decode is None or prefill is None:
        return None
    at = labels.get(last, last)
    head = sentence(led, "iter_prefill" if prefill > decode else "iter_decode", p=last, at=at)
    return joined(head, sentence(led, "iter_budget"), sentence(led, "end"))


def cap_timeline(led: Ledger, pids: list[str], last: str, labels: dict) -> dict[str, str] | None:
    """The first point whose window had a queue (or that none had one), and the pool's peak there."""
    waits = [(pid, _v(led, f"p.{pid}.waiting_peak")) for pid in pids]
    if any(w is None for _, w in waits):
        return None
    queued = next((pid for pid, w in waits if w > 0), None)
    if queued is None:
        return sentence(led, "timeline_no_wait", p=last, at=labels.get(last, last))
    peak = _v(led, f"p.{queued}.kv_usage_peak")
    if peak is None:
        return None
    code = "timeline_wait" if peak < V.POOL_ROOM_SHARE else "timeline_wait_full"
    return sentence(led, code, p=queued, at=labels.get(queued, queued))


def cap_tflops(led: Ledger, last: str, labels: dict) -> dict[str, str] | None:
    """The headline point's FLOP rate against the dense peak, and against the peak at its clock
    where the clock ran slower than the datasheet's by more than the rule's share."""
    at = labels.get(last, last)
    head = sentence(led, "tflops", p=last, at=at)
    peak, capped, slower = (_v(led, "r.peak_tflops"), _v(led, f"p.{last}.peak_tflops_at_clock"),
                            _v(led, "r.rule_clock_slower"))
    clock = (sentence(led, "tflops_clock", p=last)
             if None not in (peak, capped, slower) and capped < peak * (1 - slower) else None)
    return joined(head, clock, sentence(led, "end"))


def cap_roofline(led: Ledger, last: str, labels: dict) -> dict[str, str] | None:
    """Which side of the ridge the headline point lies on: bandwidth's roof or compute's."""
    intensity, ridge = _v(led, f"p.{last}.intensity"), _v(led, "r.ridge")
    if intensity is None or ridge is None:
        return None
    return sentence(led, "roof_memory" if intensity < ridge else "roof_compute", p=last, at=labels.get(last, last))


def cap_kv_linearity(led: Ledger, last: str, labels: dict) -> dict[str, str] | None:
    """Whether the fitted KV slope is the concurrency within the prediction tolerance."""
    off, tol = _v(led, "r.kv_lin_slope_vs_theory"), _v(led, "r.rule_prediction_tol")
    if off is None or tol is None:
        return None
    return sentence(led, "kvlin_holds" if abs(off) <= tol else "kvlin_off", p=last, at=labels.get(last, last))


def cap_repro(led: Ledger, pids: list[str], labels: dict) -> dict[str, str] | None:
    """The shared point whose output throughput differs most from the previous round's, and whether
    every shared point lies within the reproducibility rule."""
    diffs = [(pid, _v(led, f"x.{pid}.output_tok_s_diff")) for pid in pids]
    diffs = [(pid, d) for pid, d in diffs if d is not None]
    tol = _v(led, "r.rule_repro_tput_tol")
    if not diffs or tol is None:
        return None
    pid, d = max(diffs, key=lambda pd_: abs(pd_[1]))
    return sentence(led, "repro_within" if abs(d) <= tol else "repro_over", p=pid, at=labels.get(pid, pid))


def cap_occupancy(led: Ledger, pids: list[str], labels: dict) -> dict[str, str] | None:
    """This round's valid point of the highest KV occupancy, and whether it also delivered the most
    output throughput (else the point that did)."""
    got = [(pid, _v(led, f"p.{pid}.kv_occupancy"), _v(led, f"p.{pid}.output_tok_s")) for pid in pids
           if _v(led, f"p.{pid}.valid") is not False]
    got = [(pid, x, y) for pid, x, y in got if x is not None and y is not None]
    if not got:
        return None
    top = max(got, key=lambda g: g[1])[0]
    best = max(got, key=lambda g: g[2])[0]
    if best == top:
        return sentence(led, "occ_top", p=top, at=labels.get(top, top))
    return sentence(led, "occ_past", p=top, at=labels.get(top, top), q=best, at_q=labels.get(best, best))


def cap_session_ttft(led: Ledger, last: str, labels: dict) -> dict[str, str] | None:
    """Whether TTFT p50 at the headline point rose or not from a session's first turn to its last."""
    first, final = (_v(led, f"p.{last}.session_first_turn_ttft_ms_p50"),
                    _v(led, f"p.{last}.session_last_turn_ttft_ms_p50"))
    if first is None or final is None:
        return None
    return sentence(led, "session_ttft_up" if final > first else "session_ttft_flat", p=last, at=labels.get(last, last))


def cap_session_hits(led: Ledger, last: str, labels: dict) -> dict[str, str] | None:
    """Whether the prefix cache served a session's history at the headline point (the ledger's verdict)."""
    serves = _v(led, f"p.{last}.session_cache_serves_history")
    if serves is None:
        return None
    return sentence(led, "session_hits_yes" if serves else "session_hits_no", p=last, at=labels.get(last, last))


def cap_lengths(led: Ledger, last: str, labels: dict) -> dict[str, str] | None:
    """Whether the headline point's requests brought longer prompts than outputs, on average."""
    prompt, output = _v(led, f"p.{last}.prompt_tokens_sent_mean"), _v(led, f"p.{last}.output_tokens_sent_mean")
    if prompt is None or output is None:
        return None
    return sentence(led, "lengths_prompt_longer" if prompt > output else "lengths_output_longer",
                    p=last, at=labels.get(last, last))


def cap_budget_curve(led: Ledger, pids: list[str]) -> dict[str, str] | None:
    """Whether ITL p99 fell from the largest step budget swept to the smallest, and what output
    throughput did beside it."""
    got = [(pid, _v(led, f"p.{pid}.step_token_budget")) for pid in pids]
    got = [(pid, b) for pid, b in got if b is not None]
    if len({b for _, b in got}) < 2:
        return None
    lo, hi = min(got, key=lambda g: g[1])[0], max(got, key=lambda g: g[1])[0]
    itl_lo, itl_hi = _v(led, f"p.{lo}.itl_ms_p99"), _v(led, f"p.{hi}.itl_ms_p99")
    if itl_lo is None or itl_hi is None:
        return None
    return sentence(led, "budget_itl_falls" if itl_lo < itl_hi else "budget_itl_holds", lo=lo, hi=hi)


def cap_sets(comparisons: list, labels: dict) -> dict[str, str]:
    """The sets of one question whose flags did what they were expected to, and those whose did not."""
    held = [c.point for c in comparisons if c.verdict == "held"]
    rest = [c.point for c in comparisons if c.verdict != "held"]

    def names(pids: list[str], lang: str) -> str:
        return listed([str(in_lang(labels.get(p, p), lang)) for p in pids], lang)
    code = "sets_some" if held and rest else "sets_all" if held else "sets_none"
    return {lang: word(f"finding.figcap_{code}", lang, held=names(held, lang), rest=names(rest, lang))
            for lang in LANGS}


def captions(led: Ledger, figs: dict[str, Figure], pids: list[str], first: str | None,
             last: str | None, labels: dict, comparisons: list) -> None:
    """Give each figure of FIGS whose finding a predicate decides its caption (in place)."""
    made: dict[str, dict[str, str] | None] = {}
    if last is not None:
        made["ttft_breakdown"] = cap_ttft_breakdown(led, first or last, last, labels)
        made["queue_vs_prefill"] = cap_queue_vs_prefill(led, last, labels)
        made["iteration"] = cap_iteration(led, last, labels)
        made["timeline"] = cap_timeline(led, pids, last, labels)
        made["tflops_timeline"] = cap_tflops(led, last, labels)
        made["roofline"] = cap_roofline(led, last, labels)
        made["kv_linearity"] = cap_kv_linearity(led, last, labels)
        made["session_ttft"] = cap_session_ttft(led, last, labels)
        made["session_hits"] = cap_session_hits(led, last, labels)
        made["lengths"] = cap_lengths(led, last, labels)
    made["repro"] = cap_repro(led, pids, labels)
    made["budget_curve"] = cap_budget_curve(led, pids)
    made["occupancy"] = cap_occupancy(led, pids, labels)
    for question in dict.fromkeys(c.question for c in comparisons):
        made[f"sets_{question}"] = cap_sets([c for c in comparisons if c.question == question], labels)
    for fid, texts in made.items():
        if fid in figs and texts is not None:
            figs[fid].caption = texts
