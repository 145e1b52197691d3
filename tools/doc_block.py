"""A block of a document that a tool writes from the code: between `<!-- NAME -->` and
`<!-- /NAME -->` lines. Printed, or with --write put in place (exit 2 without the markers)."""

import re
import sys
from pathlib import Path
from typing import Callable


def block(name: str) -> re.Pattern:
    """The block NAME of a document: (opening marker line, its text, closing marker line)."""
    return re.compile(rf"(<!-- {name} -->\n)(.*?)(<!-- /{name} -->\n)", re.S)


def main(argv: list[str], doc: Path, name: str, make: Callable[[], str]) -> int:
    """Print MAKE's text; with --write, put it in DOC's block NAME."""
    if argv[:1] != ["--write"]:
        print(make(), end="")
        return 0
    text = doc.read_text(encoding="utf-8")
    if not block(name).search(text):
        print(f"{doc.name} has no <!-- {name} --> ... <!-- /{name} --> block", file=sys.stderr)
        return 2
    doc.write_text(block(name).sub(lambda m: m[1] + make() + m[3], text), encoding="utf-8")
    return 0
