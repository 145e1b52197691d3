"""Write the first N whole conversations of a ShareGPT-format file, each cut to its first two turns.

Usage: python tools/trim_sharegpt.py SOURCE.json N OUT.json

Nothing is rewritten: a kept conversation's `id` and its first two turns' `from` and `value` are
copied as they are; conversations after the N-th, later turns and any cut-off tail are left out.
The output is a JSON array the `sharegpt` workload reads (bench/datasets.py), small enough to
commit beside a round's plan. The source file is only read.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def first_conversations(text: str, n: int) -> list[dict]:
    """The first N whole records of a JSON array that may be cut off mid-record, two turns each."""
    dec = json.JSONDecoder()
    pos = text.index("[") + 1
    out: list[dict] = []
    while len(out) < n:
        while text[pos] in " \t\r\n,":
            pos += 1
        if text[pos] == "]":
            break
        try:
            rec, pos = dec.raw_decode(text, pos)
        except json.JSONDecodeError:
            break   # the cut tail
        turns = [{"from": t["from"], "value": t["value"]} for t in rec.get("conversations", [])[:2]]
        out.append({"id": rec.get("id"), "conversations": turns})
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    src, dst = Path(argv[0]), Path(argv[2])
    if not argv[1].isdigit():
        print(f"error: N: {argv[1]!r} is not a whole number", file=sys.stderr)
        return 2
    if not src.is_file():
        print(f"error: {src}: no such file", file=sys.stderr)
        return 2
    if dst.exists() and dst.resolve() == src.resolve():
        print(f"error: {dst}: is the source; the source is only read", file=sys.stderr)
        return 2
    kept = first_conversations(src.read_text(encoding="utf-8"), int(argv[1]))
    dst.write_text(json.dumps(kept, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    print(f"{dst}: {len(kept)} conversations, {dst.stat().st_size} bytes, from {src}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
