"""The mechanism codes are one list: findings.points.MECHANISMS holds every code the rules and the
diagnosis can name, and the catalogue words each of them, and no other, in every language."""

from __future__ import annotations

import ast

from report.judge.findings.points import BY_PHASE, MECHANISMS
from report.words import LANGS, section
from tests.conftest import ROOT


def _strings(node: ast.AST) -> set[str]:
    """The strings expression NODE can evaluate to: a constant, either branch of a conditional,
    a lambda's body, a dict's values (looked up by a roof's name), a call's default."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        return _strings(node.body) | _strings(node.orelse)
    if isinstance(node, ast.Lambda):
        return _strings(node.body)
    if isinstance(node, ast.Dict):
        return {c for v in node.values for c in _strings(v)}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return _strings(node.func.value) | {c for a in node.args[1:] for c in _strings(a)}
    return set()


def _named_codes() -> set[str]:
    """Every code a rule's mechanism (rules.RULES) or the diagnosis (an Attribution's third
    argument, an assignment to `.mechanism`) can name, read from their source."""
    codes: set[str] = set()
    rules = ast.parse((ROOT / "report/judge/rules.py").read_text(encoding="utf-8"))
    for call in ast.walk(rules):
        if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "Rule":
            codes |= _strings(call.args[1])
    diagnosis = ast.parse((ROOT / "report/judge/diagnosis.py").read_text(encoding="utf-8"))
    for n in ast.walk(diagnosis):
        if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "Attribution" and len(n.args) > 2:
            if not isinstance(n.args[2], ast.Attribute):     # rule.mechanism(f): the rules' codes
                codes |= _strings(n.args[2])
        if isinstance(n, ast.Assign):
            for target in n.targets:
                pairs = (zip(target.elts, n.value.elts) if isinstance(target, ast.Tuple) and isinstance(n.value, ast.Tuple)
                         else [(target, n.value)])
                codes |= {c for t, v in pairs if isinstance(t, ast.Attribute) and t.attr == "mechanism"
                          for c in _strings(v)}
    return codes


def test_every_code_the_rules_and_the_diagnosis_name_is_a_mechanism_and_no_other():
    named = _named_codes()
    assert len(named) > 10
    assert named == set(MECHANISMS)
    assert len(MECHANISMS) == len(set(MECHANISMS))


def test_the_catalogue_words_each_mechanism_and_no_other_in_every_language():
    for lang in LANGS:
        worded = {k.removeprefix("mechanism_") for k in section("finding", lang) if k.startswith("mechanism_")}
        assert worded == set(MECHANISMS) | {f"{c}_by_phase" for c in BY_PHASE}, lang
