"""Every path CONTRIBUTING.md names is there: a file, or the folder of a `<name>` pattern."""

from __future__ import annotations

import re

from tests.conftest import ROOT

# A path of the checkout: a top-level folder, then names ("report/derive/validity.py",
# "templates/<section>.md.j2", "report/data/words/prose.{en,zh}.toml", "bench/samplers/").
TOP = "|".join(sorted(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")))
PATH = re.compile(rf"(?<![\w./-])((?:{TOP})/[\w.<>{{}},/-]*)")
BRACES = re.compile(r"\{([^{}]*,[^{}]*)\}")


def expand(path: str) -> list[str]:
    """PATH with each `{a,b}` spelled out: one path per choice."""
    m = BRACES.search(path)
    if not m:
        return [path]
    return [q for c in m.group(1).split(",") for q in expand(path[:m.start()] + c + path[m.end():])]


def named_paths() -> list[str]:
    """Every path CONTRIBUTING.md names, its trailing punctuation cut."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    return sorted({m.rstrip(".,") for m in PATH.findall(text)})


def test_contributing_names_paths_that_exist():
    paths = named_paths()
    assert len(paths) > 20 and "bench/samplers/base.py" in paths
    missing = []
    for path in paths:
        for one in expand(path):
            # A pattern (templates/<section>.md.j2) names its folder.
            there = ROOT / (one[:one.index("<")].rpartition("/")[0] if "<" in one else one)
            if not there.exists():
                missing.append(one)
    assert missing == []
