"""docs/architecture.md names every module the code has, once, where it is: the `bundle/` and
`bench/` paragraphs each of their package's modules and its sub-packages' (in backticks), the
report's stage diagram each module of each of its folders (report/, its stages and their sub-packages), and none
that is gone."""

from __future__ import annotations

import re
from collections import Counter

from tests.conftest import ROOT

DOC = ROOT / "docs" / "architecture.md"
NAME = re.compile(r"[a-z_][a-z0-9_]*")
BACKTICKED = re.compile(r"`([a-z_][a-z0-9_]*)`")
# A folder's row in the diagram: `stage/` at the start, or `|  sub/` below its stage.
FOLDER_ROW = re.compile(r"^\s*(\|\s*)?([a-z_]+)/\s+(.*)$")
MODULE_ROW = re.compile(r"^\s*report\.([a-z_]+)\s+")
CONTINUED = re.compile(r"^\s*\|?\s*(.*)$")


def modules_in(folder: str) -> list[str]:
    """The modules directly in FOLDER (a path from the checkout's root), by name."""
    return sorted(p.stem for p in (ROOT / folder).glob("*.py") if p.stem != "__init__")


def package_paragraph(text: str, package: str) -> str:
    """The bullet of docs/architecture.md that begins with `PACKAGE/`."""
    m = re.search(rf"^- `{package}/`(.*?)(?=^- |^\n)", text, re.S | re.M)
    assert m, f"docs/architecture.md has no bullet for {package}/"
    return m.group(1)


def diagram(text: str) -> dict[str, list[str]]:
    """The report's stage diagram as folder (report/derive, report/publish/render) -> the names
    its rows give, in order, without what they say in parentheses."""
    block = re.search(r"## Inside report/.*?```\n(.*?)```", text, re.S).group(1)
    rows: dict[str, list[str]] = {}
    stage, current = "", ""
    for line in block.splitlines():
        m = MODULE_ROW.match(line)
        if m:
            rows.setdefault("report", []).append(m.group(1))
            current = ""       # the rest of the line says what the module does
            continue
        m = FOLDER_ROW.match(line)
        if m:
            sub, name, rest = m.groups()
            if sub:
                current = f"{stage}/{name}"
            else:
                stage = current = "report" if name == "report" else f"report/{name}"
            rows.setdefault(current, []).append(rest)
        elif current:
            rows[current].append(CONTINUED.match(line).group(1))
    names = {}
    for folder, parts in rows.items():
        said = re.sub(r"\([^)]*\)", "", " ".join(p for p in parts if p))
        names[folder] = [n for n in re.split(r"[,\s]+", said) if n]
    return names


def test_the_bundle_and_bench_paragraphs_name_each_module_once():
    text = DOC.read_text(encoding="utf-8")
    for package in ("bundle", "bench"):
        named = BACKTICKED.findall(package_paragraph(text, package))
        # the package's modules and its sub-packages' (bench/samplers/)
        subs = [str(p.parent.relative_to(ROOT)) for p in (ROOT / package).rglob("__init__.py")]
        have = sorted(m for folder in subs for m in modules_in(folder))
        assert sorted(set(named) - set(have)) == [], f"{package}/: named, but no module"
        assert sorted(set(have) - set(named)) == [], f"{package}/: modules the paragraph does not name"
        twice = [n for n, k in Counter(named).items() if k > 1]
        assert twice == [], f"{package}/: named more than once"


def test_the_report_diagram_names_each_module_of_each_folder_once():
    names = diagram(DOC.read_text(encoding="utf-8"))
    folders = sorted(str(p.parent.relative_to(ROOT)) for p in (ROOT / "report").rglob("__init__.py"))
    assert sorted(names) == folders, "the diagram's folders are not the report's packages"
    for folder, named in names.items():
        assert all(NAME.fullmatch(n) for n in named), (folder, named)
        assert sorted(set(named) - set(modules_in(folder))) == [], f"{folder}: named, but no module"
        assert sorted(set(modules_in(folder)) - set(named)) == [], f"{folder}: modules the diagram does not name"
        assert [n for n, k in Counter(named).items() if k > 1] == [], f"{folder}: named more than once"


def test_a_stale_or_missing_name_is_found():
    # HAND-BUILT document: a gone module named, a module left out, one named twice
    text = ("## Inside report/\n\n```\n   report.cli      the verbs (build)\n"
            "   derive/         stats, gone (a module\n       |           that left), stats\n"
            "       |  sub/     one\n   report/         ledger\n```\n")
    names = diagram(text)
    assert names == {"report": ["cli", "ledger"], "report/derive": ["stats", "gone", "stats"],
                     "report/derive/sub": ["one"]}
