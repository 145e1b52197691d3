"""Machine-readable dumps of one bundle: every ledger value, and the verdicts with their evidence."""

from __future__ import annotations

import math
from typing import Any

from report.ledger import Ledger
from report.publish.numbers import missing_reason
from report.words import LANGS


def _plain(x: Any) -> Any:
    """A JSON-safe value: numpy scalars as Python numbers, non-finite floats as None."""
    if hasattr(x, "item") and not isinstance(x, (list, dict, str)):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, tuple):     # one entry per index (a sessions workload's turns)
        return [_plain(v) for v in x]
    return x if isinstance(x, (int, float, str, bool)) or x is None else str(x)


def ledger_json(led: Ledger) -> dict:
    """{"values": {key: {"value", "unit", "missing"}}}: every value, absent ones with their reason."""
    return {"values": {k: {"value": _plain(v.value), "unit": v.unit,
                           "missing": None if v.present else missing_reason(v).text("en")}
                       for k, v in led.values.items()}}


def findings_json(res) -> dict:
    """Each point's validity and bottleneck with evidence, and the round's findings and next
    steps as plain text: those of the judged round (report.judge.result.RoundResult) the pages show."""
    from report.publish.numbers import plain_text
    rd, led = res.rd, res.led
    validity, attribution = rd.verdicts.validity, rd.verdicts.attribution
    points = []
    for p in rd.points:
        v, a = validity[p.pid], attribution[p.pid]
        points.append({"point": p.pid, "valid": v.valid, "invalid_reasons": v.reasons,
                       "unchecked": v.unchecked, "bottleneck": a.bottleneck,
                       "mechanism": a.mechanism, "counters": a.counters, "confidence": a.confidence,
                       "knob": a.knob, "also": list(a.also),
                       "disagreed": list(dict.fromkeys(v.disagreed + a.disagreed)),
                       "evidence": {k: _plain(x) for k, x in {**v.evidence, **a.evidence}.items()}})
    return {"round": res.round_id,
            "previous_round": res.prev[0].round_id if res.prev else None,
            "points": points,
            "findings": [{"id": f.id, "kind": f.kind,
                          **{f"text_{lang}": plain_text(text, led, lang) for lang, text in f.texts.items()},
                          "evidence": f.evidence}
                         for f in res.findings],
            "next_steps": [{"id": st["id"], **{f"text_{lang}": plain_text(st[lang], led, lang) for lang in LANGS}}
                           for st in res.facts.get("next_steps") or []]}
