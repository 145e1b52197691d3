"""The phase table and the graph over every declared quantity (report/phases.py), and its two drivers.

- every declared quantity (point, round, across points, cross-round, planner) is resolved by
  one phase, and reads only raw inputs and quantities of its own phase or an earlier one;
- a quantity that reads what only a later phase produces, a name nothing declares, or reads
  itself through a cycle fails the check, naming the quantity and the input; so does one no
  phase resolves;
- inside a phase the modules come in the order their quantities' inputs give, the table's
  order among independent ones;
- every ledger key the judge and the pages read by a literal name (`r.<name>`,
  `p.{point}.<name>`, `x.<name>`) names a quantity a phase resolves;
- nothing resolves a quantity but the two drivers: no call of the registry's resolvers outside
  report/registry.py, report/phases.py (`resolve_selected`) and report/derive/round/stages.py
  (`resolve_stage`).
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
import types

import pytest

import report.judge.compare  # noqa: F401 (registers the cross-round quantities)
import report.judge.result  # noqa: F401 (registers every round's quantities)
import report.planner.capacity  # noqa: F401 (registers the planner's quantities)
from report import phases as PH
from report import registry as RG
from report.registry import point_quantity, round_quantity
from tests.conftest import ROOT


@pytest.fixture
def scratch(monkeypatch):
    """The registry as it stands, for quantities one test declares besides (gone after it)."""
    monkeypatch.setattr(RG, "REGISTRY", dict(RG.REGISTRY))


def declare(module: str, scope: str, name: str, *params: str):
    """A quantity NAME of SCOPE that MODULE declares, reading PARAMS."""
    def func(**kw):
        return 0
    func.__name__, func.__qualname__, func.__module__, func.__doc__ = name, name, module, "A test's quantity."
    func.__signature__ = inspect.Signature([inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY) for p in params])
    return (point_quantity() if scope == "point" else round_quantity())(func)


def a_later_quantity() -> str:
    """A round quantity of the last phase of the round's ledger that no raw input shadows."""
    capacity = next(p for p in PH.PHASES if p.name == "capacity")
    return next(d.name for d in PH.members(capacity) if d.name not in RG._raw_input_names())


def test_every_declared_quantity_is_resolved_in_order():
    PH.check()
    assert len(PH.graph()) == len(RG.REGISTRY)


def test_reading_what_only_a_later_phase_produces_fails(scratch):
    later = a_later_quantity()
    declare(PH.STATS, "point", "reads_too_soon", later)
    with pytest.raises(PH.PhaseError, match=rf"'reads_too_soon'.*reads '{later}', produced only later"):
        PH.check()


def test_reading_a_name_nothing_declares_fails(scratch):
    declare(PH.REQUESTS, "round", "reads_nothing", "no_quantity_is_named_this")
    with pytest.raises(PH.PhaseError, match="'reads_nothing'.*'no_quantity_is_named_this': no quantity declares it"):
        PH.check()


def test_a_cycle_fails(scratch):
    declare(PH.STATS, "point", "chicken_count", "egg_count")
    declare(PH.DELIVERY, "point", "egg_count", "chicken_count")
    with pytest.raises(PH.PhaseError, match="cycle: .*chicken_count.*egg_count|cycle: .*egg_count.*chicken_count"):
        PH.check()


def test_a_quantity_no_phase_resolves_fails(scratch):
    declare(__name__, "point", "homeless")
    with pytest.raises(PH.PhaseError, match="'homeless'.*resolved by no phase"):
        PH.check()


def test_modules_come_in_the_order_their_inputs_give(scratch, monkeypatch):
    for m in ("mod_a", "mod_b", "mod_c"):
        monkeypatch.setitem(sys.modules, m, types.ModuleType(m))
    declare("mod_a", "point", "reads_b", "made_in_b")
    declare("mod_b", "point", "made_in_b")
    declare("mod_c", "point", "free_standing")
    phase = PH.Phase("test", "point", ("mod_a", "mod_b", "mod_c"), "measured", "point")
    assert PH.module_order(phase) == ["mod_b", "mod_a", "mod_c"]
    assert PH.module_order(PH.Phase("test", "point", ("mod_c", "mod_b"), "measured", "point")) == ["mod_c", "mod_b"]


def test_a_phase_of_a_module_not_imported_fails():
    with pytest.raises(PH.PhaseError, match="not imported"):
        PH.module_order(PH.Phase("test", "point", ("report.derive.no_such_module",), "measured", "point"))


# A ledger key by a literal name: `r.<name>`, `x.<name>`, `p.{point}.<name>` (`{...}` any text in a name).
KEY = re.compile(r"""f?["'](?:([rx])|p\.\{[^}"']+\})\.((?:[a-z0-9_]|\{[^}"']+\})+)["']""")


def resolved_names() -> set[str]:
    """The names of every quantity a phase resolves."""
    return {d.name for ph in PH.PHASES for d in PH.members(ph)}


def unresolved_keys(text: str, names: set[str]) -> tuple[int, list[str]]:
    """How many keys TEXT reads by a literal name, and those that name none of NAMES."""
    keys = list(KEY.finditer(text))
    return len(keys), [m.group(0) for m in keys
                       if not any(re.compile(re.sub(r"\\\{[^}]*\\\}", "[a-z0-9_]+", re.escape(m.group(2)))).fullmatch(n)
                                  for n in names)]


def test_every_key_the_judge_and_the_pages_read_by_name_is_resolved_by_a_phase():
    names, unknown, read = resolved_names(), [], 0
    for folder in ("report/judge", "report/publish"):
        for f in sorted((ROOT / folder).rglob("*.py")):
            n, missing = unresolved_keys(f.read_text(encoding="utf-8"), names)
            read += n
            unknown += [f"{f.relative_to(ROOT)}: {k}" for k in missing]
    assert read > 100 and not unknown, unknown


def test_a_key_read_by_name_that_no_phase_resolves_fails(scratch):
    declare("report.judge.in_no_phase", "round", "read_by_no_phase")
    assert unresolved_keys('led["r.read_by_no_phase"], led[f"p.{pid}.ttft_ms_p99"]', resolved_names()) == \
        (2, ['"r.read_by_no_phase"'])


# The registry's resolvers of a module's quantities, and the only files that may call them.
RESOLVERS = {"resolve_point", "resolve_round", "resolve_across", "resolve_scope", "_resolve_at"}
DRIVERS = {"report/registry.py", "report/phases.py", "report/derive/round/stages.py"}


def resolver_calls(source: str) -> list[str]:
    """The resolvers SOURCE calls (by name or as an attribute), with their lines."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if name in RESOLVERS:
                out.append(f"{name} (line {node.lineno})")
    return out


def test_nothing_but_the_drivers_resolves_a_phase():
    outside = []
    for folder in ("report", "tools", "serving_ledger", "bench"):
        for f in sorted((ROOT / folder).rglob("*.py")):
            rel = f.relative_to(ROOT).as_posix()
            if rel not in DRIVERS:
                outside += [f"{rel}: {c}" for c in resolver_calls(f.read_text(encoding="utf-8"))]
    assert not outside, f"resolve through report/phases.py's resolve_selected or resolve_stage: {outside}"
    assert resolver_calls("from report.registry import resolve_point\nresolve_point(led, m, p, raw)\n")
    assert resolver_calls("import report.registry as RG\nRG.resolve_scope(led, 'cross', m, 'x.', raw, 'pair')\n")


def test_each_selected_stage_resolves_its_groups_in_the_table_order(monkeypatch):
    asked = []

    def inputs(phase, group):
        asked.append((phase.name, group))
        return ()
    PH.resolve_selected(None, "plan", inputs)
    assert [g for _, g in asked] == ["kv", "layout", "memory", "tokens", "from_blocks", "scaled", "default_chunk", ""]
    asked.clear()
    PH.resolve_selected(None, "cross", inputs)
    assert [g for _, g in asked] == [*PH.CROSS_GROUPS, None, *PH.CROSS_LATER_GROUPS]
