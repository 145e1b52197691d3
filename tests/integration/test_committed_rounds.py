"""The whole recorded rounds of runs/: their request tables read as json reads them.

The same check runs in tests/unit on the trimmed bundles of tests/fixtures; a whole round
takes up to ~20 s to read twice, so these live here.
"""

from __future__ import annotations

import pytest

from tests.conftest import ROOT
from tests.unit.report.test_request_table import check_reads_as_json

ROUNDS = sorted((ROOT / "runs").glob("round-*/bundle"))


@pytest.mark.parametrize("bundle", ROUNDS, ids=lambda p: p.parent.name)
def test_committed_rounds_read_as_json_reads_them(bundle):
    check_reads_as_json(bundle)
