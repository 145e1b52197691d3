"""README.md's list of verbs, made from serving_ledger/verbs/: print it, or --write it in place.

    .venv/bin/python tools/verb_list.py [--write]
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from serving_ledger.cli import verb_list  # noqa: E402
from tools.doc_block import main  # noqa: E402

README = ROOT / "README.md"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], README, "verbs", verb_list))
