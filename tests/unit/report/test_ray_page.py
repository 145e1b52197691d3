"""A Ray round's page: it states the largest clock-offset bound and the timestamp error it adds
to, and keeps each client node's delivered load and own loop lag apart (the committed two-node
fixture, whose client samples name their worker and node)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bundle.store.reader import read_bundle
from report.derive.stats.samples import percentile
from report.publish import numbers as N
from report.publish.compose import compose_rounds
from report.publish.render.page import Page
from tests.conftest import FIXTURES
from tests.render_fixture import templates_with
from tests.unit.report.test_table_widths import tables_past_the_margin


@pytest.fixture(scope="module")
def report():
    (r,) = compose_rounds([(FIXTURES / "ray-two-nodes", "ray-two-nodes")])
    return r


def test_the_node_table_has_each_node_of_each_point_and_its_delivered_load(report):
    t = report.tables["node_table"]
    assert report.facts.node_table
    pids = list(report.facts.points)
    assert len(t.rows) == 2 * len(pids)
    led = report.ledger
    ids = {w["node"] for w in read_bundle(FIXTURES / "ray-two-nodes").manifest["ray"]["workers"]}
    labels = iter(lab["en"] for lab in t.row_labels)
    for pid in pids:
        for i in (0, 1):
            node = led.value_of(f"p.{pid}.n{i}.node_id")
            assert node in ids and f"node {i} ({node[:N.NODE_ID_SHOWN]})" in next(labels)
    sent = [row[1] for row in t.rows]
    assert all(key is None or key.endswith(".node_sent_requests") for key in sent)
    # The killed worker's node at the first point delivered nothing the bundle holds: absent, named.
    killed = killed_node(report)
    first = f"p.{pids[0]}.n{node_index(report, pids[0], killed)}.node_sent_requests"
    assert first in led and not led[first].present and killed in led[first].missing.text()


def killed_node(report) -> str:
    """The node whose worker died at the first point (its shard record)."""
    b = read_bundle(FIXTURES / "ray-two-nodes")
    (died,) = [s for s in b.shards if s["status"] == "died"]
    assert died["point"] == list(report.facts.points)[0]
    return died["node"]


def node_index(report, pid: str, node: str) -> int:
    return next(i for i in (0, 1) if report.ledger.value_of(f"p.{pid}.n{i}.node_id") == node)


def test_each_nodes_own_lag_is_in_the_ledger_from_its_own_samples_and_in_the_node_table(report):
    # Every point is long enough for each node's 0.5 s samples to land in its window.
    b = read_bundle(FIXTURES / "ray-two-nodes")
    ev = {(e["point"], e["event"]): e["t"] for e in b.points if e.get("point")}
    t = report.tables["node_table"]
    cells = {key for row in t.rows for key in row if key}
    for pid in report.facts.points:
        for i in (0, 1):
            node = report.ledger.value_of(f"p.{pid}.n{i}.node_id")
            mine = [1e3 * c["loop_lag_s"] for c in b.client if c.get("node") == node
                    and ev[(pid, "measure")] <= c["t"] <= ev[(pid, "end")]]
            assert mine, (pid, node)
            for q in (50, 99):
                key = f"p.{pid}.n{i}.node_client_lag_ms_p{q}"
                v = report.ledger[key]
                assert v.present and v.value == pytest.approx(percentile(mine, q))
                assert key in cells


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_client_section_states_the_clock_bound_the_timestamp_error_and_the_nodes(report, lang):
    html = Page(replace(report, sections=["client"]), lang).assemble("html")
    assert "r.clock_uncertainty_max_ms" in html
    assert "timestamp_error_ms" in html
    assert 'id="tab-node_table"' in html
    # Each node's own lag is a cell of the node table, its value shown.
    table = html[html.index('id="tab-node_table"'):]
    for pid in report.facts.points:
        for i in (0, 1):
            assert f'data-key="p.{pid}.n{i}.node_client_lag_ms_p50"' in table
            assert f'data-key="p.{pid}.n{i}.node_client_lag_ms_p99"' in table


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_node_table_fits_the_printed_page(report, tmp_path, lang):
    tdir = templates_with(tmp_path / lang, "_t", '{{ table("node_table") }}')
    html = Page(replace(report, sections=["_t"]), lang, tdir).assemble("pdf")
    assert tables_past_the_margin(html) == []
