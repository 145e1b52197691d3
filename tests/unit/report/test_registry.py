"""The resolver's declared ways for quantities of some points only (report/registry.py).

- a quantity that returns DOES_NOT_APPLY, or reads a raw input that holds it, records no key,
  and the quantities of the same call that read it are skipped, unless the round has a value
  of that name (then they read the round's);
- a first_present quantity binds and cites its first input present only;
- a point quantity may share its name with a round quantity;
- after_valid_points splits a module's point quantities into two resolve phases, and one of
  the first phase may not read one of the second;
- a generic function declared with bound_quantity is resolved with its declaring module's
  quantities, and recorded as itself; point_quantity(key=...) names the key.
"""

from __future__ import annotations

import pytest

from report import registry as RG
from report.derive import arith as A
from report.ledger import Ledger, Reason
from report.registry import (
    DOES_NOT_APPLY,
    RawSources,
    bound_quantity,
    point_quantity,
    resolve_point,
    round_quantity,
)


@pytest.fixture
def fresh(monkeypatch):
    """An empty registry for the quantities one test declares."""
    monkeypatch.setattr(RG, "REGISTRY", {})


def test_a_quantity_that_does_not_apply_records_no_key(fresh):
    @point_quantity(unit="req")
    def sent(open_loop_requests: list) -> int:
        """Requests an open loop sent."""
        return len(open_loop_requests)

    @point_quantity(unit="req")
    def sent_twice(sent: int) -> int:
        """Twice the requests an open loop sent."""
        return 2 * sent

    @point_quantity(unit="")
    def odd(n: int) -> int:
        """N where it is odd."""
        return n if n % 2 else DOES_NOT_APPLY

    @point_quantity(unit="")
    def odd_plus_one(odd: int) -> int:
        """One more than the odd N."""
        return odd + 1

    for pid, reqs, n in (("open", [1, 2, 3], 3), ("closed", DOES_NOT_APPLY, 4)):
        led = Ledger()
        raw = RawSources()
        raw.add("open_loop_requests", reqs, ("requests.jsonl",))
        raw.add("n", n)
        resolve_point(led, __name__, pid, raw)
        k = f"p.{pid}."
        if pid == "open":
            assert led.value_of(k + "sent_twice") == 6 and led[k + "sent_twice"].sources == ("requests.jsonl",)
            assert led.value_of(k + "odd_plus_one") == 4
        else:
            assert set(led.values) == set()


def test_a_quantity_that_does_not_apply_leaves_the_rounds_of_its_name(fresh):
    @point_quantity(unit="tok")
    def pool(set_pool: int) -> int:
        """The point's server set's pool."""
        return set_pool

    @point_quantity(unit="tok")
    def half_pool(pool: int) -> float:
        """Half the pool."""
        return pool / 2

    led = Ledger()
    led.record("r.pool", 100, unit="tok", doc="The round's pool")
    raw = RawSources()
    raw.add("set_pool", DOES_NOT_APPLY)
    resolve_point(led, __name__, "a", raw)
    assert "p.a.pool" not in led and led.value_of("p.a.half_pool") == 50


def test_a_point_quantity_may_share_its_name_with_a_round_one(fresh):
    @round_quantity(unit="")
    def shared() -> int:
        """The round's."""
        return 1

    @point_quantity(unit="")
    def shared(x: int) -> int:  # noqa: F811
        """The point's."""
        return x

    assert {"round.shared", "point.shared"} <= set(RG.REGISTRY)
    with pytest.raises(ValueError, match="declared twice"):
        point_quantity(unit="")(shared)


def test_first_present_binds_and_cites_its_first_input_present(fresh):
    @point_quantity(unit="ms", first_present=True)
    def reference(engine: float | None = None, client: float | None = None) -> float:
        """The engine's where it was sampled, else the client's."""
        return engine if engine is not None else client

    for engine, want, cites in ((5.0, 5.0, ("metrics.jsonl",)), (None, 7.0, ("requests.jsonl",))):
        led = Ledger()
        led.record("p.a.engine", engine, unit="ms", doc="engine", sources=("metrics.jsonl",))
        led.record("p.a.client", 7.0, unit="ms", doc="client", sources=("requests.jsonl",))
        resolve_point(led, __name__, "a", RawSources())
        v = led["p.a.reference"]
        assert v.value == want and v.sources == cites and len(v.inputs) == 1
    led = Ledger()
    led.record("p.a.engine", None, unit="ms", doc="engine")
    led.record("p.a.client", None, unit="ms", doc="client")
    resolve_point(led, __name__, "a", RawSources())
    assert not led["p.a.reference"].present and led["p.a.reference"].missing.param("input") == "client"


def test_after_valid_points_resolves_in_two_phases(fresh):
    @point_quantity(unit="")
    def first(x: int) -> int:
        """Resolved while the round is measured."""
        return x

    @point_quantity(unit="", after_valid_points=True)
    def second(first: int, y: int) -> int:
        """Resolved once validity is known."""
        return first + y

    led = Ledger()
    raw = RawSources()
    raw.add("x", 1)
    resolve_point(led, __name__, "a", raw, after_valid_points=False)
    assert set(led.values) == {"p.a.first"}
    raw.add("y", 2)
    resolve_point(led, __name__, "a", raw, after_valid_points=True)
    assert led.value_of("p.a.second") == 3

    @point_quantity(unit="")
    def too_early(second: int) -> int:
        """Reads a quantity of the later phase."""
        return second

    with pytest.raises(ValueError, match="after the valid points"):
        resolve_point(Ledger(), __name__, "b", raw, after_valid_points=False)


def test_a_bound_quantity_is_its_declaring_modules_and_recorded_as_its_function(fresh):
    bound_quantity("point", "tail_over_step", A.ratio, unit="×", numerator="itl_ms_p99", denominator="step_ms")

    @point_quantity(unit="", key="fast")
    def step_under_ten_ms(step_ms: float) -> bool:
        """Whether the step took under 10 ms."""
        return step_ms < 10

    assert {d.module for d in RG.REGISTRY.values()} == {__name__}
    led = Ledger()
    led.record("p.a.itl_ms_p99", 12.0, unit="ms", doc="ITL p99", sources=("requests.jsonl",))
    raw = RawSources()
    raw.add("step_ms", 8.0, ("metrics.jsonl",))
    resolve_point(led, __name__, "a", raw)
    v = led["p.a.tail_over_step"]
    assert v.value == 1.5 and v.unit == "×" and v.func == "report.derive.arith.ratio"
    assert v.inputs == (("itl_ms_p99", "p.a.itl_ms_p99"), ("step_ms", "8"))
    assert v.sources == ("metrics.jsonl", "requests.jsonl")
    assert led.value_of("p.a.fast") is True and "p.a.step_under_ten_ms" not in led


def test_an_input_nothing_declares_and_no_raw_source_gives_is_a_fault_not_an_absence(fresh):
    @point_quantity(unit="req")
    def sent(requests: list) -> int:
        """Requests sent."""
        return len(requests)

    @point_quantity(unit="req")
    def sent_per_worker(sent: int, worker_count: int) -> float:
        """Requests sent per worker (WORKER_COUNT: a raw input this test's raw sources lack)."""
        return sent / worker_count

    @point_quantity(unit="req")
    def doubled(sent: int) -> int:
        """Twice the requests sent."""
        return 2 * sent

    led, raw = Ledger(), RawSources()
    raw.add("requests", [1, 2])
    with pytest.raises(LookupError, match="worker_count"):
        resolve_point(led, __name__, "p", raw)
    # A declared quantity that could not be derived is an absence with its reason, as before.
    led, raw = Ledger(), RawSources()
    raw.add("requests", Reason.of("reason.no_samples"))
    raw.add("worker_count", 2)
    resolve_point(led, __name__, "p", raw)
    assert not led["p.p.doubled"].present
