"""Data parallel: engines kept apart by vLLM's `engine` label and their load balance (report/derive/occupancy.py).

No data-parallel round could be recorded (no multi-GPU machine): the two-engine scrapes below are
HAND-BUILT in the format our collector writes (metrics.jsonl: label-keyed samples per scrape),
not measured; round 6 is a real one-engine round."""

from __future__ import annotations

import pytest

from bundle.metric_keys import sample_key
from report.derive import occupancy as OC
from report.ledger import Absent
from tests.conftest import ROOT


def scrape(t: float, **finished: float) -> dict:
    """One answered scrape whose engines (by label) have finished so many requests (hand-built)."""
    return {"t": t, "dt": 0.01, "ok": True,
            "samples": {sample_key(OC.FINISHED, {"engine": e, "finished_reason": "length",
                                                 "model_name": "m"}): n for e, n in finished.items()}}


def test_two_engines_are_kept_apart_and_their_balance_is_max_over_mean():
    # Engine 0 finishes 30 requests in 10 s, engine 1 10: rates 3 and 1 req/s, mean 2, balance 1.5.
    scrapes = [scrape(0.0, **{"0": 0, "1": 0}), scrape(10.0, **{"0": 30, "1": 10})]
    assert OC.engines_seen(scrapes, 0.0, 10.0) == 2
    assert OC.engine_load_balance(scrapes, 0.0, 10.0) == pytest.approx(1.5)
    even = [scrape(0.0, **{"0": 0, "1": 0}), scrape(10.0, **{"0": 20, "1": 20})]
    assert OC.engine_load_balance(even, 0.0, 10.0) == pytest.approx(1.0)


def test_one_engine_has_no_balance_and_no_counter_says_so():
    scrapes = [scrape(0.0, **{"0": 0}), scrape(10.0, **{"0": 30})]
    assert OC.engines_seen(scrapes, 0.0, 10.0) == 1
    with pytest.raises(Absent) as e:
        OC.engine_load_balance(scrapes, 0.0, 10.0)
    assert e.value.reason.code == "reason.one_engine"
    with pytest.raises(Absent) as e:
        OC.engines_seen([{"t": 0.0, "dt": 0.01, "ok": True, "samples": {}}], 0.0, 1.0)
    assert e.value.reason.code == "reason.no_finished_counter"
    idle = [scrape(0.0, **{"0": 5, "1": 5}), scrape(10.0, **{"0": 5, "1": 5})]
    with pytest.raises(Absent) as e:
        OC.engine_load_balance(idle, 0.0, 10.0)
    assert e.value.reason.code == "reason.no_request_finished_in_window"


def test_round6_is_one_engine_in_its_ledger():
    from bundle.store import read_bundle
    from report.derive.round_ledger import read_round
    from report.judge.verdicts import build_ledger
    path = ROOT / "runs" / "round-6" / "bundle"
    if not path.is_dir():
        pytest.skip("runs/round-6 is not in this checkout")
    led = build_ledger(read_round(read_bundle(path)))
    assert led.value_of("p.L1024-c64.engines_seen") == 1
    assert led["p.L1024-c64.engine_load_balance"].missing.code == "reason.one_engine"
