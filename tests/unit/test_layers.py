"""The layers show in the folders: bundle imports nothing of ours, bench and report import
bundle and never each other, inside report its stages import one way (architecture < derive <
judge < publish, the planner on architecture alone), and no module imports itself back."""

from __future__ import annotations

import importlib.util

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("import_graph", ROOT / "tools" / "import_graph.py")
import_graph = importlib.util.module_from_spec(spec)
spec.loader.exec_module(import_graph)


def test_our_modules_keep_their_layers_and_have_no_cycles():
    g = import_graph.graph()
    assert len(g) > 50 and "report.ledger" in g
    assert import_graph.breaches(g) == []
    assert import_graph.cycles(g) == []
    # the bundle layer imports nothing of ours; the report reads bundles through it (the pipeline reads them)
    assert all(d.startswith("bundle.") for m in g if m.startswith("bundle")
               for d in g[m])
    assert "bundle.store.reader" in g["report.judge.result"]


def test_a_breach_and_a_cycle_are_found():
    # HAND-BUILT graph: bench reaching into report, and report.a -> report.b -> report.a
    g = {"bench.x": {"report.a"},
         "report.a": {"report.b"},
         "report.b": {"report.a", "bundle.store"},
         "bundle.store": set()}
    assert [b.split(" (")[0] for b in import_graph.breaches(g)] == [
        "bench.x imports report.a"]
    assert import_graph.cycles(g) == [["report.a", "report.b"]]


def test_report_stages_import_one_way():
    g = import_graph.graph()
    layers = {import_graph.layer_of(m) for m in g if m.startswith("report")}
    assert {"report.core", "report.architecture", "report.derive", "report.judge",
            "report.publish", "report.planner", "report.cli"} == layers
    # HAND-BUILT graph: a derive module reaching up into judge, a planner module into derive
    bad = {"report.derive.x": {"report.judge.y"}, "report.planner.z": {"report.derive.x"},
           "report.publish.w": {"report.judge.y", "report.derive.x", "report.ledger"},
           "report.judge.y": set(), "report.ledger": set()}
    assert sorted(b.split(" (")[0] for b in import_graph.breaches(bad)) == [
        "report.derive.x imports report.judge.y", "report.planner.z imports report.derive.x"]


def test_no_folder_of_the_report_holds_more_than_fourteen_modules():
    # A new topic gets a room of its own (the step model's report/derive/step.py) rather than
    # growing the largest file; a folder past this many rooms splits its topics into
    # sub-packages (report/publish/render/), which sit in their stage's layer.
    g = import_graph.graph()
    folders: dict[str, list[str]] = {}
    for m, path in import_graph.modules().items():
        if m.startswith("report.") and path.name != "__init__.py":
            folders.setdefault(m.rpartition(".")[0], []).append(m)
    assert {f"report.{s}" for s in import_graph.STAGES + ("planner",)} <= set(folders)
    for folder, mods in folders.items():
        assert len(mods) <= 14, (folder, sorted(mods))
    assert import_graph.layer_of("report.publish.render.page") == "report.publish"
    assert all(m in g for mods in folders.values() for m in mods)

