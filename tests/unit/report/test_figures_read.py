"""The figures of the committed rounds 4 (a concurrency sweep) and 5 (a length sweep, compared
with round 4), read as a reviewer reads them: every series its own colour, no two legends that
read as one, the TFLOP/s trace under the peak of each point's clock, length axes that do not
crowd the short lengths, and no point that failed its checks drawn as if valid."""

from __future__ import annotations

import pytest

from report.ledger import Ledger
from report.publish.compose import compose_rounds
from report.publish.figures.chart import (
    FRAME,
    HOLLOW,
    LOG_LENGTH_SPAN,
    SMALL_STACK,
    TEXT,
    wide_span,
)
from report.publish.figures.sweep import fig_kv
from report.publish.numbers import format_number
from report.publish.render.vega import _walk  # every dict inside a spec (layers, facets, encodings)
from report.words import LANGS
from tests.conftest import ROOT

ROUNDS = ("round-4", "round-5")


@pytest.fixture(scope="module")
def reports():
    paths = [(ROOT / "runs" / r / "bundle", r) for r in ROUNDS]
    if not all((p / "manifest.json").exists() for p, _ in paths):
        pytest.skip("the recorded rounds 4 and 5 are not in runs/")
    return {r.round_id: r for r in compose_rounds(paths)}




def _colour_channels(spec) -> list[dict]:
    return [d["color"] for d in _walk(spec) if isinstance(d.get("color"), dict) and "field" in d["color"]]


def _legends(spec) -> list[dict]:
    """The legends of the colour and shape channels of SPEC: one per field and domain (layers
    that share a scale share its legend), none where a channel's legend is switched off."""
    out = {}
    for d in _walk(spec):
        for ch in ("color", "shape"):
            enc = d.get(ch)
            if isinstance(enc, dict) and "field" in enc and ("legend" not in enc or enc["legend"] is not None):
                legend = enc.get("legend") or {}
                dom = tuple((enc.get("scale") or {}).get("domain") or ())
                out[(ch, enc["field"], dom)] = dict(legend, title=legend.get("title", enc.get("title")))
    return list(out.values())


def _rows(spec, series: str) -> list[dict]:
    return [row for rows in spec.get("datasets", {}).values() for row in rows if row.get("series") == series]


@pytest.mark.parametrize("lang", LANGS)
def test_every_series_of_a_figure_has_its_own_colour(reports, lang):
    for rep in reports.values():
        for fid, fig in rep.figures.items():
            colour = {}
            for enc in _colour_channels(fig.specs[lang]):
                scale = enc.get("scale") or {}
                for name, c in zip(scale.get("domain") or [], scale.get("range") or []):
                    colour.setdefault(name, c)
            assert len(set(colour.values())) == len(colour), (rep.round_id, fid, colour)


@pytest.mark.parametrize("lang", LANGS)
def test_two_legends_of_a_figure_never_read_as_one(reports, lang):
    for rep in reports.values():
        for fid, fig in rep.figures.items():
            legends = _legends(fig.specs[lang])
            if len(legends) > 1:
                titles = [lg.get("title") for lg in legends]
                assert all(titles) and len(set(titles)) == len(titles), (rep.round_id, fid, titles)


def test_power_limit_and_temperature_are_three_colours_in_two_legends(reports):
    t = TEXT["en"]
    spec = reports["round-4"].figures["power"].specs["en"]
    colour = {n: c for enc in _colour_channels(spec)
              for n, c in zip(enc["scale"]["domain"], enc["scale"]["range"])}
    assert set(colour) == {t["power"], t["limit"], t["temp"]}
    assert len(set(colour.values())) == 3
    assert sorted(lg["title"] for lg in _legends(spec)) == sorted([t["left_axis"], t["right_axis"]])


def test_the_tflops_trace_has_the_peak_at_each_points_clock(reports):
    rep = reports["round-4"]
    fig, led = rep.figures["tflops_timeline"], rep.ledger
    capped = [k for k in fig.keys if k.endswith(".peak_tflops_at_clock")]
    assert capped and "r.peak_tflops" in fig.keys
    for lang in LANGS:
        rows = _rows(fig.specs[lang], TEXT[lang]["roof_capped"])
        # two ends of one segment per point, each at that point's ceiling: the datasheet's peak
        # scaled by the clock the point ran at over the clock the peak is stated at
        assert len(rows) == 2 * len(capped)
        for k in capped:
            pid = k.split(".")[1]
            ys = {r["y"] for r in rows if r["point"] == pid}
            clock = led.value_of(f"p.{pid}.sm_clock_load_mhz")
            assert ys == {led.value_of(k)}
            assert led.value_of(k) == pytest.approx(led.value_of("r.peak_tflops") * clock / led.value_of("r.peak_clock_mhz"))


def test_a_length_axis_is_log2_with_ticks_at_the_swept_lengths(reports):
    rep = reports["round-5"]
    lengths = sorted({rep.ledger.value_of(f"p.{p}.input_len") for p in rep.facts.ok_points})
    assert lengths[-1] > LOG_LENGTH_SPAN * lengths[0]
    for fid in ("kv_linearity", "itl_vs_len"):
        for d in _walk(rep.figures[fid].specs["en"]):
            x = d.get("x")
            if isinstance(x, dict) and x.get("field") == "x":
                assert x["scale"]["type"] == "log" and x["scale"]["base"] == 2, fid
                assert x["axis"]["values"] == lengths, fid


def test_wide_span_says_when_lengths_span_more_than_the_factor():
    assert wide_span([{"x": 256}, {"x": 8192}])
    assert not wide_span([{"x": 1024}, {"x": 2048}, {"x": 1024 * LOG_LENGTH_SPAN}])


def test_the_occupancy_figure_draws_only_valid_points_of_either_round(reports):
    prev, rep = reports["round-4"], reports["round-5"]
    fig = rep.figures["occupancy"]
    prev_valid = [p for p in prev.facts.valid_points
                  if prev.ledger.value_of(f"p.{p}.kv_occupancy") is not None]
    assert len(prev_valid) < len([p for p in prev.facts.ok_points
                                  if prev.ledger.value_of(f"p.{p}.kv_occupancy") is not None]), \
        "round 4 has points that failed their checks: the case this test is about"
    for lang in LANGS:
        spec = fig.specs[lang]
        rows = [row for rows in spec["datasets"].values() for row in rows]
        drawn = sorted(r["x"] for r in rows if r["series"] == TEXT[lang]["prev_round"])
        assert drawn == sorted(prev.ledger.value_of(f"p.{p}.kv_occupancy") * 100 for p in prev_valid)
        assert spec["title"]["text"] == TEXT[lang]["invalid_left_out"]


def _encodings(spec) -> list[dict]:
    return [d["encoding"] for d in _walk(spec) if isinstance(d.get("encoding"), dict)]


@pytest.mark.parametrize("fid", ["ttft_breakdown", "iteration"])
def test_stacked_bars_draw_a_point_that_failed_its_checks_hollow_and_say_so_in_the_legend(reports, fid):
    rep = reports["round-4"]
    invalid = [p for p in rep.facts.ok_points if p not in rep.facts.valid_points]
    assert invalid, "round 4's C=256 and C=512 failed their checks: the case this test is about"
    for lang in LANGS:
        t, spec = TEXT[lang], rep.figures[fid].specs[lang]
        rows = [row for rows in spec["datasets"].values() for row in rows if "checks" in row]
        drawn = {r["point"]: r["checks"] for r in rows}
        # every point is drawn, not only the valid ones, each with its checks in words
        assert set(invalid) <= set(drawn) <= set(rep.facts.ok_points)
        assert all(drawn[p] == (t["no"] if p in invalid else t["yes"]) for p in drawn)
        # a failed point's fill is all but transparent while its outline keeps the part's colour
        bars = [e for e in _encodings(spec) if "fillOpacity" in e]
        assert bars and all(e["stroke"]["field"] == e["color"]["field"] == "series" for e in bars)
        for e in bars:
            cond = e["fillOpacity"]["condition"]
            assert t["no"] in cond["test"] and cond["value"] == HOLLOW and e["fillOpacity"]["value"] == 1.0
        # the legend has a filled and a hollow square, titled, beside the parts' legend
        shapes = [e["shape"] for e in _encodings(spec) if "shape" in e]
        assert shapes and all(s["scale"] == {"domain": [t["yes"], t["no"]], "range": ["square", FRAME]}
                              and s["legend"]["title"] == t["valid"] for s in shapes)
        assert "title" not in spec      # no note above the chart in place of the legend


def test_the_ttft_bars_give_each_points_shares_so_the_small_loads_read(reports):
    rep = reports["round-4"]
    led = rep.ledger
    for lang in LANGS:
        spec = rep.figures["ttft_breakdown"].specs[lang]
        panels = spec["vconcat"]
        stacks = [e["y"].get("stack") for e in _encodings(spec) if "fillOpacity" in e]
        # round 4's C=1 to C=64 (27.6 to 143 ms) are under a twentieth of C=512's 5,068 ms: they
        # stand in the ms panel of their own, on their own scale, beside C=128 to C=512
        assert stacks == ["zero", "zero", "normalize"] and len(panels) == 2
        ttft = {p: led.value_of(f"p.{p}.ttft_ms_mean_population") for p in rep.facts.ok_points}
        small = {p for p, y in ttft.items() if y < SMALL_STACK * max(ttft.values())}
        halves = [{r["point"] for r in spec["datasets"][half["layer"][0]["data"]["name"]]}
                  for half in panels[0]["hconcat"]]
        assert halves == [small, set(ttft) - small] and len(small) == 7
        assert panels[0]["resolve"]["scale"]["y"] == "independent"
        # the top of each stack in ms is the point's mean TTFT, printed above it
        labels = sorted(r["label"] for rows in spec["datasets"].values() for r in rows if "label" in r)
        assert labels == sorted(format_number(led.value_of(f"p.{p}.ttft_ms_mean_population"))
                                for p in rep.facts.ok_points
                                if led.value_of(f"p.{p}.queue_ms_mean") is not None)


def _y_scales(spec) -> list[dict]:
    return [e["y"]["scale"] for e in _encodings(spec) if isinstance(e.get("y"), dict) and "scale" in e["y"]]


def _texts(spec) -> list[str]:
    return [r["label"] for rows in spec.get("datasets", {}).values() for r in rows if "label" in r]


@pytest.mark.parametrize("rid", ROUNDS)
def test_the_kv_axis_is_sized_to_shares_far_below_the_pool(reports, rid):
    rep = reports[rid]
    led = rep.ledger
    shares = [100 * v for p in rep.facts.ok_points for q in ("kv_usage_p50", "kv_usage_peak", "kv_expected_peak",
                                                            "kv_expected_median")
              if (v := led.value_of(f"p.{p}.{q}")) is not None]
    assert 0 < min(shares) and max(shares) < 100 and max(shares) > LOG_LENGTH_SPAN * min(shares)
    for lang in LANGS:
        spec = rep.figures["kv"].specs[lang]
        scale = _y_scales(spec)[0]
        # not from zero, not up to the pool: from the smallest share to the largest, on a log axis
        assert scale["type"] == "log" and scale["domain"] == pytest.approx([min(shares) / 1.25, max(shares) * 1.25])
        assert scale["domain"][1] < 100
        assert TEXT[lang]["pool_full_above"] in _texts(spec) and TEXT[lang]["pool_full"] not in _texts(spec)


def _kv_ledger(shares: dict[int, float]) -> Ledger:
    """HAND-BUILT: each point's concurrency and its four KV shares (all four the same)."""
    led = Ledger()
    for c, share in shares.items():
        led.record(f"p.c{c}.concurrency", c, doc="hand-built")
        for q in ("kv_usage_p50", "kv_usage_peak", "kv_expected_peak", "kv_expected_median"):
            led.record(f"p.c{c}.{q}", share, unit="fraction", doc="hand-built")
    return led


@pytest.mark.parametrize("shares, log, line", [
    ({1: 0.02, 4: 0.3, 16: 1.2}, True, True),      # a demand past the pool: the pool's line is drawn
    ({1: 0.0, 4: 0.3, 16: 0.9}, False, True),      # a share of zero: linear, which can show it
    ({1: 0.3, 4: 0.5, 16: 0.85}, False, True),     # shares within the factor: linear, near the pool
    ({1: 0.3, 4: 0.5, 16: 0.6}, False, False),     # linear, the pool above the data: said in words
])
def test_the_pools_full_line_is_drawn_only_where_the_axis_reaches_it(shares, log, line):
    fig = fig_kv(_kv_ledger(shares), [f"c{c}" for c in shares], "concurrency")
    for lang in LANGS:
        spec = fig.specs[lang]
        scale = _y_scales(spec)[0]
        assert (scale.get("type") == "log") is log
        rules = [r for rows in spec["datasets"].values() for r in rows if r.get("label") == TEXT[lang]["pool_full"]]
        assert bool(rules) is line and all(r["y"] == 100.0 for r in rules)
        assert (TEXT[lang]["pool_full_above"] in _texts(spec)) is (not line)


def test_the_roofline_names_every_point_and_alternates_its_labels(reports):
    rep = reports["round-4"]
    for lang in LANGS:
        spec = rep.figures["roofline"].specs[lang]
        texts = [d for d in _walk(spec) if isinstance(d.get("mark"), dict) and d["mark"].get("type") == "text"
                 and d["mark"].get("dx") == 6]
        named = {r["point"]: (t["mark"]["dy"], t["mark"]["color"]) for t in texts
                 for r in spec["datasets"][t["data"]["name"]]}
        # C=256 and C=512 failed their checks: named in grey beside their crosses, not left blank
        assert {"C=256", "C=512", "C=128"} <= set(named)
        assert named["C=256"][1] == named["C=512"][1] != named["C=128"][1]
        # neighbours print on opposite sides of their marks
        assert named["C=128"][0] != named["C=256"][0] and named["C=256"][0] != named["C=512"][0]
