"""A Ray round's page: it states the largest clock-offset bound and the timestamp error it adds
to, and keeps each client node's delivered load apart (the committed two-node fixture)."""

from __future__ import annotations

from dataclasses import replace

import pytest

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
    labels = [lab["en"] for lab in t.row_labels]
    assert all("node 0 (5f9318a0)" in lab or "node 1 (c0fc75d7)" in lab for lab in labels)
    sent = [row[1] for row in t.rows]
    assert all(key is None or key.endswith(".node_sent_requests") for key in sent)
    # The killed worker's node at the first point delivered nothing the bundle holds: absent, named.
    first = f"p.{pids[0]}.n1.node_sent_requests"
    assert first in report.ledger and not report.ledger[first].present


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_client_section_states_the_clock_bound_the_timestamp_error_and_the_nodes(report, lang):
    html = Page(replace(report, sections=["client"]), lang).assemble("html")
    assert "r.clock_uncertainty_max_ms" in html
    assert "timestamp_error_ms" in html
    assert 'id="tab-node_table"' in html


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_node_table_fits_the_printed_page(report, tmp_path, lang):
    tdir = templates_with(tmp_path / lang, "_t", '{{ table("node_table") }}')
    html = Page(replace(report, sections=["_t"]), lang, tdir).assemble("pdf")
    assert tables_past_the_margin(html) == []
