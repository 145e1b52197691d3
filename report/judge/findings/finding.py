"""A finding: a mechanism stated with its evidence, its sentence the catalogue's in every language, made only when every key it cites is present.

A finding's sentence is the catalogue's (`report/data/words/finding.<lang>.toml`); it holds
its numbers as `[[ledger.key]]` or `[[ledger.key|pct]]`, which the page prints through the
ledger (traced) and the JSON through the same formatter. A finding is
made only from valid points, and only when every key it cites is present.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from report.ledger import Ledger
from report.registry import REGISTRY
from report.words import LANGS, PLACEHOLDER, word


@dataclass
class Finding:
    """One conclusion: its kind, its sentence in each language, the ledger keys it rests on."""

    id: str
    kind: str
    texts: dict[str, str]       # language -> sentence, from the catalogue's `finding.*` texts
    evidence: list[str] = field(default_factory=list)
    shown: list[str] = field(default_factory=list)   # points whose numbers a table beside it prints

    def keys(self) -> list[str]:
        """The ledger keys its sentences print."""
        return list(dict.fromkeys(m.group(1) for t in self.texts.values()
                                  for m in PLACEHOLDER.finditer(t)))


def catalogue_texts(code: str, **fill: Any) -> dict[str, str]:
    """The catalogue's `finding.CODE` in every language, its fields filled (a dict value is
    per language)."""
    return {lang: word(f"finding.{code}", lang,
                       **{k: v[lang] if isinstance(v, dict) else v for k, v in fill.items()})
            for lang in LANGS}


def point_label(labels: dict[str, str] | None, pid: str) -> str:
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


def make_finding(led: Ledger, fid: str, kind: str, texts: dict[str, str],
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


def joined_texts(parts: list[dict[str, str]], sep: str) -> dict[str, str]:
    """Per-language texts joined by the catalogue's separator `finding.SEP`."""
    return {lang: word(f"finding.{sep}", lang).join(x[lang] for x in parts) for lang in LANGS}
