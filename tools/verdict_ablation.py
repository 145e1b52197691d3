"""Each committed bundle's verdicts re-judged with one optional source taken away at a time.

    .venv/bin/python tools/verdict_ablation.py [BUNDLE ...]   # exit 1 if a verdict turns into another limit

Without arguments: every bundle of the controlled-cause corpus and every committed round.
Prints the table (`=` where the verdict stands, else the verdict and how it stands to the full
one) and a count of each relation, valid points apart.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from report.judge.ablation import ablate, ablation_table  # noqa: E402


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or sorted((ROOT / "tests" / "fixtures" / "corpus").glob("*/bundle")) + \
        sorted((ROOT / "runs").glob("round-*/bundle"))
    cells = [c for p in paths for c in ablate(p)]
    print(ablation_table(cells))
    print()
    for label, pick in (("valid points", lambda c: c.valid), ("points that failed a check", lambda c: not c.valid)):
        counts = Counter((c.source, c.relation) for c in cells if pick(c))
        print(f"{label}:")
        for source in dict.fromkeys(c.source for c in cells):
            print(f"  no {source}: " + ", ".join(f"{r} {counts[(source, r)]}"
                                                 for r in ("same", "weaker", "sharper", "next", "silent", "other")))
    # A valid point's limit must never turn into another one (an invalid point names no limit on page 1).
    return 1 if any(c.relation == "other" and c.valid for c in cells) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
