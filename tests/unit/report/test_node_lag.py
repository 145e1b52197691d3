"""A Ray round's client lag judged per node: the one node whose own loop lagged is named.

HAND-BUILT fixture: shard records and client.jsonl samples in the shape bench/ray_cluster.py
writes them (each worker's samples naming its worker and node), two nodes of one worker
each; node "b" lags 40 ms at the median, node "a" 1 ms; the driver's own samples name no node.
"""

from __future__ import annotations

import pytest

from report.derive import clienterror as CE
from report.derive import validity as V
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
    return CE.client_nodes_lagging(SHARDS, rows, WINDOW, V.LAG_MIN_MS, V.LAG_SHARE_OF_ITL, itl_ms)


def test_hand_built_fixture_names_the_one_node_that_lagged():
    rows = samples({"a": 1.0, "b": 40.0})
    assert lagging(rows) == "b"
    assert CE.node_client_lag_ms_p50(rows, WINDOW, "b") == pytest.approx(40.0)
    assert CE.node_client_lag_ms_p50(rows, WINDOW, "a") == pytest.approx(1.0)
    # The bar is the engine's pace where that is higher: 40 ms is not late against a 100 ms ITL.
    assert lagging(rows, itl_ms=100.0) == ""
    assert lagging(samples({"a": 1.0, "b": 2.0})) == ""


def test_hand_built_fixture_per_node_delivered_load():
    assert CE.node_items(SHARDS) == {"n0": {"node": "a"}, "n1": {"node": "b"}}
    assert CE.node_sent_requests(SHARDS, "b") == 38
    assert CE.node_sent_share(38, CE.node_planned_requests(SHARDS, "b")) == pytest.approx(0.95)
    dead = [SHARDS[0], {**SHARDS[1], "status": "died", "sent": None}]
    with pytest.raises(Absent):
        CE.node_sent_requests(dead, "b")


def test_samples_without_a_node_leave_the_lag_per_node_unknown_and_one_host_has_none():
    old = [{k: v for k, v in s.items() if k not in ("worker", "node")} for s in samples({"a": 1.0, "b": 40.0})]
    with pytest.raises(Absent):
        lagging(old)
    with pytest.raises(Absent):
        CE.node_client_lag_ms_p50(old, WINDOW, "a")
    assert CE.client_nodes_lagging([], old, WINDOW, V.LAG_MIN_MS, V.LAG_SHARE_OF_ITL) is DOES_NOT_APPLY


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
