"""A next step's plan as a plan file: the round's own plan with the step's changes, in TOML.

The plan a round ran travels in its manifest (`plan`); a step (report/judge/next_steps.py)
names the keys it changes, sized from the ledger. The file starts with a comment saying what
the step tests and the outcome expected, then the whole plan, so `make run ROUND=M` runs it
as written. Invariant: the text parses back (tomllib) to exactly the plan it was made from.
"""

from __future__ import annotations

import copy
import json
import math
import textwrap
from typing import Any

from report.ledger import Ledger
from report.publish.numbers import plain_text
from report.words import LANGS, closed, has, round_name, word

# The plan's tables in the order a plan file lists them (bench/plan/spec.py's sections, then [slo] and [cost]).
SECTIONS = ("engine", "workload", "sweep", "sampler", "client", "slo", "cost")
TOP = ("id", "title", "seed")
# A step's comment lines in a plan file wrap at this many characters.
COMMENT_WIDTH = 96


# Keys whose change adds to the recorded list instead of replacing it (a flag the engine gains).
ADDITIVE = {("engine", "flags")}
# The [workload] keys only a replay kind reads (bench/replay.py): a step that changes the kind
# leaves them behind with the kind, or the collector's check refuses the plan.
REPLAY_KEYS = ("trace", "format", "time_scale", "max_requests", "max_duration_s", "dataset",
               "num_prompts")


def step_name(step: str, lang: str) -> str | None:
    """A next step's name in LANG, from its id (`rerun_<point>` is the step `rerun`); None
    where the catalogue names no such step."""
    code = next((c for c in (step, step.split("_")[0]) if has(f"label.step_name_{c}", "en")), None)
    return word(f"label.step_name_{code}", lang) if code else None


def next_plan_title(source_round: str, step: str) -> dict[str, str]:
    """The title of the plan that runs STEP of SOURCE_ROUND, in each language (label.plan_title):
    the English names the step by its id, as the pages read it back; the others by its name."""
    # A title is plain text in a plan file: its Chinese runs closed up as the pages print them.
    return {lang: closed(word("label.plan_title", lang, round=round_name(source_round, lang),
                              step=step if lang == "en" else step_name(step, lang) or step)) for lang in LANGS}


def applied(recorded: dict, changes: dict, round_id: str, title: str | dict[str, str]) -> dict:
    """The recorded plan with CHANGES (section -> key -> value) set, as round ROUND_ID; a change
    of the workload's kind drops the keys of the replay kind it leaves."""
    plan = {k: copy.deepcopy(v) for k, v in recorded.items() if k in TOP or k in SECTIONS}
    kind = (changes.get("workload") or {}).get("kind")
    if kind is not None and kind != (plan.get("workload") or {}).get("kind"):
        plan["workload"] = {k: v for k, v in (plan.get("workload") or {}).items() if k not in REPLAY_KEYS}
    for section, keys in changes.items():
        table = plan.setdefault(section, {})
        for key, value in copy.deepcopy(keys).items():
            if (section, key) in ADDITIVE:
                value = list(table.get(key) or []) + [x for x in value if x not in (table.get(key) or [])]
            table[key] = value
    plan["id"], plan["title"] = round_id, title
    for table in ("slo", "cost"):
        if not plan.get(table):
            plan.pop(table, None)
    return plan


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"a plan holds no {v!r}")
        return repr(v)
    if isinstance(v, str):
        # A TOML basic string: JSON escapes the controls below U+0020; TOML refuses DEL too.
        return json.dumps(v, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_value(str(k))} = {_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"a plan value of type {type(v).__name__}")


def plan_toml(plan: dict, comment: list[str]) -> str:
    """PLAN as a TOML plan file under COMMENT's lines (each written as `# line`)."""
    out = [f"# {line}".rstrip() for line in comment]
    out += [f"{k} = {_value(plan[k])}" for k in TOP if plan.get(k) is not None]
    for section in SECTIONS:
        table = plan.get(section)
        if table:
            out += ["", f"[{section}]"]
            out += [f"{k} = {_value(v)}" for k, v in table.items() if v is not None]
    return "\n".join(out) + "\n"


def step_comment(step: dict, source_round: str, led: Ledger, lang: str = "en") -> list[str]:
    """What a step's plan tests and what outcome would confirm it, in LANG, as comment lines."""
    words = [word("label.plan_comment_step", lang, round=round_name(source_round, lang), step=step["id"]),
             word("label.plan_comment_tests", lang, text=plain_text(step[lang], led, lang)),
             word("label.plan_comment_expect", lang, text=plain_text(step["expect"][lang], led, lang))]
    return [line for w in words for line in textwrap.wrap(closed(w), COMMENT_WIDTH) or [""]]
