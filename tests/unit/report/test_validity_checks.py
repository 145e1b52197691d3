"""The validity checks are data: each names a known code, reads only the signals it declares,
cites rules the ledger traces, and applies where it says; the loop keeps their declared order."""

from __future__ import annotations

import itertools

from report.derive import validity as V
from report.judge.diagnosis import CHECKS, VALIDITY_CODES, At, point_validity
from report.ledger import Ledger

# HAND-BUILT values a getter answers with: absent, small, a middling share, large.
PROBES = (None, 0.0, 0.5, 1.0, 40.0)


def test_every_check_names_a_code_once_and_cites_traced_rules():
    codes = [c.code for c in CHECKS]
    assert len(codes) == len(set(codes))
    assert set(codes) <= set(VALIDITY_CODES)
    for check in CHECKS:
        assert check.cites, check.code
        for key in check.cites:
            assert key.startswith("r.rule_") and callable(getattr(V, key[2:], None)), (check.code, key)
        assert set(check.shown) <= set(check.reads), check.code
        section, _, setting = check.remedy.partition(".")
        assert section in ("sweep", "client", "sampler") and setting, check.code


def test_a_check_reads_only_the_signals_it_declares():
    for check, at, value in itertools.product(CHECKS, (At(8, False), At(8, True), At(1, False)), PROBES):
        read: list[str] = []

        def get(name: str, read=read, value=value):
            read.append(name)
            return value
        if check.where(at):
            check.test(get, at)
            assert set(read) <= set(check.reads), (check.code, sorted(set(read) - set(check.reads)))


def test_checks_apply_where_they_say():
    where = {c.code: c for c in CHECKS}
    assert where["over_saturated"].where(At(8, True)) and not where["over_saturated"].where(At(8, False))
    assert where["not_held"].where(At(8, False)) and not where["not_held"].where(At(8, True))
    # A single stream is never called lockstep; an open loop has no set concurrency to hold.
    assert not where["lockstep"].where(At(1, False)) and not where["lockstep"].where(At(8, True))
    assert where["lockstep"].where(At(2, False))


def test_an_empty_point_lists_every_applying_check_as_not_made_in_the_declared_order():
    led = Ledger()
    led.record("p.x.concurrency", 4, doc="Concurrent requests held in flight")
    v = point_validity(led, "x")
    assert v.valid and v.reasons == []
    assert v.unchecked == [c.code for c in CHECKS if c.where(At(4, False))]
    # Lockstep's signals are its evidence at every point, where it applies or not.
    assert {"p.x.send_synchrony", "p.x.waiting_peak"} <= set(v.evidence)
