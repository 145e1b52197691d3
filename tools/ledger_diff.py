"""Compare two folders of `ledger --json` / `findings --json` dumps key by key."""

import json
import sys
from pathlib import Path


def ledger_changes(before: dict, after: dict) -> tuple[list[str], list[str], list[str]]:
    """Changed, removed and added keys between two `ledger --json` values maps."""
    old, new = before["values"], after["values"]
    changed = [k for k in old.keys() & new.keys() if old[k] != new[k]]
    return sorted(changed), sorted(old.keys() - new.keys()), sorted(new.keys() - old.keys())


def main(argv: list[str]) -> int:
    """Print every difference between the dumps of two folders; exit 1 when any value moved."""
    before_dir, after_dir = Path(argv[0]), Path(argv[1])
    moved = 0
    for before in sorted(before_dir.glob("*.json")):
        after = after_dir / before.name
        if not after.exists():
            print(f"{before.name}: missing after")
            moved += 1
            continue
        old, new = json.loads(before.read_text()), json.loads(after.read_text())
        if before.name.endswith(".ledger.json"):
            changed, removed, added = ledger_changes(old, new)
            for k in changed:
                print(f"{before.name}: changed {k}: {old['values'][k]} -> {new['values'][k]}")
            for k in removed:
                print(f"{before.name}: removed {k}")
            for k in added:
                print(f"{before.name}: added {k}")
            moved += len(changed) + len(removed)
            print(f"{before.name}: {len(old['values'])} keys, {len(changed)} changed, "
                  f"{len(removed)} removed, {len(added)} added")
        elif old != new:
            print(f"{before.name}: findings differ")
            moved += 1
    return 1 if moved else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
