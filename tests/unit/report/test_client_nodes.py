"""A Ray round's client nodes judged apart: the one that fell behind its part of a point is named.

HAND-BUILT shard records and request rows, as bench/ray_cluster.py writes them to shards.jsonl
and requests.jsonl (one record per worker and point; each request carries its worker).
"""

from __future__ import annotations

from report.derive.clienterror.nodes import client_nodes_behind
from report.registry import DOES_NOT_APPLY


def shard(worker: int, node: str, status: str = "ok", planned: int | None = 10, sent: int | None = 10) -> dict:
    return {"point": "p", "worker": worker, "node": node, "status": status, "planned": planned, "sent": sent}


def test_every_node_on_schedule_names_none_and_one_host_has_no_nodes():
    assert client_nodes_behind([shard(0, "a"), shard(1, "b")]) == ""
    assert client_nodes_behind([]) is DOES_NOT_APPLY


def test_a_dead_worker_and_a_short_one_name_their_nodes():
    shards = [shard(0, "a"), shard(1, "b", status="died", sent=None), shard(2, "c", sent=9), shard(3, "c", sent=10)]
    assert client_nodes_behind(shards) == "b (w1), c (w2)"


def test_a_worker_sending_late_in_an_open_loop_is_behind():
    # Worker 1 sent 3 of its 4 requests 200 ms after their time; worker 0 on time.
    rows = [{"worker": w, "t_sched": float(i), "t_send": float(i) + (0.2 if w == 1 and i < 3 else 0.001)}
            for w in (0, 1) for i in range(4)]
    assert client_nodes_behind([shard(0, "a", planned=None), shard(1, "b", planned=None)], rows) == "b (w1)"
