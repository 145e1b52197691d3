"""The client's account of its own lag, end to end: rounds against the stand-in record read
counters, the ledger bounds the timing error, and the report says so in both languages."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.standin.thread import StandInThread
from bundle.store.reader import read_bundle
from report.derive.round.read import read_round
from report.judge.verdicts import build_ledger
from tests.conftest import ROOT, run_bench


def stand_in_round(tmp_path: Path, output_len: int, concurrency: int, requests: int,
                   extra: str = "") -> tuple:
    """A one-point round against the stand-in (10 ms step): its bundle, read-counter samples,
    ledger and point id."""
    plan = tmp_path / "plan.toml"
    plan.write_text(f"""
[workload]
input_len = 16
output_len = {output_len}
[sweep]
concurrency = [{concurrency}]
requests_per_point = {requests}
warmup_requests = 0
[sampler]
gpu = false
metrics_interval_s = 0.5
{extra}""")
    with StandInThread(step_ms=10.0) as url:
        run_bench("run", "--plan", str(plan), "--endpoint", url, "--out", str(tmp_path / "b"),
                  timeout=120)
    b = read_bundle(tmp_path / "b")
    rd = read_round(b)
    return b, [s for s in b.client if "reads" in s], build_ledger(rd), rd.points[0].pid


def html_pages(rep, site: Path) -> dict[str, str]:
    """REP rendered as HTML into SITE: page name -> text."""
    from report.publish.render.output import render_round
    site.mkdir(exist_ok=True)
    return {q.name: q.read_text() for q in render_round(rep, site, formats=("html",)).paths
            if q.suffix == ".html"}


def test_a_round_records_its_reads_and_the_ledger_bounds_its_timing_error(tmp_path: Path):
    b, rows, led, pid = stand_in_round(tmp_path, output_len=100, concurrency=8, requests=24)
    assert rows and sum(s["reads"] for s in rows) >= 24 * 100 / 4   # one read per few events at most
    assert b.manifest["tool"]["event_loop"].startswith(("uvloop", "asyncio"))
    share = led[f"p.{pid}.kernel_stamped_read_share"]
    bound = led[f"p.{pid}.client_timing_error_ms"]
    assert bound.present and bound.value >= 0
    if share.value == 0:
        pytest.skip("this kernel gives TCP sockets no receive timestamps")
    assert share.value == 1.0
    assert bound.value == led[f"p.{pid}.socket_wait_ms_p99"].value
    packet = led[f"p.{pid}.packet_stamped_read_share"]
    if not any("reads_packet_stamped" in s for s in rows):
        assert not packet.present and "no packet ring" in str(packet.missing)
        pytest.skip("no packet ring here (AF_PACKET not permitted)")
    # Every connection was opened after the ring started: every byte has its segment.
    assert packet.value == 1.0 and bound.value == 0.0
    assert sum(s["segments_dropped"] for s in rows) == 0
    # ... and the client section says so, in both languages.
    from report.publish.compose import compose_rounds
    pages = html_pages(compose_rounds([(tmp_path / "b", "x")])[0], tmp_path / "site")
    assert "every read was matched, byte for byte, to the TCP segments" in pages["index.en.html"]
    assert "每次读取都逐字节对应到抓包环" in pages["index.zh.html"]


def test_a_plan_can_turn_the_packet_ring_off(tmp_path: Path):
    _, rows, led, pid = stand_in_round(tmp_path, output_len=30, concurrency=4, requests=8,
                                       extra="[client]\npacket_stamps = false\n")
    assert sum(s["reads"] for s in rows) >= 8 * 30 / 4
    assert not any("reads_packet_stamped" in s for s in rows)
    assert "no packet ring" in str(led[f"p.{pid}.packet_stamped_read_share"].missing)


def test_points_the_client_distorted_are_listed_and_their_zero_gaps_explained(tmp_path: Path):
    # cpu-noraw-hog (tests/fixtures/corpus): a client without CAP_NET_RAW beside a CPU hog read
    # most events together; its ITL p50 per token is 0 while the engine's was about 2 ms.
    from report.publish.compose import compose_rounds
    bundle = ROOT / "tests" / "fixtures" / "corpus" / "cpu-noraw-hog" / "bundle"
    rep = compose_rounds([(bundle, "hog")])[0]
    listed = rep.facts.client_distorted_points
    assert listed == rep.facts.ok_points
    last = rep.facts.ok_points[-1]
    assert rep.ledger[f"p.{last}.zero_gap_share"].value > 0.5
    assert rep.ledger[f"p.{last}.itl_error_ms_p50"].value > rep.ledger[f"p.{last}.engine_itl_ms_mean"].value
    pages = html_pages(rep, tmp_path)
    en, zh = pages["index.en.html"], pages["index.zh.html"]
    assert "Points where the client distorted its timings" in en and "客户端扭曲了计时的点" in zh
    assert f"<code>{listed[0]}</code>" in en
    assert "ITL is not zero." in en and "ITL 并不是零。" in zh
    assert "they were read together" in en and "同次读到的" in zh
    # A client that read each event alone (cpu-noraw, its own core) lists none and says nothing.
    rep = compose_rounds([(ROOT / "tests" / "fixtures" / "corpus" / "cpu-noraw" / "bundle", "quiet")])[0]
    assert rep.facts.client_distorted_points == []
    assert "ITL is not zero." not in html_pages(rep, tmp_path / "quiet")["index.en.html"]
