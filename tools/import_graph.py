"""The import graph of our own modules: one line per module with its first docstring line and
what of ours it imports, the layer each package sits in, and any cycle or layer breach.

    .venv/bin/python tools/import_graph.py          # exit 1 on a cycle or a breach

Layers (each imports only those below it): bundle (nothing of ours) < bench, report (bundle
only; never each other) < serving_ledger (the console script). Inside report, its stages:
the ledger's types, the phase table and the catalogue (report.ledger, report.registry,
report.phases, report.words) < architecture < derive < judge < publish, with the planner on
architecture alone, and the report's command line (report.cli) over all of them. Imports inside functions count. Module names are paths from
the checkout's root (report.ledger is report/ledger.py).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Our packages: the top-level folders, each imported by its own name.
PACKAGES = ("bundle", "bench", "report", "serving_ledger")
# The report's stages, each a sub-package, in import order (each imports only those before it).
STAGES = ("architecture", "derive", "judge", "publish")
# The modules every stage may import: the ledger's types and the catalogue of words.
REPORT_CORE = ("report.ledger", "report.phases", "report.registry", "report.words")
CORE, CLI = "report.core", "report.cli"
_REPORT_UNITS = [CORE] + [f"report.{s}" for s in STAGES]
# What each layer may import of ours.
ALLOWED = {"bundle": set(), "bench": {"bundle"},
           CORE: {"bundle"},
           **{u: {"bundle", *_REPORT_UNITS[:i]} for i, u in enumerate(_REPORT_UNITS) if i},
           "report.planner": {"bundle", CORE, "report.architecture"},
           CLI: {"bundle", *_REPORT_UNITS, "report.planner"},
           "serving_ledger": {"bench", "bundle", *_REPORT_UNITS, "report.planner", CLI}}


def modules() -> dict[str, Path]:
    """Every module of ours by dotted name (report.ledger -> report/ledger.py)."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            out[".".join(p for p in rel.parts if p != "__init__")] = path
    return out


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The modules of ours PATH imports, anywhere in the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for n in names:
            if n.split(".")[0] in PACKAGES:
                while n and n not in known:
                    n = n.rpartition(".")[0]
                if n:
                    found.add(n)
    return found


def package_of(module: str) -> str:
    return module.split(".")[0]


def layer_of(module: str) -> str:
    """The layer a module sits in: its package, or inside report its stage (report.derive)."""
    parts = module.split(".")
    if parts[0] != "report":
        return parts[0]
    if module in REPORT_CORE:
        return CORE
    if len(parts) > 1 and f"report.{parts[1]}" in ALLOWED:
        return f"report.{parts[1]}"
    return CLI


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: imports_of(p, set(mods)) - {m} for m, p in mods.items()}


def breaches(g: dict[str, set[str]]) -> list[str]:
    """Imports that cross layers the wrong way."""
    out = []
    for m, deps in g.items():
        for d in deps:
            a, b = layer_of(m), layer_of(d)
            if a != b and b not in ALLOWED[a]:
                out.append(f"{m} imports {d} ({a} may import only {sorted(ALLOWED[a]) or 'nothing of ours'})")
    return out


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle's modules (strongly connected components with more than one module)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w in g and w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in g:
        if v not in index:
            visit(v)
    return out


def doc_line(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return doc.split("\n", 1)[0]


def main() -> int:
    mods, g = modules(), graph()
    for layer in ALLOWED:
        mine = [m for m in g if layer_of(m) == layer]
        deps = sorted({layer_of(d) for m in mine for d in g[m]} - {layer})
        print(f"{layer}  imports of ours: {', '.join(deps) or 'nothing'}")
        for m in mine:
            print(f"  {str(mods[m].relative_to(ROOT)):<32} {doc_line(mods[m])[:90]}")
    bad, loops = breaches(g), cycles(g)
    for b in bad:
        print("breach:", b)
    for c in loops:
        print("cycle:", " -> ".join(c))
    print(f"{len(g)} modules, {sum(len(d) for d in g.values())} imports of ours, "
          f"{len(bad)} breaches, {len(loops)} cycles")
    return 1 if bad or loops else 0


if __name__ == "__main__":
    sys.exit(main())
