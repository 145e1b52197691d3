"""What a reader sees of every committed bundle, written to a folder, and two such folders compared.

    .venv/bin/python tools/check_identical.py build OUT      # before a change, and after it
    .venv/bin/python tools/check_identical.py compare BEFORE AFTER   # exit 1 on any difference
    .venv/bin/python tools/check_identical.py compare BEFORE AFTER --moved tools/moved_functions.toml

`build` writes, for every bundle under runs/ and tests/fixtures/: the `ledger --json` and
`findings --json` dumps and the `ledger` text in both languages; for every round as the site
composes it (runs/ together, each round against the one before it; a fixture alone): the
page's ledger, its next steps and its HTML page in each language, in both modes (the HTML
page as served, and the page the PDF is printed from, its figures as SVG); and the capacity
planner's JSON and text for every model config under tests/fixtures/models on a few GPUs.
The PDF itself is not printed (slow, and a function of the page it is printed from). The
site's build key (round.json) is never written, so nothing differs by the code's digest
alone. `compare` diffs two folders file by file, JSON key by key, and prints what differs;
with `--moved FILE` (old module -> each function's new module, tools/moved_functions.toml) a
function's old name in BEFORE, qualified or short as a page prints it (and a moved file, as a
function's description cites it), reads as its new one, and compare counts those differences
and accepts a file that differs by them alone.
A bundle that cannot be read, or a page that cannot be rendered, writes its error in place of
its files, so that compares too.
"""

from __future__ import annotations

import io
import json
import re
import sys
import tomllib
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

BUNDLE_ROOTS = ("runs", "tests/fixtures")
PLANNER_GPUS = ("NVIDIA H200", "NVIDIA GeForce RTX 4090")
PLANNER_ARGS = (
    ["--concurrency", "16", "--input-len", "1024", "--output-len", "256"],
    ["--concurrency", "64", "--input-len", "4096", "--output-len", "512", "--kv-memory-gib", "20",
     "--tp", "2"],
)


def _name(rid: str) -> str:
    return rid.replace("/", "_")


def _json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=1, ensure_ascii=False, sort_keys=False) + "\n",
                    encoding="utf-8")


def bundles() -> list[tuple[Path, str]]:
    """(bundle, name in the output) of every committed bundle, runs/ first (run from the root)."""
    from bundle.store.reader import find_bundles
    from report.judge.result import round_id_for
    out = []
    for root in BUNDLE_ROOTS:     # paths from the checkout's root, as a page names its bundle
        for b in find_bundles(Path(root)):
            out.append((b, round_id_for(b) if root == "runs" else _name(str(b.parent if b.name == "bundle" else b))))
    return out


def dump_bundle(b: Path, name: str, out: Path) -> None:
    """The `ledger --json`, `findings --json` and `ledger` (text) views of one bundle."""
    from report.judge.result import judge_bundle
    from report.publish.dumps import findings_json, ledger_json
    from report.publish.numbers import format_value
    try:
        res = judge_bundle(b)
    except Exception as e:  # noqa: BLE001 - a refusal is an output too
        (out / f"{name}.refused.txt").write_text(f"{type(e).__name__}: {e}\n", encoding="utf-8")
        return
    led = res.led
    _json(out / f"{name}.ledger.json", ledger_json(led))
    _json(out / f"{name}.findings.json", findings_json(res))
    for lang in ("en", "zh"):
        (out / f"{name}.ledger.{lang}.txt").write_text(
            "".join(f"{k}\t{format_value(v, lang)}\n" for k, v in led.values.items()), encoding="utf-8")


def dump_pages(reports, out: Path, svg: bool) -> None:
    """Each composed round's ledger, next steps and pages (HTML, and the PDF's source)."""
    from report.publish.dumps import ledger_json
    from report.publish.render.output import page_name
    from report.publish.render.page import Page
    from report.publish.render.vega import figure_svg
    from report.words import LANGS
    for rep in reports:
        name = _name(rep.round_id)
        _json(out / f"{name}.page-ledger.json", ledger_json(rep.ledger))
        _json(out / f"{name}.next.json", rep.facts.next_steps)
        links = {f"{lg}.{fm}": page_name(lg, fm) for lg in LANGS for fm in ("html", "pdf")}
        for lang in LANGS:
            try:
                page = Page(rep, lang)
            except Exception as e:  # noqa: BLE001 - a page that cannot be rendered is an output too
                (out / f"{name}.{lang}.error.txt").write_text(f"{type(e).__name__}: {e}\n", encoding="utf-8")
                continue
            (out / f"{name}.{lang}.html").write_text(page.assemble("html", links=links), encoding="utf-8")
            if svg:
                svgs = {b.ref: figure_svg(b.ref, rep.figures[b.ref].specs[lang])
                        for b in page.blocks if b.kind == "figure"}
                (out / f"{name}.{lang}.print.html").write_text(
                    page.assemble("pdf", svgs=svgs, links=links), encoding="utf-8")


def dump_planner(out: Path) -> None:
    """`serving-ledger explain` on every fixture model config, JSON and text, both languages."""
    from serving_ledger.cli import main
    for model in sorted((ROOT / "tests/fixtures/models").glob("*.config.json")):
        for g, gpu in enumerate(PLANNER_GPUS):
            for a, args in enumerate(PLANNER_ARGS):
                for lang in ("en", "zh"):
                    for js in (True, False):
                        argv = ["explain", "--model", str(model.relative_to(ROOT)), "--gpu", gpu,
                                *args, "--lang", lang] + (["--json"] if js else [])
                        o, e = io.StringIO(), io.StringIO()
                        with redirect_stdout(o), redirect_stderr(e):
                            rc = main(argv)
                        stem = f"explain.{model.name.removesuffix('.config.json')}.{g}{a}.{lang}"
                        (out / f"{stem}.{'json' if js else 'txt'}").write_text(
                            f"rc {rc}\n{o.getvalue()}--- stderr\n{e.getvalue()}", encoding="utf-8")


def build(out: Path, svg: bool = True) -> int:
    import os
    os.chdir(ROOT)
    from report.publish.compose import compose_rounds
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        print(f"error: {out} is not empty", file=sys.stderr)
        return 2
    found = bundles()
    for b, name in found:
        print(f"bundle {name}", file=sys.stderr)
        dump_bundle(b, name, out)
    refused: list[str] = []
    runs = [(b, n) for b, n in found if b.is_relative_to("runs")]
    print("pages of runs/", file=sys.stderr)
    dump_pages(compose_rounds(runs, refused), out, svg)
    for b, name in found:
        if (b, name) in runs:
            continue
        print(f"pages {name}", file=sys.stderr)
        dump_pages(compose_rounds([(b, name)], refused), out, svg)
    (out / "refused.txt").write_text("".join(f"{r}\n" for r in refused), encoding="utf-8")
    print("planner", file=sys.stderr)
    dump_planner(out)
    return 0


def _json_diff(a, b, where: str, said: list[str]) -> None:
    """Every key path where A and B differ, at most 20 per file."""
    if len(said) >= 20:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(dict.fromkeys([*a, *b])):
            if k not in b:
                said.append(f"{where}.{k}: removed")
            elif k not in a:
                said.append(f"{where}.{k}: added")
            else:
                _json_diff(a[k], b[k], f"{where}.{k}", said)
        if list(a) != list(b) and not said:
            said.append(f"{where}: keys in another order")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            _json_diff(x, y, f"{where}[{i}]", said)
    elif a != b or type(a) is not type(b):
        said.append(f"{where}: {json.dumps(a, ensure_ascii=False)[:200]} -> "
                    f"{json.dumps(b, ensure_ascii=False)[:200]}")


def _text_diff(a: str, b: str, name: str) -> list[str]:
    import difflib
    lines = list(difflib.unified_diff(a.splitlines(), b.splitlines(), "before", "after", n=0, lineterm=""))
    return [f"{name}: {ln[:300]}" for ln in lines[2:22]]


def moved_names(path: Path) -> dict[str, str]:
    """Each moved function's old name -> its new one, qualified ("report.derive.analyses.ratio")
    and short as the catalogue keys it ("analyses.ratio", report.ledger.quantity_name), from a
    file of [<old module>] tables, function = its new module; and each file a text cites by
    name -> the file it is now, from its [files] table; bad input: ValueError."""
    from report.ledger import quantity_name
    try:
        tables = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ValueError(f"{path}: {e}") from None
    out: dict[str, str] = {}
    for old, funcs in tables.items():
        if not isinstance(funcs, dict) or not all(isinstance(m, str) for m in funcs.values()):
            raise ValueError(f"{path}: [{old}] maps each function to its new module (a string)")
        for name, new in funcs.items():
            if old == "files":
                out[name] = new
                continue
            out[f"{old}.{name}"] = f"{new}.{name}"
            out[quantity_name(f"{old}.{name}")] = quantity_name(f"{new}.{name}")
    return out


def renamer(moved: dict[str, str]):
    """TEXT with every old name of MOVED (a whole dotted name, not part of a longer one) read as
    its new one, and how many it replaced."""
    if not moved:
        return lambda text: (text, 0)
    pattern = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, sorted(moved, key=len, reverse=True)))
                         + r")(?![\w])")

    def rename(text: str) -> tuple[str, int]:
        return pattern.subn(lambda m: moved[m.group(1)], text)
    return rename


def compare(before: Path, after: Path, moved: dict[str, str] | None = None) -> int:
    """Print every file that differs (and where); 1 when any does. With MOVED (moved_names), a
    file that differs only by moved functions' names is accepted, and those are counted."""
    rename = renamer(moved or {})
    accepted = accepted_files = 0
    names_a = {p.name for p in before.iterdir()}
    names_b = {p.name for p in after.iterdir()}
    bad = 0
    for n in sorted(names_a - names_b):
        print(f"{n}: missing after")
        bad += 1
    for n in sorted(names_b - names_a):
        print(f"{n}: new after")
        bad += 1
    for n in sorted(names_a & names_b):
        x, y = (before / n).read_bytes(), (after / n).read_bytes()
        if x == y:
            continue
        if moved:
            text, k = rename(x.decode())
            x = text.encode()
            if x == y:
                accepted, accepted_files = accepted + k, accepted_files + 1
                continue
        bad += 1
        if n.endswith(".json"):
            said: list[str] = []
            _json_diff(json.loads(x), json.loads(y), n, said)
            print("\n".join(said or [f"{n}: differs in bytes only"]))
        else:
            print("\n".join(_text_diff(x.decode(), y.decode(), n) or [f"{n}: differs"]))
    if moved is not None:
        print(f"{accepted} moved-name differences accepted, in {accepted_files} files", file=sys.stderr)
    print(f"{len(names_a & names_b)} files compared, {bad} differ", file=sys.stderr)
    return 1 if bad else 0


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "build":
        return build(Path(argv[1]).resolve(), svg="--no-svg" not in argv)
    if len(argv) == 3 and argv[0] == "compare":
        return compare(Path(argv[1]), Path(argv[2]))
    if len(argv) == 5 and argv[0] == "compare" and argv[3] == "--moved":
        try:
            moved = moved_names(Path(argv[4]))
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        return compare(Path(argv[1]), Path(argv[2]), moved)
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
