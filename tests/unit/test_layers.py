"""The layers show in the folders: bundle imports nothing of ours, bench and report import
bundle and never each other, and no module imports itself back through others."""

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
    # the bundle layer imports nothing of ours; the report reads bundles through it
    assert all(d.startswith("bundle.") for m in g if m.startswith("bundle")
               for d in g[m])
    assert "bundle.store" in g["report.publish.compose"]


def test_a_breach_and_a_cycle_are_found():
    # HAND-BUILT graph: bench reaching into report, and report.a -> report.b -> report.a
    g = {"bench.x": {"report.a"},
         "report.a": {"report.b"},
         "report.b": {"report.a", "bundle.store"},
         "bundle.store": set()}
    assert [b.split(" (")[0] for b in import_graph.breaches(g)] == [
        "bench.x imports report.a"]
    assert import_graph.cycles(g) == [["report.a", "report.b"]]
