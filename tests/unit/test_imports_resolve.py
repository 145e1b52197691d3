"""Every import of ours resolves statically: a resolver that runs nothing (jedi, as editors and
import-graph drawers do) finds each module an import of ours names at the file the import
system loads, and tools/import_graph.py reads the same graph; each module has one name."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import jedi

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("import_graph", ROOT / "tools" / "import_graph.py")
import_graph = importlib.util.module_from_spec(spec)
spec.loader.exec_module(import_graph)


def imported_modules() -> dict[str, list[str]]:
    """Each module of ours that some file imports -> where (file:line) it is imported."""
    known = set(import_graph.modules())
    out: dict[str, list[str]] = {}
    for path in import_graph.modules().values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for n in names:
                if n.split(".")[0] in import_graph.PACKAGES:
                    assert n in known, f"{path}:{node.lineno} imports {n}, which is no module of ours"
                    out.setdefault(n, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return out


def _same(a: str | Path, b: str | Path) -> bool:
    return Path(a).resolve() == Path(b).resolve()


def test_a_static_resolver_finds_every_module_of_ours_where_python_loads_it():
    project = jedi.Project(ROOT, smart_sys_path=True, load_unsafe_extensions=False)
    mods = imported_modules()
    assert len(mods) > 50 and sum(map(len, mods.values())) > 180
    wrong = []
    for name, where in sorted(mods.items()):
        script = jedi.Script(f"import {name}\n{name}\n", path=ROOT / "probe.py", project=project)
        got = [d.module_path for d in script.infer(2, len(name)) if d.module_path]
        loaded = importlib.util.find_spec(name).origin
        if not got or not all(_same(g, loaded) for g in got):
            wrong.append(f"{name} (imported at {where[0]}): jedi {got or 'nothing'}, python {loaded}")
    assert not wrong, "\n".join(wrong)


def test_the_graph_tool_reads_the_modules_python_loads_under_one_name_each():
    files = {}
    for name, path in import_graph.modules().items():
        assert _same(path, importlib.util.find_spec(name).origin), name
        files.setdefault(path.resolve(), []).append(name)
    assert all(len(names) == 1 for names in files.values())
    assert _same(import_graph.modules()["report.ledger"], ROOT / "report" / "ledger.py")


def test_every_package_folder_of_ours_is_installed():
    # pyproject's package list is what a non-editable install ships: a sub-package left out of
    # it imports from the checkout and fails installed.
    import tomllib
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {".".join(p.parent.relative_to(ROOT).parts)
               for pkg in import_graph.PACKAGES for p in (ROOT / pkg).rglob("__init__.py")}
    assert folders and folders <= listed, sorted(folders - listed)
