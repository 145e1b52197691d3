"""tests/unit: no engine, no browser, no PDF, nothing outside the checkout (`make unit`).

A test here that is marked `engine` or `slow`, or asks for the session engine, belongs in
tests/integration; collection fails on one rather than letting it slow or skip the unit run.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config, items):
    misplaced = [item.nodeid for item in items
                 if "/unit/" in item.nodeid.replace("\\", "/")
                 and (item.get_closest_marker("engine") or item.get_closest_marker("slow")
                      or "engine" in getattr(item, "fixturenames", ()))]
    if misplaced:
        raise pytest.UsageError("tests/unit holds tests that need the engine or are slow; move "
                                "them to tests/integration: " + ", ".join(misplaced))
