"""Write a synthetic Mooncake-format trace drawn from published statistics; no line is a real request.

Usage: python tools/synth_trace.py OUT.jsonl [--requests N] [--seed S]

What is published, and used as the distributions' means (kvcache-ai/Mooncake's open trace and
its technical report, arXiv 2407.00079): 23,608 requests over one hour (timestamps 0 to
3,600,000 ms), a mean input of 7,590 tokens and a mean output of 182 tokens, prompts given as
512-token block hashes where requests of one conversation share their leading blocks.
What is chosen here, since the trace's spreads and reuse are not published as numbers:
  arrivals   Poisson at the published mean rate (23,608 / 3,600 s)
  input      lognormal, mean 7,590, sd 5,000, clamped to [600, 15,000] tokens
  output     lognormal, mean 182, sd 150, clamped to [1, 1,024] tokens
  reuse      with probability 1/2 a request continues one of the 64 latest conversations and
             shares that conversation's root blocks (all but its own last block at most);
             otherwise it starts a conversation whose root is its first three quarters
Seeded: the same arguments write the same file.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path

RATE_PER_S = 23_608 / 3_600
INPUT = (7_590.0, 5_000.0, 600, 15_000)
OUTPUT = (182.0, 150.0, 1, 1_024)
REUSE, RECENT, BLOCK = 0.5, 64, 512


def lognormal(rng: random.Random, mean: float, sd: float, low: int, high: int) -> int:
    """A lognormal draw with this mean and sd, rounded and clamped to [LOW, HIGH]."""
    s2 = math.log(1 + (sd / mean) ** 2)
    return min(high, max(low, round(rng.lognormvariate(math.log(mean) - s2 / 2, math.sqrt(s2)))))


def synth(n: int, seed: int) -> list[dict]:
    """N trace lines, in arrival order."""
    rng = random.Random(seed)
    t, next_id, roots, out = 0.0, 0, [], []
    for _ in range(n):
        t += rng.expovariate(RATE_PER_S)
        inp, outp = lognormal(rng, *INPUT), lognormal(rng, *OUTPUT)
        blocks = math.ceil(inp / BLOCK)
        if roots and rng.random() < REUSE:
            root = rng.choice(roots[-RECENT:])
            ids = root[:min(len(root), blocks - 1)]
        else:
            ids, root = [], None
        ids = ids + list(range(next_id, next_id + blocks - len(ids)))
        next_id = ids[-1] + 1   # new blocks take fresh ids; shared ones are earlier ids
        if root is None:
            roots.append(ids[:max(1, (3 * blocks) // 4)])
        out.append({"timestamp": round(t * 1000), "input_length": inp, "output_length": outp,
                    "hash_ids": ids})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--requests", type=int, default=260)
    ap.add_argument("--seed", type=int, default=10)
    a = ap.parse_args()
    rows = synth(a.requests, a.seed)
    a.out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    print(f"{a.out}: {len(rows)} requests over {rows[-1]['timestamp'] / 1000:.1f} s")


if __name__ == "__main__":
    main()
