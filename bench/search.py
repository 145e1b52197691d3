"""The concurrencies a search sweep runs ([sweep] search = "slo"), chosen from whether each met the SLO.

Exponential probe, then bisection (as GuideLLM's goodput profile and AIPerf's SLA search):
from the start, double while a point meets the SLO, up to the maximum; once one fails,
bisect (geometric mean, whole numbers) between the largest that met it and the smallest
that did not, until they are within the tolerance of the lower and one apart at least.
Invariant: every concurrency proposed lies strictly between what met and what failed so far,
so no point runs twice and the search ends.
"""

from __future__ import annotations

import math


class SloSearch:
    """Proposes the next concurrency from the verdicts recorded so far; None when done."""

    def __init__(self, start: int, maximum: int, tolerance: float):
        self.start, self.maximum, self.tolerance = start, maximum, tolerance
        self.met: int | None = None        # the largest concurrency that met the SLO
        self.failed: int | None = None     # the smallest that did not
        self.probed: list[tuple[int, bool]] = []

    def record(self, concurrency: int, met: bool) -> None:
        """What the point at CONCURRENCY showed."""
        self.probed.append((concurrency, met))
        if met:
            self.met = max(self.met or 0, concurrency)
        else:
            self.failed = min(self.failed or concurrency, concurrency)

    def next(self) -> int | None:
        """The next concurrency to run, or None when the bracket is as narrow as asked."""
        if not self.probed:
            return self.start
        if self.failed is None:
            if self.met >= self.maximum:
                return None                         # met up to the maximum: beyond the search
            return min(self.met * 2, self.maximum)
        lo, hi = self.met or 0, self.failed
        if hi - lo <= max(1.0, self.tolerance * lo):
            return None
        c = int(math.sqrt(lo * hi)) if lo else hi // 2
        c = min(max(c, lo + 1), hi - 1)
        return c if c > 0 else None
