"""The Ray path's pieces that need no cluster: the clock offset, each worker's stride of a
point's indices and schedule, and the [client] Ray keys refused before anything starts."""

from __future__ import annotations

import argparse
import socket
import time
from types import SimpleNamespace

import pytest

from bench import cli
from bench.clock_sync import ClockError, ClockServer, measure_offset
from bench.plan.parse import plan_from_dict
from bench.prompts import PlanError
from bench.ray_shard import StrideSlots, planned_requests
from bench.worker_loop import RUN, STOP
from bench.workers import point_commands, share_count

RUNNING = SimpleNamespace(stop=SimpleNamespace(value=RUN))


def test_the_offset_puts_this_clock_on_the_drivers_within_its_uncertainty():
    skew = 1234.5                       # the "driver" clock reads monotonic() - skew
    server = ClockServer(lambda: time.monotonic() - skew)
    try:
        off = measure_offset(server.address, probes=8)
    finally:
        server.close()
    # t0 is this host's monotonic reading at the driver's t = 0: here, skew itself.
    assert abs(off.t0 - skew) <= off.uncertainty_s + 1e-6
    assert off.probes == 8 and 0 < off.uncertainty_s == off.rtt_s / 2 < 0.05
    rec = off.as_record()
    assert rec["clock_offset_s"] == off.t0 and rec["clock_uncertainty_s"] == off.uncertainty_s


def test_no_clock_server_is_one_error_naming_the_address():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]       # bound, never answering
        with pytest.raises(ClockError, match=f"127.0.0.1:{port}"):
            measure_offset(("127.0.0.1", port), probes=2, timeout_s=0.05)


@pytest.mark.parametrize("total, n", [(23, 2), (7, 4), (3, 5), (100, 3)])
def test_worker_strides_send_every_index_once(total, n):
    sent = []
    for k in range(n):
        slots = StrideSlots(k, n, total, False, RUNNING)
        while (i := slots.next_index(0.0)) is not None:
            assert i % n == k
            sent.append(i)
    assert sorted(sent) == list(range(total))


def test_a_stride_stops_when_told_and_keeps_its_own_deadline():
    flags = SimpleNamespace(stop=SimpleNamespace(value=RUN))
    slots = StrideSlots(1, 2, 10**9, True, flags)
    assert slots.first_measured() and not slots.first_measured()
    slots.set_deadline(5.0)
    assert slots.next_index(4.0) == 1 and slots.next_index(4.5) == 3
    assert slots.next_index(5.0) is None
    assert not slots.stopped()
    flags.stop.value = STOP
    assert slots.stopped()


def plan(sweep: dict) -> object:
    return plan_from_dict({"workload": {"input_len": 16, "output_len": 8}, "sweep": sweep,
                           "client": {"ray": "127.0.0.1:6379", "nodes": 2}})


def test_closed_loop_shares_split_streams_and_plan_the_stride():
    p = plan({"concurrency": [5], "requests_per_point": 20})
    point = p.points()[0]
    n = share_count(p, point, 4)
    cmds = point_commands(p, point, 0, n, ["http://127.0.0.1:1"], "m", 10.0, 0.0)
    assert n == 4 and [len(c["share"]["starts"]) for c in cmds] == [2, 1, 1, 1]
    assert all(t >= 10.0 for c in cmds for t in c["share"]["starts"])   # one shared start
    total = cmds[0]["total"]
    assert total == 25
    assert sum(planned_requests(k, {**c, "stride": n}) for k, c in enumerate(cmds)) == total


def test_open_loop_shares_interleave_one_schedule_on_the_drivers_clock():
    p = plan({"request_rate": [50.0], "requests_per_point": 30, "arrival": "poisson"})
    point = p.points()[0]
    n = share_count(p, point, 3)
    cmds = point_commands(p, point, 0, n, ["http://127.0.0.1:1"], "m", 10.0, 0.0)
    arrivals = sorted(a for c in cmds for a in c["share"]["arrivals"])
    assert [i for i, _ in arrivals] == list(range(cmds[0]["total"]))
    assert all(i % n == k for k, c in enumerate(cmds) for i, _ in c["share"]["arrivals"])
    assert min(t for _, t in arrivals) >= 10.0
    assert [planned_requests(k, c) for k, c in enumerate(cmds)] == \
        [len(c["share"]["arrivals"]) for c in cmds]


@pytest.mark.parametrize("client, needle", [
    ({"nodes": 2}, r"\[client\].nodes: needs \[client\].ray"),
    ({"workers_per_node": 2}, r"\[client\].workers_per_node: needs \[client\].ray"),
    ({"ray": "localhost"}, r"\[client\].ray: 'localhost' is not"),
    ({"ray": "auto", "workers": 2}, r"\[client\].workers: with \[client\].ray"),
    ({"ray": "auto", "nodes": -1}, r"\[client\].nodes: -1 is out of range"),
    ({"ray": "auto", "workers_per_node": 0}, r"\[client\].workers_per_node: 0 is out of range"),
])
def test_ray_keys_no_run_could_honour_are_refused(client, needle):
    with pytest.raises(PlanError, match=needle):
        plan_from_dict({"client": client})


def test_ray_addresses_a_plan_may_name():
    for address in ("auto", "127.0.0.1:6379", "ray://head.svc:10001"):
        assert plan_from_dict({"client": {"ray": address}}).client.ray == address


def test_ray_flag_without_ray_installed_says_how_in_one_line(monkeypatch, capsys, tmp_path):
    import bench.ray_cluster
    monkeypatch.setattr(bench.ray_cluster, "ray_installed", lambda: False)
    parser = argparse.ArgumentParser()
    cli.add_run_arguments(parser)
    args = parser.parse_args(["--ray", "auto", "--endpoint", "http://127.0.0.1:9",
                              "--out", str(tmp_path / "b")])
    assert cli.run(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'serving-ledger[ray]'" in err
    assert err.startswith("error: --ray: ")
    assert not (tmp_path / "b").exists()


def test_a_ray_address_where_nothing_answers_is_refused_before_a_bundle_exists(capsys, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]          # bound, not listening: refused
        parser = argparse.ArgumentParser()
        cli.add_run_arguments(parser)
        args = parser.parse_args(["--ray", f"127.0.0.1:{port}", "--endpoint", "http://127.0.0.1:9",
                                  "--out", str(tmp_path / "b")])
        assert cli.run(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"nothing answers at 127.0.0.1:{port}" in err
    assert not (tmp_path / "b").exists()
