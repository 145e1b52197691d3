"""The catalogue's labels and quantity meanings (report/data/words/label.*.toml, quantity.zh.toml).

- every label has a text in both languages, with the same `{fields}`, and every label code the
  code names has a text;
- no label is unused: its code, or its name in the table of the module that owns its prefix,
  is spelled out in the code or the templates;
- Chinese labels are punctuated as Chinese is (no ASCII comma, colon, semicolon or
  parenthesis against a Chinese character);
- every quantity function the code hands to Ledger.derive by name, and every function and
  recorded value that a ledger of a committed round or fixture bundle holds, has a Chinese
  meaning; every Chinese meaning names a function of the code or a key the code records;
- the Chinese appendix of a real round (runs/round-2) holds no English meaning, no "N values"
  and no English unit word.
"""

from __future__ import annotations

import html
import importlib
import re
from pathlib import Path

import pytest

from report.ledger import Value, quantity_name
from report.publish.render.appendix import quantity_code
from report.publish.render.output import render_round
from report.words import fields_of, section
from tests.conftest import ROOT  # noqa: E402

REPORT = ROOT / "report"
TEMPLATES = ROOT / "templates"
STAGES = ("architecture", "derive", "judge", "publish", "planner")


def _stage_module(name: str) -> str:
    """The report module a short name ("stats.point", "gpu.power") is in, whatever its stage ("report.derive.stats.point")."""
    found = [f"report.{s}.{name}" for s in STAGES if (REPORT / s / f"{name.replace('.', '/')}.py").is_file()]
    if len(found) != 1:
        raise ImportError(f"{name!r} is in {len(found)} of the report's stages")
    return found[0]

# Label prefixes read as a table by name (words.group); the files that name their entries.
GROUPS = {
    "page_": [*sorted((REPORT / "publish" / "render").glob("*.py")), TEMPLATES / "macros.j2", TEMPLATES / "base.html.j2",
              TEMPLATES / "index.html.j2"],
    "fig_": [*sorted((REPORT / "publish" / "figures").glob("*.py")), REPORT / "publish" / "compose.py"],
    "plan_": [REPORT / "planner" / "listing.py"],
    "note_": [REPORT / "planner" / "notes.py"],
    # the diagnosis table words a point's bottleneck and failed checks by their codes
    "bottleneck_": [REPORT / "judge" / "rules.py"],
    # each limit's knob, named in rules.KNOBS
    "knob_": [REPORT / "judge" / "rules.py", REPORT / "judge" / "diagnosis.py"],
    "invalid_short_": [REPORT / "judge" / "diagnosis.py"],
}
CJK = "[\u3400-\u9fff]"
ASCII_AGAINST_CJK = re.compile(f"{CJK}[,:;()]|[,:;()]{CJK}")
ASCII_SEPARATOR_AGAINST_CJK = re.compile(f"{CJK}[,:;]|[,:;]{CJK}")


def _python_sources() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(REPORT.rglob("*.py")))


def _literals(text: str) -> set[str]:
    """The heads of the string literals in TEXT up to the first character that is not part
    of a name: "queue" for "queue", "label.unit_" for f"label.unit_{unit}"."""
    return set(re.findall(r"""[frb]?["']([A-Za-z0-9_.]+)""", text))


def _template_names(text: str) -> set[str]:
    """Names a template reads from the words: w.name and w["name"]."""
    return set(re.findall(r"\bw\.([a-z_]+)", text)) | set(re.findall(r"""\bw\[["']([a-z_]+)""", text))


def _used(name: str, heads: set[str]) -> bool:
    """NAME is spelled out, or an f-string head that ends in "_" (a family of names) leads to it."""
    return any(h == name or (h.endswith("_") and name.startswith(h)) for h in heads)


def test_labels_in_both_languages_with_the_same_fields():
    en, zh = section("label", "en"), section("label", "zh")
    assert en.keys() == zh.keys(), f"only en: {sorted(en.keys() - zh.keys())}; only zh: {sorted(zh.keys() - en.keys())}"
    differ = {k: (sorted(fields_of(en[k])), sorted(fields_of(zh[k]))) for k in en
              if fields_of(en[k]) != fields_of(zh[k])}
    assert not differ, differ


def test_every_label_code_the_code_names_has_a_text():
    labels = section("label", "en")
    named = {h[len("label."):] for h in _literals(_python_sources()) if h.startswith("label.")}
    missing = sorted(n for n in named if n not in labels and not n.endswith("_"))
    assert not missing, missing
    families = sorted(n for n in named if n.endswith("_") and not any(k.startswith(n) for k in labels))
    assert not families, families


def test_no_label_is_unused():
    labels = section("label", "en")
    heads = _literals(_python_sources())
    # group("label.fig_", ...) reads the whole family: its names are checked in the owners.
    direct = {h[len("label."):] for h in heads if h.startswith("label.")} - GROUPS.keys()
    unused = []
    for key in labels:
        if _used(key, direct):
            continue
        prefix = next((p for p in GROUPS if key.startswith(p)), None)
        if prefix is not None:
            names: set[str] = set()
            for path in GROUPS[prefix]:
                text = path.read_text(encoding="utf-8")
                names |= _literals(text) | (_template_names(text) if path.suffix == ".j2" else set())
            if _used(key[len(prefix):], names):
                continue
        unused.append(key)
    assert not unused, f"catalogue labels no code uses: {unused}"


def test_chinese_labels_are_punctuated_as_chinese():
    bad = {k: v for k, v in section("label", "zh").items() if ASCII_AGAINST_CJK.search(v)}
    assert not bad, bad
    # Meanings may hold formulas, whose parentheses stay ASCII.
    bad = {k: v for k, v in section("quantity", "zh").items() if ASCII_SEPARATOR_AGAINST_CJK.search(v)}
    assert not bad, bad


def _bundles() -> list[Path]:
    runs = sorted(ROOT.glob("runs/round-*/bundle/manifest.json"))
    fixtures = sorted((ROOT / "tests" / "fixtures").glob("*/manifest.json"))
    return [p.parent for p in runs + fixtures]


@pytest.fixture(scope="module")
def reports():
    """The report objects of every committed round (each compared with the one before, so the
    cross-round values are there too) and of every fixture bundle."""
    from report.publish.compose import compose_rounds
    bundles = _bundles()
    rounds = [(p, p.parent.name) for p in bundles if p.parent.parent.name == "runs"]
    out = compose_rounds(rounds)
    for p in bundles:
        if p.parent.name == "fixtures":
            out += compose_rounds([(p, p.name)])
    return out


def _values(reports) -> list[Value]:
    return [v for r in reports for v in r.ledger.values.values()]


def test_every_value_a_ledger_holds_has_a_chinese_meaning(reports):
    zh = section("quantity", "zh")
    values = _values(reports)
    assert len({v.func for v in values}) > 50  # the committed rounds reach most of the code
    missing = sorted({quantity_code(v)[len("quantity."):] for v in values}
                     - zh.keys())
    assert not missing, f"add a Chinese meaning to report/data/words/quantity.zh.toml: {missing}"


def _derived_functions(paths: list[Path]) -> set[str]:
    """Functions the code hands to Ledger.derive by name (`led.derive(key, A.ratio, ...)`), as
    `Value.func` records them; a function chosen at run time (a loop variable) is left to the
    ledgers of the committed rounds."""
    import ast
    out = set()
    for path in paths:
        module = importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "derive" and len(node.args) >= 2):
                continue
            f, obj = node.args[1], None
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
                obj = getattr(getattr(module, f.value.id, None), f.attr, None)
            elif isinstance(f, ast.Name):
                obj = getattr(module, f.id, None)
            if callable(obj):
                out.add(f"{obj.__module__}.{obj.__qualname__}")
    return out


def test_every_function_the_code_derives_with_has_a_chinese_meaning():
    from report.registry import REGISTRY
    funcs = _derived_functions([*sorted((REPORT / "derive" / "round").glob("*.py")), REPORT / "judge" / "compare.py"])
    # And every function declared as a quantity (report/registry.py) by the modules imported.
    funcs |= {f"{d.func.__module__}.{d.func.__qualname__}" for d in REGISTRY.values()}
    assert len(funcs) > 50
    missing = sorted(quantity_name(f) for f in funcs if quantity_name(f) not in section("quantity", "zh"))
    assert not missing, f"add a Chinese meaning to report/data/words/quantity.zh.toml: {missing}"


def test_every_chinese_meaning_names_a_function_or_a_recorded_key(reports):
    recorded = {quantity_code(v)[len("quantity."):] for v in _values(reports) if v.func == "observed"}
    stray = []
    for key in section("quantity", "zh"):
        if key.startswith("observed."):
            # a recorded key no committed round reaches may still be in the code that records it
            name = key.split(".")[-1]
            if key not in recorded and name not in _python_sources():
                stray.append(key)
            continue
        module, _, qualname = key.rpartition(".")
        try:
            obj = importlib.import_module(_stage_module(module))
            for part in qualname.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError):
            stray.append(key)
    assert not stray, f"meanings of nothing the code has: {stray}"


def test_the_chinese_meanings_are_chinese():
    for key, text in section("quantity", "zh").items():
        assert re.search(CJK, text), (key, text)
        assert not fields_of(text), (key, text)


def test_chinese_appendix_of_round_2_is_in_chinese(reports, tmp_path):
    report = next(r for r in reports if r.round_id == "round-2")
    render_round(report, tmp_path, formats=("html",), langs=("zh",))
    page = (tmp_path / "index.zh.html").read_text(encoding="utf-8")
    appendix = page[page.index('id="provenance"'):]
    meanings = [html.unescape(re.sub("<[^>]+>", "", m)) for m in re.findall(r'<div class="prov-doc">(.*?)</div>', appendix)]
    assert len(meanings) > 100
    english = {v.doc for v in report.ledger.values.values() if v.doc}
    assert not [m for m in meanings if m in english or not re.search(CJK, m)]
    assert not re.search(r"\d values\b", appendix)
    assert not re.search(r"\d (fraction|tok|req|blocks)\b", appendix)


def test_a_module_name_is_in_one_stage_only():
    # quantity_name drops the stage: two stages with one module name would share meanings.
    names = [p.stem for s in STAGES for p in (REPORT / s).glob("*.py") if p.stem != "__init__"]
    assert len(names) > 30 and len(names) == len(set(names))
