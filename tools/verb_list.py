"""README.md's list of verbs, made from serving_ledger/verbs/: print it, or --write it in place.

    .venv/bin/python tools/verb_list.py [--write]
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from serving_ledger.cli import verb_list  # noqa: E402

README = ROOT / "README.md"
# The list stands between these two lines of README.md.
BLOCK = re.compile(r"(<!-- verbs -->\n)(.*?)(<!-- /verbs -->\n)", re.S)


def main(argv: list[str]) -> int:
    """Print the list; with --write, put it in README.md between its markers."""
    if argv[:1] != ["--write"]:
        print(verb_list(), end="")
        return 0
    text = README.read_text(encoding="utf-8")
    if not BLOCK.search(text):
        print("README.md has no <!-- verbs --> ... <!-- /verbs --> block", file=sys.stderr)
        return 2
    README.write_text(BLOCK.sub(lambda m: m[1] + verb_list() + m[3], text), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
