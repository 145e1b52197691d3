"""Every word a page prints is the catalogue's (report/data/words/): no Chinese in any source
string of ours, no English sentence in the code that judges and publishes, no prose in a
section template outside its `{@key@}` fragments."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import jinja2

from tests.conftest import ROOT

CJK = re.compile(r"[\u3400-\u9fff\u3000-\u303f\uff01-\uff5e]")
# Three words in a row: a phrase, not a code, a key or a unit.
SENTENCE = re.compile(r"\b[A-Za-z]{2,}\b(?: +\b[A-Za-z']{2,}\b){2,}")
# Strings of the stages that print pages which are not words of a page, by where they stand.
NOT_PAGE_WORDS = {
    "report/publish/render/vega.py": "the CSS font stack of the figures",
    "report/judge/conformance.py": "the conformance tool's plain-text table for a terminal",
}


def _strings(path: Path) -> list[tuple[int, str]]:
    """String constants of PATH that could reach a reader: not docstrings, not the message of
    an exception raised, not an argparse help or a print to the terminal."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                and ast.get_docstring(node, clean=False) is not None:
            skip.add(id(node.body[0].value))
        if isinstance(node, ast.Raise) and node.exc is not None:
            skip |= {id(n) for n in ast.walk(node.exc)}
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in \
                ("print", "add_argument", "add_parser", "ArgumentParser", "record"):
            skip |= {id(n) for n in ast.walk(node)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip]


def _python(*packages: str) -> list[Path]:
    return sorted(p for pkg in packages for p in (ROOT / pkg).rglob("*.py"))


def test_no_chinese_outside_the_catalogue():
    found = [f"{p.relative_to(ROOT)}:{line}: {s[:40]!r}"
             for p in _python("bundle", "bench", "report", "serving_ledger")
             for line, s in _strings(p) if CJK.search(s)]
    assert not found, found


def test_no_english_sentence_in_the_code_that_judges_and_publishes():
    found = []
    for p in _python("report/judge", "report/publish"):
        rel = str(p.relative_to(ROOT))
        if rel in NOT_PAGE_WORDS:
            continue
        found += [f"{rel}:{line}: {s[:60]!r}" for line, s in _strings(p) if SENTENCE.search(s)]
    assert not found, found


def test_a_section_template_holds_no_prose_of_its_own():
    env = jinja2.Environment()
    found = []
    for p in sorted((ROOT / "templates").glob("*.md.j2")):
        # a fragment stands where text or (inside a call) an argument stands: lexed as a number
        source = re.sub(r"\{@[a-z0-9_]+@\}", " 0 ", p.read_text(encoding="utf-8"))
        for line, kind, value in env.lex(source):
            if kind == "data":
                text = value
                if re.search(r"[A-Za-z]{3,}", text) or CJK.search(text):
                    found.append(f"{p.name}:{line}: {text.strip()[:60]!r}")
            elif kind == "string" and (SENTENCE.search(value) or CJK.search(value)):
                found.append(f"{p.name}:{line}: {value[:60]}")
    assert not found, found


def test_the_scanners_catch_a_word_outside(tmp_path):
    # HAND-BUILT module and template
    mod = tmp_path / "m.py"
    mod.write_text('"""Doc with many words here."""\nX = "这是一句话"\nY = "the load stressed nothing"\n'
                   'raise ValueError("the error message may be prose")\n')
    texts = [s for _, s in _strings(mod)]
    assert texts == ["这是一句话", "the load stressed nothing"]
    assert SENTENCE.search(texts[1]) and CJK.search(texts[0])
