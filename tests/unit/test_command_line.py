"""One command line: `serving-ledger <verb>` is one argparse tree whose verbs take the flags their
half declares, `python -m serving_ledger` runs it, and a bad flag is one line and exit 2."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from serving_ledger.cli import build_parser, main
from tests.conftest import ROOT

VERBS = ("run", "build", "summary", "ledger", "findings", "next", "export", "explain")


def test_every_verb_is_a_sub_command_of_the_one_tree():
    ap = build_parser()
    sub = next(a for a in ap._actions if a.dest == "cmd")
    assert tuple(sub.choices) == VERBS
    args = ap.parse_args(["ledger", "runs/round-1/bundle", "--json"])
    assert args.json and args.run_dir == "runs/round-1/bundle"
    args = ap.parse_args(["run", "--concurrency", "1,2", "--out", "x"])
    assert args.concurrency == [1, 2]


def test_no_other_module_builds_an_argument_tree():
    # The collector, the report and the planner declare their flags; only the face parses.
    builders = []
    for pkg in ("bench", "report", "bundle"):
        for path in (ROOT / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call) and getattr(node.func, "attr", "") in (
                        "ArgumentParser", "add_subparsers", "parse_args"):
                    builders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    # the stand-in server, the engine launcher and the tiny model are tools of their own
    own = {"bench/standin/__main__.py", "bench/engine.py", "bench/tinymodel.py"}
    assert [b for b in builders if b.split(":")[0] not in own] == []


@pytest.mark.parametrize("argv,needle", [
    (["--bogus"], "the following arguments are required: verb"),
    (["run", "--concurrency", "x", "--out", "o"], "--concurrency"),
    (["explain", "--model", "m"], "--gpu"),
    (["ledger"], "run_dir"),
])
def test_a_bad_flag_is_one_line_and_exit_2(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and err.startswith("serving-ledger")


def test_python_m_serving_ledger_runs_the_tree():
    r = subprocess.run([sys.executable, "-m", "serving_ledger", "--help"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and all(v in r.stdout for v in VERBS)


def test_each_verb_is_one_module_of_serving_ledger_verbs():
    from serving_ledger.verbs import VERBS
    modules = sorted(p.stem for p in (ROOT / "serving_ledger" / "verbs").glob("*.py")
                     if p.stem != "__init__")
    assert sorted(v.name for v in VERBS) == modules
    assert all(v.help and "\n" not in v.help for v in VERBS)


def test_help_lists_every_verb_with_its_help_line(capsys):
    from serving_ledger.verbs import VERBS
    assert main(["--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert all(f"{v.name} {v.help}" in out for v in VERBS)


def test_the_readme_lists_the_registered_verbs_with_their_help():
    # tools/verb_list.py --write makes the list; a verb added or reworded without it fails here.
    from serving_ledger.cli import verb_list
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    listed = text.split("<!-- verbs -->\n", 1)[1].split("<!-- /verbs -->", 1)[0]
    assert listed == verb_list()
