"""The property-based (fuzz) tests under a stated time budget.

Every Hypothesis test of the suite is marked `fuzz` when collected. Run as CI runs it
(`make test`, `make unit`), each runs the examples its settings fix, from a fixed seed
(`derandomize=True`), so a run is repeatable and its time bounded: the fuzz set stays under
CI_SECONDS on this project's two-core test host (tests/unit's in about 20 s, the concurrent
writers' of tests/integration in 47 s), and the terminal summary states what it took.

`FUZZ_SECONDS=N` (`make fuzz`, `make fuzz FUZZ_SECONDS=3600`) makes it a longer search instead:
the N seconds are shared equally among the fuzz tests selected, and each one runs its settings'
examples again and again, every time from a fresh random seed (Hypothesis's `seed`, which takes
precedence over `derandomize`), until its share is spent. A failure names the seed that found
it, so `@seed(...)` on the test reproduces it.
"""

from __future__ import annotations

import os
import random
import time

import pytest
from hypothesis import is_hypothesis_test, seed

# What the fuzz set may cost as CI runs it (s): its examples are chosen to stay under this.
CI_SECONDS = 120
ENV = "FUZZ_SECONDS"


def fuzz_seconds() -> float | None:
    """The long run's budget in seconds (FUZZ_SECONDS), None when CI's fixed examples run;
    a value that is no positive number is a usage error, not a silent CI run."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 7 * 86400:
        raise pytest.UsageError(f"{ENV}={text!r}: expected seconds, a number above 0 and under a week")
    return value


class FuzzBudget:
    """Marks the fuzz tests, runs each for its share of a long run's budget, and states the time."""

    def __init__(self, budget: float | None):
        self.budget = budget
        self.share: float | None = None
        self.spent = 0.0
        self.count = 0
        self.runs: dict[str, int] = {}

    @pytest.hookimpl(tryfirst=True)     # marked before `-m fuzz` selects by the mark
    def pytest_collection_modifyitems(self, config, items):
        for item in items:
            if is_hypothesis_test(getattr(item, "obj", None)):
                item.add_marker(pytest.mark.fuzz)

    def pytest_collection_finish(self, session):
        # Shared among the tests that run, once deselection (-m, -k) has been applied.
        selected = [item for item in session.items if item.get_closest_marker("fuzz")]
        self.count = len(selected)
        if self.budget and selected:
            self.share = self.budget / len(selected)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        start = time.monotonic()
        yield
        if item.get_closest_marker("fuzz"):
            self.spent += time.monotonic() - start

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem):
        test = getattr(pyfuncitem.obj, "__func__", pyfuncitem.obj)
        if self.share is None or not is_hypothesis_test(test):
            return None
        args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
        kept = (test._hypothesis_internal_use_seed, test._hypothesis_internal_use_settings)
        end = time.monotonic() + self.share
        draw = random.SystemRandom()
        runs = 0
        try:
            while True:
                s = draw.getrandbits(63)
                seed(s)(test)
                try:
                    pyfuncitem.obj(**args)
                except BaseException as e:
                    e.add_note(f"fuzz: found with seed {s}; @seed({s}) on the test reproduces it")
                    raise
                runs += 1
                if time.monotonic() >= end:
                    break
        finally:
            test._hypothesis_internal_use_seed, test._hypothesis_internal_use_settings = kept
            self.runs[pyfuncitem.nodeid] = runs
        return True

    def pytest_terminal_summary(self, terminalreporter):
        if not self.count:
            return
        if self.budget:
            done = sum(self.runs.values())
            terminalreporter.write_line(
                f"fuzz: {self.count} property tests, {self.spent:.0f} s of the {self.budget:g} s "
                f"budget ({ENV}), {done} seeded runs of their examples")
        else:
            over = " (over it: lower the examples of the slowest)" if self.spent > CI_SECONDS else ""
            terminalreporter.write_line(
                f"fuzz: {self.count} property tests, their fixed examples in {self.spent:.0f} s, "
                f"budget {CI_SECONDS} s{over}; {ENV}=N runs a longer search")


def pytest_configure(config):
    config.addinivalue_line("markers", "fuzz: a property-based test (Hypothesis), run under the "
                                       "fuzz budget (tests/fuzzbudget.py)")
    config.pluginmanager.register(FuzzBudget(fuzz_seconds()), "fuzzbudget")
