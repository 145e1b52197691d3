"""The code cites only documents the checkout holds: every `name.md` a source file of ours
names (docs/bundle.md, docs/analyses.md, ...) is a file of this repository."""

from __future__ import annotations

import re

from tests.conftest import ROOT

CITED = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.md)\b(?!\.j2)")


def cited_documents() -> dict[str, list[str]]:
    """Each document name cited in our sources -> where."""
    out: dict[str, list[str]] = {}
    for pkg in ("bundle", "bench", "report", "serving_ledger", "tools", "templates"):
        for path in sorted((ROOT / pkg).rglob("*")):
            if path.suffix not in (".py", ".j2", ".toml", ".c") or "__pycache__" in path.parts:
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                for m in CITED.finditer(line):
                    out.setdefault(m.group(1), []).append(f"{path.relative_to(ROOT)}:{n}")
    return out


def test_every_document_the_code_cites_is_in_the_repository():
    cited = cited_documents()
    assert "docs/analyses.md" in cited and "docs/bundle.md" in cited
    missing = {doc: where for doc, where in cited.items()
               if not any((ROOT / base / doc).is_file() for base in ("", "docs", "tests/fixtures"))}
    assert not missing, missing
