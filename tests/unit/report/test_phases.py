"""The phase table and the graph over every declared quantity (report/derive/phases.py).

- every declared quantity (point, round, across points, cross-round, planner) is resolved by
  one phase, and reads only raw inputs and quantities of its own phase or an earlier one;
- a quantity that reads what only a later phase produces, a name nothing declares, or reads
  itself through a cycle fails the check, naming the quantity and the input; so does one no
  phase resolves;
- inside a phase the modules come in the order their quantities' inputs give, the table's
  order among independent ones;
- every ledger key the judge and the pages read by a literal name (`r.<name>`,
  `p.{point}.<name>`, `x.<name>`) names a declared quantity.
"""

from __future__ import annotations

import inspect
import re
import sys
import types

import pytest

import report.judge.compare  # noqa: F401 (registers the cross-round quantities)
import report.judge.result  # noqa: F401 (registers every round's quantities)
import report.planner.capacity  # noqa: F401 (registers the planner's quantities)
from report import registry as RG
from report.derive import phases as PH
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


def test_every_key_the_judge_and_the_pages_read_by_name_is_declared():
    names = {d.name for d in RG.REGISTRY.values()}
    unknown, read = [], 0
    for folder in ("report/judge", "report/publish"):
        for f in sorted((ROOT / folder).rglob("*.py")):
            for m in KEY.finditer(f.read_text(encoding="utf-8")):
                read += 1
                form = re.compile(re.sub(r"\\\{[^}]*\\\}", "[a-z0-9_]+", re.escape(m.group(2))))
                if not any(form.fullmatch(n) for n in names):
                    unknown.append(f"{f.relative_to(ROOT)}: {m.group(0)}")
    assert read > 100 and not unknown, unknown
