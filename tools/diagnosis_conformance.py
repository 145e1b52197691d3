"""The diagnosis against the controlled-cause corpus: each forced cause, and each rule that must
stay silent, against what the report judged; then the confusion table of bottlenecks.

    .venv/bin/python tools/diagnosis_conformance.py [BUNDLE ...]   # exit 1 if any check fails

Without arguments: every committed bundle whose plan has an [expect] table (the corpus under
tests/fixtures/corpus/ and the rounds under runs/).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from report.judge.conformance import (  # noqa: E402
    bundle_checks,
    checks_table,
    confusion_table,
    plan_expectations,
)


def corpus_bundles() -> list[Path]:
    """Every committed bundle whose plan states expectations."""
    found = sorted((ROOT / "tests" / "fixtures" / "corpus").glob("*/bundle")) + \
        sorted((ROOT / "runs").glob("round-*/bundle"))
    return [p for p in found if plan_expectations(p)]


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or corpus_bundles()
    checks = [c for p in paths for c in bundle_checks(p)]
    print(checks_table(checks))
    print()
    print(confusion_table(checks))
    failed = [c for c in checks if not c.holds]
    held = [c for c in checks if c.holdout]
    print(f"\n{len(checks) - len(failed)} of {len(checks)} checks hold over {len(paths)} bundles; "
          f"of the {len(held)} on cases kept out of tuning, {sum(c.holds for c in held)} hold")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
