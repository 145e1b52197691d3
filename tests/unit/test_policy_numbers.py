"""Policy is stated once, in report/derive/validity.py: judge and publish code types no number
but a structural one, and no template compares numbers (report/publish/predicates.py does)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import ROOT

# The numbers judge and publish code may type, each for a reason that is not a judgement.
STRUCTURAL = {
    0: "nothing; the first item; a sign",
    1: "one item; a whole share; the next one",
    2: "two points for a slope or a pair; halves",
    100: "per cent",
    1000: "milli and kilo (ms from s)",
    1e6: "per million (a price per million tokens)",
    3600: "seconds per hour",
}
# Modules that draw or typeset, where a number is a size, an opacity, a digit count or a
# regular expression's group, never compared with a measurement.
PRESENTATION = {
    "report/publish/figures": "chart geometry: widths, opacities, dashes, font sizes, axis padding",
    "report/publish/numbers.py": "how a number is typeset: digits, SI prefixes",
    "report/publish/render": "page assembly and printing: match groups, cache sizes, print table sizes, a timeout",
}
# Modules whose named module constants shape what they write (their docstrings say which);
# a number elsewhere in them is still checked.
NAMED_SHAPES = {
    "report/judge/next_steps.py": "the plans a step writes: sweep multiples, headroom, splits",
    "report/publish/plans.py": "the layout of a plan file: its comment lines' width",
}


def _modules() -> list[Path]:
    return sorted((ROOT / "report" / "judge").rglob("*.py")) + sorted((ROOT / "report" / "publish").rglob("*.py"))


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _exempt(rel: str) -> bool:
    return any(rel == p or rel.startswith(p + "/") for p in PRESENTATION)


def _named_constant_lines(tree: ast.Module) -> set[int]:
    """The lines of module-level assignments to an UPPER_CASE name."""
    out: set[int] = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        names = [n for t in targets for n in ([t] if isinstance(t, ast.Name) else getattr(t, "elts", []))]
        if names and all(isinstance(n, ast.Name) and n.id.isupper() for n in names):
            out.update(range(node.lineno, node.end_lineno + 1))
    return out


def typed_numbers(path: Path, rel: str | None = None) -> list[str]:
    """The numbers PATH types outside STRUCTURAL (and outside its named constants, where allowed)."""
    rel = rel or _rel(path)
    if _exempt(rel):
        return []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    named = _named_constant_lines(tree) if rel in NAMED_SHAPES else set()
    return [f"{rel}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, (int, float))
            and not isinstance(node.value, bool) and node.value not in STRUCTURAL and node.lineno not in named]


def test_judge_and_publish_type_no_policy_number():
    found = [hit for path in _modules() for hit in typed_numbers(path)]
    assert found == [], "a threshold belongs in report/derive/validity.py as a traced rule:\n" + "\n".join(found)


def test_the_exemptions_name_files_that_exist():
    for rel in [*PRESENTATION, *NAMED_SHAPES]:
        assert (ROOT / rel).exists(), rel


_TAG = re.compile(r"\{%-?(.*?)-?%\}|\{\{-?(.*?)-?\}\}", re.S)
_STRING = re.compile(r"\"[^\"]*\"|'[^']*'")
_ORDER = re.compile(r"<=|>=|<|>")
_EQUAL_NUMBER = re.compile(r"(==|!=)\s*-?\d|\d\s*(==|!=)|\.value\s*(==|!=)|(==|!=)\s*[\w.()~\" ]*\.value\b")


def compared_numbers(text: str) -> list[str]:
    """The template expressions in TEXT that order values or test one against a number."""
    out = []
    for m in _TAG.finditer(text):
        body = _STRING.sub('""', m.group(1) or m.group(2) or "")
        if _ORDER.search(body) or _EQUAL_NUMBER.search(body):
            out.append(" ".join(body.split()))
    return out


def test_no_template_compares_numbers():
    found = [f"{path.relative_to(ROOT)}: {expr}" for path in sorted((ROOT / "templates").rglob("*.j2"))
             for expr in compared_numbers(path.read_text(encoding="utf-8"))]
    assert found == [], "a relation is decided in report/publish/predicates.py:\n" + "\n".join(found)


def test_the_lints_catch_what_they_are_for(tmp_path):
    # HAND-BUILT: a threshold typed in code, and templates that compare values
    bad = tmp_path / "bad.py"
    bad.write_text("def f(x):\n    return x > 0.8\n")
    assert [h.split(": ")[1] for h in typed_numbers(bad, "report/judge/bad.py")] == ["0.8"]
    assert compared_numbers('{% if v("k").value >= facts.x %}a{% endif %}')
    assert compared_numbers('{% if packet.value == 1 %}a{% endif %}')
    assert compared_numbers("{{ ' wide' if headers | length > 9 }}")
    assert not compared_numbers('{% if facts.holds.kv_balances and facts.axis == "input_len" %}a{% endif %}')
    assert not compared_numbers("{% if facts.first_point != facts.headline_point %}a{% endif %}")

