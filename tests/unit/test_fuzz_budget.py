"""The fuzz budget (tests/fuzzbudget.py): CI runs each property test's fixed examples once; a
FUZZ_SECONDS budget keeps searching from fresh seeds until each test's share is spent, and a
failure names the seed that reproduces it."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT

PROPERTY = '''
from hypothesis import given, settings, strategies as st

CALLS = []

@settings(max_examples=10, derandomize=True, deadline=None)
@given(n=st.integers(0, 10 ** 9))
def test_property(n):
    CALLS.append(n)
    assert n % 50 != 7 or {fail}

def test_plain():
    pass

def test_calls_counted():
    print("examples run:", len(CALLS))
'''


def pytest_run(tmp_path, body: str, fuzz_seconds: str | None, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text("from tests.fuzzbudget import pytest_configure  # noqa: F401\n")
    (tmp_path / "test_it.py").write_text(body)
    env = {k: v for k, v in os.environ.items() if k != "FUZZ_SECONDS"}
    env["PYTHONPATH"] = str(ROOT)
    if fuzz_seconds is not None:
        env["FUZZ_SECONDS"] = fuzz_seconds
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), str(tmp_path / "test_it.py"), *args],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_ci_runs_the_fixed_examples_once_and_states_the_time(tmp_path):
    r = pytest_run(tmp_path, PROPERTY.format(fail="True"), None)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "examples run: 10" in r.stdout
    assert "fuzz: 1 property tests, their fixed examples in" in r.stdout
    # -m fuzz selects the property tests alone.
    r = pytest_run(tmp_path, PROPERTY.format(fail="True"), None, "-m", "fuzz")
    assert "1 passed, 2 deselected" in r.stdout, r.stdout


def test_a_budget_searches_from_fresh_seeds_until_its_share_is_spent(tmp_path):
    r = pytest_run(tmp_path, PROPERTY.format(fail="True"), "2")
    assert r.returncode == 0, r.stdout + r.stderr
    runs = int(r.stdout.split("examples run: ")[1].split()[0])
    assert runs > 10 and runs % 10 == 0
    assert "fuzz: 1 property tests," in r.stdout and "of the 2 s budget (FUZZ_SECONDS)" in r.stdout


def test_a_failure_found_by_the_search_names_its_seed(tmp_path):
    # About 1 in 50 examples fails: a search of a few seeded runs finds one.
    r = pytest_run(tmp_path, PROPERTY.format(fail="False"), "20")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "fuzz: found with seed" in r.stdout and "reproduces it" in r.stdout


def test_a_budget_that_is_no_number_is_refused(tmp_path):
    r = pytest_run(tmp_path, PROPERTY.format(fail="True"), "ten")
    assert r.returncode == 4 and "FUZZ_SECONDS='ten': expected seconds" in r.stderr
