"""A round whose server sets differ by flags, read as a comparison: each set against the base set
(the one without flags, else set 0) at the same load and length, and whether what its flags
were expected to change did change, on two signals.

A set's question is named by the flag it adds (QUESTIONS); each question's expectation is two
signals that must move the stated way against the base point (SIGNALS): both as expected
"held", both against it "not held", neither moving "unchanged" (the flag does not bind at
that load), otherwise "mixed" (the finding names the one that disagreed). Each signal is a ledger value `p.<point>.<quantity>_vs_base` (a ratio to the base
point's, or for a share a difference), so its provenance is the ledger's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Mapping

from bundle.server_flags import server_flag
from report.derive import arith as A
from report.derive import validity as V
from report.derive.round.read import valid_points
from report.ledger import Ledger
from report.phases import resolve_selected
from report.registry import DOES_NOT_APPLY, RawSources, bound_quantity

# The flag a set adds -> the question it asks (the first that matches names it).
QUESTIONS = (
    ("--max-num-batched-tokens", "step_budget"),
    ("--kv-cache-memory", "pool"), ("--kv-cache-memory-bytes", "pool"),
    ("--num-gpu-blocks-override", "pool"), ("--gpu-memory-utilization", "pool"),
    ("--enable-prefix-caching", "prefix_caching"), ("--no-enable-prefix-caching", "prefix_caching"),
    ("--max-num-seqs", "seqs_cap"),
    ("--enforce-eager", "eager"),
    ("--api-server-count", "api_servers"),
)
# Each question's signals: (point quantity, how it is compared with the base point, the way it
# must move where the flag raises what it sets (+1 up, -1 down); for a flag that lowers it, the
# way is reversed: a smaller pool or budget than the base's).
SIGNALS: dict[str, tuple[tuple[str, str, int], ...]] = {
    "step_budget": (("ttft_ms_p99", "ratio", -1), ("itl_ms_p99", "ratio", +1)),
    "pool": (("server_running_median", "ratio", +1), ("waiting_peak", "difference", -1)),
    "prefix_caching": (("prefix_cache_hits", "difference", +1), ("prefill_ms_mean", "ratio", -1)),
    "seqs_cap": (("server_running_median", "ratio", -1), ("waiting_peak", "difference", +1)),
    "eager": (("itl_ms_p50", "ratio", +1), ("engine_steps_per_s", "ratio", -1)),
    "api_servers": (("delivery_tpot_ratio", "ratio", -1), ("output_tok_s", "ratio", +1)),
}
# Each signal's ledger value `p.<point>.<quantity>_vs_base`, declared once (a quantity has one way
# of comparison in every question that reads it): the point's quantity against the base point's,
# the raw input `base_<quantity>` that set_comparisons gives (DOES_NOT_APPLY: another question's signal).
COMPARED = {"ratio": (A.ratio, "×", "numerator", "denominator"), "difference": (A.difference, "", "a", "b")}
SIGNAL_HOW = {q: how for signals in SIGNALS.values() for q, how, _ in signals}
for _qty, _how in SIGNAL_HOW.items():
    _func, _unit, _mine, _base = COMPARED[_how]
    bound_quantity("point", f"{_qty}_vs_base", _func, unit=_unit, **{_mine: _qty, _base: f"base_{_qty}"})

# What else each question's table shows beside its signals (the measurements a reviewer checks).
SHOWN: dict[str, tuple[str, ...]] = {
    # The step model's ITL tail beside the measured one: the fullest prefill step the budget allows.
    "step_budget": ("itl_ms_p90", "iteration_tokens_mean", "step_token_budget", "itl_tail_ms_model"),
    "pool": ("preemptions", "kv_usage_p50"),
    # KV usage against the blocks C unshared requests would hold: shared prefixes hold fewer.
    "prefix_caching": ("prefix_cache_hit_rate", "kv_usage_p50", "kv_expected_median"),
    "seqs_cap": ("engine_held_fraction", "ttft_ms_p99"),
    "eager": ("tpot_ms_mean", "output_tok_s"),
    "api_servers": ("client_tpot_ms_mean", "engine_tpot_ms_mean"),
}


@dataclass
class SetComparison:
    """One point of a non-base set against the base set's point at the same load and length."""

    point: str
    base: str
    question: str
    flag: str
    direction: int                       # +1: the flag raises what it sets against the base; -1 lowers it
    flags: tuple[str, ...] = ()          # the set's server flags
    moved: dict[str, int] = field(default_factory=dict)    # signal -> +1 / -1 / 0 (as measured)

    @property
    def verdict(self) -> str:
        """held (both signals moved as expected), not_held (both against), unchanged (neither
        moved: at this load the flag does not bind), mixed (the rest)."""
        want = {q: way * self.direction for q, _, way in SIGNALS[self.question]}
        if all(self.moved.get(q) == w for q, w in want.items()):
            return "held"
        if all(self.moved.get(q) == -w for q, w in want.items()):
            return "not_held"
        if all(self.moved.get(q) == 0 for q in want):
            return "unchanged"
        return "mixed"

    def disagreed(self) -> list[str]:
        """The signals that did not move the expected way."""
        return [q for q, _, way in SIGNALS[self.question] if self.moved.get(q) != way * self.direction]


def base_set(points) -> int:
    """The set the others are compared with: the one without server flags, else set 0."""
    for p in points:
        if not p.settings.get("server_flags"):
            return p.settings.get("server_set") or 0
    return 0


def question_of(flags: list[str], base_flags: list[str]) -> tuple[str, str] | None:
    """(question, flag) of a set from the flag it adds to the base's or gives another value than
    the base's (a sweep of one flag's values), None when no question names it."""
    added = [f for f in flags if f.startswith("--") and
             (f not in base_flags or server_flag(f, flags) != server_flag(f, base_flags))]
    for flag, question in QUESTIONS:
        if flag in added:
            return question, flag
    if "--no-enable-prefix-caching" in base_flags and "--no-enable-prefix-caching" not in flags:
        return "prefix_caching", "--enable-prefix-caching"
    return None


def direction_of(question: str, flag: str, flags: list[str], base_flags: list[str],
                 led: Ledger, pid: str, base: str) -> int:
    """+1 where the set's flag raises what it sets against the base, -1 where it lowers it."""
    if question == "pool":
        mine, theirs = led.value_of(f"p.{pid}.pool_tokens_set"), led.value_of(f"p.{base}.pool_tokens_set")
        return -1 if mine is not None and theirs is not None and mine < theirs else 1
    if question == "prefix_caching":
        return -1 if flag == "--no-enable-prefix-caching" else 1
    if question == "step_budget":
        # Each set's own budget (its flag, else what its server states), never server 0's.
        mine, theirs = led.value_of(f"p.{pid}.step_token_budget"), led.value_of(f"p.{base}.step_token_budget")
        return -1 if mine is not None and theirs is not None and mine < theirs else 1
    return 1


def _moved(value: float | None, how: str) -> int | None:
    if value is None:
        return None
    if how == "ratio":
        return 0 if abs(value - 1) <= V.UNCHANGED else (1 if value > 1 else -1)
    return 0 if abs(value) <= V.UNCHANGED else (1 if value > 0 else -1)


def base_raw(led: Ledger, question: str, base: str) -> RawSources:
    """The base point's value of each signal of QUESTION (`base_<quantity>`; None where the ledger has
    no such key), DOES_NOT_APPLY for every other question's signals."""
    raw = RawSources()
    mine = {q for q, _, _ in SIGNALS[question]}
    for qty in SIGNAL_HOW:
        raw.add(f"base_{qty}", led.get(f"p.{base}.{qty}") if qty in mine else DOES_NOT_APPLY)
    return raw


def set_comparisons(led: Ledger, rd, validity: Mapping) -> list[SetComparison]:
    """Each valid point (by VALIDITY) of a non-base set against the base set's valid point at
    its load and length, with the signals of its question derived into the ledger."""
    if rd.axis != "server":
        return []
    ok = valid_points(rd, validity)
    b = base_set(ok)
    base_points = {(p.settings.get("concurrency"), p.settings.get("request_rate"), p.settings.get("input_len")): p
                   for p in ok if (p.settings.get("server_set") or 0) == b}
    base_flags = next((p.settings.get("server_flags") or [] for p in base_points.values()), [])
    out = []

    def inputs(phase, group) -> Iterator[tuple[str, RawSources]]:
        """Each compared point and its base point's signals; its comparison read once they are resolved."""
        for p in ok:
            if (p.settings.get("server_set") or 0) == b:
                continue
            bp = base_points.get((p.settings.get("concurrency"), p.settings.get("request_rate"),
                                  p.settings.get("input_len")))
            q = question_of(p.settings.get("server_flags") or [], base_flags)
            if bp is None or q is None:
                continue
            question, flag = q
            c = SetComparison(p.pid, bp.pid, question, flag,
                              direction_of(question, flag, p.settings.get("server_flags") or [], base_flags,
                                           led, p.pid, bp.pid), tuple(p.settings.get("server_flags") or ()))
            yield p.pid, base_raw(led, question, bp.pid)
            for qty, how, _ in SIGNALS[question]:
                c.moved[qty] = _moved(led.value_of(f"p.{p.pid}.{qty}_vs_base"), how)
            out.append(c)

    resolve_selected(led, "server_sets", inputs)
    return out
