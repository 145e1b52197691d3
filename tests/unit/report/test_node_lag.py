"""A Ray round's client lag judged per node: the one node whose own loop lagged is named.

HAND-BUILT fixture: shard records and client.jsonl samples in the shape bench/ray_cluster.py
writes them (each worker's samples naming its worker and node), two nodes of one worker
each; node "b" lags 40 ms at the median, node "a" 1 ms; the driver's own samples name no node.
A second, of five nodes, has one node's tail past the rule where the merged p99 is not (TAIL_*).
"""

from __future__ import annotations

import pytest

from report.derive import validity as V
from report.derive.clienterror import nodes as CN
from report.judge.rules import RULES, Signals, facts_of
from report.ledger import Absent
from report.registry import DOES_NOT_APPLY

WINDOW = (0.0, 10.0)
SHARDS = [{"point": "p", "worker": 0, "node": "a", "status": "ok", "planned": 40, "sent": 40},
          {"point": "p", "worker": 1, "node": "b", "status": "ok", "planned": 40, "sent": 38}]


def samples(node_lag_ms: dict[str, float], driver_lag_ms: float = 0.5) -> list[dict]:
    """0.5 s samples over the window: each node's worker at its lag, and the driver's own."""
    rows = []
    for i in range(20):
        t = 0.25 + 0.5 * i
        rows.append({"t": t, "loop_lag_s": driver_lag_ms / 1e3, "tasks": 3})
        for k, (node, lag) in enumerate(node_lag_ms.items()):
            rows.append({"t": t, "loop_lag_s": lag / 1e3, "tasks": 40, "worker": k, "node": node})
    return rows


def lagging(rows: list[dict], itl_ms: float | None = 10.0) -> str:
    return CN.client_nodes_lagging(SHARDS, rows, WINDOW, V.LAG_MIN_MS, V.LAG_SHARE_OF_ITL, itl_ms)


def test_hand_built_fixture_names_the_one_node_that_lagged():
    rows = samples({"a": 1.0, "b": 40.0})
    assert lagging(rows) == "b"
    assert CN.node_client_lag_ms_p50(rows, WINDOW, "b") == pytest.approx(40.0)
    assert CN.node_client_lag_ms_p50(rows, WINDOW, "a") == pytest.approx(1.0)
    # The bar is the engine's pace where that is higher: 40 ms is not late against a 100 ms ITL.
    assert lagging(rows, itl_ms=100.0) == ""
    assert lagging(samples({"a": 1.0, "b": 2.0})) == ""


def test_hand_built_fixture_per_node_delivered_load():
    assert CN.node_items(SHARDS) == {"n0": {"node": "a"}, "n1": {"node": "b"}}
    assert CN.node_sent_requests(SHARDS, "b") == 38
    assert CN.node_sent_share(38, CN.node_planned_requests(SHARDS, "b")) == pytest.approx(0.95)
    dead = [SHARDS[0], {**SHARDS[1], "status": "died", "sent": None}]
    with pytest.raises(Absent):
        CN.node_sent_requests(dead, "b")


def test_samples_without_a_node_leave_the_lag_per_node_unknown_and_one_host_has_none():
    old = [{k: v for k, v in s.items() if k not in ("worker", "node")} for s in samples({"a": 1.0, "b": 40.0})]
    with pytest.raises(Absent):
        lagging(old)
    with pytest.raises(Absent):
        CN.node_client_lag_ms_p50(old, WINDOW, "a")
    assert CN.client_nodes_lagging([], old, WINDOW, V.LAG_MIN_MS, V.LAG_SHARE_OF_ITL) is DOES_NOT_APPLY


def _verdict(values: dict) -> tuple[str, str]:
    f = facts_of(Signals(lambda key: values.get(key), "p.p."), None)
    rule = next(r for r in RULES if r.when(f))
    return rule.bottleneck, rule.mechanism(f)


def test_hand_built_signals_one_lagging_node_makes_the_client_the_limit_and_names_it():
    # The merged lag median (3 ms) is under the rule; one node's is over it; the engine idle.
    base = {"p.p.concurrency": 64, "p.p.client_held_fraction": 0.95, "p.p.client_lag_ms_p50": 3.0,
            "p.p.engine_itl_ms_mean": 4.0, "p.p.engine_little_held_fraction": 0.5,
            "p.p.engine_held_fraction": 0.5}
    assert _verdict({**base, "p.p.client_nodes_lagging": "b"}) == ("client", "client_node_starved")
    f = facts_of(Signals(lambda key: {**base, "p.p.client_nodes_lagging": ""}.get(key), "p.p."), None)
    assert not f.client_side


def test_the_node_verdicts_sentence_names_the_node_in_both_languages_and_cites_known_keys():
    import report.judge.verdicts  # noqa: F401 (every quantity of a round registered)
    from report.judge.findings.finding import catalogue_texts as _texts
    from report.judge.findings.points import MECHANISMS
    from report.registry import REGISTRY
    from report.words import PLACEHOLDER
    assert "client_node_starved" in MECHANISMS
    texts = _texts("mechanism_client_node_starved", p="p", at="C=64")
    names = {d.name for d in REGISTRY.values()}
    for text in texts.values():
        assert "[[p.p.client_nodes_lagging]]" in text
        assert {m.group(1).rsplit(".", 1)[-1] for m in PLACEHOLDER.finditer(text)} <= names


# HAND-BUILT: five client nodes of one worker each and the driver, 0.5 s samples at 1 ms; node
# "b" has one sample of 60 ms. Its own p99 (over its 20 samples) is past the rule; the merged
# p99 (over 120 samples) and b's median are not: only the check per node sees b's tail.
TAIL_NODES = ("a", "b", "c", "d", "e")
TAIL_SHARDS = [{"point": "p", "worker": k, "node": n, "status": "ok", "planned": 8, "sent": 8}
               for k, n in enumerate(TAIL_NODES)]
ITL_P99_MS = 10.0


def tail_samples() -> list[dict]:
    rows = samples(dict.fromkeys(TAIL_NODES, 1.0), driver_lag_ms=1.0)
    spike = next(r for r in rows if r.get("node") == "b" and r["t"] > 5.0)
    spike["loop_lag_s"] = 60e-3
    return rows


def test_hand_built_fixture_one_nodes_tail_is_named_where_the_merged_p99_hides_it():
    from report.derive.timing.client import client_lag_ms_p99
    rows = tail_samples()
    bar = CN.lag_limit_ms(V.LAG_MIN_MS, V.LAG_SHARE_OF_ITL, ITL_P99_MS)
    assert client_lag_ms_p99(rows, *WINDOW) <= bar < CN.node_client_lag_ms_p99(rows, WINDOW, "b")
    args = (TAIL_SHARDS, rows, WINDOW, V.LAG_MIN_MS, V.LAG_SHARE_OF_ITL)
    assert CN.client_nodes_tail_lagging(*args, ITL_P99_MS) == "b"
    assert CN.client_nodes_lagging(*args, ITL_P99_MS) == ""       # its median kept up
    # No tail past the rule: no node; samples naming no node: unknown; one host: does not apply.
    calm = samples(dict.fromkeys(TAIL_NODES, 1.0))
    assert CN.client_nodes_tail_lagging(TAIL_SHARDS, calm, WINDOW, V.LAG_MIN_MS, V.LAG_SHARE_OF_ITL,
                                        ITL_P99_MS) == ""
    old = [{k: v for k, v in r.items() if k not in ("worker", "node")} for r in rows]
    with pytest.raises(Absent):
        CN.client_nodes_tail_lagging(TAIL_SHARDS, old, WINDOW, V.LAG_MIN_MS, V.LAG_SHARE_OF_ITL)
    assert CN.client_nodes_tail_lagging([], rows, WINDOW, V.LAG_MIN_MS, V.LAG_SHARE_OF_ITL) is DOES_NOT_APPLY


def _tail_ledger(rows: list[dict]):
    """HAND-BUILT ledger of the point from the registered functions over ROWS."""
    from report.derive.timing.client import client_lag_ms_p99
    from report.ledger import Ledger
    led = Ledger()
    led.record("r.rule_lag_min_ms", V.LAG_MIN_MS, unit="ms", doc="hand-built")
    led.record("r.rule_lag_share_of_itl", V.LAG_SHARE_OF_ITL, unit="fraction", doc="hand-built")
    led.record("p.p.itl_ms_p99", ITL_P99_MS, unit="ms", doc="hand-built")
    led.record("p.p.client_lag_ms_p99", client_lag_ms_p99(rows, *WINDOW), unit="ms", doc="hand-built")
    led.record("p.p.client_nodes_tail_lagging",
               CN.client_nodes_tail_lagging(TAIL_SHARDS, rows, WINDOW, V.LAG_MIN_MS, V.LAG_SHARE_OF_ITL,
                                            ITL_P99_MS), doc="hand-built")
    return led


def test_hand_built_the_suspect_finding_names_the_node_whose_tail_lagged_in_both_languages():
    from report.judge.findings.points import caveat_findings, client_suspect_finding
    from report.registry import REGISTRY
    from report.words import PLACEHOLDER
    led = _tail_ledger(tail_samples())
    f = client_suspect_finding(led, ["p"], {"p": "C=8"})
    assert f is not None
    names = {d.name for d in REGISTRY.values()}
    for text in f.texts.values():
        assert "[[p.p.client_nodes_tail_lagging]]" in text and "C=8" in text
        assert {m.group(1).rsplit(".", 1)[-1] for m in PLACEHOLDER.finditer(text)} <= names
    assert led.value_of("p.p.client_nodes_tail_lagging") == "b"
    assert caveat_findings(led, {}, ["p"], {"p": "C=8"})[1] is not None
    # Every node's tail within the rule and the merged one too: no suspect.
    assert client_suspect_finding(_tail_ledger(samples(dict.fromkeys(TAIL_NODES, 1.0))), ["p"]) is None


def test_hand_built_two_workers_on_a_node_make_one_nodes_lag():
    # workers_per_node = 2: workers 0 and 1 on node "a" (1 ms and 9 ms), worker 2 on "b".
    rows = [{"t": 0.25 + 0.5 * i, "loop_lag_s": lag / 1e3, "tasks": 4, "worker": k, "node": node}
            for i in range(20) for k, node, lag in ((0, "a", 1.0), (1, "a", 9.0), (2, "b", 1.0))]
    shards = [{"point": "p", "worker": k, "node": n, "status": "ok", "planned": 4, "sent": 4}
              for k, n in ((0, "a"), (1, "a"), (2, "b"))]
    assert CN.node_items(shards) == {"n0": {"node": "a"}, "n1": {"node": "b"}}
    assert CN.node_client_lag_ms_p50(rows, WINDOW, "a") == pytest.approx(5.0)
    assert CN.node_client_lag_ms_p99(rows, WINDOW, "a") == pytest.approx(9.0)
    assert CN.node_client_lag_ms_p50(rows, WINDOW, "b") == pytest.approx(1.0)
