"""A client worker process's own loop lag: each sample names its worker, and under Ray its node,
and a clock sync during a sample (a Ray worker's shard put on the driver's clock) moves
neither the sample's lag nor its time off the clock it is written on."""

from __future__ import annotations

import asyncio
import concurrent.futures
from types import SimpleNamespace

import pytest

from bench.ray_cluster import RayPool
from bench.worker_loop import lag_monitor

INTERVAL_S = 0.05
JUMP_S = 5.0     # a node's clock to the driver's: seconds


class Shard:
    """A shard's clock (ShardWriter.now) whose t0 a test moves."""

    def __init__(self, t0: float):
        self.t0 = t0

    def now(self) -> float:
        import time
        return time.monotonic() - self.t0


def test_a_workers_lag_sample_names_it_and_a_clock_sync_mid_sample_moves_nothing():
    import time
    shard, got = Shard(time.monotonic()), []
    results = SimpleNamespace(put=got.append)

    async def run() -> float:
        stop = asyncio.Event()
        task = asyncio.create_task(lag_monitor(3, shard, results, stop, interval_s=INTERVAL_S))
        await asyncio.sleep(INTERVAL_S / 2)
        shard.t0 -= JUMP_S            # the first sync, halfway through the first sample
        synced = shard.now()
        await asyncio.sleep(INTERVAL_S * 2.5)
        stop.set()
        await task
        return synced

    synced = asyncio.run(run())
    assert len(got) >= 2 and all(kind == "lag" and k == 3 for kind, k, _ in got)
    first = got[0][2]
    assert first["worker"] == 3
    # Its lag is the loop's, not the jump; its time is on the synced clock, before the sync.
    assert 0 <= first["loop_lag_s"] < JUMP_S / 10
    assert synced - INTERVAL_S - first["loop_lag_s"] - 0.01 <= first["t"] <= synced


def test_each_ray_workers_samples_name_its_worker_and_node_two_workers_on_a_node(tmp_path):
    appended = []
    writer = SimpleNamespace(now=lambda: 9.0, path=tmp_path, t0=0.0, manifest={},
                             append=lambda stream, rec: appended.append((stream, rec)))
    pool = RayPool.__new__(RayPool)
    pool.writer, pool.shards = writer, {}
    pool.workers = [{"worker": k, "node": node, "hostname": "h", "pid": 100 + k}
                    for k, node in enumerate(("a", "a", "b"))]      # two workers per node "a"
    state = dict.fromkeys(("done", "tokens", "errors", "issued"), 0)
    for k in range(3):
        fut = concurrent.futures.Future()
        fut.set_result({"error": None, "lines": [], "measure": None, "planned": 0,
                        "transport_error": None,
                        "counts": dict.fromkeys(("done", "tokens", "errors", "issued"), 0),
                        "lags": [{"t": 1.0 + k, "loop_lag_s": 1e-3, "tasks": 2, "worker": k}]})
        assert pool._record_shard("p", k, fut, None, state) == []
    lags = [rec for stream, rec in appended if stream == "client"]
    assert [(c["worker"], c["node"]) for c in lags] == [(0, "a"), (1, "a"), (2, "b")]
    shards = [rec for stream, rec in appended if stream == "shards"]
    assert [(s["worker"], s["node"], s["status"]) for s in shards] == \
        [(0, "a", "ok"), (1, "a", "ok"), (2, "b", "ok")]


@pytest.mark.parametrize("synced", [False, True])
def test_a_ray_workers_sample_before_its_first_clock_sync_is_dropped(synced):
    from bench.ray_shard import Inbox
    box = Inbox()
    box.synced = synced
    box.put(("lag", 0, {"t": 1.0, "loop_lag_s": 0.0, "worker": 0}))
    assert len(box.lags) == int(synced)
